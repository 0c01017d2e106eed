/*
 * setid.c — files are born private, and set-ID bits behave as on a local
 * file system (issue 10 item 3; backend/flush.c temp_create and
 * flush_finish_attrs; fs/ops.c setid_kill_locked, new_child).
 *
 * Root mounts with allow_other; users A (1000) and B (1001) work in a
 * world-writable directory.
 *  - Born private: A writes a 12 MiB file and makes it set-user-ID (04755)
 *    before closing it, as install(1) does.  While the flusher writes its
 *    temporary file and holds it (CKPTFS_FAULT slows each write and delays
 *    the fchown that follows the data), it is 0600 and root's: never
 *    root-owned with a set-ID bit, never readable by others.  Published:
 *    04755, A's, with A's data.
 *  - A write, a truncate or an O_TRUNC open by B — or by A, the owner, as
 *    on a local file system — clears S_ISUID, and S_ISGID where
 *    group-execute is set; S_ISGID without it stays; root's write keeps
 *    them — through the mount at once and on the backend.
 *  - In a set-group-ID directory of a group A is not in: A's new file takes
 *    the group without S_ISGID, A's new directory takes group and bit; A's
 *    chmod g+s there is dropped, on a file of A's own group it is kept.
 */
#include "tests/security/sec_util.h"

#include <dirent.h>
#include <sys/wait.h>
#include <sys/xattr.h>

#define A 1000
#define B 1001
#define G 4242
#define BIG (12 * MiB)

static struct tmount m;
static char flag[PATH_MAX];
static const char *arg_path;
static mode_t arg_mode;

/* ---- what the users do ------------------------------------------------------ */

/*
 * Create, write, then chmod to the final mode before close, as install(1)
 * does: a write by anyone but root clears S_ISUID, the owner's too.
 */
static int create_big(void *unused)
{
	char *buf = malloc(MiB);
	int fd = open(arg_path, O_CREAT | O_WRONLY | O_EXCL, arg_mode & 0777);
	if (fd < 0)
		return errno;
	for (uint64_t off = 0; off < BIG; off += MiB) {
		fill_pattern(buf, MiB, 77, off);
		if (pwrite(fd, buf, MiB, (off_t)off) != (ssize_t)MiB)
			return errno;
	}
	free(buf);
	if (fchmod(fd, arg_mode) < 0)
		return errno;
	return SEC_ERR(close(fd));
}

static int create_small(void *unused)
{
	int fd = open(arg_path, O_CREAT | O_WRONLY | O_EXCL, arg_mode);
	if (fd < 0)
		return errno;
	if (write(fd, "abc", 3) != 3 || fchmod(fd, arg_mode) < 0)
		return errno;
	return SEC_ERR(close(fd));
}

static int write_one(void *unused)
{
	int fd = open(arg_path, O_WRONLY);
	if (fd < 0)
		return errno;
	if (pwrite(fd, "x", 1, 0) != 1)
		return errno;
	return SEC_ERR(close(fd));
}

static int truncate_one(void *unused) { return SEC_ERR(truncate(arg_path, 1)); }

static int open_trunc(void *unused)
{
	int fd = open(arg_path, O_WRONLY | O_TRUNC);
	if (fd < 0)
		return errno;
	return SEC_ERR(close(fd));
}

static int do_mkdir(void *unused) { return SEC_ERR(mkdir(arg_path, arg_mode)); }
static int do_chmod(void *unused) { return SEC_ERR(chmod(arg_path, arg_mode)); }

static void as(uid_t uid, int (*fn)(void *), const char *path, mode_t mode)
{
	arg_path = path;
	arg_mode = mode;
	int err = uid ? tm_as_user(uid, uid, fn, NULL) : fn(NULL);
	if (err)
		FAILF("uid %u on %s: %s", (unsigned)uid, path, strerror(err));
}

