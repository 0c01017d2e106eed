/*
 * lesser.c — the lesser steps of a publication fail loudly (P3, P4): what
 * is reported durable carries everything it should, and what is on the
 * backend in part is never skipped as if it were not there.
 *
 *   xattrs   a file with a user xattr is rewritten while the backend's
 *            setxattr fails (EIO): its new version is not durable (fsync
 *            fails, the state is "blocked"), and once setxattr works again
 *            it is published with its xattr.
 *   xsync    a new version's xattrs are set after its data sync, so the
 *            file is synced again before it is published (btrfs logs a
 *            renamed file's xattrs only then): with that fsync failing
 *            (EIO) a rewritten file with a user xattr is not durable and
 *            the backend keeps the old version, while a file without
 *            xattrs publishes; stats count the syncs.
 *   xmany    more xattrs than a 4 KiB name list and a 20,000-byte value
 *            (on a tmpfs backend, which takes them): a file rewritten
 *            after a remount, its xattrs never read through the mount,
 *            keeps all of them on the backend, and listxattr through the
 *            mount lists them all (the backend's set was read in full).
 *   xdrop    an xattr the backend's file system does not support
 *            (EOPNOTSUPP), set on its own or carried by a new version:
 *            left out, counted (xattrs_dropped) and logged, and the file is
 *            durable (it used to block every later operation of its user
 *            for good when set on its own); once supported, set again.
 *   skipempty an empty file's version refused (EACCES) and skipped by the
 *            administrator: its version is let go like any other (it was
 *            freed while still listed as the file's, and the file's next
 *            version never read durable); the next one is published.
 *   deep     a manifest record holds a path of 4095 bytes: a 21st
 *            directory of 200-byte names is refused at mkdir
 *            (ENAMETOOLONG); a file at the 20th is published; once two
 *            directories above it are renamed longer, its next version is
 *            refused at publication (ENAMETOOLONG, blocked, its fsync says
 *            so) instead of applied with no record; skip gives up.
 *   sync     a chmod is applied, but the file cannot be opened for its
 *            fsync (openat EIO): fsync and drain fail instead of saying
 *            durable; then they succeed.
 *   unread   a chmod is applied, and the file cannot be opened for its
 *            fsync for want of permission (openat EACCES, as a daemon not
 *            run by root meets after `chmod a-r`): the whole backend file
 *            system is synced instead, so fsync and drain succeed and
 *            another file is published (before: every user's publication
 *            stalled behind the retried open, with nothing to skip).
 *   relink   a hard-linked file is rewritten; its own name takes the new
 *            version but its other name's relink is refused (EACCES):
 *            `ckptfs-ctl skip` of that version is refused (it is on the
 *            backend in part, so it can only be finished), retry finishes
 *            it: both names hold the new bytes.
 */
#include "tests/ctl/ctl_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

static int fsync_path(const char *path)
{
	int fd = open(path, O_RDONLY), r;

	if (fd < 0)
		return -errno;
	r = fsync(fd) < 0 ? -errno : 0;
	close(fd);
	return r;
}

static void ctl(struct ct_result *r, struct tmount *m, const char *cmd, const char *a1, const char *a2)
{
	ct_run(r, (const char *[]){ ct_tool("ckptfs-ctl"), cmd, m->mnt, a1, a2, NULL });
}

static void xattrs_case(void)
{
	struct tmount m;
	char flag[PATH_MAX], v[64];

	ct_mount_flagged(&m, "lesser-xattr", "op=setxattr,err=EIO", flag);
	ct_write_seeded(tm_path(&m, "f"), 100000, 1);
	CHECK_SYS(setxattr(tm_path(&m, "f"), "user.tag", "keep", 4, 0));
	ASSERT_EQ(fsync_path(tm_path(&m, "f")), 0);
	ct_touch(flag);
	ct_write_seeded(tm_path(&m, "f"), 100000, 2);	/* a new version: carries user.tag */
	ASSERT_EQ(fsync_path(tm_path(&m, "f")), -EIO);
	ASSERT_TRUE(ct_wait_state(tm_path(&m, "f"), "blocked", 5000));
	ct_check_seeded(tm_bpath(&m, "f"), 100000, 1);	/* the old one, whole */
	unlink(flag);
	struct ct_result r;
	ctl(&r, &m, "retry", NULL, NULL);
	ct_result_free(&r);
	ASSERT_EQ(fsync_path(tm_path(&m, "f")), 0);
	ct_check_seeded(tm_bpath(&m, "f"), 100000, 2);
	ASSERT_EQ(getxattr(tm_bpath(&m, "f"), "user.tag", v, sizeof(v)), 4);
	ASSERT_TRUE(!memcmp(v, "keep", 4));
	tm_stop(&m);
	tm_cleanup(&m);
	printf("xattrs: setxattr EIO -> not durable (EIO, blocked); published with its xattr after\n");
}

