/*
 * permanent.c — an operation the backend refuses is never skipped (P4).
 *
 * A DeepSpeed-like stream: step1/{shard0,shard1} and latest="step1" reach
 * the backend; then a fault rule starts refusing one operation of the
 * second checkpoint (mkdir step2, the temporary file of a shard, the rename
 * that publishes a shard, or the unlink that deletes the old checkpoint)
 * with a permanent errno class (EACCES, EPERM, ENOENT, EROFS,
 * ENAMETOOLONG), and the stream goes on: mkdir step2, step2/{shard0,shard1},
 * latest="step2", delete step1.  For each case:
 *  - the backend holds exactly the state before the refused operation —
 *    never a later marker (checked on the backend directly, twice, with a
 *    slow retry in between);
 *  - the caller: fsync of latest and the close of a file written after the
 *    failure is known return that errno;
 *  - stats say "blocked" and name the operation and the errno; the files'
 *    user.ckptfs.state is "blocked"; `ckptfs-ctl drain` exits 1 naming it;
 *  - once the cause is gone, `ckptfs-ctl retry` (or, for the first case, the
 *    daemon's own slow retry) publishes everything: the backend equals the
 *    mount, verify passes, stats say ok.
 * Then `ckptfs-ctl skip`: the refused mkdir goes with its dependants (the
 * shards under it, the later marker) and is recorded as skipped; step1's
 * removals behind it go too, so step1 stays whole on the backend (P4); an
 * unrelated later file is published; the backend keeps latest="step1".
 * The same in a rotation (skip_rotation): a shard refused, latest written
 * by rename, step1 deleted, skipped; step1 and latest="step1" stay, and
 * the next checkpoint and the removal after its marker are published; the
 * mount lists the kept file again, and the next rotation removes it.
 * Last, drain with a file open for writing leaves it out and says so.
 * CKPTFS_PERM_CASE=SUBSTRING runs only matching cases.
 */
#include "tests/ctl/ctl_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

struct text {
	char *s;
	size_t len;
};

static void add(struct text *t, const char *fmt, ...)
{
	va_list ap;
	char buf[PATH_MAX + 128];
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	t->s = realloc(t->s, t->len + (size_t)n + 1);
	memcpy(t->s + t->len, buf, (size_t)n + 1);
	t->len += (size_t)n;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

enum where { W_MKDIR, W_TEMP, W_RENAME, W_UNLINK };

struct pcase {
	const char *name;
	const char *rule;	/* while=FLAG is appended */
	int err;
	enum where where;
	bool self_retry;	/* recover without `ckptfs-ctl retry` */
};

static const struct pcase cases[] = {
	{ "mkdir EACCES", "op=mkdir,err=EACCES,name=step2", EACCES, W_MKDIR, true },
	{ "mkdir EPERM", "op=mkdir,err=EPERM,name=step2", EPERM, W_MKDIR, false },
	{ "create EACCES", "op=openat,err=EACCES,name=.ckptfs.t", EACCES, W_TEMP, false },
	{ "create ENOENT", "op=openat,err=ENOENT,name=.ckptfs.t", ENOENT, W_TEMP, false },
	{ "write EROFS", "op=pwrite,err=EROFS", EROFS, W_TEMP, false },
	{ "rename ENAMETOOLONG", "op=rename,err=ENAMETOOLONG,name=shard0", ENAMETOOLONG, W_RENAME, false },
	{ "rename EPERM", "op=rename,err=EPERM,name=shard0", EPERM, W_RENAME, false },
	{ "unlink EPERM", "op=unlink,err=EPERM,name=shard0", EPERM, W_UNLINK, false },
	{ "unlink EACCES", "op=unlink,err=EACCES,name=shard0", EACCES, W_UNLINK, false },
};

#define SHARD (300 * KiB + 7)

/* Write text to path; close's result (-errno or 0). */
static int put_text(const char *path, const char *text)
{
	int fd = CHECK_SYS(open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644));
	size_t n = strlen(text);
	if (write(fd, text, n) != (ssize_t)n)
		FAILF("write %s: %s", path, strerror(errno));
	return close(fd) < 0 ? -errno : 0;
}

