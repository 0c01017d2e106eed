/*
 * fault.c — CUDA's asynchronous faults (the mock's CKPTFS_MOCK_FAULT, a
 * sticky error in the context) never publish a file whose copies did not
 * land, and never leave a wait without an end.  A sticky error lasts as
 * long as the process, so each case runs in a fresh one (this program
 * again, with the case and the mount), under a watchdog:
 *   - context: the copy is accepted, then the context faults before the
 *     host function is launched; the launch and the stream's
 *     synchronization fail.  The capture fails, and the file (captured
 *     into a temporary name, renamed at close) is dropped: neither name
 *     reaches the mount or the backend.  So is a file whose first half
 *     was captured before the fault and whose second half cannot even be
 *     ordered after its stream (an early failure): it is not published
 *     with a hole;
 *   - async-files: the copy faults when the stream runs it, so its host
 *     function is never called: ckptfs_wait_files (no wait_captured
 *     before it) returns EIO and the file is dropped;
 *   - async-close: the same, and the session is closed at once (what
 *     Python's atexit does): the close returns an error;
 *   - async-big: a capture three times the arena faults while it waits
 *     for chunks that the lost copies hold: it fails instead of waiting.
 * The parent checks the mount and the backend after each case.  Copies are
 * throttled (CKPTFS_MOCK_COPY_GBPS) so that an asynchronous fault comes
 * after the host function was launched, as a fault on a GPU does.
 */
#include "tests/gpu/gpu_util.h"

#include <sys/wait.h>
#include <unistd.h>

#define LEN (3 * MiB)

static uint64_t ptr(const void *p)
{
	return (uint64_t)(uintptr_t)p;
}

/* The copy is accepted, then the context faults: the host function cannot be launched. */
static void case_context(struct tmount *m, ckptfs_session *s, const unsigned char *buf)
{
	int fd = gt_create(m, "fault/context.tmp");
	int half = gt_create(m, "fault/half.tmp");

	ASSERT_EQ(ckptfs_capture(s, half, 0, ptr(buf), LEN / 2, NULL), 0);
	ASSERT_EQ(ckptfs_wait_captured(s), 0);	/* the first half landed */
	setenv("CKPTFS_MOCK_FAULT", "context", 1);
	GT_EXPECT_ERR(ckptfs_capture(s, fd, 0, ptr(buf), LEN, NULL), EIO, "did not complete");
	ASSERT_EQ(ckptfs_file_close(s, fd, NULL, 0, tm_path(m, "fault/context.tmp"),
				    tm_path(m, "fault/context")), 0);
	GT_EXPECT_ERR(ckptfs_capture(s, half, LEN / 2, ptr(buf + LEN / 2), LEN - LEN / 2, NULL),
		      EINVAL, "cannot order the copy");
	ASSERT_EQ(ckptfs_file_close(s, half, NULL, 0, tm_path(m, "fault/half.tmp"),
				    tm_path(m, "fault/half")), 0);
	GT_EXPECT_ERR(ckptfs_wait_files(s), EIO, "the file was dropped");
}

/* A copy faults on the stream: its host function never runs. */
static void case_async(struct tmount *m, ckptfs_session *s, const unsigned char *buf,
		       const char *name, bool wait_files)
{
	char tmp[64], final[64];

	snprintf(tmp, sizeof(tmp), "fault/%s.tmp", name);
	snprintf(final, sizeof(final), "fault/%s", name);
	int fd = gt_create(m, tmp);
	setenv("CKPTFS_MOCK_FAULT", "async", 1);
	ASSERT_EQ(ckptfs_capture(s, fd, 0, ptr(buf), LEN, NULL), 0);	/* accepted: the fault comes later */
	ASSERT_EQ(ckptfs_file_close(s, fd, NULL, 0, tm_path(m, tmp), tm_path(m, final)), 0);
	if (wait_files)
		GT_EXPECT_ERR(ckptfs_wait_files(s), EIO, "the file was dropped");
}

/* Larger than the arena: the capture waits for chunks its lost copies hold. */
static void case_async_big(struct tmount *m, ckptfs_session *s)
{
	size_t len = 48 * MiB;
	unsigned char *big = it_pattern(8, len);
	int fd = gt_create(m, "fault/big");

	setenv("CKPTFS_MOCK_FAULT", "async", 1);
	int r = ckptfs_capture(s, fd, 0, ptr(big), len, NULL);
	if (r >= 0)
		FAILF("a capture over a faulted context returned %d", r);
	ASSERT_TRUE(ckptfs_file_close(s, fd, NULL, 0, NULL, NULL) == 0);
	ASSERT_TRUE(ckptfs_wait_files(s) < 0);
	free(big);
}

static int run_case(const char *name, const char *mnt)
{
	struct tmount m;
	unsigned char *buf = it_pattern(7, LEN);

	memset(&m, 0, sizeof(m));
	snprintf(m.mnt, sizeof(m.mnt), "%s", mnt);
	gt_watchdog(30, "HANG: a wait after an asynchronous fault did not end in 30 s");
	ckptfs_session *s = gt_open(&m, 16 * MiB);
	if (!strcmp(name, "context"))
		case_context(&m, s, buf);
	else if (!strcmp(name, "async-files") || !strcmp(name, "async-close"))
		case_async(&m, s, buf, name, !strcmp(name, "async-files"));
	else if (!strcmp(name, "async-big"))
		case_async_big(&m, s);
	else
		FAILF("no case %s", name);
	ASSERT_TRUE(ckptfs_session_close(s) < 0);	/* the context is gone: it says so */
	gt_watchdog(0, "");
	free(buf);
	return 0;
}

/* Run case `name` in a fresh process; none of `gone` may exist, in the mount or on the backend. */
static void check_case(struct tmount *m, char **argv, const char *name, const char *const *gone)
{
	int st;
	pid_t pid = fork();

	if (pid == 0) {
		execl("/proc/self/exe", argv[0], name, m->mnt, (char *)NULL);
		_exit(5);
	}
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		FAILF("case %s: the child failed (status %#x)", name, st);
	tm_sync(m);
	for (size_t i = 0; gone[i]; i++) {
		if (file_exists(tm_path(m, gone[i])) || file_exists(tm_bpath(m, gone[i])))
			FAILF("case %s: %s was published", name, gone[i]);
	}
}

int main(int argc, char **argv)
{
	struct tmount m;

	if (argc == 3)
		return run_case(argv[1], argv[2]);
	gt_init();
	setenv("CKPTFS_MOCK_COPY_GBPS", "0.05", 1);	/* 3 MiB: 60 ms */
	tm_start(&m, "gpu_fault", "cache_size=128M", NULL);
	check_case(&m, argv, "context", (const char *const[]){ "fault/context.tmp", "fault/context",
							       "fault/half.tmp", "fault/half",
							       NULL });
	check_case(&m, argv, "async-files", (const char *const[]){ "fault/async-files.tmp",
								   "fault/async-files", NULL });
	check_case(&m, argv, "async-close", (const char *const[]){ "fault/async-close.tmp",
								   "fault/async-close", NULL });
	check_case(&m, argv, "async-big", (const char *const[]){ "fault/big", NULL });
	tm_stop(&m);
	tm_cleanup(&m);
	return 0;
}
