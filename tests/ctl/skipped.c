/*
 * skipped.c — what an administrator's `ckptfs-ctl skip` leaves behind is
 * never reported durable, and takes with it what it must and no more.
 *
 *  chmod    a file's new version is refused (EACCES) and skipped; a later
 *           utimens of the file is applied (to the old file on the
 *           backend): the file still reads "skipped" and its fsync says
 *           ECANCELED (before: the later operation made it read durable,
 *           fsync succeeded, and the backend held the old contents).  A
 *           new write then closes with 0 and is published.
 *  marker   `latest.tmp`'s version is skipped, then renamed over `latest`
 *           (DeepSpeed's marker): `latest` reads "skipped", its fsync says
 *           ECANCELED and the backend's `latest` still names step 1
 *           (before: durable, with step 1 on the backend).
 *  race     an fsync of a file skipped while the publisher is busy (a
 *           rename held 2 s by the backend) says ECANCELED (before: 0
 *           once the publisher's pass ended).
 *  users    user A's `mkdir job/shared` is refused and skipped; user B
 *           wrote a shard into it and then B's marker `job/latest`: the
 *           skip takes B's shard and B's marker (before: B's marker was
 *           published, naming a shard the backend never got).
 *  lazy     with fsync=lazy, a file whose rename was skipped, written
 *           again: its fsync and close say 0 (the new version is what is
 *           pending; both said ECANCELED).
 *  stale    a version skipped while its flush is held, then a newer one
 *           published: when the held flush ends, the file stays durable
 *           (the skipped version's drop put ECANCELED back on it).
 *  readers  a partial rewrite of a published file is refused and skipped:
 *           two readers, one before and one after something read the
 *           backend file (its pages cached there), read the same bytes
 *           (before: the second was given the backend file by
 *           passthrough, the first the skipped version from the cache).
 *  batch    user A's version is refused in the same batch as user B's,
 *           which is applied: A's is blocked and its skip is taken at once
 *           (before: its place in the batch was taken by B's and it stayed
 *           marked as being applied, so skip said "not blocked" until a
 *           retry ran it alone).
 *  attrs    `mkdir job/a_dir` is refused; root then touches job, and
 *           writes job/b_shard: the skip of the mkdir takes root's touch
 *           but not the shard, which is published (before: the touch
 *           took every later file in job with it).
 */
#include "tests/ctl/ctl_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define UA 61010
#define UB 61011

static int fsync_path(const char *path)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -errno;
	int r = fsync(fd) < 0 ? -errno : 0;
	close(fd);
	return r;
}

/* Write text to path; close(2)'s result, 0 or -errno. */
static int put(const char *path, const char *text)
{
	int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
	if (fd < 0)
		return -errno;
	if (write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
		int e = errno;
		close(fd);
		return -e;
	}
	return close(fd) < 0 ? -errno : 0;
}

struct put_arg {
	const char *path, *text;
};

static int put_as(void *arg)
{
	const struct put_arg *a = arg;
	return -put(a->path, a->text);
}

static int mkdir_as(void *arg)
{
	const char *path = arg;
	return mkdir(path, 0777) < 0 ? errno : 0;
}

static void expect_backend(struct tmount *m, const char *rel, const char *text)
{
	size_t len;
	char *got = read_file(tm_bpath(m, rel), &len);

	if (!text) {
		if (got)
			FAILF("the backend holds %s (\"%.*s\"): it should not", rel, (int)len, got);
		return;
	}
	if (!got || len != strlen(text) || memcmp(got, text, len))
		FAILF("the backend's %s holds \"%.*s\", not \"%s\"", rel, got ? (int)len : 6,
		      got ? got : "(none)", text);
	free(got);
}

static void expect_state(struct tmount *m, const char *rel, const char *state)
{
	char v[64];

	if (ct_getxattr(tm_path(m, rel), "user.ckptfs.state", v, sizeof(v)) < 0 || strcmp(v, state))
		FAILF("%s reads \"%s\", not \"%s\"", rel, v, state);
}

