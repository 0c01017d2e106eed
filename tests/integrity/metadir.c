/*
 * metadir.c — the daemon's own metadata on the backend is the daemon's
 * (issue 10 items 2 and 5): BACKEND/.ckptfs, .ckptfs/nodes and
 * nodes/<node> are created by the daemon (0755, owned by the user who
 * mounts), and at every mount a planted symlink, a directory or file owned
 * by someone else, group/other write, or a hard link refuses the mount:
 * exit 2 and one line naming the path.  Nothing outside the backend is
 * ever followed: after each attempt the outside target has the same
 * content, mode and size.  Stale temp names (state.json.tmp,
 * manifest.log.tmp) that are symlinks are removed, never written through.
 * `ckptfs-ctl verify` skips node directories and logs that another user
 * owns, with a warning, and never trusts their records.
 *
 * "Another user" is uid 4242 (no passwd entry is needed for ownership).
 */
#include "tests/integrity/integ.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define OTHER_UID 4242

static char node[256];
static char outside_dir[PATH_MAX], outside_file[PATH_MAX + 16];

struct outside {
	struct stat st;
	char *content;
	size_t len;
};

static struct outside outside_state(void)
{
	struct outside o;
	CHECK_SYS(lstat(outside_file, &o.st));
	o.content = read_file(outside_file, &o.len);
	ASSERT_TRUE(o.content != NULL);
	return o;
}

/* The outside file and directory are exactly as they were. */
static void outside_unchanged(const struct outside *was, const char *what)
{
	struct outside now = outside_state();
	if (now.len != was->len || memcmp(now.content, was->content, now.len) ||
	    now.st.st_mode != was->st.st_mode || now.st.st_size != was->st.st_size ||
	    now.st.st_uid != was->st.st_uid)
		FAILF("%s: the file outside the backend changed (mode %o -> %o, %zu -> %zu bytes)",
		      what, was->st.st_mode, now.st.st_mode, was->len, now.len);
	free(now.content);
	DIR *d = opendir(outside_dir);
	int n = 0;
	for (struct dirent *de; (de = readdir(d));)
		n += de->d_name[0] != '.';
	closedir(d);
	if (n != 1)
		FAILF("%s: something was created in the directory outside the backend (%d entries)", what, n);
}

static const char *meta(struct tmount *m, const char *rel)
{
	static char buf[4][PATH_MAX * 3];
	static int k;
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof(buf[k]), "%.4000s/.ckptfs%s%.4000s", m->backend, *rel ? "/" : "", rel);
	return buf[k];
}

static void rm_meta(struct tmount *m)
{
	const char *argv[] = { "rm", "-rf", meta(m, ""), NULL };
	ASSERT_EQ(tm_run(argv, NULL), 0);
}

/* A mount attempt (the daemon forks: its exit status is the verdict). */
static int try_mount(struct tmount *m, char *out, size_t len)
{
	const char *argv[] = { "ckptfs", m->backend, m->mnt, "-o", "cache_size=64M", NULL };
	return tm_run_daemon(argv, out, len);
}

/* The mount must be refused with exit 2 and a line naming `path` and `problem`. */
static void refused(struct tmount *m, const char *what, const char *path, const char *problem)
{
	char out[4096];
	struct outside was = outside_state();
	int st = try_mount(m, out, sizeof(out));

	if (st == 0) {
		cu_unmount(m->mnt);
		FAILF("%s: the mount came up", what);
	}
	if (st != 2)
		FAILF("%s: exit %d, expected 2 (%s)", what, st, out);
	if (!strstr(out, path) || !strstr(out, problem))
		FAILF("%s: the message does not name '%s' and '%s': %s", what, path, problem, out);
	if (strchr(out, '\n') != out + strlen(out) - 1)
		FAILF("%s: the message is not one line: %s", what, out);
	outside_unchanged(&was, what);
	free(was.content);
	printf("refused: %s: %s", what, out);
}

/* The mount comes up, the planted name was never followed, and it unmounts cleanly. */
static void accepted(struct tmount *m, const char *what)
{
	struct outside was = outside_state();
	tm_mount(m, NULL, NULL);
	write_file(tm_path(m, "f"), "x", 1);
	tm_stop(m);
	outside_unchanged(&was, what);
	free(was.content);
	printf("accepted, not followed: %s\n", what);
}

/* Make the daemon's own metadata by mounting once. */
static void fresh_meta(struct tmount *m)
{
	rm_meta(m);
	tm_mount(m, NULL, NULL);
	tm_stop(m);
}