/* Write a seeded shard; close's result. */
static int put_shard(const char *path, uint64_t seed)
{
	char *buf = malloc(SHARD);
	fill_pattern(buf, SHARD, seed, 0);
	int fd = CHECK_SYS(open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644));
	for (size_t done = 0; done < SHARD;)
		done += (size_t)CHECK_SYS(write(fd, buf + done, SHARD - done));
	free(buf);
	return close(fd) < 0 ? -errno : 0;
}

static int fsync_path(const char *path)
{
	int fd = CHECK_SYS(open(path, O_RDONLY)), r = fsync(fd) < 0 ? -errno : 0;
	close(fd);
	return r;
}

/* The backend tree (files: content hash; dirs), as one sorted text. */
static void tree_walk(const char *root, const char *rel, struct text *out)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s%s%s", root, *rel ? "/" : "", rel);
	DIR *d = opendir(path);
	if (!d)
		FAILF("opendir %s: %s", path, strerror(errno));
	char *names[256];
	size_t n = 0;
	for (struct dirent *de; (de = readdir(d));) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    !strncmp(de->d_name, ".ckptfs", 7))
			continue;
		if (n < 256)
			names[n++] = strdup(de->d_name);
	}
	closedir(d);
	qsort(names, n, sizeof(*names), cmp_names);
	for (size_t i = 0; i < n; i++) {
		char sub[PATH_MAX], full[2 * PATH_MAX];
		struct stat st;
		snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "", names[i]);
		snprintf(full, sizeof(full), "%s/%s", root, sub);
		CHECK_SYS(lstat(full, &st));
		if (S_ISDIR(st.st_mode)) {
			add(out, "%s/\n", sub);
			tree_walk(root, sub, out);
		} else {
			size_t len;
			char *data = read_file(full, &len);
			add(out, "%s %zu %016llx\n", sub, len,
			       (unsigned long long)XXH3_64bits(data, len));
			free(data);
		}
		free(names[i]);
	}
}

static char *tree(const char *root)
{
	struct text b = { 0 };
	tree_walk(root, "", &b);
	return b.s ? b.s : strdup("");
}

static void expect_tree(const char *root, const char *want, const char *what)
{
	char *got = tree(root);
	if (strcmp(got, want))
		FAILF("%s: the backend holds\n%s\nexpected\n%s", what, got, want);
	free(got);
}

/* ---- the stream ---- */

static void phase1(struct tmount *m)
{
	CHECK_SYS(mkdir(tm_path(m, "step1"), 0755));
	ASSERT_EQ(put_shard(tm_path(m, "step1/shard0"), 10), 0);
	ASSERT_EQ(put_shard(tm_path(m, "step1/shard1"), 11), 0);
	ASSERT_EQ(put_text(tm_path(m, "latest"), "step1"), 0);
	ASSERT_EQ(fsync_path(tm_path(m, "latest")), 0);
}

/*
 * The second checkpoint, then the old one deleted.  Returns fsync(latest).
 * snap[w] gets the mount's tree right before the operation case w refuses.
 */
static int phase2(struct tmount *m, char *snap[4])
{
	snap[W_MKDIR] = tree(m->mnt);
	CHECK_SYS(mkdir(tm_path(m, "step2"), 0755));
	snap[W_TEMP] = tree(m->mnt);
	snap[W_RENAME] = strdup(snap[W_TEMP]);
	put_shard(tm_path(m, "step2/shard0"), 20);	/* close may already know */
	put_shard(tm_path(m, "step2/shard1"), 21);
	put_text(tm_path(m, "latest"), "step2");
	snap[W_UNLINK] = tree(m->mnt);
	CHECK_SYS(unlink(tm_path(m, "step1/shard0")));
	CHECK_SYS(unlink(tm_path(m, "step1/shard1")));
	CHECK_SYS(rmdir(tm_path(m, "step1")));
	return fsync_path(tm_path(m, "latest"));
}

static void ctl(struct ct_result *r, struct tmount *m, const char *cmd, const char *a1, const char *a2)
{
	ct_run(r, (const char *[]){ ct_tool("ckptfs-ctl"), cmd, m->mnt, a1, a2, NULL });
}

