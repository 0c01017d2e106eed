/*
 * bio.c — io_uring and pwrite engines behind one interface (bio.h).
 *
 * io_uring: requests carry a slot index in user_data; slots remember the
 * caller's cookie, the op and its length so completions can pass through
 * the fault hook (bsys.io_result).  The ring has `depth` entries and never
 * more than `depth` requests in flight, so the completion queue cannot
 * overflow.  pwrite: each prepared request runs at once through the bsys
 * table and its completion is queued for the next bio_reap.
 */
#include "backend/bio.h"
#include "backend/bsys.h"
#include "cache/util.h"

#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>

struct bio_slot {
	void *cookie;
	int fd;
	size_t len;
	enum bsys_op op;
};

struct bio {
	enum bio_kind kind;
	unsigned depth;
	unsigned inflight;	/* prepared or submitted, not reaped */
	unsigned unsubmitted;
	struct io_uring ring;
	struct bio_slot *slots;
	unsigned *free_slots, nfree;
	struct bio_cqe *done;	/* pwrite: completions waiting for reap */
	unsigned ndone;
	atomic_uint_least64_t *written;	/* pwrite: bytes written, counted at once */
};

const char *bio_kind_name(enum bio_kind k) { return k == BIO_URING ? "io_uring" : "pwrite"; }
enum bio_kind bio_kind(const struct bio *b) { return b->kind; }
unsigned bio_space(const struct bio *b) { return b->depth - b->inflight; }
unsigned bio_inflight(const struct bio *b) { return b->inflight; }

struct bio *bio_create(enum bio_kind want, unsigned depth, const char **why)
{
	struct bio *b = xcalloc(1, sizeof(*b));

	*why = NULL;
	b->depth = depth ? depth : 1;
	b->kind = BIO_PWRITE;
	if (want == BIO_URING) {
		int r = io_uring_queue_init(b->depth, &b->ring, 0);
		if (r == 0)
			b->kind = BIO_URING;
		else if (r == -ENOSYS)
			*why = "io_uring is not supported by this kernel";
		else if (r == -EPERM)
			*why = "io_uring is disabled (kernel.io_uring_disabled or seccomp)";
		else
			*why = "io_uring setup failed";
	}
	b->slots = xcalloc(b->depth, sizeof(*b->slots));
	b->free_slots = xmalloc(b->depth * sizeof(unsigned));
	for (unsigned i = 0; i < b->depth; i++)
		b->free_slots[i] = i;
	b->nfree = b->depth;
	b->done = xcalloc(b->depth, sizeof(*b->done));
	return b;
}

void bio_destroy(struct bio *b)
{
	if (!b)
		return;
	if (b->kind == BIO_URING) {
		struct bio_cqe sink[16];
		while (b->inflight)
			bio_reap(b, sink, CKPT_ARRAY_LEN(sink), 1);
		io_uring_queue_exit(&b->ring);
	}
	free(b->slots);
	free(b->free_slots);
	free(b->done);
	free(b);
}

static struct io_uring_sqe *uring_sqe(struct bio *b, void *cookie, int fd, size_t len,
				      enum bsys_op op)
{
	unsigned slot = b->free_slots[--b->nfree];
	struct io_uring_sqe *sqe = io_uring_get_sqe(&b->ring);

	if (!sqe) {		/* cannot happen: ring depth == slot count */
		io_uring_submit(&b->ring);
		b->unsubmitted = 0;
		sqe = io_uring_get_sqe(&b->ring);
	}
	b->slots[slot] = (struct bio_slot){ .cookie = cookie, .fd = fd, .len = len, .op = op };
	io_uring_sqe_set_data64(sqe, slot);
	b->inflight++;
	b->unsubmitted++;
	return sqe;
}

static void pwrite_done(struct bio *b, void *cookie, int res)
{
	b->done[b->ndone].cookie = cookie;
	b->done[b->ndone].res = res;
	b->ndone++;
	b->inflight++;
}

void bio_prep_write(struct bio *b, int fd, const void *buf, size_t len, uint64_t off, void *cookie)
{
	if (b->kind == BIO_URING) {
		struct io_uring_sqe *sqe = uring_sqe(b, cookie, fd, len, BOP_PWRITE);
		io_uring_prep_write(sqe, fd, buf, (unsigned)len, off);
	} else {
		int res = (int)bsys.pwrite(fd, buf, len, (off_t)off);
		if (res > 0 && b->written)
			atomic_fetch_add(b->written, (uint64_t)res);
		pwrite_done(b, cookie, res);
	}
}

void bio_count_written(struct bio *b, atomic_uint_least64_t *ctr)
{
	b->written = ctr;
}

void bio_prep_fsync(struct bio *b, int fd, bool datasync, void *cookie)
{
	if (b->kind == BIO_URING) {
		struct io_uring_sqe *sqe = uring_sqe(b, cookie, fd, 0,
						     datasync ? BOP_FDATASYNC : BOP_FSYNC);
		io_uring_prep_fsync(sqe, fd, datasync ? IORING_FSYNC_DATASYNC : 0);
	} else {
		pwrite_done(b, cookie, datasync ? bsys.fdatasync(fd) : bsys.fsync(fd));
	}
}

unsigned bio_reap(struct bio *b, struct bio_cqe *out, unsigned max, unsigned wait_for)
{
	unsigned n = 0;

	if (b->kind == BIO_PWRITE) {
		n = CKPT_MIN(max, b->ndone);
		memcpy(out, b->done, n * sizeof(*out));
		memmove(b->done, b->done + n, (b->ndone - n) * sizeof(*out));
		b->ndone -= n;
		b->inflight -= n;
		return n;
	}
	wait_for = CKPT_MIN(wait_for, b->inflight);
	for (;;) {
		int r = io_uring_submit_and_wait(&b->ring, wait_for > n ? 1 : 0);
		if (r >= 0)
			b->unsubmitted = 0;
		else if (r != -EINTR && r != -EAGAIN && r != -EBUSY)
			break;
		struct io_uring_cqe *cqe;
		while (n < max && io_uring_peek_cqe(&b->ring, &cqe) == 0) {
			unsigned slot = (unsigned)io_uring_cqe_get_data64(cqe);
			struct bio_slot *s = &b->slots[slot];
			int res = cqe->res;
			io_uring_cqe_seen(&b->ring, cqe);
			if (bsys.faults_active)
				res = bsys.io_result(s->op, s->fd, s->len, res);
			out[n].cookie = s->cookie;
			out[n].res = res;
			n++;
			b->free_slots[b->nfree++] = slot;
			b->inflight--;
		}
		if (n >= wait_for || n >= max)
			break;
	}
	return n;
}
