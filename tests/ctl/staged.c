/*
 * staged.c — files in directories whose mkdir has not reached the backend
 * yet are written ahead of it, into the nearest directory that is there
 * (flush.c, temp_dir_for), and published across into place in order.
 *
 * staged:  with every mkdir of `arr*` held, the files of ck/arr1, ck/arr2
 *          and ck/arr2/sub are all written as temporary files in ck (the
 *          flush did not wait for the mkdirs); once the mkdirs go, drain
 *          publishes each where it belongs, and no temporary name is left.
 * moved:   a directory renamed (and its old parent removed) before its file
 *          was closed is not written ahead into the old parent: the rmdir of
 *          that parent would then find it not empty and block its user; a
 *          file closed before such a move is written ahead, and published
 *          before the move.  Drain exits 0, the old parents are gone.
 * skipped: the mkdir refused (EACCES) and skipped by the administrator: the
 *          files written ahead in ck are removed with the rest.
 * killed:  the daemon killed with files written ahead: the next mount sweeps
 *          them from ck.
 * CKPTFS_STAGED_CASE=SUBSTRING runs only matching cases.
 */
#include "tests/ctl/ctl_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define FSIZE (96 * KiB + 5)

/* Write FSIZE bytes of pattern seed to path; close's result (0 or -errno). */
static int put(const char *path, uint64_t seed)
{
	char *buf = malloc(FSIZE);
	int fd = CHECK_SYS(open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644));

	fill_pattern(buf, FSIZE, seed, 0);
	for (size_t done = 0; done < FSIZE;)
		done += (size_t)CHECK_SYS(write(fd, buf + done, FSIZE - done));
	free(buf);
	return close(fd) < 0 ? -errno : 0;
}

static void ctl(struct ct_result *r, struct tmount *m, const char *cmd, const char *arg)
{
	ct_run(r, (const char *[]){ ct_tool("ckptfs-ctl"), cmd, m->mnt, arg, NULL });
}

static void drain_ok(struct tmount *m, const char *what)
{
	struct ct_result r;

	ctl(&r, m, "drain", "--timeout=30");
	ct_expect_status(&r, 0, what);
	ct_result_free(&r);
}

/* Wait up to 20 s until backend dir `rel` holds n temporary files. */
static void wait_temps(struct tmount *m, const char *rel, int n, const char *what)
{
	uint64_t t0 = mono_ms();
	int have;

	while ((have = count_temp_files(tm_bpath(m, rel))) != n) {
		if (mono_ms() - t0 > 20000)
			FAILF("%s: %d temporary files in backend %s, expected %d", what, have, rel, n);
		usleep(20 * 1000);
	}
}

static void no_temps(struct tmount *m, const char *const *rels)
{
	for (; *rels; rels++)
		if (count_temp_files(tm_bpath(m, *rels)))
			FAILF("temporary files left in backend %s", *rels);
}

static void verify_ok(struct tmount *m)
{
	struct ct_result r;

	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "verify", m->backend, NULL });
	ct_expect_status(&r, 0, "ckptfs-ctl verify");
	ct_result_free(&r);
}

static void staged_case(void)
{
	struct tmount m;
	char flag[PATH_MAX];
	static const char *const files[] = { "ck/arr1/a", "ck/arr1/b", "ck/arr2/c", "ck/arr2/sub/d" };

	ct_mount_held(&m, "ctl-staged", "op=mkdir,name=arr", flag);
	CHECK_SYS(mkdir(tm_path(&m, "ck"), 0755));
	ct_write_seeded(tm_path(&m, "ck/meta"), 100, 1);
	tm_sync(&m);
	ct_touch(flag);		/* every mkdir of arr* waits from now on */
	CHECK_SYS(mkdir(tm_path(&m, "ck/arr1"), 0755));
	CHECK_SYS(mkdir(tm_path(&m, "ck/arr2"), 0755));
	CHECK_SYS(mkdir(tm_path(&m, "ck/arr2/sub"), 0755));
	for (unsigned i = 0; i < CKPT_ARRAY_LEN_TM(files); i++)
		ct_write_seeded(tm_path(&m, files[i]), FSIZE, 10 + i);
	wait_temps(&m, "ck", 4, "while the mkdirs are held");
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "ck/arr1")));
	CHECK_SYS(unlink(flag));
	drain_ok(&m, "drain once the mkdirs go");
	for (unsigned i = 0; i < CKPT_ARRAY_LEN_TM(files); i++)
		ct_check_seeded(tm_bpath(&m, files[i]), FSIZE, 10 + i);
	no_temps(&m, (const char *const[]){ ".", "ck", "ck/arr1", "ck/arr2", "ck/arr2/sub", NULL });
	tm_stop(&m);
	verify_ok(&m);
	tm_cleanup(&m);
	fprintf(stderr, "%-10s ok\n", "staged");
}

