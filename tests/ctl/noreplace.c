/*
 * noreplace.c — a rename(2) with RENAME_NOREPLACE never replaces a file on
 * the backend, even one another node or tool made there after the mount
 * said yes (contract, "Beyond one node").
 *
 * A file is written and made durable; it is renamed through the mount with
 * RENAME_NOREPLACE onto a name the mount does not hold, and the rename's
 * publication is held (CKPTFS_FAULT hold= on renames to that name).  Then
 * another writer puts its own file at that name on the backend, and the
 * publication goes on.  Checked: the backend refuses the rename and it is
 * blocked (before: it was published with no flag and replaced the other
 * writer's file); the other writer's bytes stay at the name and ours at the
 * old one; an fsync of the renamed file reports the error, never success;
 * after `ckptfs-ctl skip` the mount drains and both files are still as
 * they were.  A rename with no flag afterwards replaces, as asked.  The
 * same over a backend whose rename takes no flags (EINVAL, as NFS and
 * Lustre answer): the name is looked at first; and RENAME_NOREPLACE to a
 * new name (what mv(1) sends) is published there too (it was blocked for
 * good with EINVAL).
 */
#include "tests/ctl/ctl_util.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#define SIZE (1 * MiB)

/* rules: the fault rules before the hold on renames to "final*" (hold= is appended). */
static void run(const char *name, const char *rules)
{
	struct tmount m;
	char hold[PATH_MAX], seq[32], from[PATH_MAX];
	struct ct_result r;

	ct_mount_held(&m, name, rules, hold);

	/* What mv(1) does for a new name: RENAME_NOREPLACE, published. */
	ct_write_seeded(tm_path(&m, "moved"), SIZE, 5);
	snprintf(from, sizeof(from), "%s", tm_path(&m, "moved"));
	CHECK_SYS(renameat2(AT_FDCWD, from, AT_FDCWD, tm_path(&m, "moved2"), RENAME_NOREPLACE));
	ct_write_seeded(tm_path(&m, "shard"), SIZE, 1);
	tm_sync(&m);
	ASSERT_EQ(ct_stat(&m, "blocked_ops"), 0);
	ct_check_seeded(tm_bpath(&m, "moved2"), SIZE, 5);

	ct_touch(hold);
	CHECK_SYS(renameat2(AT_FDCWD, tm_path(&m, "shard"), AT_FDCWD, tm_path(&m, "final"),
			    RENAME_NOREPLACE));
	usleep(300 * 1000);	/* the publisher's rename waits on the flag */
	ct_write_seeded(tm_bpath(&m, "final"), SIZE, 2);	/* another node's file */
	CHECK_SYS(unlink(hold));

	for (uint64_t t0 = mono_ms(); !ct_stat(&m, "blocked_ops"); usleep(20 * 1000))
		if (mono_ms() - t0 > 10000)
			FAILF("%s", "the rename was never blocked: the backend's file was replaced");
	ct_check_seeded(tm_bpath(&m, "final"), SIZE, 2);
	ct_check_seeded(tm_bpath(&m, "shard"), SIZE, 1);

	int fd = CHECK_SYS(open(tm_path(&m, "final"), O_RDONLY));
	errno = 0;
	if (fsync(fd) == 0)
		FAILF("%s", "fsync of the renamed file said durable while its rename is refused");
	if (errno != EEXIST)
		FAILF("fsync: %s, not the backend's EEXIST", strerror(errno));
	CHECK_SYS(close(fd));

	ct_blocked_seq(&m, seq);
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "skip", m.mnt, seq, NULL });
	ct_expect_status(&r, 0, "ckptfs-ctl skip");
	ct_result_free(&r);
	tm_sync(&m);
	ASSERT_EQ(ct_stat(&m, "blocked_ops"), 0);
	ct_check_seeded(tm_bpath(&m, "final"), SIZE, 2);
	ct_check_seeded(tm_bpath(&m, "shard"), SIZE, 1);

	/* No flag: replacing another writer's file is what was asked. */
	ct_write_seeded(tm_path(&m, "other"), SIZE, 3);
	tm_sync(&m);
	ct_touch(hold);
	CHECK_SYS(rename(tm_path(&m, "other"), tm_path(&m, "final3")));
	usleep(300 * 1000);
	ct_write_seeded(tm_bpath(&m, "final3"), SIZE, 4);
	CHECK_SYS(unlink(hold));
	tm_sync(&m);
	ASSERT_EQ(ct_stat(&m, "blocked_ops"), 0);
	ct_check_seeded(tm_bpath(&m, "final3"), SIZE, 3);

	tm_stop(&m);
	tm_cleanup(&m);
	printf("%s: RENAME_NOREPLACE onto a name made on the backend meanwhile is refused there\n",
	       name);
}

int main(void)
{
	tm_require_fuse();
	run("ctl-noreplace", "op=rename,name=final");
	/* A backend whose rename takes no flags (NFS, Lustre): EINVAL for any. */
	run("ctl-noreplace-noflags", "op=rename,err=EINVAL,flagged=1;op=rename,name=final");
	printf("ok\n");
	return 0;
}
