/*
 * users.c — on a shared node, one user's refused operation holds back that
 * user's checkpoints only (P1, P4), and the control files respect users.
 *
 * A root mount with allow_other; users 61000 (A) and 61001 (B) have their
 * own directories.  The backend refuses A's `mkdir a-step2` with EACCES:
 *  - A's fsync of its marker returns EACCES and the backend keeps A's old
 *    checkpoint; B's checkpoint, written at the same time, becomes durable
 *    (its fsync returns 0, the backend holds it);
 *  - `ckptfs-ctl drain` run by B succeeds (B's own operations); run by root
 *    it fails naming A's operation;
 *  - .ckptfs/files shows A only A's files, B only B's, root both;
 *  - B cannot write .ckptfs/ctl;
 *  - a dependency that crosses users: root's `mkdir jobdir` is refused, so
 *    B's file in jobdir reports EACCES (and B's later operations wait
 *    behind it), while A — whose block was lifted by `retry` — goes on.
 * Then drains do not occupy FUSE workers: with two workers and a slow
 * backend, B starts more drains than the per-user cap (8): the extra one is
 * refused with EBUSY, and a stat meanwhile answers at once.
 * And a directory renamed by one user waits for another user's work at any
 * depth inside it: A's shard in pub/D/x is refused (EACCES) when B renames
 * pub/D to pub/E (B's publishing rename of a job directory); the backend
 * never shows pub/E without the shard (B's drain fails meanwhile), and once
 * the cause is fixed it holds pub/E/x/shard and no pub/D.  The same holds
 * when pub/D/x reaches the backend in the same batch as B's rename (the
 * publisher was busy while A made x and the shard, and B renamed), and for
 * a new version of A's file whose other name, a hard link, is in pub/D:
 * the backend never shows pub/E with the old version.
 * And fsync waits in the caller's order too: root writes a file into A's
 * directory (its contents in root's order); A renames it, which the
 * backend refuses (EACCES), and A's fsync of it reports EACCES rather than
 * durable (it waited in root's order only, where nothing was pending);
 * once the cause is gone, A's fsync succeeds and the backend has the name.
 */
#include "tests/ctl/ctl_util.h"

#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define UA 61000
#define UB 61001

/* Run fn(arg) in a child with uid/gid u: its return value (0..255). */
static int as_user(uid_t u, int (*fn)(void *), void *arg)
{
	pid_t pid = CHECK_SYS(fork());
	if (pid == 0) {
		if (setgroups(0, NULL) < 0 || setresgid(u, u, u) < 0 || setresuid(u, u, u) < 0)
			_exit(250);
		_exit(fn(arg));
	}
	int st;
	CHECK_SYS(waitpid(pid, &st, 0));
	if (!WIFEXITED(st))
		FAILF("child of uid %u died (status %d)", (unsigned)u, st);
	return WEXITSTATUS(st);
}

static int put(const char *path, const char *text)
{
	int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
	if (fd < 0)
		return errno;
	if (write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		return errno;
	return close(fd) < 0 ? errno : 0;
}

static int sync_file(const char *path)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return errno;
	int r = fsync(fd) < 0 ? errno : 0;
	close(fd);
	return r;
}

struct ckpt {
	struct tmount *m;
	const char *dir;	/* the user's directory */
	const char *step;	/* the new checkpoint directory's name */
};

/* mkdir step, a shard in it, the marker naming it; fsync(marker) -> errno. */
static int write_ckpt(void *arg)
{
	struct ckpt *c = arg;
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s/%s", c->dir, c->step);
	if (mkdir(tm_path(c->m, p), 0755) < 0)
		return 200;
	snprintf(p, sizeof(p), "%s/%s/shard", c->dir, c->step);
	put(tm_path(c->m, p), "shard data");	/* its close may already know */
	snprintf(p, sizeof(p), "%s/latest", c->dir);
	put(tm_path(c->m, p), c->step);
	return sync_file(tm_path(c->m, p));
}

struct one {
	struct tmount *m;
	const char *rel;
};

static int put_and_sync(void *arg)
{
	struct one *o = arg;
	int r = put(tm_path(o->m, o->rel), "x");
	return r ? r : sync_file(tm_path(o->m, o->rel));
}

static int read_files(void *arg)
{
	struct one *o = arg;
	char *t = ct_read_ctl(o->m, "files");
	/* exit 1 if `rel` occurs in the listing, 0 if not */
	int r = strstr(t, o->rel) != NULL;
	free(t);
	return r;
}

