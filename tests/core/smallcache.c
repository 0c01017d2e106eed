/*
 * smallcache.c — writes that need more chunks than a small cache has free
 * go in, a chunk at a time (cache/cfile.c, cfile_write): a write never
 * holds chunks while it waits for more.
 *
 *  1. One 1 MiB write into a cache of eight 64 KiB chunks: it needs
 *     seventeen, more than the whole cache; the chunks it filled are
 *     spilled to make room for the rest.  Before: EIO after drain_timeout,
 *     every time, over a healthy backend.
 *  2. Writers that each need two chunks of a cache of two: four processes,
 *     each writing 1 MiB across a chunk boundary of its own file, many
 *     times.  Before: each could hold one chunk and wait for the other's,
 *     until all failed with EIO.
 * Every write succeeds and the backend holds exactly what was written.
 */
#include "tests/core/core_util.h"

#include <sys/wait.h>

static void big_write(struct tmount *m)
{
	const size_t len = MiB;
	char *buf = malloc(len);

	ASSERT_TRUE(buf != NULL);
	fill_pattern(buf, len, 3, 4096);
	int fd = cu_open(tm_path(m, "big"), O_WRONLY | O_CREAT | O_TRUNC);
	uint64_t t0 = mono_ms();
	ssize_t w = pwrite(fd, buf, len, 4096);	/* one request (max_write is 1 MiB) */
	if (w != (ssize_t)len)
		FAILF("a 1 MiB write into a 512 KiB cache: %zd (%s) after %llu ms", w,
		      w < 0 ? strerror(errno) : "short", (unsigned long long)(mono_ms() - t0));
	cu_close(fd);
	tm_sync(m);
	char *got = malloc(len + 4096);
	ASSERT_TRUE(got != NULL);
	fd = cu_open(tm_bpath(m, "big"), O_RDONLY);
	cu_pread_all(fd, got, len + 4096, 0);
	cu_close(fd);
	for (size_t i = 0; i < 4096; i++)
		ASSERT_EQ(got[i], 0);
	ASSERT_EQ(memcmp(got + 4096, buf, len), 0);
	free(got);
	free(buf);
}

static void crossing_writers(struct tmount *m)
{
	enum { WRITERS = 4, ROUNDS = 6 };
	const uint64_t cs = 4 * MiB, len = MiB;
	pid_t pid[WRITERS];

	for (int k = 0; k < WRITERS; k++) {
		if ((pid[k] = fork()) == 0) {
			char name[16], *buf = malloc(len);
			snprintf(name, sizeof(name), "w%d", k);
			for (int r = 0; r < ROUNDS; r++) {
				int fd = open(tm_path(m, name), O_WRONLY | O_CREAT | O_TRUNC, 0644);
				fill_pattern(buf, len, (uint64_t)(k * 100 + r), cs - len / 2);
				ssize_t w = fd < 0 ? -1 : pwrite(fd, buf, len, (off_t)(cs - len / 2));
				if (w != (ssize_t)len) {
					fprintf(stderr, "writer %d, round %d: %zd (%s)\n", k, r, w,
						strerror(errno));
					_exit(1);
				}
				if (close(fd) != 0)
					_exit(2);
			}
			_exit(0);
		}
		ASSERT_TRUE(pid[k] > 0);
	}
	for (int k = 0; k < WRITERS; k++) {
		int st;
		ASSERT_EQ(waitpid(pid[k], &st, 0), pid[k]);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			FAILF("writer %d failed (status %d): writers waited for each other's chunks", k, st);
	}
	tm_sync(m);
	for (int k = 0; k < WRITERS; k++) {
		char name[16], *want = malloc(len), *got = malloc(len);
		snprintf(name, sizeof(name), "w%d", k);
		fill_pattern(want, len, (uint64_t)(k * 100 + ROUNDS - 1), cs - len / 2);
		int fd = cu_open(tm_bpath(m, name), O_RDONLY);
		ASSERT_EQ(cu_file_size(tm_bpath(m, name)), cs + len / 2);
		cu_pread_all(fd, got, len, cs - len / 2);
		cu_close(fd);
		ASSERT_EQ(memcmp(got, want, len), 0);
		free(want);
		free(got);
	}
}

int main(void)
{
	struct tmount m;

	tm_require_fuse();
	tm_init(&m, "smallcache");
	tm_mount(&m, "cache_size=512K,chunk_size=64K,drain_timeout=5", NULL);
	big_write(&m);
	tm_stop(&m);
	tm_mount(&m, "cache_size=8M,chunk_size=4M,drain_timeout=5", NULL);
	crossing_writers(&m);
	tm_stop(&m);
	tm_cleanup(&m);
	printf("ok: writes larger than the free cache go in, a chunk at a time\n");
	return 0;
}