static void xattr_sync_case(void)
{
	struct tmount m;
	char flag[PATH_MAX], v[64];
	struct ct_result r;

	ct_mount_flagged(&m, "lesser-xsync", "op=fsync,err=EIO,name=.ckptfs.", flag);
	ct_write_seeded(tm_path(&m, "f"), 100000, 1);
	CHECK_SYS(setxattr(tm_path(&m, "f"), "user.tag", "keep", 4, 0));
	ASSERT_EQ(fsync_path(tm_path(&m, "f")), 0);
	ASSERT_EQ(ct_stat(&m, "xattr_fsyncs"), 0);	/* that version had none yet */
	ct_touch(flag);
	ct_write_seeded(tm_path(&m, "plain"), 100000, 3);	/* no xattrs: no second sync */
	ASSERT_EQ(fsync_path(tm_path(&m, "plain")), 0);
	ct_check_seeded(tm_bpath(&m, "plain"), 100000, 3);
	ct_write_seeded(tm_path(&m, "f"), 100000, 2);	/* carries user.tag */
	ASSERT_EQ(fsync_path(tm_path(&m, "f")), -EIO);
	ASSERT_TRUE(ct_wait_state(tm_path(&m, "f"), "blocked", 5000));
	ct_check_seeded(tm_bpath(&m, "f"), 100000, 1);	/* the old one, whole */
	unlink(flag);
	ctl(&r, &m, "retry", NULL, NULL);
	ct_result_free(&r);
	ASSERT_EQ(fsync_path(tm_path(&m, "f")), 0);
	ct_check_seeded(tm_bpath(&m, "f"), 100000, 2);
	ASSERT_EQ(getxattr(tm_bpath(&m, "f"), "user.tag", v, sizeof(v)), 4);
	ASSERT_TRUE(!memcmp(v, "keep", 4));
	ASSERT_TRUE(ct_stat(&m, "xattr_fsyncs") >= 1);
	tm_stop(&m);
	tm_cleanup(&m);
	printf("xsync: the xattrs' fsync fails -> not durable, old version kept; published after\n");
}

#define XMANY 300
#define XBIG 20000