static void created_right(struct tmount *m)
{
	struct stat st;
	char nd[PATH_MAX];

	snprintf(nd, sizeof(nd), "nodes/%s", node);
	for (int i = 0; i < 3; i++) {
		const char *rel = i == 0 ? "" : i == 1 ? "nodes" : nd;
		CHECK_SYS(lstat(meta(m, rel), &st));
		if (!S_ISDIR(st.st_mode) || (st.st_mode & 07777) != 0755 || st.st_uid != geteuid())
			FAILF("%s: mode %o uid %u, expected a directory 0755 of uid %u", meta(m, rel),
			      st.st_mode, st.st_uid, geteuid());
	}
	printf("created: .ckptfs, nodes, nodes/%s: 0755, owned by the mounting user\n", node);
}

static void verify_skips_foreign_node(struct tmount *m)
{
	char dir[PATH_MAX], log[PATH_MAX + 16], *out;
	/* Another user's node claims a digest for f that is not its content. */
	const char *p = "{\"t\": \"file\", \"m\": \"evil00000001\", \"seq\": 1, \"time\": 9999999999999999999, "
			"\"path\": \"f\", \"size\": 1, \"xxh3\": \"00000000000000000000000000000000\"}";
	char rec[1024];

	rm_meta(m);
	tm_mount(m, NULL, NULL);
	write_file(tm_path(m, "f"), "x", 1);
	tm_stop(m);
	snprintf(rec, sizeof(rec), "C1 %08zx %016llx %s\n", strlen(p),
		 (unsigned long long)it_hash64(p, strlen(p)), p);
	snprintf(dir, sizeof(dir), "%s", meta(m, "nodes/evil"));
	CHECK_SYS(mkdir(dir, 0755));
	snprintf(log, sizeof(log), "%s/manifest.log", dir);
	write_file(log, rec, strlen(rec));
	it_verify(m->backend, 0, &out);
	ASSERT_STR_EQ(it_verdict(out, "f"), "MISMATCH");	/* root's node dir: trusted */
	free(out);
	CHECK_SYS(chown(dir, OTHER_UID, OTHER_UID));
	CHECK_SYS(chown(log, OTHER_UID, OTHER_UID));
	ASSERT_EQ(it_verify(m->backend, 0, &out), 0);
	ASSERT_STR_EQ(it_verdict(out, "f"), "OK");
	if (!strstr(out, "nodes/evil") || !strstr(out, "owned by uid 4242"))
		FAILF("verify did not warn about the foreign node directory: %s", out);
	free(out);
	/* Owned by root but writable by others: not trusted either. */
	CHECK_SYS(chown(dir, 0, 0));
	CHECK_SYS(chmod(dir, 0777));
	ASSERT_EQ(it_verify(m->backend, 0, &out), 0);
	ASSERT_STR_EQ(it_verdict(out, "f"), "OK");
	ASSERT_TRUE(strstr(out, "writable by group or others") != NULL);
	free(out);
	const char *rm[] = { "rm", "-rf", dir, NULL };
	tm_run(rm, NULL);
	/* .ckptfs made by another user (one who may write the backend's root): not read. */
	char who[32];
	snprintf(who, sizeof(who), "%d:%d", OTHER_UID, OTHER_UID);
	const char *chown_other[] = { "chown", "-R", who, meta(m, ""), NULL };
	ASSERT_EQ(tm_run(chown_other, NULL), 0);
	ASSERT_NE(it_verify(m->backend, 0, &out), 0);
	if (!strstr(out, "owned by uid 4242, neither root nor you"))
		FAILF("verify read a .ckptfs another user made: %s", out);
	free(out);
	const char *chown_back[] = { "chown", "-R", "0:0", meta(m, ""), NULL };
	ASSERT_EQ(tm_run(chown_back, NULL), 0);
	/* A symlink at .ckptfs: verify does not follow it. */
	char real[PATH_MAX + 8];
	snprintf(real, sizeof(real), "%s.real", meta(m, ""));
	CHECK_SYS(rename(meta(m, ""), real));
	CHECK_SYS(symlink(real, meta(m, "")));
	ASSERT_NE(it_verify(m->backend, 0, &out), 0);
	ASSERT_TRUE(strstr(out, "symlink") != NULL);
	free(out);
	CHECK_SYS(unlink(meta(m, "")));
	CHECK_SYS(rename(real, meta(m, "")));
	printf("verify: another user's node directory and a group-writable one are skipped, "
	       "another user's or a symlinked .ckptfs is not read\n");
}

