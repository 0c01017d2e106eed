/*
 * digest.c — backend/digest.c on its own, against the reference digest
 * (tests/digest_ref.h, written from the definition in docs/manifest.md
 * without sharing code) and against the definition itself:
 *
 *  1. sizes around the block size (0, 1, B-1, B, B+1, 3B+5, ...): one-shot,
 *     odd-sized pieces (1 byte up to a few blocks) and holes fed with
 *     digest_zeros all give the reference's digest;
 *  2. dense and sparse: the same content written as a dense file and as a
 *     sparse one (holes made by seeking; checked sparse where the file
 *     system keeps holes) has one digest through digest_fd, the same as the
 *     reference reading every byte and as the streaming API;
 *  3. zeros are not nothing: zeros vs one non-zero byte, N vs N+1 zeros,
 *     the order of equal runs, and a hole vs the same bytes as data at a
 *     different place all differ;
 *  4. a 1 PiB hole (digest_zeros, and a 1 PiB sparse file through
 *     digest_fd where the file system allows it) equals the digest built by
 *     hand from the definition: one run of the zero leaf, 2^30 blocks;
 *  5. a 1 TiB sparse file with scattered data: digest_fd equals the
 *     reference fed by a model of the file;
 *  6. format 1 (DIGEST_FLAT) is the XXH3-128 of the whole file, holes read
 *     as zeros; and digest_data_extents reports data, not holes;
 *  7. known blocks (check_known).
 */
#include "tests/integrity/integ.h"
#include "backend/digest.h"
#include "backend/manifest.h"
#include "cache/cfile.h"

#include <sys/stat.h>

#define B ((uint64_t)DIGEST_BLOCK)

static char scratch[PATH_MAX];

static void hex_of(XXH128_hash_t h, char hex[33])
{
	hash_hex(h, hex);
}

/* A deterministic generator for piece sizes. */
static uint64_t rng_state = 0x1234567;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* Content of `len` bytes: pattern with zero stretches (some block-aligned, some not). */
static unsigned char *content(size_t len, uint64_t seed)
{
	unsigned char *p = it_pattern(seed, len);
	for (size_t z = len / 5; z < len / 5 + len / 4; z++)
		p[z] = 0;
	if (len > 3 * B)
		memset(p + B, 0, B);	/* one whole zero block among data */
	return p;
}

/* Blocks whose leaves a digest takes from a published file's (digest_known), or none. */
struct known {
	const struct cleaves *lv;
	const struct digest_range *r;
	uint32_t n;
	bool skip;		/* feed pieces in known blocks with digest_skip, unread */
	uint64_t hashed;	/* out: bytes the digest hashed */
};

/*
 * Feed p as the flusher would: data in odd pieces, runs of >= 4 KiB zeros
 * as holes; with k, some blocks known.
 */
static XXH128_hash_t stream_known(const unsigned char *p, size_t len, bool holes, struct known *k)
{
	struct digest d;
	size_t i = 0;

	digest_init(&d);
	if (k)
		digest_known(&d, k->lv, k->r, k->n);
	while (i < len) {
		size_t z = 0;
		while (holes && i + z < len && p[i + z] == 0)
			z++;
		if (z >= 4096) {
			digest_zeros(&d, z);
			i += z;
			continue;
		}
		size_t n = 1 + rnd() % (rnd() % 3 ? 7000 : 3 * B);
		if (n > len - i)
			n = len - i;
		if (!(k && k->skip && digest_skip(&d, n)))
			digest_update(&d, p + i, n);
		i += n;
	}
	if (k)
		k->hashed = d.hashed;
	return digest_final(&d);
}

static XXH128_hash_t stream_mixed(const unsigned char *p, size_t len, bool holes)
{
	return stream_known(p, len, holes, NULL);
}

