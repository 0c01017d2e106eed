/*
 * interrupt.c — a request waiting for cache space honours FUSE interrupts
 * (fs/wait.c W2): its caller can always be killed or interrupted.
 *
 * Over a dead backend (data writes fail with EIO while a gate file exists)
 * with drain_timeout=30, so no error can come from the timeout within the
 * test, a writer blocks on the full cache (blockw.h):
 *  1. SIGKILL: the kernel interrupts the request and then waits for our
 *     reply; the writer must be gone within 3 s, not sit in uninterruptible
 *     sleep until drain_timeout;
 *  2. a caught signal, with SA_RESTART: the write fails with EINTR within
 *     3 s (FUSE does not restart an interrupted request).
 * Then the daemon is healthy: stats answer, and once the backend recovers
 * everything written before the interrupts is published, the killed
 * writer's bytes included, and it unmounts cleanly (exit 0).  With each
 * request loop: ours reading with readv (the default) or splice, and
 * libfuse's (splice=off).
 */
#include "tests/integrity/blockw.h"

#include <signal.h>

static void interrupt_blocked(const char *loop)
{
	struct tmount m;
	struct bw_child k, s;
	char gate[PATH_MAX], opts[256];
	uint64_t written;
	int err, st;

	tm_init(&m, "interrupt");
	snprintf(gate, sizeof(gate), "%s/gate", m.root);
	snprintf(opts, sizeof(opts), BW_OPTS ",drain_timeout=30,%s", loop);
	const char *env[] = { cu_fault_env("op=pwrite,err=EIO,while=%s", gate), NULL };
	tm_mount(&m, opts, env);
	it_gate_set(gate, true);
	bw_fill(&m, EIO);

	bw_spawn(&k, &m, "killed", 8 * MiB, 0);
	bw_assert_blocked(&k, 700);
	CHECK_SYS(kill(k.pid, SIGKILL));
	if (!bw_reap(&k, 3000, &st))
		FAILF("[%s] a writer killed while waiting for cache space is still there 3 s later",
		      loop);
	ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);

	bw_spawn(&s, &m, "caught", 8 * MiB, SIGUSR1);
	bw_assert_blocked(&s, 700);
	CHECK_SYS(kill(s.pid, SIGUSR1));
	if (!bw_report(&s, 3000, &err, &written))
		FAILF("[%s] a writer interrupted by a caught signal still waits 3 s later", loop);
	if (err != EINTR)
		FAILF("[%s] the interrupted write got %s, expected %s", loop,
		      err ? strerror(err) : "no error", strerror(EINTR));
	ASSERT_TRUE(bw_reap(&s, 5000, &st));

	/* Healthy: it answers, and publishes everything once the backend is back. */
	ASSERT_GE(cu_stat(&m, "backpressure_waits"), 2);
	bw_recover(&m, gate);
	cu_check_pattern(tm_bpath(&m, "killed"), BW_BLOCKED_AT, BW_WRITER_SEED);
	cu_check_pattern(tm_bpath(&m, "caught"), written, BW_WRITER_SEED);
	tm_stop(&m);
	tm_cleanup(&m);
}

int main(void)
{
	tm_require_fuse();
	interrupt_blocked("loop=readv");
	interrupt_blocked("splice=on");
	interrupt_blocked("splice=off");
	return 0;
}
