/*
 * swapped.c — an object swapped on the backend by the owner of its
 * directory never receives what the root daemon meant for another one
 * (backend/bsys.h C5; flush.c, apply.c).
 *
 * A user owns a directory on the backend, so they may rename anything in
 * it, a root-owned file included: the daemon's own temporary files, or a
 * file root wrote there.  Three ways that used to turn into root acting for
 * them, each with the swap done by the user on the backend while the
 * daemon's view (attr_timeout=60: no revalidation) still holds the old
 * object:
 *
 *   1. chmod through the mount of their own file, after renaming a
 *      root-owned file over its name on the backend: it would have made the
 *      root-owned file 04755 (a set-user-ID root program of their making).
 *      Now refused: the object at the name is not owned by the uid the
 *      mount knew (logged, the operation blocked); the root-owned file is
 *      unchanged.
 *   2. mkdir through the mount of a name where, before it is applied, they
 *      rename a non-empty root-owned directory: it would have been chowned
 *      to them.  Now refused (EEXIST, logged), the directory unchanged.
 *   3. root writes a file into their directory; while its temporary file
 *      waits to be reopened for O_DIRECT writes, they rename it away and
 *      put their own world-readable file there: root's data would have gone
 *      into their file, and their file would have been published under
 *      root's name.  Now neither: their file stays empty, nothing is
 *      published, the version is blocked and the daemon says why.
 *   4. root renames its file out of their directory into a directory only
 *      root may write, after they renamed a file of their own over that
 *      file's name: their file would have been carried into root's
 *      directory under root's chosen name.  Now refused (the object at the
 *      name is not root's), logged, nothing moved.
 *   5. they move a directory of theirs that the daemon holds open out of
 *      the backend, to their home: the daemon's descriptor follows it, so
 *      root's next file there would have been created outside the backend.
 *      Now not: the directory is not where the mount put it, nothing is
 *      written there, the version is blocked and the daemon says why.
 *   6. they chmod their file through the mount and, between the change and
 *      its fsync (the daemon's open for the sync held), put a symlink in
 *      its place: the sync cannot open a file there (ELOOP), and retrying
 *      it held every user's publication for good.  Now the change's object
 *      has left its name, nothing of it is synced there, the symlink's
 *      target is untouched, and root's next file is durable at once.
 *   7. root writes a file with a trusted.* xattr into their directory;
 *      while its xattrs are being set on its temporary file (held), they
 *      move that file away and put their own at its name: root's xattr
 *      would have been set on their file (by name; security.capability
 *      would make their program privileged), and their file published
 *      under root's name.  Now the xattrs go to the daemon's own file (by
 *      descriptor), their file gets none, and the version is not
 *      published: the name does not hold what the mount wrote (logged,
 *      blocked).
 */
#include "tests/security/sec_util.h"

#include <dirent.h>
#include <sys/xattr.h>

#define USER_A 61901

static struct tmount m;
static char rel[PATH_MAX];

static int as_a_chmod(void *arg)
{
	(void)arg;
	return SEC_ERR(chmod(tm_path(&m, rel), 04755));
}

static int as_a_mkdir(void *arg)
{
	(void)arg;
	return SEC_ERR(mkdir(tm_path(&m, rel), 0755));
}

static const char *swap_from, *swap_to;	/* the swaps' names, set before each */

static int as_a_chmod640(void *arg)
{
	(void)arg;
	return SEC_ERR(chmod(tm_path(&m, rel), 0640));
}

/* On the backend, as A: a symlink to `swap_from` renamed over `swap_to`. */
static int as_a_symlink_over(void *arg)
{
	char tmp[PATH_MAX];
	(void)arg;
	snprintf(tmp, sizeof(tmp), "%s.s", tm_bpath(&m, swap_to));
	if (symlink(swap_from, tmp) < 0)
		return errno;
	return SEC_ERR(rename(tmp, tm_bpath(&m, swap_to)));
}

/* On the backend, as A: rename `from` over `to` (both under A's directory). */

