/*
 * bread.h — reads of backend file data that a request handler makes,
 * waited for boundedly.
 *
 * Data the cache does not hold comes from backend files: a read through
 * the daemon (passthrough off, or not possible for that open) of ranges
 * only a backend file holds, and a write into part of a chunk whose other
 * bytes are in a backend file (the cache fills the rest under the file's
 * lock).  Each such read is a backend call (fs/bcall.h): a helper thread
 * reads into a buffer of its own, and the handler waits at most
 * drain_timeout — EIO over a hung backend, ESHUTDOWN when the session
 * ends — so neither a worker nor a file's lock is held for as long as the
 * backend hangs.  The buffer belongs to the call: a helper that returns
 * after its requester left frees it, and never writes into cache memory.
 */
#ifndef CKPTFS_FS_BREAD_H
#define CKPTFS_FS_BREAD_H

#include "cache/cfile.h"

#include <fuse_lowlevel.h>
#include <stddef.h>
#include <stdint.h>

struct ckptfs;
struct bread;

/*
 * Read the CSEG_FD segments of segs[0..nseg) (other kinds are skipped)
 * for req: 0 with *out set; -errno (EIO after drain_timeout, ESHUTDOWN);
 * or BREAD_ANSWERED: req was answered meanwhile (the call hung past
 * drain_timeout, or the session ended) and must not be touched again.
 * The k-th FD segment's first *piped bytes wait in bread_pipe(*out), in
 * segment order, and the rest are at what bread_piece() returns (zeros
 * past the end of a backend file shorter than the segment).  bread_free()
 * releases them (a pipe not emptied is closed).
 */
#define BREAD_ANSWERED 1
int bread_segs(struct ckptfs *fs, fuse_req_t req, const struct cseg *segs, uint32_t nseg,
	       struct bread **out);
const char *bread_piece(const struct bread *r, uint32_t k, size_t *piped);
int bread_pipe(const struct bread *r);
void bread_free(struct bread *r);

/* The cache's read_fd hook (struct cache): len bytes of f at off into buf. */
int bread_fd(void *fs, struct cfd *f, void *buf, size_t len, uint64_t off);

#endif
