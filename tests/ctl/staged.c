/*
 * staged.c — directories made through the mount get their files written
 * before their mkdir's turn (backend/stage.c): into a private directory of
 * the daemon's (a stage) under a temporary name in the parent, or in the
 * parent's stage; the mkdir makes the directory as before and the staged
 * files move in.
 *
 * staged:  with the mkdirs of `arr*` held, the files of ck/arr1, ck/arr2
 *          and ck/arr2/sub are all written (the flush did not wait for the
 *          mkdirs) into three staged directories, mode 0700 and the
 *          daemon's, that another user cannot open; no `arr*` name is on
 *          the backend.  Once the mkdirs go, drain puts each in place with
 *          its mode, and no temporary name is left; verify passes.
 * merged:  the directory appears on the backend meanwhile (another node
 *          made it, with a file of its own): the files written ahead are
 *          moved into it, the other node's file is kept.
 * tampered: the stage's mode changed meanwhile: not emptied, its file
 *          still published by its own checked rename.
 * moved:   a directory renamed (and its old parent removed) before its
 *          file was closed, and one renamed after: drain exits 0, every
 *          file where the mount put it, the old parents gone.
 * skipped: the mkdir refused (EACCES) and skipped by the administrator:
 *          the files written ahead and their stage are removed at once.
 * killed:  the daemon killed with files written ahead: the next mount
 *          sweeps the staged directory and what it holds.
 * CKPTFS_STAGED_CASE=SUBSTRING runs only matching cases.
 */
#include "tests/ctl/ctl_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define FSIZE (96 * KiB + 5)
/* The publisher waits at the rename that publishes "gate" (written first). */
#define HOLD_GATE "op=rename,name=gate"

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

struct tally {
	int temps;	/* ".ckptfs." files */
	int stages;	/* ".ckptfs.d." directories */
	int bad_stages;	/* ... not mode 0700 or not root's */
};

/* Count temporary files and staged directories below backend dir rel (recursively). */
static void tally_at(const char *path, struct tally *t)
{
	DIR *d = opendir(path);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		char p[PATH_MAX];
		struct stat st;
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, ".ckptfs"))
			continue;
		snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
		if (lstat(p, &st) < 0)
			continue;
		bool hidden = !strncmp(e->d_name, ".ckptfs.", 8);
		if (S_ISDIR(st.st_mode)) {
			if (hidden) {
				t->stages++;
				t->bad_stages += (st.st_mode & 07777) != 0700 || st.st_uid != 0;
			}
			tally_at(p, t);
		} else if (hidden) {
			t->temps++;
		}
	}
	closedir(d);
}

static struct tally tally(struct tmount *m, const char *rel)
{
	struct tally t = { 0 };
	tally_at(tm_bpath(m, rel), &t);
	return t;
}

/* Wait up to 20 s until below backend dir rel there are `temps` temporary files and `stages` stages. */
static void wait_tally(struct tmount *m, const char *rel, int temps, int stages, const char *what)
{
	uint64_t t0 = mono_ms();
	struct tally t;

	while ((t = tally(m, rel)).temps != temps || t.stages != stages) {
		if (mono_ms() - t0 > 20000)
			FAILF("%s: backend %s holds %d temporary files in %d staged directories, "
			      "expected %d in %d", what, rel, t.temps, t.stages, temps, stages);
		usleep(20 * 1000);
	}
	if (t.bad_stages)
		FAILF("%s: %d staged directories are not mode 0700 and root's", what, t.bad_stages);
}

/* The first staged directory directly in backend dir rel (static), or fail. */
static const char *a_stage(struct tmount *m, const char *rel)
{
	static char p[PATH_MAX];
	DIR *d = opendir(tm_bpath(m, rel));
	struct dirent *e;

	ASSERT_TRUE(d != NULL);
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, ".ckptfs.d.", 10))
			break;
	if (!e)
		FAILF("no staged directory in backend %s", rel);
	snprintf(p, sizeof(p), "%s/%s", tm_bpath(m, rel), e->d_name);
	closedir(d);
	return p;
}

