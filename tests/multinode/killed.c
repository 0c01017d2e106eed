/*
 * killed.c — a peer that stops advancing holds markers, visibly, and is
 * never silently forgotten (nodes.h N4, N5).
 *
 * 1. Node b is SIGKILLed before its shard is durable (its publisher sleeps
 *    in the shard's rename, a fault).  The marker written through a is
 *    held: a's stats name it and node b, ckptfs-stat prints "marker
 *    `latest` held for node b since ...", the backend never gets it.  b is
 *    mounted again and recovers: its shard was lost, so its new watermark
 *    reports the unconfirmed window, and the marker stays held — now saying
 *    that b stopped uncleanly — under marker_policy=hold.  The next
 *    checkpoint, written after b came back, is not held for b (its seal
 *    time is after b's window) but waits in a's order behind the held one.
 * 2. The same with marker_policy=release, marker_timeout=2: the marker is
 *    released after the timeout, with a log line saying so.
 * 2b. As 1, with b's last watermark record damaged while b is down (a
 *    torn write, a stale or failing read of a network file system): b
 *    cannot know what its lost incarnation confirmed, says so, and reports
 *    everything it sealed as unconfirmed — the marker stays held.
 * 2c. As 1, with b's record replaced by the "stopped" one of the clean
 *    mount before (what a client answering from a stale view shows): that
 *    record is not the killed mount's, so it proves nothing about it; its
 *    T bounds the window and the marker stays held.
 * 3. b is stopped (SIGSTOP) and resumed: the marker waits while b is
 *    silent and is released once b's watermark passes it.
 * 4. b is killed while idle and mounted again before the next checkpoint:
 *    it lost nothing, so its window ends at its restart (its record and
 *    stats say so; no `ckptfs-ctl ack-lost` is needed), and that
 *    checkpoint's marker is released as soon as b confirms it.
 * 5. b unmounted cleanly and mounted again, its shard stuck: held (a
 *    "stopped" record is no proof: a caching client may still show it).
 */
#include "tests/multinode/mn_util.h"

#include <signal.h>
#include <sys/stat.h>

#define SHARD (256u << 10)

static void checkpoint(struct mcluster *c, unsigned step)
{
	char rel[96], text[32];

	snprintf(rel, sizeof(rel), "s%u", step);
	for (int i = 0; i < 2; i++)
		if (mkdir(mn_path(c, i, rel), 0755) < 0 && errno != EEXIST)
			FAILF("mkdir: %s", strerror(errno));
	for (int i = 1; i >= 0; i--) {
		snprintf(rel, sizeof(rel), "s%u/shard%d", step, i);
		mn_write(mn_path(c, i, rel), SHARD, step * 10 + (unsigned)i);
	}
	snprintf(text, sizeof(text), "s%u", step);
	cu_write_text(mn_path(c, 0, "latest"), text);
}

static bool backend_latest(struct mcluster *c, unsigned step)
{
	char want[16];
	snprintf(want, sizeof(want), "s%u", step);
	return !strcmp(cu_slurp(mn_bpath(c, "latest")), want);
}

static bool wait_latest(struct mcluster *c, unsigned step, unsigned ms)
{
	for (uint64_t t0 = mono_ms(); mono_ms() - t0 < ms; usleep(5000))
		if (backend_latest(c, step))
			return true;
	return false;
}

/* b mounted with its shards' renames stuck while the flag exists. */
static void mount_b_stuck(struct mcluster *c, char *flag)
{
	static char env[PATH_MAX + 96];
	const char *const e[] = { env, NULL };

	snprintf(flag, PATH_MAX, "%s/stuck", c->node[1].m.root);
	cu_write_text(flag, "");
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=rename,delay_ms=60000,name=shard,while=%s", flag);
	mn_mount(c, 1, NULL, e);
}

