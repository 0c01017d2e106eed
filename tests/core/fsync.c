/*
 * fsync.c — what fsync promises, both ways.
 *
 * fsync=durable (the default), against a backend whose namespace calls each
 * sleep 150 ms so the publisher lags the application by seconds:
 *  - fsync(fd) of a file still open returns only once that file (as of the
 *    fsync) and every operation before it — mkdir, other files, a rename, a
 *    symlink, an unlink — are on the backend; writes after the fsync do not
 *    disturb the published version until the next close;
 *  - fsync of the mount root, and of a subdirectory, waits for everything
 *    done before it.
 * fsync=lazy: while every publish sleeps 3 s, fsync returns at once, and
 * the file is not on the backend yet; unmount still drains it.
 */
#include "tests/core/core_util.h"

static void fsync_path(const char *path)
{
	int fd = cu_open(path, O_RDONLY | O_DIRECTORY);
	CHECK_SYS(fsync(fd));
	cu_close(fd);
}

static void durable(void)
{
	struct tmount m;
	const char *env[] = { cu_fault_env("op=rename|mkdir|unlink|symlink,delay_ms=150"), NULL };
	char target[16];
	int fd;

	tm_start(&m, "fsync-durable", NULL, env);
	CHECK_SYS(mkdir(tm_path(&m, "d"), 0755));
	cu_write_pattern(tm_path(&m, "d/a"), 100 * KiB, 1);
	cu_write_pattern(tm_path(&m, "d/b"), 200 * KiB + 1, 2);
	CHECK_SYS(rename(tm_path(&m, "d/b"), tm_path(&m, "d/c")));
	CHECK_SYS(symlink("c", tm_path(&m, "d/s")));
	CHECK_SYS(unlink(tm_path(&m, "d/a")));
	fd = cu_open(tm_path(&m, "d/f"), O_CREAT | O_RDWR | O_TRUNC);
	cu_write_pattern_fd(fd, 0, MiB, 3, 128 * KiB);
	CHECK_SYS(fsync(fd));

	/* Everything above is on the backend now, checked there directly. */
	cu_check_pattern(tm_bpath(&m, "d/f"), MiB, 3);
	cu_check_pattern(tm_bpath(&m, "d/c"), 200 * KiB + 1, 2);
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "d/a")));
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "d/b")));
	ssize_t n = readlink(tm_bpath(&m, "d/s"), target, sizeof(target) - 1);
	ASSERT_EQ(n, 1);
	target[n] = '\0';
	ASSERT_STR_EQ(target, "c");

	/* Writes after the fsync belong to the next version. */
	cu_write_pattern_fd(fd, 0, 4 * KiB, 4, 4 * KiB);
	usleep(300 * 1000);
	cu_check_pattern(tm_bpath(&m, "d/f"), MiB, 3);
	cu_close(fd);

	CHECK_SYS(mkdir(tm_path(&m, "e"), 0755));
	cu_write_pattern(tm_path(&m, "e/x"), 5000, 5);
	CHECK_SYS(rename(tm_path(&m, "e/x"), tm_path(&m, "e/y")));
	CHECK_SYS(unlink(tm_path(&m, "d/c")));
	fsync_path(m.mnt);
	cu_check_pattern(tm_bpath(&m, "e/y"), 5000, 5);
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "e/x")));
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "d/c")));
	fd = cu_open(tm_bpath(&m, "d/f"), O_RDONLY);
	cu_check_range(fd, "d/f after close", 0, 4 * KiB, 4);
	cu_check_range(fd, "d/f after close", 4 * KiB, MiB - 4 * KiB, 3);
	cu_close(fd);

	/* A subdirectory's fsync waits for everything before it too. */
	cu_write_pattern(tm_path(&m, "top"), 7777, 6);
	CHECK_SYS(rename(tm_path(&m, "e/y"), tm_path(&m, "e/z")));
	fsync_path(tm_path(&m, "e"));
	cu_check_pattern(tm_bpath(&m, "top"), 7777, 6);
	cu_check_pattern(tm_bpath(&m, "e/z"), 5000, 5);
	tm_stop(&m);
	tm_cleanup(&m);
}

static void lazy(void)
{
	struct tmount m;
	char flag[PATH_MAX];

	tm_init(&m, "fsync-lazy");
	snprintf(flag, sizeof(flag), "%s/slow", m.root);
	cu_write_text(flag, "");
	/* Publishing hangs while the flag exists. */
	const char *env[] = { cu_fault_env("op=rename,name=lazyfile,hold=%s", flag), NULL };
	tm_mount(&m, "fsync=lazy", env);

	int fd = cu_open(tm_path(&m, "lazyfile"), O_CREAT | O_WRONLY | O_TRUNC);
	cu_write_pattern_fd(fd, 0, MiB + 1, 7, 256 * KiB);
	uint64_t t0 = mono_ms();
	CHECK_SYS(fsync(fd));	/* a durable fsync would wait for ever */
	uint64_t took = mono_ms() - t0;
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "lazyfile")));
	ASSERT_LT(took, 20000);
	cu_close(fd);
	CHECK_SYS(unlink(flag));
	tm_stop(&m);
	cu_check_pattern(tm_bpath(&m, "lazyfile"), MiB + 1, 7);
	tm_cleanup(&m);
}

int main(void)
{
	tm_require_fuse();
	durable();
	lazy();
	return 0;
}