static void xattr_many_case(void)
{
	struct tmount m;
	char key[64], *big = malloc(XBIG), *got = malloc(XBIG + 1), *names = malloc(65536);
	const char *tmp = getenv("TMPDIR");
	char *saved = tmp ? strdup(tmp) : NULL;

	setenv("TMPDIR", "/dev/shm", 1);	/* ext4 keeps an inode's xattrs in one block */
	tm_init(&m, "lesser-xmany");
	if (saved)
		setenv("TMPDIR", saved, 1);
	else
		unsetenv("TMPDIR");
	free(saved);
	if (setxattr(m.backend, "user.probe", "1", 1, 0) < 0) {
		printf("xmany: skipped: /dev/shm takes no user xattrs (%s)\n", strerror(errno));
		tm_cleanup(&m);
		goto out;
	}
	removexattr(m.backend, "user.probe");
	tm_mount(&m, NULL, NULL);
	ct_write_seeded(tm_path(&m, "f"), 100000, 1);
	for (int i = 0; i < XMANY; i++) {
		snprintf(key, sizeof(key), "user.a_rather_long_key_name_%04d", i);
		CHECK_SYS(setxattr(tm_path(&m, "f"), key, key + 5, strlen(key + 5), 0));
	}
	fill_pattern(big, XBIG, 9, 0);
	CHECK_SYS(setxattr(tm_path(&m, "f"), "user.big", big, XBIG, 0));
	tm_stop(&m);
	ASSERT_EQ(getxattr(tm_bpath(&m, "f"), "user.big", got, XBIG + 1), XBIG);

	/* Remounted: the file's xattrs are not in memory; a rewrite copies them. */
	tm_mount(&m, NULL, NULL);
	ct_write_seeded(tm_path(&m, "f"), 100000, 2);
	ASSERT_EQ(fsync_path(tm_path(&m, "f")), 0);
	ct_check_seeded(tm_bpath(&m, "f"), 100000, 2);
	ssize_t n = CHECK_SYS(listxattr(tm_bpath(&m, "f"), names, 65536));
	int count = 0;
	for (ssize_t off = 0; off < n; off += (ssize_t)strlen(names + off) + 1)
		count += !strncmp(names + off, "user.", 5);
	ASSERT_EQ(count, XMANY + 1);
	ASSERT_EQ(getxattr(tm_bpath(&m, "f"), "user.big", got, XBIG + 1), XBIG);
	ASSERT_TRUE(!memcmp(got, big, XBIG));
	ASSERT_EQ(getxattr(tm_bpath(&m, "f"), "user.a_rather_long_key_name_0299", got, 64), 27);

	/* Remounted again: listed through the mount, read from the backend in full. */
	tm_stop(&m);
	tm_mount(&m, NULL, NULL);
	n = CHECK_SYS(listxattr(tm_path(&m, "f"), names, 65536));
	count = 0;
	for (ssize_t off = 0; off < n; off += (ssize_t)strlen(names + off) + 1)
		count += !strncmp(names + off, "user.", 5) && strncmp(names + off, "user.ckptfs.", 12);
	ASSERT_EQ(count, XMANY + 1);
	ASSERT_EQ(getxattr(tm_path(&m, "f"), "user.big", got, XBIG + 1), XBIG);
	ASSERT_TRUE(!memcmp(got, big, XBIG));
	tm_stop(&m);
	tm_cleanup(&m);
	printf("xmany: %d xattrs and a %d-byte value survive a rewrite after a remount\n", XMANY + 1, XBIG);
out:
	free(big);
	free(got);
	free(names);
}

static void xattr_drop_case(void)
{
	struct tmount m;
	char flag[PATH_MAX], v[64];

	ct_mount_flagged(&m, "lesser-xdrop", "op=setxattr,err=EOPNOTSUPP", flag);
	ct_write_seeded(tm_path(&m, "f"), 100000, 1);
	CHECK_SYS(setxattr(tm_path(&m, "f"), "user.a", "1", 1, 0));
	ASSERT_EQ(fsync_path(tm_path(&m, "f")), 0);
	ct_touch(flag);
	CHECK_SYS(setxattr(tm_path(&m, "f"), "user.b", "2", 1, 0));	/* on its own */
	ASSERT_EQ(fsync_path(tm_path(&m, "f")), 0);
	ASSERT_EQ(ct_stat(&m, "xattrs_dropped"), 1);
	ct_write_seeded(tm_path(&m, "f"), 100000, 2);	/* a version carrying user.a and user.b */
	ASSERT_EQ(fsync_path(tm_path(&m, "f")), 0);
	ct_check_seeded(tm_bpath(&m, "f"), 100000, 2);
	ASSERT_EQ(ct_stat(&m, "xattrs_dropped"), 3);
	size_t len;
	char *log = read_file(m.log, &len);
	ASSERT_TRUE(log && strstr(log, "extended attribute 'user.b' left out"));
	free(log);
	unlink(flag);
	CHECK_SYS(setxattr(tm_path(&m, "f"), "user.c", "3", 1, 0));
	ASSERT_EQ(fsync_path(tm_path(&m, "f")), 0);
	ASSERT_EQ(getxattr(tm_bpath(&m, "f"), "user.c", v, sizeof(v)), 1);
	ASSERT_EQ(ct_getxattr(tm_path(&m, "f"), "user.b", v, sizeof(v)), 1);	/* the mount keeps it */
	tm_stop(&m);
	tm_cleanup(&m);
	printf("xdrop: xattrs the backend does not support left out, counted and logged; the "
	       "file durable\n");
}

