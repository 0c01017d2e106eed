/*
 * xattr.c — user.ckptfs.state follows a file from dirty through flushing to
 * durable, and user.ckptfs.xxh3 is the digest of what reached the backend.
 *
 * Publishing is blocked on demand: renames fail with EIO while a flag file
 * exists.  Checked, on a file of several chunks:
 *  - open and written: "dirty"; no xxh3 yet; listxattr shows only state;
 *  - closed while publishing is blocked: "blocked" once the backend refused
 *    its version, and it stays so (not on the backend, no xxh3, listed in
 *    .ckptfs/files as blocked);
 *  - flag removed: "durable"; the backend holds it; xxh3 equals the
 *    digest of the backend file computed here by the reference
 *    implementation (tests/digest_ref.h) and by `ckptfs-ctl hash`, whose
 *    format-1 digest equals `xxhsum -H2` (when installed); listxattr shows
 *    both keys, once each, next to a user's own xattr;
 *  - the keys are read-only (EPERM); directories have neither;
 *  - a rewrite is dirty again and ends durable with the new digest; an
 *    empty file has its digest too;
 *  - its directory renamed while renames are refused: the file, whose
 *    contents are on the backend but not under its new name, is not
 *    durable ("blocked", no xxh3, and so in .ckptfs/files); durable again
 *    once the rename is made.
 */
#include "tests/ctl/ctl_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#define STATE "user.ckptfs.state"
#define XXH3 "user.ckptfs.xxh3"
#define BIG (5 * MiB + 3)

static void expect_state(const char *path, const char *state)
{
	char v[64];
	int r = ct_getxattr(path, STATE, v, sizeof(v));
	if (r < 0)
		FAILF("getxattr %s %s: %s", path, STATE, strerror(-r));
	ASSERT_STR_EQ(v, state);
}

/* Wait up to ms for `state`; fail showing the state it is in. */
static void await_state(const char *path, const char *state, unsigned ms)
{
	if (!ct_wait_state(path, state, ms))
		expect_state(path, state);
}

static void expect_no_digest(const char *path)
{
	char v[64];
	ASSERT_EQ(ct_getxattr(path, XXH3, v, sizeof(v)), -ENODATA);
}

/* How often `key` occurs in path's listxattr. */
static int listed(const char *path, const char *key)
{
	char names[4096];
	ssize_t n = CHECK_SYS(listxattr(path, names, sizeof(names)));
	int count = 0;

	for (ssize_t off = 0; off < n; off += (ssize_t)strlen(names + off) + 1)
		count += strcmp(names + off, key) == 0;
	return count;
}

/* The first 32-hex-digit word of a tool's output ("" if none), in place. */
static char *first_hex(char *out)
{
	while (*out && strspn(out, "0123456789abcdef") < 32)	/* skip any prefix */
		out++;
	out[*out ? 32 : 0] = '\0';
	return out;
}

/* The xxh3 xattr of `path` must be the digest of backend file `bfile`. */
static void expect_digest(const char *path, const char *bfile)
{
	char got[64], want[33], flat[33];
	struct ct_result r;

	ASSERT_EQ(ct_getxattr(path, XXH3, got, sizeof(got)), 32);
	ct_digest_hex(bfile, want);
	ASSERT_STR_EQ(got, want);
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "hash", bfile, NULL });
	ct_expect_status(&r, 0, "ckptfs-ctl hash");
	ASSERT_STR_EQ(first_hex(r.out), want);
	ct_result_free(&r);
	/* Format 1's whole-file XXH3-128, against a tool that is not ours. */
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "hash", "--format", "1", bfile, NULL });
	ct_expect_status(&r, 0, "ckptfs-ctl hash --format 1");
	snprintf(flat, sizeof(flat), "%s", first_hex(r.out));
	ct_result_free(&r);
	if (system("command -v xxhsum >/dev/null 2>&1") != 0) {
		fprintf(stderr, "note: xxhsum is not installed; format 1 not checked against it\n");
		return;
	}
	ct_run(&r, (const char *[]){ "xxhsum", "-H2", bfile, NULL });
	ct_expect_status(&r, 0, "xxhsum -H2");
	ASSERT_STR_EQ(flat, first_hex(r.out));
	ct_result_free(&r);
}

static void expect_files_state(struct tmount *m, const char *rel, const char *state)
{
	char *text = ct_read_ctl(m, "files");
	struct json_obj *lines;
	size_t n = ct_parse_lines(text, &lines, "files");
	bool found = false;

	for (size_t i = 0; i < n; i++)
		if (!strcmp(ct_str(&lines[i], "path"), rel)) {
			ASSERT_STR_EQ(ct_str(&lines[i], "state"), state);
			found = true;
		}
	if (!found)
		FAILF("files does not list %s:\n%s", rel, text);
	ct_lines_free(lines, n);
	free(text);
}

