/*
 * backpressure.c — captures larger than the arena, and than the cache,
 * make progress: nothing deadlocks, and the waits are counted.
 *   1. arena of 2 one-MiB chunks, one capture of 48 MiB into one file: the
 *      capture is issued in batches that each wait for a chunk, and the
 *      daemon moves adopted chunks of the still-bound file out of the arena
 *      (gpu_moved_chunks) while the client waits (backpressure_waits);
 *   2. a cache of 16 MiB (so at most 8 MiB of arena) and two 40 MiB files
 *      captured at once from two threads: moving chunks out needs cache
 *      space, which only the spiller can make (spilled_bytes), while the
 *      files are still bound and cannot be published.
 * An alarm bounds each part; contents and verify are checked after.
 */
#include "tests/gpu/gpu_util.h"

#include <pthread.h>

struct big {
	ckptfs_session *s;
	int fd;
	unsigned char *buf;
	size_t len;
	int r;
	char err[256];
};

static void *big_main(void *arg)
{
	struct big *b = arg;
	b->r = ckptfs_capture(b->s, b->fd, 0, (uint64_t)(uintptr_t)b->buf, b->len, NULL);
	if (b->r >= 0)
		b->r = ckptfs_file_close(b->s, b->fd, NULL, 0, NULL, NULL);
	if (b->r < 0)
		snprintf(b->err, sizeof(b->err), "%s", ckptfs_last_error());
	return NULL;
}

int main(void)
{
	struct tmount m;

	gt_init();

	/* 1. one capture, 24 times the arena */
	tm_start(&m, "gpu_backpressure", "cache_size=128M,chunk_size=1M", NULL);
	ckptfs_session *s = gt_open(&m, 2 * MiB);
	struct ckptfs_stats st;
	ckptfs_session_stats(s, &st);
	ASSERT_EQ(st.arena_bytes, 2 * MiB);
	size_t len = 48 * MiB;
	unsigned char *buf = it_pattern(1, len);
	gt_watchdog(60, "backpressure: no progress: deadlock");
	struct big b = { s, gt_create(&m, "bp/one"), buf, len, 0, "" };
	big_main(&b);
	if (b.r < 0)
		FAILF("big capture: %s", b.err);
	if (ckptfs_wait_files(s) < 0)
		FAILF("wait_files: %s", ckptfs_last_error());
	gt_watchdog(0, "");
	ckptfs_session_stats(s, &st);
	printf("arena 2 MiB, 48 MiB captured: %llu arena waits (%.3f s), %llu chunks moved out\n",
	       (unsigned long long)st.arena_waits, (double)st.arena_wait_ns / 1e9,
	       (unsigned long long)st.moved_chunks);
	ASSERT_GE(st.arena_waits, 1);
	ASSERT_GE(st.moved_chunks, 1);
	ASSERT_GE(gt_stat(&m, "backpressure_waits"), 1);
	ASSERT_GE(gt_stat(&m, "gpu_moved_chunks"), 1);
	ASSERT_EQ(ckptfs_session_close(s), 0);
	const char *rel1[] = { "bp/one" };
	void *buf1[] = { buf };
	size_t len1[] = { len };
	gt_check_backend(&m, rel1, buf1, len1, 1);
	tm_stop(&m);
	tm_cleanup(&m);
	free(buf);

	/* 2. two files larger than the whole cache, at once */
	tm_start(&m, "gpu_backpressure2", "cache_size=16M,chunk_size=1M", NULL);
	s = gt_open(&m, 64 * MiB);	/* asks for more than it may get */
	ckptfs_session_stats(s, &st);
	ASSERT_LE(st.arena_bytes, 8 * MiB);
	len = 40 * MiB;
	struct big two[2] = { { s, gt_create(&m, "bp/a"), it_pattern(2, len), len, 0, "" },
			      { s, gt_create(&m, "bp/b"), it_pattern(3, len), len, 0, "" } };
	pthread_t th[2];
	gt_watchdog(90, "backpressure: no progress: deadlock");
	for (int i = 0; i < 2; i++)
		CHECK_SYS(-pthread_create(&th[i], NULL, big_main, &two[i]));
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		if (two[i].r < 0)
			FAILF("capture %d: %s", i, two[i].err);
	}
	if (ckptfs_wait_files(s) < 0)
		FAILF("wait_files: %s", ckptfs_last_error());
	gt_watchdog(0, "");
	printf("cache 16 MiB, 2 x 40 MiB: spilled %lld bytes, %lld backpressure waits\n",
	       gt_stat(&m, "spilled_bytes"), gt_stat(&m, "backpressure_waits"));
	ASSERT_TRUE(gt_stat(&m, "spilled_bytes") > 0);
	ASSERT_GE(gt_stat(&m, "backpressure_waits"), 1);
	ASSERT_EQ(ckptfs_session_close(s), 0);
	const char *rel2[] = { "bp/a", "bp/b" };
	void *buf2[] = { two[0].buf, two[1].buf };
	size_t len2[] = { len, len };
	gt_check_backend(&m, rel2, buf2, len2, 2);
	ASSERT_LE(gt_stat(&m, "cache_used_bytes"), 16 * MiB);
	tm_stop(&m);
	tm_cleanup(&m);
	free(two[0].buf);
	free(two[1].buf);
	return 0;
}
