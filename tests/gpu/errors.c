/*
 * errors.c — every way a capture session can be refused or fail gives the
 * caller a clear errno and message, and nothing is lost or torn:
 *   - a path not on ckptfs (ENOTTY), a missing one (ENOENT), a mount with
 *     sessions=off (EOPNOTSUPP);
 *   - a caller that is not the session's user (EPERM), a session id the
 *     daemon does not know (ESRCH, by a raw ioctl);
 *   - files that cannot be bound: published before (EEXIST), open read-only
 *     (EBADF), a directory (EISDIR), bound by another session (EBUSY);
 *   - a range beyond the size declared at bind (EFBIG);
 *   - a pointer the driver rejects (EFAULT), and a copy it refuses: the
 *     capture fails, the file is dropped at close (not published), and
 *     ckptfs_wait_files says why (a refused capture of host memory too: the
 *     file would lack its bytes);
 *   - a session the daemon ended (unmount): ENOTCONN, and closing it works;
 *   - a session whose arena cannot be mapped (RLIMIT_AS, in a child) fails
 *     with ENOMEM and leaves no descriptor behind;
 *   - no driver at all (CKPTFS_LIBCUDA names nothing; run in a fresh
 *     process): host memory is written with pwrite, a bogus pointer is EFAULT
 *     and drops the file; a file of host memory alone is published.
 */
#include "tests/gpu/gpu_util.h"
#include "gpu/include/ckptfs_ring.h"

#include <dirent.h>
#include <grp.h>
#include <sys/resource.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static uint64_t ptr(const void *p)
{
	return (uint64_t)(uintptr_t)p;
}

/* In a process whose CKPTFS_LIBCUDA names no library. */
static int no_driver(const char *mnt)
{
	struct tmount m;
	unsigned char *buf = it_pattern(5, 3 * MiB + 5);

	memset(&m, 0, sizeof(m));
	snprintf(m.mnt, sizeof(m.mnt), "%s", mnt);
	ckptfs_session *s = gt_open(&m, 8 * MiB);
	struct ckptfs_stats st;
	ckptfs_session_stats(s, &st);
	ASSERT_STR_EQ(st.driver, "none");
	int fd = gt_create(&m, "nodrv/host");
	ASSERT_EQ(ckptfs_capture(s, fd, 0, ptr(buf), 3 * MiB + 5, NULL), 0);
	ASSERT_EQ(ckptfs_file_close(s, fd, NULL, 0, NULL, NULL), 0);
	ASSERT_EQ(ckptfs_wait_files(s), 0);
	/* A capture that fails leaves a hole where its bytes were to go: the file is dropped. */
	int torn = gt_create(&m, "nodrv/torn");
	ASSERT_EQ(ckptfs_capture(s, torn, 0, ptr(buf), 3 * MiB + 5, NULL), 0);
	GT_EXPECT_ERR(ckptfs_capture(s, torn, 4 * MiB, 0x10, 100, NULL), EFAULT, "no CUDA driver");
	ASSERT_EQ(ckptfs_file_close(s, torn, NULL, 0, NULL, NULL), 0);
	GT_EXPECT_ERR(ckptfs_wait_files(s), EFAULT, "the file was dropped");
	ckptfs_session_stats(s, &st);
	ASSERT_EQ(st.host_written_bytes, 2 * (3 * MiB + 5));
	ASSERT_EQ(ckptfs_session_close(s), 0);
	cu_check_content(tm_path(&m, "nodrv/host"), buf, 3 * MiB + 5);
	ASSERT_TRUE(!file_exists(tm_path(&m, "nodrv/torn")));
	free(buf);
	return 0;
}

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	while (d && readdir(d))
		n++;
	if (d)
		closedir(d);
	return n;
}

