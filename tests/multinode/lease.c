/*
 * lease.c — one live daemon per node name (nodes.h N1, N2).
 *
 *  - a second daemon with a node name already live is refused: exit 2 and
 *    one line naming the node and the holder (its flock, then its lease);
 *  - bad node names are refused with exit 2 and one line;
 *  - a lease left by a daemon on another host is honoured while fresh, and
 *    past its ttl while within the margin the two clocks may disagree by
 *    (-o peer_skew, or both clocks' error bounds), and taken over once it
 *    has expired beyond it (logged);
 *  - a node whose daemon was SIGKILLed is taken over at once (same host,
 *    the lock went with the process), and recovery runs;
 *  - without a working flock (CKPTFS_FAULT op=flock,err=ENOLCK) the lease
 *    alone refuses a second daemon, also when its first read of the lease
 *    fails (asked again) or every read does (refused, saying so); and a daemon stopped past its lease's
 *    ttl, whose node another daemon took over, finds its lease lost when it
 *    resumes: it says so and publishes nothing more; the same when nobody
 *    took it, and when it ran all along but the backend refused its
 *    heartbeats past the ttl (said at once in the log, the stats and
 *    ckptfs-stat; lost stays lost when the backend takes writes again);
 *  - a backend whose flock succeeds but stays on each client (NFS with
 *    local_lock, Lustre with localflock: judged from the type and mount
 *    options, here forced with CKPTFS_FLOCK_LOCAL) is run by the lease as
 *    well: a daemon stopped past its ttl, whose node a daemon on "another
 *    client" took over, publishes nothing more although its flock held and
 *    its client cannot show it the new holder's lease.
 */
#include "tests/multinode/mn_util.h"
#include "fs/mounts.h"

#include <signal.h>
#include <sys/stat.h>
#include <time.h>

/* Does node i's daemon say its lease is lost within ms? */
static bool wait_lease_lost(struct mcluster *c, int i, unsigned ms)
{
	for (uint64_t t0 = mono_ms(); mono_ms() - t0 < ms; usleep(50000))
		if (!strcmp(mn_stat(c, i, "lease"), "lost"))
			return true;
	return false;
}

/* Run a second daemon in the foreground on node i's backend and a fresh mount point. */
/*
 * Node 0's daemon is stopped past its ttl (4 s) while node 1 mounts its
 * node (opts, env), which takes it over; resumed, node 0's daemon must say
 * its lease is lost and publish nothing more (a write of `probe`).
 */
static void taken_while_stopped(struct mcluster *c, const char *opts, const char *const *env,
				const char *probe)
{
	kill(c->node[0].m.pid, SIGSTOP);
	usleep(5000 * 1000);
	mn_mount_raw(c, 1, opts, env);
	ASSERT_GE(mn_log_count(c, 1, "its lease expired"), 1);
	kill(c->node[0].m.pid, SIGCONT);
	if (!wait_lease_lost(c, 0, 15000))
		FAILF("%s: the resumed daemon does not say its lease is lost", opts);
	cu_write_text(mn_path(c, 0, probe), "x");
	usleep(1000 * 1000);
	if (file_exists(mn_bpath(c, probe)))
		FAILF("%s: a daemon whose node was taken over while it was stopped still published",
		      opts);
}

static int second(struct mcluster *c, int i, const char *opts, const char *env, char *out,
		  size_t len)
{
	char mnt[PATH_MAX], o[512], cmd[4 * PATH_MAX];
	static int k;

	snprintf(mnt, sizeof(mnt), "%s/second%d", c->node[i].m.root, k++);
	CHECK_SYS(mkdir(mnt, 0755));
	snprintf(o, sizeof(o), "cache_size=64M,%s", opts);
	snprintf(cmd, sizeof(cmd), "%s%s '%s' '%s' '%s' -f -o '%s' 2>&1; echo \"status $?\"",
		 env ? env : "", env ? " " : "", tm_daemon_bin(), c->node[i].m.backend, mnt, o);
	const char *argv[] = { "sh", "-c", cmd, NULL };
	char *text = NULL;
	tm_run(argv, &text);
	char *st = text ? strstr(text, "status ") : NULL;
	int status = st ? atoi(st + 7) : -1;
	if (st)
		*st = '\0';
	snprintf(out, len, "%s", text ? text : "");
	free(text);
	if (status == 0) {	/* mounted after all: take it down */
		const char *um[] = { "fusermount3", "-u", mnt, NULL };
		tm_run(um, NULL);
	}
	return status;
}

