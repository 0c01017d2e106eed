/*
 * killed.c — a trainer killed mid-capture publishes nothing half-captured.
 * The trainer (a child process; copies slowed by the mock to 20 MB/s, in
 * batches of 16 one-MiB chunks):
 *   - captures "kill/done" completely and waits for it (it must survive);
 *   - captures 64 MiB into "kill/partial" and hands it to ckptfs_file_close;
 *   - captures into a temporary name meant to replace "kill/final" (which
 *     holds an older, complete version) by rename once landed;
 *   - forks a child that exits at once: its close of the inherited fds
 *     (FLUSH) must not seal the bound files; nor does a drain.
 * The test SIGKILLs the trainer once some chunks were adopted.  Then the
 * daemon ends the session and drops both bound files: they vanish from the
 * mount, the backend never gets them, "kill/final" keeps its old contents,
 * "kill/done" is intact, verify agrees, and the arena returns to the cache.
 */
#include "tests/gpu/gpu_util.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define BIG (64 * MiB)

/* Read MOUNT/.ckptfs/drain: seal everything that may be sealed, wait for it. */
static void drain(struct tmount *m)
{
	size_t len;
	char *out = read_file(tm_path(m, ".ckptfs/drain"), &len);
	if (!out || !strstr(out, "\"ok\": true"))
		FAILF("drain: %s", out ? out : strerror(errno));
	free(out);
}

static void trainer(struct tmount *m, int ready)
{
	ckptfs_session *s = ckptfs_session_open(m->mnt);
	if (!s)
		_exit(2);
	unsigned char *done = it_pattern(1, 3 * MiB), *big = it_pattern(2, BIG);
	int fd = gt_create(m, "kill/done");
	if (ckptfs_capture(s, fd, 0, (uint64_t)(uintptr_t)done, 3 * MiB, NULL) < 0 ||
	    ckptfs_file_close(s, fd, NULL, 0, NULL, NULL) < 0 || ckptfs_wait_files(s) < 0)
		_exit(3);
	int p = gt_create(m, "kill/partial");
	int t = gt_create(m, "kill/final.tmp");
	if (ckptfs_capture(s, p, 0, (uint64_t)(uintptr_t)big, BIG, NULL) < 0 ||
	    ckptfs_capture(s, t, 0, (uint64_t)(uintptr_t)big, 8 * MiB, NULL) < 0)
		_exit(4);
	pid_t c = fork();	/* a DataLoader worker, say: inherits the fds, exits */
	if (c == 0)
		_exit(0);
	waitpid(c, NULL, 0);
	if (ckptfs_file_close(s, p, NULL, 0, NULL, NULL) < 0 ||
	    ckptfs_file_close(s, t, NULL, 0, tm_path(m, "kill/final.tmp"), tm_path(m, "kill/final")) < 0)
		_exit(5);
	if (write(ready, "r", 1) != 1)
		_exit(6);
	pause();		/* killed here, captures in flight */
	_exit(7);
}

int main(void)
{
	struct tmount m;
	int from;

	gt_init();
	setenv("CKPTFS_MOCK_COPY_GBPS", "0.02", 1);
	tm_start(&m, "gpu_killed", "cache_size=256M,chunk_size=1M", NULL);
	unsigned char *old = it_pattern(9, 5000);
	CHECK_SYS(mkdir(tm_path(&m, "kill"), 0755));
	write_file(tm_path(&m, "kill/final"), old, 5000);
	tm_sync(&m);

	pid_t pid = gt_trainer(&m, trainer, &from);
	char c;
	gt_trainer_report(pid, from, &c, 1);
	/* While it captures: neither its worker's exit nor a drain seals the bound files. */
	drain(&m);
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "kill/partial")));
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "kill/final.tmp")));
	/* Kill it once some of "partial" landed, long before all of it can. */
	for (int i = 0; i < 1000 && gt_stat(&m, "gpu_captured_bytes") <= (long long)(3 * MiB); i++)
		usleep(10000);
	long long landed = gt_stat(&m, "gpu_captured_bytes");
	printf("at the kill: %lld bytes adopted, %lld chunks\n", landed,
	       gt_stat(&m, "gpu_adopted_chunks"));
	ASSERT_TRUE(landed > (long long)(3 * MiB) && landed < (long long)(3 * MiB + BIG));
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);

	ASSERT_TRUE(it_wait_stat(&m, "gpu_sessions_active", "0", 10000));
	ASSERT_EQ(gt_stat(&m, "gpu_abandoned_files"), 2);
	ASSERT_TRUE(!file_exists(tm_path(&m, "kill/partial")));
	ASSERT_TRUE(!file_exists(tm_path(&m, "kill/final.tmp")));
	drain(&m);
	tm_sync(&m);
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "kill/partial")));
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "kill/final.tmp")));
	ASSERT_TRUE(it_log_count(&m, "nothing of them is published") == 1);
	unsigned char *done = it_pattern(1, 3 * MiB);
	const char *rel[] = { "kill/done", "kill/final" };
	void *buf[] = { done, old };
	size_t len[] = { 3 * MiB, 5000 };
	gt_check_backend(&m, rel, buf, len, 2);
	cu_check_content(tm_path(&m, "kill/final"), old, 5000);
	/* Every chunk the dead session's files held came back; so did the arena. */
	ASSERT_TRUE(it_wait_stat(&m, "gpu_arena_bytes", "0", 10000));
	ASSERT_TRUE(it_wait_stat(&m, "cache_dirty_bytes", "0", 10000));
	char *out = NULL;
	it_verify(m.backend, 0, &out);
	ASSERT_EQ(it_verdict_count(out, "MISMATCH") + it_verdict_count(out, "MISSING") +
		  it_verdict_count(out, "UNTRACKED"), 0);
	free(out);
	tm_stop(&m);
	tm_cleanup(&m);
	free(old);
	free(done);
	return 0;
}
