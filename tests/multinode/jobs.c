/*
 * jobs.c — with peers=N (a node count), a daemon of another job over the
 * same backend directory never stands in for a node of this job (nodes.h
 * N4; job=, default $SLURM_JOB_ID).
 *
 * Node c serves job "other" (peers=2) and runs throughout, writing fresh
 * records.  Node a serves job 4242 with peers=2: its other node, b, is not
 * mounted (it died before its shard was durable, say).  A marker written
 * through a must stay held: c's records pass every marker, but c is not
 * one of job 4242's nodes.  Without the job id c counted as a's one peer
 * and the marker was released with b's files missing.  Node d runs with
 * job=none though SLURM_JOB_ID=4242 is in its environment: it names no
 * job, so it does not count either.  The reason says that two daemons of
 * other jobs were not counted.  Then b mounts for job 4242, its job taken
 * from SLURM_JOB_ID in its environment: the marker follows.
 */
#include "tests/multinode/mn_util.h"

int main(void)
{
	struct mcluster c;
	const char *const b_env[] = { "SLURM_JOB_ID=4242", NULL };

	tm_require_fuse();
	cu_require_root();
	mn_init(&c, "mn-jobs", 4);
	mn_mount_raw(&c, 2, "node=c,peers=2,job=other", NULL);
	mn_mount_raw(&c, 3, "node=d,peers=2,job=none", b_env);
	ASSERT_STR_EQ(mn_stat(&c, 3, "node_job"), "");
	mn_mount_raw(&c, 0, "node=a,peers=2,job=4242", NULL);
	ASSERT_STR_EQ(mn_stat(&c, 0, "node_job"), "4242");
	mn_stat_report(&c, 0, "peers of job 4242 ", "ckptfs-stat");
	mn_write(mn_path(&c, 2, "other-job-file"), 4096, 3);	/* c's records move on */
	mn_write(mn_path(&c, 3, "no-job-file"), 4096, 4);
	mn_write(mn_path(&c, 0, "shard-a"), 1 << 20, 1);
	cu_write_text(mn_path(&c, 0, "latest"), "step1");
	if (!mn_wait_file(mn_bpath(&c, "shard-a"), 1 << 20, 10000))
		FAILF("a's own shard did not reach the backend");
	mn_wait_peer_reads(&c, 0, 3);
	usleep(1500 * 1000);	/* c's discovery (each second) and a few of its records */
	if (access(mn_bpath(&c, "latest"), F_OK) == 0)
		FAILF("the marker was released while job 4242's node b never confirmed it: a "
		      "daemon of another job stood in for it");
	const char *why = mn_stat(&c, 0, "marker_held_reason");
	fprintf(stderr, "held: %s\n", why);
	if (!strstr(why, "0 of job 4242 are known (2 of other jobs not counted)"))
		FAILF("the held marker's reason does not say another job's daemon was left out: %s",
		      why);

	mn_mount_raw(&c, 1, "node=b,peers=2", b_env);	/* job from the environment */
	ASSERT_STR_EQ(mn_stat(&c, 1, "node_job"), "4242");
	if (!mn_wait_file(mn_bpath(&c, "latest"), 5, 15000))
		FAILF("the marker was not released after job 4242's node b mounted (a: %s; b's "
		      "record: %s)", mn_stat(&c, 0, "marker_held_reason"),
		      cu_slurp(mn_bpath(&c, ".ckptfs/nodes/b/watermark.json")));
	ASSERT_STR_EQ(cu_slurp(mn_bpath(&c, "latest")), "step1");
	mn_cleanup(&c);
	return 0;
}
