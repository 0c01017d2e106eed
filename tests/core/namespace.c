/*
 * namespace.c — names, links and attributes through the mount, and the
 * same result on the backend once synced.
 *
 * Against a backend whose renames sleep (so operations are still pending
 * when the next one comes): rename over an existing file, RENAME_NOREPLACE,
 * RENAME_EXCHANGE of files and of directories, renaming a directory whose
 * files are not yet published, symlinks, hard links (a rewrite through one
 * name shows through the other, on the mount and on the backend), mkdir and
 * rmdir of a non-empty directory, and unlinking open files (a published one
 * and one never closed): readable through the descriptor, gone from the
 * backend.
 *
 * On a plain mount: a directory of 5000 entries, half already on the
 * backend and half created through the mount, read with readdir and with
 * `ls -la` (readdirplus and a stat per name); chmod and utimens (also on a
 * new file before its first close) and user xattrs (likewise) persisted on
 * the backend.
 */
#include "tests/core/core_util.h"

#include <dirent.h>
#include <sys/xattr.h>

/* ---- against a slow backend ---- */

/* What the rename steps leave behind, and what they remove. */
static const struct cu_pfile after_renames[] = {
	{ "b", 5000, 1 }, { "c", 3000, 3 }, { "d", 4000, 4 }, { "x", 2222, 6 }, { "y", 1111, 5 },
	{ "dx/f2", 200, 8 }, { "dy/f1", 100, 7 }, { "pd2/f0", 10000, 10 }, { "pd2/f1", 10001, 11 },
	{ "pd2/sub/f2", 10002, 12 }, { "pd2/sub/f3", 10003, 13 },
};
static const char *const gone[] = { "a", "dx/f1", "dy/f2", "pd", "md", "uo", "un" };

static void exchange(struct tmount *m, const char *a, const char *b)
{
	CHECK_SYS(renameat2(AT_FDCWD, tm_path(m, a), AT_FDCWD, tm_path(m, b), RENAME_EXCHANGE));
}

static void renames(struct tmount *m)
{
	cu_write_pattern(tm_path(m, "a"), 5000, 1);
	cu_write_pattern(tm_path(m, "b"), 7000, 2);
	CHECK_SYS(rename(tm_path(m, "a"), tm_path(m, "b")));	/* over an existing file */

	cu_write_pattern(tm_path(m, "c"), 3000, 3);
	cu_write_pattern(tm_path(m, "d"), 4000, 4);
	CU_EXPECT_ERRNO(renameat2(AT_FDCWD, tm_path(m, "c"), AT_FDCWD, tm_path(m, "d"),
				  RENAME_NOREPLACE), EEXIST);

	cu_write_pattern(tm_path(m, "x"), 1111, 5);
	cu_write_pattern(tm_path(m, "y"), 2222, 6);
	exchange(m, "x", "y");
	CHECK_SYS(mkdir(tm_path(m, "dx"), 0755));
	CHECK_SYS(mkdir(tm_path(m, "dy"), 0755));
	cu_write_pattern(tm_path(m, "dx/f1"), 100, 7);
	cu_write_pattern(tm_path(m, "dy/f2"), 200, 8);
	exchange(m, "dx", "dy");

	/* Files still pending inside a directory that moves. */
	CHECK_SYS(mkdir(tm_path(m, "pd"), 0755));
	CHECK_SYS(mkdir(tm_path(m, "pd/sub"), 0755));
	cu_write_pattern(tm_path(m, "pd/f0"), 10000, 10);
	cu_write_pattern(tm_path(m, "pd/f1"), 10001, 11);
	cu_write_pattern(tm_path(m, "pd/sub/f2"), 10002, 12);
	cu_write_pattern(tm_path(m, "pd/sub/f3"), 10003, 13);
	CHECK_SYS(rename(tm_path(m, "pd"), tm_path(m, "pd2")));
	cu_check_pfiles(m->mnt, after_renames, CU_LEN(after_renames));
}

static void check_gone(const char *root)
{
	char path[PATH_MAX * 2];
	for (size_t i = 0; i < CU_LEN(gone); i++) {
		snprintf(path, sizeof(path), "%s/%s", root, gone[i]);
		if (file_exists(path))
			FAILF("%s still exists", path);
	}
}

static void check_symlink(const char *path, const char *want)
{
	char got[PATH_MAX];
	struct stat st;
	ssize_t n = readlink(path, got, sizeof(got) - 1);

	if (n < 0)
		FAILF("readlink %s: %s", path, strerror(errno));
	got[n] = '\0';
	ASSERT_STR_EQ(got, want);
	CHECK_SYS(lstat(path, &st));
	ASSERT_TRUE(S_ISLNK(st.st_mode));
}

static ino_t ino_of(const char *path)
{
	struct stat st;
	CHECK_SYS(lstat(path, &st));
	return st.st_ino;
}

