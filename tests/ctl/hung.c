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
 *     answer, instead of waiting for the daemon (an epilog's drain).
 *
 * Then the backend answers again and everything is published.
 */
#include "tests/ctl/ctl_util.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

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

	unlink(flag);
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "drain", m.mnt, "--timeout", "30", NULL });
	ct_expect_status(&r, 0, "ckptfs-ctl drain --timeout 30 once the backend answers");
	ct_expect_in(r.out, "durable up to operation", "drain's report");
	ct_result_free(&r);
	tm_sync(&m);
	ct_check_seeded(tm_bpath(&m, "f"), 1 << 20, 1);
	tm_stop(&m);
	tm_cleanup(&m);
	printf("ok\n");
	return 0;
}
