/*
 * digest.c — the digest of a file version, whose cost is proportional to
 * the file's data, not to its size (docs/manifest.md, "Digest", is the
 * normative text; keep the two in step).
 *
 * Definition (manifest format 2).  Let S be the file size and B = 1 MiB
 * (DIGEST_BLOCK).  Cut the file into blocks of B bytes, the last one short
 * (S mod B bytes) when B does not divide S; an empty file has no blocks.
 *   leaf(i)  = XXH3-128 (seed 0) of block i's bytes;
 *   runs     = the maximal runs of consecutive equal leaves, in file order,
 *              each a pair (leaf L, count n of blocks);
 *   digest   = XXH3-128 (seed 0) of the concatenation, over the runs, of
 *              canonical(L) (16 bytes: the high 64 bits big-endian, then the
 *              low 64 bits big-endian — XXH128_canonicalFromHash) followed
 *              by n as 8 bytes little-endian; and after the last run, S as
 *              8 bytes little-endian.
 * It is a function of the bytes alone: a hole and written zeros give the
 * same digest, so verify does not care whether a backend kept the holes.
 *
 * Cost.  Every data byte is hashed once, as XXH3-128 of the whole file
 * would be (same throughput: blocks are hashed one-shot where aligned, the
 * run list adds 24 bytes per run).  A run of zero bytes (digest_zeros)
 * costs O(1) for the whole blocks it covers — their leaf is the leaf of B
 * zero bytes, computed once per process — plus hashing the zeros of at
 * most two partial blocks at its ends, which a 1 PiB hole costs as much as
 * a 1 MiB one.  A new version of a published file hashes only the blocks
 * it changed (digest_known): the flushers name the blocks whose bytes all
 * come, unchanged, from the published file, and their leaves are taken
 * from the leaves kept when that file was flushed.  Without that, a small
 * change to a big sparse file re-hashed every block holding data — the
 * zeros around each small extent included — for every version.
 *
 * Readers of backend files (digest_fd) find holes with SEEK_DATA/SEEK_HOLE
 * and feed them as zeros without reading them; data is read in 4 MiB
 * sequential reads.  digest_data_extents() is that walk, shared with the
 * flushers, which copy only the data extents of a published file.
 *
 * Format 1 (older manifests) recorded the XXH3-128 of the whole file;
 * digest_fd_kind(DIGEST_FLAT) still computes it, at the old cost, so
 * verify can check files those mounts published.
 *
 * No locks: a struct digest belongs to one thread; the zero leaf is set
 * once under pthread_once.
 */
#include "backend/digest.h"
#include "cache/cfile.h"
#include "cache/util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DIGEST_READ (4u << 20)	/* bytes per read in digest_fd */

static char zero_block[DIGEST_BLOCK];
static XXH128_hash_t zero_leaf;
static pthread_once_t zero_once = PTHREAD_ONCE_INIT;

static void zero_leaf_init(void)
{
	zero_leaf = XXH3_128bits(zero_block, DIGEST_BLOCK);
}

void digest_init(struct digest *d)
{
	memset(d, 0, sizeof(*d));
	pthread_once(&zero_once, zero_leaf_init);
	d->leaf = XXH3_createState();
	d->top = XXH3_createState();
	if (!d->leaf || !d->top)
		abort();
	XXH3_128bits_reset(d->leaf);
	XXH3_128bits_reset(d->top);
}

static void put_le64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* Close the current run: canonical leaf, then its length. */
static void run_emit(struct digest *d)
{
	unsigned char rec[sizeof(XXH128_canonical_t) + 8];
	XXH128_canonical_t c;

	if (!d->nrun)
		return;
	XXH128_canonicalFromHash(&c, d->run);
	memcpy(rec, &c, sizeof(c));
	put_le64(rec + sizeof(c), d->nrun);
	XXH3_128bits_update(d->top, rec, sizeof(rec));
	d->nrun = 0;
}

