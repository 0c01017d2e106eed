/*
 * policy.c — marker_policy=release keeps its promise however many markers
 * it has let go (nodes.h N4: a held marker is released after
 * marker_timeout, logged, never held silently).
 *
 * Node a names peer b, which is never mounted, so every marker waits for
 * it; marker_timeout=0.2 with marker_policy=release.  MARKERS markers are
 * written one after another through a, and nobody reads a's stats (reading
 * them used to clean up after the policy).  Each must reach the backend
 * shortly after the timeout, each with its own log line giving the timeout
 * as configured ("0.2 s").  Fails on the old code at the 17th marker: the
 * released markers kept the sixteen slots of the held table, and a marker
 * without a slot was held for good with no timeout and no log line.
 */
#include "tests/multinode/mn_util.h"

#define MARKERS 20
#define WAIT_MS 5000

static bool latest_is(struct mcluster *c, unsigned s)
{
	char want[32];
	snprintf(want, sizeof(want), "step%u", s);
	return !strcmp(cu_slurp(mn_bpath(c, "latest")), want);
}

int main(void)
{
	struct mcluster c;
	double worst = 0;

	tm_require_fuse();
	cu_require_root();
	mn_init(&c, "mn-policy", 2);
	mn_mount(&c, 0, "marker_timeout=0.2,marker_policy=release", NULL);
	for (unsigned s = 1; s <= MARKERS; s++) {
		char text[32];
		snprintf(text, sizeof(text), "step%u", s);
		cu_write_text(mn_path(&c, 0, "latest"), text);
		double t0 = mn_now_ms();
		while (!latest_is(&c, s) && mn_now_ms() - t0 < WAIT_MS)
			usleep(5000);
		if (!latest_is(&c, s))
			FAILF("marker %u of %u not released %d ms after marker_timeout=0.2 under "
			      "marker_policy=release (%d released and logged before it)", s, MARKERS,
			      WAIT_MS, mn_log_count(&c, 0, "(marker_policy=release)"));
		if (mn_now_ms() - t0 > worst)
			worst = mn_now_ms() - t0;
	}
	ASSERT_EQ(mn_log_count(&c, 0, "released after 0.2 s although node b"), MARKERS);
	fprintf(stderr, "%d markers released by the policy, the slowest after %.0f ms\n", MARKERS,
		worst);
	ASSERT_EQ(mn_stat_num(&c, 0, "markers_released_by_policy"), MARKERS);
	mn_cleanup(&c);
	return 0;
}
