/*
 * owner.c — files created by another user belong to that user, on the
 * mount and on the backend.  Root mounts with allow_other; a child process
 * that has become uid/gid 1000 creates a file and a directory in a
 * world-writable directory, and a symlink (the daemon makes it, then gives
 * the link itself to the user, pinned: bsys.c).  Root then gives the link
 * to a third uid through the mount (lchown), sets its times and a trusted
 * xattr and removes it: the backend's link changes, never its target (each
 * acts on the pinned link, bsys.c).  Skips unless run as root.
 */
#include "tests/core/core_util.h"

#include <grp.h>
#include <sys/wait.h>
#include <sys/xattr.h>

#define UID 1000
#define GID 1000

static void check_owner_is(const char *path, uid_t uid, gid_t gid)
{
	struct stat st;
	CHECK_SYS(lstat(path, &st));
	ASSERT_EQ(st.st_uid, uid);
	ASSERT_EQ(st.st_gid, gid);
}

static struct timespec mtime_of(const char *path)
{
	struct stat st;
	CHECK_SYS(lstat(path, &st));
	return st.st_mtim;
}

/* Root, through the mount: the link's own times and a trusted xattr. */
static void link_attrs(struct tmount *m)
{
	static const struct timespec ts[2] = { { 1000000000, 0 }, { 1000000007, 0 } };
	struct timespec before = mtime_of(tm_bpath(m, "pub/file"));
	char v[8];

	CHECK_SYS(utimensat(AT_FDCWD, tm_path(m, "pub/link"), ts, AT_SYMLINK_NOFOLLOW));
	CHECK_SYS(lsetxattr(tm_path(m, "pub/link"), "trusted.ckptfs_owner", "lk", 2, 0));
	tm_sync(m);
	ASSERT_EQ(mtime_of(tm_bpath(m, "pub/link")).tv_sec, ts[1].tv_sec);
	ASSERT_EQ(lgetxattr(tm_bpath(m, "pub/link"), "trusted.ckptfs_owner", v, sizeof(v)), 2);
	ASSERT_EQ(memcmp(v, "lk", 2), 0);
	ASSERT_EQ(mtime_of(tm_bpath(m, "pub/file")).tv_sec, before.tv_sec);
	ASSERT_EQ(getxattr(tm_bpath(m, "pub/file"), "trusted.ckptfs_owner", v, sizeof(v)), -1);
	ASSERT_EQ(errno, ENODATA);
	CHECK_SYS(lremovexattr(tm_path(m, "pub/link"), "trusted.ckptfs_owner"));
	tm_sync(m);
	ASSERT_EQ(lgetxattr(tm_bpath(m, "pub/link"), "trusted.ckptfs_owner", v, sizeof(v)), -1);
	ASSERT_EQ(errno, ENODATA);
}

static void check_owner(const char *path)
{
	check_owner_is(path, UID, GID);
}

/* In a child as UID/GID: create pub/file and pub/dir; exit status 0 if all worked. */
static int as_other_user(struct tmount *m)
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		char buf[100];
		if (setgroups(0, NULL) < 0 || setgid(GID) < 0 || setuid(UID) < 0)
			_exit(10);
		int fd = open(tm_path(m, "pub/file"), O_CREAT | O_WRONLY | O_EXCL, 0644);
		if (fd < 0)
			_exit(11);
		fill_pattern(buf, sizeof(buf), 60, 0);
		if (write(fd, buf, sizeof(buf)) != (ssize_t)sizeof(buf) || close(fd) < 0)
			_exit(12);
		if (mkdir(tm_path(m, "pub/dir"), 0755) < 0)
			_exit(13);
		if (symlink("file", tm_path(m, "pub/link")) < 0)
			_exit(14);
		_exit(0);
	}
	CHECK_SYS(waitpid(pid, &st, 0));
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(void)
{
	struct tmount m;

	cu_require_root();
	tm_require_fuse();
	tm_init(&m, "owner");
	CHECK_SYS(chmod(m.root, 0755));	/* let uid 1000 reach the mount */
	tm_mount(&m, "allow_other", NULL);
	CHECK_SYS(mkdir(tm_path(&m, "pub"), 0777));
	CHECK_SYS(chmod(tm_path(&m, "pub"), 01777));
	ASSERT_EQ(as_other_user(&m), 0);
	check_owner(tm_path(&m, "pub/file"));
	check_owner(tm_path(&m, "pub/dir"));
	tm_sync(&m);
	check_owner(tm_bpath(&m, "pub/file"));
	check_owner(tm_bpath(&m, "pub/dir"));
	check_owner(tm_bpath(&m, "pub/link"));
	cu_check_pattern(tm_bpath(&m, "pub/file"), 100, 60);
	CHECK_SYS(lchown(tm_path(&m, "pub/link"), UID + 1, GID + 1));
	tm_sync(&m);
	check_owner_is(tm_bpath(&m, "pub/link"), UID + 1, GID + 1);
	check_owner(tm_bpath(&m, "pub/file"));	/* its target is untouched */
	link_attrs(&m);
	check_owner_is(tm_bpath(&m, "pub/link"), UID + 1, GID + 1);
	tm_stop(&m);
	tm_cleanup(&m);
	return 0;
}