/* Wait until something is blocked; skip it; the report. */
static char *skip_blocked(struct tmount *m)
{
	char seq[32];
	struct ct_result r;

	for (uint64_t t0 = mono_ms(); !ct_stat(m, "blocked_ops"); usleep(20 * 1000))
		if (mono_ms() - t0 > 10000)
			FAILF("%s", "nothing was blocked");
	ct_blocked_seq(m, seq);
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "skip", m->mnt, seq, NULL });
	ct_expect_status(&r, 0, "ckptfs-ctl skip");
	char *out = strdup(r.out);
	ct_result_free(&r);
	return out;
}

static void chmod_case(void)
{
	struct tmount m;
	char flag[PATH_MAX];

	ct_mount_flagged(&m, "skipped-chmod", "op=rename,err=EACCES,name=f1", flag);
	ASSERT_EQ(put(tm_path(&m, "f1"), "old\n"), 0);
	tm_sync(&m);
	ct_touch(flag);
	put(tm_path(&m, "f1"), "new\n");	/* may say EACCES once the refusal is known */
	free(skip_blocked(&m));
	unlink(flag);
	tm_sync(&m);
	expect_state(&m, "f1", "skipped");
	ASSERT_EQ(fsync_path(tm_path(&m, "f1")), -ECANCELED);
	struct timespec ts[2] = { { .tv_sec = 1577836800 }, { .tv_sec = 1577836800 } };
	CHECK_SYS(utimensat(AT_FDCWD, tm_path(&m, "f1"), ts, 0));
	tm_sync(&m);
	expect_backend(&m, "f1", "old\n");
	expect_state(&m, "f1", "skipped");
	ASSERT_EQ(fsync_path(tm_path(&m, "f1")), -ECANCELED);
	/* A new version: its close and fsync say what became of it. */
	ASSERT_EQ(put(tm_path(&m, "f1"), "newer\n"), 0);
	ASSERT_EQ(fsync_path(tm_path(&m, "f1")), 0);
	expect_state(&m, "f1", "durable");
	expect_backend(&m, "f1", "newer\n");
	tm_stop(&m);
	tm_cleanup(&m);
	printf("chmod: a skipped version stays skipped through a later utimens; the next is durable\n");
}

static void marker_case(void)
{
	struct tmount m;
	char flag[PATH_MAX], from[PATH_MAX];

	ct_mount_flagged(&m, "skipped-marker", "op=rename,err=EACCES,name=latest.tmp", flag);
	ASSERT_EQ(put(tm_path(&m, "latest"), "step1"), 0);
	tm_sync(&m);
	ct_touch(flag);
	put(tm_path(&m, "latest.tmp"), "step2");
	free(skip_blocked(&m));
	unlink(flag);
	snprintf(from, sizeof(from), "%s", tm_path(&m, "latest.tmp"));
	CHECK_SYS(rename(from, tm_path(&m, "latest")));
	tm_sync(&m);
	expect_backend(&m, "latest", "step1");
	expect_state(&m, "latest", "skipped");
	ASSERT_EQ(fsync_path(tm_path(&m, "latest")), -ECANCELED);
	tm_stop(&m);
	tm_cleanup(&m);
	printf("marker: a skipped file renamed over the marker is not reported durable\n");
}

static void lazy_case(void)
{
	struct tmount m;
	char flag[PATH_MAX], env[PATH_MAX + 256], from[PATH_MAX];

	tm_init(&m, "skipped-lazy");
	snprintf(flag, sizeof(flag), "%s/fault-flag", m.root);
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=rename,err=EACCES,name=renamedZ,while=%s", flag);
	tm_mount(&m, "fsync=lazy", (const char *const[]){ env, NULL });
	ASSERT_EQ(put(tm_path(&m, "fileA"), "v0"), 0);
	tm_sync(&m);
	ct_touch(flag);
	snprintf(from, sizeof(from), "%s", tm_path(&m, "fileA"));
	CHECK_SYS(rename(from, tm_path(&m, "renamedZ")));
	free(skip_blocked(&m));
	unlink(flag);
	int fd = CHECK_SYS(open(tm_path(&m, "renamedZ"), O_WRONLY | O_TRUNC));
	ASSERT_EQ(write(fd, "new", 3), 3);
	ASSERT_EQ(fsync(fd) < 0 ? -errno : 0, 0);
	ASSERT_EQ(close(fd) < 0 ? -errno : 0, 0);
	struct ct_result r;	/* (fsync of the root is lazy too) */
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "drain", m.mnt, NULL });
	ct_expect_status(&r, 0, "ckptfs-ctl drain");
	ct_result_free(&r);
	expect_backend(&m, "renamedZ", "new");
	tm_stop(&m);
	tm_cleanup(&m);
	printf("lazy: a new version after a skip: its fsync and close say 0\n");
}