static int open_ctl_for_write(void *arg)
{
	struct tmount *m = arg;
	int fd = open(tm_path(m, ".ckptfs/ctl"), O_WRONLY);
	if (fd >= 0) {
		close(fd);
		return 0;
	}
	return errno;
}

struct drainrun {
	struct tmount *m;
	int status;		/* ckptfs-ctl's exit status */
	char err[512];
};

static int run_drain(void *arg)
{
	struct drainrun *d = arg;
	execl(ct_tool("ckptfs-ctl"), "ckptfs-ctl", "drain", d->m->mnt, "--timeout", "10", (char *)NULL);
	return 127;
}

static void check_isolation(void)
{
	struct tmount m;
	char flag[PATH_MAX], env[PATH_MAX * 3];

	tm_init(&m, "ctl-users");
	snprintf(flag, sizeof(flag), "%s/flag", m.root);
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=mkdir,err=EACCES,name=a-step2,while=%s;"
		 "op=mkdir,err=EACCES,name=jobdir,while=%s", flag, flag);
	ct_mount_shared(&m, NULL, (const char *[]){ env, NULL }, 0755);
	CHECK_SYS(mkdir(tm_path(&m, "ua"), 0755));
	CHECK_SYS(chown(tm_path(&m, "ua"), UA, UA));
	CHECK_SYS(mkdir(tm_path(&m, "ub"), 0755));
	CHECK_SYS(chown(tm_path(&m, "ub"), UB, UB));
	struct ckpt a1 = { &m, "ua", "a-step1" }, b1 = { &m, "ub", "b-step1" };
	ASSERT_EQ(as_user(UA, write_ckpt, &a1), 0);
	ASSERT_EQ(as_user(UB, write_ckpt, &b1), 0);
	ct_touch(flag);

	/* A is refused; B, at the same time, is not held back. */
	struct ckpt a2 = { &m, "ua", "a-step2" }, b2 = { &m, "ub", "b-step2" };
	ASSERT_EQ(as_user(UA, write_ckpt, &a2), EACCES);
	ASSERT_EQ(as_user(UB, write_ckpt, &b2), 0);
	size_t len;
	char *lb = read_file(tm_bpath(&m, "ub/latest"), &len);
	ASSERT_TRUE(lb && len == 7 && !memcmp(lb, "b-step2", 7));
	free(lb);
	ASSERT_TRUE(file_exists(tm_bpath(&m, "ub/b-step2/shard")));
	char *la = read_file(tm_bpath(&m, "ua/latest"), &len);
	ASSERT_TRUE(la && len == 7 && !memcmp(la, "a-step1", 7));
	free(la);
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "ua/a-step2")));

	/* drain: B's own operations are durable; root's view is blocked by A. */
	struct drainrun d = { .m = &m };
	ASSERT_EQ(as_user(UB, run_drain, &d), 0);
	struct ct_result r;
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "drain", m.mnt, "--timeout", "5", NULL });
	ct_expect_status(&r, 1, "root's drain while A is blocked");
	ct_expect_in(r.err, "mkdir ua/a-step2", "root's drain");
	ct_result_free(&r);

	/* files: each user sees their own pending files; root sees all. */
	struct one fa = { &m, "ua/latest" }, fb = { &m, "ub/" };
	ASSERT_EQ(as_user(UA, read_files, &fa), 1);
	ASSERT_EQ(as_user(UB, read_files, &fa), 0);
	char *all = ct_read_ctl(&m, "files");
	ct_expect_in(all, "ua/latest", "root's .ckptfs/files");
	free(all);
	(void)fb;
	ASSERT_EQ(as_user(UB, open_ctl_for_write, &m), EACCES);

	/* A dependency across users: root's refused mkdir holds B's file in it. */
	CHECK_SYS(mkdir(tm_path(&m, "jobdir"), 0777));
	CHECK_SYS(chmod(tm_path(&m, "jobdir"), 0777));
	struct one bj = { &m, "jobdir/b-result" }, bafter = { &m, "ub/after" };
	ASSERT_EQ(as_user(UB, put_and_sync, &bj), EACCES);
	ASSERT_EQ(as_user(UB, put_and_sync, &bafter), EACCES);	/* B's order: behind it */
	/* A's cause is fixed by an admin (retry); A goes on though jobdir is refused. */
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "skip", m.mnt, "1", NULL });
	ct_expect_status(&r, 1, "skip of an operation that is not blocked");
	ct_result_free(&r);
	struct one anext = { &m, "ua/next" };
	CHECK_SYS(unlink(flag));
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "retry", m.mnt, NULL });
	ct_expect_status(&r, 0, "ckptfs-ctl retry");
	ct_result_free(&r);
	ASSERT_EQ(as_user(UA, put_and_sync, &anext), 0);
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "drain", m.mnt, "--timeout", "20", NULL });
	ct_expect_status(&r, 0, "root's drain once everything is fixed");
	ct_result_free(&r);
	ASSERT_TRUE(file_exists(tm_bpath(&m, "jobdir/b-result")));
	ASSERT_TRUE(file_exists(tm_bpath(&m, "ua/a-step2/shard")));
	tm_stop(&m);
	tm_cleanup(&m);
	fprintf(stderr, "isolation              ok\n");
}

