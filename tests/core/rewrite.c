/*
 * rewrite.c — files changed in place rather than written once from the
 * start: pwrite at shuffled, overlapping offsets; a sparse file with its
 * data at 1 GiB; truncate(2) of a closed file (its own version, published
 * without a close) and ftruncate of an open one, shrinking and growing;
 * O_APPEND; O_TRUNC over a file just published, also on a read-only
 * open; writes and truncates past the backend's largest file (EFBIG at
 * once); and, after a remount, so
 * that the file comes from the backend, an O_TRUNC rewrite, an append, and
 * an overwrite in the middle whose unchanged ranges must be the published
 * bytes.
 *
 * Each expectation is kept in memory (or as a pattern seed) and checked
 * through the mount before unmount and on the backend after it.
 */
#include "tests/core/core_util.h"

/* A file's expected contents, built up by the same writes the test makes. */
struct expect {
	char *buf;
	size_t len;
};

static void expect_pattern(struct expect *e, uint64_t off, size_t len, uint64_t seed)
{
	if (off + len > e->len) {
		e->buf = realloc(e->buf, off + len);
		memset(e->buf + e->len, 0, off + len - e->len);
		e->len = off + len;
	}
	fill_pattern(e->buf + off, len, seed, off);
}

static void expect_truncate(struct expect *e, size_t len)
{
	e->buf = realloc(e->buf, len ? len : 1);
	if (len > e->len)
		memset(e->buf + e->len, 0, len - e->len);
	e->len = len;
}

/* Write the pattern through fd and record it. */
static void put(int fd, struct expect *e, uint64_t off, size_t len, uint64_t seed)
{
	cu_write_pattern_fd(fd, off, len, seed, 256u << 10);
	expect_pattern(e, off, len, seed);
}

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static uint64_t rnd(uint64_t n)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state % n;
}

/* ---- random offsets ---- */

#define RAND_SLOTS 96
#define RAND_STRIDE (48u << 10)