/* Append n blocks of `leaf` to a leaf record, merging with its last run. */
static void rec_add(struct cleaves *lv, XXH128_hash_t leaf, uint64_t n)
{
	struct cleaf_run *t = lv->n ? &lv->run[lv->n - 1] : NULL;

	lv->blocks += n;
	if (t && t->hi == leaf.high64 && t->lo == leaf.low64) {
		t->n += n;
		return;
	}
	if (lv->n == lv->cap) {
		lv->cap = lv->cap ? 2 * lv->cap : 16;
		lv->run = xrealloc(lv->run, lv->cap * sizeof(*lv->run));
	}
	lv->run[lv->n++] = (struct cleaf_run){ .hi = leaf.high64, .lo = leaf.low64, .n = n };
}

/* n more whole blocks whose leaf is `leaf`. */
static void run_add(struct digest *d, XXH128_hash_t leaf, uint64_t n)
{
	if (d->nrun && !XXH128_isEqual(d->run, leaf))
		run_emit(d);
	d->run = leaf;
	d->nrun += n;
	if (d->rec)
		rec_add(d->rec, leaf, n);
}

void digest_record(struct digest *d)
{
	if (!d->rec)
		d->rec = cleaves_new();
}

struct cleaves *digest_take_leaves(struct digest *d)
{
	struct cleaves *lv = d->rec;

	d->rec = NULL;
	return lv;
}

bool digest_feed_leaves(struct digest *d, const struct cleaves *lv, uint64_t first, uint64_t n)
{
	uint64_t at = 0;

	if (d->fill || !lv || first > lv->blocks || n > lv->blocks - first)
		return false;
	d->size += n * DIGEST_BLOCK;
	for (uint32_t i = 0; i < lv->n && n; i++) {
		const struct cleaf_run *r = &lv->run[i];
		if (at + r->n > first) {
			uint64_t skip = first > at ? first - at : 0;
			uint64_t k = CKPT_MIN(r->n - skip, n);
			run_add(d, (XXH128_hash_t){ .low64 = r->lo, .high64 = r->hi }, k);
			first += k;
			n -= k;
		}
		at += r->n;
	}
	return true;
}

/* Feed len (< what completes the block, or exactly that) into the open block. */
static void leaf_feed(struct digest *d, const void *buf, size_t len)
{
	d->hashed += len;
	XXH3_128bits_update(d->leaf, buf, len);
	d->fill += len;
	if (d->fill == DIGEST_BLOCK) {
		run_add(d, XXH3_128bits_digest(d->leaf), 1);
		XXH3_128bits_reset(d->leaf);
		d->fill = 0;
	}
}

/* ---- known blocks ------------------------------------------------------- */

void digest_known(struct digest *d, const struct cleaves *lv, const struct digest_range *r,
		  uint32_t n)
{
	d->kl = n ? lv : NULL;
	d->kr = r;
	d->nkr = lv ? n : 0;
	d->kcur = d->krun = 0;
	d->krun_at = 0;
}

/* Whether block blk is known; moves the range cursor (positions only grow). */
static bool known_block(struct digest *d, uint64_t blk)
{
	while (d->kcur < d->nkr && d->kr[d->kcur].b1 <= blk)
		d->kcur++;
	return d->kcur < d->nkr && d->kr[d->kcur].b0 <= blk;
}

/* Leaf of known block blk (blocks are asked for in increasing order). */
static XXH128_hash_t known_leaf(struct digest *d, uint64_t blk)
{
	const struct cleaves *lv = d->kl;

	while (d->krun + 1 < lv->n && d->krun_at + lv->run[d->krun].n <= blk)
		d->krun_at += lv->run[d->krun++].n;
	return (XXH128_hash_t){ .low64 = lv->run[d->krun].lo, .high64 = lv->run[d->krun].hi };
}

/*
 * At most len bytes at the position, while it is in a known block: counted,
 * not hashed, and the block's leaf added when it is complete.  Returns the
 * bytes taken (0: the position is not in a known block).
 */
