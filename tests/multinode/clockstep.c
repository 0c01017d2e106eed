/*
 * clockstep.c — a clock stepped back never lets a marker go before a
 * peer's shard (nodes.h N3, N4; peers.c L1).
 *
 * Seal times never go back: after the wall clock steps back, a node stamps
 * its seals with the last stamp it gave (the floor) until the clock passes
 * it again.  Such a stamp lies ahead of the seal's time by up to the step,
 * which the peers' margin (the clocks' error) does not cover; the node's
 * watermark T must not claim it.
 *
 * Nodes a and b on one machine (margin 1 ms).  b's clock runs AHEAD_MS
 * ahead for the test's first FOR_MS (a test hook), and b seals a file then, so its
 * floor is ~AHEAD_MS ahead of the real time after the step back.  Then a
 * checkpoint: b's shard, whose rename onto the backend hangs until the test
 * lets it go, a's shard, and `latest` through a.  `latest` must stay off
 * the backend while b's shard is pending (on the old code b's T was the
 * shard's floored stamp, ~AHEAD_MS ahead of a's marker, and `latest` went
 * at once), and follow it once it is durable.
 */
#include "tests/multinode/mn_util.h"

#include <stdlib.h>
#include <time.h>

#define SHARD (1u << 20)
#define AHEAD_MS 30000
#define FOR_MS 6000
#define SETTLE_MS 2500

static uint64_t real_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A number field of b's watermark record on the backend, or 0. */
static uint64_t b_record(struct mcluster *c, const char *field)
{
	char key[64];
	const char *rec = cu_slurp(mn_bpath(c, ".ckptfs/nodes/b/watermark.json"));
	snprintf(key, sizeof(key), "\"%s\": ", field);
	const char *p = strstr(rec, key);
	return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

int main(void)
{
	struct mcluster c;
	char env[PATH_MAX + 128], hold[PATH_MAX], ahead[64];
	const char *const b_env[] = { env, ahead, NULL };

	tm_require_fuse();
	cu_require_root();
	mn_init(&c, "mn-clockstep", 2);
	snprintf(hold, sizeof(hold), "%s/hold-rank_1", c.node[1].m.root);
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=rename,hold=%s,name=rank_1", hold);
	mn_mount(&c, 0, NULL, NULL);
	CHECK_SYS(mkdir(mn_path(&c, 0, "step1"), 0755));
	tm_sync(&c.node[0].m);
	uint64_t t_step = mono_ms() + FOR_MS;	/* b's clock is ahead until then */
	snprintf(ahead, sizeof(ahead), "CKPTFS_TEST_WALL_AHEAD=%d:%llu", AHEAD_MS,
		 (unsigned long long)t_step);
	mn_mount(&c, 1, NULL, b_env);
	for (uint64_t t0 = mono_ms(); access(mn_path(&c, 1, "step1"), F_OK); usleep(50000))
		if (mono_ms() - t0 > 10000)
			FAILF("node b never saw step1");

	/* A seal while b's clock is ahead: its floor. */
	mn_write(mn_path(&c, 1, "warm.txt"), 4096, 1);
	if (mono_ms() >= t_step)
		FAILF("the first seal on b came after its clock's step (%d ms): too slow a machine",
		      FOR_MS);
	tm_sync(&c.node[1].m);
	uint64_t w = b_record(&c, "written_ns");
	if (w < real_ns() + (AHEAD_MS / 2) * 1000000ull)
		FAILF("b's clock is not ahead (record written at %llu, now %llu): the test hook "
		      "did not take", (unsigned long long)w, (unsigned long long)real_ns());

	/*
	 * The step back; then a seal on b after it (stamped with the floor),
	 * durable, and a record saying so, which a reads within a second.
	 */
	while (mono_ms() < t_step + 100)
		usleep(50000);
	mn_write(mn_path(&c, 1, "after.txt"), 4096, 2);
	tm_sync(&c.node[1].m);
	for (uint64_t t0 = mono_ms(); b_record(&c, "seq") < 2; usleep(50000))
		if (mono_ms() - t0 > 10000)
			FAILF("b's record never counted its second file durable");
	usleep(1500000);
	fprintf(stderr, "b's clock stepped back %d s; b's T is %.3f s from the real time\n",
		AHEAD_MS / 1000, ((double)b_record(&c, "durable_before_ns") - (double)real_ns()) / 1e9);

	cu_write_text(hold, "");
	mn_write(mn_path(&c, 1, "step1/rank_1.pt"), SHARD, 11);
	mn_write(mn_path(&c, 0, "step1/rank_0.pt"), SHARD, 10);
	cu_write_text(mn_path(&c, 0, "latest"), "step1");	/* after the barrier */
	for (uint64_t t0 = mono_ms(); mono_ms() - t0 < SETTLE_MS; usleep(20000))
		if (file_exists(mn_bpath(&c, "latest")))
			FAILF("`latest` reached the backend while b's shard is pending: b's T "
			      "(%llu) claims its shard's floored stamp, %.1f s past the real time",
			      (unsigned long long)b_record(&c, "durable_before_ns"),
			      ((double)b_record(&c, "durable_before_ns") - (double)real_ns()) / 1e9);
	fprintf(stderr, "`latest` held while b's shard is pending: %s\n",
		mn_stat(&c, 0, "marker_held_reason"));

	CHECK_SYS(unlink(hold));
	mn_marker_follows(&c, "step1/rank_1.pt", SHARD, "latest", "step1", 15000);
	ASSERT_TRUE(mn_has(mn_bpath(&c, "step1/rank_0.pt"), SHARD, 10));

	mn_stop(&c, 0);
	mn_stop(&c, 1);
	mn_cleanup(&c);
	return 0;
}
