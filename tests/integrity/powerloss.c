/*
 * powerloss.c — the power-loss loop: the node dies, not just the daemon.
 * The crash loop (crash.c) kills the daemon but the kernel's page cache
 * survives it, so it cannot see a missing fdatasync before a rename or a
 * missing directory fsync.  Here the daemon runs with the power-loss layer
 * (CKPTFS_POWERLOSS, backend/powerloss.c), which records in a shadow
 * directory what POSIX guarantees would survive a power cut at each moment;
 * after the kill the shadow is the truth, and plimage.c builds the backend
 * as it would be when the power came back, under two loss models:
 *
 *   strict   only what fsync/fdatasync/directory fsync made durable;
 *   ordered  every namespace operation up to a random point at or after the
 *            last fsync, in order (a journaling file system with ordered
 *            metadata), file contents only as of their last fsync — the
 *            model that catches a rename not preceded by fdatasync.
 *
 * Each round starts from a fresh backend (a copy of one a clean mount and
 * unmount initialised: the daemon creates its manifest outside the layer's
 * view today; CKPTFS_POWERLOSS_FRESH=1 starts from an empty one instead,
 * which judges manifest creation too once it goes through bsys), mounts
 * ckptfs with the layer, runs the checkpoint
 * stream of ckstream.c (DeepSpeed, DCP .metadata.tmp + rename, Megatron and
 * Orbax checkpoints with markers rewritten and old steps deleted), cuts the
 * power after a random delay, and for each model materialises the image and
 * checks, on the raw image:
 *  - every file under a final name holds exactly one of the versions the
 *    stream wrote there (not torn, zero-filled, partial);
 *  - the image equals the stream's state after some prefix of its logged
 *    operations, at least every fsync-acknowledged one (contract 2, 3);
 *  - every marker names a step whose files are all present and whole;
 * then mounts ckptfs over the image (recovery runs) and checks: no
 * temporary names left, the mount equals the image, `ckptfs-ctl verify`
 * finds nothing MISMATCH, MISSING or UNTRACKED, the markers' checkpoints
 * verify OK, and a clean unmount exits 0.
 *
 * Rounds run until both CKPTFS_POWERLOSS_ROUNDS (default 50) and
 * CKPTFS_POWERLOSS_SECONDS (a time floor, default 0) are met, or the time
 * cap CKPTFS_POWERLOSS_CAP (seconds, default 100) is reached.  Round r uses
 * its own generator seeded from (CKPTFS_POWERLOSS_SEED, r): the seed is
 * printed, and CKPTFS_POWERLOSS_FIRST=r CKPTFS_POWERLOSS_ROUNDS=1 replays
 * one round's choices (timing still varies).  Rounds vary the I/O engine,
 * chunk size and backend speed like the crash loop.  The scratch directory
 * of the first round with a violation is kept.
 *
 * `test_powerloss --image SHADOW OUT strict|ordered [CUT]` only builds an
 * image from a kept shadow, for a look.
 */
#include "tests/integrity/ckstream.h"
#include "tests/integrity/plimage.h"

#include <signal.h>
#include <sys/wait.h>

#define DEFAULT_SEED 20240917u

static const char *const model_name[] = { "strict", "ordered" };

struct pl_run {
	struct tmount base;		/* the pristine backend, and the scratch root */
	unsigned seed;
	bool fresh;			/* rounds start from an empty backend */
	unsigned round;
	unsigned rounds[2], violations[2];
	uint64_t ops, acked, markers, verified, records, empty_files;
	char kept[PATH_MAX];
};

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static unsigned env_unsigned(const char *name, unsigned dflt)
{
	const char *v = getenv(name);
	return v && *v ? (unsigned)strtoul(v, NULL, 10) : dflt;
}

static void run_cmd(const char *const *argv)
{
	char *out = NULL;
	int st = tm_run(argv, &out);
	if (st != 0)
		FAILF("%s %s: exit %d: %s", argv[0], argv[1], st, out ? out : "");
	free(out);
}

