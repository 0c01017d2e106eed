/*
 * rootpaths.c — the paths a root daemon is handed on its command line
 * (backend/safepath.h): a user who can write somewhere along them must not
 * be able to point the daemon elsewhere.
 *
 *  - a backend reached through a symlink a user planted (their job
 *    directory pointing at a root-only directory): refused, exit 2, the
 *    symlink named; nothing made in the directory it points to (before,
 *    the daemon made .ckptfs/ there as root and served it);
 *  - the same through a symlink root owns: followed (an administrator's
 *    /lustre -> /mnt/lustre);
 *  - a mount point through a user's symlink (it would have covered any
 *    directory they name, /usr/bin included, for every user), inside a
 *    directory a user owns, owned by a user inside a sticky world-writable
 *    directory, or inside a group-writable directory: refused, exit 2, the
 *    reason named, nothing mounted;
 *  - a root-owned mount point inside a sticky directory: mounted.
 */
#include "tests/security/sec_util.h"

#define USER_A 61902

static struct tmount m;

static char *at(const char *rel)
{
	return sec_root_path(&m, rel);
}

static void make_dir(const char *rel, mode_t mode, uid_t uid)
{
	CHECK_SYS(mkdir(at(rel), mode));
	CHECK_SYS(chmod(at(rel), mode));
	CHECK_SYS(chown(at(rel), uid, uid));
}

static void make_link(const char *target, const char *rel, uid_t uid)
{
	CHECK_SYS(symlink(target, at(rel)));
	CHECK_SYS(lchown(at(rel), uid, uid));
}

/* The daemon on (backend, mnt), both under m.root: it must refuse, naming `want`. */
static void refused(const char *what, const char *backend, const char *mnt, const char *want)
{
	char err[4096], b[PATH_MAX], t[PATH_MAX];
	const char *argv[] = { "ckptfs", b, t, "-o", "cache_size=256M", NULL };

	snprintf(b, sizeof(b), "%s", at(backend));
	snprintf(t, sizeof(t), "%s", at(mnt));
	int rc = tm_run_daemon(argv, err, sizeof(err));
	if (rc == 0)
		cu_unmount_busy(t);
	if (rc != 2 || !strstr(err, want))
		FAILF("%s: exit %d, wanted 2 with '%s' in:\n%s", what, rc, want, err);
	ASSERT_EQ(cu_mount_count(t), 0);
	printf("refused: %s: %s", what, err);
}

/* The daemon on (backend, mnt) comes up; the mount serves `real`'s files. */
static void accepted(const char *what, const char *backend, const char *mnt, const char *real)
{
	char err[4096], b[PATH_MAX], t[PATH_MAX], probe[PATH_MAX + 16];
	const char *argv[] = { "ckptfs", b, t, "-o", "cache_size=256M", NULL };

	snprintf(b, sizeof(b), "%s", at(backend));
	snprintf(t, sizeof(t), "%s", at(mnt));
	if (tm_run_daemon(argv, err, sizeof(err)) != 0)
		FAILF("%s: the mount failed:\n%s", what, err);
	snprintf(probe, sizeof(probe), "%s/probe", t);
	cu_write_text(probe, "p");
	cu_unmount_busy(t);	/* the probe's release may hold it for a moment */
	snprintf(probe, sizeof(probe), "%s/probe", at(real));
	ASSERT_TRUE(cu_wait_exists(probe, 10000));
	printf("accepted: %s\n", what);
}

int main(void)
{
	cu_require_root();
	tm_require_fuse();
	tm_init(&m, "rootpaths");
	CHECK_SYS(chmod(m.root, 0755));

	make_dir("victim", 0700, 0);		/* root's: no user may have the daemon act there */
	cu_write_text(at("victim/secret"), "root only\n");
	char *victim_was = sec_tree_state(at("victim"));
	make_dir("u", 0755, USER_A);		/* a user's directory (a job directory) */
	make_link(at("victim"), "u/backend", USER_A);
	make_link(at("victim"), "u/mnt", USER_A);
	make_dir("u/real-mnt", 0755, USER_A);
	make_dir("sticky", 01777, 0);
	make_dir("sticky/umnt", 0755, USER_A);
	make_dir("sticky/rmnt", 0755, 0);
	make_dir("group", 0775, 0);
	make_dir("group/mnt", 0755, 0);
	make_link(at("backend"), "rootlink", 0);
	make_dir("backend2", 0755, 0);	/* the first accepted daemon may still be draining */

	refused("a backend through a user's symlink", "u/backend", "mnt",
		"is a symlink owned by uid 61902");
	refused("a backend below a user's symlink", "u/backend/.", "mnt",
		"is a symlink owned by uid 61902");
	sec_assert_unchanged("the directory a user's backend symlink points to", at("victim"),
			     victim_was);
	refused("a mount point through a user's symlink", "backend", "u/mnt",
		"u is owned by another user");
	ASSERT_EQ(cu_mount_count(at("victim")), 0);
	refused("a mount point in a user's directory", "backend", "u/real-mnt",
		"is owned by another user");
	refused("a user's mount point in a sticky directory", "backend", "sticky/umnt",
		"is owned by uid 61902 in a directory others may write");
	refused("a mount point in a group-writable directory", "backend", "group/mnt",
		"is writable by others without the sticky bit");
	sec_assert_unchanged("the directory the user's symlinks point to", at("victim"), victim_was);

	accepted("a backend through root's symlink", "rootlink", "mnt", "backend");
	accepted("root's mount point in a sticky directory", "backend2", "sticky/rmnt", "backend2");
	free(victim_was);
	tm_cleanup(&m);
	return 0;
}