static void random_writes(struct tmount *m, struct expect *e)
{
	unsigned order[RAND_SLOTS];
	int fd = cu_open(tm_path(m, "random"), O_CREAT | O_RDWR | O_TRUNC);

	for (unsigned i = 0; i < RAND_SLOTS; i++)
		order[i] = i;
	for (unsigned i = RAND_SLOTS - 1; i > 0; i--) {
		unsigned j = (unsigned)rnd(i + 1), t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	/* Each write is longer than the stride apart, so neighbours overlap. */
	for (unsigned i = 0; i < RAND_SLOTS; i++) {
		uint64_t off = (uint64_t)order[i] * RAND_STRIDE + rnd(4096);
		put(fd, e, off, 1 + rnd(3 * RAND_STRIDE), 1000 + i);
	}
	cu_close(fd);
	cu_check_content(tm_path(m, "random"), e->buf, e->len);
}

/* ---- a sparse file ---- */

#define SPARSE_OFF GiB
#define SPARSE_LEN (4096u + 123)

/* Holes read as zeros: all of it (`full`), or its start, middle and end. */
static void check_sparse(const char *path, bool full)
{
	int fd = cu_open(path, O_RDONLY);

	ASSERT_EQ(cu_file_size(path), SPARSE_OFF + SPARSE_LEN);
	if (full) {
		cu_check_range(fd, path, 0, SPARSE_OFF, 0);
	} else {
		cu_check_range(fd, path, 0, 4 * MiB, 0);
		cu_check_range(fd, path, SPARSE_OFF / 2 - MiB, 2 * MiB + 1, 0);
		cu_check_range(fd, path, SPARSE_OFF - 4 * MiB, 4 * MiB, 0);
	}
	cu_check_range(fd, path, SPARSE_OFF, SPARSE_LEN, 7);
	cu_close(fd);
}

static void sparse_write(struct tmount *m)
{
	int fd = cu_open(tm_path(m, "sparse"), O_CREAT | O_WRONLY | O_TRUNC);
	cu_write_pattern_fd(fd, SPARSE_OFF, SPARSE_LEN, 7, SPARSE_LEN);
	cu_close(fd);
	check_sparse(tm_path(m, "sparse"), true);
}

/* ---- truncation ---- */

#define SHRINK_TO (3 * MiB + 5)
#define GROW_FROM (2 * MiB + 1)
#define GROW_TO (6 * MiB)

/* The grown file: pattern 12 up to GROW_FROM, then zeros. */
static void check_grown(const char *path)
{
	int fd = cu_open(path, O_RDONLY);
	ASSERT_EQ(cu_file_size(path), GROW_TO);
	cu_check_range(fd, path, 0, GROW_FROM, 12);
	cu_check_range(fd, path, GROW_FROM, GROW_TO - GROW_FROM, 0);
	cu_close(fd);
}

/* truncate(2) of closed files: each is a version of its own. */
static void truncate_closed(struct tmount *m)
{
	cu_write_pattern(tm_path(m, "shrink"), 10 * MiB, 11);
	cu_write_pattern(tm_path(m, "grow"), GROW_FROM, 12);
	tm_sync(m);
	CHECK_SYS(truncate(tm_path(m, "shrink"), SHRINK_TO));
	CHECK_SYS(truncate(tm_path(m, "grow"), GROW_TO));
	cu_check_pattern(tm_path(m, "shrink"), SHRINK_TO, 11);
	check_grown(tm_path(m, "grow"));
	/* No close happened: the truncation alone must reach the backend. */
	tm_sync(m);
	cu_check_pattern(tm_bpath(m, "shrink"), SHRINK_TO, 11);
	check_grown(tm_bpath(m, "grow"));
}

/* ftruncate of an open file: shrink, write past the end, grow again. */
static void truncate_open(struct tmount *m, struct expect *e)
{
	int fd = cu_open(tm_path(m, "ftrunc"), O_CREAT | O_RDWR | O_TRUNC);

	put(fd, e, 0, 8 * MiB, 13);
	CHECK_SYS(ftruncate(fd, MiB + 3));
	expect_truncate(e, MiB + 3);
	put(fd, e, 2 * MiB, 100, 14);
	CHECK_SYS(ftruncate(fd, 3 * MiB));
	expect_truncate(e, 3 * MiB);
	cu_close(fd);
	cu_check_content(tm_path(m, "ftrunc"), e->buf, e->len);
}

/* ---- appends ---- */

static void append(struct tmount *m, struct expect *e, size_t len, uint64_t seed)
{
	int fd = cu_open(tm_path(m, "append"), O_CREAT | O_WRONLY | O_APPEND);
	size_t at = e->len;

	expect_pattern(e, at, len, seed);
	/* With O_APPEND the data lands at the end, whatever pwrite's offset says. */
	ASSERT_EQ(pwrite(fd, e->buf + at, len, 0), len);
	cu_close(fd);
	cu_check_content(tm_path(m, "append"), e->buf, e->len);
}

/* O_TRUNC over a file published in this mount: nothing of the old one stays. */
static void trunc_published(struct tmount *m)
{
	cu_write_pattern(tm_path(m, "trunc_same"), 3 * MiB, 23);
	tm_sync(m);
	cu_check_pattern(tm_bpath(m, "trunc_same"), 3 * MiB, 23);
	cu_write_pattern(tm_path(m, "trunc_same"), 100000, 24);
	cu_check_pattern(tm_path(m, "trunc_same"), 100000, 24);
	tm_sync(m);
	cu_check_pattern(tm_bpath(m, "trunc_same"), 100000, 24);
}

/* ---- after a remount: files that come from the backend ---- */

static void rewrite_published(struct tmount *m, struct expect *mid)
{
	/* O_TRUNC: the new version holds nothing of the old one. */
	int fd = cu_open(tm_path(m, "trunc_rewrite"), O_WRONLY | O_TRUNC);
	cu_write_pattern_fd(fd, 0, MiB + 7, 16, 64u << 10);
	cu_close(fd);
	cu_check_pattern(tm_path(m, "trunc_rewrite"), MiB + 7, 16);

	/* In the middle, across a chunk boundary; the rest is the published file. */
	fd = cu_open(tm_path(m, "middle"), O_RDWR);
	cu_check_range(fd, "middle before the overwrite", 0, 12 * MiB, 17);
	put(fd, mid, 4 * MiB - 50, MiB + 100, 18);
	put(fd, mid, 9 * MiB + 1, 10, 19);
	cu_close(fd);
	cu_check_content(tm_path(m, "middle"), mid->buf, mid->len);
}

/*
 * Past the backend's largest file (ext4: 16 TiB): the write and the
 * truncate fail at once with EFBIG, as they would there, and nothing of
 * theirs is queued to hold up the user's later files.
 */
static void past_backend_limit(struct tmount *m)
{
	uint64_t max = cu_stat(m, "backend_max_file_bytes");
	if (!max || max >= (1ull << 62)) {
		printf("the backend's largest file is %llu bytes: EFBIG not checked\n",
		       (unsigned long long)max);
		return;
	}
	int fd = cu_open(tm_path(m, "efbig"), O_WRONLY | O_CREAT | O_TRUNC);
	char b[4096] = { 7 };
	CU_EXPECT_ERRNO(pwrite(fd, b, sizeof(b), (off_t)(max - 100)), EFBIG);
	CU_EXPECT_ERRNO(ftruncate(fd, (off_t)max + 1), EFBIG);
	CU_EXPECT_ERRNO(truncate(tm_path(m, "efbig"), (off_t)max + 1), EFBIG);
	ASSERT_EQ(pwrite(fd, b, sizeof(b), 0), (ssize_t)sizeof(b));
	cu_close(fd);
	cu_write_pattern(tm_path(m, "after_efbig"), 64 * KiB, 19);
	tm_sync(m);	/* nothing blocked */
	ASSERT_EQ(cu_file_size(tm_bpath(m, "efbig")), 4096);
	cu_check_pattern(tm_bpath(m, "after_efbig"), 64 * KiB, 19);
}

int main(void)
{
	struct tmount m;
	struct expect rand_e = { 0 }, ftr = { 0 }, app = { 0 }, mid = { 0 };

	tm_require_fuse();
	tm_start(&m, "rewrite", NULL, NULL);
	random_writes(&m, &rand_e);
	sparse_write(&m);
	truncate_closed(&m);
	truncate_open(&m, &ftr);
	append(&m, &app, 1000, 20);
	append(&m, &app, 5000, 21);
	trunc_published(&m);
	cu_write_pattern(tm_path(&m, "trunc_rewrite"), 8 * MiB, 15);
	cu_write_pattern(tm_path(&m, "middle"), 12 * MiB, 17);
	expect_pattern(&mid, 0, 12 * MiB, 17);
	/*
	 * O_RDONLY | O_TRUNC truncates, as on Linux's own file systems (the
	 * kernel checked write permission; with atomic O_TRUNC it is the
	 * open's to do), and that empty version is published with no writer.
	 */
	cu_write_pattern(tm_path(&m, "rdtrunc"), 3 * MiB, 18);
	tm_sync(&m);
	int rt = cu_open(tm_path(&m, "rdtrunc"), O_RDONLY | O_TRUNC);
	ASSERT_EQ(cu_file_size(tm_path(&m, "rdtrunc")), 0);
	tm_sync(&m);
	ASSERT_EQ(cu_file_size(tm_bpath(&m, "rdtrunc")), 0);
	cu_close(rt);
	past_backend_limit(&m);
	tm_stop(&m);

	cu_check_content(tm_bpath(&m, "random"), rand_e.buf, rand_e.len);
	check_sparse(tm_bpath(&m, "sparse"), false);
	cu_check_content(tm_bpath(&m, "ftrunc"), ftr.buf, ftr.len);
	cu_check_content(tm_bpath(&m, "append"), app.buf, app.len);
	cu_check_pattern(tm_bpath(&m, "trunc_rewrite"), 8 * MiB, 15);
	cu_check_pattern(tm_bpath(&m, "middle"), 12 * MiB, 17);

	tm_mount(&m, NULL, NULL);
	check_sparse(tm_path(&m, "sparse"), false);
	append(&m, &app, 3000, 22);
	rewrite_published(&m, &mid);
	tm_stop(&m);

	cu_check_content(tm_bpath(&m, "append"), app.buf, app.len);
	cu_check_pattern(tm_bpath(&m, "trunc_rewrite"), MiB + 7, 16);
	cu_check_content(tm_bpath(&m, "middle"), mid.buf, mid.len);
	ASSERT_EQ(cu_count_temp_tree(m.backend), 0);
	tm_cleanup(&m);
	free(rand_e.buf);
	free(ftr.buf);
	free(app.buf);
	free(mid.buf);
	return 0;
}
