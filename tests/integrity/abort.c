/*
 * abort.c — the kernel's connection aborted under the daemon
 * (/sys/fs/fuse/connections/N/abort, what an administrator does to a hung
 * mount): the daemon drains what it absorbed and exits 0, and leaves no
 * dead mount behind.  libfuse's unmount gives up on the aborted device,
 * which left the mount answering ENOTCONN and the next mount there refused
 * ("Transport endpoint is not connected") until someone unmounted it; the
 * daemon detaches it now (fs/loop.c, detach_dead_mount).
 *
 * Needs the fusectl file system: mounted at /sys/fs/fuse/connections for
 * the test if it is not (and unmounted after); exits 77 where it cannot be.
 */
#include "tests/integrity/integ.h"

#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>

#define CONN_DIR "/sys/fs/fuse/connections"

int main(void)
{
	struct tmount m;
	struct stat st;
	char path[PATH_MAX];
	bool mounted_ctl = false;

	tm_require_fuse();
	if (cu_mount_count(CONN_DIR) == 0) {
		if (mount("fusectl", CONN_DIR, "fusectl", 0, NULL) != 0) {
			fprintf(stderr, "cannot mount fusectl at %s (%s): skipped\n", CONN_DIR,
				strerror(errno));
			return 77;
		}
		mounted_ctl = true;
	}
	tm_init(&m, "abort");
	tm_mount(&m, NULL, NULL);
	it_write_pattern(tm_path(&m, "f"), 5, 3 * 1024 * 1024);
	CHECK_SYS(stat(m.mnt, &st));
	snprintf(path, sizeof(path), CONN_DIR "/%u/abort", minor(st.st_dev));
	cu_write_text(path, "1");

	int status = -1;
	for (uint64_t t0 = mono_ms(); mono_ms() - t0 < 60000; usleep(20000)) {
		if (waitpid(m.pid, &status, WNOHANG) == m.pid)
			break;
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		FAILF("the daemon did not exit 0 within 60 s of the abort (status %d)", status);
	m.pid = 0;
	ASSERT_TRUE(it_has_pattern(tm_bpath(&m, "f"), 5, 3 * 1024 * 1024));	/* drained */
	if (cu_mount_count(m.mnt) != 0)
		FAILF("the aborted mount is still there: the next mount on %s would be refused", m.mnt);
	char *log = it_log_text(&m);
	if (!strstr(log, "aborted"))
		FAILF("the daemon did not say it detached the aborted mount");
	free(log);

	/* The next mount there comes up and sees the file. */
	tm_mount(&m, NULL, NULL);
	ASSERT_TRUE(it_has_pattern(tm_path(&m, "f"), 5, 3 * 1024 * 1024));
	tm_stop(&m);
	tm_cleanup(&m);
	if (mounted_ctl)
		umount(CONN_DIR);
	printf("ok: an aborted connection is drained and its mount detached\n");
	return 0;
}
