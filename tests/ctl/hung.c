/*
 * hung.c — over a hung backend, the waits a user meets end (P4: no wait is
 * unbounded).
 *
 * The backend's fsync and fdatasync hang (CKPTFS_FAULT hold=: a call waits
 * while a flag exists, as on a hung NFS or Lustre server), with
 * drain_timeout=2:
 *
 *   - fsync(2) of a file just written fails with EIO once the backend has
 *     made no progress for 2 s (it used to wait for as long as the server
 *     hung);
 *   - with the daemon stopped (SIGSTOP: it answers nothing),
 *     `ckptfs-ctl drain --timeout 2` exits 1 saying the mount does not
 *     answer, instead of waiting for the daemon (an epilog's drain); so
 *     does a drain without --timeout, once the stats do not answer either;
 *     and `ckptfs-stat --timeout 0` (no limit) ends at SIGINT and at
 *     SIGTERM, as its page says (it went back to waiting on both).
 *
 * Then the backend answers again and everything is published.
 *
 * A slow backend is not a hung one: with every data write taking 0.5 s, a
 * 64 MiB file takes longer than drain_timeout=2 to become durable, but the
 * backend makes progress all along, so its fsync waits and succeeds (the
 * deadline is re-armed at each sign of progress, backend_wait_rearm).
 */
#include "tests/ctl/ctl_util.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ckptfs-stat --timeout 0 MOUNT over a stopped daemon, sent sig after 1 s: gone within 5 s. */
static void stat_ends_at(struct tmount *m, int sig)
{
	pid_t pid = CHECK_SYS(fork());
	int st = 0;

	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		execl(ct_tool("ckptfs-stat"), "ckptfs-stat", "--timeout", "0", m->mnt, (char *)NULL);
		_exit(127);
	}
	usleep(1000 * 1000);
	CHECK_SYS(kill(pid, sig));
	uint64_t t0 = mono_ms();
	pid_t w = 0;
	while ((w = waitpid(pid, &st, WNOHANG)) == 0 && mono_ms() - t0 < 5000)
		usleep(20 * 1000);
	if (w != pid) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		FAILF("ckptfs-stat --timeout 0 over a stopped daemon still ran 5 s after %s",
		      strsignal(sig));
	}
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		FAILF("ckptfs-stat exited 0 after %s without an answer", strsignal(sig));
	printf("ckptfs-stat --timeout 0 over a stopped daemon: ends %llu ms after %s\n",
	       (unsigned long long)(mono_ms() - t0), strsignal(sig));
}

static void slow_but_moving(void)
{
	struct tmount m;
	char flag[PATH_MAX], env0[PATH_MAX + 64];

	tm_init(&m, "ctl-slow");
	snprintf(flag, sizeof(flag), "%s/slow", m.root);
	snprintf(env0, sizeof(env0), "CKPTFS_FAULT=op=pwrite,delay_ms=500,while=%s", flag);
	tm_mount(&m, "drain_timeout=2,io=pwrite", (const char *const[]){ env0, NULL });
	ct_touch(flag);
	ct_write_seeded(tm_path(&m, "big"), 64 << 20, 3);
	int fd = open(tm_path(&m, "big"), O_RDONLY);
	CHECK_SYS(fd);
	uint64_t t0 = mono_ms();
	if (fsync(fd) < 0)
		FAILF("fsync over a slow backend that makes progress failed: %s", strerror(errno));
	uint64_t ms = mono_ms() - t0;
	close(fd);
	/* Longer than drain_timeout, or the re-arming was not exercised. */
	ASSERT_GE(ms, 2000);
	printf("fsync of 64 MiB over a backend that takes 0.5 s a write: durable after %llu ms "
	       "(drain_timeout=2: re-armed while it moved)\n", (unsigned long long)ms);
	unlink(flag);
	ct_check_seeded(tm_bpath(&m, "big"), 64 << 20, 3);
	tm_stop(&m);
	tm_cleanup(&m);
}

int main(void)
{
	struct tmount m;
	char flag[PATH_MAX];
	struct ct_result r;

	tm_require_fuse();
	tm_init(&m, "ctl-hung");
	snprintf(flag, sizeof(flag), "%s/hold", m.root);
	char env0[PATH_MAX + 64];
	snprintf(env0, sizeof(env0), "CKPTFS_FAULT=op=fsync|fdatasync,hold=%s", flag);
	const char *env[] = { env0, NULL };
	tm_mount(&m, "drain_timeout=2", env);

	ct_touch(flag);
	ct_write_seeded(tm_path(&m, "f"), 1 << 20, 1);
	int fd = open(tm_path(&m, "f"), O_RDONLY);
	CHECK_SYS(fd);
	uint64_t t0 = mono_ms();
	errno = 0;
	ASSERT_EQ(fsync(fd), -1);	/* no progress for drain_timeout: the error, not a hang */
	ASSERT_EQ(errno, EIO);
	close(fd);
	printf("fsync over a hung backend: EIO after %llu ms (drain_timeout=2)\n",
	       (unsigned long long)(mono_ms() - t0));

	CHECK_SYS(kill(m.pid, SIGSTOP));
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "drain", m.mnt, "--timeout", "2", NULL });
	CHECK_SYS(kill(m.pid, SIGCONT));
	ct_expect_status(&r, 1, "ckptfs-ctl drain --timeout 2 of a stopped daemon");
	ct_expect_in(r.err, "does not answer", "drain's message");
	printf("ckptfs-ctl drain --timeout 2 of a stopped daemon: exit 1 after %llu ms\n",
	       (unsigned long long)r.ms);
	ct_result_free(&r);
	/* Without --timeout too: its stats do not answer either (checked every 10 s, 30 s each). */
	CHECK_SYS(kill(m.pid, SIGSTOP));
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "drain", m.mnt, NULL });
	CHECK_SYS(kill(m.pid, SIGCONT));
	ct_expect_status(&r, 1, "ckptfs-ctl drain of a stopped daemon");
	ct_expect_in(r.err, "does not answer", "drain's message");
	printf("ckptfs-ctl drain of a stopped daemon: exit 1 after %llu ms\n", (unsigned long long)r.ms);
	ct_result_free(&r);
	CHECK_SYS(kill(m.pid, SIGSTOP));
	stat_ends_at(&m, SIGINT);
	stat_ends_at(&m, SIGTERM);
	CHECK_SYS(kill(m.pid, SIGCONT));

	unlink(flag);
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "drain", m.mnt, "--timeout", "30", NULL });
	ct_expect_status(&r, 0, "ckptfs-ctl drain --timeout 30 once the backend answers");
	ct_expect_in(r.out, "durable up to operation", "drain's report");
	ct_result_free(&r);
	tm_sync(&m);
	ct_check_seeded(tm_bpath(&m, "f"), 1 << 20, 1);
	tm_stop(&m);
	tm_cleanup(&m);
	slow_but_moving();
	printf("ok\n");
	return 0;
}