/* ---- a directory moved over another user's pending work ---- */

static int b_make_dir(void *arg)
{
	struct tmount *m = arg;
	if (mkdir(tm_path(m, "pub/D"), 0777) < 0 || chmod(tm_path(m, "pub/D"), 0777) < 0)
		return errno;
	return 0;
}

static int a_write_shard(void *arg)
{
	struct tmount *m = arg;
	if (mkdir(tm_path(m, "pub/D/x"), 0755) < 0)
		return errno;
	return put(tm_path(m, "pub/D/x/shard"), "A's shard");	/* its close may already know */
}

static int b_rename_dir(void *arg)
{
	struct tmount *m = arg;
	char to[PATH_MAX];
	snprintf(to, sizeof(to), "%s", tm_path(m, "pub/E"));
	return rename(tm_path(m, "pub/D"), to) < 0 ? errno : 0;
}

/* Mount with CKPTFS_FAULT=... (env) for users A and B, with B's pub/D made. */
static void mount_pub(struct tmount *m, const char *env)
{
	ct_mount_shared(m, NULL, (const char *[]){ env, NULL }, 0755);
	CHECK_SYS(mkdir(tm_path(m, "pub"), 0777));
	CHECK_SYS(chmod(tm_path(m, "pub"), 0777));
	ASSERT_EQ(as_user(UB, b_make_dir, m), 0);
}

static void check_moved_dir(void)
{
	struct tmount m;
	char flag[PATH_MAX], env[PATH_MAX * 2];
	struct ct_result r;

	tm_init(&m, "ctl-moved");
	snprintf(flag, sizeof(flag), "%s/flag", m.root);
	ct_touch(flag);
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=rename,err=EACCES,name=shard,while=%s", flag);
	mount_pub(&m, env);
	ASSERT_EQ(as_user(UA, a_write_shard, &m), 0);
	ASSERT_EQ(as_user(UB, b_rename_dir, &m), 0);
	struct drainrun d = { .m = &m };
	ASSERT_TRUE(as_user(UB, run_drain, &d) != 0);	/* B's rename waits behind A's shard */
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "pub/E")));
	ASSERT_TRUE(file_exists(tm_bpath(&m, "pub/D/x")));
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "pub/D/x/shard")));

	CHECK_SYS(unlink(flag));
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "retry", m.mnt, NULL });
	ct_expect_status(&r, 0, "ckptfs-ctl retry");
	ct_result_free(&r);
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "drain", m.mnt, "--timeout", "20", NULL });
	ct_expect_status(&r, 0, "root's drain once the shard is let through");
	ct_result_free(&r);
	size_t len;
	char *got = read_file(tm_bpath(&m, "pub/E/x/shard"), &len);
	ASSERT_TRUE(got && len == 9 && !memcmp(got, "A's shard", 9));
	free(got);
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "pub/D")));
	tm_stop(&m);
	tm_cleanup(&m);
	fprintf(stderr, "moved directory        ok\n");
}

/* Wait up to ms for a backend path to exist. */
static bool backend_appears(struct tmount *m, const char *rel, unsigned ms)
{
	for (unsigned t = 0; t < ms; t += 20) {
		if (file_exists(tm_bpath(m, rel)))
			return true;
		usleep(20 * 1000);
	}
	return file_exists(tm_bpath(m, rel));
}

static void drain_ok(struct tmount *m, const char *what)
{
	struct ct_result r;
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "drain", m->mnt, "--timeout", "20", NULL });
	ct_expect_status(&r, 0, what);
	ct_result_free(&r);
}

static void expect_backend(struct tmount *m, const char *rel, const char *text)
{
	size_t len;
	char *got = read_file(tm_bpath(m, rel), &len);
	if (!got || len != strlen(text) || memcmp(got, text, len))
		FAILF("backend %s: want \"%s\", got \"%.*s\"", rel, text, got ? (int)len : 6,
		      got ? got : "(none)");
	free(got);
}