static void links(struct tmount *m)
{
	struct stat st;

	CHECK_SYS(symlink("some/../target", tm_path(m, "sl")));
	check_symlink(tm_path(m, "sl"), "some/../target");

	cu_write_pattern(tm_path(m, "h1"), 10000, 20);
	CHECK_SYS(link(tm_path(m, "h1"), tm_path(m, "h2")));
	CHECK_SYS(stat(tm_path(m, "h2"), &st));
	ASSERT_EQ(st.st_nlink, 2);
	ASSERT_EQ(ino_of(tm_path(m, "h1")), st.st_ino);
	cu_write_pattern(tm_path(m, "h1"), 20000, 21);	/* O_TRUNC rewrite via one name */
	cu_check_pattern(tm_path(m, "h2"), 20000, 21);
}

static void check_links(struct tmount *m)
{
	check_symlink(tm_bpath(m, "sl"), "some/../target");
	cu_check_pattern(tm_bpath(m, "h1"), 20000, 21);
	cu_check_pattern(tm_bpath(m, "h2"), 20000, 21);
	ASSERT_EQ(ino_of(tm_bpath(m, "h1")), ino_of(tm_bpath(m, "h2")));
}

static void dirs(struct tmount *m)
{
	CHECK_SYS(mkdir(tm_path(m, "md"), 0755));
	cu_write_pattern(tm_path(m, "md/f"), 10, 22);
	CU_EXPECT_ERRNO(rmdir(tm_path(m, "md")), ENOTEMPTY);
	CU_EXPECT_ERRNO(mkdir(tm_path(m, "md"), 0755), EEXIST);
	CHECK_SYS(unlink(tm_path(m, "md/f")));
	CHECK_SYS(rmdir(tm_path(m, "md")));
}

static void unlink_open(struct tmount *m)
{
	int fd, fd2;

	/* A published file: the descriptor still reads it after the unlink. */
	cu_write_pattern(tm_path(m, "uo"), 300000, 30);
	tm_sync(m);
	ASSERT_TRUE(file_exists(tm_bpath(m, "uo")));
	fd = cu_open(tm_path(m, "uo"), O_RDONLY);
	CHECK_SYS(unlink(tm_path(m, "uo")));

	/* A file never closed, unlinked, then written and read some more. */
	fd2 = cu_open(tm_path(m, "un"), O_CREAT | O_RDWR | O_TRUNC);
	cu_write_pattern_fd(fd2, 0, 50000, 31, 8192);
	CHECK_SYS(unlink(tm_path(m, "un")));
	cu_write_pattern_fd(fd2, 50000, 20000, 31, 8192);
	cu_check_range(fd2, "unlinked open file", 0, 70000, 31);
	tm_sync(m);
	cu_check_range(fd, "unlinked published file", 0, 300000, 30);
	cu_close(fd);
	cu_close(fd2);
}

/* ---- on a plain mount ---- */

#define BIG 5000

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void big_dir_populate(struct tmount *m, int from, int to, bool backend)
{
	for (int i = from; i < to; i++) {
		char name[32];
		snprintf(name, sizeof(name), "big/entry-%05d", i);
		cu_close(cu_open(backend ? tm_bpath(m, name) : tm_path(m, name),
				 O_CREAT | O_WRONLY | O_TRUNC));
	}
}

/* readdir must list exactly entry-00000 .. entry-04999, once each. */
static void big_dir_check(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char **names = calloc(BIG + 16, sizeof(*names));
	size_t n = 0;

	ASSERT_TRUE(d != NULL);
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (n == BIG + 16)
			FAILF("%s: more than %d entries", dir, BIG + 16);
		names[n++] = strdup(de->d_name);
	}
	closedir(d);
	ASSERT_EQ(n, BIG);
	qsort(names, n, sizeof(*names), cmp_str);
	for (size_t i = 0; i < n; i++) {
		char want[32];
		snprintf(want, sizeof(want), "entry-%05zu", i);
		ASSERT_STR_EQ(names[i], want);
		free(names[i]);
	}
	free(names);
}

/* `ls -la` stats every name: lines are total, ., .. and one per entry. */
static void big_dir_ls(const char *dir)
{
	char cmd[PATH_MAX + 64], line[512];
	int lines = 0, regular = 0;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "ls -la '%s'", dir);
	ASSERT_TRUE((p = popen(cmd, "r")) != NULL);
	while (fgets(line, sizeof(line), p)) {
		lines++;
		regular += line[0] == '-' && strstr(line, "entry-") != NULL;
	}
	ASSERT_EQ(pclose(p), 0);
	ASSERT_EQ(lines, BIG + 3);
	ASSERT_EQ(regular, BIG);
}

static void check_mode(const char *path, mode_t mode)
{
	struct stat st;
	CHECK_SYS(lstat(path, &st));
	ASSERT_EQ(st.st_mode & 07777, mode);
}

static const struct timespec times[2] = { { 1000000000, 123456789 }, { 1234567890, 500000000 } };

static void check_times(const char *path)
{
	struct stat st;
	CHECK_SYS(lstat(path, &st));
	ASSERT_EQ(st.st_atim.tv_sec, times[0].tv_sec);
	ASSERT_EQ(st.st_atim.tv_nsec, times[0].tv_nsec);
	ASSERT_EQ(st.st_mtim.tv_sec, times[1].tv_sec);
	ASSERT_EQ(st.st_mtim.tv_nsec, times[1].tv_nsec);
}