static void check_sizes(void)
{
	static const uint64_t sizes[] = { 0, 1, 4095, B - 1, B, B + 1, 2 * B, 3 * B + 5,
					  5 * B + B / 2 };
	for (size_t k = 0; k < CU_LEN(sizes); k++) {
		size_t len = (size_t)sizes[k];
		unsigned char *p = content(len, 7 + k);
		char want[33], got[33];
		struct digest d;

		td_digest_buf(p, len, want);
		digest_init(&d);
		digest_update(&d, p, len);
		hex_of(digest_final(&d), got);
		if (strcmp(got, want))
			FAILF("size %zu one-shot: %s, reference %s", len, got, want);
		for (int round = 0; round < 4; round++) {
			hex_of(stream_mixed(p, len, round & 1), got);
			if (strcmp(got, want))
				FAILF("size %zu in pieces (holes %d): %s, reference %s", len, round & 1, got,
				      want);
		}
		/* All zeros, fed as one hole and as data. */
		memset(p, 0, len);
		td_digest_buf(p, len, want);
		digest_init(&d);
		digest_zeros(&d, len);
		hex_of(digest_final(&d), got);
		if (strcmp(got, want))
			FAILF("%zu zeros as a hole: %s, reference %s", len, got, want);
		free(p);
	}
}

/* Write p to path, dense (every byte) or sparse (zero runs >= 4 KiB skipped). */
static void write_content(const char *path, const unsigned char *p, size_t len, bool sparse)
{
	int fd = cu_open(path, O_CREAT | O_WRONLY | O_TRUNC);
	size_t i = 0;

	while (i < len) {
		size_t n = 0;
		if (sparse) {
			while (i + n < len && p[i + n] == 0)
				n++;
			if (n >= 4096) {
				i += n;
				continue;
			}
		}
		n = len - i < 65536 ? len - i : 65536;
		cu_pwrite_all(fd, p + i, n, i);
		i += n;
	}
	CHECK_SYS(ftruncate(fd, (off_t)len));
	cu_close(fd);
}

static void digest_path(const char *path, enum digest_kind kind, char hex[33], uint64_t *size)
{
	XXH128_hash_t h;
	int fd = cu_open(path, O_RDONLY);
	int r = digest_fd_kind(fd, kind, &h, size);
	if (r < 0)
		FAILF("digest_fd %s: %s", path, strerror(-r));
	cu_close(fd);
	hex_of(h, hex);
}

static void check_dense_sparse(void)
{
	const size_t len = 9 * B + 12345;
	unsigned char *p = content(len, 99);
	char dense[PATH_MAX + 16], sparse[PATH_MAX + 16], want[33], a[33], b[33];
	uint64_t sa, sb;
	struct stat st;

	/* A hole at the start and a long one at the end too. */
	memset(p, 0, 70000);
	memset(p + 6 * B + 3, 0, len - 6 * B - 3);
	snprintf(dense, sizeof(dense), "%s/dense", scratch);
	snprintf(sparse, sizeof(sparse), "%s/sparse", scratch);
	write_content(dense, p, len, false);
	write_content(sparse, p, len, true);
	CHECK_SYS(stat(sparse, &st));
	if ((uint64_t)st.st_blocks * 512 >= len)
		fprintf(stderr, "note: %s keeps no holes here; checked as dense\n", scratch);
	td_digest_buf(p, len, want);
	digest_path(dense, DIGEST_RUNS, a, &sa);
	digest_path(sparse, DIGEST_RUNS, b, &sb);
	ASSERT_EQ(sa, len);
	ASSERT_EQ(sb, len);
	ASSERT_STR_EQ(a, want);
	ASSERT_STR_EQ(b, want);
	ASSERT_EQ(td_digest_file(sparse, b), 0);
	ASSERT_STR_EQ(b, want);
	hex_of(stream_mixed(p, len, true), b);
	ASSERT_STR_EQ(b, want);

	/* Format 1: XXH3-128 of every byte, holes read as zeros. */
	char flat[33];
	hex_of(XXH3_128bits(p, len), flat);
	digest_path(sparse, DIGEST_FLAT, a, &sa);
	ASSERT_STR_EQ(a, flat);
	ASSERT_EQ(td_flat_file(dense, b), 0);
	ASSERT_STR_EQ(b, flat);
	ASSERT_TRUE(strcmp(flat, want) != 0);
	free(p);
}

static void expect_differ(const unsigned char *x, size_t xl, const unsigned char *y, size_t yl,
			  const char *what)
{
	char a[33], b[33];
	struct digest d;

	digest_init(&d);
	digest_update(&d, x, xl);
	hex_of(digest_final(&d), a);
	digest_init(&d);
	digest_update(&d, y, yl);
	hex_of(digest_final(&d), b);
	if (!strcmp(a, b))
		FAILF("%s: both digest to %s", what, a);
}