/* A tmount for backend `backend` and mount point `mnt` below `root`. */
static void mount_paths(struct tmount *m, const char *root, const char *name)
{
	memset(m, 0, sizeof(*m));
	snprintf(m->root, sizeof(m->root), "%s", root);
	snprintf(m->backend, sizeof(m->backend), "%s/%s", root, name);
	snprintf(m->mnt, sizeof(m->mnt), "%s/mnt-%s", root, name);
	snprintf(m->log, sizeof(m->log), "%s/daemon-%s.log", root, name);
	if (mkdir(m->mnt, 0755) < 0 && errno != EEXIST)
		FAILF("mkdir %s: %s", m->mnt, strerror(errno));
}

/* One model: build the image, judge it raw, recover it, judge it again. */
static unsigned judge_model(struct pl_run *p, const char *dir, const char *shadow,
			    enum pl_model model, uint64_t *rng, const struct cs_oplog *l)
{
	struct cs_judge j = { .tag = model_name[model], .round = p->round };
	struct it_tree start = { 0 }, b, after;
	struct pl_image_info info;
	struct tmount im;
	size_t records, committed, cut = 0;
	int r;

	mount_paths(&im, dir, model == PL_STRICT ? "image-strict" : "image-ordered");
	CHECK_SYS(mkdir(im.backend, 0755));
	if ((r = pl_image_bounds(shadow, &records, &committed)) < 0)
		FAILF("reading the shadow journal in %s: %s", shadow, strerror(-r));
	if (model == PL_ORDERED)	/* anywhere from the committed prefix to everything */
		cut = committed + (size_t)(rng_next(rng) % (records - committed + 1));
	if ((r = pl_image_build(shadow, im.backend, model, cut, &info)) < 0)
		FAILF("building the %s image of %s: %s", model_name[model], shadow, strerror(-r));
	printf("  %s: journal %zu records, %zu committed%s%zu; image %u dirs, %u files (%u never "
	       "synced: empty), %u hard links, %u skipped cycles\n", model_name[model],
	       info.records, info.committed, model == PL_ORDERED ? ", cut at " : ", ",
	       model == PL_ORDERED ? info.cut : info.records, info.dirs, info.files,
	       info.empty_files, info.links, info.anomalies);
	p->records += info.records;
	p->empty_files += info.empty_files;

	snprintf(j.backend, sizeof(j.backend), "%s", im.backend);
	if (it_tree_scan(im.backend, &b) < 0)
		cs_violation(&j, "cannot read the image");
	cs_check_prefix(&j, &start, l, &b);
	cs_note_doomed(&j, l);
	cs_check_markers(&j, &b, false);

	/* The power is back: mounting recovers; then the same checks and verify. */
	setenv("CKPTFS_TEST_IO", "uring", 1);
	tm_mount(&im, NULL, NULL);
	cs_print_recovery(&im);
	cs_check_after_mount(&j, &im, &after);
	cs_check_markers(&j, &after, true);
	tm_stop(&im);

	p->markers += j.markers;
	p->verified += j.verified;
	p->rounds[model]++;
	p->violations[model] += j.violations;
	it_tree_free(&b);
	it_tree_free(&after);
	it_tree_free(&j.doomed);
	it_tree_free(&j.reported);
	return j.violations;
}