static void attrs(struct tmount *m)
{
	int fd;

	cu_write_pattern(tm_path(m, "cm"), 4000, 40);
	CHECK_SYS(chmod(tm_path(m, "cm"), 0640));
	CHECK_SYS(utimensat(AT_FDCWD, tm_path(m, "cm"), times, 0));
	CHECK_SYS(mkdir(tm_path(m, "cdir"), 0755));
	CHECK_SYS(chmod(tm_path(m, "cdir"), 0711));
	/* Before the first close: the first version carries them. */
	fd = cu_open(tm_path(m, "nf"), O_CREAT | O_WRONLY | O_TRUNC);
	cu_write_pattern_fd(fd, 0, 5000, 41, 5000);
	CHECK_SYS(fchmod(fd, 0604));
	CHECK_SYS(futimens(fd, times));
	cu_close(fd);
	check_mode(tm_path(m, "cm"), 0640);
	check_times(tm_path(m, "cm"));
	check_mode(tm_path(m, "cdir"), 0711);
	check_mode(tm_path(m, "nf"), 0604);
	check_times(tm_path(m, "nf"));
}

static void check_attrs(struct tmount *m)
{
	check_mode(tm_bpath(m, "cm"), 0640);
	check_times(tm_bpath(m, "cm"));
	check_mode(tm_bpath(m, "cdir"), 0711);
	check_mode(tm_bpath(m, "nf"), 0604);
	check_times(tm_bpath(m, "nf"));
	cu_check_pattern(tm_bpath(m, "nf"), 5000, 41);
}

static void check_xattr(const char *path, const char *key, const char *want)
{
	char got[256];
	ssize_t n = lgetxattr(path, key, got, sizeof(got) - 1);
	if (n < 0)
		FAILF("lgetxattr %s %s: %s", path, key, strerror(errno));
	got[n] = '\0';
	ASSERT_STR_EQ(got, want);
}

static void xattrs(struct tmount *m)
{
	int fd;

	cu_write_pattern(tm_path(m, "xa"), 1000, 50);
	tm_sync(m);
	CHECK_SYS(setxattr(tm_path(m, "xa"), "user.a", "one", 3, 0));
	CHECK_SYS(setxattr(tm_path(m, "xa"), "user.b", "gone", 4, 0));
	CHECK_SYS(removexattr(tm_path(m, "xa"), "user.b"));
	CHECK_SYS(mkdir(tm_path(m, "xd"), 0755));
	CHECK_SYS(setxattr(tm_path(m, "xd"), "user.d", "dir", 3, 0));
	/* On a new file before its first close. */
	fd = cu_open(tm_path(m, "xn"), O_CREAT | O_WRONLY | O_TRUNC);
	CHECK_SYS(fsetxattr(fd, "user.new", "early", 5, 0));
	cu_write_pattern_fd(fd, 0, 3000, 51, 3000);
	cu_close(fd);
	check_xattr(tm_path(m, "xa"), "user.a", "one");
	check_xattr(tm_path(m, "xn"), "user.new", "early");
	check_xattr(tm_path(m, "xd"), "user.d", "dir");
}

static void check_xattrs(struct tmount *m)
{
	char v[16];

	check_xattr(tm_bpath(m, "xa"), "user.a", "one");
	CU_EXPECT_ERRNO(lgetxattr(tm_bpath(m, "xa"), "user.b", v, sizeof(v)), ENODATA);
	check_xattr(tm_bpath(m, "xd"), "user.d", "dir");
	check_xattr(tm_bpath(m, "xn"), "user.new", "early");
	cu_check_pattern(tm_bpath(m, "xn"), 3000, 51);
}

int main(void)
{
	struct tmount m;
	const char *slow[] = { cu_fault_env("op=rename,delay_ms=20"), NULL };

	tm_require_fuse();
	tm_start(&m, "namespace", NULL, slow);
	renames(&m);
	links(&m);
	dirs(&m);
	unlink_open(&m);
	check_gone(m.mnt);
	tm_sync(&m);
	cu_check_pfiles(m.backend, after_renames, CU_LEN(after_renames));
	check_links(&m);
	check_gone(m.backend);
	tm_stop(&m);
	ASSERT_EQ(cu_count_temp_tree(m.backend), 0);
	tm_cleanup(&m);

	tm_init(&m, "namespace-plain");
	CHECK_SYS(mkdir(tm_bpath(&m, "big"), 0755));
	big_dir_populate(&m, 0, BIG / 2, true);
	tm_mount(&m, NULL, NULL);
	big_dir_populate(&m, BIG / 2, BIG, false);
	big_dir_check(tm_path(&m, "big"));
	big_dir_ls(tm_path(&m, "big"));
	attrs(&m);
	xattrs(&m);
	tm_sync(&m);
	big_dir_check(tm_bpath(&m, "big"));
	check_attrs(&m);
	check_xattrs(&m);
	tm_stop(&m);
	tm_cleanup(&m);
	return 0;
}
