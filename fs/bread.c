/*
 * bread.c — reads of backend file data for request handlers, bounded
 * (see bread.h).
 *
 * One call reads every backend range a request needs.  A read request
 * makes it in its own thread, watched (bcall_watch_*: answered EIO by the
 * request loop if it hangs); where it cannot be watched (FUSE over
 * io_uring, half the workers in watched calls, or one of them hanging) it
 * hands the call to a helper — one hand-off however many segments it
 * spans.  A writer's fill always goes to a helper: it holds the file's
 * lock.  The call splices the ranges into a pipe of its own (page
 * references, no copy) and the reply moves them on to the kernel; what
 * the pipe cannot take (it holds READ_MAX and a few partial pages), and a
 * fill, is read into a buffer.  Pipes and buffers of calls that ended are
 * kept for the next (a fresh pipe or 1 MiB buffer per request costs
 * system calls or page faults every time).
 */
#include "fs/bread.h"
#include "fs/bcall.h"
#include "fs/fs.h"
#include "backend/bsys.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

/*
 * When a read goes to a helper, the requester polls this long before it
 * sleeps: a read the backend's page cache holds returns within it, and a
 * sleep and wake-up per request cost more than the poll.
 */
#define READ_SPIN_NS (500ull * 1000)
#define PAGE 4096u
#define PIPE_BYTES (1u << 20)	/* every Linux lets an unprivileged process size this */
#define POOL_MAX 16
#define POOL_BUF (1u << 20)

struct piece {
	struct cfd *f;	/* a reference of the call's */
	uint64_t foff;
	size_t len;
	size_t piped;	/* the first bytes, in the pipe */
	size_t at;	/* the rest: at buf + at */
};

struct bread {
	struct bcall c;
	uint32_t n;
	struct piece *p;
	bool may_pipe;
	int pipe[2];
	unsigned pipe_slots, slots;	/* the pipe's page slots: all, and free */
	char *buf;
	size_t cap;
};

static struct {
	pthread_mutex_t lock;
	char *bufs[POOL_MAX];
	int pipes[POOL_MAX][2];
	unsigned slots[POOL_MAX];
	unsigned nbufs, npipes;
} pool = { .lock = PTHREAD_MUTEX_INITIALIZER };

static char *buf_take(size_t len, size_t *cap)
{
	char *b = NULL;

	*cap = len > POOL_BUF ? len : POOL_BUF;
	if (*cap == POOL_BUF) {
		pthread_mutex_lock(&pool.lock);
		if (pool.nbufs)
			b = pool.bufs[--pool.nbufs];
		pthread_mutex_unlock(&pool.lock);
	}
	return b ? b : xmalloc(*cap);
}

static void pipe_take(struct bread *r)
{
	pthread_mutex_lock(&pool.lock);
	if (pool.npipes) {
		pool.npipes--;
		r->pipe[0] = pool.pipes[pool.npipes][0];
		r->pipe[1] = pool.pipes[pool.npipes][1];
		r->pipe_slots = pool.slots[pool.npipes];
	}
	pthread_mutex_unlock(&pool.lock);
	if (r->pipe[0] < 0 && pipe2(r->pipe, O_CLOEXEC) == 0) {
		fcntl(r->pipe[0], F_SETPIPE_SZ, (int)PIPE_BYTES);
		int sz = fcntl(r->pipe[0], F_GETPIPE_SZ);
		r->pipe_slots = sz > 0 ? (unsigned)sz / PAGE : 0;
	}
	r->slots = r->pipe_slots;
}

/* Back to the pool, or closed: a pipe that still holds bytes (a reply that failed) is not reused. */
static void pool_give(struct bread *r)
{
	int left = 0;
	bool keep_pipe = r->pipe[0] >= 0 && ioctl(r->pipe[0], FIONREAD, &left) == 0 && left == 0;

	pthread_mutex_lock(&pool.lock);
	if (r->buf && r->cap == POOL_BUF && pool.nbufs < POOL_MAX) {
		pool.bufs[pool.nbufs++] = r->buf;
		r->buf = NULL;
	}
	if (keep_pipe && pool.npipes < POOL_MAX) {
		pool.pipes[pool.npipes][0] = r->pipe[0];
		pool.pipes[pool.npipes][1] = r->pipe[1];
		pool.slots[pool.npipes++] = r->pipe_slots;
		r->pipe[0] = r->pipe[1] = -1;
	}
	pthread_mutex_unlock(&pool.lock);
	free(r->buf);
	if (r->pipe[0] >= 0) {
		close(r->pipe[0]);
		close(r->pipe[1]);
	}
}

/* Pages of the pipe that [off, off + len) of a file takes (one per page it touches). */
static unsigned pages_of(uint64_t off, size_t len)
{
	return len ? (unsigned)((off + len + PAGE - 1) / PAGE - off / PAGE) : 0;
}

