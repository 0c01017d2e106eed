/*
 * adopt.c — loop=readv: a write's data are read from /dev/fuse into a free
 * cache chunk, and a write that starts a chunk makes that chunk the file's
 * (no copy).  Every shape of write must still give the bytes the writer
 * wrote, through the mount and on the backend, and the stats must say how
 * many bytes were taken so (fuse_adopted_bytes) without claiming any where
 * none can be.
 *
 * With 1 MiB chunks and a cache large enough for spares:
 *   1. sequential 1 MiB writes from a page-aligned buffer, and O_DIRECT
 *      ones: taken whole (but for the first of each worker, which takes a
 *      spare only once it has seen a large write);
 *   2. writes at chunk starts over a chunk that holds more than they cover
 *      (its tail must survive), and ones that cover it (replaced);
 *   3. unaligned 1 MiB writes, and a file's first small bytes (a slot):
 *      copied, the stat does not move;
 *   4. a file reopened after a remount (its chunks only in the backend) and
 *      written at a chunk start with less than a chunk: the rest of that
 *      chunk comes from the published file;
 *   5. a closed file (its version still being published) overwritten at
 *      once at a chunk start: the new chunk replaces the one the version
 *      holds without changing what that version publishes.
 *   6. a cache that fills (128 chunks, the backend's writes held until the
 *      writer waits for room): nothing is lost, the spares stay few, and
 *      chunks were taken as they lie until then;
 *   7. three threads at once, each over its own file: random writes (half
 *      a chunk at a chunk start, the rest anywhere, up to 2 MiB),
 *      truncates, and reopens (read-write and write-only).
 * Then every file is compared with its model on the backend after unmount,
 * and a loop=splice mount writes the same way and takes nothing.
 */
#include "tests/core/core_util.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define OPTS "cache_size=256M,chunk_size=1M,max_threads=4"
#define NFILES 16
#define MAXSIZE (10 * MiB)
#define BIG (192 * MiB)	/* phase 6: one and a half caches */
#define MIXERS 3	/* phase 7 */
#define MIX_SPAN (24 * MiB)
#define MIX_OPS 150

/* What each file should hold: a model kept beside the writes. */
static struct model {
	const char *name;
	char *buf;
	uint64_t size;
} files[NFILES];

/* The model of file `name`, made with room for cap bytes if new (not thread-safe). */
static struct model *model_cap(const char *name, uint64_t cap)
{
	for (int i = 0; i < NFILES; i++) {
		if (!files[i].name) {
			files[i].name = name;
			files[i].buf = calloc(1, cap);
			ASSERT_TRUE(files[i].buf != NULL);
			return &files[i];
		}
		if (!strcmp(files[i].name, name))
			return &files[i];
	}
	FAILF("too many files");
	return NULL;
}

static struct model *model(const char *name)
{
	return model_cap(name, MAXSIZE);
}

static char *aligned(size_t len)
{
	void *p;

	ASSERT_EQ(posix_memalign(&p, 4096, len), 0);
	return p;
}

/* pwrite len bytes of pattern seed at off through fd (from buf), and into the model. */
static void put(int fd, struct model *md, char *buf, uint64_t off, size_t len, uint64_t seed)
{
	fill_pattern(buf, len, seed, off);
	cu_pwrite_all(fd, buf, len, off);
	memcpy(md->buf + off, buf, len);
	if (off + len > md->size)
		md->size = off + len;
}

/* A new file of 1 MiB writes from off to end, opened with extra flags. */
static void stream(struct tmount *m, const char *name, int flags, char *buf, uint64_t off,
		   uint64_t end, uint64_t seed)
{
	struct model *md = model(name);
	int fd = cu_open(tm_path(m, name), O_CREAT | O_WRONLY | O_TRUNC | flags);

	for (; off < end; off += MiB)
		put(fd, md, buf, off, MiB, seed);
	cu_close(fd);
}

/* ---- 7. writers at once, random shapes ---- */

struct mixer {
	char path[PATH_MAX];
	struct model *md;
	uint64_t seed;
};

