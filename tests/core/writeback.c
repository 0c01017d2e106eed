/*
 * writeback.c — close() returns before the backend has the file, and
 * unmount drains everything.
 *
 * 1. A slow backend (one file's publishing rename sleeps 4 s): close returns
 *    at once, and right after it the final name is not on the backend;
 *    while that rename is under way, writing other files and reading the
 *    slow one must not wait for it; fsync of the mount root then waits
 *    until everything is there, complete.
 * 2. Many files queued behind a crawling publisher, then unmount: the
 *    daemon exits 0 only after every file is on the backend, and no
 *    temporary file is left in any directory.
 * (blocked.c covers a backend that fails rather than lags.)
 */
#include "tests/core/core_util.h"

/* Write, then close, a small file: how long that took, in ms. */
static uint64_t timed_write(const char *path, uint64_t size, uint64_t seed)
{
	uint64_t t0 = mono_ms();
	cu_write_pattern(path, size, seed);
	return mono_ms() - t0;
}

static void slow_backend(void)
{
	struct tmount m;
	char flag[PATH_MAX];
	char name[32];

	/* Publishing "slowfile" hangs while the flag exists; everything else is quick. */
	tm_init(&m, "wb-slow");
	snprintf(flag, sizeof(flag), "%s/hold", m.root);
	cu_write_text(flag, "");
	const char *env[] = { cu_fault_env("op=rename,name=slowfile,hold=%s", flag), NULL };
	tm_mount(&m, "chunk_size=64K", env);
	uint64_t took = timed_write(tm_path(&m, "slowfile"), 2 * MiB + 3, 1);
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "slowfile")));
	ASSERT_LT(took, 10000);
	/*
	 * While the publisher is inside that rename, other files are written
	 * and read: none of it may wait for the backend (it would wait for ever).
	 */
	usleep(300 * 1000);
	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "g%02d", i);
		if ((took = timed_write(tm_path(&m, name), 10000, 10u + (unsigned)i)) > 10000)
			FAILF("writing %s took %" PRIu64 " ms while a slow publish was under way",
			      name, took);
	}
	cu_check_pattern(tm_path(&m, "slowfile"), 2 * MiB + 3, 1);
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "slowfile")));
	CHECK_SYS(unlink(flag));
	tm_sync(&m);
	cu_check_pattern(tm_bpath(&m, "slowfile"), 2 * MiB + 3, 1);
	cu_check_pattern(tm_bpath(&m, "g19"), 10000, 29);
	ASSERT_STR_EQ(cu_file_state(tm_path(&m, "slowfile")), "durable");
	tm_stop(&m);
	tm_cleanup(&m);
}

#define DRAIN_DIRS 4
#define DRAIN_FILES 50	/* per directory */

static uint64_t drain_size(int d, int i) { return (uint64_t)(i % 7) * 9000 + (uint64_t)d; }

static const char *drain_name(int d, int i)
{
	static char name[64];
	snprintf(name, sizeof(name), "d%d/f%03d", d, i);
	return name;
}

static void unmount_drains(void)
{
	struct tmount m;
	char flag[PATH_MAX];
	int missing = 0;

	/* While the flag exists each fdatasync takes 1 s; then 2 ms. */
	tm_init(&m, "wb-drain");
	snprintf(flag, sizeof(flag), "%s/slow", m.root);
	cu_write_text(flag, "");
	const char *env[] = { cu_fault_env("op=fdatasync,delay_ms=1000,while=%s;"
					   "op=fdatasync,delay_ms=2", flag), NULL };
	tm_mount(&m, "chunk_size=64K", env);	/* 200 small files must fit the cache */
	for (int d = 0; d < DRAIN_DIRS; d++) {
		char dir[16];
		snprintf(dir, sizeof(dir), "d%d", d);
		CHECK_SYS(mkdir(tm_path(&m, dir), 0755));
		for (int i = 0; i < DRAIN_FILES; i++)
			cu_write_pattern(tm_path(&m, drain_name(d, i)), drain_size(d, i), 1000u * d + i);
	}
	cu_write_pattern(tm_path(&m, "d0/big"), 9 * MiB, 3);
	for (int d = 0; d < DRAIN_DIRS; d++)
		for (int i = 0; i < DRAIN_FILES; i++)
			missing += !file_exists(tm_bpath(&m, drain_name(d, i)));
	/* Two flushers, each at one file a second so far: nearly all are missing. */
	fprintf(stderr, "%d of %d files not yet on the backend at unmount\n", missing,
		DRAIN_DIRS * DRAIN_FILES);
	ASSERT_GE(missing, 1);
	CHECK_SYS(unlink(flag));
	tm_stop(&m);
	for (int d = 0; d < DRAIN_DIRS; d++)
		for (int i = 0; i < DRAIN_FILES; i++)
			cu_check_pattern(tm_bpath(&m, drain_name(d, i)), drain_size(d, i), 1000u * d + i);
	cu_check_pattern(tm_bpath(&m, "d0/big"), 9 * MiB, 3);
	ASSERT_EQ(cu_count_temp_tree(m.backend), 0);
	tm_cleanup(&m);
}

int main(void)
{
	tm_require_fuse();
	slow_backend();
	unmount_drains();
	return 0;
}
