/*
 * confine.c — the daemon stays inside the backend and keeps its own names
 * to itself.
 *
 *  - A symlink already on the backend that points outside it is shown as a
 *    symlink, with its target, and not followed by the daemon.
 *  - Names starting with ".ckptfs." cannot be created through the mount in
 *    any way (EINVAL), ".ckptfs" at the root is not listed, and reserved
 *    names already on the backend are invisible.
 *  - While mounted, a backend directory the daemon has already loaded (or
 *    only seen listed) is replaced from outside by a symlink to a directory
 *    outside the backend: whatever is then written under that name through
 *    the mount never lands in the outside directory.
 *  - A directory the daemon holds open is moved out of the backend (by
 *    rename, within its file system): nothing is written there or below,
 *    and what its name on the backend holds since is used instead.
 */
#include "tests/core/core_util.h"

#include <dirent.h>

static char outside[PATH_MAX + 32], outside2[PATH_MAX + 32], outside3[PATH_MAX + 32];

static void outside_symlink(struct tmount *m)
{
	char got[PATH_MAX];
	struct stat st;

	CHECK_SYS(lstat(tm_path(m, "esc"), &st));
	ASSERT_TRUE(S_ISLNK(st.st_mode));
	ssize_t n = readlink(tm_path(m, "esc"), got, sizeof(got) - 1);
	ASSERT_GE(n, 0);
	got[n] = '\0';
	ASSERT_STR_EQ(got, outside);
	CHECK_SYS(lstat(tm_path(m, "rel"), &st));
	ASSERT_TRUE(S_ISLNK(st.st_mode));
}

/* No directory entry of path is the metadata dir or a reserved name. */
static void assert_none_reserved(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;

	ASSERT_TRUE(d != NULL);
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".ckptfs") == 0 || strncmp(de->d_name, ".ckptfs.", 8) == 0)
			FAILF("%s lists the reserved name %s", path, de->d_name);
	closedir(d);
}

static void reserved_names(struct tmount *m)
{
	static const char *const dirs[] = { "", "sub/" };
	char p[64], q[64];

	cu_write_pattern(tm_path(m, "sub/plain"), 10, 1);	/* sub is from the backend */
	for (size_t i = 0; i < CU_LEN(dirs); i++) {
		snprintf(p, sizeof(p), "%s.ckptfs.x", dirs[i]);
		CU_EXPECT_ERRNO(open(tm_path(m, p), O_CREAT | O_WRONLY, 0644), EINVAL);
		CU_EXPECT_ERRNO(mkdir(tm_path(m, p), 0755), EINVAL);
		CU_EXPECT_ERRNO(symlink("plain", tm_path(m, p)), EINVAL);
		CU_EXPECT_ERRNO(link(tm_path(m, "sub/plain"), tm_path(m, p)), EINVAL);
		CU_EXPECT_ERRNO(rename(tm_path(m, "sub/plain"), tm_path(m, p)), EINVAL);
		snprintf(q, sizeof(q), "%s.ckptfs.t.000000000000.1", dirs[i]);
		CU_EXPECT_ERRNO(access(tm_path(m, q), F_OK), ENOENT);
	}
	/* The metadata dir at the root can be neither made nor replaced. */
	ASSERT_TRUE(mkdir(tm_path(m, ".ckptfs"), 0755) < 0);
	ASSERT_TRUE(rename(tm_path(m, "sub/plain"), tm_path(m, ".ckptfs")) < 0);
	cu_check_pattern(tm_path(m, "sub/plain"), 10, 1);
	tm_sync(m);
	ASSERT_TRUE(file_exists(tm_bpath(m, ".ckptfs")));	/* so hiding it means something */
	assert_none_reserved(m->mnt);
	assert_none_reserved(tm_path(m, "sub"));
}

/* The outside directory still holds only its own file. */
static void assert_untouched(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	ASSERT_TRUE(d != NULL);
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && strcmp(de->d_name, "secret"))
			FAILF("%s/%s was created outside the backend", dir, de->d_name);
	closedir(d);
	char secret[PATH_MAX + 64];
	snprintf(secret, sizeof(secret), "%s/secret", dir);
	ASSERT_STR_EQ(cu_slurp(secret), "outside");
}