static void moved_case(void)
{
	struct tmount m;
	char flag[PATH_MAX];

	ct_mount_held(&m, "ctl-staged-mv", "op=mkdir,name=dd", flag);
	CHECK_SYS(mkdir(tm_path(&m, "a"), 0755));
	CHECK_SYS(mkdir(tm_path(&m, "b"), 0755));
	CHECK_SYS(mkdir(tm_path(&m, "c"), 0755));
	tm_sync(&m);
	ct_touch(flag);
	/* Moved before its file is closed: not written ahead into a. */
	CHECK_SYS(mkdir(tm_path(&m, "a/dd"), 0755));
	int fd = CHECK_SYS(open(tm_path(&m, "a/dd/f"), O_CREAT | O_WRONLY, 0644));
	char *buf = malloc(FSIZE);
	fill_pattern(buf, FSIZE, 21, 0);
	for (size_t done = 0; done < FSIZE;)
		done += (size_t)CHECK_SYS(write(fd, buf + done, FSIZE - done));
	free(buf);
	CHECK_SYS(rename(tm_path(&m, "a/dd"), tm_path(&m, "b/dd")));
	CHECK_SYS(rmdir(tm_path(&m, "a")));
	CHECK_SYS(close(fd));
	/* Closed before the move: written ahead into c, published before the move. */
	CHECK_SYS(mkdir(tm_path(&m, "c/dd2"), 0755));
	ct_write_seeded(tm_path(&m, "c/dd2/g"), FSIZE, 22);
	wait_temps(&m, "c", 1, "the file closed before its directory moved");
	if (count_temp_files(tm_bpath(&m, "a")))
		FAILF("a file whose directory was moved out of a was written ahead into a");
	CHECK_SYS(rename(tm_path(&m, "c/dd2"), tm_path(&m, "b/dd2")));
	CHECK_SYS(rmdir(tm_path(&m, "c")));
	CHECK_SYS(unlink(flag));
	drain_ok(&m, "drain after the moves");
	ct_check_seeded(tm_bpath(&m, "b/dd/f"), FSIZE, 21);
	ct_check_seeded(tm_bpath(&m, "b/dd2/g"), FSIZE, 22);
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "a")));
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "c")));
	no_temps(&m, (const char *const[]){ ".", "b", "b/dd", "b/dd2", NULL });
	tm_stop(&m);
	verify_ok(&m);
	tm_cleanup(&m);
	fprintf(stderr, "%-10s ok\n", "moved");
}

static void skipped_case(void)
{
	struct tmount m;
	char flag[PATH_MAX], seq[32];
	struct ct_result r;

	ct_mount_flagged(&m, "ctl-staged-skip", "op=mkdir,err=EACCES,name=arr9", flag);
	CHECK_SYS(mkdir(tm_path(&m, "ck"), 0755));
	tm_sync(&m);
	ct_touch(flag);
	CHECK_SYS(mkdir(tm_path(&m, "ck/arr9"), 0755));
	/* close reports the refusal that holds them back, once it is known */
	for (int i = 0; i < 2; i++) {
		int c = put(tm_path(&m, i ? "ck/arr9/y" : "ck/arr9/x"), 31 + (uint64_t)i);
		if (c != 0 && c != -EACCES)
			FAILF("close of a file behind the refused mkdir: %s", strerror(-c));
	}
	wait_temps(&m, "ck", 2, "behind the refused mkdir");
	ct_blocked_seq(&m, seq);
	ctl(&r, &m, "skip", seq);
	ct_expect_status(&r, 0, "ckptfs-ctl skip of the mkdir");
	ct_expect_in(r.out, "arr9/x", "skip's report");
	ct_result_free(&r);
	CHECK_SYS(unlink(flag));
	drain_ok(&m, "drain after the skip");
	wait_temps(&m, "ck", 0, "after the skip");
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "ck/arr9")));
	tm_stop(&m);
	tm_cleanup(&m);
	fprintf(stderr, "%-10s ok\n", "skipped");
}

static void killed_case(void)
{
	struct tmount m;
	char flag[PATH_MAX];

	ct_mount_held(&m, "ctl-staged-kill", "op=mkdir,name=arr5", flag);
	CHECK_SYS(mkdir(tm_path(&m, "ck"), 0755));
	tm_sync(&m);
	ct_touch(flag);
	CHECK_SYS(mkdir(tm_path(&m, "ck/arr5"), 0755));
	ct_write_seeded(tm_path(&m, "ck/arr5/z"), FSIZE, 41);
	wait_temps(&m, "ck", 1, "while the mkdir is held");
	tm_kill(&m);
	CHECK_SYS(unlink(flag));
	tm_mount(&m, NULL, NULL);
	wait_temps(&m, "ck", 0, "after the next mount");
	tm_stop(&m);
	tm_cleanup(&m);
	fprintf(stderr, "%-10s ok\n", "killed");
}

int main(void)
{
	static const struct { const char *name; void (*fn)(void); } cases[] = {
		{ "staged", staged_case }, { "moved", moved_case },
		{ "skipped", skipped_case }, { "killed", killed_case },
	};
	const char *only = getenv("CKPTFS_STAGED_CASE");

	tm_require_fuse();
	for (size_t i = 0; i < CKPT_ARRAY_LEN_TM(cases); i++)
		if (!only || strstr(cases[i].name, only))
			cases[i].fn();
	return 0;
}