static void run_case(const struct pcase *c)
{
	struct tmount m;
	char flag[PATH_MAX];
	struct ct_result r;
	struct json_obj s;
	uint64_t t0 = mono_ms();

	ct_mount_flagged(&m, "ctl-permanent", c->rule, flag);
	phase1(&m);
	char *snap[4];
	ct_touch(flag);
	int res = phase2(&m, snap);
	if (res != -c->err)
		FAILF("[%s] fsync of latest returned %s, expected %s", c->name,
		      res ? strerror(-res) : "success", strerror(c->err));

	/* The backend stops right before the refused operation (P1, P4). */
	const char *want = snap[c->where];
	expect_tree(m.backend, want, c->name);

	/* Its user's next close reports it too (P4). */
	int later = put_text(tm_path(&m, "later"), "x");
	if (later != -c->err)
		FAILF("[%s] close of a file written after the failure returned %s, expected %s",
		      c->name, later ? strerror(-later) : "success", strerror(c->err));

	/* Visible: stats, the file's state, drain. */
	ct_stats(&m, &s);
	ASSERT_STR_EQ(ct_str(&s, "backend_state"), "blocked");
	ct_expect_in(ct_str(&s, "blocked"), strerror(c->err), "stats' blocked");
	ct_expect_in(ct_str(&s, "blocked"), c->where == W_MKDIR ? "mkdir step2" :
		     c->where == W_UNLINK ? "unlink step1/shard0" : "step2/shard0", "stats' blocked");
	ASSERT_TRUE(ct_num(&s, "blocked_seq") > 0);
	json_free(&s);
	char v[64];
	ASSERT_TRUE(ct_getxattr(tm_path(&m, "later"), "user.ckptfs.state", v, sizeof(v)) > 0);
	ASSERT_STR_EQ(v, "blocked");
	ctl(&r, &m, "drain", "--timeout", "5");
	ct_expect_status(&r, 1, "ckptfs-ctl drain while blocked");
	ct_expect_in(r.err, "blocked at seq", "ckptfs-ctl drain");
	ct_expect_in(r.err, strerror(c->err), "ckptfs-ctl drain");
	ct_result_free(&r);
	size_t loglen;
	char *log = read_file(m.log, &loglen);
	ASSERT_TRUE(log != NULL);
	ct_expect_in(log, "retrying slowly: fix the cause", "the daemon log (a permanent class)");
	free(log);

	/* Retried slowly, never skipped: still exactly there after a retry. */
	usleep(2500 * 1000);
	expect_tree(m.backend, want, c->name);
	ct_stats(&m, &s);
	ASSERT_TRUE(ct_num(&s, "backend_retries") >= 1);
	json_free(&s);

	/* The cause goes: everything is published. */
	CHECK_SYS(unlink(flag));
	if (!c->self_retry) {
		ctl(&r, &m, "retry", NULL, NULL);
		ct_expect_status(&r, 0, "ckptfs-ctl retry");
		ct_result_free(&r);
	} else {
		/* Until its next slow retry, drain still fails naming it; then it goes. */
		bool blocked = true;
		for (uint64_t w0 = mono_ms(); blocked; usleep(200 * 1000)) {
			if (mono_ms() - w0 > 30000)
				FAILF("[%s] still blocked 30 s after the cause went", c->name);
			ct_stats(&m, &s);
			blocked = !strcmp(ct_str(&s, "backend_state"), "blocked");
			json_free(&s);
		}
	}
	ctl(&r, &m, "drain", "--timeout", "30");
	ct_expect_status(&r, 0, "ckptfs-ctl drain after the cause went");
	ct_result_free(&r);
	char *mt = tree(m.mnt);
	expect_tree(m.backend, mt, c->name);
	free(mt);
	ct_stats(&m, &s);
	ASSERT_STR_EQ(ct_str(&s, "backend_state"), "ok");
	ASSERT_EQ(ct_num(&s, "blocked_ops"), 0);
	json_free(&s);
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "verify", m.backend, NULL });
	ct_expect_status(&r, 0, "ckptfs-ctl verify");
	ct_result_free(&r);
	tm_stop(&m);
	tm_cleanup(&m);
	for (int i = 0; i < 4; i++)
		free(snap[i]);
	fprintf(stderr, "%-22s ok (%.1f s)\n", c->name, (double)(mono_ms() - t0) / 1e3);
}