/* Another user cannot open it. */
static void private_to_daemon(const char *path)
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		if (setgid(65534) < 0 || setuid(65534) < 0)
			_exit(3);
		DIR *d = opendir(path);
		_exit(d ? 1 : errno == EACCES ? 0 : 2);
	}
	CHECK_SYS(waitpid(pid, &st, 0));
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		FAILF("uid 65534 could open the staged directory %s (status 0x%x)", path, st);
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
	struct stat st;
	static const char *const files[] = { "ck/arr1/a", "ck/arr1/b", "ck/arr2/c", "ck/arr2/sub/d" };

	ct_mount_held(&m, "ctl-staged", HOLD_GATE, flag);
	CHECK_SYS(mkdir(tm_path(&m, "ck"), 0755));
	ct_write_seeded(tm_path(&m, "ck/meta"), 100, 1);
	tm_sync(&m);
	ct_touch(flag);
	ct_write_seeded(tm_path(&m, "ck/gate"), 100, 2);	/* what follows waits */
	CHECK_SYS(mkdir(tm_path(&m, "ck/arr1"), 0750));
	CHECK_SYS(mkdir(tm_path(&m, "ck/arr2"), 0755));
	CHECK_SYS(mkdir(tm_path(&m, "ck/arr2/sub"), 0711));
	for (unsigned i = 0; i < CKPT_ARRAY_LEN_TM(files); i++)
		ct_write_seeded(tm_path(&m, files[i]), FSIZE, 10 + i);
	wait_tally(&m, "ck", 5, 3, "while the mkdirs are held");	/* and the gate's */
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "ck/arr1")));
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "ck/arr2")));
	private_to_daemon(a_stage(&m, "ck"));
	CHECK_SYS(unlink(flag));
	drain_ok(&m, "drain once the mkdirs go");
	for (unsigned i = 0; i < CKPT_ARRAY_LEN_TM(files); i++)
		ct_check_seeded(tm_bpath(&m, files[i]), FSIZE, 10 + i);
	CHECK_SYS(stat(tm_bpath(&m, "ck/arr1"), &st));
	ASSERT_EQ(st.st_mode & 07777, 0750);
	CHECK_SYS(stat(tm_bpath(&m, "ck/arr2/sub"), &st));
	ASSERT_EQ(st.st_mode & 07777, 0711);
	wait_tally(&m, ".", 0, 0, "after the drain");
	struct json_obj o;
	ct_stats(&m, &o);
	if (ct_num(&o, "dirs_staged") < 3)
		FAILF("stats say %.0f directories were staged, expected 3", ct_num(&o, "dirs_staged"));
	json_free(&o);
	tm_stop(&m);
	verify_ok(&m);
	tm_cleanup(&m);
	fprintf(stderr, "%-10s ok\n", "staged");
}

static void merged_case(void)
{
	struct tmount m;
	char flag[PATH_MAX];

	ct_mount_held(&m, "ctl-staged-merge", HOLD_GATE, flag);
	CHECK_SYS(mkdir(tm_path(&m, "ck"), 0755));
	tm_sync(&m);
	ct_touch(flag);
	ct_write_seeded(tm_path(&m, "ck/gate"), 100, 2);
	CHECK_SYS(mkdir(tm_path(&m, "ck/arr1"), 0755));
	ct_write_seeded(tm_path(&m, "ck/arr1/mine"), FSIZE, 51);
	wait_tally(&m, "ck", 2, 1, "while the mkdir is held");
	/* Another node makes the directory and writes its own shard there. */
	CHECK_SYS(mkdir(tm_bpath(&m, "ck/arr1"), 0755));
	ct_write_seeded(tm_bpath(&m, "ck/arr1/theirs"), 4096, 52);
	CHECK_SYS(unlink(flag));
	drain_ok(&m, "drain once the mkdir goes");
	ct_check_seeded(tm_bpath(&m, "ck/arr1/mine"), FSIZE, 51);
	ct_check_seeded(tm_bpath(&m, "ck/arr1/theirs"), 4096, 52);
	wait_tally(&m, ".", 0, 0, "after the drain");
	/* The mount writes there again: into the directory now there. */
	ct_write_seeded(tm_path(&m, "ck/arr1/again"), FSIZE, 53);
	drain_ok(&m, "drain of a later file");
	ct_check_seeded(tm_bpath(&m, "ck/arr1/again"), FSIZE, 53);
	tm_stop(&m);
	tm_cleanup(&m);
	fprintf(stderr, "%-10s ok\n", "merged");
}

