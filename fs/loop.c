/*
 * loop.c — the request loop: worker threads that move each request from
 * /dev/fuse into a pipe with splice(2) and hand it to libfuse.
 *
 * Why our own loop: libfuse's splice path wants a pipe larger than 1 MiB,
 * which needs CAP_SYS_RESOURCE or a raised fs.pipe-max-size; without it it
 * silently falls back to reading every request into a buffer, and the data
 * of each write is then copied twice (kernel to buffer, buffer to cache).
 * Here every thread owns a pipe sized for the largest write request the
 * kernel may send: one slot for the header plus one per data page.  The
 * kernel caps a request at fs.fuse.max_pages_limit pages (256 by default;
 * an administrator may raise it to 1024), so the pipe gets the next power
 * of two above limit + 2 slots where this process may size pipes that
 * large (root has CAP_SYS_RESOURCE; others are held to fs.pipe-max-size,
 * 1 MiB by default), and max_write is what fits: a 1 MiB write(2) is then
 * one request, not two.  Without that, the pipe is 1 MiB (256 slots) and
 * max_write 254 pages, so a request always fits however its offset is
 * aligned.  splice() moves the request's page references into the pipe
 * without copying; fuse_session_process_buf() reads the header from the
 * pipe, and write_buf (ops.c) reads the data straight into cache chunks:
 * one copy.
 *
 * Threads: `max_threads` workers reading the same fd (the kernel hands
 * each request to one of them), but at most READERS of them wait in
 * splice() at a time; the rest are parked.  The kernel wakes the longest
 * waiting reader first, so with every worker waiting, consecutive requests
 * of one writer would go round all of them, each cold (8 KiB writes 1.3x
 * and small files 3.9x slower than with two threads).  A worker is
 * unparked when no reader is left and: a request was just taken while
 * fewer handlers than CPUs run (many ranks writing at once, on a node with
 * the CPUs to copy their data in parallel); a handler is about to wait
 * (for cache space, wait.c); or no request was read for a whole tick of
 * fs_serve (a handler blocked elsewhere: a backend call that hangs).  A
 * blocked handler occupies one worker; the others go on.  With splice=off
 * (or no 1 MiB pipe) libfuse's multi-threaded loop serves instead, run in a thread
 * of its own so that stopping it is bounded the same way.
 *
 * Transport: with the splice loop, replies go through devio.c, which may
 * take requests over io_uring instead (uring.c) if the kernel offers it at
 * INIT; the splice workers serve /dev/fuse either way (INIT, FORGET,
 * INTERRUPT, and everything when io_uring is not in use).  The ring
 * threads are stopped after the workers, before the unmount.
 *
 * Stopping (fs_serve): the loop ends when the session exits — on unmount
 * splice() fails with ENODEV in every worker; on SIGTERM/SIGINT libfuse's
 * handler, which runs in the main thread (the others block those signals),
 * marks the session exited.  The main thread then
 *   1. tells every blocked wait to give up (fs_waits_stop: a writer waiting
 *      for cache space gets ESHUTDOWN, wait.c) and answers the reads of
 *      file data still in the backend (ESHUTDOWN, bcall_watch_stop);
 *   2. wakes threads blocked in splice() (our workers) or sem_wait()
 *      (libfuse's loop thread) with WAKE_SIGNAL, until all have left their
 *      loop or STOP_BOUND_NS has passed;
 *   3. joins those that left, answers the fsyncs and drain reads still
 *      waiting for the backend (ESHUTDOWN), and unmounts.  A worker still inside a
 *      handler after the bound (a backend system call that does not
 *      return) is left behind and counted, so main.c can still drain or
 *      rescue and exit without freeing what that worker uses.
 */
#include "fs/bcall.h"
#include "fs/fs.h"
#include "cache/log.h"

#include <linux/fuse.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define PAGE 4096u
#define PIPE_MIN (1u << 20)	/* every Linux lets an unprivileged process size this */

