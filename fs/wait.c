/*
 * wait.c — the policy that bounds the one wait a request handler makes in
 * its worker thread: a writer waiting for cache space (cache_chunk_alloc,
 * through cfile_write).  fsync and drain reads wait asynchronously, as
 * backend waiters, which answer interrupts and deadlines themselves and are
 * answered at the end of the session (loop.c, backend_cancel_waiters).
 * The wait ends, with an error for the caller, at the first of:
 *
 *   W1  the session is ending (SIGTERM, SIGINT, unmount): ESHUTDOWN, so the
 *       workers can be joined and the daemon reaches drain-or-rescue;
 *   W2  the caller gave up: the kernel sent FUSE_INTERRUPT for the request
 *       (any signal while it waits, SIGKILL included): EINTR;
 *   W3  the backend has made no progress for drain_timeout seconds of this
 *       wait: the backend's last error (ENOSPC, EIO, EACCES, ...), or EIO if
 *       it reported none (hung).  While it makes progress
 *       (backend_progress: operations applied, bytes written), the writer
 *       keeps waiting.
 *
 * The cache knows none of this: it calls fs_cache_wait_check() (its
 * wait_check hook) every wait slice.  Which request a thread is waiting
 * for is per-thread state set around the cache write (fs_req_wait_begin
 * and _end, in op_write_buf); an interrupt cuts the slice short through
 * libfuse's interrupt callback, as does fs_waits_stop() at shutdown.
 *
 * Progress is tracked for the whole daemon (fs->waits, under its lock):
 * the last value of backend_progress() any waiter saw and when it changed.
 * A wait that began later counts from its own start.
 */
#include "fs/fs.h"

#include <errno.h>

/*
 * The request this thread is serving while it may wait (W2), NULL
 * otherwise; and whether libfuse's interrupt callback is registered for it:
 * only once it actually waits, which keeps libfuse's session lock off the
 * path of writes that find space at once.
 */
static __thread fuse_req_t wait_req;
static __thread bool wait_req_hooked;

void fs_waits_init(struct ckptfs *fs)
{
	pthread_mutex_init(&fs->waits.lock, NULL);
	atomic_init(&fs->waits.stopping, false);
	fs->cache.wait_check = fs_cache_wait_check;
	fs->cache.wait_arg = fs;
}

void fs_waits_destroy(struct ckptfs *fs)
{
	fs->cache.wait_check = NULL;
	pthread_mutex_destroy(&fs->waits.lock);
}

void fs_waits_stop(struct ckptfs *fs)
{
	atomic_store(&fs->waits.stopping, true);
	cache_wake_waiters(&fs->cache);
}

bool fs_stopping(struct ckptfs *fs)
{
	return atomic_load(&fs->waits.stopping);
}

/* libfuse calls this (holding the request's lock) when FUSE_INTERRUPT arrives. */
static void on_interrupt(fuse_req_t req, void *arg)
{
	struct ckptfs *fs = arg;
	(void)req;
	cache_wake_waiters(&fs->cache);
}

void fs_req_wait_begin(struct ckptfs *fs, fuse_req_t req)
{
	(void)fs;
	wait_req = req;
	wait_req_hooked = false;
}

void fs_req_wait_end(fuse_req_t req)
{
	/* Before the reply: libfuse must not call back into a request we let go. */
	if (wait_req_hooked)
		fuse_req_interrupt_func(req, NULL, NULL);
	wait_req = NULL;
	wait_req_hooked = false;
}

/* Is this thread's request interrupted?  Hooks the callback at its first wait. */
static bool req_interrupted(struct ckptfs *fs)
{
	if (!wait_req)
		return false;
	if (!wait_req_hooked) {
		/* Calls on_interrupt at once if the interrupt came first. */
		fuse_req_interrupt_func(wait_req, on_interrupt, fs);
		wait_req_hooked = true;
		fs_loop_blocking();	/* its first wait: others must read meanwhile */
	}
	return fuse_req_interrupted(wait_req);
}

int fs_backend_stalled(struct ckptfs *fs, uint64_t waited_ns)
{
	uint64_t now = now_ns(), p = backend_progress(&fs->be), idle;

	pthread_mutex_lock(&fs->waits.lock);
	if (!fs->waits.progress_ns || p != fs->waits.progress) {
		fs->waits.progress = p;
		fs->waits.progress_ns = now;
	}
	idle = CKPT_MIN(now - fs->waits.progress_ns, waited_ns);
	pthread_mutex_unlock(&fs->waits.lock);
	if (fs->opt.drain_timeout <= 0 || (double)idle / 1e9 <= fs->opt.drain_timeout)
		return 0;
	int e = backend_last_error(&fs->be);
	return -(e ? e : EIO);
}

int fs_cache_wait_check(void *arg, uint64_t waited_ns)
{
	struct ckptfs *fs = arg;

	if (fs_stopping(fs))
		return -ESHUTDOWN;				/* W1 */
	if (req_interrupted(fs))
		return -EINTR;					/* W2 */
	return fs_backend_stalled(fs, waited_ns);		/* W3 */
}
