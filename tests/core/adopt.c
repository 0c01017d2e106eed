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
 *   6. a cache that fills (128 chunks, a slow backend): writers wait for
 *      room while workers hold spares; nothing is lost, the spares stay
 *      few, and chunks are still taken as they lie.
 * Then every file is compared with its model on the backend after unmount,
 * and a loop=splice mount writes the same way and takes nothing.
 */
#include "tests/core/core_util.h"

#include <stdlib.h>
#include <string.h>

#define OPTS "cache_size=256M,chunk_size=1M,max_threads=4"
#define NFILES 10
#define MAXSIZE (10 * MiB)
#define BIG (320 * MiB)	/* phase 6: two and a half caches */

/* What each file should hold: a model kept beside the writes. */
static struct model {
	const char *name;
	char *buf;
	uint64_t size;
} files[NFILES];

static struct model *model(const char *name)
{
	for (int i = 0; i < NFILES; i++) {
		if (!files[i].name) {
			files[i].name = name;
			files[i].buf = calloc(1, strcmp(name, "big") ? MAXSIZE : BIG);
			ASSERT_TRUE(files[i].buf != NULL);
			return &files[i];
		}
		if (!strcmp(files[i].name, name))
			return &files[i];
	}
	FAILF("too many files");
	return NULL;
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

	/* 6. A full cache: 128 chunks, every backend write 20 ms late. */
	const char *slow[] = { cu_fault_env("op=pwrite,delay_ms=20"), NULL };
	tm_mount(&m, "cache_size=128M,chunk_size=1M,max_threads=4,io=pwrite", slow);
	stream(&m, "big", 0, buf, 0, BIG, 15);
	ASSERT_GE(cu_stat(&m, "backpressure_waits"), 1);
	ASSERT_GE(cu_stat(&m, "fuse_adopted_bytes"), 64 * MiB);
	ASSERT_LE(cu_stat(&m, "cache_spare_bytes"), 4 * MiB);	/* one per worker at most */
	tm_stop(&m);
	check_all(m.backend);

	for (int i = 0; i < NFILES && files[i].name; i++)
		free(files[i].buf);
	free(buf);
	tm_cleanup(&m);
	return 0;
}
