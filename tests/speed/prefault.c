/*
 * prefault — the cache's pages are populated in the background from the
 * mount on (cache/prefault.c): mounting does not wait for them, writes that
 * outrun the background thread populate their own chunks (F1: without
 * changing a byte), the stats show how much is ready, and every byte
 * written before, during and after the population reads back and reaches
 * the backend whole.  Readers first: while a file is open for reading
 * through the mount, the thread stops 256 MiB ahead of the allocator and
 * goes on once it is closed.
 */
#include "tests/core/core_util.h"

#include <time.h>

#define CACHE (256 * MiB)	/* 64 chunks of 4 MiB */

static void wait_ready(struct tmount *m, uint64_t cap)
{
	for (int i = 0; i < 600 && cu_stat(m, "cache_ready_bytes") < cap; i++)
		usleep(50000);
	ASSERT_EQ(cu_stat(m, "cache_ready_bytes"), cap);
}

int main(void)
{
	struct tmount m;
	char opts[128];

	tm_require_fuse();
	snprintf(opts, sizeof(opts), "cache_size=%llu", (unsigned long long)CACHE);

	/* The thread sleeps 100 ms per chunk: populating 64 chunks takes 6.4 s. */
	const char *slow[] = { "CKPTFS_PREFAULT_PAUSE_MS=100", NULL };
	tm_start(&m, "prefault", opts, slow);
	uint64_t cap = cu_stat(&m, "cache_capacity_bytes");
	ASSERT_EQ(cap, CACHE);
	/* Mounted, and most of the cache is not populated yet: the mount did not wait. */
	ASSERT_LT(cu_stat(&m, "cache_ready_bytes"), cap / 2);
	/* 96 MiB now: 24 chunks, more than the thread has reached. */
	cu_write_pattern(tm_path(&m, "early"), 96 * MiB + 12345, 7);
	ASSERT_GE(cu_stat(&m, "cache_prefault_inline_chunks"), 1);
	cu_check_pattern(tm_path(&m, "early"), 96 * MiB + 12345, 7);
	/* Small files take slots of split chunks: populated the same way. */
	for (int i = 0; i < 20; i++) {
		char name[32];
		snprintf(name, sizeof(name), "small%d", i);
		cu_write_pattern(tm_path(&m, name), 1000 + (uint64_t)i * 3000, 100 + (uint64_t)i);
	}
	wait_ready(&m, cap);
	/* Once ready: the time it took is reported, and writes go on as before. */
	const char *json = cu_slurp(tm_path(&m, ".ckptfs/stats"));
	ASSERT_TRUE(strstr(json, "\"cache_ready_s\": -") == NULL);
	cu_write_pattern(tm_path(&m, "late"), 40 * MiB, 8);
	cu_check_pattern(tm_path(&m, "early"), 96 * MiB + 12345, 7);
	tm_stop(&m);
	cu_check_pattern(tm_bpath(&m, "early"), 96 * MiB + 12345, 7);
	cu_check_pattern(tm_bpath(&m, "late"), 40 * MiB, 8);
	for (int i = 0; i < 20; i++) {
		char name[32];
		snprintf(name, sizeof(name), "small%d", i);
		cu_check_pattern(tm_bpath(&m, name), 1000 + (uint64_t)i * 3000, 100 + (uint64_t)i);
	}
	tm_cleanup(&m);

	/*
	 * Unmounting while the thread is still at work: it is stopped before the
	 * arena goes away (F3) and the daemon exits 0 with the data drained.
	 */
	const char *slower[] = { "CKPTFS_PREFAULT_PAUSE_MS=500", NULL };
	tm_start(&m, "prefault2", opts, slower);
	cu_write_pattern(tm_path(&m, "f"), 10 * MiB, 9);
	ASSERT_LT(cu_stat(&m, "cache_ready_bytes"), cap);
	tm_stop(&m);
	cu_check_pattern(tm_bpath(&m, "f"), 10 * MiB, 9);
	tm_cleanup(&m);

	const char *const *slow_not = NULL;

	/* Without a pause the whole cache is populated in the background. */
	tm_start(&m, "prefault3", opts, NULL);
	wait_ready(&m, cap);
	tm_stop(&m);
	tm_cleanup(&m);

	/*
	 * Readers first: 1 GiB of cache, a file on the backend opened read-only
	 * at once after the mount and held for 3 s (past the 2 s grace): the
	 * thread stops at 256 MiB; closed, it populates the rest.
	 */
	tm_init(&m, "prefault4");
	cu_write_pattern(tm_bpath(&m, "model.bin"), 8 * MiB, 10);
	tm_mount(&m, "cache_size=1G", slow_not);
	int fd = cu_open(tm_path(&m, "model.bin"), O_RDONLY);
	sleep(3);
	uint64_t held = cu_stat(&m, "cache_ready_bytes");
	if (held > 256 * MiB + 4 * MiB)
		FAILF("%llu bytes populated while a reader held a file open (at most 256 MiB)",
		      (unsigned long long)held);
	cu_check_range(fd, "model.bin", 0, 8 * MiB, 10);
	cu_close(fd);
	wait_ready(&m, 1024 * MiB);
	tm_stop(&m);
	tm_cleanup(&m);
	return 0;
}