/*
 * The publisher is busy (root's mkdir "slow" hangs) while A makes pub/D/x
 * and its shard and B renames pub/D: x and B's rename come in one batch.
 * The shard's publishing rename is held: the backend must not get pub/E.
 */
static void check_moved_dir_batch(void)
{
	struct tmount m;
	char hold_m[PATH_MAX], hold_s[PATH_MAX], env[PATH_MAX * 3];

	tm_init(&m, "ctl-moved-batch");
	snprintf(hold_m, sizeof(hold_m), "%s/hold-mkdir", m.root);
	snprintf(hold_s, sizeof(hold_s), "%s/hold-shard", m.root);
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=mkdir,hold=%s,name=slow;op=rename,hold=%s,name=shard",
		 hold_m, hold_s);
	mount_pub(&m, env);
	drain_ok(&m, "drain of pub/D");
	ct_touch(hold_m);
	ct_touch(hold_s);
	CHECK_SYS(mkdir(tm_path(&m, "slow"), 0755));	/* the publisher hangs in it */
	usleep(300 * 1000);
	ASSERT_EQ(as_user(UA, a_write_shard, &m), 0);
	ASSERT_EQ(as_user(UB, b_rename_dir, &m), 0);
	CHECK_SYS(unlink(hold_m));
	if (!backend_appears(&m, "pub/D/x", 10000) && !file_exists(tm_bpath(&m, "pub/E/x")))
		FAILF("pub/D/x never reached the backend");
	usleep(300 * 1000);	/* the rename, were it in the same batch, is applied by now */
	if (file_exists(tm_bpath(&m, "pub/E")))
		FAILF("the backend has pub/E before A's shard in pub/D/x (made in the same batch)");
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "pub/D/x/shard")));
	CHECK_SYS(unlink(hold_s));
	drain_ok(&m, "drain once the shard is let through");
	expect_backend(&m, "pub/E/x/shard", "A's shard");
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "pub/D")));
	tm_stop(&m);
	tm_cleanup(&m);
	fprintf(stderr, "moved directory, batch ok\n");
}

static int a_link_into_d(void *arg)
{
	struct tmount *m = arg;
	int r;
	if (mkdir(tm_path(m, "pub/a"), 0755) < 0)
		return errno;
	if ((r = put(tm_path(m, "pub/a/f"), "version 1")))
		return r;
	char to[PATH_MAX];
	snprintf(to, sizeof(to), "%s", tm_path(m, "pub/D/glink"));
	return link(tm_path(m, "pub/a/f"), to) < 0 ? errno : 0;
}

static int a_new_version(void *arg)
{
	return put(tm_path(arg, "pub/a/f"), "version 2");
}

/*
 * A's file pub/a/f has a second name pub/D/glink; its new version is
 * flushing (the temporary file's creation is held) when B renames pub/D.
 */
static void check_moved_link(void)
{
	struct tmount m;
	char hold[PATH_MAX], env[PATH_MAX * 2];

	tm_init(&m, "ctl-moved-link");
	snprintf(hold, sizeof(hold), "%s/hold-temp", m.root);
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=openat,hold=%s,name=.ckptfs.t.", hold);
	mount_pub(&m, env);
	ASSERT_EQ(as_user(UA, a_link_into_d, &m), 0);
	drain_ok(&m, "drain of the linked file");
	expect_backend(&m, "pub/D/glink", "version 1");
	ct_touch(hold);
	ASSERT_EQ(as_user(UA, a_new_version, &m), 0);
	ASSERT_EQ(as_user(UB, b_rename_dir, &m), 0);
	if (backend_appears(&m, "pub/E", 1000))
		FAILF("the backend has pub/E before the new version of its hard link glink");
	CHECK_SYS(unlink(hold));
	drain_ok(&m, "drain once the version is let through");
	expect_backend(&m, "pub/E/glink", "version 2");
	expect_backend(&m, "pub/a/f", "version 2");
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "pub/D")));
	tm_stop(&m);
	tm_cleanup(&m);
	fprintf(stderr, "moved directory, link ok\n");
}

/* ---- drains answer asynchronously, capped per user ---- */

struct drainer {
	struct tmount *m;
	int result;		/* 0, or errno of the read */
};

static const char *ren_from, *ren_to;

