/*
 * spillrace.c — files dropped while the spiller works on them.
 *
 * The spiller picks a chunk from the cache's spill list and takes a
 * reference on its file; a file whose last reference is being dropped at
 * that moment must not be revived and freed twice (cache.h: a reference is
 * taken only while the count is not zero).  Four threads each write files of
 * 2 MiB in 64 KiB writes through a cache of sixteen 64 KiB chunks, so the
 * spiller works all the time, and drop them in every way: unlinked while open then closed, closed then
 * unlinked, or kept.  Bounded by rounds and by time.  A use after free or a
 * double free shows under ASan as a daemon that dies (tm_stop fails); the
 * kept files must reach the backend whole.
 *
 * Then a spilled file's stage files, removed with it: a stage that is not
 * the version's output goes when its last reference does, and that must
 * happen before the next batch can remove the directory it lies in, or
 * the rmdir meets ENOTEMPTY (a false block until the stage is gone).  The
 * stage's unlink is held (fault rule) while the file is published, and the
 * file and directory removed through the mount; once let go, the backend
 * must have removed the directory without a single error or retry.
 */
#include "tests/core/core_util.h"

#include <pthread.h>

#define THREADS 4
#define ROUNDS 60
#define FILE_SIZE (2 * MiB)
#define PIECE (64 * KiB)
#define TIME_MS 5000

static struct tmount m;
static uint64_t t_end;

struct worker {
	unsigned id;
	unsigned kept;		/* files kept: k<id>-<i> for i < kept */
};

static uint64_t seed_of(unsigned id, unsigned i) { return 1000 + id * 100 + i; }

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	char name[64], path[PATH_MAX * 2];

	for (unsigned r = 0; r < ROUNDS && mono_ms() < t_end; r++) {
		unsigned how = r % 3;
		if (how == 2)
			snprintf(name, sizeof(name), "k%u-%u", w->id, w->kept);
		else
			snprintf(name, sizeof(name), "d%u-%u", w->id, r);
		snprintf(path, sizeof(path), "%s/%s", m.mnt, name);	/* tm_path is not thread-safe */
		int fd = cu_open(path, O_CREAT | O_WRONLY | O_TRUNC);
		cu_write_pattern_fd(fd, 0, FILE_SIZE, how == 2 ? seed_of(w->id, w->kept) : 7, PIECE);
		if (how == 0)		/* unlinked while open: its last put comes at close */
			CHECK_SYS(unlink(path));
		cu_close(fd);
		if (how == 1)
			CHECK_SYS(unlink(path));
		else if (how == 2)
			w->kept++;
	}
	return NULL;
}

static void stage_gone_before_rmdir(void)
{
	struct tmount d;
	char hold[PATH_MAX], dir[PATH_MAX * 2];
	uint64_t t0;

	tm_init(&d, "spillrace-rmdir");
	snprintf(hold, sizeof(hold), "%s/hold", d.root);
	cu_write_text(hold, "");
	const char *env[] = {
		cu_fault_env("op=unlink,name=.ckptfs.s.,hold=%s;op=pwrite,delay_ms=40", hold), NULL
	};
	tm_mount(&d, "cache_size=4M,chunk_size=1M", env);
	CHECK_SYS(mkdir(tm_path(&d, "X"), 0755));
	cu_sync_retry(&d, 20000);		/* X is on the backend: stages go there */
	snprintf(dir, sizeof(dir), "%s/X", d.backend);
	/*
	 * Spill writes slowed (40 ms each): a close finds one in flight, so the
	 * version goes to a fresh file and the stage is left over (its unlink
	 * held).  Usually the first file does it.
	 */
	for (int i = 0; i < 8 && cu_count_temp_tree(dir) == 0; i++) {
		char name[32];
		snprintf(name, sizeof(name), "X/big%d", i);
		cu_write_pattern(tm_path(&d, name), 24 * MiB, 9);
		for (t0 = mono_ms(); strcmp(cu_file_state(tm_path(&d, name)), "durable"); usleep(20000))
			if (mono_ms() - t0 > 20000)
				FAILF("%s not durable within 20 s", name);
		CHECK_SYS(unlink(tm_path(&d, name)));
	}
	ASSERT_GE(cu_stat(&d, "spilled_bytes"), 8 * MiB);
	ASSERT_GE(cu_count_temp_tree(dir), 1);	/* a stage left over, its unlink held */
	CHECK_SYS(rmdir(tm_path(&d, "X")));
	usleep(1500 * 1000);			/* a publisher free to go on would try the rmdir */
	CHECK_SYS(unlink(hold));
	cu_sync_retry(&d, 20000);
	ASSERT_TRUE(!file_exists(dir));
	ASSERT_EQ(cu_stat(&d, "backend_errors"), 0);
	ASSERT_EQ(cu_stat(&d, "backend_retries"), 0);
	tm_stop(&d);
	ASSERT_EQ(cu_count_temp_tree(d.backend), 0);
	tm_cleanup(&d);
	printf("ok: a spilled file's stages are gone before its directory's rmdir\n");
}

int main(void)
{
	struct worker w[THREADS];
	pthread_t th[THREADS];
	char name[64];

	tm_require_fuse();
	tm_start(&m, "spillrace", "cache_size=1M,chunk_size=64K", NULL);
	t_end = mono_ms() + TIME_MS;
	for (unsigned i = 0; i < THREADS; i++) {
		w[i] = (struct worker){ .id = i };
		if (pthread_create(&th[i], NULL, worker_main, &w[i]) != 0)
			FAILF("pthread_create failed");
	}
	for (unsigned i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	ASSERT_GE(cu_stat(&m, "spilled_bytes"), 8 * MiB);	/* the spiller did work */
	tm_stop(&m);		/* fails if the daemon died or leaked */
	unsigned kept = 0;
	for (unsigned i = 0; i < THREADS; i++) {
		for (unsigned k = 0; k < w[i].kept; k++, kept++) {
			snprintf(name, sizeof(name), "k%u-%u", i, k);
			cu_check_pattern(tm_bpath(&m, name), FILE_SIZE, seed_of(i, k));
		}
	}
	ASSERT_GE(kept, 1);
	ASSERT_EQ(cu_count_temp_tree(m.backend), 0);
	tm_cleanup(&m);
	stage_gone_before_rmdir();
	return 0;
}