int main(void)
{
	struct tmount m;
	char flag[PATH_MAX], f[PATH_MAX], first[64], v[64];
	int fd;

	tm_require_fuse();
	ct_mount_flagged(&m, "ctl-xattr", "op=rename,err=EIO", flag);
	snprintf(f, sizeof(f), "%s", tm_path(&m, "d/f"));	/* tm_path's buffers rotate */
	CHECK_SYS(mkdir(tm_path(&m, "d"), 0755));

	/* Open and written: dirty. */
	fd = (int)CHECK_SYS(open(f, O_CREAT | O_WRONLY, 0644));
	{
		char *buf = malloc(BIG);
		fill_pattern(buf, BIG, 7, 0);
		ASSERT_EQ(write(fd, buf, BIG), BIG);
		free(buf);
	}
	expect_state(f, "dirty");
	expect_no_digest(f);
	ASSERT_EQ(listed(f, STATE), 1);
	ASSERT_EQ(listed(f, XXH3), 0);
	ASSERT_EQ(ct_getxattr(tm_path(&m, "d"), STATE, v, sizeof(v)), -ENODATA);
	ASSERT_EQ(ct_getxattr(tm_path(&m, "d"), XXH3, v, sizeof(v)), -ENODATA);

	/* Closed, publishing blocked: blocked, and it stays so. */
	ct_touch(flag);
	CHECK_SYS(close(fd));
	await_state(f, "blocked", 10000);
	usleep(300 * 1000);
	expect_state(f, "blocked");
	expect_no_digest(f);
	expect_files_state(&m, "d/f", "blocked");
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "d/f")));

	/* Publishing resumes: durable, with the digest of the backend file. */
	CHECK_SYS(unlink(flag));
	await_state(f, "durable", 30000);
	ct_check_seeded(tm_bpath(&m, "d/f"), BIG, 7);
	expect_digest(f, tm_bpath(&m, "d/f"));
	CHECK_SYS(lsetxattr(f, "user.note", "hello", 5, 0));
	await_state(f, "durable", 30000);	/* the xattr too, now */
	ASSERT_EQ(listed(f, STATE), 1);
	ASSERT_EQ(listed(f, XXH3), 1);
	ASSERT_EQ(listed(f, "user.note"), 1);
	ASSERT_EQ(ct_getxattr(f, "user.note", v, sizeof(v)), 5);
	ASSERT_STR_EQ(v, "hello");

	/* ckptfs's keys are read-only. */
	ASSERT_EQ(setxattr(f, STATE, "durable", 7, 0), -1);
	ASSERT_EQ(errno, EPERM);
	ASSERT_EQ(setxattr(f, XXH3, "00", 2, 0), -1);
	ASSERT_EQ(errno, EPERM);
	ASSERT_EQ(removexattr(f, XXH3), -1);
	ASSERT_EQ(errno, EPERM);

	/* A rewrite: dirty while open, then durable with the new digest. */
	ASSERT_EQ(ct_getxattr(f, XXH3, first, sizeof(first)), 32);
	fd = (int)CHECK_SYS(open(f, O_WRONLY | O_TRUNC));
	ASSERT_EQ(write(fd, "rewritten", 9), 9);
	expect_state(f, "dirty");
	expect_no_digest(f);
	CHECK_SYS(close(fd));
	await_state(f, "durable", 30000);
	expect_digest(f, tm_bpath(&m, "d/f"));
	ASSERT_EQ(ct_getxattr(f, XXH3, v, sizeof(v)), 32);
	ASSERT_TRUE(strcmp(first, v) != 0);

	/* Its directory renamed, the rename refused for now: its name is not durable. */
	ct_touch(flag);
	CHECK_SYS(rename(tm_path(&m, "d"), tm_path(&m, "d2")));
	snprintf(f, sizeof(f), "%s", tm_path(&m, "d2/f"));
	await_state(f, "blocked", 10000);
	expect_no_digest(f);
	expect_files_state(&m, "d2/f", "blocked");
	ASSERT_TRUE(file_exists(tm_bpath(&m, "d/f")) && !file_exists(tm_bpath(&m, "d2/f")));
	CHECK_SYS(unlink(flag));
	await_state(f, "durable", 30000);
	expect_digest(f, tm_bpath(&m, "d2/f"));

	/* An empty file. */
	write_file(tm_path(&m, "empty"), "", 0);
	await_state(tm_path(&m, "empty"), "durable", 30000);
	expect_digest(tm_path(&m, "empty"), tm_bpath(&m, "empty"));

	tm_stop(&m);
	tm_cleanup(&m);
	return 0;
}