static void check_differences(void)
{
	const size_t len = 4 * B;
	unsigned char *z = calloc(1, len + 1), *o = calloc(1, len + 1);
	unsigned char *x = it_pattern(5, B), *abz = calloc(1, 3 * B), *aab = calloc(1, 3 * B);

	o[len / 2] = 1;
	expect_differ(z, len, o, len, "zeros vs one non-zero byte");
	expect_differ(z, len, z, len + 1, "4 MiB vs 4 MiB + 1 of zeros");
	expect_differ(z, B, z, 2 * B, "one vs two zero blocks");
	expect_differ(z, 0, z, 1, "empty vs one zero byte");
	/* Runs: [A, 0, A] vs [A, A, 0] have the same leaves in another order. */
	memcpy(abz, x, B);
	memcpy(abz + 2 * B, x, B);
	memcpy(aab, x, B);
	memcpy(aab + B, x, B);
	expect_differ(abz, 3 * B, aab, 3 * B, "[A, 0, A] vs [A, A, 0]");
	/* The same data one block later, a hole before it instead of after. */
	memset(aab, 0, 3 * B);
	memset(abz, 0, 3 * B);
	memcpy(aab, x, B);
	memcpy(abz + B, x, B);
	expect_differ(aab, 2 * B, abz, 2 * B, "data then hole vs hole then data");
	free(z);
	free(o);
	free(x);
	free(abz);
	free(aab);
}

/* The digest of an all-zero file of `size` (a multiple of B), built by hand from the definition. */
static void hand_zero_digest(uint64_t size, char hex[33])
{
	unsigned char *zb = calloc(1, B), rec[32];
	XXH128_canonical_t c;
	uint64_t n = size / B;

	XXH128_canonicalFromHash(&c, XXH3_128bits(zb, B));
	memcpy(rec, c.digest, 16);
	for (int i = 0; i < 8; i++) {
		rec[16 + i] = (unsigned char)(n >> (8 * i));
		rec[24 + i] = (unsigned char)(size >> (8 * i));
	}
	hex_of(XXH3_128bits(rec, sizeof(rec)), hex);
	free(zb);
}

static void check_petabyte(void)
{
	const uint64_t pib = 1ull << 50;
	char want[33], got[33], path[PATH_MAX + 16];
	struct digest d;
	uint64_t size;

	hand_zero_digest(pib, want);
	digest_init(&d);
	digest_zeros(&d, pib / 3);	/* in uneven pieces: partial blocks at both ends */
	digest_zeros(&d, pib - pib / 3 - 1);
	digest_zeros(&d, 1);
	hex_of(digest_final(&d), got);
	ASSERT_STR_EQ(got, want);

	snprintf(path, sizeof(path), "%s/petabyte", scratch);
	int fd = cu_open(path, O_CREAT | O_WRONLY | O_TRUNC);
	int r = ftruncate(fd, (off_t)pib);
	cu_close(fd);
	if (r < 0) {
		fprintf(stderr, "note: no 1 PiB file on %s (%s); digest_fd not checked at 1 PiB\n",
			scratch, strerror(errno));
		unlink(path);
		return;
	}
	digest_path(path, DIGEST_RUNS, got, &size);
	ASSERT_EQ(size, pib);
	ASSERT_STR_EQ(got, want);
	unlink(path);
}

static int count_extent(void *arg, uint64_t start, uint64_t len)
{
	uint64_t *sum = arg;
	sum[0]++;
	sum[1] += len;
	return 0;
}