static void pl_round(struct pl_run *p)
{
	uint64_t rng = ((uint64_t)p->seed << 32) ^ p->round;
	const char *fault = cs_round_speed(p->round);
	char dir[PATH_MAX], shadow[PATH_MAX + 16], log[PATH_MAX + 16], envpl[PATH_MAX + 64];
	const char *env[] = { envpl, fault ? cu_fault_env("%s", fault) : NULL, NULL };
	struct cs_oplog l;
	struct tmount m;
	unsigned delay, bad = 0;
	pid_t child;
	int st, root;

	rng_next(&rng);
	/* Mostly while checkpoints stream, sometimes right at the start. */
	delay = rng_next(&rng) % 8 == 0 ? 5 + (unsigned)(rng_next(&rng) % 40)
					 : 40 + (unsigned)(rng_next(&rng) % 560);
	snprintf(dir, sizeof(dir), "%s/round%u", p->base.root, p->round);
	snprintf(shadow, sizeof(shadow), "%s/shadow", dir);
	snprintf(log, sizeof(log), "%s/stream.log", dir);
	snprintf(envpl, sizeof(envpl), "CKPTFS_POWERLOSS=%s", shadow);
	CHECK_SYS(mkdir(dir, 0755));
	mount_paths(&m, dir, "backend");
	if (p->fresh)
		CHECK_SYS(mkdir(m.backend, 0755));
	else
		run_cmd((const char *const[]){ "cp", "-a", p->base.backend, m.backend, NULL });

	setenv("CKPTFS_TEST_IO", p->round % 2 ? "pwrite" : "uring", 1);
	tm_mount(&m, p->round % 3 == 2 ? "chunk_size=256K" : NULL, env);
	root = CHECK_SYS(open(m.mnt, O_RDONLY | O_DIRECTORY));
	fflush(stdout);
	if ((child = fork()) == 0)
		cs_stream_main(root, log, 1);
	close(root);
	usleep(delay * 1000);
	tm_kill(&m);		/* the power cut: from here on the shadow is the truth */
	CHECK_SYS(waitpid(child, &st, 0));
	cs_oplog_read(log, &l);
	printf("round %u: io=%s, %s, power cut after %u ms, steps 1..%u, %zu ops (%zu acknowledged), "
	       "stream ended: %s\n", p->round, getenv("CKPTFS_TEST_IO"), fault ? fault : "full speed",
	       delay, l.last_step, l.n, l.acked, l.end[0] ? l.end : "(no error)");
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		printf("VIOLATION (round %u): the stream process ended with status 0x%x\n", p->round, st);
		p->violations[PL_STRICT]++;
		bad++;
	}
	if (it_log_count(&m, "CKPTFS_POWERLOSS")) {
		printf("VIOLATION (round %u): the power-loss layer complained (see %s)\n", p->round, m.log);
		p->violations[PL_STRICT]++;
		bad++;
	}
	p->ops += l.n;
	p->acked += l.acked;
	bad += judge_model(p, dir, shadow, PL_STRICT, &rng, &l);
	bad += judge_model(p, dir, shadow, PL_ORDERED, &rng, &l);
	free(l.v);
	if (bad && !p->kept[0]) {	/* the first round that went wrong stays, for a look */
		snprintf(p->kept, sizeof(p->kept), "%s", dir);
		printf("kept %s (shadow, backend as the daemon left it, images, logs)\n", dir);
	} else {
		run_cmd((const char *const[]){ "rm", "-rf", dir, NULL });
	}
}

/* CKPTFS_POWERLOSS set wrong: one line naming it, exit 2, nothing left behind. */
static void pl_bad_input(struct pl_run *p)
{
	char inside[PATH_MAX + 16], full[PATH_MAX + 16], err[1024];
	const char *argv[] = { "ckptfs", p->base.backend, p->base.mnt, "-f", NULL };
	struct { const char *shadow, *says; } cases[] = {
		{ inside, "must be outside the backend" },
		{ full, "must be new or empty" },
		{ "relative/shadow", "must be an absolute path" },
	};

	snprintf(inside, sizeof(inside), "%s/shadow", p->base.backend);
	snprintf(full, sizeof(full), "%s/full", p->base.root);
	CHECK_SYS(mkdir(full, 0755));
	write_file(tm_bpath(&p->base, "../full/x"), "x", 1);
	for (unsigned i = 0; i < CU_LEN(cases); i++) {
		setenv("CKPTFS_POWERLOSS", cases[i].shadow, 1);
		int st = tm_run_daemon(argv, err, sizeof(err));
		unsetenv("CKPTFS_POWERLOSS");
		if (st != 2 || !strstr(err, "CKPTFS_POWERLOSS=") || !strstr(err, cases[i].says))
			FAILF("CKPTFS_POWERLOSS=%s: exit %d, said: %s", cases[i].shadow, st, err);
	}
	ASSERT_TRUE(!file_exists(inside));
	ASSERT_EQ(cu_mount_count(p->base.mnt), 0);
}

