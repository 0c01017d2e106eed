/*
 * blocked.c — a backend that refuses for a while (renames fail with EIO
 * while a flag file exists), then recovers.
 *
 * 1. Write-back, without timing: while the flag exists the closed file is
 *    readable through the mount, absent from the backend and not "durable",
 *    however long we wait; once the flag goes it is published, identical.
 *    A read-only descriptor's close has no write error to report, so it
 *    must succeed meanwhile (checked last, so the rest still runs).
 * 2. Unmount right after the backend recovers, while the publisher still
 *    waits to retry: the drain must wait for the retry rather than give up,
 *    publish everything and exit 0.
 */
#include "tests/core/core_util.h"

/* Mount with renames failing while <scratch>/blocked exists; returns its path. */
static const char *mount_blockable(struct tmount *m, const char *name)
{
	static char flag[PATH_MAX];

	tm_init(m, name);
	snprintf(flag, sizeof(flag), "%s/blocked", m->root);
	cu_write_text(flag, "");
	const char *env[] = { cu_fault_env("op=rename,err=EIO,while=%s", flag), NULL };
	tm_mount(m, NULL, env);
	return flag;
}

/* Returns the errno of a reader's close while blocked (0 if it succeeded). */
static int blocked_then_published(void)
{
	struct tmount m;
	const char *flag = mount_blockable(&m, "blocked");

	cu_write_pattern(tm_path(&m, "f"), 3 * MiB + 1, 2);
	usleep(1500 * 1000);	/* long enough for several attempts to fail */
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "f")));
	ASSERT_TRUE(strcmp(cu_file_state(tm_path(&m, "f")), "durable") != 0);
	int fd = cu_open(tm_path(&m, "f"), O_RDONLY);
	cu_check_range(fd, "f while blocked", 0, 3 * MiB + 1, 2);
	int reader_close = close(fd) < 0 ? errno : 0;

	CHECK_SYS(unlink(flag));
	if (!cu_wait_exists(tm_bpath(&m, "f"), 20000))
		FAILF("the file did not reach the backend within 20 s of unblocking it");
	cu_sync_retry(&m, 20000);
	cu_check_pattern(tm_bpath(&m, "f"), 3 * MiB + 1, 2);
	ASSERT_STR_EQ(cu_file_state(tm_path(&m, "f")), "durable");
	tm_stop(&m);
	tm_cleanup(&m);
	return reader_close;
}

static void unmount_after_outage(void)
{
	struct tmount m;
	const char *flag = mount_blockable(&m, "blocked-unmount");

	cu_write_pattern(tm_path(&m, "g"), MiB + 5, 3);
	/*
	 * Retries back off 50 ms, doubling: attempts near 0.05, 0.15, 0.35,
	 * 0.75, 1.55, 3.15 and 6.35 s.  At 4 s the publisher is well inside a
	 * 3.2 s pause, so the unmount below meets a backend that has recovered
	 * but whose retry is still to come.
	 */
	usleep(4000 * 1000);
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "g")));
	CHECK_SYS(unlink(flag));
	tm_stop(&m);		/* fails unless the daemon exits 0 */
	cu_check_pattern(tm_bpath(&m, "g"), MiB + 5, 3);
	ASSERT_EQ(cu_count_temp_tree(m.backend), 0);
	tm_cleanup(&m);
}

int main(void)
{
	tm_require_fuse();
	int reader_close = blocked_then_published();
	unmount_after_outage();
	if (reader_close)
		FAILF("close of a read-only descriptor failed while the backend was blocked: %s",
		      strerror(reader_close));
	return 0;
}
