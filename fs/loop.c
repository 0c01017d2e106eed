/*
 * loop.c — the request loop: worker threads that read each request from
 * /dev/fuse and hand it to libfuse.
 *
 * Why our own loop: libfuse reads every request into one buffer, so a
 * write's data is copied twice in the daemon's reach (the kernel into the
 * buffer, the daemon from there into the cache), and its splice path wants
 * pipes larger than 1 MiB.  Two ways here (loop=readv|splice):
 *
 * readv (the default).  The kernel copies a request into whatever iovec
 * the read gives it, so a worker reads the first WRITE_HDR bytes (exactly
 * a write request's header) into its own buffer and the rest straight into
 * a spare: a free chunk of the cache, taken before the read.  If the
 * request is a write, its data now lie at the start of that chunk; when
 * the write starts one of the file's chunks and the chunk there holds
 * nothing past it, the file takes the spare as that chunk
 * (cfile_write_chunk): the only copy of the data is the kernel's, from the
 * writer's pages (write-only opens are direct I/O) into the cache.  Other
 * writes are copied from the spare into the file's chunks as before, and
 * other requests are made whole in the worker's buffer.  libfuse still
 * parses every request: a staged write is handed over in the worker's
 * buffer, where its data would follow the header, and op_write_buf asks
 * fs_loop_staged() where they really are.  A worker takes a spare once it
 * has read a write larger than a slot (a writer of large files is at
 * work), only while the cache has plenty free (spare_min_free), one at a
 * time, and gives it back before it parks; the stats count spares apart
 * (cache_spare_bytes), not as cache in use.  No pipe is needed, so a
 * request may be as large as the kernel allows (fs.fuse.max_pages_limit).
 *
 * splice.  Every thread owns a pipe sized for the largest write request the
 * kernel may send: one slot for the header plus one per data page.  The
 * kernel caps a request at fs.fuse.max_pages_limit pages (256 by default;
 * an administrator may raise it to 1024), so the pipe gets the next power
 * of two above limit + 2 slots where this process may size pipes that
 * large (root has CAP_SYS_RESOURCE; others are held to fs.pipe-max-size,
 * 1 MiB by default), and max_write is what fits.  Without that, the pipe
 * is 1 MiB (256 slots) and max_write 254 pages, so a request always fits
 * however its offset is aligned.  splice() moves page references into the
 * pipe, but a direct-I/O writer's pages are copied into new pipe pages
 * first (the kernel cannot hold the writer's pages in a pipe), and
 * write_buf (ops.c) copies the data from the pipe into cache chunks.
 *
 * Threads: `max_threads` workers reading the same fd (the kernel hands
 * each request to one of them), but at most READERS of them wait in
 * a read of /dev/fuse at a time; the rest are parked.  The kernel wakes the longest
 * waiting reader first, so with every worker waiting, consecutive requests
 * of one writer would go round all of them, each cold (8 KiB writes 1.3x
 * and small files 3.9x slower than with two threads).  A worker is
 * unparked when no reader is left and: a request was just taken while
 * fewer handlers than CPUs run (many ranks writing at once, on a node with
 * the CPUs to copy their data in parallel); a handler is about to wait
 * (for cache space, wait.c); or no request was read for a whole tick of
 * fs_serve (a handler blocked elsewhere: a backend call that hangs).  A
 * blocked handler occupies one worker; the others go on.  With loop=libfuse
 * (or loop=splice without a 1 MiB pipe) libfuse's multi-threaded loop
 * serves instead, run in a thread of its own so that stopping it is
 * bounded the same way.
 *
 * Transport: with our loop, replies go through devio.c, which may take
 * requests over io_uring instead (uring.c) if the kernel offers it at
 * INIT; our workers serve /dev/fuse either way (INIT, FORGET,
 * INTERRUPT, and everything when io_uring is not in use).  The ring
 * threads are stopped after the workers, before the unmount.
 *
 * Stopping (fs_serve): the loop ends when the session exits — on unmount
 * the read fails with ENODEV in every worker; on SIGTERM/SIGINT/SIGHUP the
 * signal thread (signals.c) marks the session exited.  The main thread then
 *   1. tells every blocked wait to give up (fs_waits_stop: a writer waiting
 *      for cache space gets ESHUTDOWN, wait.c) and answers the reads of
 *      file data still in the backend (ESHUTDOWN, bcall_watch_stop);
 *   2. wakes threads blocked in readv() or splice() (our workers) or sem_wait()
 *      (libfuse's loop thread) with WAKE_SIGNAL, until all have left their
 *      loop, or STOP_BOUND_NS has passed, or every one still in it is
 *      inside a read of file data step 1 answered (known hung: no reason
 *      to wait for it);
 *   3. joins those that left, answers the fsyncs and drain reads still
 *      waiting for the backend (ESHUTDOWN), and unmounts.  A worker still inside a
 *      handler after the bound (a backend system call that does not
 *      return) is left behind and counted, so main.c can still drain or
 *      rescue and exit without freeing what that worker uses.
 */
