/*
 * users.c — one user's blocked operation on a peer never holds back another
 * user's markers (contract item 3 across nodes; nodes.h N3, N4), and never
 * lets one go early.
 *
 * Nodes a and b.  On b, user X (uid 61902) closes a file whose rename onto
 * the backend is refused (EACCES: a permanent error), so it stays pending
 * there for good.  User Y (root) then saves a checkpoint as DeepSpeed does:
 * a shard through each node, `latest` through a after the barrier — while
 * b's rename of Y's shard is held back by the test (a hung backend call).
 * Checked:
 *  - safety: `latest` stays off the backend while Y's shard on b is not
 *    durable (SETTLE_MS);
 *  - isolation: once it is, `latest` reaches the backend, after that shard
 *    (fails on the old code: b's T stayed at X's blocked operation, and
 *    `latest` was held for good);
 *  - b's record lists uid 61902 as failing there, and so do its stats
 *    ("node_blocked_uids") and ckptfs-stat ("failing uids:");
 *  - X's own marker, written through a, stays held for b (its operation
 *    there is still pending), its reason naming the uid.
 */
#include "tests/multinode/mn_util.h"

#include <sys/stat.h>
#include <sys/wait.h>

#define SHARD (1u << 20)
#define SETTLE_MS 2500
#define USER_X 61902

/* Write a file of `size` bytes of pattern `seed` through a mount as uid USER_X. */
static void write_as_x(const char *path, size_t size, uint64_t seed)
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		if (setgid(USER_X) < 0 || setuid(USER_X) < 0)
			_exit(2);
		_exit(it_write_pattern(path, seed, size) < 0 ? 1 : 0);
	}
	if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
		FAILF("writing %s as uid %d failed", path, USER_X);
}

static void wait_visible(struct mcluster *c, int i, const char *rel)
{
	for (uint64_t t0 = mono_ms(); access(mn_path(c, i, rel), F_OK) != 0; usleep(50000))
		if (mono_ms() - t0 > 10000)
			FAILF("node %s never saw %s", c->node[i].name, rel);
}

/* rel (a marker) stays off the backend for SETTLE_MS; a's held reason then. */
static void stays_held(struct mcluster *c, const char *rel, const char *when, char *why,
		       size_t len)
{
	for (uint64_t t0 = mono_ms(); mono_ms() - t0 < SETTLE_MS; usleep(20000)) {
		if (file_exists(mn_bpath(c, rel)))
			FAILF("%s: %s reached the backend (\"%s\")", when, rel,
			      cu_slurp(mn_bpath(c, rel)));
		snprintf(why, len, "%s", mn_stat(c, 0, "marker_held_reason"));
	}
	if (strcmp(mn_stat(c, 0, "marker_held_for"), "b"))
		FAILF("%s: %s is not reported held for node b: '%s' (%s)", when, rel,
		      mn_stat(c, 0, "marker_held_for"), why);
	fprintf(stderr, "%s: %s held: %s\n", when, rel, why);
}

