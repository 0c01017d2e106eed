/*
 * lost.c — a peer that lost files in an unclean stop holds every later
 * marker until an administrator acknowledges the loss (nodes.h N5).
 *
 * 1. Node b's daemon dies with its shard of checkpoint s1 sealed (close
 *    returned) but not durable (its rename is stuck, a fault) and is
 *    mounted again at once: recovery reports the shard never persisted.
 *    Rank 0 on node a, slow after the barrier, writes `latest` = s1 only
 *    now, after b's restart.  The marker must stay held: the backend must
 *    never hold a `latest` naming a checkpoint whose shard is gone (the old
 *    code ended b's window at its restart and released it).  a's reason
 *    and log name node b and `ckptfs-ctl ack-lost`; b's log says the window
 *    stays open until then, ckptfs-stat on b prints "LOST:".  A clean
 *    restart of b keeps the window open.  After `ckptfs-ctl ack-lost` on b
 *    (a second one is refused: nothing is open) the record shows a closed
 *    window, and the marker, sealed inside it, is still held.
 * 2. b loses a shard, restarts, the loss is acknowledged; b is then
 *    killed while idle and mounted again, then stopped cleanly and mounted
 *    again: the acknowledgement is carried on (the record's window stays
 *    closed, its lost files counted), and the marker of a checkpoint
 *    written after it is released by b's watermark, not by a policy.
 * 3. b's shard is sealed but its publisher never notes it in the log (its
 *    log appends hang), and b is killed: nothing on the backend says the
 *    shard existed.  b's seal ledger (backend/ledger.c) does: the next
 *    mount counts what was sealed past the log's last record as lost, and
 *    the marker rank 0 writes after b's restart stays held (the old code,
 *    counting intent records only, ended the window at the restart).
 * (b killed while idle loses nothing: its window ends at its restart and
 * holds nothing for good — killed.c, case 4.)
 */
#include "tests/multinode/mn_util.h"

#include <sys/stat.h>

#define SHARD (256u << 10)

/*
 * Nodes a and b up; b seals its shard of s1 and dies before it is durable;
 * it is mounted again at once.  It dies once its publisher has noted the
 * shard as queued (the intent record recovery counts lost files by): a
 * kill in the instant between the close and that note loses the shard
 * uncounted, and the window then ends at the restart (docs/contract.md).
 */
static void b_loses_shard(struct mcluster *c, const char *test)
{
	char flag[PATH_MAX], env[PATH_MAX + 96], man[PATH_MAX + 64];
	const char *const e[] = { env, NULL };

	mn_init(c, test, 2);
	mn_mount(c, 0, NULL, NULL);
	snprintf(flag, sizeof(flag), "%s/stuck", c->node[1].m.root);
	cu_write_text(flag, "");
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=rename,delay_ms=60000,name=shard,while=%s", flag);
	mn_mount(c, 1, NULL, e);
	mn_shards(c, 1, SHARD);		/* both closes returned: the barrier is passed */
	snprintf(man, sizeof(man), "%s/.ckptfs/nodes/b/manifest.log", c->node[1].m.backend);
	for (uint64_t t0 = mono_ms(); !strstr(cu_slurp(man), "s1/shard1"); usleep(2000))
		if (mono_ms() - t0 > 5000)
			FAILF("b's manifest has no intent record of s1/shard1: %s", cu_slurp(man));
	mn_kill(c, 1);
	unlink(flag);
	mn_mount(c, 1, NULL, NULL);
	ASSERT_GE(mn_log_count(c, 1, "never persisted: s1/shard1"), 1);
}

/* b reports the loss, its window open. */
static void b_window_open(struct mcluster *c)
{
	ASSERT_GE(mn_log_count(c, 1, "runs `ckptfs-ctl ack-lost MOUNT` on this node"), 1);
	ASSERT_STR_EQ(mn_stat(c, 1, "lost_window"), "open");
	ASSERT_EQ(mn_stat_num(c, 1, "lost_window_files"), 1);
	if (!mn_window_open(c, 1))
		FAILF("b's record does not report an open window: %s", mn_record(c, 1));
}

