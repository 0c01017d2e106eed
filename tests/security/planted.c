/*
 * planted.c — a symlink planted on the backend is never followed (issue 10
 * item 1; backend/bsys.h C1-C3).
 *
 * Root mounts with allow_other, as from fstab.  Before the mount, the
 * backend holds, in a sticky world-writable directory pub/, per case, an
 * object owned by that case's user (a user of its own, so that under any
 * publisher one refused operation cannot hold back another case): a file
 * F.<op>, a directory D.<op>, or a file inside a directory P.<op>/x.  The daemon learns them (the root is listed; F's
 * xattrs are loaded, except where loading is the case), then the backend's
 * object is replaced by a symlink to OUTSIDE — a root-owned 0600 file, or a
 * root-owned 0700 directory holding x and sub/ — as any user who can write
 * to the backend could.  The case's user then performs the operation
 * through the mount.
 *
 * What must hold in every case: OUTSIDE is unchanged (contents, mode,
 * owner, times, xattrs, entries).  And per case, either the operation is
 * refused — at once to the caller or when the publisher applies it — with a
 * "refused to ..." line naming the planted name in the daemon log, or it is
 * an operation on the name itself (rename, link, unlink of a planted
 * symlink move or remove the link, which follows nothing) and the backend
 * shows exactly that.  The matrix is printed for the closing note.
 */
#include "tests/security/sec_util.h"

#include <sys/xattr.h>

enum place { FILE_P, DIR_P, PARENT_P, NPLACES };
static const char *const place_name[NPLACES] = { "file", "dir", "parent dir" };
static const char place_prefix[NPLACES] = { 'F', 'D', 'P' };

enum expect { NA, REFUSED, NAME_ONLY };

enum op {
	O_CHMOD, O_CHOWN, O_UTIMENS, O_TRUNCATE, O_SETXATTR, O_RMXATTR, O_GETXATTR,
	O_LISTXATTR, O_RENAME, O_LINK, O_UNLINK, O_RMDIR, O_READ, O_REWRITE, O_MKDIR_IN,
	O_CREATE_IN, NOPS
};

static const struct {
	const char *name;
	enum expect e[NPLACES];	/* file, dir, parent dir */
} ops[NOPS] = {
	[O_CHMOD] = { "chmod", { REFUSED, REFUSED, REFUSED } },
	[O_CHOWN] = { "chown", { REFUSED, REFUSED, REFUSED } },
	[O_UTIMENS] = { "utimens", { REFUSED, REFUSED, REFUSED } },
	[O_TRUNCATE] = { "truncate", { REFUSED, NA, REFUSED } },
	[O_SETXATTR] = { "setxattr", { REFUSED, REFUSED, REFUSED } },
	[O_RMXATTR] = { "removexattr", { REFUSED, REFUSED, REFUSED } },
	[O_GETXATTR] = { "getxattr-unloaded", { REFUSED, REFUSED, REFUSED } },
	[O_LISTXATTR] = { "listxattr-unloaded", { REFUSED, REFUSED, REFUSED } },
	[O_RENAME] = { "rename", { REFUSED, REFUSED, REFUSED } },	/* C5: not the owner's */
	[O_LINK] = { "link", { NAME_ONLY, NA, REFUSED } },
	[O_UNLINK] = { "unlink", { NAME_ONLY, NA, REFUSED } },
	[O_RMDIR] = { "rmdir", { NA, REFUSED, NA } },
	[O_READ] = { "open-read", { REFUSED, NA, REFUSED } },
	[O_REWRITE] = { "open-rewrite", { REFUSED, NA, REFUSED } },
	[O_MKDIR_IN] = { "mkdir-inside", { NA, REFUSED, REFUSED } },
	[O_CREATE_IN] = { "create-inside", { NA, REFUSED, REFUSED } },
};

#define UID0 3000

static struct tmount m;
static char outside[PATH_MAX], outside_file[PATH_MAX + 16], outside_dir[PATH_MAX + 16];

struct kase {
	enum op op;
	enum place place;
	uid_t uid;
	char top[64];		/* the planted object, pub/<name> */
	char target[96];	/* what the operation names, below the mount */
};

static uid_t case_uid(enum op op, enum place p) { return UID0 + (uid_t)(op * NPLACES + p); }

static void case_init(struct kase *k, enum op op, enum place p)
{
	k->op = op;
	k->place = p;
	k->uid = case_uid(op, p);
	snprintf(k->top, sizeof(k->top), "pub/%c.%s", place_prefix[p], ops[op].name);
	snprintf(k->target, sizeof(k->target), "pub/%c.%s%s", place_prefix[p], ops[op].name,
		 p == PARENT_P ? "/x" : "");
}

/* ---- the operations, as the case's user ---------------------------------- */

static const struct kase *cur;

