/*
 * flush.c — `ckptfs-ctl flush MOUNT PATH` persists one file now, keeping
 * the backend a prefix of the operation order.
 *
 * Every publish sleeps 300 ms, so files closed just before are still
 * pending when the command runs.  Checked on the backend directly, right
 * after the command exits:
 *  - flushing a closed file behind four others: exit 0, it says how many
 *    earlier operations go first, and the file and all four are there,
 *    whole; its user.ckptfs.state reads durable;
 *  - flushing a file still open: the contents written so far are there;
 *    writes after it make a later version;
 *  - PATH given as an absolute path inside the mount works;
 *  - with nothing pending before it, no mention of earlier operations;
 *  - a missing file or a directory: exit 1 with a message; a path outside
 *    the mount: exit 2.
 */
#include "tests/ctl/ctl_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define EARLIER "earlier operations are published first"

static void ctl_flush(struct ct_result *r, struct tmount *m, const char *path)
{
	ct_run(r, (const char *[]){ ct_tool("ckptfs-ctl"), "flush", m->mnt, path, NULL });
}

static void flush_ok(struct tmount *m, const char *path, bool earlier)
{
	struct ct_result r;
	char what[PATH_MAX + 32];

	snprintf(what, sizeof(what), "ckptfs-ctl flush %s", path);
	ctl_flush(&r, m, path);
	ct_expect_status(&r, 0, what);
	if (earlier)
		ct_expect_in(r.out, EARLIER, what);
	else if (strstr(r.out, EARLIER))
		FAILF("%s reports earlier operations with none pending:\n%s", what, r.out);
	ct_result_free(&r);
}

static void flush_fails(struct tmount *m, const char *path, int status, const char *says)
{
	struct ct_result r;

	ctl_flush(&r, m, path);
	ct_expect_status(&r, status, path);
	ct_expect_in(r.err, says, "ckptfs-ctl flush's message");
	ct_result_free(&r);
}

int main(void)
{
	struct tmount m;
	/* early0..3 take 1.5 s each to publish: t waits behind them. */
	const char *env[] = { "CKPTFS_FAULT=op=rename,delay_ms=1500,name=early", NULL };
	char rel[32], state[64], abs[PATH_MAX];
	int fd;

	tm_require_fuse();
	tm_start(&m, "ctl-flush", NULL, env);

	/* A closed file behind four others. */
	for (int i = 0; i < 4; i++) {
		snprintf(rel, sizeof(rel), "early%d", i);
		ct_write_seeded(tm_path(&m, rel), 50000, (uint64_t)i + 1);
	}
	ct_write_seeded(tm_path(&m, "t"), 70000, 9);
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "t")));
	flush_ok(&m, "t", true);
	ct_check_seeded(tm_bpath(&m, "t"), 70000, 9);
	for (int i = 0; i < 4; i++) {
		snprintf(rel, sizeof(rel), "early%d", i);
		ct_check_seeded(tm_bpath(&m, rel), 50000, (uint64_t)i + 1);
	}
	ASSERT_TRUE(ct_getxattr(tm_path(&m, "t"), "user.ckptfs.state", state, sizeof(state)) > 0);
	ASSERT_STR_EQ(state, "durable");

	/* A file still open: what was written so far. */
	fd = (int)CHECK_SYS(open(tm_path(&m, "open"), O_CREAT | O_RDWR, 0644));
	{
		char *buf = malloc(200 * KiB);
		fill_pattern(buf, 200 * KiB, 11, 0);
		ASSERT_EQ(write(fd, buf, 100 * KiB), 100 * KiB);
		flush_ok(&m, "open", false);
		ct_check_seeded(tm_bpath(&m, "open"), 100 * KiB, 11);
		ASSERT_EQ(write(fd, buf + 100 * KiB, 100 * KiB), 100 * KiB);
		free(buf);
	}
	CHECK_SYS(close(fd));
	tm_sync(&m);
	ct_check_seeded(tm_bpath(&m, "open"), 200 * KiB, 11);

	/* An absolute path; nothing pending before it. */
	CHECK_SYS(mkdir(tm_path(&m, "d"), 0755));
	tm_sync(&m);
	ct_write_seeded(tm_path(&m, "d/t3"), 1234, 13);
	snprintf(abs, sizeof(abs), "%s", tm_path(&m, "d/t3"));
	flush_ok(&m, abs, false);
	ct_check_seeded(tm_bpath(&m, "d/t3"), 1234, 13);

	flush_ok(&m, "./t", false);	/* "." and empty parts are dropped */
	flush_ok(&m, "d//./t3", false);
	flush_fails(&m, "missing", 1, "not a regular file");
	flush_fails(&m, "d", 1, "not a regular file");
	flush_fails(&m, "/etc/passwd", 2, "is not a file inside");
	tm_stop(&m);
	tm_cleanup(&m);
	return 0;
}