static uint64_t known_take(struct digest *d, uint64_t len)
{
	uint64_t blk = d->size / DIGEST_BLOCK;

	if (!d->nkr || !known_block(d, blk))
		return 0;
	uint64_t n = CKPT_MIN(len, (blk + 1) * DIGEST_BLOCK - d->size);
	d->size += n;
	if (d->size % DIGEST_BLOCK == 0)
		run_add(d, known_leaf(d, blk), 1);
	return n;
}

/* Bytes from the position to the start of the next known block (all of len if none). */
static uint64_t until_known(struct digest *d, uint64_t len)
{
	if (!d->nkr)
		return len;
	known_block(d, d->size / DIGEST_BLOCK);	/* not known: the cursor is on the next range */
	if (d->kcur == d->nkr)
		return len;
	return CKPT_MIN(len, d->kr[d->kcur].b0 * DIGEST_BLOCK - d->size);
}

bool digest_skip(struct digest *d, uint64_t len)
{
	if (!len)
		return true;
	uint64_t first = d->size / DIGEST_BLOCK, last = (d->size + len - 1) / DIGEST_BLOCK;
	if (!d->nkr || !known_block(d, first) || d->kr[d->kcur].b1 <= last)
		return false;
	while (len)
		len -= known_take(d, len);
	return true;
}

/* ---- feeding ------------------------------------------------------------ */

static void hash_bytes(struct digest *d, const char *p, size_t len)
{
	d->size += len;
	if (d->fill) {
		size_t n = (size_t)CKPT_MIN((uint64_t)len, DIGEST_BLOCK - d->fill);
		leaf_feed(d, p, n);
		p += n;
		len -= n;
	}
	for (; len >= DIGEST_BLOCK; p += DIGEST_BLOCK, len -= DIGEST_BLOCK) {
		d->hashed += DIGEST_BLOCK;
		run_add(d, XXH3_128bits(p, DIGEST_BLOCK), 1);	/* one-shot: same leaf */
	}
	if (len)
		leaf_feed(d, p, len);
}

void digest_update(struct digest *d, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		uint64_t k = known_take(d, len);
		if (!k) {
			k = until_known(d, len);
			hash_bytes(d, p, (size_t)k);
		}
		p += k;
		len -= (size_t)k;
	}
}

static void hash_zeros(struct digest *d, uint64_t len)
{
	d->size += len;
	if (d->fill) {
		size_t n = (size_t)CKPT_MIN(len, DIGEST_BLOCK - d->fill);
		leaf_feed(d, zero_block, n);
		len -= n;
	}
	if (len >= DIGEST_BLOCK) {
		run_add(d, zero_leaf, len / DIGEST_BLOCK);
		len %= DIGEST_BLOCK;
	}
	if (len)
		leaf_feed(d, zero_block, (size_t)len);
}

void digest_zeros(struct digest *d, uint64_t len)
{
	while (len) {
		uint64_t k = known_take(d, len);
		if (!k) {
			k = until_known(d, len);
			hash_zeros(d, k);
		}
		len -= k;
	}
}

XXH128_hash_t digest_final(struct digest *d)
{
	unsigned char sz[8];
	XXH128_hash_t h;

	if (d->fill)	/* the short last block (a record not taken is freed below) */
		run_add(d, XXH3_128bits_digest(d->leaf), 1);
	run_emit(d);
	put_le64(sz, d->size);
	XXH3_128bits_update(d->top, sz, sizeof(sz));
	h = XXH3_128bits_digest(d->top);
	digest_free(d);
	return h;
}

void digest_free(struct digest *d)
{
	XXH3_freeState(d->leaf);
	XXH3_freeState(d->top);
	d->leaf = d->top = NULL;
	cleaves_put(d->rec);
	d->rec = NULL;
}

/* ---- extents ------------------------------------------------------------ */