static void expect_refused(int status, const char *out, const char *needle, const char *what)
{
	size_t n = strlen(out);
	unsigned lines = 0;

	for (size_t i = 0; i < n; i++)
		lines += out[i] == '\n';
	if (status != 2)
		FAILF("%s: exit status %d, expected 2; output:\n%s", what, status, out);
	if (lines != 1)
		FAILF("%s: expected exactly one line, got:\n%s", what, out);
	if (!strstr(out, needle))
		FAILF("%s: the line does not say '%s': %s", what, needle, out);
	fprintf(stderr, "%s: %s", what, out);
}

static void write_fake_lease(struct mcluster *c, const char *node, const char *host,
			     double age_s)
{
	char path[PATH_MAX + 64], text[1024];
	struct timespec ts;

	snprintf(path, sizeof(path), "%s/.ckptfs", c->backend);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/.ckptfs/nodes", c->backend);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/.ckptfs/nodes/%s", c->backend, node);
	mkdir(path, 0755);
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	snprintf(text, sizeof(text), "{\"format\": 1, \"node\": \"%s\", \"mount_id\": \"0123456789ab\", "
		 "\"pid\": 4242, \"host\": \"%s\", \"boot_id\": \"elsewhere\", \"heartbeat_ns\": %llu, "
		 "\"ttl_ns\": 30000000000, \"state\": \"held\"}\n", node, host,
		 (unsigned long long)(now - (uint64_t)(age_s * 1e9)));
	snprintf(path, sizeof(path), "%s/.ckptfs/nodes/%s/lease.json", c->backend, node);
	cu_write_text(path, text);
	/* Through the other node's client (a shared file system caches for a while). */
	snprintf(path, sizeof(path), "%s/.ckptfs/nodes/%s/lease.json", c->node[1].m.backend, node);
	for (uint64_t t0 = mono_ms(); strcmp(cu_slurp(path), text); usleep(50000))
		if (mono_ms() - t0 > 10000)
			FAILF("%s does not show the lease written through the first client", path);
}

/* Which mounts' flock is judged to reach every client (fs/mounts.c). */
static void flock_scope(void)
{
	static const struct { const char *type, *options; bool global; } cases[] = {
		{ "ext4", "rw,relatime,rw,errors=remount-ro", true },
		{ "xfs", "rw,noatime,rw,attr2", true },
		{ "fuse.glusterfs", "rw,relatime,rw,user_id=0", true },
		{ "nfs4", "rw,relatime,rw,vers=4.2,rsize=1048576,local_lock=none,addr=10.0.0.1", true },
		{ "nfs4", "rw,relatime,rw,vers=4.2,local_lock=flock,addr=10.0.0.1", false },
		{ "nfs", "rw,relatime,rw,vers=3,nolock,local_lock=all", false },
		{ "nfs", "rw,relatime,rw,vers=3,local_lock=all", false },
		{ "nfs", "rw,nolockd,rw,vers=3,local_lock=none", true },	/* not "nolock" */
		{ "lustre", "rw,rw,flock,lazystatfs", true },
		{ "lustre", "rw,rw,localflock,lazystatfs", false },
		{ "lustre", "rw,rw,lazystatfs", false },
		{ "beegfs", "rw,relatime,rw,cfgFile=/etc/beegfs/beegfs-client.conf", false },
		{ "fuse.sshfs", "rw,relatime,rw,user_id=0", false },
	};
	char why[256];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		why[0] = '\0';
		bool g = mounts_flock_global(cases[i].type, cases[i].options, why, sizeof(why));
		if (g != cases[i].global)
			FAILF("%s (%s): flock judged %s", cases[i].type, cases[i].options,
			      g ? "to reach every client" : "local to a client");
		if (!g && !strstr(why, cases[i].type))
			FAILF("%s: the reason does not name the type: '%s'", cases[i].type, why);
	}
}