static void stale_case(void)
{
	struct tmount m;
	char flag[PATH_MAX], hold[PATH_MAX], env[PATH_MAX * 3 + 256], from[PATH_MAX];

	tm_init(&m, "skipped-stale");
	snprintf(flag, sizeof(flag), "%s/fault-flag", m.root);
	snprintf(hold, sizeof(hold), "%s/hold", m.root);
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=rename,err=EACCES,name=renamedZ,while=%s;"
		 "op=fdatasync|fsync,hold=%s,while=%s,count=1,name=.ckptfs.", flag, hold, hold);
	tm_mount(&m, "io=pwrite", (const char *const[]){ env, NULL });
	ASSERT_EQ(put(tm_path(&m, "fileA"), "v0"), 0);
	tm_sync(&m);
	ct_touch(flag);
	snprintf(from, sizeof(from), "%s", tm_path(&m, "fileA"));
	CHECK_SYS(rename(from, tm_path(&m, "renamedZ")));
	for (uint64_t t0 = mono_ms(); !ct_stat(&m, "blocked_ops"); usleep(20 * 1000))
		if (mono_ms() - t0 > 10000)
			FAILF("%s", "the rename was never blocked");
	ct_touch(hold);
	put(tm_path(&m, "renamedZ"), "v1");	/* its flush is held */
	usleep(500 * 1000);
	free(skip_blocked(&m));		/* the rename, and v1 with it */
	unlink(flag);
	ASSERT_EQ(put(tm_path(&m, "renamedZ"), "v2"), 0);
	ASSERT_EQ(fsync_path(tm_path(&m, "renamedZ")), 0);
	expect_backend(&m, "renamedZ", "v2");
	unlink(hold);			/* v1's flush ends; the publisher drops it */
	usleep(1500 * 1000);
	tm_sync(&m);
	expect_state(&m, "renamedZ", "durable");
	ASSERT_EQ(fsync_path(tm_path(&m, "renamedZ")), 0);
	expect_backend(&m, "renamedZ", "v2");
	tm_stop(&m);
	tm_cleanup(&m);
	printf("stale: a skipped version's late drop leaves a newer durable one durable\n");
}

static void batch_case(void)
{
	struct tmount m;
	char hold[PATH_MAX], env[3 * PATH_MAX], a[PATH_MAX], b[PATH_MAX], seq[32];
	struct ct_result r;

	tm_init(&m, "skipped-batch");
	CHECK_SYS(mkdir(tm_bpath(&m, "ua"), 0755));
	CHECK_SYS(chown(tm_bpath(&m, "ua"), UA, UA));
	CHECK_SYS(mkdir(tm_bpath(&m, "ub"), 0755));
	CHECK_SYS(chown(tm_bpath(&m, "ub"), UB, UB));
	CHECK_SYS(mkdir(tm_bpath(&m, "w"), 0755));
	snprintf(hold, sizeof(hold), "%s/hold", m.root);
	/* A's rename refused; the sync of w/ held, so that A's and B's files meet in one batch. */
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=rename,err=EACCES,name=afile;"
		 "op=fsync,hold=%s,name=%s", hold, tm_bpath(&m, "w"));
	ct_mount_shared(&m, NULL, (const char *const[]){ env, NULL }, 0755);
	ct_touch(hold);
	ASSERT_EQ(put(tm_path(&m, "w/warm"), "w"), 0);
	usleep(300 * 1000);	/* the publisher waits in w/'s sync */
	snprintf(a, sizeof(a), "%s", tm_path(&m, "ua/afile"));
	snprintf(b, sizeof(b), "%s", tm_path(&m, "ub/bfile"));
	tm_as_user(UA, UA, put_as, &(struct put_arg){ a, "A" });
	tm_as_user(UB, UB, put_as, &(struct put_arg){ b, "B" });
	usleep(500 * 1000);	/* both flushed, queued behind the sync */
	unlink(hold);
	for (uint64_t t0 = mono_ms(); !ct_stat(&m, "blocked_ops"); usleep(10 * 1000))
		if (mono_ms() - t0 > 10000)
			FAILF("%s", "A's version was never blocked");
	ct_blocked_seq(&m, seq);
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "skip", m.mnt, seq, NULL });
	ct_expect_status(&r, 0, "ckptfs-ctl skip of a version blocked in a shared batch");
	ct_result_free(&r);
	tm_sync(&m);
	expect_backend(&m, "ub/bfile", "B");
	expect_backend(&m, "ua/afile", NULL);
	tm_stop(&m);
	tm_cleanup(&m);
	printf("batch: a version blocked in a batch another user's file shared: skipped at once\n");
}

