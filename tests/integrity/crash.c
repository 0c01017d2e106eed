/*
 * crash.c — the crash loop: SIGKILL the daemon at random moments while a
 * checkpoint stream is being written and published, then judge what the
 * backend holds.  This is the test of contract items 2–4 (durability,
 * prefix order, whole files; P1–P3 and P5 of backend/backend.h) when the
 * daemon dies but the node does not (powerloss.c: when the node dies too).
 *
 * Each round mounts the same backend (so each mount first recovers from the
 * previous crash; a fresh backend every EPOCH rounds), checks what recovery
 * left, runs a child process that writes checkpoints the way four
 * frameworks do (ckstream.c: the stream, its log, and the checks), kills
 * the daemon after a random delay, and inspects the backend directly:
 * prefix consistency against the log (nothing fsync-acknowledged missing),
 * whole files under final names, every marker naming a complete checkpoint
 * that `ckptfs-ctl verify` says OK for; after the next mount, no temporary
 * names, the mount equal to the backend and verify clean.
 *
 * CKPTFS_CRASH_ROUNDS=N sets the number of rounds (default 50);
 * CKPTFS_CRASH_SEED=S replays a run.  Rounds alternate io=uring/pwrite, use
 * a 256 KiB chunk size every third round, and cycle through backend speeds
 * (CKPTFS_FAULT delays: slow directory fsyncs, slow publishing, slow data
 * writes) that widen the windows a kill can fall into; CKPTFS_CRASH_SPEED=0..3
 * pins one of them (0: full speed).
 */
#include "tests/integrity/ckstream.h"

#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#define EPOCH 10		/* rounds on one backend */

struct crash {
	struct tmount m;
	struct cs_judge j;		/* j.round counts the rounds */
	char oplog[PATH_MAX];
	unsigned next_step;
	uint64_t ops, acked;
	char kept[PATH_MAX];		/* scratch dir kept after violations */
};

static void crash_round(struct crash *c, unsigned delay_ms)
{
	const char *fault = cs_round_speed(c->j.round);
	const char *env[] = { fault ? cu_fault_env("%s", fault) : NULL, NULL };
	uint64_t t0 = mono_ms(), t1, t2, t3;
	struct it_tree start, b;
	struct cs_oplog l;
	pid_t child;
	int st, root;

	setenv("CKPTFS_TEST_IO", c->j.round % 2 ? "pwrite" : "uring", 1);
	tm_mount(&c->m, c->j.round % 3 == 2 ? "chunk_size=256K" : NULL, env);
	t1 = mono_ms();
	cs_print_recovery(&c->m);
	cs_check_after_mount(&c->j, &c->m, &start);
	t2 = mono_ms();

	root = CHECK_SYS(open(c->m.mnt, O_RDONLY | O_DIRECTORY));
	fflush(stdout);
	if ((child = fork()) == 0)
		cs_stream_main(root, c->oplog, c->next_step);
	close(root);
	usleep(delay_ms * 1000);
	tm_kill(&c->m);
	CHECK_SYS(waitpid(child, &st, 0));
	t3 = mono_ms();
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		cs_violation(&c->j, "the stream process ended with status 0x%x", st);

	cs_oplog_read(c->oplog, &l);
	printf("round %u: io=%s, %s, kill after %u ms, steps %u..%u, stream ended: %s\n", c->j.round,
	       getenv("CKPTFS_TEST_IO"), fault ? fault : "full speed", delay_ms, c->next_step,
	       l.last_step < c->next_step ? c->next_step : l.last_step, l.end[0] ? l.end : "(no error)");
	if (it_tree_scan(c->m.backend, &b) < 0)
		cs_violation(&c->j, "cannot read the backend after the crash");
	cs_check_prefix(&c->j, &start, &l, &b);
	cs_note_doomed(&c->j, &l);
	cs_check_markers(&c->j, &b, true);
	printf("  mount %llu ms, checks after it %llu ms, stream %llu ms, judging %llu ms\n",
	       (unsigned long long)(t1 - t0), (unsigned long long)(t2 - t1),
	       (unsigned long long)(t3 - t2), (unsigned long long)(mono_ms() - t3));
	c->ops += l.n;
	c->acked += l.acked;
	if (l.last_step >= c->next_step)
		c->next_step = l.last_step + 1;
	free(l.v);
	it_tree_free(&b);
	it_tree_free(&start);
	c->j.round++;
}

/*
 * One backend through `rounds` crashes, each mount recovering the last,
 * then a clean unmount.  A fresh backend every EPOCH rounds keeps the
 * manifest, which verify replays whole (in time quadratic in its records),
 * from growing without bound.
 */
static void crash_epoch(struct crash *c, unsigned rounds)
{
	unsigned before = c->j.violations;
	struct it_tree b;

	tm_init(&c->m, "crash");
	snprintf(c->j.backend, sizeof(c->j.backend), "%s", c->m.backend);
	snprintf(c->oplog, sizeof(c->oplog), "%s/stream.log", c->m.root);
	for (unsigned i = 0; i < rounds; i++) {
		/* Mostly while checkpoints stream, sometimes right at the start. */
		unsigned delay = rand() % 8 == 0 ? 5 + (unsigned)(rand() % 60) : 60 + (unsigned)(rand() % 900);
		crash_round(c, delay);
	}
	setenv("CKPTFS_TEST_IO", "uring", 1);
	tm_mount(&c->m, NULL, NULL);
	cs_check_after_mount(&c->j, &c->m, &b);
	it_tree_free(&b);
	tm_stop(&c->m);
	if (c->j.violations > before && !c->kept[0]) {
		/* The first backend that went wrong stays, for a look. */
		snprintf(c->kept, sizeof(c->kept), "%s", c->m.root);
		printf("kept %s (backend, daemon.log, stream.log of its last round)\n", c->kept);
	} else {
		tm_cleanup(&c->m);
	}
	it_tree_free(&c->j.doomed);
	it_tree_free(&c->j.reported);
	c->next_step = 1;
}

int main(void)
{
	struct crash c = { .next_step = 1 };
	const char *env = getenv("CKPTFS_CRASH_ROUNDS"), *senv = getenv("CKPTFS_CRASH_SEED");
	unsigned rounds = env && *env ? (unsigned)strtoul(env, NULL, 10) : 50;
	unsigned seed = senv && *senv ? (unsigned)strtoul(senv, NULL, 10) : (unsigned)time(NULL);
	uint64_t t0 = mono_ms();

	tm_require_fuse();
	srand(seed);
	printf("crash loop: %u rounds, seed %u (CKPTFS_CRASH_SEED=%u replays it)\n", rounds, seed, seed);
	while (c.j.round < rounds)
		crash_epoch(&c, rounds - c.j.round < EPOCH ? rounds - c.j.round : EPOCH);
	printf("crash loop: %u rounds in %.1f s, %llu operations logged, %llu fsync-acknowledged, "
	       "%llu markers checked, %llu marker files verified OK, %u rounds lost unacknowledged "
	       "work in flight; violations: %u (%u of them verify verdicts, %u on the data)\n",
	       c.j.round, (double)(mono_ms() - t0) / 1000.0, (unsigned long long)c.ops,
	       (unsigned long long)c.acked, (unsigned long long)c.j.markers,
	       (unsigned long long)c.j.verified, c.j.lost_in_flight, c.j.violations, c.j.verdicts,
	       c.j.violations - c.j.verdicts);
	if (c.j.violations)
		FAILF("%u violations in %u crash rounds (seed %u); see %s", c.j.violations, c.j.round,
		      seed, c.kept);
	return 0;
}