int digest_data_extents(int fd, uint64_t off, uint64_t len, digest_extent_fn cb, void *arg)
{
	const uint64_t end = off + len;
	uint64_t p = off;

	while (p < end) {
		off_t d = lseek(fd, (off_t)p, SEEK_DATA), h;
		if (d < 0 && errno == ENXIO)
			return 0;	/* no data at or after p: the rest is a hole */
		if (d < 0 && (errno == EINVAL || errno == EOPNOTSUPP))
			return cb(arg, p, end - p);	/* cannot tell: all data */
		if (d < 0)
			return -errno;
		if ((uint64_t)d >= end)
			return 0;
		h = lseek(fd, d, SEEK_HOLE);
		if (h < 0 && errno == ENXIO)
			return 0;	/* cut meanwhile */
		if (h < 0)
			return -errno;
		uint64_t e = CKPT_MIN((uint64_t)h, end);
		int r = cb(arg, (uint64_t)d, e - (uint64_t)d);
		if (r)
			return r;
		p = e;
	}
	return 0;
}

/* ---- files -------------------------------------------------------------- */

struct fd_walk {
	int fd;
	enum digest_kind kind;
	struct digest d;
	XXH3_state_t *flat;
	char *buf;
	uint64_t pos;		/* everything before it is fed */
	bool eof;		/* the file ended before its size */
};

static void walk_zeros(struct fd_walk *w, uint64_t len)
{
	if (w->kind != DIGEST_FLAT) {
		digest_zeros(&w->d, len);
	} else {
		for (uint64_t done = 0; done < len;) {
			size_t n = (size_t)CKPT_MIN(len - done, DIGEST_BLOCK);
			XXH3_128bits_update(w->flat, zero_block, n);
			done += n;
		}
	}
	w->pos += len;
}

/* Read [w->pos, w->pos + len) (len UINT64_MAX: to EOF), feeding it. */
static int walk_read(struct fd_walk *w, uint64_t len)
{
	while (len) {
		size_t want = (size_t)CKPT_MIN(len, DIGEST_READ);
		ssize_t n = pread(w->fd, w->buf, want, (off_t)w->pos);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == ESPIPE)	/* a pipe: plain reads */
			n = read(w->fd, w->buf, want);
		if (n < 0)
			return -errno;
		if (n == 0) {
			w->eof = true;
			return 1;
		}
		if (w->kind != DIGEST_FLAT)
			digest_update(&w->d, w->buf, (size_t)n);
		else
			XXH3_128bits_update(w->flat, w->buf, (size_t)n);
		w->pos += (uint64_t)n;
		if (len != UINT64_MAX)
			len -= (uint64_t)n;
	}
	return 0;
}

static int walk_extent(void *arg, uint64_t start, uint64_t len)
{
	struct fd_walk *w = arg;

	if (start > w->pos)
		walk_zeros(w, start - w->pos);
	return walk_read(w, len);
}

int digest_fd_kind(int fd, enum digest_kind kind, XXH128_hash_t *out, uint64_t *size)
{
	struct fd_walk w = { .fd = fd, .kind = kind };
	struct stat st;
	int r;

	if (fstat(fd, &st) < 0)
		return -errno;
	pthread_once(&zero_once, zero_leaf_init);
	if (kind != DIGEST_FLAT) {
		digest_init(&w.d);
	} else {
		w.flat = XXH3_createState();
		XXH3_128bits_reset(w.flat);
	}
	w.buf = xmalloc(DIGEST_READ);
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	if (!S_ISREG(st.st_mode)) {
		r = walk_read(&w, UINT64_MAX);
	} else {
		r = digest_data_extents(fd, 0, (uint64_t)st.st_size, walk_extent, &w);
		if (r >= 0 && !w.eof && w.pos < (uint64_t)st.st_size)
			walk_zeros(&w, (uint64_t)st.st_size - w.pos);	/* a hole at the end */
	}
	free(w.buf);
	if (kind != DIGEST_FLAT) {
		*out = digest_final(&w.d);
	} else {
		*out = XXH3_128bits_digest(w.flat);
		XXH3_freeState(w.flat);
	}
	if (size)
		*size = w.pos;
	return r < 0 ? r : 0;
}

int digest_fd(int fd, XXH128_hash_t *out, uint64_t *size)
{
	return digest_fd_kind(fd, DIGEST_RUNS, out, size);
}