#include "fs/bcall.h"
#include "fs/fs.h"
#include "fs/mounts.h"
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
#include <sys/mount.h>
#include <unistd.h>

#define PAGE 4096u
#define PIPE_MIN (1u << 20)	/* every Linux lets an unprivileged process size this */

/* Chosen once by fs_own_loop_possible(), before any worker starts. */
static size_t pipe_bytes = PIPE_MIN;
static unsigned max_write_pages = 254;
/* Requests read from /dev/fuse (stats: fuse_requests, with uring.c's). */
static atomic_uint_least64_t requests;
static atomic_bool init_seen;
/* Write bytes the files took where recv_readv() put them (stats: fuse_adopted_bytes). */
static atomic_uint_least64_t adopted_bytes;
/* Capacity of the spares the workers hold (stats: cache_spare_bytes, not in cache_used_bytes). */
static atomic_uint_least64_t spare_bytes;

/* How long stopping waits for workers to leave their handlers. */
#define STOP_BOUND_NS (5ull * 1000000000)

struct worker {
	struct fuse_session *se;
	struct ckptfs *fs;
	struct fuse_loop_config *lcfg;	/* libfuse's loop only */
	int pipe[2];			/* loop=splice */
	char *flat;			/* loop=readv: a whole request, or a write's header */
	size_t flat_len;
	struct chunk *spare;		/* loop=readv: the free chunk the next write's data goes to */
	bool want_spare;		/* loop=readv: it read a large write since it last parked */
	struct fuse_bufvec *staged_bv;	/* loop=readv: room for two buffers (struct staged) */
	pthread_t th;
	atomic_bool done;
};

/*
 * loop=readv: a write request's header is this long; its data follows.
 * readv() puts the header in w->flat and the data at the start of w->spare.
 */
#define WRITE_HDR (sizeof(struct fuse_in_header) + sizeof(struct fuse_write_in))

/*
 * The write request this thread is handling whose data lies in a spare
 * chunk, not where libfuse believes (after the header in w->flat, memory
 * never written): op_write_buf asks fs_loop_staged() for the real place.
 */
struct staged {
	const char *fake;	/* w->flat + WRITE_HDR */
	size_t len;
	struct chunk *ch;	/* the spare: the data's first ch->cap bytes */
	bool taken;		/* the file adopted ch */
	/* the data: the spare, then (past its capacity) the rest in w->flat */
	struct fuse_bufvec *bv;
};
static __thread struct staged *staged;

/* Spares are taken only while this many chunks are free (and none at all in small caches). */
static uint32_t spare_min_free;

#define WAKE_SIGNAL SIGUSR1

/*
 * The reader set: how many workers wait in a read of /dev/fuse now, and how many are
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

static void spare_put(struct worker *w);

/*
 * Become a reader, or park until one is wanted; false once the loop stops.
 * handled: this worker comes back from handling a request.
 */