static int as_a_rename(void *arg)
{
	(void)arg;
	return SEC_ERR(rename(tm_bpath(&m, swap_from), tm_bpath(&m, swap_to)));
}

/* As A: move a/ours out of the backend, into A's home. */
static char a_home[PATH_MAX];

static int as_a_move_out(void *arg)
{
	char to[PATH_MAX + 16];
	(void)arg;
	snprintf(to, sizeof(to), "%s/ours", a_home);
	return SEC_ERR(rename(tm_bpath(&m, "a/ours"), to));
}

/* As A: move the daemon's temporary file in a/ away and put their own there. */
static char temp_name[256];

static int as_a_steal_temp(void *arg)
{
	char from[PATH_MAX], to[PATH_MAX];
	(void)arg;
	snprintf(from, sizeof(from), "%s/%s", tm_bpath(&m, "a"), temp_name);
	snprintf(to, sizeof(to), "%s", tm_bpath(&m, "a/moved"));
	if (rename(from, to) < 0)
		return errno;
	int fd = open(from, O_WRONLY | O_CREAT | O_EXCL, 0666);
	if (fd < 0)
		return errno;
	fchmod(fd, 0666);
	close(fd);
	return 0;
}

static bool find_temp(void)
{
	DIR *d = opendir(tm_bpath(&m, "a"));
	struct dirent *e;
	bool found = false;

	while (d && (e = readdir(d)))
		if (!strncmp(e->d_name, ".ckptfs.", 8)) {
			snprintf(temp_name, sizeof(temp_name), "%s", e->d_name);
			found = true;
		}
	if (d)
		closedir(d);
	return found;
}