int main(void)
{
	struct mcluster c;
	char out[4096];
	int st;

	flock_scope();
	tm_require_fuse();
	mn_init(&c, "mn-lease", 2);

	/* A live node: refused by its lock. */
	mn_mount_raw(&c, 0, "node=x", NULL);
	st = second(&c, 1, "node=x", NULL, out, sizeof(out));
	expect_refused(st, out, "node 'x' is held by a live daemon", "second daemon on node x");
	ASSERT_TRUE(strstr(out, "pid") != NULL);

	/* Bad names. */
	st = second(&c, 1, "node=../up", NULL, out, sizeof(out));
	expect_refused(st, out, "node", "node=../up");
	st = second(&c, 1, "node=.ckptfs", NULL, out, sizeof(out));
	expect_refused(st, out, "node", "node=.ckptfs");

	/* Another host's fresh lease is honoured; an expired one is taken over. */
	write_fake_lease(&c, "y", "otherhost", 1);
	st = second(&c, 1, "node=y", NULL, out, sizeof(out));
	expect_refused(st, out, "on host otherhost", "a fresh lease of another host");
	/* Past its ttl (30 s) but not the clocks' margin: the holder left no
	 * watermark record, so its clock's error is the kernel's cap (16 s). */
	write_fake_lease(&c, "y", "otherhost", 40);
	st = second(&c, 1, "node=y", NULL, out, sizeof(out));
	expect_refused(st, out, "on host otherhost", "a lease within the clocks' margin");
	/* With the margin given: 40 s > 30 s + 5 s. */
	mn_mount_raw(&c, 1, "node=y,peer_skew=5", NULL);
	ASSERT_GE(mn_log_count(&c, 1, "beyond the clocks' margin of 5.0 s"), 1);
	mn_stop(&c, 1);
	write_fake_lease(&c, "y", "otherhost", 70);	/* > 30 + 16 + 16 */
	mn_mount_raw(&c, 1, "node=y", NULL);
	ASSERT_GE(mn_log_count(&c, 1, "taking over from mount 0123456789ab (pid 4242 on otherhost): its lease expired"), 1);
	ASSERT_GE(mn_log_count(&c, 1, "beyond the clocks' margin of"), 2);	/* both takeovers */
	mn_stop(&c, 1);

	/* A killed daemon's node is taken over at once, and recovered. */
	cu_write_text(mn_path(&c, 0, "f"), "x");
	tm_sync(&c.node[0].m);
	mn_kill(&c, 0);
	mn_mount_raw(&c, 0, "node=x", NULL);
	ASSERT_GE(mn_log_count(&c, 0, "taking over from mount"), 1);
	ASSERT_STR_EQ(cu_slurp(mn_path(&c, 0, "f")), "x");
	mn_stop(&c, 0);

	/* Without flock: the lease alone. */
	const char *noflock = "CKPTFS_FAULT=op=flock,err=ENOLCK";
	const char *const env[] = { noflock, NULL };
	mn_mount_raw(&c, 0, "node=z,lease_ttl=4", env);
	ASSERT_GE(mn_log_count(&c, 0, "no working flock"), 1);
	ASSERT_STR_EQ(mn_stat(&c, 0, "node_flock"), "false");
	st = second(&c, 1, "node=z,lease_ttl=4", noflock, out, sizeof(out));
	expect_refused(st, out, "node 'z' is held by a live daemon", "no flock, a live lease");
	/* Its record read at a bad moment (ESTALE once): asked again, and refused. */
	st = second(&c, 1, "node=z,lease_ttl=4",
		    "CKPTFS_FAULT='op=flock,err=ENOLCK;op=openat,err=ESTALE,name=lease.json,count=1'",
		    out, sizeof(out));
	expect_refused(st, out, "node 'z' is held by a live daemon", "no flock, a lease read once failing");
	/* Never readable: refused, and the line says why (it used to take the node). */
	st = second(&c, 1, "node=z,lease_ttl=4",
		    "CKPTFS_FAULT='op=flock,err=ENOLCK;op=openat,err=EIO,name=lease.json'", out, sizeof(out));
	expect_refused(st, out, "its lease record cannot be read (Input/output error)",
		       "no flock, an unreadable lease");

	/* Stopped past the ttl: another daemon takes the node; the first finds it lost. */
	taken_while_stopped(&c, "node=z,lease_ttl=4", env, "after-loss");
	ASSERT_GE(mn_log_count(&c, 0, "lost this node's lease"), 1);
	mn_kill(&c, 0);		/* its drain could never finish */
	mn_stop(&c, 1);

	/*
	 * flock that succeeds on each client alone: the lease decides across
	 * clients.  The second daemon stands for one on another client, where
	 * the first one's lock is not seen (ENOLCK is the nearest this host can
	 * show: its own lock would refuse it).
	 */
	char stale[PATH_MAX], senv[PATH_MAX + 128];
	snprintf(stale, sizeof(stale), "%s/stale-lease", c.node[0].m.root);
	snprintf(senv, sizeof(senv), "CKPTFS_FAULT=op=openat,err=EIO,name=lease.json,while=%s", stale);
	const char *const local_env[] = { "CKPTFS_FLOCK_LOCAL=1", senv, NULL };
	mn_mount_raw(&c, 0, "node=u,lease_ttl=4", local_env);
	ASSERT_GE(mn_log_count(&c, 0, "flock may not reach other clients (CKPTFS_FLOCK_LOCAL"), 1);
	ASSERT_STR_EQ(mn_stat(&c, 0, "node_flock"), "false");
	cu_write_text(mn_path(&c, 0, "u-before"), "x");
	if (!mn_wait_file(mn_bpath(&c, "u-before"), 1, 5000))
		FAILF("node u did not publish while it held its lease");
	st = second(&c, 1, "node=u,lease_ttl=4", noflock, out, sizeof(out));
	expect_refused(st, out, "node 'u' is held by a live daemon", "client-local flock, a live lease");
	/* Its client no longer shows it the lease file (a stale cache, a partition). */
	cu_write_text(stale, "");
	taken_while_stopped(&c, "node=u,lease_ttl=4", env, "u-after");
	mn_kill(&c, 0);
	mn_stop(&c, 1);

	/* Stopped past the ttl, nobody took the node: the lease is still lost (it expired). */
	mn_mount_raw(&c, 1, "node=w,lease_ttl=4", env);
	kill(c.node[1].m.pid, SIGSTOP);
	usleep(5000 * 1000);
	kill(c.node[1].m.pid, SIGCONT);
	if (!wait_lease_lost(&c, 1, 15000))
		FAILF("a daemon silent past its ttl still says it holds the lease");
	ASSERT_GE(mn_log_count(&c, 1, "past the lease's ttl"), 1);
	cu_write_text(mn_path(&c, 1, "after-expiry"), "x");
	usleep(1000 * 1000);
	if (file_exists(mn_bpath(&c, "after-expiry")))
		FAILF("a daemon whose lease expired still published");
	mn_kill(&c, 1);

	/* Running, but the backend refuses its heartbeats past the ttl: said at once, then lost. */
	char refuse[PATH_MAX], renv[PATH_MAX + 128];
	snprintf(refuse, sizeof(refuse), "%s/refuse-lease", c.node[1].m.root);
	snprintf(renv, sizeof(renv),
		 "CKPTFS_FAULT=op=flock,err=ENOLCK;op=rename,err=EIO,name=lease.json,while=%s", refuse);
	const char *const renv_list[] = { renv, NULL };
	mn_mount_raw(&c, 1, "node=v,lease_ttl=4", renv_list);
	cu_write_text(mn_path(&c, 1, "before-refusal"), "x");
	if (!mn_wait_file(mn_bpath(&c, "before-refusal"), 1, 5000))
		FAILF("node v did not publish before its heartbeats were refused");
	cu_write_text(refuse, "");
	bool said = false;
	for (uint64_t t0 = mono_ms(); !said && mono_ms() - t0 < 5000; usleep(50000))
		said = !strcmp(mn_stat(&c, 1, "lease_error"), "Input/output error");
	if (!said)
		FAILF("a refused heartbeat is not in the stats: lease_error='%s'",
		      mn_stat(&c, 1, "lease_error"));
	ASSERT_GE(mn_log_count(&c, 1, "cannot renew its lease: Input/output error"), 1);
	char *sout = NULL;
	const char *sargv[] = { mn_tool("ckptfs-stat"), c.node[1].m.mnt, NULL };
	tm_run(sargv, &sout);
	if (!sout || !strstr(sout, "lease held, cannot renew it: Input/output error"))
		FAILF("ckptfs-stat does not show the refused renewal:\n%s", sout ? sout : "");
	free(sout);
	if (!wait_lease_lost(&c, 1, 15000))
		FAILF("a daemon whose heartbeats were refused past the ttl still says it holds the lease");
	ASSERT_GE(mn_log_count(&c, 1, "past the lease's ttl"), 1);
	unlink(refuse);		/* the backend takes writes again: lost stays lost */
	cu_write_text(mn_path(&c, 1, "after-refusal"), "x");
	usleep(1500 * 1000);
	ASSERT_STR_EQ(mn_stat(&c, 1, "lease"), "lost");
	if (file_exists(mn_bpath(&c, "after-refusal")))
		FAILF("a daemon whose heartbeats were refused past the ttl still published");
	mn_kill(&c, 1);

	/*
	 * The lease runs out in the middle of a batch: three files in one
	 * batch (the publisher held in w/'s sync while they are flushed), the
	 * first one's rename held while the heartbeats are refused past the
	 * ttl.  Once the rename goes on, nothing after it is applied (before:
	 * the rest of the batch was, the lease being asked once per pass).
	 */
	char hold[PATH_MAX], hold1[PATH_MAX], benv[6 * PATH_MAX];
	snprintf(hold, sizeof(hold), "%s/hold-sync", c.node[1].m.root);
	snprintf(hold1, sizeof(hold1), "%s/hold-batch1", c.node[1].m.root);
	CHECK_SYS(mkdir(mn_bpath(&c, "w"), 0755));
	snprintf(benv, sizeof(benv), "CKPTFS_FAULT=op=flock,err=ENOLCK;"
		 "op=rename,err=EIO,name=lease.json,while=%s;op=fsync,hold=%s,name=%s;"
		 "op=rename,hold=%s,name=batch1", refuse, hold, mn_bpath(&c, "w"), hold1);
	const char *const benv_list[] = { benv, NULL };
	mn_mount_raw(&c, 1, "node=q,lease_ttl=4", benv_list);
	cu_write_text(hold, "");
	cu_write_text(hold1, "");
	cu_write_text(mn_path(&c, 1, "w/warm"), "x");
	usleep(300 * 1000);	/* the publisher waits in w/'s sync */
	cu_write_text(mn_path(&c, 1, "batch1"), "1");
	cu_write_text(mn_path(&c, 1, "batch2"), "2");
	cu_write_text(mn_path(&c, 1, "batch3"), "3");
	usleep(500 * 1000);	/* flushed, queued behind the sync */
	unlink(hold);		/* one batch of the three; batch1's rename waits */
	usleep(300 * 1000);
	cu_write_text(refuse, "");	/* heartbeats refused from now on */
	if (!wait_lease_lost(&c, 1, 15000))
		FAILF("%s", "node q's lease was not lost while its heartbeats were refused");
	unlink(hold1);		/* batch1's rename goes on */
	usleep(1500 * 1000);
	if (!file_exists(mn_bpath(&c, "batch1")))
		FAILF("%s", "batch1's rename, under way when the lease ran out, was not applied: "
		      "the case did not hold the batch where it meant to");
	if (file_exists(mn_bpath(&c, "batch2")) || file_exists(mn_bpath(&c, "batch3")))
		FAILF("%s", "a daemon that lost its lease mid-batch applied the rest of the batch");
	unlink(refuse);
	mn_kill(&c, 1);
	mn_cleanup(&c);
	return 0;
}
