/*
 * logsync — a publish batch that touches many directories syncs each
 * directory before the next one is touched (the prefix order across
 * directories needs it), but fdatasyncs the manifest log only when the log
 * changed since its last sync (backend/manifest.c, manifest_sync), not once
 * more per directory: on this machine's disk that was a device flush per
 * file for nothing.  Through the real mount, the publisher is held inside
 * the rename of a first file (a hung backend call) while DIRS more files
 * are closed, one per directory, so they reach the publisher together.
 * Once it is let go and a drain returns: every file is on the backend with
 * its bytes, every directory was synced (dir_fsyncs grew by at least DIRS),
 * and the log was synced a few times (the batch's write-ahead records and
 * what follows them), far fewer than once per directory (manifest_syncs in
 * stats; before this, at least once per directory).
 *
 * That a skipped sync never loses a record is the powerloss test's to
 * show: it replays power cuts of this same publisher under a model of what
 * POSIX promises survives, and a log append that did not count as a change
 * (so its sync was skipped) made it report 968 violations in 50 rounds.
 */
#include "tests/core/core_util.h"

#define DIRS 24
#define SIZE 5000

static const char *file_in(int d)
{
	static char rel[32];
	snprintf(rel, sizeof(rel), "d%02d/f", d);
	return rel;
}

static void batch_across_dirs(void)
{
	struct tmount m;
	char flag[PATH_MAX], dir[32];

	tm_init(&m, "logsync");
	snprintf(flag, sizeof(flag), "%s/hold", m.root);
	const char *env[] = { cu_fault_env("op=rename,name=first,hold=%s", flag), NULL };
	tm_mount(&m, NULL, env);
	for (int d = 0; d < DIRS; d++) {
		snprintf(dir, sizeof(dir), "d%02d", d);
		CHECK_SYS(mkdir(tm_path(&m, dir), 0755));
	}
	tm_sync(&m);
	uint64_t ls0 = cu_stat(&m, "manifest_syncs"), df0 = cu_stat(&m, "dir_fsyncs");
	ASSERT_TRUE(ls0 > 0);	/* the mount's own record was synced */

	cu_write_text(flag, "");
	cu_write_pattern(tm_path(&m, "first"), SIZE, 1);
	for (int d = 0; d < DIRS; d++)
		cu_write_pattern(tm_path(&m, file_in(d)), SIZE, 10u + (unsigned)d);
	usleep(500 * 1000);	/* the flushers write the temporary files meanwhile */
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "first")));
	CHECK_SYS(unlink(flag));
	tm_sync(&m);

	cu_check_pattern(tm_bpath(&m, "first"), SIZE, 1);
	for (int d = 0; d < DIRS; d++)
		cu_check_pattern(tm_bpath(&m, file_in(d)), SIZE, 10u + (unsigned)d);
	uint64_t ls = cu_stat(&m, "manifest_syncs") - ls0, df = cu_stat(&m, "dir_fsyncs") - df0;
	printf("%d files in %d directories: %llu directory fsyncs, %llu log syncs\n", DIRS + 1, DIRS,
	       (unsigned long long)df, (unsigned long long)ls);
	ASSERT_TRUE(df >= DIRS);
	ASSERT_TRUE(ls >= 1);
	ASSERT_LT(ls, DIRS / 3);
	tm_stop(&m);
	tm_cleanup(&m);
}

int main(void)
{
	tm_require_fuse();
	cu_require_root();
	batch_across_dirs();
	return 0;
}
