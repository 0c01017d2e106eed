/*
 * damaged.c — a node whose own watermark record is damaged while it is
 * stopped cleanly does not forget what the record carried (nodes.h N5, N6).
 *
 * The record carries an open window of lost files and the operations an
 * administrator skipped, on and on across clean restarts; the next mount
 * learns them only from it.  Node b is stopped cleanly and its record
 * overwritten with bytes no daemon writes: the next mount of b cannot know
 * what it carried, so it reports an open window from 0 (logged once, with
 * the file and `ckptfs-ctl ack-lost`; stats "lost_window": "open";
 * ckptfs-stat "LOST:").  The old code took the unreadable record of a clean
 * stop for a first mount, reported nothing, and a's marker sealed after
 * b's restart reached the backend.
 *
 * 1. The marker rank 0 writes on a after b's restart stays held for b, and
 *    after `ckptfs-ctl ack-lost` on b (the record's window then closed) it
 *    stays held still: it was sealed inside the window (as lost.c).
 * 2. After the acknowledgement, a marker written later is released by b's
 *    watermark, not by a policy.
 * A node's first mount (no record at all: ENOENT) reports no window.
 */
#include "tests/multinode/mn_util.h"

#include <sys/stat.h>

#define SHARD (128u << 10)

/*
 * a and b up; checkpoint s1's marker released (b's record works); b
 * stopped cleanly, its record damaged, b mounted again.
 */
static void b_record_damaged(struct mcluster *c, const char *test)
{
	char path[PATH_MAX + 64];

	mn_init(c, test, 2);
	mn_mount(c, 0, NULL, NULL);
	mn_mount(c, 1, NULL, NULL);
	/* First mount: no record was there (ENOENT), nothing to report. */
	ASSERT_STR_EQ(mn_stat(c, 1, "lost_window"), "");
	ASSERT_EQ(mn_log_count(c, 1, "is damaged"), 0);
	mn_shards(c, 1, SHARD);
	mn_marker(c, 1);
	if (!mn_latest_names(c, 1, 5000))
		FAILF("before the damage, s1's marker is held: %s", mn_stat(c, 0, "marker_held_reason"));
	mn_stop(c, 1);
	if (!strstr(mn_record(c, 1), "\"state\": \"stopped\""))
		FAILF("b's record after a clean stop: %s", mn_record(c, 1));
	snprintf(path, sizeof(path), "%s/.ckptfs/nodes/b/watermark.json", c->node[1].m.backend);
	cu_write_text(path, "{\"format\": 4, \"node\": \"b\", \"mount_id\": \x01\x02 garbage");
	mn_mount(c, 1, NULL, NULL);
}

/* b reports an open window from 0, logged once with the file and the command. */
static void b_window_open(struct mcluster *c)
{
	ASSERT_EQ(mn_log_count(c, 1, "own watermark record BACKEND/.ckptfs/nodes/b/watermark.json"), 1);
	ASSERT_GE(mn_log_count(c, 1, "runs `ckptfs-ctl ack-lost MOUNT` on this node"), 1);
	ASSERT_STR_EQ(mn_stat(c, 1, "lost_window"), "open");
	ASSERT_EQ(mn_stat_num(c, 1, "lost_window_files"), 0);
	mn_stat_report(c, 1, "LOST:         window of unconfirmed seals of mount", "b");
	if (!mn_window_open(c, 1))
		FAILF("b's record does not report an open window: %s", mn_record(c, 1));
	if (!strstr(mn_record(c, 1), "\"gap_from_ns\": 0,"))
		FAILF("b's window does not start at 0: %s", mn_record(c, 1));
}

static void held_until_ack(void)
{
	struct mcluster c;
	char *out = NULL;

	b_record_damaged(&c, "mn-damaged");
	usleep(100 * 1000);
	mn_shards(&c, 2, SHARD);
	mn_marker(&c, 2);		/* sealed after b's restart */
	if (mn_latest_names(&c, 2, 2000))
		FAILF("`latest` names s2 on the backend although b's damaged record may have "
		      "carried an open window of lost files (b's record: %s)", mn_record(&c, 1));
	ASSERT_STR_EQ(cu_slurp(mn_bpath(&c, "latest")), "s1");
	b_window_open(&c);
	ASSERT_STR_EQ(mn_stat(&c, 0, "marker_held_for"), "b");
	const char *why = mn_stat(&c, 0, "marker_held_reason");
	if (!strstr(why, "ckptfs-ctl ack-lost") || !strstr(why, "no file is known lost"))
		FAILF("the marker's reason does not say no file is known lost, or does not name "
		      "the command: %s", why);
	fprintf(stderr, "REPORT (a): %s\n", why);
	mn_stat_report(&c, 0, "marker `latest` held for node b since", "a");

	int rc = mn_ack_lost(&c, 1, &out);
	if (rc != 0 || !out || !strstr(out, "is acknowledged"))
		FAILF("ckptfs-ctl ack-lost: exit %d: %s", rc, out ? out : "");
	fprintf(stderr, "ack-lost: %s", out);
	free(out);
	if (mn_window_open(&c, 1))
		FAILF("b's record still reports an open window after ack-lost: %s", mn_record(&c, 1));
	ASSERT_STR_EQ(mn_stat(&c, 1, "lost_window"), "closed");
	ASSERT_GE(mn_log_count(&c, 1, "an administrator acknowledged the window"), 1);
	/* Sealed inside the window: only the policy lets it go. */
	ASSERT_TRUE(!mn_latest_names(&c, 2, 1500));
	ASSERT_STR_EQ(mn_stat(&c, 0, "marker_held_for"), "b");
	mn_kill(&c, 0);		/* its unmount would wait for the held marker */
	ASSERT_STR_EQ(cu_slurp(mn_bpath(&c, "latest")), "s1");
	mn_cleanup(&c);
}

static void released_after_ack(void)
{
	struct mcluster c;

	b_record_damaged(&c, "mn-damaged-ack");
	b_window_open(&c);
	mn_ack_lost_ok(&c, 1);
	mn_stop(&c, 1);		/* the acknowledgement is carried on */
	mn_mount(&c, 1, NULL, NULL);
	if (mn_window_open(&c, 1))
		FAILF("the acknowledgement was not carried on by b's restart: %s", mn_record(&c, 1));
	ASSERT_STR_EQ(mn_stat(&c, 1, "lost_window"), "closed");
	mn_released_after_ack(&c, SHARD, "after ack-lost");
	mn_cleanup(&c);
}

int main(void)
{
	tm_require_fuse();
	cu_require_root();
	held_until_ack();
	released_after_ack();
	return 0;
}