/* b's watermark record through b's own backend client (GlusterFS: no stale view). */
static const char *b_record(struct mcluster *c)
{
	static char path[PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/.ckptfs/nodes/b/watermark.json", c->node[1].m.backend);
	return path;
}

enum killed_case { KILLED_HOLD, KILLED_RELEASE, KILLED_DAMAGED, KILLED_STALE };

static void killed(enum killed_case kc)
{
	static const char *const names[] = { "mn-killed", "mn-killed-rel", "mn-killed-dmg",
					     "mn-killed-stale" };
	bool release = kc == KILLED_RELEASE;
	struct mcluster c;
	char flag[PATH_MAX], *stale = NULL;

	mn_init(&c, names[kc], 2);
	mn_mount(&c, 0, release ? "marker_policy=release,marker_timeout=2" : NULL, NULL);
	if (kc == KILLED_STALE) {	/* a clean mount of b first: its "stopped" record */
		mn_mount(&c, 1, NULL, NULL);
		mn_stop(&c, 1);
		stale = strdup(cu_slurp(b_record(&c)));
		ASSERT_TRUE(strstr(stale, "\"stopped\"") != NULL);
	}
	mount_b_stuck(&c, flag);
	checkpoint(&c, 1);
	if (!mn_wait_held(&c, "b", "node b", 5000))
		FAILF("the marker was not reported held for node b: marker_held='%s'",
		      mn_stat(&c, 0, "marker_held"));
	if (!release)
		mn_stat_report(&c, 0, "marker `latest` held for node b since", "b silent");
	ASSERT_TRUE(!file_exists(mn_bpath(&c, "latest")));
	ASSERT_TRUE(mn_wait_file(mn_bpath(&c, "s1/shard0"), SHARD, 5000) != 0);	/* a's own goes on */

	mn_kill(&c, 1);			/* before its shard is durable */
	usleep(300 * 1000);
	ASSERT_TRUE(!file_exists(mn_bpath(&c, "latest")));
	ASSERT_TRUE(!file_exists(mn_bpath(&c, "s1/shard1")));
	unlink(flag);
	if (kc == KILLED_DAMAGED)
		cu_write_text(b_record(&c), "{\"format\": 1, \"no");
	if (kc == KILLED_STALE)
		cu_write_text(b_record(&c), stale);
	free(stale);
	mn_mount(&c, 1, NULL, NULL);	/* recovers: its shard is reported lost */
	ASSERT_GE(mn_log_count(&c, 1, "never persisted: s1/shard1"), 1);
	if (kc == KILLED_DAMAGED)
		ASSERT_GE(mn_log_count(&c, 1, "its last watermark cannot be read (Bad message): "
				       "nothing it sealed is reported to peers as confirmed"), 1);
	else if (kc == KILLED_STALE)
		ASSERT_GE(mn_log_count(&c, 1, "operations it sealed after the last readable "
				       "watermark"), 1);
	else
		ASSERT_GE(mn_log_count(&c, 1, "operations it sealed after its last watermark"), 1);
	if (release) {
		if (!wait_latest(&c, 1, 8000))
			FAILF("marker_policy=release did not release the marker");
		ASSERT_GE(mn_log_count(&c, 0, "(marker_policy=release)"), 1);
		ASSERT_EQ(mn_stat_num(&c, 0, "markers_released_by_policy"), 1);
		fprintf(stderr, "released by the policy, logged\n");
		mn_cleanup(&c);
		return;
	}
	if (!mn_wait_held(&c, "b", "stopped uncleanly", 5000))
		FAILF("after b's recovery the marker is not reported held for its lost window: %s",
		      mn_stat(&c, 0, "marker_held_reason"));
	char held[64], node[64];
	snprintf(held, sizeof(held), "%s", mn_stat(&c, 0, "marker_held"));
	snprintf(node, sizeof(node), "%s", mn_stat(&c, 0, "marker_held_for"));
	fprintf(stderr, "REPORT (b recovered, shard lost): marker `%s` held for node %s: %s\n",
		held, node, mn_stat(&c, 0, "marker_held_reason"));
	/* The next checkpoint, after b came back: not held for b, but behind step 1's. */
	checkpoint(&c, 2);
	ASSERT_TRUE(mn_wait_file(mn_bpath(&c, "s2/shard1"), SHARD, 5000) != 0);
	usleep(1500 * 1000);
	ASSERT_TRUE(!file_exists(mn_bpath(&c, "latest")));
	ASSERT_EQ(mn_stat_num(&c, 0, "markers_held"), 1);
	ASSERT_GE(mn_log_count(&c, 0, "marker latest (operation"), 1);
	ASSERT_EQ(mn_log_count(&c, 0, "released"), 0);
	/* Never released silently: SIGKILL a too (its unmount would wait for the marker). */
	mn_kill(&c, 0);
	ASSERT_TRUE(!file_exists(mn_bpath(&c, "latest")));
	mn_cleanup(&c);
}

static void stopped_then_resumed(void)
{
	struct mcluster c;

	mn_init(&c, "mn-sigstop", 2);
	mn_mount(&c, 0, NULL, NULL);
	mn_mount(&c, 1, NULL, NULL);
	checkpoint(&c, 1);
	ASSERT_TRUE(wait_latest(&c, 1, 5000));
	kill(c.node[1].m.pid, SIGSTOP);
	usleep(400 * 1000);		/* b's last watermark is older than what follows */
	cu_write_text(mn_path(&c, 0, "latest"), "s1b");
	if (!mn_wait_held(&c, "b", NULL, 5000))
		FAILF("the marker was not held while b was stopped");
	usleep(500 * 1000);
	ASSERT_STR_EQ(cu_slurp(mn_bpath(&c, "latest")), "s1");
	kill(c.node[1].m.pid, SIGCONT);
	uint64_t t0 = mono_ms();
	for (; mono_ms() - t0 < 20000 && strcmp(cu_slurp(mn_bpath(&c, "latest")), "s1b"); usleep(5000))
		;
	ASSERT_STR_EQ(cu_slurp(mn_bpath(&c, "latest")), "s1b");
	fprintf(stderr, "b resumed: marker released %llu ms later\n",
		(unsigned long long)(mono_ms() - t0));
	ASSERT_EQ(mn_stat_num(&c, 0, "markers_held"), 0);
	mn_cleanup(&c);
}

static void restarted_before(void)
{
	struct mcluster c;

	mn_init(&c, "mn-restart", 2);
	mn_mount(&c, 0, NULL, NULL);
	mn_mount(&c, 1, NULL, NULL);
	checkpoint(&c, 1);
	ASSERT_TRUE(wait_latest(&c, 1, 5000));
	mn_kill(&c, 1);			/* idle: nothing of it pending */
	mn_mount(&c, 1, NULL, NULL);
	const char *rec = cu_slurp(b_record(&c));
	if (!strstr(rec, "\"lost_files\": 0,") || strstr(rec, "\"gap_mount\": \"-\"") ||
	    strstr(rec, "\"gap_to_ns\": 0,"))
		FAILF("b lost nothing: its record should report a window ending at its restart: %s",
		      rec);
	ASSERT_STR_EQ(mn_stat(&c, 1, "lost_window"), "closed");
	checkpoint(&c, 2);
	if (!wait_latest(&c, 2, 5000))
		FAILF("the marker of a checkpoint written after b's restart was held: %s",
		      mn_stat(&c, 0, "marker_held_reason"));
	ASSERT_TRUE(mn_has(mn_bpath(&c, "s2/shard1"), SHARD, 21));
	mn_cleanup(&c);
}

/*
 * b unmounted cleanly, then mounted again with its shard stuck: the marker
 * is held.  (Its "stopped" record proves nothing about what it sealed
 * since; a caching client — GlusterFS — may still show that record after
 * b's new mount wrote its own.)
 */
static void stopped_cleanly_then_stuck(void)
{
	struct mcluster c;
	char flag[PATH_MAX];

	mn_init(&c, "mn-restop", 2);
	mn_mount(&c, 0, NULL, NULL);
	mn_mount(&c, 1, NULL, NULL);
	checkpoint(&c, 1);
	ASSERT_TRUE(wait_latest(&c, 1, 5000));
	mn_stop(&c, 0);
	mn_stop(&c, 1);
	mn_mount(&c, 0, NULL, NULL);	/* a reads b's records afresh */
	mount_b_stuck(&c, flag);
	checkpoint(&c, 2);
	if (!mn_wait_held(&c, "b", NULL, 5000))
		FAILF("the marker was not held for b, whose shard is stuck: %s",
		      mn_stat(&c, 0, "marker_held_reason"));
	usleep(1500 * 1000);
	ASSERT_STR_EQ(cu_slurp(mn_bpath(&c, "latest")), "s1");
	mn_kill(&c, 1);
	mn_kill(&c, 0);
	mn_cleanup(&c);
}

int main(void)
{
	tm_require_fuse();
	stopped_cleanly_then_stuck();
	killed(KILLED_HOLD);
	killed(KILLED_RELEASE);
	killed(KILLED_DAMAGED);
	killed(KILLED_STALE);
	stopped_then_resumed();
	restarted_before();
	return 0;
}