/* As A: rename ren_from to ren_to through the mount, then fsync it there -> errno. */
static int a_rename_and_sync(void *arg)
{
	(void)arg;
	if (strcmp(ren_from, ren_to) && rename(ren_from, ren_to) < 0)
		return 100 + errno;	/* not the fsync's answer */
	return sync_file(ren_to);
}

static void check_fsync_caller_order(void)
{
	struct tmount m;
	char flag[PATH_MAX], from[PATH_MAX], to[PATH_MAX];

	ct_mount_flagged_shared(&m, "ctl-users-fsync", "op=rename,name=renamed-by-a,err=EACCES", flag);
	CHECK_SYS(mkdir(tm_path(&m, "a"), 0755));
	CHECK_SYS(chown(tm_path(&m, "a"), UA, UA));
	ASSERT_EQ(put(tm_path(&m, "a/roots"), "root's file\n"), 0);
	tm_sync(&m);
	snprintf(from, sizeof(from), "%s", tm_path(&m, "a/roots"));
	snprintf(to, sizeof(to), "%s", tm_path(&m, "a/renamed-by-a"));
	ren_from = from;
	ren_to = to;
	ct_touch(flag);
	int e = as_user(UA, a_rename_and_sync, NULL);
	if (e != EACCES)
		FAILF("A's fsync of the file A renamed, with the rename refused by the backend: %s, "
		      "expected EACCES", e ? strerror(e) : "0 (durable)");
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "a/renamed-by-a")));
	unlink(flag);
	struct ct_result r;
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "retry", m.mnt, NULL });
	ct_result_free(&r);
	ren_from = ren_to = to;	/* a rename onto itself: the fsync alone */
	for (uint64_t t0 = mono_ms(); (e = as_user(UA, a_rename_and_sync, NULL)) && mono_ms() - t0 < 15000;)
		usleep(100 * 1000);
	ASSERT_EQ(e, 0);
	ASSERT_TRUE(file_exists(tm_bpath(&m, "a/renamed-by-a")));
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "a/roots")));
	tm_stop(&m);
	tm_cleanup(&m);
	printf("fsync by A of root's file A renamed: EACCES while the rename is refused, 0 after\n");
}

static void *drain_thread(void *arg)
{
	struct drainer *d = arg;
	char buf[1024];
	int fd = open(tm_path(d->m, ".ckptfs/drain"), O_RDONLY);
	if (fd < 0) {
		d->result = errno;
		return NULL;
	}
	d->result = read(fd, buf, sizeof(buf)) < 0 ? errno : 0;
	close(fd);
	return NULL;
}

static int many_drains(void *arg)
{
	struct tmount *m = arg;
	struct drainer d[10];
	pthread_t th[10];
	struct stat st;

	if (put(tm_path(m, "ub/slow"), "slow") != 0)
		return 101;
	for (int i = 0; i < 10; i++) {
		d[i] = (struct drainer){ m, -1 };
		pthread_create(&th[i], NULL, drain_thread, &d[i]);
	}
	usleep(300 * 1000);
	uint64_t t0 = mono_ms();
	if (stat(tm_path(m, "ub"), &st) < 0 || mono_ms() - t0 > 3000)
		return 102;	/* a worker should be free at once */
	int busy = 0, ok = 0;
	for (int i = 0; i < 10; i++) {
		pthread_join(th[i], NULL);
		busy += d[i].result == EBUSY;
		ok += d[i].result == 0;
	}
	return busy == 2 && ok == 8 ? 0 : 100 + busy;
}

static void check_async_drains(void)
{
	struct tmount m;

	tm_init(&m, "ctl-users-drains");
	ct_mount_shared(&m, "max_threads=2",
			(const char *[]){ "CKPTFS_FAULT=op=rename,delay_ms=8000,name=slow", NULL }, 0755);
	CHECK_SYS(mkdir(tm_path(&m, "ub"), 0755));
	CHECK_SYS(chown(tm_path(&m, "ub"), UB, UB));
	tm_sync(&m);
	int r = as_user(UB, many_drains, &m);
	if (r)
		FAILF("many drains as B: %d (100 + EBUSY answers; expected 2 of 10 over the cap of 8)", r);
	tm_stop(&m);
	tm_cleanup(&m);
	fprintf(stderr, "async capped drains    ok\n");
}

int main(void)
{
	tm_require_fuse();
	if (geteuid() != 0) {
		fprintf(stderr, "needs root (second users, allow_other)\n");
		return TEST_SKIP;
	}
	check_isolation();
	check_moved_dir();
	check_moved_dir_batch();
	check_moved_link();
	check_async_drains();
	check_fsync_caller_order();
	return 0;
}
