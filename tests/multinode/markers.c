/*
 * markers.c — a marker written through one node reaches the backend only
 * after every peer's earlier files (nodes.h N4), and nothing but what must
 * follow it waits behind it.
 *
 * Part 1, two healthy nodes a and b, as DeepSpeed saves: each rank makes
 * the step directory and writes its shard through its own node, a barrier
 * (here: every close has returned), then rank 0 writes `latest` through a.
 * The backend is polled directly: `latest` must name the step only once b's
 * shard is there.  The figure printed is the marker delay the peers add:
 * when `latest` appeared minus when the last peer shard appeared.
 *
 * Part 2, three nodes, c's backend slowed (every fdatasync of its data
 * takes SLOW_MS): `latest` reaches the backend only after c's shard; while
 * it waits, a's stats and ckptfs-stat say it is held for node c; and
 * another user's file written through a meanwhile is published without
 * waiting for it (a held marker holds back only its own user's later
 * operations and its dependants).
 */
#include "tests/multinode/mn_util.h"

#include <sys/stat.h>
#include <sys/wait.h>

#define SHARD (1u << 20)
#define SLOW_MS 1500
#define ROUNDS 3

static void mkdir_ok(const char *path)
{
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		FAILF("mkdir %s: %s", path, strerror(errno));
}

/* The backend's `latest` names step s. */
static bool latest_is(struct mcluster *c, unsigned s)
{
	char want[32];
	snprintf(want, sizeof(want), "global_step%u", s);
	return !strcmp(cu_slurp(mn_bpath(c, "latest")), want);
}

static void write_latest(struct mcluster *c, int node, unsigned s)
{
	char text[32];
	snprintf(text, sizeof(text), "global_step%u", s);
	cu_write_text(mn_path(c, node, "latest"), text);
}

static int dcmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void healthy(void)
{
	struct mcluster c;
	double delay[ROUNDS];
	char rel[64];

	mn_init(&c, "mn-markers", 2);
	for (int i = 0; i < 2; i++)
		mn_mount(&c, i, NULL, NULL);
	for (unsigned s = 1; s <= ROUNDS; s++) {
		snprintf(rel, sizeof(rel), "global_step%u", s);
		for (int i = 0; i < 2; i++)
			mkdir_ok(mn_path(&c, i, rel));
		char shard[2][96];
		for (int i = 1; i >= 0; i--) {
			snprintf(shard[i], sizeof(shard[i]), "%s/zero_pp_rank_%d_optim_states.pt", rel, i);
			mn_write(mn_path(&c, i, shard[i]), SHARD, s * 10 + (unsigned)i);
		}
		write_latest(&c, 0, s);	/* after the barrier: every shard is closed */
		double t_peer = 0, t_marker = 0;
		for (double t0 = mn_now_ms(); mn_now_ms() - t0 < 20000 && !t_marker;) {
			struct stat st;
			if (!t_peer && stat(mn_bpath(&c, shard[1]), &st) == 0 && st.st_size == SHARD)
				t_peer = mn_now_ms();
			if (latest_is(&c, s)) {
				t_marker = mn_now_ms();
				if (!t_peer)
					FAILF("step %u: `latest` is on the backend before node b's shard %s",
					      s, shard[1]);
			}
			usleep(500);
		}
		if (!t_marker)
			FAILF("step %u: `latest` never reached the backend", s);
		ASSERT_TRUE(mn_has(mn_bpath(&c, shard[1]), SHARD, s * 10 + 1));
		delay[s - 1] = t_marker - t_peer;
	}
	qsort(delay, ROUNDS, sizeof(delay[0]), dcmp);
	fprintf(stderr, "FIGURE marker delay, healthy 2 nodes%s: median %.1f ms (min %.1f, max "
		"%.1f) over %d checkpoints: `latest` on the backend minus the peer's shard there\n",
		c.shared_backends ? " (shared backend clients)" : "", delay[ROUNDS / 2], delay[0],
		delay[ROUNDS - 1], ROUNDS);
	mn_cleanup(&c);
}