#define ASSERT_MODE(path, want)                                                  \
	do {                                                                     \
		mode_t got_ = sec_mode(path) & 07777;                            \
		if (got_ != (mode_t)(want))                                      \
			FAILF("%s: mode %04o, expected %04o", path, (unsigned)got_, \
			      (unsigned)(want));                                 \
	} while (0)

/* ---- born private ----------------------------------------------------------- */

/*
 * Does the temporary file at path hold its last page of data yet?  Its size
 * says nothing: the flushers allocate it whole before writing (fallocate).
 */
static bool tail_written(const char *path)
{
	static char got[4096], want[4096];
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		return true;	/* published meanwhile */
	ssize_t n = pread(fd, got, sizeof(got), BIG - sizeof(got));
	close(fd);
	fill_pattern(want, sizeof(want), 77, BIG - sizeof(want));
	return n == (ssize_t)sizeof(got) && !memcmp(got, want, sizeof(got));
}

/* Watch pub/ on the backend while A's big file is flushed. */
static void born_private(void)
{
	char p[300];
	unsigned seen_private = 0, seen_partial = 0;

	cu_write_text(flag, "hold");
	pid_t pid = fork();
	if (pid == 0) {
		arg_path = tm_path(&m, "pub/suidbin");
		arg_mode = 04755;
		_exit(tm_as_user(A, A, create_big, NULL));
	}
	/* Until it is published: the whole life of its temporary file. */
	for (uint64_t t0 = mono_ms(); mono_ms() - t0 < 30000 && !file_exists(tm_bpath(&m, "pub/suidbin"));
	     usleep(2000)) {
		DIR *d = opendir(tm_bpath(&m, "pub"));
		struct dirent *de;
		while (d && (de = readdir(d))) {
			struct stat st;
			if (!strstr(de->d_name, ".ckptfs.t."))
				continue;
			snprintf(p, sizeof(p), "pub/%s", de->d_name);
			if (lstat(tm_bpath(&m, p), &st) < 0)
				continue;	/* published meanwhile */
			if (st.st_uid == 0 && (st.st_mode & 07777) != 0600)
				FAILF("temporary file %s is root's with mode %04o while written: "
				      "it must be born 0600", de->d_name, (unsigned)(st.st_mode & 07777));
			/* Once A's, it is complete: its final mode comes right after. */
			seen_private += st.st_uid == 0;
			seen_partial += st.st_size < (off_t)BIG || !tail_written(tm_bpath(&m, p));
		}
		if (d)
			closedir(d);
	}
	int st;
	CHECK_SYS(waitpid(pid, &st, 0));
	ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	ASSERT_TRUE(file_exists(tm_bpath(&m, "pub/suidbin")));
	CHECK_SYS(unlink(flag));
	if (!seen_private)
		FAILF("never saw the temporary file of pub/suidbin while it was flushed");
	/* The pwrite engine writes one segment at a time: it was seen half written. */
	const char *io = getenv("CKPTFS_TEST_IO");
	if (io && !strcmp(io, "pwrite") && !seen_partial)
		FAILF("never saw the temporary file of pub/suidbin before its data was complete");
	tm_sync(&m);
	ASSERT_MODE(tm_bpath(&m, "pub/suidbin"), 04755);
	ASSERT_EQ(sec_uid(tm_bpath(&m, "pub/suidbin")), A);
	ASSERT_EQ(sec_gid(tm_bpath(&m, "pub/suidbin")), A);
	cu_check_pattern(tm_bpath(&m, "pub/suidbin"), BIG, 77);
	ASSERT_MODE(tm_path(&m, "pub/suidbin"), 04755);
}

/* ---- set-ID bits on write ------------------------------------------------------ */

