/*
 * digest_ref.c — the reference digest for tests (digest_ref.h).
 */
#include "tests/digest_ref.h"
#include "tests/harness.h"	/* fill_pattern */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#define TD_BLOCK (1u << 20)

static void td_hex(XXH128_hash_t h, char hex[33])
{
	snprintf(hex, 33, "%016llx%016llx", (unsigned long long)h.high64,
		 (unsigned long long)h.low64);
}

void td_digest_fill(uint64_t size, td_fill_fn fill, void *arg, char hex[33])
{
	unsigned char *buf = malloc(TD_BLOCK), *zeros = calloc(1, TD_BLOCK), *enc;
	struct { XXH128_hash_t leaf; uint64_t n; } *runs = NULL;
	size_t nruns = 0, cap = 0, len = 0;
	const XXH128_hash_t zleaf = XXH3_128bits(zeros, TD_BLOCK);	/* of a whole zero block */

	/* One leaf per block, merged into the last run when equal. */
	for (uint64_t off = 0; off < size; off += TD_BLOCK) {
		size_t n = size - off < TD_BLOCK ? (size_t)(size - off) : TD_BLOCK;
		XXH128_hash_t leaf = fill(arg, off, n, buf) ? XXH3_128bits(buf, n) :
				     n == TD_BLOCK ? zleaf : XXH3_128bits(zeros, n);
		if (nruns && XXH128_isEqual(runs[nruns - 1].leaf, leaf)) {
			runs[nruns - 1].n++;
			continue;
		}
		if (nruns == cap) {
			cap = cap ? 2 * cap : 64;
			runs = realloc(runs, cap * sizeof(*runs));
		}
		runs[nruns].leaf = leaf;
		runs[nruns++].n = 1;
	}
	/* Each run: 16 bytes of the canonical (big-endian) leaf, 8 of count (LE); then size (LE). */
	enc = malloc(nruns * 24 + 8);
	for (size_t i = 0; i < nruns; i++) {
		for (int b = 0; b < 8; b++) {
			enc[len + b] = (unsigned char)(runs[i].leaf.high64 >> (56 - 8 * b));
			enc[len + 8 + b] = (unsigned char)(runs[i].leaf.low64 >> (56 - 8 * b));
			enc[len + 16 + b] = (unsigned char)(runs[i].n >> (8 * b));
		}
		len += 24;
	}
	for (int b = 0; b < 8; b++)
		enc[len + b] = (unsigned char)(size >> (8 * b));
	len += 8;
	td_hex(XXH3_128bits(enc, len), hex);
	free(enc);
	free(runs);
	free(buf);
	free(zeros);
}

bool td_fill_pieces(void *arg, uint64_t off, size_t len, void *buf)
{
	const struct td_pieces *m = arg;
	bool any = false;

	for (size_t i = 0; i < m->n; i++) {
		const struct td_piece *p = &m->p[i];
		uint64_t lo = p->off > off ? p->off : off;
		uint64_t hi = p->off + p->len < off + len ? p->off + p->len : off + len;
		if (lo >= hi)
			continue;
		if (!any)
			memset(buf, 0, len);
		any = true;
		fill_pattern((char *)buf + (lo - off), hi - lo, p->seed, lo);
	}
	return any;
}

struct td_mem {
	const unsigned char *p;
};

static bool fill_mem(void *arg, uint64_t off, size_t len, void *buf)
{
	memcpy(buf, ((struct td_mem *)arg)->p + off, len);
	return true;
}

void td_digest_buf(const void *buf, size_t len, char hex[33])
{
	struct td_mem m = { buf };
	td_digest_fill(len, fill_mem, &m, hex);
}

/* The whole file into memory with read(2). */
static unsigned char *slurp(const char *path, size_t *len, int *err)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW);
	unsigned char *data = NULL;
	size_t cap = 0;

	*len = 0;
	if (fd < 0) {
		*err = -errno;
		return NULL;
	}
	for (;;) {
		if (*len == cap) {
			cap = cap ? 2 * cap : TD_BLOCK;
			data = realloc(data, cap);
		}
		ssize_t n = read(fd, data + *len, cap - *len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			*err = -errno;
			close(fd);
			free(data);
			return NULL;
		}
		if (n == 0)
			break;
		*len += (size_t)n;
	}
	close(fd);
	*err = 0;
	return data;
}

/* The file whole with read(2), then its digest (flat: XXH3-128 of it all). */
static int digest_slurped(const char *path, bool flat, char hex[33])
{
	size_t len;
	int err;
	unsigned char *data = slurp(path, &len, &err);

	if (!data)
		return err;
	if (flat)
		td_hex(XXH3_128bits(data, len), hex);
	else
		td_digest_buf(data, len, hex);
	free(data);
	return 0;
}

int td_digest_file(const char *path, char hex[33])
{
	return digest_slurped(path, false, hex);
}

int td_flat_file(const char *path, char hex[33])
{
	return digest_slurped(path, true, hex);
}