/* Splice what fits of p into the pipe: p->piped bytes went in; -errno on a read error. */
static int piece_splice(struct bread *r, struct piece *p)
{
	off_t off = (off_t)p->foff;
	unsigned need = pages_of(p->foff, p->len);

	if (r->pipe[1] < 0 || need > r->slots)
		return 0;
	while (p->piped < p->len) {
		ssize_t n = bsys.splice(p->f->fd, &off, r->pipe[1], p->len - p->piped);
		if (n == -EINTR)
			continue;
		if (n < 0)
			return n == -EINVAL ? 0 : (int)n;	/* EINVAL: cannot splice this file */
		if (n == 0)
			break;	/* the file ends here: the rest reads as zeros */
		p->piped += (size_t)n;
	}
	/* Pages it took: a bound (pages_of), and the pipe's slots are few. */
	r->slots -= pages_of(p->foff, p->piped);
	return 0;
}

static int bread_run(struct bcall *c)
{
	struct bread *r = CKPT_CONTAINER_OF(c, struct bread, c);
	size_t rest = 0;
	int err = 0;

	if (r->may_pipe)
		pipe_take(r);
	for (uint32_t i = 0; err == 0 && i < r->n; i++) {
		struct piece *p = &r->p[i];
		/* Once a piece is not all in the pipe, the later ones are not either. */
		if (rest == 0 && (err = piece_splice(r, p)) < 0)
			break;
		p->at = rest;
		rest += p->len - p->piped;
	}
	if (err == 0 && rest)
		r->buf = buf_take(rest, &r->cap);
	for (uint32_t i = 0; err == 0 && i < r->n; i++) {
		struct piece *p = &r->p[i];
		if (p->piped < p->len)
			err = cfd_read_full(p->f, r->buf + p->at, p->len - p->piped,
					    p->foff + p->piped, bsys.pread);
	}
	return err;
}

void bread_free(struct bread *r)
{
	if (!r)
		return;
	for (uint32_t i = 0; i < r->n; i++)
		cfd_put(r->p[i].f);
	free(r->p);
	pool_give(r);
	free(r);
}

static void bread_drop(struct bcall *c)
{
	bread_free(CKPT_CONTAINER_OF(c, struct bread, c));
}

static struct bread *bread_new(uint32_t n, bool may_pipe)
{
	struct bread *r = xcalloc(1, sizeof(*r));

	r->c = (struct bcall){ .run = bread_run, .drop = bread_drop, .what = "read file data",
			       .spin_ns = READ_SPIN_NS };
	r->p = xcalloc(n ? n : 1, sizeof(*r->p));
	r->may_pipe = may_pipe;
	r->pipe[0] = r->pipe[1] = -1;
	return r;
}

/* Run it on a helper: 0 (the caller owns r) or -errno (r is gone or freed). */
static int bread_call(struct ckptfs *fs, struct bread *r)
{
	int err, res = bcall_run(fs, &r->c, &err);

	if (res == BCALL_GONE)
		return err;
	if (res < 0)
		bread_free(r);
	return res;
}

int bread_segs(struct ckptfs *fs, fuse_req_t req, const struct cseg *segs, uint32_t nseg,
	       struct bread **out)
{
	struct bcall_watch w;
	uint32_t n = 0;
	int e;

	*out = NULL;
	for (uint32_t i = 0; i < nseg; i++)
		n += segs[i].kind == CSEG_FD;
	struct bread *r = bread_new(n, true);
	for (uint32_t i = 0; i < nseg; i++)
		if (segs[i].kind == CSEG_FD)
			r->p[r->n++] = (struct piece){ .f = cfd_get(segs[i].f),
						       .foff = segs[i].foff, .len = segs[i].len };
	/* In this thread, watched: no hand-off on the data path. */
	if ((e = bcall_watch_begin(fs, &w, req)) == -EBUSY) {
		if ((e = bread_call(fs, r)) == 0)
			*out = r;
		return e;
	}
	if (e == 0)
		e = bread_run(&r->c);
	if (!bcall_watch_end(fs, &w)) {
		bread_free(r);
		return BREAD_ANSWERED;
	}
	if (e < 0)
		bread_free(r);
	else
		*out = r;
	return e;
}

const char *bread_piece(const struct bread *r, uint32_t k, size_t *piped)
{
	*piped = r->p[k].piped;
	return r->buf ? r->buf + r->p[k].at : NULL;
}

int bread_pipe(const struct bread *r)
{
	return r->pipe[0];
}

int bread_fd(void *arg, struct cfd *f, void *buf, size_t len, uint64_t off)
{
	struct bread *r = bread_new(1, false);

	r->p[0] = (struct piece){ .f = cfd_get(f), .foff = off, .len = len };
	r->n = 1;
	int e = bread_call(arg, r);
	if (e == 0) {
		memcpy(buf, r->buf, len);
		bread_free(r);
	}
	return e;
}
