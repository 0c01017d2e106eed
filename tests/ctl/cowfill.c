/*
 * cowfill.c — a write into a chunk a pending version holds gets a copy of
 * that chunk (C1); when the rest of the copy must be filled from the
 * backend and that read fails, the write fails (EIO) and the file keeps
 * what it had: the copy goes back to the cache, and once the version is
 * published nothing is left dirty.
 *
 * A published file is evicted from the cache (small cache); a writer puts
 * 100 bytes at its start and closes: that version holds the chunk, its
 * publication held (the rename waits while a flag exists).  A second
 * writer puts 100 bytes at 200: the copy of the chunk needs bytes 100-200
 * from the backend, whose reads fail (EIO while another flag exists).
 * Then the publication goes on.  Checked: the write got EIO; the file
 * reads as the first writer left it (through the mount and on the
 * backend); the cache holds no dirty bytes after the sync (before: the
 * copy stayed in the file's map, dirty and on no list, for good — never
 * spilled, evicted or sealed); and a write there afterwards works.
 */
#include "tests/ctl/ctl_util.h"

#include <fcntl.h>
#include <unistd.h>

#define SIZE (2 * MiB)

int main(void)
{
	struct tmount m;
	char hold[PATH_MAX], eio[PATH_MAX], env[2 * PATH_MAX + 128];

	tm_require_fuse();
	tm_init(&m, "ctl-cowfill");
	snprintf(hold, sizeof(hold), "%s/hold", m.root);
	snprintf(eio, sizeof(eio), "%s/eio", m.root);
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=rename,name=cowfile,hold=%s;op=pread,err=EIO,while=%s",
		 hold, eio);
	tm_mount(&m, "cache_size=16M,chunk_size=1M,drain_timeout=5", (const char *const[]){ env, NULL });

	const char *f = tm_path(&m, "cowfile");
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s", f);
	ct_write_seeded(path, SIZE, 1);
	tm_sync(&m);
	ct_write_seeded(tm_path(&m, "big"), 24 * MiB, 2);	/* evicts cowfile's chunks */
	tm_sync(&m);
	if (ct_stat(&m, "evictions") < 2)
		FAILF("cowfile was not evicted (%.0f evictions)", ct_stat(&m, "evictions"));

	/* A version holding the chunk [0, 100), its publication held. */
	ct_touch(hold);
	int fd = CHECK_SYS(open(path, O_WRONLY));
	ASSERT_EQ(pwrite(fd, "AAAAAAAAAA", 10, 0), 10);
	CHECK_SYS(close(fd));
	usleep(500 * 1000);	/* flushed; its rename waits */

	/* A write needing a copy of that chunk, filled from a failing backend. */
	ct_touch(eio);
	fd = CHECK_SYS(open(path, O_WRONLY));
	ASSERT_EQ(pwrite(fd, "BBBBBBBBBB", 10, 200), -1);
	ASSERT_EQ(errno, EIO);
	CHECK_SYS(unlink(eio));
	CHECK_SYS(close(fd));
	CHECK_SYS(unlink(hold));
	tm_sync(&m);

	char *want = malloc(SIZE);
	ASSERT_TRUE(want != NULL);
	fill_pattern(want, SIZE, 1, 0);
	memcpy(want, "AAAAAAAAAA", 10);
	size_t len;
	char *got = read_file(path, &len);
	ASSERT_TRUE(got && len == SIZE && !memcmp(got, want, SIZE));
	free(got);
	got = read_file(tm_bpath(&m, "cowfile"), &len);
	ASSERT_TRUE(got && len == SIZE && !memcmp(got, want, SIZE));
	free(got);
	double dirty = ct_stat(&m, "cache_dirty_bytes");
	if (dirty != 0)
		FAILF("%.0f bytes stay dirty in the cache after the sync: the failed write's copy "
		      "of the chunk was left in the file", dirty);

	/* The same write now: it goes in, and is published. */
	fd = CHECK_SYS(open(path, O_WRONLY));
	ASSERT_EQ(pwrite(fd, "BBBBBBBBBB", 10, 200), 10);
	CHECK_SYS(close(fd));
	tm_sync(&m);
	memcpy(want + 200, "BBBBBBBBBB", 10);
	got = read_file(tm_bpath(&m, "cowfile"), &len);
	ASSERT_TRUE(got && len == SIZE && !memcmp(got, want, SIZE));
	free(got);
	free(want);
	ASSERT_EQ(ct_stat(&m, "cache_dirty_bytes"), 0);
	tm_stop(&m);
	tm_cleanup(&m);
	printf("ok: a copy-on-write fill that failed left nothing dirty behind\n");
	return 0;
}
