/*
 * digest.h — the digest of a file version: what the manifest records, what
 * verify and recovery recompute, what user.ckptfs.xxh3 shows and what
 * `ckptfs-ctl hash` prints.  One module; everyone who hashes a version or a
 * backend file calls it (see digest.c for the definition and its cost).
 *
 * Streaming use, in file order, any mix of pieces:
 *
 *     struct digest d;
 *     digest_init(&d);
 *     digest_update(&d, buf, len);	// bytes of the file
 *     digest_zeros(&d, len);		// a hole (or any run of zero bytes)
 *     XXH128_hash_t h = digest_final(&d);
 *
 * The result depends only on the bytes, never on how they were fed: a hole
 * and the same number of written zeros give the same digest, so a backend
 * that keeps holes and one that fills them verify alike.
 */
#ifndef CKPTFS_DIGEST_H
#define CKPTFS_DIGEST_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <xxhash.h>

/* Block size of the digest: part of its definition, never a tunable. */
#define DIGEST_BLOCK (1u << 20)

/*
 * Which digest a manifest record holds, by the manifest format of the mount
 * that wrote it: format 1 recorded the XXH3-128 of the whole file (cost
 * proportional to the size, holes included); format 2 records the block-run
 * digest defined in digest.c (cost proportional to the data).
 */
enum digest_kind {
	DIGEST_FLAT = 1,
	DIGEST_RUNS = 2,
};

/* Blocks [b0, b1) of a file: digest_known. */
struct digest_range {
	uint64_t b0, b1;
};

struct digest {
	XXH3_state_t *leaf;	/* the block being filled */
	XXH3_state_t *top;	/* the run list */
	uint64_t fill;		/* bytes in the block being filled */
	uint64_t size;		/* bytes fed so far */
	uint64_t hashed;	/* ... of them, through XXH3 (not taken as whole-block leaves) */
	XXH128_hash_t run;	/* leaf of the current run */
	uint64_t nrun;		/* blocks in the current run; 0 before the first block */
	struct cleaves *rec;	/* digest_record: the whole blocks' leaves, as fed */
	/* digest_known: blocks whose leaves are those of a published file */
	const struct cleaves *kl;
	const struct digest_range *kr;
	uint32_t nkr, kcur;	/* the ranges; the first that may hold the position */
	uint32_t krun;		/* cursor into kl's runs: the run that starts at block krun_at */
	uint64_t krun_at;
};

struct cleaves;

void digest_init(struct digest *d);
void digest_update(struct digest *d, const void *buf, size_t len);
/* len zero bytes, in O(1) for whole blocks (at most one block is hashed). */
void digest_zeros(struct digest *d, uint64_t len);
/*
 * Leaves.  digest_record() (right after digest_init) makes the digest keep
 * the leaf runs of the whole blocks fed; digest_take_leaves() hands them
 * over (a reference; call before digest_final, which frees what is not
 * taken).  digest_feed_leaves() feeds blocks [first, first + n) of a file
 * whose leaves are `lv`, in O(runs), without their bytes: only at a block
 * boundary of this digest and within lv->blocks (false, nothing fed, else).
 */
void digest_record(struct digest *d);
struct cleaves *digest_take_leaves(struct digest *d);
bool digest_feed_leaves(struct digest *d, const struct cleaves *lv, uint64_t first, uint64_t n);
/*
 * Known blocks.  digest_known() (before anything is fed) names blocks that
 * are known to hold the same bytes as the same blocks of a published file
 * whose leaves are `lv`: n ranges, sorted, not touching one another, each
 * within lv->blocks.  Bytes fed into a known block are then not hashed;
 * its leaf is taken from lv when the block is complete.  The caller keeps
 * lv and the ranges alive until digest_final.  digest_skip() feeds len
 * bytes without their contents, only if all of them lie in known blocks
 * (false, nothing fed, else): what lets a caller copy them unread.
 */
void digest_known(struct digest *d, const struct cleaves *lv, const struct digest_range *r,
		  uint32_t n);
bool digest_skip(struct digest *d, uint64_t len);

/* The digest of everything fed; frees the state (digest_init to reuse). */
XXH128_hash_t digest_final(struct digest *d);
/* Drop a digest without finishing it (error paths); safe after digest_final. */
void digest_free(struct digest *d);

/*
 * The digest of the file open at fd, of the given kind (DIGEST_RUNS: holes
 * found with SEEK_DATA/SEEK_HOLE are fed as zeros and never read; data in
 * large sequential reads).  Reads to end of file; *size gets the bytes it
 * covered.  Works on non-seekable files too (read to EOF).  0 or -errno.
 */
int digest_fd_kind(int fd, enum digest_kind kind, XXH128_hash_t *out, uint64_t *size);
/* digest_fd_kind(fd, DIGEST_RUNS, ...): the digest of current manifests. */
int digest_fd(int fd, XXH128_hash_t *out, uint64_t *size);

/*
 * The data extents of [off, off + len) of fd, in order: cb(arg, start,
 * length) for each; the gaps between them are holes.  A file system that
 * cannot tell (no SEEK_DATA) reports everything as data; ranges past the
 * end of the file are holes.  cb returns 0 to go on, or -errno to stop
 * (returned).  0 or -errno.
 */
typedef int (*digest_extent_fn)(void *arg, uint64_t start, uint64_t len);
int digest_data_extents(int fd, uint64_t off, uint64_t len, digest_extent_fn cb, void *arg);

#endif
