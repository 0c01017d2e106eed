/*
 * loop.c — the request loop: worker threads that move each request from
 * /dev/fuse into a pipe with splice(2) and hand it to libfuse.
 *
 * Why our own loop: libfuse's splice path wants a pipe larger than 1 MiB,
 * which needs CAP_SYS_RESOURCE or a raised fs.pipe-max-size; without it it
 * silently falls back to reading every request into a buffer, and the data
 * of each write is then copied twice (kernel to buffer, buffer to cache).
 * Here every thread owns a pipe of exactly 1 MiB (256 page slots) and the
 * session's max_write is 254 pages, so a write request — one header slot
 * plus at most 255 data pages, however its offset is aligned — always fits.
 * splice() moves the request's page references into the pipe without
 * copying; fuse_session_process_buf() reads the header from the pipe, and
 * write_buf (ops.c) reads the data straight into cache chunks: one copy.
 *
 * Threads: `max_threads` workers, all reading the same fd (the kernel
 * hands each request to one of them).  A blocked handler (backpressure, a
 * drain) occupies one worker; the others go on.  With splice=off (or no
 * 1 MiB pipe) libfuse's multi-threaded loop serves instead, run in a thread
 * of its own so that stopping it is bounded the same way.
 *
 * Stopping (fs_serve): the loop ends when the session exits — on unmount
 * splice() fails with ENODEV in every worker; on SIGTERM/SIGINT libfuse's
 * handler, which runs in the main thread (the others block those signals),
 * marks the session exited.  The main thread then
 *   1. tells every blocked wait to give up (fs_waits_stop: a writer waiting
 *      for cache space gets ESHUTDOWN, wait.c);
 *   2. wakes threads blocked in splice() (our workers) or sem_wait()
 *      (libfuse's loop thread) with WAKE_SIGNAL, until all have left their
 *      loop or STOP_BOUND_NS has passed;
 *   3. joins those that left, answers the fsyncs and drain reads still
 *      waiting for the backend (ESHUTDOWN), and unmounts.  A worker still inside a
 *      handler after the bound (a backend system call that does not
 *      return) is left behind and counted, so main.c can still drain or
 *      rescue and exit without freeing what that worker uses.
 */
#include "fs/fs.h"
#include "cache/log.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define PIPE_BYTES (1u << 20)

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

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	int fd = fuse_session_fd(w->se);

	while (!fuse_session_exited(w->se)) {
		ssize_t n = splice(fd, NULL, w->pipe[1], NULL, PIPE_BYTES + 4096, 0);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == ENOENT)
				continue;	/* ENOENT: the request was interrupted */
			if (errno != ENODEV)
				log_err("reading /dev/fuse: %s", strerror(errno));
			fuse_session_exit(w->se);
			break;
		}
		if (n == 0) {
			fuse_session_exit(w->se);
			break;
		}
		struct fuse_buf buf = { .size = (size_t)n, .flags = FUSE_BUF_IS_FD, .fd = w->pipe[0] };
		fuse_session_process_buf(w->se, &buf);
		pipe_drain(w->pipe[0]);
	}
	atomic_store(&w->done, true);
	return NULL;
}

bool fs_splice_loop_possible(void)
{
	int p[2];
	bool ok;

	if (pipe2(p, O_CLOEXEC) < 0)
		return false;
	ok = fcntl(p[0], F_SETPIPE_SZ, PIPE_BYTES) >= (int)PIPE_BYTES;
	close(p[0]);
	close(p[1]);
	return ok;
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
		      fcntl(w[i].pipe[0], F_SETPIPE_SZ, PIPE_BYTES) < (int)PIPE_BYTES)) ||
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
	if (!(n = serve_start(fs, w, n))) {
		free(w);
		return -1;
	}
	/* Wait for a signal (SIGTERM, SIGINT) or for the workers to see unmount. */
	while (!fuse_session_exited(fs->se) && !all_done(w, n))
		usleep(100000);
	fs_waits_stop(fs);
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
	fuse_session_unmount(fs->se);
	return (int)stuck;
}