static bool reader_enter(struct worker *w, bool handled)
{
	pthread_mutex_lock(&rd.lock);
	rd.busy -= handled;
	while (rd.waiting >= READERS && !rd.stop) {
		if (w->spare) {	/* a parked worker holds no cache memory */
			pthread_mutex_unlock(&rd.lock);
			spare_put(w);
			pthread_mutex_lock(&rd.lock);
			continue;
		}
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

/* Interrupts readv(), splice() or sem_wait() (no SA_RESTART) so the thread sees the session exit. */
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

/*
 * A free chunk for the next write's data, while the cache has plenty: it
 * counts as used (not dirty) until a file adopts it or it is given back.
 */
static struct chunk *spare_get(struct cache *c)
{
	struct chunk *ch;

	if (!spare_min_free || cache_reclaimable(c) < spare_min_free ||
	    cache_chunk_alloc(c, NULL, false, false, &ch) < 0)
		return NULL;
	cache_chunk_set_state(c, ch, CH_FREE);
	atomic_fetch_add(&spare_bytes, ch->cap);
	return ch;
}

/* Give w's spare back to the free stack. */
static void spare_put(struct worker *w)
{
	if (w->spare) {
		atomic_fetch_sub(&spare_bytes, w->spare->cap);
		cache_chunk_free(&w->fs->cache, w->spare);
		w->spare = NULL;
	}
	w->want_spare = false;
}

/* loop=readv: the next request, its data (past a write's header) in w->spare if there is one. */
static ssize_t recv_readv(struct worker *w, int fd)
{
	struct iovec iov[3];
	size_t room = w->flat_len - WRITE_HDR;
	int k = 0;

	if (!w->spare && w->want_spare)
		w->spare = spare_get(&w->fs->cache);
	iov[k++] = (struct iovec){ w->flat, WRITE_HDR };
	if (w->spare) {
		size_t in = CKPT_MIN(room, (size_t)w->spare->cap);
		iov[k++] = (struct iovec){ w->spare->mem, in };
		room -= in;
		if (room)
			iov[k++] = (struct iovec){ w->flat + WRITE_HDR + w->spare->cap, room };
	} else {
		iov[k++] = (struct iovec){ w->flat + WRITE_HDR, room };
	}
	return readv(fd, iov, k);
}

/* Hand the request of n bytes read by recv_readv() to libfuse. */
static void request_handle_readv(struct worker *w, size_t n)
{
	const struct fuse_in_header *ih = (const void *)w->flat;
	const struct fuse_write_in *wi = (const void *)(ih + 1);
	const uint32_t opcode = ih->opcode;
	size_t data = n > WRITE_HDR ? n - WRITE_HDR : 0;
	/* A write whose data are all there, and all its data: they can stay where they are. */
	bool write = opcode == FUSE_WRITE && n >= WRITE_HDR && wi->size == data;

	atomic_fetch_add_explicit(&requests, 1, memory_order_relaxed);
	if (write && data > SLOT_SIZE)
		w->want_spare = true;	/* a writer of large files: spares for the next ones */
	if (w->spare && data && write && atomic_load(&init_seen)) {
		struct staged st = { .fake = w->flat + WRITE_HDR, .len = data, .ch = w->spare };
		struct fuse_buf buf = { .size = n, .mem = w->flat };
		size_t in = CKPT_MIN(data, (size_t)w->spare->cap);

		st.bv = w->staged_bv;
		*st.bv = (struct fuse_bufvec)FUSE_BUFVEC_INIT(in);
		st.bv->buf[0].mem = w->spare->mem;
		if (data > in) {
			st.bv->count = 2;
			st.bv->buf[1] = (struct fuse_buf){ .size = data - in,
							   .mem = w->flat + WRITE_HDR + in };
		}
		staged = &st;
		fuse_session_process_buf(w->se, &buf);
		staged = NULL;
		if (st.taken)
			w->spare = NULL;
		return;
	}
	if (w->spare && data)	/* not a write the cache can adopt: make the request whole */
		memcpy(w->flat + WRITE_HDR, w->spare->mem, CKPT_MIN(data, (size_t)w->spare->cap));
	if (!atomic_load(&init_seen))
		devio_note_init(w->flat, n);
	struct fuse_buf buf = { .size = n, .mem = w->flat };
	fuse_session_process_buf(w->se, &buf);
	if (opcode == FUSE_INIT)
		atomic_store(&init_seen, true);
}

struct fuse_bufvec *fs_loop_staged(const struct fuse_bufvec *bv, struct chunk **ch)
{
	if (!staged || bv->count != 1 || bv->idx || bv->off ||
	    (bv->buf[0].flags & FUSE_BUF_IS_FD) || bv->buf[0].mem != staged->fake ||
	    bv->buf[0].size != staged->len)
		return NULL;
	*ch = staged->taken || staged->len > staged->ch->cap ? NULL : staged->ch;
	return staged->bv;
}

void fs_loop_staged_taken(void)
{
	staged->taken = true;
	atomic_fetch_sub(&spare_bytes, staged->ch->cap);
	atomic_fetch_add_explicit(&adopted_bytes, staged->len, memory_order_relaxed);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	int fd = fuse_session_fd(w->se);

	pthread_setname_np(pthread_self(), "ckptfs-fuse");
	for (bool handled = false; !fuse_session_exited(w->se);) {
		if (!reader_enter(w, handled)) {
			reader_leave(false);
			break;
		}
		ssize_t n = w->flat ? recv_readv(w, fd)
				    : splice(fd, NULL, w->pipe[1], NULL, pipe_bytes + PAGE, 0);
		int err = n < 0 ? errno : 0;
		reader_leave(n > 0);
		if ((handled = n > 0)) {
			if (w->flat)
				request_handle_readv(w, (size_t)n);
			else
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

bool fs_own_loop_possible(enum fuse_loop_kind kind)
{
	unsigned limit = fs_kernel_max_pages();
	size_t want = PAGE;

	if (kind == LOOP_READV) {	/* no pipe: whatever the kernel may send */
		max_write_pages = limit;
		return true;
	}
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

uint64_t fs_loop_adopted_bytes(void)
{
	return atomic_load(&adopted_bytes);
}

uint64_t fs_loop_spare_bytes(void)
{
	return atomic_load(&spare_bytes);
}

unsigned fs_loop_max_write(void)
{
	return max_write_pages * PAGE;
}

/* libfuse's multi-threaded loop, in a thread of its own (loop=libfuse). */
static void *mt_main(void *arg)
{
	struct worker *w = arg;

	fuse_session_loop_mt(w->se, w->lcfg);
	atomic_store(&w->done, true);
	return NULL;
}

static void worker_free(struct worker *w)
{
	spare_put(w);
	free(w->flat);
	free(w->staged_bv);
	if (w->pipe[0] >= 0)
		close(w->pipe[0]);
	if (w->pipe[1] >= 0)
		close(w->pipe[1]);
	if (w->lcfg)
		fuse_loop_cfg_destroy(w->lcfg);
}

/* Start the request threads (they block the stop signals: signals.c). */
static unsigned serve_start(struct ckptfs *fs, struct worker *w, unsigned n)
{
	unsigned started = 0;

	for (unsigned i = 0; i < n; i++) {
		w[i].se = fs->se;
		w[i].fs = fs;
		w[i].pipe[0] = w[i].pipe[1] = -1;
		if (fs->own_loop && fs->opt.loop == LOOP_READV) {
			/* room for any request: a write's header and data, or a little more */
			w[i].flat_len = WRITE_HDR + max_write_pages * PAGE + 2 * PAGE;
			w[i].flat = xmalloc(w[i].flat_len);
			w[i].staged_bv = xmalloc(sizeof(struct fuse_bufvec) + sizeof(struct fuse_buf));
		}
		atomic_init(&w[i].done, false);
		if (!fs->own_loop) {
			w[i].lcfg = fuse_loop_cfg_create();
			fuse_loop_cfg_set_clone_fd(w[i].lcfg, 1);
			fuse_loop_cfg_set_max_threads(w[i].lcfg, fs->opt.max_threads);
			fuse_loop_cfg_set_idle_threads(w[i].lcfg, fs->opt.max_threads / 2);
		}
		if ((fs->own_loop && fs->opt.loop == LOOP_SPLICE &&
		     (pipe2(w[i].pipe, O_CLOEXEC) < 0 ||
		      fcntl(w[i].pipe[0], F_SETPIPE_SZ, (int)pipe_bytes) < (int)pipe_bytes)) ||
		    pthread_create(&w[i].th, NULL, fs->own_loop ? worker_main : mt_main,
				   &w[i]) != 0) {
			log_err("cannot start request worker %u: %s", i, strerror(errno));
			worker_free(&w[i]);
			break;
		}
		started++;
	}
	return started;
}

/* Workers still in their loop (or in a handler). */
static unsigned not_done(struct worker *w, unsigned n)
{
	unsigned left = 0;

	for (unsigned i = 0; i < n; i++)
		left += !atomic_load(&w[i].done);
	return left;
}

static bool all_done(struct worker *w, unsigned n)
{
	return not_done(w, n) == 0;
}

/*
 * After the kernel's connection was aborted (/sys/fs/fuse/connections/N/
 * abort), libfuse's unmount gives up on the dead device and the mount
 * stays, answering ENOTCONN to everyone and refusing the next mount there
 * until someone unmounts it: detach it.  Only this daemon's (its type,
 * its backend: a node's lease lets no other daemon mount that backend
 * meanwhile); a normal end has unmounted it already.
 */
static void detach_dead_mount(struct ckptfs *fs)
{
	struct mountent *m;
	int n = mounts_read(&m);

	if (n < 0)
		return;
	int i = mounts_find(m, n, fs->opt.mountpoint_real);
	bool ours = i >= 0 && !strcmp(m[i].fstype, "fuse.ckptfs") && m[i].source &&
		    !strcmp(m[i].source, fs->opt.backend_real);
	mounts_free(m, n);
	if (ours && umount2(fs->opt.mountpoint_real, MNT_DETACH) == 0)
		log_warn("the kernel's connection to %s was aborted: the mount is detached",
			 fs->opt.mountpoint_real);
}

int fs_serve(struct ckptfs *fs)
{
	unsigned n = fs->own_loop ? fs->opt.max_threads : 1, stuck = 0;
	struct worker *w = xcalloc(n, sizeof(*w));
	struct sigaction sa = { .sa_handler = on_wake };
	uint64_t deadline;

	sigemptyset(&sa.sa_mask);
	sigaction(WAKE_SIGNAL, &sa, NULL);
	/* The transport (see the top): devio.c, and io_uring if INIT takes it. */
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	rd.cpus = cpus > 2 ? (unsigned)cpus : 2;
	/*
	 * loop=readv: spares only where the cache has room for them beside the
	 * writers (at most one per worker, and a parked worker holds none).
	 */
	spare_min_free = fs->cache.nchunks >= 8 * fs->opt.max_threads ? 2 * fs->opt.max_threads : 0;
	if (fs->own_loop) {
		if (devio_install(fs, fs->se) == 0)
			fsu_prepare(fs, fs->se, fs->opt.max_threads);
		else
			log_warn("cannot hook the FUSE device: io_uring and passthrough are off");
	}
	if (!(n = serve_start(fs, w, n))) {
		free(w);
		log_err("cannot start any request worker: unmounting");
		fsu_stop();
		fuse_session_unmount(fs->se);
		detach_dead_mount(fs);
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
	/*
	 * Wake threads blocked reading /dev/fuse or in sem_wait() until all have
	 * left their loop, or all that have not are inside reads of file data
	 * already answered as hung (bcall_watch_stuck): no reason to wait the
	 * bound for those.
	 */
	uint64_t t_stop = now_ns();
	for (deadline = t_stop + STOP_BOUND_NS; !all_done(w, n) && now_ns() < deadline;
	     usleep(20000)) {
		for (unsigned i = 0; i < n; i++)
			if (!atomic_load(&w[i].done))
				pthread_kill(w[i].th, WAKE_SIGNAL);
		if (now_ns() - t_stop > 100000000ull && not_done(w, n) <= bcall_watch_stuck(fs))
			break;
	}
	for (unsigned i = 0; i < n; i++) {
		if (!atomic_load(&w[i].done)) {
			stuck++;	/* left behind, with what it uses */
			continue;
		}
		pthread_join(w[i].th, NULL);
		worker_free(&w[i]);
	}
	if (stuck)
		log_err("%s still blocked in a handler %.1f s after the session ended (a backend "
			"call that does not return?); unmounting without waiting for it",
			fs->own_loop ? "request workers are" : "the request loop is",
			(double)(now_ns() - t_stop) / 1e9);
	else
		free(w);
	/* fsyncs and drains still waiting for the backend: replies must precede the unmount. */
	backend_cancel_waiters(&fs->be, -ESHUTDOWN);
	fsu_stop();	/* after those replies: they may go to ring entries */
	fuse_session_unmount(fs->se);
	detach_dead_mount(fs);
	return (int)stuck;
}