/* Chosen once by fs_splice_loop_possible(), before any worker starts. */
static size_t pipe_bytes = PIPE_MIN;
static unsigned max_write_pages = 254;
/* Requests read from /dev/fuse (stats: fuse_requests, with uring.c's). */
static atomic_uint_least64_t requests;
static atomic_bool init_seen;

/* How long stopping waits for workers to leave their handlers. */
#define STOP_BOUND_NS (5ull * 1000000000)

struct worker {
	struct fuse_session *se;
	struct fuse_loop_config *lcfg;	/* libfuse's loop only */
	int pipe[2];
	pthread_t th;
	atomic_bool done;
};

#define WAKE_SIGNAL SIGUSR1

/*
 * The reader set: how many workers wait in splice() now, and how many are
 * parked.  READERS: enough that a reader finishing its request usually
 * finds another one already waiting, few enough that they stay warm.
 */
#define READERS 2
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned waiting, parked, busy;	/* busy: workers between a request and its end */
	unsigned cpus;
	bool stop;
} rd = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 2, false };

/*
 * Become a reader, or park until one is wanted; false once the loop stops.
 * handled: this worker comes back from handling a request.
 */
static bool reader_enter(bool handled)
{
	pthread_mutex_lock(&rd.lock);
	rd.busy -= handled;
	while (rd.waiting >= READERS && !rd.stop) {
		rd.parked++;
		pthread_cond_wait(&rd.cond, &rd.lock);
		rd.parked--;
	}
	rd.waiting++;
	bool go = !rd.stop;
	pthread_mutex_unlock(&rd.lock);
	return go;
}

/* Leave the readers: got (a request came, to be handled), or splice failed. */
static void reader_leave(bool got)
{
	pthread_mutex_lock(&rd.lock);
	rd.waiting--;
	rd.busy += got;
	bool unpark = got && !rd.waiting && rd.parked && rd.busy < rd.cpus;
	pthread_mutex_unlock(&rd.lock);
	if (unpark)
		pthread_cond_signal(&rd.cond);
}

/* Unpark a worker if no reader is left; true if one was. */
static bool reader_wanted(void)
{
	pthread_mutex_lock(&rd.lock);
	bool unpark = !rd.waiting && rd.parked;
	pthread_mutex_unlock(&rd.lock);
	if (unpark)
		pthread_cond_signal(&rd.cond);
	return unpark;
}

void fs_loop_blocking(void)
{
	reader_wanted();
}

/* Every parked worker leaves its loop (the session ended). */
static void readers_stop(void)
{
	pthread_mutex_lock(&rd.lock);
	rd.stop = true;
	pthread_mutex_unlock(&rd.lock);
	pthread_cond_broadcast(&rd.cond);
}

/* Interrupts splice() or sem_wait() (no SA_RESTART) so the thread sees the session exit. */
static void on_wake(int sig) { (void)sig; }

/* Throw away whatever a handler left in the pipe (it must start empty). */
static void pipe_drain(int fd)
{
	char sink[65536];
	int left = 0;

	while (ioctl(fd, FIONREAD, &left) == 0 && left > 0)
		if (read(fd, sink, CKPT_MIN((size_t)left, sizeof(sink))) <= 0)
			break;
}