/* The backend's path holds exactly the shard of `seed`. */
static void expect_backend_shard(struct tmount *m, const char *rel, uint64_t seed)
{
	size_t len;
	char *want = malloc(SHARD), *got = read_file(tm_bpath(m, rel), &len);
	fill_pattern(want, SHARD, seed, 0);
	if (!got)
		FAILF("the backend lost %s", rel);
	if (len != SHARD || memcmp(got, want, SHARD))
		FAILF("the backend's %s: %zu bytes, not the %zu of seed %llu", rel, len, (size_t)SHARD,
		      (unsigned long long)seed);
	free(got);
	free(want);
}

static void expect_backend_text(struct tmount *m, const char *rel, const char *text)
{
	size_t len;
	char *got = read_file(tm_bpath(m, rel), &len);
	if (!got || len != strlen(text) || memcmp(got, text, len))
		FAILF("the backend's %s holds \"%.*s\", expected \"%s\"", rel, got ? (int)len : 6,
		      got ? got : "(none)", text);
	free(got);
}

/* latest -> step, written as frameworks do: a temporary file, then a rename; close's result. */
static int put_latest(struct tmount *m, const char *step)
{
	int r = put_text(tm_path(m, "latest.tmp"), step);
	CHECK_SYS(rename(tm_path(m, "latest.tmp"), tm_path(m, "latest")));
	return r;
}

/* skip: the refused mkdir, its shards and the later marker go, step1 stays; the rest goes on. */
static void skip_case(void)
{
	struct tmount m;
	char flag[PATH_MAX], seq[32];
	struct ct_result r;

	char *snap[4];
	ct_mount_flagged(&m, "ctl-skip", "op=mkdir,err=EACCES,name=step2", flag);
	phase1(&m);
	ct_touch(flag);
	ASSERT_EQ(phase2(&m, snap), -EACCES);
	put_text(tm_path(&m, "notes.txt"), "unrelated");	/* behind it: same user */
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "notes.txt")));

	ctl(&r, &m, "skip", "12345", NULL);
	ct_expect_status(&r, 1, "ckptfs-ctl skip of an unknown operation");
	ct_result_free(&r);
	ct_blocked_seq(&m, seq);
	ctl(&r, &m, "skip", seq, NULL);
	ct_expect_status(&r, 0, "ckptfs-ctl skip");
	ct_expect_in(r.out, "mkdir step2", "skip's report");
	ct_expect_in(r.out, "step2/shard0", "skip's report");
	ct_expect_in(r.out, "latest", "skip's report");
	ct_expect_in(r.out, "(kept on the backend) seq", "skip's report");
	ct_result_free(&r);

	ctl(&r, &m, "drain", "--timeout", "30");
	ct_expect_status(&r, 0, "ckptfs-ctl drain after skip");
	ct_result_free(&r);
	/* notes published; latest still names step1, which is kept whole; nothing of step2. */
	ASSERT_TRUE(file_exists(tm_bpath(&m, "notes.txt")));
	expect_backend_shard(&m, "step1/shard0", 10);
	expect_backend_shard(&m, "step1/shard1", 11);
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "step2")));
	size_t len;
	char *latest = read_file(tm_bpath(&m, "latest"), &len);
	ASSERT_TRUE(latest && len == 5 && !memcmp(latest, "step1", 5));
	free(latest);
	/* The skipped shard's version is gone: its fsync says so. */
	ASSERT_EQ(fsync_path(tm_path(&m, "step2/shard0")), -ECANCELED);
	ct_run(&r, (const char *[]){ "sh", "-c", "cat \"$0\"/.ckptfs/nodes/*/manifest.log", m.backend, NULL });
	ct_expect_in(r.out, "skipped by the administrator", "the manifest");
	ct_result_free(&r);
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "verify", m.backend, NULL });
	ct_expect_status(&r, 0, "ckptfs-ctl verify after skip");
	ct_result_free(&r);
	for (int i = 0; i < 4; i++)
		free(snap[i]);
	CHECK_SYS(unlink(flag));
	tm_stop(&m);
	tm_cleanup(&m);
	fprintf(stderr, "%-22s ok\n", "skip with dependants");
}

/*
 * skip in a rotation (P4): step2's shard refused, latest -> step2 written,
 * step1 deleted (unlinks, rmdir) behind it, and the administrator skips the
 * shard.  The marker goes with it, so latest still names step1 on the
 * backend; step1's removals go too, so step1 stays there whole.  A removal
 * made after the skip, before the user's next marker, is kept as well;
 * step1 made again and a shard written there replaces the kept one.
 * Then step3 and latest -> step3, and step2 deleted after that marker:
 * published as usual, nothing blocked.
 */