/* A file written through node a as another user, while a's marker is held. */
static void write_as_other_user(const char *path)
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		if (setgid(65534) < 0 || setuid(65534) < 0)
			_exit(2);
		_exit(it_write_pattern(path, 77, 4096) < 0 ? 1 : 0);
	}
	if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
		FAILF("writing %s as uid 65534 failed", path);
}

static void slowed(void)
{
	struct mcluster c;
	char env[128], rel[96];
	const char *const slow_env[] = { env, NULL };

	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=fdatasync,delay_ms=%d", SLOW_MS);
	mn_init(&c, "mn-slow", 3);
	CHECK_SYS(chmod(c.node[0].m.root, 0755));	/* another user must reach a's mount */
	mn_mount(&c, 0, "allow_other", NULL);
	mn_mount(&c, 1, NULL, NULL);
	mn_mount(&c, 2, NULL, slow_env);
	CHECK_SYS(mkdir(mn_path(&c, 0, "other"), 0777));
	CHECK_SYS(chmod(mn_path(&c, 0, "other"), 0777));
	tm_sync(&c.node[0].m);

	for (int i = 0; i < 3; i++)
		mkdir_ok(mn_path(&c, i, "global_step1"));
	for (int i = 2; i >= 0; i--) {
		snprintf(rel, sizeof(rel), "global_step1/zero_pp_rank_%d_optim_states.pt", i);
		mn_write(mn_path(&c, i, rel), SHARD, 100 + (unsigned)i);
	}
	write_latest(&c, 0, 1);
	bool seen_held = false, seen_cli = false, other_first = false;
	uint64_t t_c = 0, t_marker = 0, t0 = mono_ms();
	while (mono_ms() - t0 < 30000 && !t_marker) {
		if (!t_c && mn_has(mn_bpath(&c, "global_step1/zero_pp_rank_2_optim_states.pt"), SHARD, 102))
			t_c = mono_ms();
		if (latest_is(&c, 1)) {
			t_marker = mono_ms();
			break;
		}
		if (!seen_held && !strcmp(mn_stat(&c, 0, "marker_held"), "latest") &&
		    !strcmp(mn_stat(&c, 0, "marker_held_for"), "c")) {
			seen_held = true;
			/* ckptfs-stat, as an operator runs it */
			char *out = NULL;
			const char *argv[] = { mn_tool("ckptfs-stat"), c.node[0].m.mnt, NULL };
			tm_run(argv, &out);
			seen_cli = out && strstr(out, "marker `latest` held for node c since");
			if (!seen_cli)
				fprintf(stderr, "ckptfs-stat said:\n%s\n", out ? out : "");
			else
				fprintf(stderr, "ckptfs-stat: %s", strstr(out, "  MARKER:"));
			free(out);
			/* Another user's change goes on meanwhile. */
			write_as_other_user(mn_path(&c, 0, "other/x"));
			uint64_t t1 = mn_wait_file(mn_bpath(&c, "other/x"), 4096, 10000);
			other_first = t1 && !latest_is(&c, 1);
		}
		usleep(1000);
	}
	if (!t_marker)
		FAILF("`latest` never reached the backend");
	if (!t_c || t_c > t_marker)
		FAILF("`latest` reached the backend %s node c's shard", t_c ? "before" : "without");
	ASSERT_TRUE(seen_held);
	ASSERT_TRUE(seen_cli);
	if (!other_first)
		FAILF("another user's file waited behind the held marker");
	fprintf(stderr, "slow node: c's shard after %llu ms, `latest` after %llu ms\n",
		(unsigned long long)(t_c - t0), (unsigned long long)(t_marker - t0));
	for (int i = 0; i < 3; i++) {
		snprintf(rel, sizeof(rel), "global_step1/zero_pp_rank_%d_optim_states.pt", i);
		ASSERT_TRUE(mn_has(mn_bpath(&c, rel), SHARD, 100 + (unsigned)i));
	}
	ASSERT_GE(mn_log_count(&c, 0, "marker latest (operation"), 2);	/* held, released */
	mn_cleanup(&c);
}

int main(void)
{
	tm_require_fuse();
	cu_require_root();
	healthy();
	slowed();
	return 0;
}