static int do_op(void *arg)
{
	const char *t = tm_path(&m, cur->target);
	char p[PATH_MAX], buf[64];
	struct timespec ts[2] = { { 1000000, 0 }, { 2000000, 0 } };
	int fd;

	switch (cur->op) {
	case O_CHMOD: return SEC_ERR(chmod(t, 0777));
	case O_CHOWN: return SEC_ERR(chown(t, (uid_t)-1, cur->uid));
	case O_UTIMENS: return SEC_ERR(utimensat(AT_FDCWD, t, ts, 0));
	case O_TRUNCATE: return SEC_ERR(truncate(t, 2));
	case O_SETXATTR: return SEC_ERR(setxattr(t, "user.new", "1", 1, 0));
	case O_RMXATTR: return SEC_ERR(removexattr(t, "user.k"));
	case O_GETXATTR: return SEC_ERR(getxattr(t, "user.k", buf, sizeof(buf)));
	case O_LISTXATTR: return SEC_ERR(listxattr(t, buf, sizeof(buf)));
	case O_RENAME:
		snprintf(p, sizeof(p), "%s.renamed", t);
		return SEC_ERR(rename(t, p));
	case O_LINK:
		snprintf(p, sizeof(p), "%s.link", t);
		return SEC_ERR(link(t, p));
	case O_UNLINK: return SEC_ERR(unlink(t));
	case O_RMDIR: return SEC_ERR(rmdir(t));
	case O_READ:
		if ((fd = open(t, O_RDONLY)) < 0)
			return errno;
		if (read(fd, buf, sizeof(buf)) < 0)
			return errno;
		return SEC_ERR(close(fd));
	case O_REWRITE:
		if ((fd = open(t, O_WRONLY)) < 0)
			return errno;
		if (pwrite(fd, "new", 3, 0) < 0)
			return errno;
		return SEC_ERR(close(fd));
	case O_MKDIR_IN:
		snprintf(p, sizeof(p), "%s/newdir", t);
		return SEC_ERR(mkdir(p, 0755));
	case O_CREATE_IN:
		snprintf(p, sizeof(p), "%s/new", t);
		if ((fd = open(p, O_CREAT | O_WRONLY | O_EXCL, 0644)) < 0)
			return errno;
		if (write(fd, "new", 3) != 3)
			return errno;
		return SEC_ERR(close(fd));
	default:
		return EINVAL;
	}
}

/* ---- setup ---------------------------------------------------------------- */

/* A root-owned secret with fixed times and an xattr. */
static void make_secret(const char *path)
{
	struct timespec ts[2] = { { 978307200, 0 }, { 978307200, 0 } };
	cu_write_text(path, "outside: must never change\n");
	CHECK_SYS(chmod(path, 0600));
	CHECK_SYS(setxattr(path, "user.mark", "orig", 4, 0));
	CHECK_SYS(utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW));
}

static void make_outside(void)
{
	char p[PATH_MAX + 32];

	snprintf(outside, sizeof(outside), "%s/outside", m.root);
	snprintf(outside_file, sizeof(outside_file), "%s/secret", outside);
	snprintf(outside_dir, sizeof(outside_dir), "%s/dir", outside);
	CHECK_SYS(mkdir(outside, 0755));
	make_secret(outside_file);
	CHECK_SYS(mkdir(outside_dir, 0700));
	snprintf(p, sizeof(p), "%s/x", outside_dir);
	make_secret(p);
	snprintf(p, sizeof(p), "%s/sub", outside_dir);
	CHECK_SYS(mkdir(p, 0700));
}

/* The case's object on the backend, before the mount. */
static void make_object(const struct kase *k)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s", tm_bpath(&m, k->top));
	if (k->place != FILE_P) {
		CHECK_SYS(mkdir(p, 0755));
		CHECK_SYS(chown(p, k->uid, 0));
		if (k->op == O_RMDIR)
			return;
		snprintf(p, sizeof(p), "%s/x", tm_bpath(&m, k->top));
	}
	cu_write_text(p, "inside");
	CHECK_SYS(setxattr(p, "user.k", "v", 1, 0));
	CHECK_SYS(chown(p, k->uid, 0));
	if (k->place == FILE_P)
		return;
	CHECK_SYS(setxattr(tm_bpath(&m, k->top), "user.k", "v", 1, 0));
}

/* Replace the backend's object by a symlink to outside (the dir moved aside). */
static void plant(const struct kase *k)
{
	char moved[PATH_MAX];

	if (k->place == FILE_P) {
		CHECK_SYS(unlink(tm_bpath(&m, k->top)));
		CHECK_SYS(symlink(outside_file, tm_bpath(&m, k->top)));
	} else {
		snprintf(moved, sizeof(moved), "%s.moved", tm_bpath(&m, k->top));
		CHECK_SYS(rename(tm_bpath(&m, k->top), moved));
		CHECK_SYS(symlink(outside_dir, tm_bpath(&m, k->top)));
	}
}

/* ---- judging ---------------------------------------------------------------- */

static bool is_link_to(const char *path, const char *target)
{
	char buf[PATH_MAX];
	ssize_t n = readlink(path, buf, sizeof(buf) - 1);
	if (n < 0)
		return false;
	buf[n] = '\0';
	return strcmp(buf, target) == 0;
}