/*
 * tampered: the stage's mode changed on the backend while its mkdir waits
 * (an administrator's chmod -R): it is not emptied as the daemon's own, and
 * its file still reaches its place by its own checked rename.
 */
static void tampered_case(void)
{
	struct tmount m;
	char flag[PATH_MAX];

	ct_mount_held(&m, "ctl-staged-chmod", HOLD_GATE, flag);
	CHECK_SYS(mkdir(tm_path(&m, "ck"), 0755));
	tm_sync(&m);
	ct_touch(flag);
	ct_write_seeded(tm_path(&m, "ck/gate"), 100, 2);
	CHECK_SYS(mkdir(tm_path(&m, "ck/arr1"), 0755));
	ct_write_seeded(tm_path(&m, "ck/arr1/f"), FSIZE, 61);
	wait_tally(&m, "ck", 2, 1, "while the mkdir is held");
	CHECK_SYS(chmod(a_stage(&m, "ck"), 0755));
	CHECK_SYS(unlink(flag));
	drain_ok(&m, "drain with a stage not private any more");
	ct_check_seeded(tm_bpath(&m, "ck/arr1/f"), FSIZE, 61);
	size_t len = 0;
	char *log = read_file(m.log, &len);
	static const char said_text[] = "not the daemon's private one";
	bool said = log && memmem(log, len, said_text, sizeof(said_text) - 1);
	free(log);
	if (!said)
		FAILF("%s", "the changed stage was emptied as if it were the daemon's own");
	tm_stop(&m);
	tm_cleanup(&m);
	fprintf(stderr, "%-10s ok\n", "tampered");
}

static void moved_case(void)
{
	struct tmount m;
	char flag[PATH_MAX];

	ct_mount_held(&m, "ctl-staged-mv", HOLD_GATE, flag);
	CHECK_SYS(mkdir(tm_path(&m, "a"), 0755));
	CHECK_SYS(mkdir(tm_path(&m, "b"), 0755));
	CHECK_SYS(mkdir(tm_path(&m, "c"), 0755));
	tm_sync(&m);
	ct_touch(flag);
	ct_write_seeded(tm_path(&m, "gate"), 100, 2);
	/* Moved before its file is closed. */
	CHECK_SYS(mkdir(tm_path(&m, "a/arr"), 0755));
	int fd = CHECK_SYS(open(tm_path(&m, "a/arr/f"), O_CREAT | O_WRONLY, 0644));
	char *buf = malloc(FSIZE);
	fill_pattern(buf, FSIZE, 21, 0);
	for (size_t done = 0; done < FSIZE;)
		done += (size_t)CHECK_SYS(write(fd, buf + done, FSIZE - done));
	free(buf);
	CHECK_SYS(rename(tm_path(&m, "a/arr"), tm_path(&m, "b/arr")));
	CHECK_SYS(rmdir(tm_path(&m, "a")));
	CHECK_SYS(close(fd));
	/* Closed (and written ahead) before the move. */
	CHECK_SYS(mkdir(tm_path(&m, "c/arr2"), 0755));
	ct_write_seeded(tm_path(&m, "c/arr2/g"), FSIZE, 22);
	wait_tally(&m, "c", 1, 1, "the file closed before its directory moved");
	ASSERT_EQ(tally(&m, "a").stages, 1);	/* a/arr too: staged before the move */
	CHECK_SYS(rename(tm_path(&m, "c/arr2"), tm_path(&m, "b/arr2")));
	CHECK_SYS(rmdir(tm_path(&m, "c")));
	CHECK_SYS(unlink(flag));
	drain_ok(&m, "drain after the moves");
	ct_check_seeded(tm_bpath(&m, "b/arr/f"), FSIZE, 21);
	ct_check_seeded(tm_bpath(&m, "b/arr2/g"), FSIZE, 22);
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "a")));
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "c")));
	wait_tally(&m, ".", 0, 0, "after the drain");
	tm_stop(&m);
	verify_ok(&m);
	tm_cleanup(&m);
	fprintf(stderr, "%-10s ok\n", "moved");
}

