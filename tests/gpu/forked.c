/*
 * forked.c — a trainer killed mid-capture while a child it forked (without
 * exec) lives on: the child must not keep the trainer's session alive.
 * The session's socket is inherited across fork, and the daemon ends a
 * session only when its socket closes; libckptfs's fork handler closes the
 * socket and doorbells in the child.  The trainer (copies slowed by the
 * mock) captures 64 MiB into "fork/partial", forks a helper that checks its
 * copy of the session refuses calls (ECHILD) and then sleeps, and is
 * SIGKILLed once some chunks were adopted.  With the helper still alive,
 * the daemon must end the session, drop the bound file and free the arena.
 */
#include "tests/gpu/gpu_util.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define BIG (64 * MiB)

struct report {
	pid_t helper;
	int bind_err;		/* ckptfs_file_bind in the helper: -ECHILD */
};

static void trainer(struct tmount *m, int ready)
{
	ckptfs_session *s = ckptfs_session_open(m->mnt);
	if (!s)
		_exit(2);
	unsigned char *big = it_pattern(2, BIG);
	int p = gt_create(m, "fork/partial");
	if (ckptfs_capture(s, p, 0, (uint64_t)(uintptr_t)big, BIG, NULL) < 0)
		_exit(4);
	int hp[2];
	if (pipe(hp) < 0)
		_exit(5);
	pid_t c = fork();	/* a persistent worker, say: lives on */
	if (c == 0) {
		int q = gt_create(m, "fork/helper");
		int r = ckptfs_file_bind(s, q, 0);
		if (write(hp[1], &r, sizeof(r)) != sizeof(r))
			_exit(1);
		for (;;)
			pause();
	}
	struct report rep = { .helper = c };
	if (c < 0 || read(hp[0], &rep.bind_err, sizeof(rep.bind_err)) != sizeof(rep.bind_err))
		_exit(6);
	if (write(ready, &rep, sizeof(rep)) != sizeof(rep))
		_exit(7);
	pause();		/* killed here, the capture in flight */
	_exit(8);
}

int main(void)
{
	struct tmount m;
	struct report rep;

	gt_init();
	setenv("CKPTFS_MOCK_COPY_GBPS", "0.02", 1);
	tm_start(&m, "gpu_forked", "cache_size=256M,chunk_size=1M", NULL);
	CHECK_SYS(mkdir(tm_path(&m, "fork"), 0755));

	int from;
	pid_t pid = gt_trainer(&m, trainer, &from);
	gt_trainer_report(pid, from, &rep, sizeof(rep));
	printf("helper %d: ckptfs_file_bind on the parent's session: %d\n", (int)rep.helper,
	       rep.bind_err);
	ASSERT_EQ(rep.bind_err, -ECHILD);
	for (int i = 0; i < 1000 && gt_stat(&m, "gpu_captured_bytes") <= 0; i++)
		usleep(10000);
	long long landed = gt_stat(&m, "gpu_captured_bytes");
	printf("at the kill: %lld bytes adopted\n", landed);
	ASSERT_TRUE(landed > 0 && landed < (long long)BIG);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);

	/* The helper lives on; the session ends all the same. */
	bool ended = it_wait_stat(&m, "gpu_sessions_active", "0", 10000);
	int alive = kill(rep.helper, 0) == 0;
	kill(rep.helper, SIGKILL);
	ASSERT_TRUE(alive);
	ASSERT_TRUE(ended);
	ASSERT_EQ(gt_stat(&m, "gpu_abandoned_files"), 1);
	ASSERT_TRUE(!file_exists(tm_path(&m, "fork/partial")));
	ASSERT_TRUE(it_wait_stat(&m, "gpu_arena_bytes", "0", 10000));
	tm_stop(&m);
	tm_cleanup(&m);
	return 0;
}