/* Hand the request of n bytes now in w's pipe to libfuse. */
static void request_handle(struct worker *w, size_t n)
{
	atomic_fetch_add_explicit(&requests, 1, memory_order_relaxed);
	if (!atomic_load(&init_seen)) {
		/* The first request is INIT: show it to devio.c before libfuse. */
		char *m = xmalloc(n);
		if (read_full(w->pipe[0], m, n) == 0) {
			const struct fuse_in_header *ih = (const void *)m;
			devio_note_init(m, n);
			struct fuse_buf mb = { .size = n, .mem = m };
			fuse_session_process_buf(w->se, &mb);
			if (ih->opcode == FUSE_INIT)
				atomic_store(&init_seen, true);
		}
		free(m);
	} else {
		struct fuse_buf buf = { .size = n, .flags = FUSE_BUF_IS_FD, .fd = w->pipe[0] };
		fuse_session_process_buf(w->se, &buf);
	}
	pipe_drain(w->pipe[0]);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	int fd = fuse_session_fd(w->se);

	pthread_setname_np(pthread_self(), "ckptfs-fuse");
	for (bool handled = false; !fuse_session_exited(w->se);) {
		if (!reader_enter(handled)) {
			reader_leave(false);
			break;
		}
		ssize_t n = splice(fd, NULL, w->pipe[1], NULL, pipe_bytes + PAGE, 0);
		int err = n < 0 ? errno : 0;
		reader_leave(n > 0);
		if ((handled = n > 0)) {
			request_handle(w, (size_t)n);
			continue;
		}
		if (err == EINTR || err == EAGAIN || err == ENOENT)
			continue;	/* ENOENT: the request was interrupted */
		if (n < 0 && err != ENODEV)
			log_err("reading /dev/fuse: %s", strerror(err));
		fuse_session_exit(w->se);	/* ENODEV or end of file: unmounted */
		break;
	}
	atomic_store(&w->done, true);
	return NULL;
}

/* The kernel's cap on pages per request (fs.fuse.max_pages_limit), 256 if unknown. */
unsigned fs_kernel_max_pages(void)
{
	unsigned v = 256;
	FILE *f = fopen("/proc/sys/fs/fuse/max_pages_limit", "re");

	if (f) {
		if (fscanf(f, "%u", &v) != 1 || v < 32)
			v = 256;
		fclose(f);
	}
	return CKPT_MIN(v, 65535u);
}

/* Can a pipe of `bytes` be made here? */
static bool pipe_can_hold(size_t bytes)
{
	int p[2];
	bool ok;

	if (pipe2(p, O_CLOEXEC) < 0)
		return false;
	ok = fcntl(p[0], F_SETPIPE_SZ, (int)bytes) >= (int)bytes;
	close(p[0]);
	close(p[1]);
	return ok;
}

bool fs_splice_loop_possible(void)
{
	unsigned limit = fs_kernel_max_pages();
	size_t want = PAGE;

	while (want < (size_t)(limit + 2) * PAGE)
		want <<= 1;
	for (; want > PIPE_MIN; want >>= 1)
		if (pipe_can_hold(want)) {
			pipe_bytes = want;
			max_write_pages = CKPT_MIN(limit, (unsigned)(want / PAGE) - 2);
			return true;
		}
	pipe_bytes = PIPE_MIN;
	max_write_pages = CKPT_MIN(limit, (unsigned)(PIPE_MIN / PAGE) - 2);
	return pipe_can_hold(PIPE_MIN);
}

uint64_t fs_loop_requests(void)
{
	return atomic_load(&requests);
}

unsigned fs_splice_max_write(void)
{
	return max_write_pages * PAGE;
}

/* libfuse's multi-threaded loop, in a thread of its own (splice=off). */
static void *mt_main(void *arg)
{
	struct worker *w = arg;

	fuse_session_loop_mt(w->se, w->lcfg);
	atomic_store(&w->done, true);
	return NULL;
}

static void worker_free(struct worker *w)
{
	if (w->pipe[0] >= 0)
		close(w->pipe[0]);
	if (w->pipe[1] >= 0)
		close(w->pipe[1]);
	if (w->lcfg)
		fuse_loop_cfg_destroy(w->lcfg);
}