int main(void)
{
	struct tmount m;
	char target[PATH_MAX * 2], path[PATH_MAX];

	tm_require_fuse();
	cu_require_root();
	if (gethostname(node, sizeof(node) - 1) < 0 || (node[strcspn(node, ".")] = '\0', !node[0]))
		snprintf(node, sizeof(node), "localhost");
	tm_init(&m, "metadir");
	snprintf(outside_dir, sizeof(outside_dir), "%s/outside", m.root);
	snprintf(outside_file, sizeof(outside_file), "%s/secret", outside_dir);
	CHECK_SYS(mkdir(outside_dir, 0700));
	write_file(outside_file, "root's secret\n", 14);
	CHECK_SYS(chmod(outside_file, 0600));

	fresh_meta(&m);
	created_right(&m);
	snprintf(path, sizeof(path), "nodes/%s", node);

	/* Directories: a symlink where each should be. */
	rm_meta(&m);
	CHECK_SYS(symlink(outside_dir, meta(&m, "")));
	refused(&m, "symlink at .ckptfs", meta(&m, ""), "symlink");
	CHECK_SYS(unlink(meta(&m, "")));
	CHECK_SYS(mkdir(meta(&m, ""), 0755));
	CHECK_SYS(symlink(outside_dir, meta(&m, "nodes")));
	refused(&m, "symlink at .ckptfs/nodes", meta(&m, "nodes"), "symlink");
	CHECK_SYS(unlink(meta(&m, "nodes")));
	CHECK_SYS(mkdir(meta(&m, "nodes"), 0755));
	CHECK_SYS(symlink(outside_dir, meta(&m, path)));
	refused(&m, "symlink at nodes/<host>", meta(&m, path), "symlink");
	CHECK_SYS(unlink(meta(&m, path)));

	/* Files: a symlink at the log and the state file; an outside hard link. */
	static const char *const files[] = { "manifest.log", "state.json" };
	for (int i = 0; i < 2; i++) {
		fresh_meta(&m);
		snprintf(target, sizeof(target), "%s/%s", path, files[i]);
		CHECK_SYS(unlink(meta(&m, target)));
		CHECK_SYS(symlink(outside_file, meta(&m, target)));
		char what[64];
		snprintf(what, sizeof(what), "symlink at %s", files[i]);
		refused(&m, what, meta(&m, target), "symlink");
	}
	fresh_meta(&m);
	snprintf(target, sizeof(target), "%s/manifest.log", path);
	CHECK_SYS(unlink(meta(&m, target)));
	CHECK_SYS(link(outside_file, meta(&m, target)));
	refused(&m, "hard link at manifest.log", meta(&m, target), "hard links");
	CHECK_SYS(unlink(meta(&m, target)));

	/* Stale temp names: removed, never written through. */
	static const char *const temps[] = { "state.json.tmp", "manifest.log.tmp" };
	for (int i = 0; i < 2; i++) {
		fresh_meta(&m);
		snprintf(target, sizeof(target), "%s/%s", path, temps[i]);
		CHECK_SYS(symlink(outside_file, meta(&m, target)));
		char what[64];
		snprintf(what, sizeof(what), "symlink at %s", temps[i]);
		accepted(&m, what);
		struct stat st;
		if (lstat(meta(&m, target), &st) == 0)
			FAILF("%s is still there after a mount", temps[i]);
	}
	snprintf(target, sizeof(target), "%s/state.json", path);
	struct stat st;
	CHECK_SYS(lstat(meta(&m, target), &st));
	ASSERT_TRUE(S_ISREG(st.st_mode));

	/* Ownership and mode. */
	fresh_meta(&m);
	CHECK_SYS(chown(meta(&m, ""), OTHER_UID, OTHER_UID));
	refused(&m, ".ckptfs owned by another user", meta(&m, ""), "owned by uid 4242");
	CHECK_SYS(chown(meta(&m, ""), 0, 0));
	CHECK_SYS(chown(meta(&m, path), OTHER_UID, OTHER_UID));
	refused(&m, "nodes/<host> owned by another user", meta(&m, path), "owned by uid 4242");
	CHECK_SYS(chown(meta(&m, path), 0, 0));
	CHECK_SYS(chmod(meta(&m, "nodes"), 0777));
	refused(&m, ".ckptfs/nodes writable by all", meta(&m, "nodes"), "writable by group or others");
	CHECK_SYS(chmod(meta(&m, "nodes"), 0755));
	snprintf(target, sizeof(target), "%s/manifest.log", path);
	CHECK_SYS(chown(meta(&m, target), OTHER_UID, OTHER_UID));
	refused(&m, "manifest.log owned by another user", meta(&m, target), "owned by uid 4242");
	CHECK_SYS(chown(meta(&m, target), 0, 0));
	accepted(&m, "everything back as the daemon made it");

	verify_skips_foreign_node(&m);
	tm_cleanup(&m);
	return 0;
}