static void readers_case(void)
{
	struct tmount m;
	char flag[PATH_MAX], env[PATH_MAX + 256], path[PATH_MAX];
	static char buf[1 << 20];
	size_t l1, l2, lb;

	tm_init(&m, "skipped-readers");
	snprintf(flag, sizeof(flag), "%s/fault-flag", m.root);
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=rename,err=EACCES,name=fileR,while=%s", flag);
	tm_mount(&m, "cache_size=64M", (const char *const[]){ env, NULL });
	struct json_obj st;
	ct_stats(&m, &st);
	bool pt = ct_bool(&st, "passthrough");
	json_free(&st);
	if (!pt) {	/* the case is about what passthrough serves */
		printf("readers: passthrough not available here; not run\n");
		tm_stop(&m);
		tm_cleanup(&m);
		return;
	}
	snprintf(path, sizeof(path), "%s", tm_path(&m, "fileR"));
	int fd = CHECK_SYS(open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644));
	memset(buf, 'A', sizeof(buf));
	for (int i = 0; i < 8; i++)
		ASSERT_EQ(write(fd, buf, sizeof(buf)), (ssize_t)sizeof(buf));
	CHECK_SYS(close(fd));
	tm_sync(&m);
	ct_touch(flag);
	fd = CHECK_SYS(open(path, O_WRONLY));
	memset(buf, 'B', sizeof(buf));
	ASSERT_EQ(pwrite(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	CHECK_SYS(close(fd));
	free(skip_blocked(&m));
	unlink(flag);
	tm_sync(&m);
	char *r1 = read_file(path, &l1);
	free(read_file(tm_bpath(&m, "fileR"), &lb));	/* its pages now cached on the backend */
	char *r2 = read_file(path, &l2);
	ASSERT_TRUE(r1 && r2);
	if (l1 != l2 || memcmp(r1, r2, l1))
		FAILF("two readers of fileR read different bytes: first byte '%c', then '%c'",
		      r1[0], r2[0]);
	free(r1);
	free(r2);
	tm_stop(&m);
	tm_cleanup(&m);
	printf("readers: after a skipped rewrite, every reader reads the same bytes\n");
}

static void race_case(void)
{
	struct tmount m;
	char flag[PATH_MAX], env[PATH_MAX + 256], slow[PATH_MAX];

	tm_init(&m, "skipped-race");
	snprintf(flag, sizeof(flag), "%s/fault-flag", m.root);
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=mkdir,err=EACCES,name=blkdir,while=%s;"
		 "op=rename,delay_ms=2000,name=slow", flag);
	ct_mount_shared(&m, NULL, (const char *const[]){ env, NULL }, 0777);
	tm_sync(&m);
	ct_touch(flag);
	CHECK_SYS(mkdir(tm_path(&m, "blkdir"), 0755));
	put(tm_path(&m, "blkdir/f"), "f");
	ASSERT_EQ(fsync_path(tm_path(&m, "blkdir/f")), -EACCES);
	/* Another user's file, whose rename holds the publisher's pass for 2 s. */
	snprintf(slow, sizeof(slow), "%s", tm_path(&m, "slow"));
	ASSERT_EQ(tm_as_user(UB, UB, put_as, &(struct put_arg){ slow, "slow" }), 0);
	usleep(500 * 1000);
	char *rep = skip_blocked(&m);
	ct_expect_in(rep, "blkdir/f", "the skip's report");
	free(rep);
	uint64_t t0 = mono_ms();
	int r = fsync_path(tm_path(&m, "blkdir/f"));
	fprintf(stderr, "fsync after the skip: %s in %llu ms\n", r ? strerror(-r) : "0",
		(unsigned long long)(mono_ms() - t0));
	ASSERT_EQ(r, -ECANCELED);
	unlink(flag);
	tm_sync(&m);
	expect_backend(&m, "slow", "slow");
	expect_backend(&m, "blkdir/f", NULL);
	tm_stop(&m);
	tm_cleanup(&m);
	printf("race: an fsync while the publisher is busy after a skip says ECANCELED\n");
}