static uint64_t next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Random writes (half of them a chunk at a chunk start), truncates and reopens of one file. */
static void *mixer_main(void *arg)
{
	struct mixer *x = arg;
	struct model *md = x->md;
	char *buf = aligned(2 * MiB);
	uint64_t s = x->seed;
	int fd = cu_open(x->path, O_CREAT | O_RDWR | O_TRUNC);

	for (int i = 0; i < MIX_OPS; i++) {
		uint64_t k = next(&s) % 100, off, len;

		if (k < 45) {
			off = next(&s) % 24 * MiB;
			len = MiB;
		} else if (k < 60) {
			off = next(&s) % 24 * MiB;
			len = 1 + next(&s) % (2 * MiB - 1);
		} else if (k < 88) {
			off = next(&s) % MIX_SPAN;
			len = 1 + next(&s) % (2 * MiB - 1);
		} else if (k < 94) {
			uint64_t n = next(&s) % MIX_SPAN;
			CHECK_SYS(ftruncate(fd, (off_t)n));
			if (n < md->size)
				memset(md->buf + n, 0, md->size - n);
			md->size = n;
			continue;
		} else {
			cu_close(fd);
			fd = cu_open(x->path, k < 97 ? O_RDWR : O_WRONLY);
			continue;
		}
		put(fd, md, buf, off, len, x->seed + (uint64_t)i);
	}
	cu_close(fd);
	free(buf);
	return NULL;
}

static void mixers(struct tmount *m)
{
	static const char *const names[MIXERS] = { "mix0", "mix1", "mix2" };
	struct mixer x[MIXERS];
	pthread_t t[MIXERS];

	for (int i = 0; i < MIXERS; i++) {
		snprintf(x[i].path, sizeof(x[i].path), "%s", tm_path(m, names[i]));
		x[i].md = model_cap(names[i], MIX_SPAN + 2 * MiB);
		x[i].seed = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
		ASSERT_EQ(pthread_create(&t[i], NULL, mixer_main, &x[i]), 0);
	}
	for (int i = 0; i < MIXERS; i++)
		pthread_join(t[i], NULL);
}

static void check(const char *root, const struct model *md)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", root, md->name);
	cu_check_content(path, md->buf, md->size);
}

static void check_all(const char *root)
{
	for (int i = 0; i < NFILES && files[i].name; i++)
		check(root, &files[i]);
}

