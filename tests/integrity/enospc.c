/*
 * enospc.c — a backend that really runs out of space: an 8 MiB tmpfs
 * (contract item 2 on a real file system, no injected faults).
 *
 * The backend starts with 5 MiB of someone else's data (a ballast file put
 * there directly).  Through ckptfs: a 1 MiB file made durable, then 4 MiB
 * more in four files — close(2) returns at once, the cache holds them (a
 * close may already report ENOSPC if its own file failed that fast) — and
 * fsync of the mount root reports ENOSPC; stats say degraded with
 * "No space left on device"; reads keep working.
 *
 * Freeing space through the mount does not help: an unlink is ordered after
 * the files that cannot be written (P1), so it waits behind them, fsync
 * still fails and the file is still on the backend.  What helps is what an
 * administrator does: free space on the backend itself (the ballast goes).
 * Then everything flushes on its own, degraded clears, the backend holds
 * exactly the files written (and not the unlinked one), no temporary file
 * is left, verify passes and unmount exits 0.  The tmpfs is unmounted at
 * the end, and on failure.  Needs root; registered for both I/O engines.
 */
#include "tests/integrity/integ.h"

#include <sys/mount.h>

#define NFILL 4
#define FILL_SIZE (MiB + 100)

static char tmpfs_dir[PATH_MAX];

static void tmpfs_release(void)
{
	if (tmpfs_dir[0] && umount2(tmpfs_dir, MNT_DETACH) < 0)
		fprintf(stderr, "warning: umount %s: %s\n", tmpfs_dir, strerror(errno));
	tmpfs_dir[0] = '\0';
}

static void expect_enospc(struct tmount *m, const char *when)
{
	int fd = CHECK_SYS(open(m->mnt, O_RDONLY | O_DIRECTORY));
	int r = fsync(fd), e = errno;

	close(fd);
	if (r != -1 || e != ENOSPC)
		FAILF("fsync %s returned %d (%s), expected ENOSPC", when, r, r ? strerror(e) : "success");
}

int main(void)
{
	struct tmount m;
	char name[32], v[128], *out;
	struct it_tree b;

	tm_require_fuse();
	cu_require_root();
	tm_init(&m, "enospc");
	if (mount("tmpfs", m.backend, "tmpfs", 0, "size=8m,mode=0755") < 0) {
		fprintf(stderr, "skip: cannot mount a tmpfs: %s\n", strerror(errno));
		tm_cleanup(&m);
		return TEST_SKIP;
	}
	snprintf(tmpfs_dir, sizeof(tmpfs_dir), "%s", m.backend);
	atexit(tmpfs_release);
	ASSERT_EQ(it_write_pattern(tm_bpath(&m, "ballast"), 1, 5 * MiB), 0);

	tm_mount(&m, NULL, NULL);
	ASSERT_EQ(it_write_pattern(tm_path(&m, "old"), 2, MiB), 0);
	tm_sync(&m);
	ASSERT_TRUE(it_has_pattern(tm_bpath(&m, "old"), 2, MiB));

	for (int i = 0; i < NFILL; i++) {
		snprintf(name, sizeof(name), "fill%d", i);
		/* close may already report the file's own failure: that is allowed */
		int r = it_write_pattern(tm_path(&m, name), 10 + (uint64_t)i, FILL_SIZE);
		if (r < 0 && r != -ENOSPC)
			FAILF("close of %s failed: %s", name, strerror(errno));
	}
	expect_enospc(&m, "of a full backend");
	ASSERT_TRUE(it_json_get(it_stats(&m), "degraded", v, sizeof(v)));
	ASSERT_STR_EQ(v, "true");
	ASSERT_TRUE(it_json_get(it_stats(&m), "last_error", v, sizeof(v)));
	ASSERT_STR_EQ(v, strerror(ENOSPC));
	ASSERT_TRUE(it_has_pattern(tm_path(&m, "fill0"), 10, FILL_SIZE));
	ASSERT_TRUE(it_has_pattern(tm_path(&m, "old"), 2, MiB));

	/* Unlinking through the mount frees nothing: it waits behind the full files. */
	CHECK_SYS(unlink(tm_path(&m, "old")));
	expect_enospc(&m, "after an unlink through the mount");
	ASSERT_TRUE(file_exists(tm_bpath(&m, "old")));

	/* The administrator frees space on the backend: everything flushes. */
	CHECK_SYS(unlink(tm_bpath(&m, "ballast")));
	cu_sync_retry(&m, 30000);
	ASSERT_TRUE(it_json_get(it_stats(&m), "degraded", v, sizeof(v)));
	ASSERT_STR_EQ(v, "false");
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "old")));
	for (int i = 0; i < NFILL; i++) {
		snprintf(name, sizeof(name), "fill%d", i);
		if (!it_has_pattern(tm_bpath(&m, name), 10 + (uint64_t)i, FILL_SIZE))
			FAILF("%s on the backend is not what was written", name);
	}
	ASSERT_EQ(it_tree_scan(m.backend, &b), 0);
	ASSERT_EQ(b.temps, 0);
	ASSERT_EQ(b.n, NFILL);
	it_tree_free(&b);
	if (it_verify(m.backend, 0, &out) != 0 || it_verdict_count(out, "OK") != NFILL)
		FAILF("verify after the backend had space again:\n%s", out);
	free(out);
	tm_stop(&m);
	tmpfs_release();
	tm_cleanup(&m);
	return 0;
}
