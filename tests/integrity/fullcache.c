/*
 * fullcache.c — a writer waiting for cache space is never left waiting on a
 * backend that has stopped moving (contract item 2, "no wait is
 * unbounded"; fs/wait.c W3), and is never failed while it moves.
 *
 * Each case fills the cache (tests/integrity/blockw.h) and blocks a writer
 * on it, with drain_timeout short:
 *  1. dead backend, every data write fails with ENOSPC: the writer's write
 *     fails with ENOSPC — the backend's own error — no sooner than
 *     drain_timeout after it began and not much later (the spiller's
 *     failures meanwhile logged once, not per chunk); the file keeps
 *     exactly the bytes written before (no partial write), and once the
 *     backend recovers everything, that file included, is published;
 *  2. hung backend, every data write takes 4 s (one flusher): no progress
 *     for drain_timeout, no error reported: EIO, in the same window;
 *  3. slow backend, every data write takes 250 ms: the writer waits longer
 *     than drain_timeout in all, but the backend keeps moving, so every
 *     write succeeds.
 */
#include "tests/integrity/blockw.h"

#define DRAIN_S 2

static void mount_gated(struct tmount *m, const char *name, const char *opts, const char *rule,
			char *gate, size_t glen)
{
	char o[256];

	tm_init(m, name);
	snprintf(gate, glen, "%s/gate", m->root);
	snprintf(o, sizeof(o), BW_OPTS ",%s", opts);
	const char *env[] = { cu_fault_env("%s,while=%s", rule, gate), NULL };
	tm_mount(m, o, env);
	it_gate_set(gate, true);
}

/* Cases 1 and 2: the writer fails with `want`, in [DRAIN_S, DRAIN_S + 5 s]. */
static void stalled(const char *name, const char *opts, const char *rule, int want)
{
	struct tmount m;
	struct bw_child w;
	char gate[PATH_MAX];
	uint64_t written;
	int err, st;

	mount_gated(&m, name, opts, rule, gate, sizeof(gate));
	bw_fill(&m, want);
	bw_spawn(&w, &m, "w", 8 * MiB, 0);
	if (!bw_report(&w, (DRAIN_S + 10) * 1000, &err, &written))
		FAILF("%s: the writer still waits %d s after it began (drain_timeout=%d)", name,
		      DRAIN_S + 10, DRAIN_S);
	uint64_t took = mono_ms() - w.t_start;
	if (err != want)
		FAILF("%s: the writer got %s, expected %s", name, err ? strerror(err) : "no error",
		      strerror(want));
	ASSERT_EQ(written, BW_BLOCKED_AT);
	ASSERT_GE(took, DRAIN_S * 1000 - 100);	/* it waited out the whole timeout */
	ASSERT_LE(took, DRAIN_S * 1000 + 5000);
	ASSERT_TRUE(bw_reap(&w, 10000, &st));
	ASSERT_GE(cu_stat(&m, "backpressure_waits"), 1);
	/* Each chunk's failed spill, round after round, is one line per 10 s. */
	int lines = it_log_count(&m, "spilling to the backend failed");
	if (lines > 2)
		FAILF("%s: %d log lines of failed spills in %llu ms", name, lines,
		      (unsigned long long)took);

	/* The backend comes back: everything is published, the failed write nowhere. */
	bw_recover(&m, gate);
	cu_check_pattern(tm_bpath(&m, "w"), BW_BLOCKED_AT, BW_WRITER_SEED);
	tm_stop(&m);
	tm_cleanup(&m);
}

static void slow_but_moving(void)
{
	struct tmount m;
	struct bw_child w;
	char gate[PATH_MAX];
	const uint64_t total = 32 * MiB;
	uint64_t written;
	int err, st;

	mount_gated(&m, "fullcache-slow", "drain_timeout=3", "op=pwrite,delay_ms=250", gate,
		    sizeof(gate));
	bw_fill(&m, 0);
	bw_spawn(&w, &m, "w", total, 0);
	if (!bw_report(&w, 60000, &err, &written))
		FAILF("the writer over a slow backend did not finish within 60 s");
	uint64_t took = mono_ms() - w.t_start;
	if (err)
		FAILF("a writer over a slow but moving backend failed after %llu ms, %llu bytes in: %s",
		      (unsigned long long)took, (unsigned long long)written, strerror(err));
	ASSERT_EQ(written, total);
	/* Otherwise the case proves nothing: it must have waited past drain_timeout. */
	ASSERT_INT_OP(took, >, 3000);
	ASSERT_TRUE(bw_reap(&w, 10000, &st));
	bw_recover(&m, gate);
	cu_check_pattern(tm_bpath(&m, "w"), total, BW_WRITER_SEED);
	tm_stop(&m);
	tm_cleanup(&m);
}

int main(void)
{
	tm_require_fuse();
	stalled("fullcache-enospc", "drain_timeout=2", "op=pwrite,err=ENOSPC", ENOSPC);
	stalled("fullcache-hung", "drain_timeout=2,flush_threads=1", "op=pwrite,delay_ms=4000", EIO);
	slow_but_moving();
	return 0;
}