static void skip_rotation_case(void)
{
	struct tmount m;
	char flag[PATH_MAX], seq[32];
	struct ct_result r;
	struct json_obj s;

	ct_mount_flagged(&m, "ctl-skip-rot", "op=rename,err=EPERM,name=shard0", flag);
	phase1(&m);
	ASSERT_EQ(put_text(tm_path(&m, "notes.txt"), "old notes"), 0);
	ctl(&r, &m, "drain", "--timeout", "30");
	ct_expect_status(&r, 0, "ckptfs-ctl drain of step1");
	ct_result_free(&r);
	expect_backend_text(&m, "latest", "step1");

	ct_touch(flag);
	CHECK_SYS(mkdir(tm_path(&m, "step2"), 0755));
	put_shard(tm_path(&m, "step2/shard0"), 20);	/* its publishing rename is refused */
	put_shard(tm_path(&m, "step2/shard1"), 21);
	put_latest(&m, "step2");	/* close may already know */
	CHECK_SYS(unlink(tm_path(&m, "step1/shard0")));
	CHECK_SYS(unlink(tm_path(&m, "step1/shard1")));
	CHECK_SYS(rmdir(tm_path(&m, "step1")));
	ASSERT_EQ(fsync_path(tm_path(&m, "latest")), -EPERM);
	expect_backend_shard(&m, "step1/shard0", 10);	/* blocked: nothing after it */

	ct_blocked_seq(&m, seq);
	ctl(&r, &m, "skip", seq, NULL);
	ct_expect_status(&r, 0, "ckptfs-ctl skip");
	ct_expect_in(r.out, "step2/shard0", "skip's report");
	ct_expect_in(r.out, "latest", "skip's report");
	ct_expect_in(r.out, "(kept on the backend) seq", "skip's report");
	ct_expect_in(r.out, "step1/shard1", "skip's report");
	ct_expect_in(r.out, "rmdir step1", "skip's report");
	ct_result_free(&r);
	CHECK_SYS(unlink(flag));
	/* The trainer goes on removing before its next marker: kept too. */
	CHECK_SYS(unlink(tm_path(&m, "notes.txt")));

	ctl(&r, &m, "drain", "--timeout", "30");
	ct_expect_status(&r, 0, "ckptfs-ctl drain after skip");
	ct_result_free(&r);
	/* latest names step1, and step1 is whole: a complete checkpoint is left. */
	expect_backend_text(&m, "latest", "step1");
	expect_backend_shard(&m, "step1/shard0", 10);
	expect_backend_shard(&m, "step1/shard1", 11);
	expect_backend_text(&m, "notes.txt", "old notes");
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "step2/shard0")));
	ct_run(&r, (const char *[]){ "sh", "-c", "cat \"$0\"/.ckptfs/nodes/*/manifest.log", m.backend, NULL });
	ct_expect_in(r.out, "kept on the backend", "the manifest");
	ct_result_free(&r);
	/* Made again at a kept name: published over what was kept (the mount may show it again). */
	if (mkdir(tm_path(&m, "step1"), 0755) < 0 && errno != EEXIST)
		FAILF("mkdir step1 again: %s", strerror(errno));
	ASSERT_EQ(put_shard(tm_path(&m, "step1/shard0"), 40), 0);

	/* The next checkpoint, then the broken one removed after its marker. */
	CHECK_SYS(mkdir(tm_path(&m, "step3"), 0755));
	ASSERT_EQ(put_shard(tm_path(&m, "step3/shard0"), 30), 0);
	ASSERT_EQ(put_shard(tm_path(&m, "step3/shard1"), 31), 0);
	ASSERT_EQ(put_latest(&m, "step3"), 0);
	if (unlink(tm_path(&m, "step2/shard0")) < 0 && errno != ENOENT)
		FAILF("unlink step2/shard0: %s", strerror(errno));
	CHECK_SYS(unlink(tm_path(&m, "step2/shard1")));
	CHECK_SYS(rmdir(tm_path(&m, "step2")));
	ASSERT_EQ(put_text(tm_path(&m, "notes.txt"), "new notes"), 0);	/* made again: published */
	ctl(&r, &m, "drain", "--timeout", "30");
	ct_expect_status(&r, 0, "ckptfs-ctl drain after step3");
	ct_result_free(&r);
	expect_backend_text(&m, "latest", "step3");
	expect_backend_shard(&m, "step3/shard0", 30);
	expect_backend_shard(&m, "step3/shard1", 31);
	expect_backend_text(&m, "notes.txt", "new notes");
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "step2")));
	expect_backend_shard(&m, "step1/shard0", 40);
	expect_backend_shard(&m, "step1/shard1", 11);	/* kept: the administrator's to remove */
	ct_stats(&m, &s);
	ASSERT_STR_EQ(ct_str(&s, "backend_state"), "ok");
	json_free(&s);
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "verify", m.backend, NULL });
	ct_expect_status(&r, 0, "ckptfs-ctl verify after the rotation");
	ct_result_free(&r);
	/*
	 * The next rotation removes step1, the kept file with it: the mount
	 * lists it again, so an rmdir of step1 alone is refused at once
	 * (ENOTEMPTY), not blocked on the backend.  (Listed once attr_timeout,
	 * 1 s, has passed since the mount last looked.)
	 */
	usleep(1200 * 1000);
	CHECK_SYS(unlink(tm_path(&m, "step1/shard0")));
	if (rmdir(tm_path(&m, "step1")) == 0 || errno != ENOTEMPTY)
		FAILF("rmdir step1 holding the kept shard1: %s", strerror(errno));
	ct_run(&r, (const char *[]){ "rm", "-rf", tm_path(&m, "step1"), NULL });
	ct_expect_status(&r, 0, "rm -rf step1 (kept files in it)");
	ct_result_free(&r);
	ctl(&r, &m, "drain", "--timeout", "30");
	ct_expect_status(&r, 0, "ckptfs-ctl drain after step1's removal");
	ct_result_free(&r);
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "step1")));
	tm_stop(&m);
	tm_cleanup(&m);
	fprintf(stderr, "%-22s ok\n", "skip in a rotation");
}