static void users_case(void)
{
	struct tmount m;
	char flag[PATH_MAX], shard[PATH_MAX], latest[PATH_MAX];

	ct_mount_flagged_shared(&m, "skipped-users", "op=mkdir,err=EACCES,name=shared", flag);
	CHECK_SYS(mkdir(tm_path(&m, "job"), 01777));
	CHECK_SYS(chmod(tm_path(&m, "job"), 01777));
	tm_sync(&m);
	ct_touch(flag);
	ASSERT_EQ(tm_as_user(UA, UA, mkdir_as, (void *)tm_path(&m, "job/shared")), 0);
	snprintf(shard, sizeof(shard), "%s", tm_path(&m, "job/shared/b_shard"));
	snprintf(latest, sizeof(latest), "%s", tm_path(&m, "job/latest"));
	tm_as_user(UB, UB, put_as, &(struct put_arg){ shard, "shard-b" });
	tm_as_user(UB, UB, put_as, &(struct put_arg){ latest, "b_shard" });	/* EACCES: behind it */
	char *rep = skip_blocked(&m);
	fprintf(stderr, "%s", rep);
	ct_expect_in(rep, "job/shared/b_shard", "the skip's report");
	ct_expect_in(rep, "job/latest", "the skip's report");
	ct_expect_in(rep, "until uid 61011's next checkpoint marker", "the skip's report");
	free(rep);
	unlink(flag);
	tm_sync(&m);
	expect_backend(&m, "job/latest", NULL);
	expect_backend(&m, "job/shared/b_shard", NULL);
	expect_state(&m, "job/latest", "skipped");
	tm_stop(&m);
	tm_cleanup(&m);
	printf("users: another user's shard skipped with a directory takes that user's marker\n");
}

static void attrs_case(void)
{
	struct tmount m;
	char flag[PATH_MAX];

	ct_mount_flagged(&m, "skipped-attrs", "op=mkdir,err=EACCES,name=a_dir", flag);
	CHECK_SYS(mkdir(tm_path(&m, "job"), 0755));
	tm_sync(&m);
	ct_touch(flag);
	CHECK_SYS(mkdir(tm_path(&m, "job/a_dir"), 0755));
	struct timespec ts[2] = { { .tv_sec = 1577836800 }, { .tv_sec = 1577836800 } };
	CHECK_SYS(utimensat(AT_FDCWD, tm_path(&m, "job"), ts, 0));
	put(tm_path(&m, "job/b_shard"), "shard");
	char *rep = skip_blocked(&m);
	fprintf(stderr, "%s", rep);
	if (strstr(rep, "b_shard"))
		FAILF("the skip of job/a_dir took job/b_shard with it:\n%s", rep);
	free(rep);
	unlink(flag);
	ASSERT_EQ(fsync_path(tm_path(&m, "job/b_shard")), 0);
	tm_sync(&m);
	expect_backend(&m, "job/b_shard", "shard");
	expect_state(&m, "job/b_shard", "durable");
	tm_stop(&m);
	tm_cleanup(&m);
	printf("attrs: a skipped directory's touch does not take the files made in it later\n");
}

int main(int argc, char **argv)
{
	tm_require_fuse();
	if (geteuid() != 0) {
		fprintf(stderr, "needs root (second users, allow_other)\n");
		return TEST_SKIP;
	}
	const char *only = argc > 1 ? argv[1] : NULL;
	if (!only || !strcmp(only, "chmod"))
		chmod_case();
	if (!only || !strcmp(only, "marker"))
		marker_case();
	if (!only || !strcmp(only, "race"))
		race_case();
	if (!only || !strcmp(only, "users"))
		users_case();
	if (!only || !strcmp(only, "attrs"))
		attrs_case();
	if (!only || !strcmp(only, "lazy"))
		lazy_case();
	if (!only || !strcmp(only, "stale"))
		stale_case();
	if (!only || !strcmp(only, "readers"))
		readers_case();
	if (!only || !strcmp(only, "batch"))
		batch_case();
	return 0;
}
