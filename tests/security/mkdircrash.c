/*
 * mkdircrash.c — a crash between a directory's mkdir and its chown leaves
 * neither a root-owned directory where the user made theirs nor a lost
 * mkdir (backend/apply.c mkdir_found; contract: prefix consistency).
 *
 * A user makes a directory through the mount of a root daemon; the daemon
 * creates it on the backend (owned by root, as every object it creates)
 * and is killed at the very next step, the chown to the user
 * (CKPTFS_FAULT err=kill).  The next mount recovers: the directory on the
 * backend ends up the user's (mkdir re-applied: it finds an empty
 * directory of the daemon's and takes it) or gone (the mkdir voided), never
 * root's; the mount shows the same as the backend, and the user can work
 * in it if it is there.  And a chown that fails (EIO, once) is retried:
 * the directory is durable only once it is the user's.
 *
 * Then the same cut, after which the user (who owns a/ on the backend)
 * puts a directory of root's, with root's file in it, at the name the
 * daemon made: recovery must not give it to the user (it gave any
 * directory of the daemon's there away, and the user read root's file).
 */
#include "tests/security/sec_util.h"

#include <signal.h>
#include <sys/wait.h>

#define USER_A 61902

static struct tmount m;

static int as_a_mkdir(void *arg)
{
	(void)arg;
	return SEC_ERR(mkdir(tm_path(&m, "a/newdir"), 0750));
}

static int as_a_mkdir2(void *arg)
{
	(void)arg;
	return SEC_ERR(mkdir(tm_path(&m, "a/newdir2"), 0750));
}

static int as_a_create(void *arg)
{
	(void)arg;
	int fd = open(tm_path(&m, "a/newdir/f"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return errno;
	int r = write(fd, "mine\n", 5) == 5 ? 0 : EIO;
	return close(fd) < 0 ? errno : r;
}

static int as_a_swap(void *arg)
{
	(void)arg;
	char from[PATH_MAX];

	snprintf(from, sizeof(from), "%s", tm_bpath(&m, "a/rootjob"));
	if (rmdir(tm_bpath(&m, "a/newdir3")) < 0 || rename(from, tm_bpath(&m, "a/newdir3")) < 0)
		return errno;
	return 0;
}

static int as_a_mkdir3(void *arg)
{
	(void)arg;
	return SEC_ERR(mkdir(tm_path(&m, "a/newdir3"), 0750));
}

/* Killed at the chown of a/newdir3 (CKPTFS_FAULT): wait for its death. */
static void wait_killed(void)
{
	int status = -1;

	for (uint64_t t0 = mono_ms(); mono_ms() - t0 < 10000; usleep(20000))
		if (waitpid(m.pid, &status, WNOHANG) == m.pid)
			break;
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
		FAILF("the daemon was not killed at the directory's chown (status %d)", status);
	m.pid = 0;
	tm_run((const char *const[]){ "fusermount3", "-uz", m.mnt, NULL }, NULL);
}

static void swapped_case(void)
{
	struct stat st;

	tm_mount(&m, "allow_other", (const char *const[]){
		cu_fault_env("op=chown|fchown,name=newdir3,err=kill"), NULL });
	ASSERT_EQ(tm_as_user(USER_A, USER_A, as_a_mkdir3, NULL), 0);
	wait_killed();
	CHECK_SYS(mkdir(tm_bpath(&m, "a/rootjob"), 0700));
	write_file(tm_bpath(&m, "a/rootjob/model.pt"), "root's\n", 7);
	ASSERT_EQ(tm_as_user(USER_A, USER_A, as_a_swap, NULL), 0);
	tm_mount(&m, "allow_other", NULL);	/* recovery */
	tm_sync(&m);
	CHECK_SYS(lstat(tm_bpath(&m, "a/newdir3"), &st));
	if (st.st_uid != 0)
		FAILF("recovery gave root's directory, put at a/newdir3 by the user, to uid %u",
		      (unsigned)st.st_uid);
	ASSERT_EQ(sec_uid(tm_bpath(&m, "a/newdir3/model.pt")), 0);
	ASSERT_GE(sec_log_count(&m, "is not what its mkdir made"), 1);
	tm_stop(&m);
	printf("a directory of root's swapped in at a cut mkdir's name: not given to the user\n");
}

int main(void)
{
	struct stat st;

	sec_init_user_dir(&m, "mkdircrash", "a", USER_A);
	tm_mount(&m, "allow_other", (const char *const[]){
		cu_fault_env("op=chown|fchown,name=newdir,err=kill"), NULL });

	ASSERT_EQ(tm_as_user(USER_A, USER_A, as_a_mkdir, NULL), 0);
	wait_killed();
	ASSERT_EQ(lstat(tm_bpath(&m, "a/newdir"), &st), 0);	/* made, not yet chowned */
	ASSERT_EQ(st.st_uid, 0);
	printf("killed between mkdir and chown: the backend holds a/newdir owned by root\n");

	tm_mount(&m, "allow_other", NULL);	/* recovery */
	tm_sync(&m);
	if (lstat(tm_bpath(&m, "a/newdir"), &st) == 0) {
		if (st.st_uid != USER_A)
			FAILF("after recovery a/newdir is owned by uid %u, not the user who made it",
			      (unsigned)st.st_uid);
		CHECK_SYS(lstat(tm_path(&m, "a/newdir"), &st));
		ASSERT_EQ(st.st_uid, USER_A);
		ASSERT_EQ(tm_as_user(USER_A, USER_A, as_a_create, NULL), 0);
		tm_sync(&m);
		ASSERT_EQ(sec_uid(tm_bpath(&m, "a/newdir/f")), USER_A);
		ASSERT_EQ(sec_log_count(&m, "was made but not yet given to its owner"), 1);
		printf("after recovery: a/newdir is the user's (mkdir finished), and they work in it\n");
	} else {
		ASSERT_EQ(errno, ENOENT);
		ASSERT_EQ(lstat(tm_path(&m, "a/newdir"), &st), -1);
		printf("after recovery: a/newdir is gone (mkdir voided), on the backend and the mount\n");
	}
	tm_stop(&m);

	/* The chown fails once (EIO): the mkdir is retried, never left the daemon's. */
	tm_mount(&m, "allow_other", (const char *const[]){
		cu_fault_env("op=chown|fchown,name=newdir2,err=EIO,count=1"), NULL });
	ASSERT_EQ(tm_as_user(USER_A, USER_A, as_a_mkdir2, NULL), 0);
	/* fsync reports the failure while it is retried (50 ms later): wait for the retry. */
	for (uint64_t t0 = mono_ms(); mono_ms() - t0 < 10000; usleep(50000))
		if (lstat(tm_bpath(&m, "a/newdir2"), &st) == 0 && st.st_uid == USER_A)
			break;
	tm_sync(&m);
	ASSERT_EQ(sec_uid(tm_bpath(&m, "a/newdir2")), USER_A);
	ASSERT_GE(sec_log_count(&m, "mkdir a/newdir2"), 1);	/* the failure was reported */
	printf("a failed chown of a new directory: retried, the directory is the user's\n");
	tm_stop(&m);
	swapped_case();
	tm_cleanup(&m);
	printf("ok\n");
	return 0;
}
