/*
 * skip.c — an administrator's skip on one node never lets another node's
 * marker name the checkpoint it took a shard of (nodes.h N6).
 *
 * Node b's rename of its shard of step1 is refused (EACCES, a permanent
 * error), so b's shard blocks there and a's `latest`, written after the
 * barrier, is held for b.  b's operator gives up on the shard: `ckptfs-ctl
 * skip` on b.  b's watermark then passes the skipped shard, which will
 * never be on the backend; b's record must say so ("skipped": 1), and a's
 * `latest` must stay held, saying why, for SETTLE_MS — and still after b
 * is unmounted and mounted again (the skip is carried on for good).
 * Fails on the old code: `latest` reached the backend about 3 s after the
 * skip, naming step1 without b's shard.
 */
#include "tests/multinode/mn_util.h"

#include <sys/stat.h>

#define SHARD (1u << 20)
#define SETTLE_MS 4000

/* a's `latest` is held for node b because of the skip, and not on the backend. */
static void held_for_skip(struct mcluster *c, const char *when)
{
	char why[600] = "";

	for (uint64_t t0 = mono_ms(); mono_ms() - t0 < SETTLE_MS; usleep(50000)) {
		if (file_exists(mn_bpath(c, "latest")))
			FAILF("%s: node a's `latest` reached the backend (\"%s\"), but node b's shard "
			      "of step1 was skipped and never will", when, cu_slurp(mn_bpath(c, "latest")));
		snprintf(why, sizeof(why), "%s", mn_stat(c, 0, "marker_held_reason"));
	}
	if (!strstr(why, "an administrator skipped 1 operation on node b"))
		FAILF("%s: `latest` is not reported held for b's skip: '%s'", when, why);
	fprintf(stderr, "%s: held: %s\n", when, why);
}

int main(void)
{
	struct mcluster c;
	const char *const refuse[] = { "CKPTFS_FAULT=op=rename,err=EACCES,name=rank_1", NULL };
	char seq[32], *out = NULL;

	tm_require_fuse();
	cu_require_root();
	mn_init(&c, "mn-skip", 2);
	mn_mount(&c, 0, NULL, NULL);
	mn_mount(&c, 1, NULL, refuse);
	CHECK_SYS(mkdir(mn_path(&c, 0, "step1"), 0755));
	tm_sync(&c.node[0].m);
	for (uint64_t t0 = mono_ms(); access(mn_path(&c, 1, "step1"), F_OK) != 0; usleep(50000))
		if (mono_ms() - t0 > 10000)
			FAILF("node b never saw step1");
	mn_write(mn_path(&c, 0, "step1/rank_0.pt"), SHARD, 10);
	mn_write(mn_path(&c, 1, "step1/rank_1.pt"), SHARD, 11);
	cu_write_text(mn_path(&c, 0, "latest"), "step1");	/* after the barrier */
	for (uint64_t t0 = mono_ms(); !mn_stat_num(&c, 1, "blocked_seq"); usleep(50000))
		if (mono_ms() - t0 > 10000)
			FAILF("node b's shard never blocked");
	ASSERT_TRUE(!file_exists(mn_bpath(&c, "latest")));

	snprintf(seq, sizeof(seq), "%s", mn_stat(&c, 1, "blocked_seq"));
	const char *argv[] = { mn_tool("ckptfs-ctl"), "skip", c.node[1].m.mnt, seq, NULL };
	int rc = tm_run(argv, &out);
	if (rc != 0 || !out || !strstr(out, "rank_1.pt"))
		FAILF("ckptfs-ctl skip %s on node b: rc %d: %s", seq, rc, out ? out : "");
	free(out);
	held_for_skip(&c, "after the skip");
	char rec[1024];
	snprintf(rec, sizeof(rec), "%s", cu_slurp(mn_bpath(&c, ".ckptfs/nodes/b/watermark.json")));
	if (!strstr(rec, "\"skipped\": 1,"))
		FAILF("node b's record does not report the skip: %s", rec);

	mn_stop(&c, 1);
	mn_mount(&c, 1, NULL, NULL);
	held_for_skip(&c, "after b's remount");
	ASSERT_TRUE(!mn_has(mn_bpath(&c, "step1/rank_1.pt"), SHARD, 11));
	/* a cannot drain its held marker: SIGKILL it rather than wait for the drain */
	mn_kill(&c, 0);
	mn_cleanup(&c);
	return 0;
}
