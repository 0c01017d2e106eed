/*
 * bound.c — what other calls do to a file bound to a capture session
 * (session.c S2, S3): nothing of it is reported durable or published
 * before its unbind.  Each case is a trainer in a child process that
 * captures a file completely (ckptfs_wait_captured), does the call while
 * the file is still bound, tells the test what it got, and is then killed
 * with the file still bound:
 *   - fsync(fd) fails with EBUSY (it returned 0, and the file then vanished
 *     with the session: "durable" was a lie); a drain meanwhile counts the
 *     file as open for writing;
 *   - truncate(path) changes the file and seals nothing (it published what
 *     had landed, zeros elsewhere, and the file then outlived its session);
 *   - after the kill the file is gone from the mount and was never on the
 *     backend, and the same file captured and closed by the library is
 *     durable after an fsync, which then returns 0.
 */
#include "tests/gpu/gpu_util.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define LEN (3 * MiB)

typedef int (*bound_call)(struct tmount *m, const char *rel, int fd);

/* The trainer: capture rel, call `call` on it while bound, report, wait to be killed. */
static void trainer(struct tmount *m, const char *rel, bound_call call, int report)
{
	ckptfs_session *s = ckptfs_session_open(m->mnt);
	unsigned char *buf = it_pattern(1, LEN);
	if (!s)
		_exit(2);
	int fd = gt_create(m, rel);
	if (ckptfs_capture(s, fd, 0, (uint64_t)(uintptr_t)buf, LEN, NULL) < 0 ||
	    ckptfs_wait_captured(s) < 0)
		_exit(3);
	int r = call(m, rel, fd);
	if (write(report, &r, sizeof(r)) != sizeof(r))
		_exit(4);
	pause();
	_exit(5);
}

/* Run the trainer; the call's result (-errno) once it is made, the trainer still alive. */
static int bound_run(struct tmount *m, const char *rel, bound_call call, pid_t *pid)
{
	int pp[2], r;

	CHECK_SYS(pipe(pp));
	if ((*pid = fork()) == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);	/* a failing test leaves no trainer */
		close(pp[0]);
		trainer(m, rel, call, pp[1]);
	}
	close(pp[1]);
	if (read(pp[0], &r, sizeof(r)) != sizeof(r)) {
		int st;
		waitpid(*pid, &st, 0);
		FAILF("%s: the trainer failed before its call (status %d)", rel, WEXITSTATUS(st));
	}
	close(pp[0]);
	return r;
}

/* Kill the trainer: its bound file must go, from the mount and the backend. */
static void bound_kill(struct tmount *m, const char *rel, pid_t pid, long long abandoned)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	ASSERT_TRUE(it_wait_stat(m, "gpu_sessions_active", "0", 10000));
	ASSERT_EQ(gt_stat(m, "gpu_abandoned_files"), abandoned);
	tm_sync(m);
	if (file_exists(tm_path(m, rel)) || file_exists(tm_bpath(m, rel)))
		FAILF("%s: still there after its session ended (mount %d, backend %d)", rel,
		      file_exists(tm_path(m, rel)), file_exists(tm_bpath(m, rel)));
}

static int call_fsync(struct tmount *m, const char *rel, int fd)
{
	(void)m;
	(void)rel;
	return fsync(fd) < 0 ? -errno : 0;
}

static int call_truncate(struct tmount *m, const char *rel, int fd)
{
	(void)fd;
	return truncate(tm_path(m, rel), LEN / 2) < 0 ? -errno : 0;
}

static void drain_counts_open(struct tmount *m, unsigned want)
{
	char need[64];
	size_t len;
	char *out = read_file(tm_path(m, ".ckptfs/drain"), &len);
	if (!out)
		FAILF("drain: %s", strerror(errno));
	snprintf(need, sizeof(need), "\"open_for_writing\": %u}", want);
	if (!strstr(out, need))
		FAILF("drain: expected %s in %s", need, out);
	free(out);
}

int main(void)
{
	struct tmount m;
	pid_t pid;
	int r;

	gt_init();
	tm_start(&m, "gpu_bound", "cache_size=128M,chunk_size=1M", NULL);
	CHECK_SYS(mkdir(tm_path(&m, "b"), 0755));

	/* fsync(2) of a bound file says it is not durable. */
	r = bound_run(&m, "b/fsync", call_fsync, &pid);
	if (r != -EBUSY)
		FAILF("fsync of a bound file: expected -EBUSY, got %d (%s)", r, strerror(-r));
	drain_counts_open(&m, 1);
	bound_kill(&m, "b/fsync", pid, 1);

	/* truncate(path) of a bound file changes it, and seals nothing. */
	r = bound_run(&m, "b/truncate", call_truncate, &pid);
	if (r != 0)
		FAILF("truncate of a bound file: %s", strerror(-r));
	bound_kill(&m, "b/truncate", pid, 2);

	/* Once the library closed it, fsync waits for it and says so. */
	ckptfs_session *s = gt_open(&m, 8 * MiB);
	unsigned char *buf = it_pattern(2, LEN);
	int fd = gt_create(&m, "b/closed");
	ASSERT_EQ(ckptfs_capture(s, fd, 0, (uint64_t)(uintptr_t)buf, LEN, NULL), 0);
	gt_close_wait(s, fd);
	fd = (int)CHECK_SYS(open(tm_path(&m, "b/closed"), O_RDONLY));
	ASSERT_EQ(fsync(fd), 0);
	close(fd);
	cu_check_content(tm_bpath(&m, "b/closed"), buf, LEN);
	ASSERT_EQ(ckptfs_session_close(s), 0);

	tm_stop(&m);
	tm_cleanup(&m);
	free(buf);
	return 0;
}