/* drain leaves out a file still open for writing, and says so (contract 4). */
static void open_file_case(void)
{
	struct tmount m;
	struct ct_result r;

	tm_start(&m, "ctl-drain-open", NULL, NULL);
	ASSERT_EQ(put_text(tm_path(&m, "done"), "closed"), 0);
	int fd = CHECK_SYS(open(tm_path(&m, "open.bin"), O_CREAT | O_WRONLY, 0644));
	char buf[65536];
	memset(buf, 'x', sizeof(buf));
	CHECK_SYS(write(fd, buf, sizeof(buf)));
	ctl(&r, &m, "drain", "--timeout", "20");
	ct_expect_status(&r, 0, "ckptfs-ctl drain with a file open");
	ct_expect_in(r.out, "1 file open for writing, not included", "ckptfs-ctl drain");
	ct_result_free(&r);
	ASSERT_TRUE(file_exists(tm_bpath(&m, "done")));
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "open.bin")));
	/* ctl sync leaves it out too. */
	struct json_obj a;
	ct_exchange(&m, "ctl", "sync\n", &a);
	ASSERT_EQ(ct_num(&a, "open_for_writing"), 1);
	json_free(&a);
	usleep(300 * 1000);
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "open.bin")));
	CHECK_SYS(close(fd));
	ctl(&r, &m, "drain", "--timeout", "20");
	ct_expect_status(&r, 0, "ckptfs-ctl drain after close");
	ASSERT_TRUE(strstr(r.out, "open for writing") == NULL);
	ct_result_free(&r);
	ASSERT_TRUE(file_exists(tm_bpath(&m, "open.bin")));
	tm_stop(&m);
	tm_cleanup(&m);
	fprintf(stderr, "%-22s ok\n", "drain with an open file");
}

int main(void)
{
	const char *only = getenv("CKPTFS_PERM_CASE");

	tm_require_fuse();
	for (size_t i = 0; i < CKPT_ARRAY_LEN_TM(cases); i++)
		if (!only || strstr(cases[i].name, only))
			run_case(&cases[i]);
	if (!only || strstr("skip", only))
		skip_case();
	if (!only || strstr("skip_rotation", only))
		skip_rotation_case();
	if (!only || strstr("open", only))
		open_file_case();
	return 0;
}
