/*
 * stall.c — a stalled backend never stalls the request path (issue 9,
 * item 6): no backend I/O happens under the namespace lock.
 *
 * Once a directory is loaded, every backend system call starts to sleep
 * 10 s (CKPTFS_FAULT op=any,delay_ms=10000 while a flag exists) — a hung
 * NFS or Lustre server.  Meanwhile, closing files whose data fits in the
 * cache, creating and renaming files, an rmdir of a loaded directory
 * whose view has expired (its revalidation waits at most 100 ms), stat and
 * readdir of the loaded directory, and reading the stats must all answer
 * without waiting for the backend: each well under the 10 s a backend call takes (not a speed
 * target — a wait on the backend would take at least 10 s).  Three
 * requests waiting for the backend at once (more than the workers that
 * read /dev/fuse at a time, fs/loop.c) do not hold up the others either.
 * Then the stall ends and everything is published.
 */
#include "tests/ctl/ctl_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

/* Reads an xattr of a file whose xattrs are not loaded yet: waits for the backend. */
static void *slow_getxattr(void *arg)
{
	char v[64];
	getxattr((const char *)arg, "user.none", v, sizeof(v));
	return NULL;
}

#define STALL_MS 10000
#define BOUND_MS (STALL_MS / 2)

static uint64_t worst;

static void took(uint64_t t0, const char *what)
{
	uint64_t ms = mono_ms() - t0;
	if (ms >= BOUND_MS)
		FAILF("%s took %llu ms while the backend was stalled: it waited for the backend",
		      what, (unsigned long long)ms);
	worst = ms > worst ? ms : worst;
}

int main(void)
{
	struct tmount m;
	char flag[PATH_MAX], rule[64], name[64], buf[65536];
	struct ct_result r;
	struct stat st;

	tm_require_fuse();
	snprintf(rule, sizeof(rule), "op=any,delay_ms=%d", STALL_MS);
	ct_mount_flagged(&m, "ctl-stall", rule, flag);
	CHECK_SYS(mkdir(tm_path(&m, "ckpt"), 0755));
	ct_write_seeded(tm_path(&m, "ckpt/warm"), 1000, 1);
	ct_write_seeded(tm_path(&m, "ckpt/warm1"), 1000, 2);
	ct_write_seeded(tm_path(&m, "ckpt/warm2"), 1000, 3);
	CHECK_SYS(mkdir(tm_path(&m, "ckpt/empty"), 0755));
	tm_sync(&m);
	/* Mounted again, so that the files' xattrs are not loaded; the directory is. */
	char env[PATH_MAX + 128];
	snprintf(env, sizeof(env), "CKPTFS_FAULT=%s,while=%s", rule, flag);
	tm_stop(&m);
	tm_mount(&m, NULL, (const char *const[]){ env, NULL });
	DIR *ld = opendir(tm_path(&m, "ckpt"));
	ASSERT_TRUE(ld != NULL);
	while (readdir(ld))
		;
	closedir(ld);
	ld = opendir(tm_path(&m, "ckpt/empty"));	/* loaded: its rmdir revalidates it */
	ASSERT_TRUE(ld != NULL);
	while (readdir(ld))
		;
	closedir(ld);
	ct_touch(flag);
	usleep(100 * 1000);

	memset(buf, 7, sizeof(buf));
	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "ckpt/f%d", i);
		int fd = CHECK_SYS(open(tm_path(&m, name), O_CREAT | O_WRONLY | O_TRUNC, 0644));
		CHECK_SYS(write(fd, buf, sizeof(buf)));
		uint64_t t0 = mono_ms();
		CHECK_SYS(close(fd));
		took(t0, "close()");
		t0 = mono_ms();
		CHECK_SYS(stat(tm_path(&m, "ckpt"), &st));
		DIR *d = opendir(tm_path(&m, "ckpt"));
		ASSERT_TRUE(d != NULL);
		while (readdir(d))
			;
		closedir(d);
		took(t0, "stat and readdir of a loaded directory");
	}
	/*
	 * Requests waiting for the backend's xattrs hold no lock others need,
	 * and do not leave the others without a worker to read them.
	 */
	pthread_t xt[3];
	char warm[3][PATH_MAX];
	for (int i = 0; i < 3; i++) {
		snprintf(warm[i], sizeof(warm[i]), "%s", tm_path(&m, i ? (i == 1 ? "ckpt/warm1"
										  : "ckpt/warm2")
									  : "ckpt/warm"));
		pthread_create(&xt[i], NULL, slow_getxattr, warm[i]);
	}
	usleep(1200 * 1000);	/* and the kernel's attributes of warm have expired */
	uint64_t t0 = mono_ms();
	CHECK_SYS(stat(warm[0], &st));
	CHECK_SYS(stat(tm_path(&m, "ckpt/f2"), &st));
	took(t0, "stat while three other requests read the backend's xattrs");
	t0 = mono_ms();
	CHECK_SYS(rename(tm_path(&m, "ckpt/f0"), tm_path(&m, "ckpt/renamed")));
	CHECK_SYS(mkdir(tm_path(&m, "ckpt/sub"), 0755));
	CHECK_SYS(unlink(tm_path(&m, "ckpt/f1")));
	CHECK_SYS(rmdir(tm_path(&m, "ckpt/empty")));	/* its revalidation waits <= 100 ms */
	took(t0, "rename, mkdir, unlink and rmdir in a loaded directory");
	t0 = mono_ms();
	free(ct_read_ctl(&m, "stats"));
	took(t0, "reading the stats");
	fprintf(stderr, "worst request while stalled: %llu ms (a backend call: %d ms)\n",
		(unsigned long long)worst, STALL_MS);

	CHECK_SYS(unlink(flag));
	for (int i = 0; i < 3; i++)
		pthread_join(xt[i], NULL);
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "drain", m.mnt, "--timeout", "90", NULL });
	ct_expect_status(&r, 0, "ckptfs-ctl drain after the stall");
	ct_result_free(&r);
	ASSERT_TRUE(file_exists(tm_bpath(&m, "ckpt/renamed")));
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "ckpt/f1")));
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "ckpt/empty")));
	ASSERT_TRUE(file_exists(tm_bpath(&m, "ckpt/f19")));
	tm_stop(&m);
	tm_cleanup(&m);
	return 0;
}