/* In a child: the arena (64 MiB) cannot be mapped within the address space left. */
static int no_room(struct tmount *m)
{
	struct ckptfs_session_opts o = { .arena_bytes = 64 * MiB, .device = -1 };
	struct rlimit rl;
	size_t vm = 0;
	char line[256];
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmSize: %zu kB", &vm) == 1)
			break;
	if (f)
		fclose(f);
	if (!vm)
		return 77;
	ckptfs_session_close(ckptfs_session_open_ex(m->mnt, &o));	/* load what it loads first */
	int before = open_fds();
	/* Less than the smallest arena (two chunks): whatever share the user has left. */
	rl.rlim_cur = rl.rlim_max = vm * 1024 + 4 * MiB;
	if (setrlimit(RLIMIT_AS, &rl) < 0)
		return 77;
	for (int i = 0, tries = 0; i < 3; i++) {
		if (ckptfs_session_open_ex(m->mnt, &o))
			return 2;
		if (errno == ENOSPC && ++tries < 100) {	/* the last arena is not back yet */
			usleep(50000);
			i--;
		} else if (errno != ENOMEM) {
			fprintf(stderr, "no_room: session %d: %s\n", i, ckptfs_last_error());
			return 2;
		}
	}
	if (open_fds() != before) {
		fprintf(stderr, "no_room: %d descriptors open after three failed session opens, %d "
			"before\n", open_fds(), before);
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct tmount m, off;

	if (argc == 3 && !strcmp(argv[1], "--no-driver"))
		return no_driver(argv[2]);
	unsigned char *buf = it_pattern(1, 2 * MiB);
	gt_init();

	/* Not ckptfs, missing, and sessions=off. */
	errno = 0;
	ASSERT_TRUE(ckptfs_session_open("/") == NULL);
	ASSERT_EQ(errno, ENOTTY);
	GT_EXPECT_ERR(-errno, ENOTTY, "is not on a ckptfs mount");
	ASSERT_TRUE(ckptfs_session_open("/nonexistent/ckpt") == NULL);
	GT_EXPECT_ERR(-errno, ENOENT, "/nonexistent/ckpt");
	tm_start(&off, "gpu_errors_off", "cache_size=64M,sessions=off", NULL);
	ASSERT_TRUE(ckptfs_session_open(off.mnt) == NULL);
	GT_EXPECT_ERR(-errno, EOPNOTSUPP, "sessions=off");
	ASSERT_TRUE(strstr(it_stats(&off), "\"gpu_sessions\": false") != NULL);
	tm_stop(&off);
	tm_cleanup(&off);

	tm_start(&m, "gpu_errors", "cache_size=128M,allow_other", NULL);
	ckptfs_session *s = gt_open(&m, 16 * MiB);

	/*
	 * Another user may not bind files to a session: a child opens its own
	 * session as root, then becomes another user and tries to bind a file
	 * it created.  And a forked child cannot use its parent's session.
	 */
	CHECK_SYS(chmod(m.root, 0755));	/* let the other user reach the mount */
	CHECK_SYS(mkdir(tm_path(&m, "shared"), 0777));
	CHECK_SYS(chmod(tm_path(&m, "shared"), 01777));
	pid_t pid = fork();
	if (pid == 0) {
		if (ckptfs_file_bind(s, 0, 0) != -ECHILD || !strstr(ckptfs_last_error(), "forked child"))
			_exit(2);
		ckptfs_session *mine = ckptfs_session_open(m.mnt);
		if (!mine)
			_exit(3);
		if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
			_exit(77);
		int fd = open(tm_path(&m, "shared/theirs"), O_CREAT | O_WRONLY, 0644);
		if (fd < 0)
			_exit(4);
		int r = ckptfs_file_bind(mine, fd, 0);
		_exit(r == -EPERM && strstr(ckptfs_last_error(), "another user") ? 0 : 5);
	}
	int st;
	waitpid(pid, &st, 0);
	ASSERT_TRUE(WIFEXITED(st));
	if (WEXITSTATUS(st) != 77)
		ASSERT_EQ(WEXITSTATUS(st), 0);
	ASSERT_TRUE(it_wait_stat(&m, "gpu_sessions_active", "1", 5000));	/* the child's ended */

	/* A session the daemon does not know. */
	int fd = gt_create(&m, "err/raw");
	struct ckptfs_ioc_bind b = { .session = 999999, .key = { 1, 2 } };
	CU_EXPECT_ERRNO(ioctl(fd, CKPTFS_IOC_BIND, &b), ESRCH);
	close(fd);

	/* Files that cannot be bound. */
	write_file(tm_path(&m, "err/published"), buf, 100);
	fd = CHECK_SYS(open(tm_path(&m, "err/published"), O_WRONLY));
	GT_EXPECT_ERR(ckptfs_capture(s, fd, 0, ptr(buf), 10, NULL), EEXIST, "closed before");
	close(fd);
	int rd = gt_create(&m, "err/readonly");
	close(rd);
	rd = CHECK_SYS(open(tm_path(&m, "err/readonly"), O_RDONLY));
	GT_EXPECT_ERR(ckptfs_capture(s, rd, 0, ptr(buf), 10, NULL), EBADF, "not open for writing");
	close(rd);
	int dir = CHECK_SYS(open(tm_path(&m, "err"), O_RDONLY | O_DIRECTORY));
	GT_EXPECT_ERR(ckptfs_file_bind(s, dir, 0), EISDIR, NULL);
	close(dir);
	ckptfs_session *s2 = gt_open(&m, 8 * MiB);
	fd = gt_create(&m, "err/twice");
	ASSERT_EQ(ckptfs_file_bind(s, fd, 0), 0);
	GT_EXPECT_ERR(ckptfs_file_bind(s2, fd, 0), EBUSY, "another session");
	ASSERT_EQ(ckptfs_session_close(s2), 0);

	/* Beyond the declared size. */
	int lim = gt_create(&m, "err/limit");
	ASSERT_EQ(ckptfs_file_bind(s, lim, 1000), 0);
	GT_EXPECT_ERR(ckptfs_capture(s, lim, 900, ptr(buf), 200, NULL), EFBIG, "declared");
	ASSERT_EQ(ckptfs_capture(s, lim, 0, ptr(buf), 1000, NULL), 0);	/* the refused one is no capture */
	ASSERT_EQ(ckptfs_file_close(s, lim, NULL, 0, NULL, NULL), 0);

	/* A pointer the driver rejects, and copies it refuses. */
	void *hole = mmap(NULL, 1 << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_TRUE(hole != MAP_FAILED);
	int bad = gt_create(&m, "err/badptr");
	GT_EXPECT_ERR(ckptfs_capture(s, bad, 0, ptr(hole), 4096, NULL), EFAULT,
		      "driver does not know pointer");
	int fail = gt_create(&m, "err/copyfail");
	ASSERT_EQ(ckptfs_capture(s, fail, 0, ptr(buf), MiB, NULL), 0);
	setenv("CKPTFS_MOCK_FAIL_COPY", "1", 1);
	GT_EXPECT_ERR(ckptfs_capture(s, fail, MiB, ptr(buf), MiB, NULL), EFAULT,
		      "driver rejected the copy");
	unsetenv("CKPTFS_MOCK_FAIL_COPY");
	ASSERT_EQ(ckptfs_file_close(s, fail, NULL, 0, NULL, NULL), 0);
	ASSERT_EQ(ckptfs_file_close(s, bad, NULL, 0, NULL, NULL), 0);
	ASSERT_EQ(ckptfs_file_close(s, fd, NULL, 0, NULL, NULL), 0);
	GT_EXPECT_ERR(ckptfs_wait_files(s), EFAULT, "the file was dropped");
	ASSERT_EQ(ckptfs_wait_files(s), 0);	/* reported once */
	ASSERT_TRUE(!file_exists(tm_path(&m, "err/copyfail")));
	ASSERT_TRUE(!file_exists(tm_path(&m, "err/badptr")));	/* its capture failed */
	ASSERT_TRUE(file_exists(tm_path(&m, "err/limit")));
	ASSERT_TRUE(file_exists(tm_path(&m, "err/twice")));
	tm_sync(&m);
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "err/copyfail")));
	cu_check_content(tm_bpath(&m, "err/limit"), buf, 1000);

	/* No driver: a fresh process (the driver is loaded once per process). */
	pid = fork();
	if (pid == 0) {
		setenv("CKPTFS_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
		execl("/proc/self/exe", argv[0], "--no-driver", m.mnt, (char *)NULL);
		_exit(5);
	}
	waitpid(pid, &st, 0);
	ASSERT_TRUE(WIFEXITED(st));
	ASSERT_EQ(WEXITSTATUS(st), 0);

	/* No room to map the arena: ENOMEM, and nothing left open. */
	pid = fork();
	if (pid == 0)
		_exit(no_room(&m));
	waitpid(pid, &st, 0);
	ASSERT_TRUE(WIFEXITED(st));
	if (WEXITSTATUS(st) != 77)
		ASSERT_EQ(WEXITSTATUS(st), 0);

	/* The daemon goes away: the session is dead, and says so. */
	tm_stop(&m);
	int other = CHECK_SYS(open("/dev/null", O_WRONLY));
	GT_EXPECT_ERR(ckptfs_capture(s, other, 0, ptr(buf), 10, NULL), ENOTCONN, "ended the session");
	GT_EXPECT_ERR(ckptfs_file_bind(s, other, 0), ENOTCONN, "ended the session");
	close(other);
	ASSERT_EQ(ckptfs_session_close(s), 0);
	munmap(hole, 1 << 20);
	free(buf);
	tm_cleanup(&m);
	return 0;
}
