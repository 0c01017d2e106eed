/*
 * bio.h — the flushers' I/O engine: io_uring, or pwrite where io_uring is
 * unavailable or not wanted (io=pwrite).  Both give the same interface and
 * the same semantics: prepare up to bio_space() requests, then submit and
 * reap completions.  A completion's res is bytes written or -errno; callers
 * resubmit short writes and -EAGAIN themselves.
 *
 * One bio per flusher thread; not shared between threads.
 */
#ifndef CKPTFS_BIO_H
#define CKPTFS_BIO_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum bio_kind { BIO_URING, BIO_PWRITE };

struct bio_cqe {
	void *cookie;
	int res;
};

struct bio;

/*
 * Create an engine of kind `want` with `depth` requests in flight.  If
 * io_uring cannot be set up, falls back to pwrite and stores the reason in
 * *why (static string), else *why = NULL.
 */
struct bio *bio_create(enum bio_kind want, unsigned depth, const char **why);
void bio_destroy(struct bio *b);
enum bio_kind bio_kind(const struct bio *b);
const char *bio_kind_name(enum bio_kind k);

/*
 * Count the bytes each pwrite-engine write has written into *ctr as the
 * call returns (its completion waits for the next bio_reap, after the rest
 * of the batch): so that a slow backend shows it moves.  io_uring
 * completions are reaped as they come, and counted by the caller.
 */
void bio_count_written(struct bio *b, atomic_uint_least64_t *ctr);

unsigned bio_space(const struct bio *b);
unsigned bio_inflight(const struct bio *b);
void bio_prep_write(struct bio *b, int fd, const void *buf, size_t len, uint64_t off, void *cookie);
void bio_prep_fsync(struct bio *b, int fd, bool datasync, void *cookie);
/*
 * Submit what was prepared and wait for at least min(wait_for, inflight)
 * completions; store up to max of them.  Returns how many were stored.
 */
unsigned bio_reap(struct bio *b, struct bio_cqe *out, unsigned max, unsigned wait_for);

#endif