static void skip_empty_case(void)
{
	struct tmount m;
	char flag[PATH_MAX], seq[32];
	struct ct_result r;

	ct_mount_flagged(&m, "lesser-skipempty", "op=rename,err=EACCES,name=emptyf", flag);
	ct_touch(flag);
	write_file(tm_path(&m, "emptyf"), "", 0);
	ASSERT_EQ(fsync_path(tm_path(&m, "emptyf")), -EACCES);
	ct_blocked_seq(&m, seq);
	ctl(&r, &m, "skip", seq, NULL);
	ct_expect_status(&r, 0, "skip of an empty file's version");
	ct_result_free(&r);
	unlink(flag);
	int fd = CHECK_SYS(open(tm_path(&m, "emptyf"), O_WRONLY | O_TRUNC));
	ASSERT_EQ(write(fd, "now\n", 4), 4);
	close(fd);	/* may still say the skipped version's ECANCELED */
	int e = -1;
	for (uint64_t t0 = mono_ms(); e && mono_ms() - t0 < 5000; usleep(50 * 1000))
		e = fsync_path(tm_path(&m, "emptyf"));
	ASSERT_EQ(e, 0);
	if (!ct_wait_state(tm_path(&m, "emptyf"), "durable", 5000))
		FAILF("%s", "the file's next version never reads durable after its empty one was skipped");
	size_t len;
	char *got = read_file(tm_bpath(&m, "emptyf"), &len);
	ASSERT_TRUE(got && len == 4 && !memcmp(got, "now\n", 4));
	free(got);
	tm_stop(&m);
	tm_cleanup(&m);
	printf("skipempty: an empty file's skipped version let go; the next one durable\n");
}

#define DEEP 20
#define DEEP_NAME 200

static void deep_case(void)
{
	struct tmount m;
	char name[DEEP_NAME + 1], longer[256], seq[32];
	struct ct_result r;

	tm_start(&m, "lesser-deep", NULL, NULL);
	memset(name, 'd', DEEP_NAME);
	name[DEEP_NAME] = '\0';
	memset(longer, 'e', 255);
	longer[255] = '\0';
	int top = CHECK_SYS(open(m.mnt, O_RDONLY | O_DIRECTORY));
	int fd = dup(top), lvl1 = -1;
	for (int i = 0; i < DEEP; i++) {
		CHECK_SYS(mkdirat(fd, name, 0755));
		int next = CHECK_SYS(openat(fd, name, O_RDONLY | O_DIRECTORY));
		if (i == 0)
			lvl1 = dup(next);
		close(fd);
		fd = next;
	}
	/* 20 levels make 4019 bytes; a 21st would not fit: refused at once. */
	ASSERT_EQ(mkdirat(fd, name, 0755), -1);
	ASSERT_EQ(errno, ENAMETOOLONG);
	int f = CHECK_SYS(openat(fd, "shard", O_WRONLY | O_CREAT | O_TRUNC, 0644));
	ASSERT_EQ(write(f, "deep", 4), 4);
	ASSERT_EQ(fsync(f), 0);
	close(f);
	/* Two directories above it renamed longer: its path passes the limit. */
	CHECK_SYS(renameat(top, name, top, longer));
	CHECK_SYS(renameat(lvl1, name, lvl1, longer));
	f = CHECK_SYS(openat(fd, "shard", O_WRONLY | O_TRUNC));
	ASSERT_EQ(write(f, "again", 5), 5);
	int e = fsync(f) < 0 ? errno : 0;
	close(f);
	close(fd);
	close(lvl1);
	close(top);
	if (e != ENAMETOOLONG)
		FAILF("fsync of a file whose path no longer fits a record: %s, expected "
		      "ENAMETOOLONG", e ? strerror(e) : "0 (durable, with no record of its path)");
	ct_blocked_seq(&m, seq);
	ctl(&r, &m, "skip", seq, NULL);
	ct_expect_status(&r, 0, "skip of the operation whose path does not fit");
	ct_result_free(&r);
	tm_stop(&m);
	tm_cleanup(&m);
	printf("deep: a name past a record's path length refused at mkdir; a version past it "
	       "(directories above renamed longer) refused at publication, not applied "
	       "unrecorded\n");
}

/* A durable file `victim`; then its opens fail (rule, while flag) and it is chmod-ed to mode. */
static void chmod_unopenable(struct tmount *m, const char *name, const char *rule,
			     char flag[PATH_MAX], mode_t mode)
{
	ct_mount_flagged(m, name, rule, flag);
	ct_write_seeded(tm_path(m, "victim"), 4096, 3);
	ASSERT_EQ(fsync_path(tm_path(m, "victim")), 0);
	ct_touch(flag);
	CHECK_SYS(chmod(tm_path(m, "victim"), mode));
}

