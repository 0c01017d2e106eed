/*
 * bcall.h — backend calls a request handler makes, waited for boundedly.
 *
 * A handler that must read the backend (the first listing of a directory,
 * the first open of a file the cache does not hold, the first read of an
 * object's xattrs) hands the call to a helper thread and waits for it at
 * most drain_timeout.  A hung backend — a server that stopped answering, a
 * call in uninterruptible sleep — then costs the caller EIO, not its FUSE
 * worker for as long as the backend hangs: the mount keeps serving
 * everything that needs no backend, and shutdown is not held up.  The call
 * itself cannot be cancelled: its helper stays in it and owns it, and when
 * it returns, drop() releases what it made (an fd, a listing) for the
 * requester that left.
 *
 * Usage: embed a struct bcall in a heap object that holds the call's
 * inputs and outputs (outputs initialised so that drop() may run before
 * run() has), set run and drop, and call bcall_run().  On 0 or a -errno
 * that run() returned, the caller owns the object again; on BCALL_GONE
 * (the wait ended first) it must not touch it.
 */
#ifndef CKPTFS_FS_BCALL_H
#define CKPTFS_FS_BCALL_H

#include "cache/util.h"

#include <fuse_lowlevel.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct ckptfs;

struct bcall {
	int (*run)(struct bcall *c);	/* on a helper thread: 0 or -errno */
	void (*drop)(struct bcall *c);	/* the requester left: free c and what run made */
	const char *what;		/* for the log: "list a directory", ... */
	uint64_t spin_ns;		/* poll this long before sleeping (0: WAIT_SPIN_NS) */
	/* the pool's (under its lock) */
	struct list link;
	uint64_t started_ns;
	int result;
	atomic_bool done;	/* written under the lock, polled without it */
	bool gone;
};

/* bcall_run()'s answer when the caller stopped waiting: the call belongs to the pool. */
#define BCALL_GONE 1

/*
 * Run c->run on a helper and wait for it: its result; or BCALL_GONE with
 * *err set to -EIO (it did not return within drain_timeout) or -ESHUTDOWN
 * (the session is ending).  Outside a session (before serving, at exit)
 * the call is made in the caller's thread.
 */
int bcall_run(struct ckptfs *fs, struct bcall *c, int *err);

/*
 * Run c->run on a helper and do not wait: c->drop follows it there.  For
 * calls the handler must not make itself (a kernel notification that may
 * wait for the request being served).  Outside a session, or with no
 * thread to run it, c is dropped unmade.
 */
void bcall_post(struct ckptfs *fs, struct bcall *c);

/*
 * A backend call made in the handler's own thread, watched instead: no
 * hand-off, for calls on the data path (reads of file data).  Between
 * bcall_watch_begin() and bcall_watch_end() the handler must not touch
 * req.  If the call has not returned within drain_timeout, or the session
 * ends first, bcall_tick() (or bcall_watch_stop()) answers req with EIO
 * (ESHUTDOWN) and bcall_watch_end() returns false: the handler then must
 * neither reply nor touch req, only release what it holds.
 *
 * A watched call that hangs holds its FUSE worker until the backend
 * answers, so watches are taken only while fewer than max_threads / 2 run
 * and none hangs; and only where another thread can answer a request
 * while its handler still runs — not over FUSE's io_uring, whose entries
 * commit from the handler's own thread.  Otherwise bcall_watch_begin()
 * says -EBUSY: make the call with bcall_run().
 */
struct bcall_watch {
	struct list link;	/* the pool's running watches */
	fuse_req_t req;
	uint64_t started_ns;
	bool listed, answered;	/* under the pool's lock */
};
/* 0; -EBUSY (use bcall_run); -ESHUTDOWN (the session is ending: make no call). */
int bcall_watch_begin(struct ckptfs *fs, struct bcall_watch *w, fuse_req_t req);
/* True: the handler still owns req. */
bool bcall_watch_end(struct ckptfs *fs, struct bcall_watch *w);
/* Answer the watched calls past drain_timeout (the request loop, every tick). */
void bcall_tick(struct ckptfs *fs);
/* The session ends: answer every watched call ESHUTDOWN; later ones start none. */
void bcall_watch_stop(struct ckptfs *fs);
/* Watched calls already answered whose handler is still inside the backend call. */
unsigned bcall_watch_stuck(struct ckptfs *fs);

/* Start taking calls (helpers start on demand, up to max_threads). */
void bcall_start(struct ckptfs *fs);
/*
 * Stop: calls are made inline from now on; idle helpers leave.  Returns
 * how many helpers are still inside a backend call after bound_ns: they
 * own the pool, which is then not freed.
 */
unsigned bcall_stop(struct ckptfs *fs, uint64_t bound_ns);

/* How long bcall_stop() waits for helpers to leave. */
#define BCALL_STOP_BOUND_NS (1000ull * 1000000)

/* For the stats: calls made, calls given up on, and calls running past drain_timeout now. */
void bcall_stats(struct ckptfs *fs, uint64_t *calls, uint64_t *timed_out, unsigned *stuck);

#endif