int main(void)
{
	struct tmount m;
	char *buf = aligned(4 * MiB);
	uint64_t a0, a1;
	int fd;

	tm_require_fuse();
	tm_start(&m, "adopt", OPTS, NULL);

	/* 1. Sequential chunk-sized writes, buffered and O_DIRECT: taken whole. */
	a0 = cu_stat(&m, "fuse_adopted_bytes");
	stream(&m, "seq", 0, buf, 0, 8 * MiB, 1);
	stream(&m, "dio", O_DIRECT, buf, 0, 4 * MiB, 2);
	a1 = cu_stat(&m, "fuse_adopted_bytes");
	/* a worker takes a spare after its first large write: a few are copied */
	if (a1 - a0 < 8 * MiB)
		FAILF("12 MiB of chunk-aligned 1 MiB writes: only %llu bytes taken without a copy",
		      (unsigned long long)(a1 - a0));
	check_all(m.mnt);

	/* 2. At chunk starts over chunks that hold more, and that hold less. */
	struct model *over = model("over");
	fd = cu_open(tm_path(&m, "over"), O_CREAT | O_RDWR | O_TRUNC);
	put(fd, over, buf, 0, 2 * MiB, 3);		/* chunks 0 and 1, whole */
	put(fd, over, buf, MiB, 512 * KiB, 4);		/* chunk 1's start: its tail stays */
	put(fd, over, buf, 3 * MiB, 256 * KiB, 5);	/* chunk 3: [0, 256K) */
	put(fd, over, buf, 3 * MiB, 768 * KiB, 6);	/* covers what chunk 3 holds: replaced */
	put(fd, over, buf, 0, MiB, 7);			/* covers chunk 0: replaced */
	cu_close(fd);
	check(m.mnt, over);

	/* 3. Unaligned, and a small file's first bytes: copied, nothing taken. */
	a0 = cu_stat(&m, "fuse_adopted_bytes");
	stream(&m, "unaligned", 0, buf, 12345, 6 * MiB, 8);
	struct model *small = model("small");
	fd = cu_open(tm_path(&m, "small"), O_CREAT | O_WRONLY | O_TRUNC);
	put(fd, small, buf, 0, 40 * KiB, 9);
	cu_close(fd);
	ASSERT_EQ(cu_stat(&m, "fuse_adopted_bytes"), a0);
	check_all(m.mnt);

	/* 5. Overwrite chunk 0 of a file just closed (its version may hold it). */
	struct model *ver = model("ver");
	fd = cu_open(tm_path(&m, "ver"), O_CREAT | O_WRONLY | O_TRUNC);
	put(fd, ver, buf, 0, 3 * MiB, 10);
	cu_close(fd);
	fd = cu_open(tm_path(&m, "ver"), O_WRONLY);
	put(fd, ver, buf, 0, MiB, 11);
	cu_close(fd);
	check(m.mnt, ver);

	tm_stop(&m);
	check_all(m.backend);

	/* 4. After a remount the chunks are only in the backend's files. */
	tm_mount(&m, OPTS, NULL);
	struct model *seq = model("seq");
	fd = cu_open(tm_path(&m, "seq"), O_WRONLY);
	put(fd, seq, buf, 2 * MiB, 256 * KiB, 12);	/* the rest of chunk 2 from the backend */
	put(fd, seq, buf, 8 * MiB, MiB, 13);		/* past the end: a new chunk */
	cu_close(fd);
	check(m.mnt, seq);
	tm_stop(&m);
	check_all(m.backend);

	/* The splice loop copies every write: the stat stays 0. */
	tm_mount(&m, OPTS ",loop=splice", NULL);
	stream(&m, "spliced", 0, buf, 0, 4 * MiB, 14);
	ASSERT_EQ(cu_stat(&m, "fuse_adopted_bytes"), 0);
	tm_stop(&m);
	check_all(m.backend);

	/*
	 * 6. A full cache: 128 chunks, the backend's writes held until the
	 * writer (a child) waits for room; then they go on.
	 */
	char hold[PATH_MAX];
	snprintf(hold, sizeof(hold), "%s/hold", m.root);
	const char *held[] = { cu_fault_env("op=pwrite,hold=%s", hold), NULL };
	tm_mount(&m, "cache_size=128M,chunk_size=1M,max_threads=4,io=pwrite", held);
	write_file(hold, "", 0);
	struct model *big = model_cap("big", BIG);
	pid_t pid = fork();
	CHECK_SYS(pid);
	if (pid == 0) {
		stream(&m, "big", 0, buf, 0, BIG, 15);
		_exit(0);
	}
	for (uint64_t t0 = mono_ms(); !cu_stat(&m, "backpressure_waits");) {
		if (mono_ms() - t0 > 60000) {
			unlink(hold);
			FAILF("a writer of 192 MiB into a 128 MiB cache over a held backend "
			      "never waited for room");
		}
		usleep(20000);
	}
	ASSERT_GE(cu_stat(&m, "fuse_adopted_bytes"), 32 * MiB);
	ASSERT_LE(cu_stat(&m, "cache_spare_bytes"), 4 * MiB);	/* one per worker at most */
	CHECK_SYS(unlink(hold));
	int st;
	CHECK_SYS(waitpid(pid, &st, 0));
	ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	for (uint64_t off = 0; off < BIG; off += MiB)	/* what the child wrote */
		fill_pattern(big->buf + off, MiB, 15, off);
	big->size = BIG;
	tm_stop(&m);
	check_all(m.backend);

	/* 7. Three writers at once over a cache with room for spares. */
	tm_mount(&m, "cache_size=512M,chunk_size=1M,max_threads=8", NULL);
	a0 = cu_stat(&m, "fuse_adopted_bytes");
	mixers(&m);
	ASSERT_GE(cu_stat(&m, "fuse_adopted_bytes") - a0, 16 * MiB);
	for (int i = 0; i < MIXERS; i++)
		check(m.mnt, model(i == 0 ? "mix0" : i == 1 ? "mix1" : "mix2"));
	tm_stop(&m);
	for (int i = 0; i < MIXERS; i++)
		check(m.backend, model(i == 0 ? "mix0" : i == 1 ? "mix1" : "mix2"));

	for (int i = 0; i < NFILES && files[i].name; i++)
		free(files[i].buf);
	free(buf);
	tm_cleanup(&m);
	return 0;
}