int main(void)
{
	struct mcluster c;
	char env[PATH_MAX + 128], hold[PATH_MAX], why[600];
	const char *const b_env[] = { env, NULL };

	tm_require_fuse();
	cu_require_root();
	mn_init(&c, "mn-users", 2);
	snprintf(hold, sizeof(hold), "%s/hold-rank_1", c.node[1].m.root);
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=rename,err=EACCES,name=xblock;"
		 "op=rename,hold=%s,name=rank_1", hold);
	for (int i = 0; i < 2; i++)
		CHECK_SYS(chmod(c.node[i].m.root, 0755));	/* X must reach the mounts */
	mn_mount(&c, 0, "allow_other", NULL);
	mn_mount(&c, 1, "allow_other", b_env);
	CHECK_SYS(mkdir(mn_path(&c, 0, "xdir"), 0777));
	CHECK_SYS(chmod(mn_path(&c, 0, "xdir"), 0777));
	CHECK_SYS(mkdir(mn_path(&c, 0, "step1"), 0755));
	tm_sync(&c.node[0].m);
	wait_visible(&c, 1, "xdir");
	wait_visible(&c, 1, "step1");

	/* X's operation on b is refused for good. */
	write_as_x(mn_path(&c, 1, "xdir/xblock.pt"), 4096, 7);
	for (uint64_t t0 = mono_ms(); !mn_stat_num(&c, 1, "blocked_seq"); usleep(50000))
		if (mono_ms() - t0 > 10000)
			FAILF("X's file on node b never blocked");
	ASSERT_EQ((long)mn_stat_num(&c, 1, "blocked_uid"), (long)USER_X);

	/* Y's checkpoint; b's rename of Y's shard hangs until hold is removed. */
	cu_write_text(hold, "");
	mn_write(mn_path(&c, 0, "step1/rank_0.pt"), SHARD, 10);
	mn_write(mn_path(&c, 1, "step1/rank_1.pt"), SHARD, 11);
	cu_write_text(mn_path(&c, 0, "latest"), "step1");	/* after the barrier */
	stays_held(&c, "latest", "Y's shard on b pending", why, sizeof(why));
	ASSERT_TRUE(!file_exists(mn_bpath(&c, "step1/rank_1.pt")));

	/* X's own marker through a: X has an operation pending on b. */
	write_as_x(mn_path(&c, 0, "xdir/latest"), 5, 8);

	/* Y's shard on b goes through: Y's marker follows it, whatever X's state. */
	CHECK_SYS(unlink(hold));
	uint64_t t_shard = 0, t_marker = 0, t0 = mono_ms();
	while (mono_ms() - t0 < 15000 && !t_marker) {
		if (!t_shard && mn_has(mn_bpath(&c, "step1/rank_1.pt"), SHARD, 11))
			t_shard = mono_ms();
		if (!strcmp(cu_slurp(mn_bpath(&c, "latest")), "step1")) {
			t_marker = mono_ms();
			if (!t_shard)
				FAILF("`latest` is on the backend before node b's shard of step1");
		}
		usleep(1000);
	}
	if (!t_marker)
		FAILF("Y's `latest` is still held once its shard on b is durable: X's blocked "
		      "operation there holds it (%s)", mn_stat(&c, 0, "marker_held_reason"));
	fprintf(stderr, "Y's `latest` released %llu ms after its shard on b was durable\n",
		(unsigned long long)(t_marker - t_shard));
	ASSERT_TRUE(mn_has(mn_bpath(&c, "step1/rank_0.pt"), SHARD, 10));

	const char *rec = cu_slurp(mn_bpath(&c, ".ckptfs/nodes/b/watermark.json"));
	if (!strstr(rec, "\"blocked_uids\": \"61902\""))
		FAILF("node b's record does not list uid %d: %s", USER_X, rec);
	/* b's stats show the list its record gives; a lists none of its own. */
	ASSERT_STR_EQ(mn_stat(&c, 1, "node_blocked_uids"), "61902");
	ASSERT_STR_EQ(mn_stat(&c, 1, "node_blocked_uids_all"), "false");
	ASSERT_STR_EQ(mn_stat(&c, 0, "node_blocked_uids"), "");
	mn_stat_report(&c, 1, "failing uids: 61902 (a failed operation pending here)", "b");

	/* X's marker stays held for b. */
	stays_held(&c, "xdir/latest", "X's operation on b refused", why, sizeof(why));
	if (!strstr(why, "uid 61902"))
		FAILF("X's marker's reason does not name its uid: '%s'", why);
	ASSERT_TRUE(!file_exists(mn_bpath(&c, "xdir/xblock.pt")));

	/* Neither can drain (X's marker held, X's file refused): SIGKILL both. */
	mn_kill(&c, 0);
	mn_kill(&c, 1);
	mn_cleanup(&c);
	return 0;
}