static void check_terabyte(void)
{
	const uint64_t size = 1ull << 40, piece = 64 * KiB + 7;
	static const uint64_t offs[] = { 0, 3 * B - 100, 77 * GiB + 12345, 512 * GiB,
					 (1ull << 40) - 5 * B - 3 };
	struct td_piece pieces[CU_LEN(offs)];
	struct td_pieces m = { pieces, CU_LEN(offs) };
	char path[PATH_MAX + 16], want[33], got[33];
	uint64_t got_size, sum[2] = { 0, 0 };

	snprintf(path, sizeof(path), "%s/terabyte", scratch);
	int fd = cu_open(path, O_CREAT | O_RDWR | O_TRUNC);
	if (ftruncate(fd, (off_t)size) < 0) {
		fprintf(stderr, "note: no 1 TiB file on %s: %s\n", scratch, strerror(errno));
		cu_close(fd);
		return;
	}
	for (size_t i = 0; i < m.n; i++) {
		pieces[i] = (struct td_piece){ offs[i], piece, 31 };
		cu_write_pattern_fd(fd, offs[i], piece, 31, 65536);
	}
	/* digest_data_extents: the data, not the size. */
	ASSERT_EQ(digest_data_extents(fd, 0, size, count_extent, sum), 0);
	ASSERT_GE(sum[1], m.n * piece);
	ASSERT_LE(sum[1], m.n * (piece + 2 * B));	/* file systems round extents up */
	sum[0] = sum[1] = 0;
	ASSERT_EQ(digest_data_extents(fd, size, 1 * GiB, count_extent, sum), 0);
	ASSERT_EQ(sum[1], 0);	/* past the end: nothing */
	cu_close(fd);
	td_digest_fill(size, td_fill_pieces, &m, want);
	digest_path(path, DIGEST_RUNS, got, &got_size);
	ASSERT_EQ(got_size, size);
	ASSERT_STR_EQ(got, want);
	unlink(path);
}

/*
 * 7. Known blocks: a new version fed with the blocks it did not change
 * named as known gets the reference digest of its own bytes, hashing only
 * the rest, whether the known bytes are fed or skipped; a block named
 * known that did change keeps the old leaf (the bytes are not looked at).
 */
static void check_known(void)
{
	const size_t len = 9 * B + 12345;	/* ten blocks, the last one short */
	unsigned char *a = content(len, 31), *b = malloc(len);
	char want[33], got[33];
	struct digest d;

	ASSERT_TRUE(b != NULL);
	digest_init(&d);
	digest_record(&d);
	digest_update(&d, a, len);
	struct cleaves *lv = digest_take_leaves(&d);
	digest_final(&d);
	ASSERT_TRUE(lv && lv->blocks == 9);	/* the leaves of whole blocks */

	/* Changed: a byte in block 2, bytes across blocks 5 and 6, the short last block. */
	memcpy(b, a, len);
	b[2 * B + 77] ^= 1;
	memset(b + 6 * B - 3, 0x5a, 6);
	b[len - 1] ^= 0xff;
	td_digest_buf(b, len, want);
	/* Unchanged and whole in a: 0-1, 3-4, 7-8 (9 is short: no leaf kept). */
	const struct digest_range r[] = { { 0, 2 }, { 3, 5 }, { 7, 9 } };
	for (int round = 0; round < 4; round++) {
		struct known k = { .lv = lv, .r = r, .n = CU_LEN(r), .skip = round >= 2 };
		hex_of(stream_known(b, len, round & 1, &k), got);
		if (strcmp(got, want))
			FAILF("known blocks (holes %d, skip %d): %s, reference %s", round & 1, k.skip, got,
			      want);
		/* Blocks 2, 5, 6 and the short 9: at most four blocks hashed. */
		if (k.hashed > 3 * B + 12345)
			FAILF("known blocks: %llu bytes hashed", (unsigned long long)k.hashed);
	}
	/* Naming changed block 2 as known keeps a's leaf there: the digest is not b's. */
	const struct digest_range wrong[] = { { 0, 5 } };
	struct known k = { .lv = lv, .r = wrong, .n = 1 };
	hex_of(stream_known(b, len, false, &k), got);
	if (!strcmp(got, want))
		FAILF("a changed block named known still gave the new digest");
	/* digest_skip refuses what is not all known, and feeds nothing then. */
	digest_init(&d);
	digest_known(&d, lv, r, CU_LEN(r));
	ASSERT_TRUE(digest_skip(&d, B + 5));
	ASSERT_TRUE(!digest_skip(&d, B));	/* from 1 MiB + 5 into block 2 */
	ASSERT_EQ(d.size, B + 5);
	digest_free(&d);
	cleaves_put(lv);
	free(a);
	free(b);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(scratch, sizeof(scratch), "%s/ckptfs-digest-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(scratch))
		FAILF("mkdtemp %s: %s", scratch, strerror(errno));
	check_sizes();
	check_dense_sparse();
	check_differences();
	check_petabyte();
	check_terabyte();
	check_known();
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", scratch);
	if (system(cmd) != 0)
		fprintf(stderr, "warning: could not remove %s\n", scratch);
	return 0;
}
