/*
 * roundtrip.c — whole files written through the mount come back byte for
 * byte: through the mount before unmount, and on the backend after it.
 *
 * Sizes around pages and chunk boundaries (1 MiB chunks, then the default
 * 4 MiB), several MiB, and one file four times larger than the cache, which
 * forces backpressure and spilling of a file that is still open.  Also
 * threads writing different files at once, and O_DIRECT opens (aligned
 * buffers) writing and reading, including a file that after a remount comes
 * from the backend.
 */
#include "tests/core/core_util.h"

#include <pthread.h>

/* Write each file, then read each back through the mount. */
static void write_and_check(struct tmount *m, const struct cu_pfile *f, size_t n)
{
	for (size_t i = 0; i < n; i++)
		cu_write_pattern(tm_path(m, f[i].name), f[i].size, f[i].seed);
	cu_check_pfiles(m->mnt, f, n);
}

/* ---- threads writing different files ---- */

#define WRITER_SIZE (6 * MiB + 4321)

static const struct cu_pfile writers[] = {
	{ "par/w0", WRITER_SIZE, 100 }, { "par/w1", WRITER_SIZE, 101 },
	{ "par/w2", WRITER_SIZE, 102 }, { "par/w3", WRITER_SIZE, 103 },
};

struct writer {
	struct tmount *m;
	const struct cu_pfile *f;
	size_t piece;
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	int fd = cu_open(tm_path(w->m, w->f->name), O_CREAT | O_WRONLY | O_TRUNC);

	cu_write_pattern_fd(fd, 0, w->f->size, w->f->seed, w->piece);
	cu_close(fd);
	return NULL;
}

static void concurrent_writers(struct tmount *m)
{
	pthread_t t[CU_LEN(writers)];
	struct writer w[CU_LEN(writers)];

	CHECK_SYS(mkdir(tm_path(m, "par"), 0755));
	for (size_t i = 0; i < CU_LEN(writers); i++) {
		/* Different write sizes per thread, so requests interleave unevenly. */
		w[i] = (struct writer){ m, &writers[i], 4096u << i };
		ASSERT_EQ(pthread_create(&t[i], NULL, writer_main, &w[i]), 0);
	}
	for (size_t i = 0; i < CU_LEN(writers); i++)
		pthread_join(t[i], NULL);
	cu_check_pfiles(m->mnt, writers, CU_LEN(writers));
}

/* ---- O_DIRECT ---- */

#define DIRECT_SIZE (3 * MiB)
#define DIRECT_PIECE (256u << 10)

/* Read path with O_DIRECT into aligned memory and compare with pattern seed. */
static void direct_check(const char *path, uint64_t size, uint64_t seed)
{
	int fd = cu_open(path, O_RDONLY | O_DIRECT);
	char *buf, *want = malloc(DIRECT_PIECE);

	ASSERT_EQ(posix_memalign((void **)&buf, 4096, DIRECT_PIECE), 0);
	for (uint64_t off = 0; off < size; off += DIRECT_PIECE) {
		ssize_t n = pread(fd, buf, DIRECT_PIECE, (off_t)off);
		ASSERT_EQ(n, DIRECT_PIECE);
		fill_pattern(want, DIRECT_PIECE, seed, off);
		if (memcmp(buf, want, DIRECT_PIECE) != 0)
			FAILF("%s: O_DIRECT read at %" PRIu64 " differs from what was written", path, off);
	}
	ASSERT_EQ(pread(fd, buf, DIRECT_PIECE, (off_t)size), 0);
	cu_close(fd);
	free(buf);
	free(want);
}

static void direct_write(const char *path, uint64_t size, uint64_t seed)
{
	int fd = cu_open(path, O_CREAT | O_WRONLY | O_TRUNC | O_DIRECT);
	char *buf;

	ASSERT_EQ(posix_memalign((void **)&buf, 4096, DIRECT_PIECE), 0);
	for (uint64_t off = 0; off < size; off += DIRECT_PIECE) {
		fill_pattern(buf, DIRECT_PIECE, seed, off);
		ASSERT_EQ(pwrite(fd, buf, DIRECT_PIECE, (off_t)off), DIRECT_PIECE);
	}
	cu_close(fd);
	free(buf);
}

int main(void)
{
	struct tmount m;
	/* Mount 1: 1 MiB chunks and a 16 MiB cache. */
	static const struct cu_pfile small[] = {
		{ "empty", 0, 1 }, { "one", 1, 2 }, { "p4095", 4095, 3 }, { "p4096", 4096, 4 },
		{ "p4097", 4097, 5 }, { "c1m-1", MiB - 1, 6 }, { "c1m", MiB, 7 },
		{ "c1m+1", MiB + 1, 8 }, { "c3m+17", 3 * MiB + 17, 9 }, { "several", 7 * MiB + 5, 10 },
	};
	static const struct cu_pfile huge[] = { { "huge", 64 * MiB, 50 } };
	/* Mount 2: the default 4 MiB chunks. */
	static const struct cu_pfile dflt[] = {
		{ "d4m-1", 4 * MiB - 1, 200 }, { "d4m", 4 * MiB, 201 }, { "d4m+1", 4 * MiB + 1, 202 },
		{ "d9m+3", 9 * MiB + 3, 203 },
	};

	tm_require_fuse();
	tm_start(&m, "roundtrip", "cache_size=16M,chunk_size=1M", NULL);
	write_and_check(&m, small, CU_LEN(small));
	/* Larger than the cache: writes must wait for spilling, not fail. */
	write_and_check(&m, huge, CU_LEN(huge));
	ASSERT_GE(cu_stat(&m, "spilled_bytes"), 48 * MiB);	/* all but a cache's worth */
	ASSERT_GE(cu_stat(&m, "backpressure_waits"), 1);
	concurrent_writers(&m);
	direct_write(tm_path(&m, "direct"), DIRECT_SIZE, 77);
	direct_check(tm_path(&m, "direct"), DIRECT_SIZE, 77);
	tm_stop(&m);
	cu_check_pfiles(m.backend, small, CU_LEN(small));
	cu_check_pfiles(m.backend, huge, CU_LEN(huge));
	cu_check_pfiles(m.backend, writers, CU_LEN(writers));
	cu_check_pattern(tm_bpath(&m, "direct"), DIRECT_SIZE, 77);
	ASSERT_EQ(cu_count_temp_tree(m.backend), 0);

	tm_mount(&m, NULL, NULL);
	/* Now the files come from the backend. */
	direct_check(tm_path(&m, "direct"), DIRECT_SIZE, 77);
	cu_check_pfiles(m.mnt, small, CU_LEN(small));
	write_and_check(&m, dflt, CU_LEN(dflt));
	tm_stop(&m);
	cu_check_pfiles(m.backend, dflt, CU_LEN(dflt));
	cu_check_pfiles(m.backend, small, CU_LEN(small));
	ASSERT_EQ(cu_count_temp_tree(m.backend), 0);
	tm_cleanup(&m);
	return 0;
}
