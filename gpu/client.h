/*
 * client.h — libckptfs's insides, shared by client.c (the session: socket,
 * arena, ring, bindings) and capture.c (captures, their completion, CRCs
 * and the files' deferred close).
 *
 * An arena chunk on this side is either free (in `freelist`, or still in the
 * shared bitmap), held (open for one file chunk of one file: copies go into
 * it at the offset the bytes have within their file chunk), or the
 * daemon's (posted; it comes back through the bitmap).  A held chunk is
 * posted once it is `closing` and no copy into it is pending: one DATA
 * entry per completed range, the last flagged ADOPT.  Chunks close when
 * the file's captures move past them (writers go forward), when they are
 * full, when the arena runs short, and when the file is closed.
 *
 * A capture is cut at chunk boundaries into pieces and issued in batches:
 * each batch is a run of copies on the session's copy stream (ordered after
 * the producer stream by an event) followed by one host function, which
 * marks its pieces done (or hands them to the CRC threads first).  A batch
 * ends when the next piece would have to wait for a free chunk, so the
 * chunks it holds can be posted while it waits: no capture can wedge the
 * arena, however large.
 *
 * A forked child (without exec) must not keep its parent's session alive:
 * the daemon ends a session only when its socket closes.  A fork handler
 * closes, in the child, the socket and doorbells of every session of the
 * process (they are set under procs_mu, a leaf in client.c), and marks the
 * sessions `forked`: every call on them fails with ECHILD.
 *
 * Locks: s->mu guards everything here except the ring's producer index
 * (s->ring_mu, taken inside mu) and the CUDA call sequences (s->cuda_mu,
 * taken before mu, never inside it: host functions take mu, and no CUDA
 * call is made with mu held).  The finisher and the CRC threads wait on
 * s->cv.
 *
 * After a fault in the context (an illegal access, an ECC error) CUDA
 * calls no more host functions.  Every batch whose host function is due is
 * on s->batches; a driver call that reports the fault (a wait, a launch,
 * or the finisher's look at the copy stream every COPY_POLL_MS while
 * batches are due) fails them all, with their captures and files, so that
 * every wait ends.
 */
#ifndef CKPTFS_GPU_CLIENT_H
#define CKPTFS_GPU_CLIENT_H

#include "gpu/cu.h"
#include "gpu/include/ckptfs.h"
#include "gpu/include/ckptfs_ring.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sys/types.h>

struct ck_range {
	uint32_t lo, hi;
};

struct ck_file;

struct ck_chunk {
	struct ck_file *f;	/* holder; NULL when free or the daemon's */
	uint64_t index;		/* the file chunk it is open for */
	uint32_t pending;	/* pieces issued and not done */
	bool closing;		/* take no more pieces; post when pending == 0 */
	struct ck_range *r;	/* completed ranges, sorted, merged */
	uint32_t n, cap;
	struct ck_chunk *next;	/* f->open */
};

struct ck_capture;
struct ck_batch;

struct ck_piece {
	struct ck_capture *cap;
	uint32_t chunk, lo, hi;
	uint32_t crc;
	struct ck_piece *qnext;	/* the CRC queue */
};

struct ck_capture {
	struct ck_file *f;
	uint32_t npieces, issued, done;
	bool want_crc, failed;
	uint32_t crc;		/* of the whole capture, once done == npieces */
	struct ck_piece pieces[];
};

struct ck_file {
	struct ck_file *next;	/* s->files */
	int fd;
	bool bound;
	uint32_t token;
	uint64_t limit;
	struct ck_capture **caps;
	uint32_t ncaps, capcap;
	uint32_t inflight;	/* captures not complete */
	struct ck_chunk *open;	/* chunks held for it */
	uint32_t posting;	/* chunks being written to the ring right now */
	int err;		/* a capture failed: the file is dropped at close */
	char msg[256];
	/* ckptfs_file_close: */
	bool closing;
	struct ckptfs_patch *patches;
	size_t npatches;
	char *from, *to;
	struct ck_file *fnext;	/* the finish queue */
};