static void sync_case(void)
{
	struct tmount m;
	char flag[PATH_MAX];
	struct stat st;

	chmod_unopenable(&m, "lesser-sync", "op=openat,err=EIO,name=victim", flag, 0600);
	/* Applied by name; its fsync needs the file open, which fails. */
	ASSERT_EQ(fsync_path(tm_path(&m, "victim")), -EIO);
	struct ct_result r;
	ctl(&r, &m, "drain", "--timeout", "2");
	ct_expect_status(&r, 1, "drain while the file cannot be synced");
	ct_result_free(&r);
	unlink(flag);
	int e = -EIO;	/* the sync is retried with backoff (at most 5 s apart) */
	for (uint64_t t0 = mono_ms(); e && mono_ms() - t0 < 15000; usleep(100000))
		e = fsync_path(tm_path(&m, "victim"));
	ASSERT_EQ(e, 0);
	CHECK_SYS(stat(tm_bpath(&m, "victim"), &st));
	ASSERT_EQ(st.st_mode & 07777, 0600);
	tm_stop(&m);
	tm_cleanup(&m);
	printf("sync: the chmod-ed file cannot be opened for its fsync -> fsync EIO, drain 1\n");
}

static void unreadable_case(void)
{
	struct tmount m;
	char flag[PATH_MAX];
	struct stat st;

	chmod_unopenable(&m, "lesser-unread", "op=openat,err=EACCES,name=victim", flag, 0200);
	ASSERT_EQ(fsync_path(tm_path(&m, "victim")), 0);
	ct_write_seeded(tm_path(&m, "other"), 4096, 4);
	ASSERT_EQ(fsync_path(tm_path(&m, "other")), 0);
	struct ct_result r;
	ctl(&r, &m, "drain", "--timeout", "5");
	ct_expect_status(&r, 0, "drain with a file the daemon may not open");
	ct_result_free(&r);
	CHECK_SYS(stat(tm_bpath(&m, "victim"), &st));
	ASSERT_EQ(st.st_mode & 07777, 0200);
	ct_check_seeded(tm_bpath(&m, "other"), 4096, 4);
	unlink(flag);
	tm_stop(&m);
	tm_cleanup(&m);
	printf("unread: a changed file the daemon may not open is synced with its file system\n");
}

static void relink_case(void)
{
	struct tmount m;
	char flag[PATH_MAX], seq[32];
	struct ct_result r;

	ct_mount_flagged(&m, "lesser-relink", "op=rename,err=EACCES,name=h2", flag);
	CHECK_SYS(mkdir(tm_path(&m, "sub"), 0755));
	ct_write_seeded(tm_path(&m, "h"), 50000, 4);
	CHECK_SYS(link(tm_path(&m, "h"), tm_path(&m, "sub/h2")));
	tm_sync(&m);
	ct_touch(flag);
	ct_write_seeded(tm_path(&m, "h"), 50000, 5);	/* O_TRUNC rewrite of both names */
	ASSERT_EQ(fsync_path(tm_path(&m, "h")), -EACCES);
	ct_check_seeded(tm_bpath(&m, "h"), 50000, 5);	/* on the backend, in part */
	ct_check_seeded(tm_bpath(&m, "sub/h2"), 50000, 4);
	ct_blocked_seq(&m, seq);
	ctl(&r, &m, "skip", seq, NULL);
	ct_expect_status(&r, 1, "skip of a version on the backend in part");
	ct_expect_in(r.err, "can only be finished", "skip's refusal");
	ct_result_free(&r);
	unlink(flag);
	ctl(&r, &m, "retry", NULL, NULL);
	ct_result_free(&r);
	ctl(&r, &m, "drain", "--timeout", "30");
	ct_expect_status(&r, 0, "drain once the relink works");
	ct_result_free(&r);
	ct_check_seeded(tm_bpath(&m, "h"), 50000, 5);
	ct_check_seeded(tm_bpath(&m, "sub/h2"), 50000, 5);
	tm_stop(&m);
	tm_cleanup(&m);
	printf("relink: skip of a version half on the backend refused; retry finishes it\n");
}

int main(void)
{
	tm_require_fuse();
	xattrs_case();
	xattr_sync_case();
	xattr_many_case();
	xattr_drop_case();
	skip_empty_case();
	deep_case();
	sync_case();
	unreadable_case();
	relink_case();
	printf("ok\n");
	return 0;
}