/* A backend that one clean mount and unmount initialised: every round copies it. */
static void pl_base(struct pl_run *p)
{
	tm_init(&p->base, "powerloss");
	setenv("CKPTFS_TEST_IO", "uring", 1);
	tm_mount(&p->base, NULL, NULL);
	tm_stop(&p->base);
}

int main(int argc, char **argv)
{
	struct pl_run p = { 0 };
	unsigned min_rounds = env_unsigned("CKPTFS_POWERLOSS_ROUNDS", 50);
	unsigned floor_s = env_unsigned("CKPTFS_POWERLOSS_SECONDS", 0);
	unsigned cap_s = env_unsigned("CKPTFS_POWERLOSS_CAP", 100);
	unsigned first = env_unsigned("CKPTFS_POWERLOSS_FIRST", 0), ran = 0;
	uint64_t t0 = mono_ms();

	if (argc >= 5 && !strcmp(argv[1], "--image")) {
		struct pl_image_info info;
		enum pl_model model = !strcmp(argv[4], "ordered") ? PL_ORDERED : PL_STRICT;
		int r = pl_image_build(argv[2], argv[3], model,
				       argc > 5 ? strtoull(argv[5], NULL, 10) : SIZE_MAX, &info);
		printf("%s image: journal %zu records, %zu committed, cut %zu; %u dirs, %u files, "
		       "%u empty, %u links, %u cycles: %s\n", model_name[model], info.records,
		       info.committed, info.cut, info.dirs, info.files, info.empty_files, info.links,
		       info.anomalies, r ? strerror(-r) : "ok");
		return r ? 1 : 0;
	}
	tm_require_fuse();
	p.seed = env_unsigned("CKPTFS_POWERLOSS_SEED", DEFAULT_SEED);
	p.fresh = env_unsigned("CKPTFS_POWERLOSS_FRESH", 0) != 0;
	printf("power-loss loop: at least %u rounds and %u s, at most %u s; seed %u "
	       "(CKPTFS_POWERLOSS_SEED=%u CKPTFS_POWERLOSS_FIRST=R CKPTFS_POWERLOSS_ROUNDS=1 "
	       "replays round R)\n", min_rounds, floor_s, cap_s, p.seed, p.seed);
	pl_base(&p);
	pl_bad_input(&p);
	for (p.round = first;; p.round++, ran++) {
		uint64_t el = mono_ms() - t0;
		if (ran >= min_rounds && el >= floor_s * 1000ull)
			break;
		if (el >= cap_s * 1000ull) {
			printf("power-loss loop: time cap of %u s reached after %u rounds\n", cap_s, ran);
			break;
		}
		pl_round(&p);
	}
	printf("power-loss loop: %u rounds in %.1f s (seed %u): strict %u rounds, %u violations; "
	       "ordered %u rounds, %u violations; %llu operations logged, %llu fsync-acknowledged, "
	       "%llu journal records, %llu files never synced, %llu markers checked, %llu marker "
	       "files verified OK\n", ran, (double)(mono_ms() - t0) / 1000.0, p.seed,
	       p.rounds[PL_STRICT], p.violations[PL_STRICT], p.rounds[PL_ORDERED],
	       p.violations[PL_ORDERED], (unsigned long long)p.ops, (unsigned long long)p.acked,
	       (unsigned long long)p.records, (unsigned long long)p.empty_files,
	       (unsigned long long)p.markers, (unsigned long long)p.verified);
	/* A loop that judged nothing proves nothing. */
	if (ran && (!p.markers || !p.verified || !p.acked))
		FAILF("the power-loss loop judged nothing: %llu markers, %llu files verified, %llu "
		      "operations acknowledged", (unsigned long long)p.markers,
		      (unsigned long long)p.verified, (unsigned long long)p.acked);
	if (p.violations[PL_STRICT] + p.violations[PL_ORDERED])
		FAILF("%u violations in %u power-loss rounds (seed %u); see %s",
		      p.violations[PL_STRICT] + p.violations[PL_ORDERED], ran, p.seed, p.kept);
	if (!p.kept[0])
		tm_cleanup(&p.base);
	return 0;
}