static void skipped_case(void)
{
	struct tmount m;
	char held[PATH_MAX], refuse[PATH_MAX], env[3 * PATH_MAX], seq[32];
	struct ct_result r;

	tm_init(&m, "ctl-staged-skip");
	snprintf(held, sizeof(held), "%s/held", m.root);
	snprintf(refuse, sizeof(refuse), "%s/refuse", m.root);
	/* The publisher waits at "gate" while the files of arr9 are written ahead. */
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=rename,name=gate,hold=%s;"
		 "op=mkdir|rename,err=EACCES,name=arr9,while=%s", held, refuse);
	tm_mount(&m, NULL, (const char *const[]){ env, NULL });
	CHECK_SYS(mkdir(tm_path(&m, "ck"), 0755));
	tm_sync(&m);
	ct_touch(held);
	ct_touch(refuse);
	ct_write_seeded(tm_path(&m, "ck/gate"), 100, 30);
	CHECK_SYS(mkdir(tm_path(&m, "ck/arr9"), 0755));
	ct_write_seeded(tm_path(&m, "ck/arr9/x"), FSIZE, 31);
	ct_write_seeded(tm_path(&m, "ck/arr9/y"), FSIZE, 32);
	wait_tally(&m, "ck", 3, 1, "behind the held gate");	/* gate's, x's, y's */
	CHECK_SYS(unlink(held));
	uint64_t t0 = mono_ms();
	for (ct_blocked_seq(&m, seq); !strcmp(seq, "0"); ct_blocked_seq(&m, seq)) {
		if (mono_ms() - t0 > 20000)
			FAILF("%s", "the refused mkdir never showed as blocked");
		usleep(20 * 1000);
	}
	ctl(&r, &m, "skip", seq);
	ct_expect_status(&r, 0, "ckptfs-ctl skip of the mkdir");
	ct_expect_in(r.out, "arr9/x", "skip's report");
	ct_result_free(&r);
	CHECK_SYS(unlink(refuse));
	drain_ok(&m, "drain after the skip");
	ct_check_seeded(tm_bpath(&m, "ck/gate"), 100, 30);
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "ck/arr9")));
	wait_tally(&m, "ck", 0, 0, "after the skip: its stage removed");
	tm_stop(&m);
	wait_tally(&m, ".", 0, 0, "after the unmount");
	tm_cleanup(&m);
	fprintf(stderr, "%-10s ok\n", "skipped");
}

static void killed_case(void)
{
	struct tmount m;
	char flag[PATH_MAX];

	ct_mount_held(&m, "ctl-staged-kill", HOLD_GATE, flag);
	CHECK_SYS(mkdir(tm_path(&m, "ck"), 0755));
	tm_sync(&m);
	ct_touch(flag);
	ct_write_seeded(tm_path(&m, "ck/gate"), 100, 2);
	CHECK_SYS(mkdir(tm_path(&m, "ck/arr5"), 0755));
	CHECK_SYS(mkdir(tm_path(&m, "ck/arr5/in"), 0755));
	ct_write_seeded(tm_path(&m, "ck/arr5/z"), FSIZE, 41);
	ct_write_seeded(tm_path(&m, "ck/arr5/in/w"), FSIZE, 42);
	wait_tally(&m, "ck", 3, 2, "while the mkdir is held");
	tm_kill(&m);
	CHECK_SYS(unlink(flag));
	tm_mount(&m, NULL, NULL);
	wait_tally(&m, ".", 0, 0, "after the next mount");
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "ck/arr5")));
	tm_stop(&m);
	tm_cleanup(&m);
	fprintf(stderr, "%-10s ok\n", "killed");
}

int main(void)
{
	static const struct { const char *name; void (*fn)(void); } cases[] = {
		{ "staged", staged_case }, { "merged", merged_case }, { "tampered", tampered_case },
		{ "moved", moved_case },
		{ "skipped", skipped_case }, { "killed", killed_case },
	};
	const char *only = getenv("CKPTFS_STAGED_CASE");

	tm_require_fuse();
	if (geteuid() != 0) {
		printf("needs root (a second user is tried)\n");
		return 77;
	}
	for (size_t i = 0; i < CKPT_ARRAY_LEN_TM(cases); i++)
		if (!only || strstr(cases[i].name, only))
			cases[i].fn();
	return 0;
}