/* The backend shows the name-only operation done to the link itself. */
static bool name_op_done(const struct kase *k)
{
	char p[PATH_MAX];
	const char *to = k->place == FILE_P ? outside_file : outside_dir;

	switch (k->op) {
	case O_RENAME:
		snprintf(p, sizeof(p), "%s.renamed", tm_bpath(&m, k->top));
		return is_link_to(p, to) && access(tm_bpath(&m, k->top), F_OK) != 0;
	case O_LINK:
		snprintf(p, sizeof(p), "%s.link", tm_bpath(&m, k->top));
		return is_link_to(p, to) && is_link_to(tm_bpath(&m, k->top), to);
	case O_UNLINK: {
		struct stat st;
		return lstat(tm_bpath(&m, k->top), &st) < 0 && errno == ENOENT;
	}
	default:
		return false;
	}
}

static bool wait_name_op(const struct kase *k)
{
	for (uint64_t t0 = mono_ms(); mono_ms() - t0 < 5000; usleep(20000))
		if (name_op_done(k))
			return true;
	return false;
}

static char cell[NOPS][NPLACES][48];

static void run_case(const struct kase *k, const char *state)
{
	char quoted[80], what[160];
	int err;

	snprintf(what, sizeof(what), "%s on a symlink planted at the %s's place",
		 ops[k->op].name, place_name[k->place]);
	cur = k;
	err = tm_as_user(k->uid, k->uid, do_op, NULL);
	if (ops[k->op].e[k->place] == REFUSED) {
		snprintf(quoted, sizeof(quoted), "'%s'", k->top + 4);	/* its name */
		/* Wait for the verdict first: an applied operation must have had its chance. */
		bool logged = sec_log_wait(&m, "refused to", quoted, 5000);
		sec_assert_unchanged(what, outside, state);
		if (!logged)
			FAILF("%s: no refusal naming %s in the daemon log (the caller got %s)", what,
			      quoted, err ? strerror(err) : "success");
		if (err)
			snprintf(cell[k->op][k->place], sizeof(cell[0][0]), "refused: %s",
				 err == ELOOP ? "ELOOP" : strerror(err));
		else
			snprintf(cell[k->op][k->place], sizeof(cell[0][0]), "refused at publish");
	} else {
		bool done = !err && wait_name_op(k);
		sec_assert_unchanged(what, outside, state);
		if (err)
			FAILF("%s: the caller got %s; an operation on the name should work", what,
			      strerror(err));
		if (!done)
			FAILF("%s: the backend does not show it done to the link itself", what);
		snprintf(cell[k->op][k->place], sizeof(cell[0][0]), "link itself (ok)");
	}
}

int main(void)
{
	struct kase cases[NOPS * NPLACES];
	unsigned n = 0;
	char opts[PATH_MAX + 128], p[PATH_MAX];

	cu_require_root();
	tm_require_fuse();
	tm_init(&m, "planted");
	CHECK_SYS(chmod(m.root, 0755));		/* the users must reach the mount */
	make_outside();
	CHECK_SYS(mkdir(tm_bpath(&m, "pub"), 0777));
	CHECK_SYS(chmod(tm_bpath(&m, "pub"), 01777));	/* like /tmp: each user owns theirs */
	for (int o = 0; o < NOPS; o++)
		for (int pl = 0; pl < NPLACES; pl++)
			if (ops[o].e[pl] != NA) {
				case_init(&cases[n], (enum op)o, (enum place)pl);
				make_object(&cases[n++]);
			}
	char *state = sec_tree_state(outside);

	snprintf(opts, sizeof(opts), "allow_other,cache_size=64M,drain_timeout=2,rescue_dir=%s/rescue",
		 m.root);
	tm_mount(&m, opts, NULL);
	/* What the daemon knows before the plant: every name, and F's xattrs. */
	for (unsigned i = 0; i < n; i++) {
		struct stat st;
		CHECK_SYS(lstat(tm_path(&m, cases[i].top), &st));
		ASSERT_TRUE(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode));
		if (cases[i].place == FILE_P && cases[i].op != O_GETXATTR && cases[i].op != O_LISTXATTR)
			ASSERT_GE(listxattr(tm_path(&m, cases[i].top), p, sizeof(p)), 0);
	}
	for (unsigned i = 0; i < n; i++)
		plant(&cases[i]);
	for (unsigned i = 0; i < n; i++)
		run_case(&cases[i], state);

	printf("planted-symlink matrix (operation x planted place -> outcome; outside unchanged in all %u cases)\n", n);
	printf("%-20s %-22s %-22s %-22s\n", "operation", place_name[0], place_name[1], place_name[2]);
	for (int o = 0; o < NOPS; o++)
		printf("%-20s %-22s %-22s %-22s\n", ops[o].name,
		       cell[o][0][0] ? cell[o][0] : "-", cell[o][1][0] ? cell[o][1] : "-",
		       cell[o][2][0] ? cell[o][2] : "-");
	cu_stop_any(&m);
	sec_assert_unchanged("after unmount", outside, state);
	free(state);
	tm_cleanup(&m);
	return 0;
}