struct ckptfs_session {
	const struct ckcu *cu;	/* NULL: no driver (host memory only) */
	pid_t pid;		/* the process that opened it (a fork's child has none of it) */
	bool forked;		/* this is a fork's child: its descriptors are closed */
	struct ckptfs_session *pnext;	/* the process's sessions (client.c, procs_mu) */
	char path[256];		/* for messages */
	int sock, sq_efd, cq_efd;
	uint64_t id, key[2];
	uint32_t cs, nchunks;
	char *arena;
	size_t arena_bytes;
	struct ckptfs_ring_hdr *ring;
	size_t ring_bytes;
	struct ckptfs_sqe *sqe;
	uint32_t sq_mask;
	_Atomic uint64_t *bitmap;
	int numa_node;
	bool hugepages;
	uint64_t stall_ns;	/* waits for the daemon with nothing back end after this (0: never) */

	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct ck_chunk *chunks;	/* by arena chunk */
	uint32_t *freelist;
	uint32_t nfree;
	struct ck_file *files;
	struct ck_file *fin_head, *fin_tail;
	int fin_err;
	char fin_msg[256];
	struct ck_piece *crc_head, *crc_tail;
	struct ck_batch *batches;	/* issued, host function not run yet */
	struct ck_batch *lost;		/* failed after a fault; freed with the stream */
	bool stopping, dead;
	uint64_t captures, captured_bytes, host_bytes;

	pthread_mutex_t ring_mu;
	uint32_t tail;		/* producer index */

	pthread_mutex_t cuda_mu;
	bool cuda_ready;
	bool pinned;		/* the arena is registered with the driver */
	ckcu_context ctx;
	ckcu_stream copy;
	ckcu_event ev_prod, ev_copy;

	pthread_t finisher;	/* also polls the copy stream after faults */
	pthread_t *crc_threads;
	int ncrc;
};

/* ---- client.c ------------------------------------------------------------ */

/* Record why the calling thread's call failed; returns err (a -errno). */
int ck_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
 * 0 if s may be used by the calling process, else -EINVAL (no session) or
 * -ECHILD: a forked child has no threads, no arena and no socket of its
 * parent's session (the mappings are MADV_DONTFORK, the descriptors closed
 * by the fork handler).  `what` names the call.
 */
int ck_usable(const struct ckptfs_session *s, const char *what);
/* The daemon ended the session (socket closed or ring marked dead)?  mu held. */
bool ck_dead_locked(struct ckptfs_session *s);
/* The file entry for fd, bound to the session (created on first use).  mu held. */
int ck_file_get(struct ckptfs_session *s, int fd, uint64_t limit, struct ck_file **out);
/*
 * A free arena chunk; may wait (dropping mu) for the daemon to return one,
 * at most s->stall_ns with none coming back (-ETIMEDOUT).
 */
int ck_chunk_alloc(struct ckptfs_session *s, uint32_t *out, bool may_wait);
/* Post held chunk c (closing, nothing pending) to the daemon.  mu held. */
void ck_chunk_post(struct ckptfs_session *s, uint32_t c, uint64_t t_ns);
/* Close every chunk f holds (post the idle ones now).  mu held. */
void ck_file_close_chunks(struct ckptfs_session *s, struct ck_file *f);
/*
 * CKPTFS_IOC_UNBIND with `flags` (CKPTFS_UNBIND_*): 0, or the daemon's
 * verdict on the file's entries.  With CKPTFS_UNBIND_FENCE the file stays bound.
 */
int ck_unbind(struct ckptfs_session *s, struct ck_file *f, unsigned flags);
void ck_file_free(struct ckptfs_session *s, struct ck_file *f);
/* A capture of f failed (err; ckptfs_last_error() says why): f is dropped at close.  mu held. */
void ck_file_fail(struct ck_file *f, int err);
uint64_t ck_now_ns(void);

/* ---- capture.c ------------------------------------------------------------ */

int ck_threads_start(struct ckptfs_session *s, int ncrc);
void ck_threads_stop(struct ckptfs_session *s);
void ck_cuda_release(struct ckptfs_session *s);

#endif
