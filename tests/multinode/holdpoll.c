/*
 * holdpoll.c — a marker held for long costs the peers' records few reads,
 * and is still released soon after its peer confirms it (peers.c L5).
 *
 * Nodes a and b.  b's rename of its shard hangs until the test removes a
 * flag, so a's `latest` is held.  While it is held, a reads b's record
 * fast at first and less often as the hold ages: over the window
 * [WINDOW_FROM_MS, WINDOW_TO_MS) of the hold it reads it at most
 * MAX_READS times (the old watcher read it every 20 ms: ~400 times),
 * and at least a few (it still looks).  Once the shard lands, `latest`
 * follows it within RELEASE_MS (a look every hold/16: ~0.6 s here).
 */
#include "tests/multinode/mn_util.h"

#define SHARD (1u << 20)
#define WINDOW_FROM_MS 2000
#define WINDOW_TO_MS 10000
#define MAX_READS 80
#define MIN_READS 5
#define RELEASE_MS 3000

int main(void)
{
	struct mcluster c;
	char env[PATH_MAX + 128], hold[PATH_MAX];
	const char *const b_env[] = { env, NULL };

	tm_require_fuse();
	cu_require_root();
	mn_init(&c, "mn-holdpoll", 2);
	snprintf(hold, sizeof(hold), "%s/hold-rank_1", c.node[1].m.root);
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=rename,hold=%s,name=rank_1", hold);
	mn_mount(&c, 0, NULL, NULL);
	mn_mount(&c, 1, NULL, b_env);
	CHECK_SYS(mkdir(mn_path(&c, 0, "step1"), 0755));
	tm_sync(&c.node[0].m);
	for (uint64_t t0 = mono_ms(); access(mn_path(&c, 1, "step1"), F_OK); usleep(50000))
		if (mono_ms() - t0 > 10000)
			FAILF("node b never saw step1");

	cu_write_text(hold, "");
	mn_write(mn_path(&c, 0, "step1/rank_0.pt"), SHARD, 10);
	mn_write(mn_path(&c, 1, "step1/rank_1.pt"), SHARD, 11);
	cu_write_text(mn_path(&c, 0, "latest"), "step1");
	uint64_t t0 = mono_ms();
	while (mn_stat_num(&c, 0, "markers_held") < 1)
		if (mono_ms() - t0 > 10000)
			FAILF("`latest` was never held on node a");
		else
			usleep(10000);
	uint64_t t_held = mono_ms();

	while (mono_ms() - t_held < WINDOW_FROM_MS)
		usleep(20000);
	double r0 = mn_stat_num(&c, 0, "peer_reads");
	while (mono_ms() - t_held < WINDOW_TO_MS) {
		if (file_exists(mn_bpath(&c, "latest")))
			FAILF("`latest` reached the backend while b's shard is pending");
		usleep(100000);
	}
	double reads = mn_stat_num(&c, 0, "peer_reads") - r0;
	fprintf(stderr, "b's record read %.0f times in %d..%d s of the hold\n", reads,
		WINDOW_FROM_MS / 1000, WINDOW_TO_MS / 1000);
	if (reads > MAX_READS)
		FAILF("a held marker read b's record %.0f times in %d s (at most %d wanted)", reads,
		      (WINDOW_TO_MS - WINDOW_FROM_MS) / 1000, MAX_READS);
	if (reads < MIN_READS)
		FAILF("a held marker read b's record only %.0f times in %d s: it stopped looking",
		      reads, (WINDOW_TO_MS - WINDOW_FROM_MS) / 1000);

	CHECK_SYS(unlink(hold));
	uint64_t after = mn_marker_follows(&c, "step1/rank_1.pt", SHARD, "latest", "step1", 15000);
	if (after > RELEASE_MS)
		FAILF("`latest` followed b's shard only after %llu ms, after a %.1f s hold",
		      (unsigned long long)after, (double)(mono_ms() - t_held) / 1e3);
	ASSERT_TRUE(mn_has(mn_bpath(&c, "step1/rank_0.pt"), SHARD, 10));

	mn_stop(&c, 0);
	mn_stop(&c, 1);
	mn_cleanup(&c);
	return 0;
}