int main(void)
{
	char opts[PATH_MAX + 160], hold[PATH_MAX], p[PATH_MAX];
	struct stat st;
	int rfd;

	sec_init_user_dir(&m, "swapped", "a", USER_A);
	/* Root's objects in A's directory. */
	cu_write_text(tm_bpath(&m, "a/rootfile"), "root's own program\n");
	CHECK_SYS(chmod(tm_bpath(&m, "a/rootfile"), 0600));
	CHECK_SYS(mkdir(tm_bpath(&m, "a/rootdir"), 0700));
	cu_write_text(tm_bpath(&m, "a/rootdir/secret"), "root's secret\n");
	CHECK_SYS(chmod(tm_bpath(&m, "a/rootdir/secret"), 0600));
	/* Root's file to move out of a/ into root's own directory (case 4), and A's file. */
	cu_write_text(tm_bpath(&m, "a/rootmove"), "root's data\n");
	CHECK_SYS(mkdir(tm_bpath(&m, "rootonly"), 0755));
	cu_write_text(tm_bpath(&m, "a/payload"), "A's payload\n");
	CHECK_SYS(chown(tm_bpath(&m, "a/payload"), USER_A, USER_A));

	snprintf(hold, sizeof(hold), "%s/hold", m.root);
	/* The 2nd open of a temporary file (its O_DIRECT reopen) waits while `hold` exists. */
	/* ... and so does the mkdir of newdir: a busy backend, for the swaps to happen first. */
	const char *env[] = { cu_fault_env("op=openat,name=.ckptfs.t,after=1,hold=%s;"
					   "op=mkdir,name=newdir,hold=%s", hold, hold), NULL };
	snprintf(opts, sizeof(opts), "allow_other,attr_timeout=60,cache_size=64M,drain_timeout=2,"
		 "rescue_dir=%s/rescue", m.root);
	tm_mount(&m, opts, env);

	/* 1. chmod of A's own file after a root-owned file was renamed over it. */
	snprintf(rel, sizeof(rel), "a/mine");
	CHECK_SYS(lstat(tm_path(&m, "a"), &st));	/* the daemon lists a/ */
	int fd = cu_open(tm_path(&m, "a/mine"), O_WRONLY | O_CREAT | O_TRUNC);
	cu_close(fd);
	CHECK_SYS(chown(tm_path(&m, "a/mine"), USER_A, USER_A));
	tm_sync(&m);
	struct stat rf;
	CHECK_SYS(lstat(tm_bpath(&m, "a/rootfile"), &rf));
	swap_from = "a/rootfile";
	swap_to = "a/mine";
	ASSERT_EQ(tm_as_user(USER_A, USER_A, as_a_rename, NULL), 0);
	ASSERT_EQ(tm_as_user(USER_A, USER_A, as_a_chmod, NULL), 0);	/* the mount's view: A's */
	if (!sec_log_wait(&m, "refused to chmod", "'mine'", 5000))
		FAILF("the chmod of a root-owned file swapped in by A was not refused");
	CHECK_SYS(lstat(tm_bpath(&m, "a/mine"), &st));
	ASSERT_EQ(st.st_ino, rf.st_ino);	/* it is root's file there */
	ASSERT_EQ(st.st_uid, 0);
	ASSERT_EQ(st.st_mode & 07777, 0600);	/* no set-user-ID root file for A */
	cu_check_content(tm_bpath(&m, "a/mine"), "root's own program\n", 19);
	printf("1. chmod 04755 of a root-owned file swapped in: refused, file still 0600 root\n");
	cu_stop_any(&m);	/* its operations are blocked: a fresh mount for the next */

	/* 4. rename of root's file out of A's directory, after A put their own file there. */
	tm_mount(&m, opts, env);
	CHECK_SYS(lstat(tm_path(&m, "a/rootmove"), &st));	/* the daemon lists a/: root's file */
	ASSERT_EQ(st.st_uid, 0);
	CHECK_SYS(lstat(tm_path(&m, "rootonly"), &st));
	swap_from = "a/payload";
	swap_to = "a/rootmove";
	ASSERT_EQ(tm_as_user(USER_A, USER_A, as_a_rename, NULL), 0);
	CHECK_SYS(rename(tm_path(&m, "a/rootmove"), tm_path(&m, "rootonly/moved")));
	if (!sec_log_wait(&m, "refused to rename", "'rootmove'", 5000))
		FAILF("the rename of an object A swapped in was not refused");
	if (access(tm_bpath(&m, "rootonly/moved"), F_OK) == 0)
		FAILF("A's file was carried into root's directory, where A may not write");
	CHECK_SYS(lstat(tm_bpath(&m, "a/rootmove"), &st));
	ASSERT_EQ(st.st_uid, USER_A);	/* A's file stays where A put it */
	cu_check_content(tm_bpath(&m, "a/rootmove"), "A's payload\n", 12);
	printf("4. rename of root's file after A swapped theirs in: refused, nothing moved into "
	       "root's directory\n");
	cu_stop_any(&m);

	/* 5. A moves their directory, which the daemon holds open, out of the backend. */
	snprintf(a_home, sizeof(a_home), "%s/a-home", m.root);
	CHECK_SYS(mkdir(a_home, 0755));
	CHECK_SYS(chown(a_home, USER_A, USER_A));
	tm_mount(&m, opts, env);
	CHECK_SYS(mkdir(tm_path(&m, "a/ours"), 0755));
	CHECK_SYS(chown(tm_path(&m, "a/ours"), USER_A, USER_A));
	cu_write_text(tm_path(&m, "a/ours/first"), "root's first\n");
	tm_sync(&m);	/* a/ours is on the backend, A's, and the daemon holds it open */
	ASSERT_EQ(tm_as_user(USER_A, USER_A, as_a_move_out, NULL), 0);
	char *home_was = sec_tree_state(a_home);
	/* Its close may already report the refusal (a slow build): not asserted. */
	fd = cu_open(tm_path(&m, "a/ours/second"), O_WRONLY | O_CREAT | O_TRUNC);
	ASSERT_EQ(write(fd, "root's second\n", 14), 14);
	close(fd);
	CHECK_SYS(mkdir(tm_path(&m, "a/ours/sub"), 0755));
	rfd = cu_open(m.mnt, O_RDONLY | O_DIRECTORY);
	int synced = fsync(rfd);	/* the daemon has tried by now */
	cu_close(rfd);
	sec_assert_unchanged("A's home, after A moved a directory of theirs there", a_home,
			     home_was);
	ASSERT_LT(synced, 0);	/* not durable, and said */
	if (!sec_log_wait(&m, "was moved away from its place", "'ours'", 5000))
		FAILF("a directory moved out of the backend went unnoticed");
	cu_stop_any(&m);
	sec_assert_unchanged("A's home, after the stop", a_home, home_was);
	free(home_was);
	printf("5. a directory moved out of the backend by its owner: nothing written there, "
	       "the version blocked\n");

	/* 2. mkdir of a name where A renamed root's non-empty directory meanwhile. */
	tm_mount(&m, opts, env);
	CHECK_SYS(lstat(tm_path(&m, "a"), &st));
	write_file(hold, "", 0);
	/* Root's file in a/: its temporary file's reopen waits. */
	fd = cu_open(tm_path(&m, "a/big"), O_WRONLY | O_CREAT | O_TRUNC);
	cu_write_pattern_fd(fd, 0, 8 * MiB, 7, MiB);
	cu_close(fd);
	snprintf(rel, sizeof(rel), "a/newdir");
	ASSERT_EQ(tm_as_user(USER_A, USER_A, as_a_mkdir, NULL), 0);
	swap_from = "a/rootdir";
	swap_to = "a/newdir";
	ASSERT_EQ(tm_as_user(USER_A, USER_A, as_a_rename, NULL), 0);
	char *rootdir_was = sec_tree_state(tm_bpath(&m, "a/newdir"));

	/* 3. Meanwhile the held reopen: A swaps root's temporary file for their own. */
	for (int i = 0; i < 500 && !find_temp(); i++)
		usleep(10000);
	if (!temp_name[0])
		FAILF("no temporary file of a/big appeared on the backend");
	ASSERT_EQ(tm_as_user(USER_A, USER_A, as_a_steal_temp, NULL), 0);
	unlink(hold);

	if (!sec_log_wait(&m, "found a directory of uid 0", "'newdir'", 5000))
		FAILF("mkdir over root's directory swapped in by A was not refused");
	sec_assert_unchanged("root's directory renamed into the mkdir's place",
			     tm_bpath(&m, "a/newdir"), rootdir_was);
	CHECK_SYS(lstat(tm_bpath(&m, "a/newdir"), &st));
	ASSERT_EQ(st.st_uid, 0);
	ASSERT_EQ(st.st_mode & 07777, 0700);
	printf("2. mkdir over root's directory swapped in: refused, still root's 0700\n");

	if (!sec_log_wait(&m, "was replaced", temp_name, 5000))
		FAILF("the swapped temporary file went unnoticed");
	snprintf(p, sizeof(p), "a/%s", temp_name);
	ASSERT_EQ(cu_file_size(tm_bpath(&m, p)), 0);	/* A's file got none of root's data */
	if (access(tm_bpath(&m, "a/big"), F_OK) == 0)
		FAILF("a/big was published, from a temporary file A controlled");
	rfd = cu_open(m.mnt, O_RDONLY | O_DIRECTORY);
	ASSERT_LT(fsync(rfd), 0);	/* not durable, and said */
	cu_close(rfd);
	printf("3. temporary file swapped by the directory's owner: nothing written to "
	       "theirs, nothing published, drain fails\n");

	cu_stop_any(&m);
	free(rootdir_was);

	/* 6. A symlink put where a chmod-ed file was, before the chmod's sync. */
	char target[PATH_MAX];
	snprintf(target, sizeof(target), "%s/target6", m.root);
	cu_write_text(target, "not A's to chmod\n");
	CHECK_SYS(chmod(target, 0600));
	const char *env6[] = { cu_fault_env("op=openat,name=victim6,hold=%s", hold), NULL };
	tm_mount(&m, opts, env6);
	CHECK_SYS(lstat(tm_path(&m, "a"), &st));
	cu_write_text(tm_path(&m, "a/victim6"), "A's file\n");
	CHECK_SYS(chown(tm_path(&m, "a/victim6"), USER_A, USER_A));
	tm_sync(&m);
	write_file(hold, "", 0);
	snprintf(rel, sizeof(rel), "a/victim6");
	ASSERT_EQ(tm_as_user(USER_A, USER_A, as_a_chmod640, NULL), 0);
	for (int i = 0; i < 500 && (sec_mode(tm_bpath(&m, "a/victim6")) & 07777) != 0640; i++)
		usleep(10000);	/* applied; its sync now waits to open the file */
	ASSERT_EQ(sec_mode(tm_bpath(&m, "a/victim6")) & 07777, 0640);
	usleep(200 * 1000);
	swap_from = target;
	swap_to = "a/victim6";
	ASSERT_EQ(tm_as_user(USER_A, USER_A, as_a_symlink_over, NULL), 0);
	unlink(hold);
	cu_write_text(tm_path(&m, "root6"), "root's next file\n");
	int r6 = open(tm_path(&m, "root6"), O_RDONLY);
	CHECK_SYS(r6);
	uint64_t t6 = mono_ms();
	int s6 = fsync(r6) < 0 ? -errno : 0;
	t6 = mono_ms() - t6;
	cu_close(r6);
	if (s6 < 0)
		FAILF("root's next file was not made durable after A's swap (fsync: %s after %llu ms)",
		      strerror(-s6), (unsigned long long)t6);
	cu_check_content(tm_bpath(&m, "root6"), "root's next file\n", 17);
	CHECK_SYS(lstat(target, &st));
	ASSERT_EQ(st.st_mode & 07777, 0600);	/* the symlink was never followed */
	ASSERT_EQ(st.st_uid, 0);
	printf("6. a symlink put where a chmod-ed file was, before its sync: the target "
	       "untouched, root's next file durable in %llu ms\n", (unsigned long long)t6);
	cu_stop_any(&m);

	/* 7. Their file put at a temporary file's name while its xattrs are set. */
	const char *env7[] = { cu_fault_env("op=setxattr,name=.ckptfs.t,hold=%s", hold), NULL };
	tm_mount(&m, opts, env7);
	CHECK_SYS(lstat(tm_path(&m, "a"), &st));
	write_file(hold, "", 0);
	fd = cu_open(tm_path(&m, "a/capfile"), O_WRONLY | O_CREAT | O_TRUNC);
	ASSERT_EQ(write(fd, "root's program\n", 15), 15);
	CHECK_SYS(fsetxattr(fd, "trusted.tag", "root", 4, 0));
	cu_close(fd);
	temp_name[0] = '\0';
	for (int i = 0; i < 500 && !find_temp(); i++)
		usleep(10000);
	if (!temp_name[0])
		FAILF("no temporary file of a/capfile appeared on the backend");
	usleep(300 * 1000);	/* flushed; its xattrs wait to be set */
	ASSERT_EQ(tm_as_user(USER_A, USER_A, as_a_steal_temp, NULL), 0);
	unlink(hold);
	if (!sec_log_wait(&m, "before its rename", "'capfile'", 5000))
		FAILF("a file swapped in at a temporary file's name was published unnoticed");
	char got7[16];
	ASSERT_EQ(getxattr(tm_bpath(&m, "a/capfile"), "trusted.tag", got7, sizeof(got7)), -1);
	ASSERT_EQ(errno, ENODATA);	/* their file, at root's name: none of root's xattrs */
	ASSERT_EQ(sec_uid(tm_bpath(&m, "a/capfile")), USER_A);
	rfd = cu_open(m.mnt, O_RDONLY | O_DIRECTORY);
	ASSERT_LT(fsync(rfd), 0);	/* not durable, and said */
	cu_close(rfd);
	printf("7. their file put at a temporary file's name: root's xattrs not set on it, "
	       "the version not published\n");
	cu_stop_any(&m);
	tm_cleanup(&m);
	printf("ok\n");
	return 0;
}
