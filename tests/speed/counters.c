/*
 * counters — the stats count each written byte once (cache/cfile.c,
 * fs/ctl.c): absorbed_bytes is every byte write(2) accepted;
 * absorbed_durable_bytes the part of it in versions now durable;
 * absorbed_dropped_bytes the part never published (its file was deleted
 * before a close sealed it); persisted_bytes the cached bytes of durable versions,
 * which counts a rewritten file's unchanged cached data again.  After any
 * mix of rewrites, durable <= absorbed, and once everything closed is
 * durable, durable + dropped == absorbed.  ckptfs-stat shows the durable
 * share of what was absorbed, never over 100 %.
 */
#include "tests/core/core_util.h"

static void drain(struct tmount *m)
{
	tm_sync(m);	/* everything durable, or the test fails */
}

static void all_accounted(struct tmount *m)
{
	uint64_t ab = cu_stat(m, "absorbed_bytes"), d = cu_stat(m, "absorbed_durable_bytes");
	uint64_t dr = cu_stat(m, "absorbed_dropped_bytes");
	ASSERT_EQ(d + dr, ab);
	ASSERT_EQ(cu_stat(m, "absorbed_pending_bytes"), 0);
}

int main(void)
{
	struct tmount m;
	char hold[PATH_MAX];

	tm_require_fuse();
	tm_init(&m, "counters");
	snprintf(hold, sizeof(hold), "%s/hold", m.root);
	const char *env[] = { cu_fault_env("op=fdatasync,delay_ms=2000,while=%s", hold), NULL };
	tm_mount(&m, NULL, env);

	/* 4 MiB written, then its first MiB twice more: 6 MiB absorbed, one version. */
	int fd = cu_open(tm_path(&m, "f"), O_WRONLY | O_CREAT | O_TRUNC);
	cu_write_pattern_fd(fd, 0, 4 * MiB, 1, MiB);
	cu_write_pattern_fd(fd, 0, MiB, 2, MiB);
	cu_write_pattern_fd(fd, 0, MiB, 3, 64 * KiB);
	cu_close(fd);
	drain(&m);
	ASSERT_EQ(cu_stat(&m, "absorbed_bytes"), 6 * MiB);
	ASSERT_EQ(cu_stat(&m, "absorbed_durable_bytes"), 6 * MiB);
	all_accounted(&m);

	/* One line appended to it, ten times: 10 x 20 bytes absorbed, ten versions. */
	for (int i = 0; i < 10; i++) {
		fd = cu_open(tm_path(&m, "f"), O_WRONLY | O_APPEND);
		cu_pwrite_all(fd, "one more line, step\n", 20, 4 * MiB + 20 * (uint64_t)i);
		cu_close(fd);
	}
	drain(&m);
	ASSERT_EQ(cu_stat(&m, "absorbed_bytes"), 6 * MiB + 200);
	ASSERT_EQ(cu_stat(&m, "absorbed_durable_bytes"), 6 * MiB + 200);
	all_accounted(&m);
	/* The versions carried the cached file along: published counts it again. */
	ASSERT_GE(cu_stat(&m, "persisted_bytes"), cu_stat(&m, "absorbed_durable_bytes"));

	/*
	 * Pending while its flush waits (2 s); and a file deleted while open,
	 * never closed before: its bytes are dropped, never durable.  (A file
	 * closed, then deleted, is published first: never skipped.)
	 */
	cu_write_text(hold, "x");
	cu_write_pattern(tm_path(&m, "a"), 3 * MiB, 4);
	ASSERT_GE(cu_stat(&m, "absorbed_pending_bytes"), 3 * MiB);
	fd = cu_open(tm_path(&m, "gone"), O_WRONLY | O_CREAT | O_TRUNC);
	cu_write_pattern_fd(fd, 0, 2 * MiB, 5, MiB);
	CHECK_SYS(unlink(tm_path(&m, "gone")));
	cu_close(fd);
	unlink(hold);
	drain(&m);
	ASSERT_EQ(cu_stat(&m, "absorbed_bytes"), 11 * MiB + 200);
	/* The deleted file goes once the kernel forgets it (asynchronously). */
	for (int i = 0; i < 100 && cu_stat(&m, "absorbed_dropped_bytes") < 2 * MiB; i++)
		usleep(20000);
	ASSERT_EQ(cu_stat(&m, "absorbed_dropped_bytes"), 2 * MiB);
	all_accounted(&m);

	/* ckptfs-stat: the durable share of what was absorbed is 100 %, not more. */
	char *out = NULL;
	const char *argv[] = { tm_daemon_bin(), NULL, NULL };
	char stat_bin[PATH_MAX];
	snprintf(stat_bin, sizeof(stat_bin), "%s", tm_daemon_bin());
	char *slash = strrchr(stat_bin, '/');
	ASSERT_TRUE(slash != NULL);
	snprintf(slash + 1, sizeof(stat_bin) - (size_t)(slash + 1 - stat_bin), "ckptfs-stat");
	argv[0] = stat_bin;
	argv[1] = m.mnt;
	ASSERT_EQ(tm_run(argv, &out), 0);
	if (!strstr(out, "] 100%  9.0 MiB of 11.0 MiB absorbed (2.0 MiB dropped"))
		FAILF("ckptfs-stat's durable line:\n%s", out);
	free(out);
	tm_stop(&m);
	tm_cleanup(&m);
	return 0;
}