/* Start the request threads (signals that stop the daemon stay with the caller). */
static unsigned serve_start(struct ckptfs *fs, struct worker *w, unsigned n)
{
	sigset_t block, old;
	unsigned started = 0;

	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	for (unsigned i = 0; i < n; i++) {
		w[i].se = fs->se;
		w[i].pipe[0] = w[i].pipe[1] = -1;
		atomic_init(&w[i].done, false);
		if (!fs->splice_loop) {
			w[i].lcfg = fuse_loop_cfg_create();
			fuse_loop_cfg_set_clone_fd(w[i].lcfg, 1);
			fuse_loop_cfg_set_max_threads(w[i].lcfg, fs->opt.max_threads);
			fuse_loop_cfg_set_idle_threads(w[i].lcfg, fs->opt.max_threads / 2);
		}
		if ((fs->splice_loop &&
		     (pipe2(w[i].pipe, O_CLOEXEC) < 0 ||
		      fcntl(w[i].pipe[0], F_SETPIPE_SZ, (int)pipe_bytes) < (int)pipe_bytes)) ||
		    pthread_create(&w[i].th, NULL, fs->splice_loop ? worker_main : mt_main,
				   &w[i]) != 0) {
			log_err("cannot start request worker %u: %s", i, strerror(errno));
			worker_free(&w[i]);
			break;
		}
		started++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return started;
}

static bool all_done(struct worker *w, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (!atomic_load(&w[i].done))
			return false;
	return true;
}

int fs_serve(struct ckptfs *fs)
{
	unsigned n = fs->splice_loop ? fs->opt.max_threads : 1, stuck = 0;
	struct worker *w = xcalloc(n, sizeof(*w));
	struct sigaction sa = { .sa_handler = on_wake };
	uint64_t deadline;

	sigemptyset(&sa.sa_mask);
	sigaction(WAKE_SIGNAL, &sa, NULL);
	/* The transport (see the top): devio.c, and io_uring if INIT takes it. */
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	rd.cpus = cpus > 2 ? (unsigned)cpus : 2;
	if (fs->splice_loop) {
		if (devio_install(fs, fs->se) == 0)
			fsu_prepare(fs, fs->se, fs->opt.max_threads);
		else
			log_warn("cannot hook the FUSE device: io_uring and passthrough are off");
	}
	if (!(n = serve_start(fs, w, n))) {
		free(w);
		return -1;
	}
	/*
	 * Wait for a signal (SIGTERM, SIGINT) or for the workers to see unmount;
	 * every tick, a worker joins the readers if none is left and no request
	 * came in since the last tick (the readers are stuck in handlers).
	 */
	for (uint64_t seen = UINT64_MAX; !fuse_session_exited(fs->se) && !all_done(w, n);) {
		usleep(100000);
		bcall_tick(fs);	/* reads of file data past drain_timeout get EIO */
		uint64_t now_req = atomic_load(&requests);
		if (now_req == seen && reader_wanted())
			log_debug("request workers: a reader joined (the others are in handlers)");
		seen = now_req;
	}
	fs_waits_stop(fs);
	bcall_watch_stop(fs);	/* and reads of file data still in the backend: ESHUTDOWN */
	readers_stop();
	/* Wake threads blocked in splice() or sem_wait() until all have left their loop. */
	for (deadline = now_ns() + STOP_BOUND_NS; !all_done(w, n) && now_ns() < deadline;
	     usleep(20000))
		for (unsigned i = 0; i < n; i++)
			if (!atomic_load(&w[i].done))
				pthread_kill(w[i].th, WAKE_SIGNAL);
	for (unsigned i = 0; i < n; i++) {
		if (!atomic_load(&w[i].done)) {
			stuck++;	/* left behind, with what it uses */
			continue;
		}
		pthread_join(w[i].th, NULL);
		worker_free(&w[i]);
	}
	if (stuck)
		log_err("%s still blocked in a handler %.0f s after the session ended (a backend "
			"call that does not return?); unmounting without waiting for it",
			fs->splice_loop ? "request workers are" : "the request loop is",
			(double)STOP_BOUND_NS / 1e9);
	else
		free(w);
	/* fsyncs and drains still waiting for the backend: replies must precede the unmount. */
	backend_cancel_waiters(&fs->be, -ESHUTDOWN);
	fsu_stop();	/* after those replies: they may go to ring entries */
	fuse_session_unmount(fs->se);
	return (int)stuck;
}