/* Swap the backend directory `name` for a symlink to `target`. */
static void swap_for_symlink(struct tmount *m, const char *name, const char *target)
{
	char old[64];
	snprintf(old, sizeof(old), "%s.old", name);
	CHECK_SYS(rename(tm_bpath(m, name), tm_bpath(m, old)));
	CHECK_SYS(symlink(target, tm_bpath(m, name)));
}

/* Try to put files under mnt/name; failures are fine, escaping is not. */
static void write_under(struct tmount *m, const char *name)
{
	char p[64];
	int fd;

	snprintf(p, sizeof(p), "%s/new", name);
	if ((fd = open(tm_path(m, p), O_CREAT | O_WRONLY | O_TRUNC, 0644)) >= 0) {
		ASSERT_EQ(write(fd, "data", 4), 4);
		close(fd);
	}
	snprintf(p, sizeof(p), "%s/newdir", name);
	if (mkdir(tm_path(m, p), 0755) == 0) {
		snprintf(p, sizeof(p), "%s/newdir/f", name);
		if ((fd = open(tm_path(m, p), O_CREAT | O_WRONLY | O_TRUNC, 0644)) >= 0)
			close(fd);
	}
	snprintf(p, sizeof(p), "%s/f1", name);
	if ((fd = open(tm_path(m, p), O_WRONLY | O_TRUNC)) >= 0) {
		ASSERT_EQ(write(fd, "rewritten", 9), 9);
		close(fd);
	}
}

static void swapped_dirs(struct tmount *m)
{
	int fd;

	/* d: loaded by the daemon and on the backend with a file. */
	CHECK_SYS(mkdir(tm_path(m, "d"), 0755));
	cu_write_text(tm_path(m, "d/f1"), "inside");
	tm_sync(m);
	ASSERT_STR_EQ(cu_slurp(tm_path(m, "d/f1")), "inside");
	swap_for_symlink(m, "d", outside);
	/* lazy: on the backend from before the mount, listed but never opened. */
	swap_for_symlink(m, "lazy", outside2);

	write_under(m, "d");
	write_under(m, "lazy");
	if ((fd = open(m->mnt, O_RDONLY | O_DIRECTORY)) >= 0) {
		if (fsync(fd) < 0)
			fprintf(stderr, "fsync of the mount root after the swap: %s\n", strerror(errno));
		close(fd);
	}
	assert_untouched(outside);
	assert_untouched(outside2);
}

/* dir holds exactly the names in want (NULL-terminated). */
static void assert_holds(const char *dir, const char *const *want)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	size_t n = 0, found = 0;

	ASSERT_TRUE(d != NULL);
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		bool known = false;
		for (size_t k = 0; want[k]; k++)
			known |= !strcmp(de->d_name, want[k]);
		if (!known)
			FAILF("%s/%s was created outside the backend", dir, de->d_name);
		found++;
	}
	closedir(d);
	while (want[n])
		n++;
	ASSERT_EQ(found, n);
}

/* The moved directories hold what they held when they were moved. */
static void assert_moved_untouched(void)
{
	char p[PATH_MAX + 64];

	assert_holds(outside3, (const char *const[]){ "mv", "mv2", NULL });
	snprintf(p, sizeof(p), "%s/mv", outside3);
	assert_holds(p, (const char *const[]){ "f1", "sub", NULL });
	snprintf(p, sizeof(p), "%s/mv/sub", outside3);
	assert_holds(p, (const char *const[]){ "s1", NULL });
	snprintf(p, sizeof(p), "%s/mv2", outside3);
	assert_holds(p, (const char *const[]){ "f1", NULL });
	snprintf(p, sizeof(p), "%s/mv/f1", outside3);
	ASSERT_STR_EQ(cu_slurp(p), "inside");
	snprintf(p, sizeof(p), "%s/mv/sub/s1", outside3);
	ASSERT_STR_EQ(cu_slurp(p), "inside");
}

/*
 * Directories the daemon holds descriptors for are moved out of the
 * backend by their owner (rename(2) within the file system): a descriptor
 * follows its directory, but the daemon must act neither there nor in a
 * subdirectory.  mv's name is left empty: writes under it fail.  mv2's
 * name gets a new directory: writes under it land there, on the backend.
 * dp is moved deeper within the backend: still beneath it, so followed.
 */