static const struct {
	const char *name;
	mode_t mode;
	uid_t who;
	int (*fn)(void *);
	mode_t after;
} writes[] = {
	{ "pub/w-suid", 04777, B, write_one, 0777 },
	{ "pub/w-sgid-gx", 02777, B, write_one, 0777 },
	{ "pub/w-sgid-nogx", 02767, B, write_one, 02767 },
	{ "pub/w-both", 06777, B, write_one, 0777 },
	{ "pub/t-suid", 04777, B, truncate_one, 0777 },
	{ "pub/o-suid", 04777, B, open_trunc, 0777 },
	{ "pub/w-root", 04777, 0, write_one, 04777 },
	{ "pub/w-owner", 04777, A, write_one, 0777 },
};

static void setid_on_write(void)
{
	for (size_t i = 0; i < CU_LEN(writes); i++)
		as(A, create_small, tm_path(&m, writes[i].name), writes[i].mode);
	tm_sync(&m);
	for (size_t i = 0; i < CU_LEN(writes); i++) {
		ASSERT_MODE(tm_bpath(&m, writes[i].name), writes[i].mode);
		as(writes[i].who, writes[i].fn, tm_path(&m, writes[i].name), 0);
		ASSERT_MODE(tm_path(&m, writes[i].name), writes[i].after);	/* at once */
	}
	tm_sync(&m);
	for (size_t i = 0; i < CU_LEN(writes); i++)
		ASSERT_MODE(tm_bpath(&m, writes[i].name), writes[i].after);
}

/* ---- set-group-ID directories ------------------------------------------------ */

static void setgid_dir(void)
{
	CHECK_SYS(mkdir(tm_path(&m, "pub/sg"), 0777));
	CHECK_SYS(chown(tm_path(&m, "pub/sg"), 0, G));
	CHECK_SYS(chmod(tm_path(&m, "pub/sg"), 02777));
	as(A, create_small, tm_path(&m, "pub/sg/f"), 02755);
	as(A, do_mkdir, tm_path(&m, "pub/sg/d"), 0755);
	as(A, create_small, tm_path(&m, "pub/sg/g"), 0755);
	as(A, do_chmod, tm_path(&m, "pub/sg/g"), 02755);
	as(A, create_small, tm_path(&m, "pub/own"), 0755);
	as(A, do_chmod, tm_path(&m, "pub/own"), 02755);
	tm_sync(&m);
	for (int b = 0; b < 2; b++) {
		const char *(*at)(struct tmount *, const char *) = b ? tm_bpath : tm_path;
		ASSERT_MODE(at(&m, "pub/sg/f"), 0755);
		ASSERT_EQ(sec_gid(at(&m, "pub/sg/f")), G);
		ASSERT_EQ(sec_uid(at(&m, "pub/sg/f")), A);
		ASSERT_MODE(at(&m, "pub/sg/d"), 02755);
		ASSERT_EQ(sec_gid(at(&m, "pub/sg/d")), G);
		ASSERT_MODE(at(&m, "pub/sg/g"), 0755);
		ASSERT_MODE(at(&m, "pub/own"), 02755);
		ASSERT_EQ(sec_gid(at(&m, "pub/own")), A);
	}
}

int main(void)
{
	char env[2 * PATH_MAX + 128];

	cu_require_root();
	tm_require_fuse();
	tm_init(&m, "setid");
	CHECK_SYS(chmod(m.root, 0755));
	snprintf(flag, sizeof(flag), "%s/hold", m.root);
	/* Slow each write, and hold the temporary file after its data, before its owner. */
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=pwrite,delay_ms=150,while=%s;"
		 "op=fchown,delay_ms=1500,while=%s", flag, flag);
	const char *envs[] = { env, NULL };
	tm_mount(&m, "allow_other,cache_size=64M", envs);
	CHECK_SYS(mkdir(tm_path(&m, "pub"), 0777));
	CHECK_SYS(chmod(tm_path(&m, "pub"), 0777));
	born_private();
	setid_on_write();
	setgid_dir();
	tm_stop(&m);
	tm_cleanup(&m);
	return 0;
}
