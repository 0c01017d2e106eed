/*
 * rescuedir.c — the rescue directory is the daemon's own (issue 10 item 2's
 * rescue part; backend/rescue.c R1-R3).
 *
 *  - The mount is refused (exit 2, one line naming the path) when rescue_dir
 *    is a symlink, owned by another user, group- or world-writable (sticky
 *    or not), below a directory another user owns, or below a symlink.
 *  - A missing rescue_dir is created 0700; at exit, the data the backend
 *    refused is saved in a fresh per-mount directory (0700) whose files are
 *    0600.
 *  - A rescue_dir replaced by a symlink after the mount is refused at exit:
 *    nothing is written where it points, and the log says why.
 */
#include "tests/security/sec_util.h"

#include <dirent.h>

static struct tmount m;

static void refused(const char *rdir, const char *why)
{
	char opt[PATH_MAX + 32], err[4096];
	const char *argv[] = { "ckptfs", m.backend, m.mnt, "-f", "-o", opt, NULL };

	snprintf(opt, sizeof(opt), "cache_size=64M,rescue_dir=%s", rdir);
	int st = tm_run_daemon(argv, err, sizeof(err));
	if (st != 2)
		FAILF("rescue_dir=%s (%s): exit status %d, expected 2; output: %s", rdir, why, st, err);
	char *nl = strchr(err, '\n');
	if (!nl || nl[1] != '\0')
		FAILF("rescue_dir=%s (%s): expected one line, got: %s", rdir, why, err);
	if (!strstr(err, "rescue_dir") || !strstr(err, rdir) || !strstr(err, why))
		FAILF("rescue_dir=%s: the message should name the path and say '%s': %s", rdir, why, err);
	printf("refused as expected: %s", err);
}

static char *at_root(const char *name)
{
	return sec_root_path(&m, name);
}

/* The one entry of dir (a per-mount rescue directory; .seals holds the seal ledgers). */
static void only_entry(const char *dir, char *out, size_t len)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;
	ASSERT_TRUE(d != NULL);
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && strcmp(de->d_name, ".seals")) {
			snprintf(out, len, "%s/%s", dir, de->d_name);
			n++;
		}
	closedir(d);
	ASSERT_EQ(n, 1);
}

#define ASSERT_PERM(path, want)                                                   \
	do {                                                                      \
		mode_t got_ = sec_mode(path);                                     \
		if ((got_ & 07777) != (want) || sec_uid(path) != geteuid())        \
			FAILF("%s: mode %04o uid %u, expected %04o and ours", path, \
			      (unsigned)(got_ & 07777), (unsigned)sec_uid(path), (unsigned)(want)); \
	} while (0)

/* Mount with rescue_dir, leave a file the backend refuses, unmount: exit status. */
static int rescue_run(const char *rdir, void (*while_mounted)(void))
{
	char opts[PATH_MAX + 64];
	const char *env[] = { cu_fault_env("op=rename,err=EIO"), NULL };

	snprintf(opts, sizeof(opts), "cache_size=64M,drain_timeout=1,rescue_dir=%s", rdir);
	tm_mount(&m, opts, env);
	cu_write_text(tm_path(&m, "unpersisted"), "kept in the rescue");
	if (while_mounted)
		while_mounted();
	return cu_stop_any(&m);
}

static void swap_rescue(void)
{
	CHECK_SYS(rename(at_root("r.swap"), at_root("r.swap.old")));
	CHECK_SYS(symlink(at_root("outside"), at_root("r.swap")));
}

int main(void)
{
	char where[PATH_MAX * 2], files[PATH_MAX * 3], p[PATH_MAX * 4];

	cu_require_root();
	tm_require_fuse();
	tm_init(&m, "rescuedir");

	CHECK_SYS(mkdir(at_root("r.real"), 0700));
	CHECK_SYS(symlink(at_root("r.real"), at_root("r.link")));
	refused(at_root("r.link"), "symlink");
	CHECK_SYS(mkdir(at_root("r.other"), 0700));
	CHECK_SYS(chown(at_root("r.other"), 1000, 1000));
	refused(at_root("r.other"), "not owned");
	CHECK_SYS(mkdir(at_root("r.gw"), 0700));
	CHECK_SYS(chmod(at_root("r.gw"), 0770));
	refused(at_root("r.gw"), "writable");
	CHECK_SYS(mkdir(at_root("r.ww"), 0700));
	CHECK_SYS(chmod(at_root("r.ww"), 01777));
	refused(at_root("r.ww"), "writable");
	CHECK_SYS(mkdir(at_root("user"), 0755));
	CHECK_SYS(mkdir(at_root("user/rescue"), 0700));
	CHECK_SYS(chown(at_root("user"), 1000, 1000));
	refused(at_root("user/rescue"), "another user");
	CHECK_SYS(symlink(m.root, at_root("alias")));
	refused(at_root("alias/r.real"), "symlink");
	ASSERT_TRUE(!file_exists(at_root("user/rescue/x")));

	/* Missing: made 0700; the rescue inside it is fresh and private. */
	ASSERT_TRUE(rescue_run(at_root("r.new"), NULL) != 0);
	ASSERT_PERM(at_root("r.new"), 0700);
	only_entry(at_root("r.new"), where, sizeof(where));
	ASSERT_PERM(where, 0700);
	snprintf(files, sizeof(files), "%s/files", where);
	ASSERT_PERM(files, 0700);
	snprintf(p, sizeof(p), "%s/manifest.jsonl", where);
	ASSERT_PERM(p, 0600);
	snprintf(p, sizeof(p), "%s/unpersisted", files);
	ASSERT_PERM(p, 0600);
	ASSERT_STR_EQ(cu_slurp(p), "kept in the rescue");

	/* Swapped for a symlink after the mount: refused at exit, nothing outside. */
	CHECK_SYS(mkdir(at_root("outside"), 0700));
	CHECK_SYS(mkdir(at_root("r.swap"), 0700));
	char *before = sec_tree_state(at_root("outside"));
	ASSERT_TRUE(rescue_run(at_root("r.swap"), swap_rescue) != 0);
	sec_assert_unchanged("a rescue into a swapped rescue_dir", at_root("outside"), before);
	free(before);
	snprintf(p, sizeof(p), "%s is a symlink", at_root("r.swap"));
	if (!sec_log_wait(&m, "rescue directory", p, 1))
		FAILF("the log does not say the rescue directory was refused (\"%s\")", p);
	tm_cleanup(&m);
	return 0;
}