static void moved_out(struct tmount *m)
{
	char to[PATH_MAX + 64];

	CHECK_SYS(mkdir(tm_path(m, "mv"), 0755));
	CHECK_SYS(mkdir(tm_path(m, "mv/sub"), 0755));
	CHECK_SYS(mkdir(tm_path(m, "mv2"), 0755));
	CHECK_SYS(mkdir(tm_path(m, "dp"), 0755));
	cu_write_text(tm_path(m, "dp/f1"), "inside");
	cu_write_text(tm_path(m, "mv/f1"), "inside");
	cu_write_text(tm_path(m, "mv/sub/s1"), "inside");
	cu_write_text(tm_path(m, "mv2/f1"), "inside");
	tm_sync(m);
	snprintf(to, sizeof(to), "%s/mv", outside3);
	CHECK_SYS(rename(tm_bpath(m, "mv"), to));
	snprintf(to, sizeof(to), "%s/mv2", outside3);
	CHECK_SYS(rename(tm_bpath(m, "mv2"), to));
	CHECK_SYS(mkdir(tm_bpath(m, "mv2"), 0755));
	CHECK_SYS(mkdir(tm_bpath(m, "arch"), 0755));
	CHECK_SYS(mkdir(tm_bpath(m, "arch/old"), 0755));
	CHECK_SYS(rename(tm_bpath(m, "dp"), tm_bpath(m, "arch/old/dp")));
	cu_write_text(tm_path(m, "mv2/new2"), "replaced");
	cu_write_text(tm_path(m, "dp/new3"), "followed");
	tm_sync(m);
	ASSERT_STR_EQ(cu_slurp(tm_bpath(m, "mv2/new2")), "replaced");
	ASSERT_STR_EQ(cu_slurp(tm_bpath(m, "arch/old/dp/new3")), "followed");
	write_under(m, "mv");
	write_under(m, "mv/sub");
	int fd = open(m->mnt, O_RDONLY | O_DIRECTORY);
	if (fd >= 0) {
		if (fsync(fd) < 0)
			fprintf(stderr, "fsync of the mount root after the move: %s\n", strerror(errno));
		close(fd);
	}
	assert_moved_untouched();
}

int main(void)
{
	struct tmount m;
	char rel[PATH_MAX + 64];

	tm_require_fuse();
	tm_init(&m, "confine");
	snprintf(outside, sizeof(outside), "%s/outside", m.root);
	snprintf(outside2, sizeof(outside2), "%s/outside2", m.root);
	CHECK_SYS(mkdir(outside, 0755));
	CHECK_SYS(mkdir(outside2, 0755));
	snprintf(outside3, sizeof(outside3), "%s/outside3", m.root);
	CHECK_SYS(mkdir(outside3, 0755));
	snprintf(rel, sizeof(rel), "%s/secret", outside);
	cu_write_text(rel, "outside");
	snprintf(rel, sizeof(rel), "%s/secret", outside2);
	cu_write_text(rel, "outside");
	CHECK_SYS(symlink(outside, tm_bpath(&m, "esc")));
	CHECK_SYS(symlink("../outside", tm_bpath(&m, "rel")));
	CHECK_SYS(mkdir(tm_bpath(&m, "lazy"), 0755));
	cu_write_text(tm_bpath(&m, ".ckptfs.t.000000000000.1"), "junk");
	CHECK_SYS(mkdir(tm_bpath(&m, "sub"), 0755));
	cu_write_text(tm_bpath(&m, "sub/.ckptfs.t.000000000000.1"), "junk");
	tm_mount(&m, "drain_timeout=3", NULL);	/* writes under mv stay refused */

	outside_symlink(&m);
	reserved_names(&m);
	swapped_dirs(&m);
	moved_out(&m);
	fprintf(stderr, "daemon exit status after the swap: %d\n", cu_stop_any(&m));
	assert_untouched(outside);
	assert_untouched(outside2);
	assert_moved_untouched();
	tm_cleanup(&m);
	return 0;
}