static void held_until_ack(void)
{
	struct mcluster c;
	char *out = NULL;

	b_loses_shard(&c, "mn-lost");
	usleep(100 * 1000);
	mn_marker(&c, 1);		/* sealed after b's restart */
	if (mn_latest_names(&c, 1, 2000))
		FAILF("`latest` names s1 on the backend but b's shard of s1 was lost in b's crash "
		      "(has shard: %d; b's record: %s)", mn_has(mn_bpath(&c, "s1/shard1"), SHARD, 11),
		      mn_record(&c, 1));
	b_window_open(&c);
	ASSERT_STR_EQ(mn_stat(&c, 0, "marker_held_for"), "b");
	const char *why = mn_stat(&c, 0, "marker_held_reason");
	if (!strstr(why, "ckptfs-ctl ack-lost") || !strstr(why, "1 file lost"))
		FAILF("the marker's reason does not name the lost file and the command: %s", why);
	fprintf(stderr, "REPORT (a): %s\n", why);
	ASSERT_GE(mn_log_count(&c, 0, "`ckptfs-ctl ack-lost` on that node"), 1);
	mn_stat_report(&c, 1, "LOST:         1 file lost in the unclean stop of mount", "b");

	mn_stop(&c, 1);		/* a clean restart forgets nothing */
	mn_mount(&c, 1, NULL, NULL);
	if (!mn_window_open(&c, 1))
		FAILF("after a clean restart b's window is no longer open: %s", mn_record(&c, 1));
	ASSERT_GE(mn_log_count(&c, 1, "which lost 1 file, is still open"), 1);
	ASSERT_STR_EQ(mn_stat(&c, 1, "lost_window"), "open");
	ASSERT_TRUE(!mn_latest_names(&c, 1, 1500));

	int rc = mn_ack_lost(&c, 1, &out);
	if (rc != 0 || !out || !strstr(out, "is acknowledged"))
		FAILF("ckptfs-ctl ack-lost: exit %d: %s", rc, out ? out : "");
	fprintf(stderr, "ack-lost: %s", out);
	free(out);
	if (mn_window_open(&c, 1))
		FAILF("b's record still reports an open window after ack-lost: %s", mn_record(&c, 1));
	ASSERT_STR_EQ(mn_stat(&c, 1, "lost_window"), "closed");
	ASSERT_GE(mn_log_count(&c, 1, "an administrator acknowledged the 1 file lost"), 1);
	rc = mn_ack_lost(&c, 1, &out);
	if (rc != 1 || !out || !strstr(out, "no window is open"))
		FAILF("a second ack-lost: exit %d: %s", rc, out ? out : "");
	free(out);
	/* Sealed inside the window: only the policy lets it go. */
	ASSERT_TRUE(!mn_latest_names(&c, 1, 1500));
	if (!mn_wait_held(&c, "b", "stopped uncleanly", 5000))
		FAILF("after ack-lost, a's marker is not held for b's unclean stop: held %s for %s: %s",
		      mn_stat(&c, 0, "marker_held"), mn_stat(&c, 0, "marker_held_for"),
		      mn_stat(&c, 0, "marker_held_reason"));
	mn_kill(&c, 0);		/* its unmount would wait for the held marker */
	ASSERT_TRUE(!file_exists(mn_bpath(&c, "latest")));
	mn_cleanup(&c);
}

static void released_after_ack(void)
{
	struct mcluster c;

	b_loses_shard(&c, "mn-lost-ack");
	b_window_open(&c);
	mn_ack_lost_ok(&c, 1);
	mn_kill(&c, 1);		/* idle: loses nothing, and must not forget the ack */
	mn_mount(&c, 1, NULL, NULL);
	mn_stop(&c, 1);
	mn_mount(&c, 1, NULL, NULL);
	if (mn_window_open(&c, 1) || !strstr(mn_record(&c, 1), "\"lost_files\": 1,"))
		FAILF("the acknowledgement was not carried on by b's restarts: %s", mn_record(&c, 1));
	ASSERT_STR_EQ(mn_stat(&c, 1, "lost_window"), "closed");
	mn_released_after_ack(&c, SHARD, "after ack-lost and two restarts of b");
	mn_cleanup(&c);
}

static void unrecorded(void)
{
	struct mcluster c;
	char flag[PATH_MAX], env[PATH_MAX + 64], man[PATH_MAX + 64];
	const char *const e[] = { env, NULL };

	mn_init(&c, "mn-lost-unrec", 2);
	mn_mount(&c, 0, NULL, NULL);
	snprintf(flag, sizeof(flag), "%s/log-hangs", c.node[1].m.root);
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=append,hold=%s", flag);
	mn_mount(&c, 1, NULL, e);
	cu_write_text(flag, "");	/* from now on b's log appends wait */
	mn_shards(&c, 1, SHARD);
	usleep(300 * 1000);
	snprintf(man, sizeof(man), "%s/.ckptfs/nodes/b/manifest.log", c.node[1].m.backend);
	if (strstr(cu_slurp(man), "s1/shard1"))
		FAILF("b's log notes s1/shard1 although its appends hang");
	mn_kill(&c, 1);
	unlink(flag);
	mn_mount(&c, 1, NULL, NULL);
	ASSERT_EQ(mn_log_count(&c, 1, "never persisted: s1/shard1"), 0);
	ASSERT_GE(mn_log_count(&c, 1, "after the last its log records"), 1);
	usleep(100 * 1000);
	mn_marker(&c, 1);		/* sealed after b's restart */
	if (mn_latest_names(&c, 1, 2000))
		FAILF("`latest` names s1 on the backend but b's shard of s1, never noted in its "
		      "log, was lost in b's crash (b's record: %s)", mn_record(&c, 1));
	ASSERT_STR_EQ(mn_stat(&c, 1, "lost_window"), "open");
	ASSERT_STR_EQ(mn_stat(&c, 0, "marker_held_for"), "b");
	fprintf(stderr, "REPORT (3): %s\n", mn_stat(&c, 0, "marker_held_reason"));
	mn_kill(&c, 0);		/* its unmount would wait for the held marker */
	mn_cleanup(&c);
}

int main(void)
{
	tm_require_fuse();
	cu_require_root();
	held_until_ack();
	released_after_ack();
	unrecorded();
	return 0;
}
