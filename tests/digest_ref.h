/*
 * digest_ref.h — an independent reference implementation of the file
 * digest that the manifest records (format 2, docs/manifest.md "Digest"),
 * for tests.  It shares no code with backend/digest.c: it reads every byte
 * with read(2) (no SEEK_DATA), lists one leaf per 1 MiB block, then
 * compresses the list into runs and hashes the encoded run list in one
 * call, straight from the text of the definition.  Slow and simple on
 * purpose; for files of test size (or models, td_digest_fill).
 */
#ifndef CKPTFS_TESTS_DIGEST_REF_H
#define CKPTFS_TESTS_DIGEST_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Fill buf with the len bytes at off of the content being digested; return
 * false instead when they are all zeros (buf is then ignored).
 */
typedef bool (*td_fill_fn)(void *arg, uint64_t off, size_t len, void *buf);

/* The digest of `size` bytes described by fill, as 32 hex digits. */
void td_digest_fill(uint64_t size, td_fill_fn fill, void *arg, char hex[33]);

/*
 * A model of a sparse file: pieces of the harness's fill_pattern (seeded,
 * by file offset), later pieces over earlier ones, zeros elsewhere.
 * td_fill_pieces is its td_fill_fn (arg: a struct td_pieces).
 */
struct td_piece {
	uint64_t off, len, seed;
};
struct td_pieces {
	const struct td_piece *p;
	size_t n;
};
bool td_fill_pieces(void *arg, uint64_t off, size_t len, void *buf);
/* The digest of a buffer. */
void td_digest_buf(const void *buf, size_t len, char hex[33]);
/* The digest of a file, read whole with read(2); 0 or -errno. */
int td_digest_file(const char *path, char hex[33]);
/* XXH3-128 of a whole file (format-1 manifests); 0 or -errno. */
int td_flat_file(const char *path, char hex[33]);

#endif
