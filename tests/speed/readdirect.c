/*
 * readdirect — read-only opens that the daemon serves bypass the kernel's
 * page cache (read_direct=on, the default; fs/ops.c read_direct), and
 * nothing a reader can see changes:
 *   - every read of such a handle reaches the daemon (read_bytes grows by
 *     the file's size on each of three whole reads, and on a second read
 *     of the same range through one handle), with the right bytes:
 *     by read(2) in small and odd pieces, by one read into fresh anonymous
 *     memory (as torch.load reads a tensor), at and past the end of file;
 *   - mmap works: shared and private read-only mappings hold the file;
 *   - a reader sees at once what a writer wrote before its read: a
 *     write-only handle still open, a read-write handle (which writes
 *     through the page cache), a shared writable mapping's stores, a
 *     rewrite closed before the open; while a file is open for writing its
 *     read-only opens use the page cache;
 *   - read_direct=off: the second read of a file comes from the mount's
 *     page cache (read_bytes unchanged), and stats say the lever is off.
 * passthrough=off throughout, so every read-only open is one the daemon
 * serves.  Where the kernel cannot map direct-I/O files (no
 * FUSE_DIRECT_IO_ALLOW_MMAP, before Linux 6.6) the lever stays off: the
 * test checks that the reads are right and that stats say so.
 */
#include "tests/core/core_util.h"

#include <sys/mman.h>

#define SIZE (5 * MiB + 123)

/* Read the whole file through one fresh handle; returns the daemon's read_bytes growth. */
static uint64_t read_whole(struct tmount *m, const char *name, uint64_t seed)
{
	uint64_t rb = cu_stat(m, "read_bytes");
	cu_check_pattern(tm_path(m, name), SIZE, seed);
	return cu_stat(m, "read_bytes") - rb;
}

/* Odd pieces, a read across the end, reads at and past it. */
static void read_pieces(struct tmount *m, const char *name, uint64_t seed)
{
	int fd = cu_open(tm_path(m, name), O_RDONLY);
	char *want = malloc(SIZE), *got = malloc(SIZE);
	size_t sizes[] = { 1, 4095, 4097, 65536 + 7, MiB + 1, 3 * MiB };
	uint64_t off = 0;

	fill_pattern(want, SIZE, seed, 0);
	for (unsigned i = 0; off < SIZE; i++) {
		size_t n = sizes[i % (sizeof(sizes) / sizeof(sizes[0]))];
		ssize_t r = read(fd, got + off, n);
		ASSERT_GE(r, 1);
		ASSERT_EQ((uint64_t)r, n < SIZE - off ? (uint64_t)n : SIZE - off);
		off += (uint64_t)r;
	}
	ASSERT_EQ(memcmp(got, want, SIZE), 0);
	ASSERT_EQ(read(fd, got, 4096), 0);	/* at the end */
	ASSERT_EQ(pread(fd, got, 4096, SIZE + MiB), 0);	/* past it */
	ASSERT_EQ(pread(fd, got, 4096, SIZE - 100), 100);	/* across it */
	ASSERT_EQ(memcmp(got, want + SIZE - 100, 100), 0);
	cu_close(fd);
	free(want);
	free(got);
}

/* One read of the whole file into memory the reader never touched (torch.load). */
static void read_fresh(struct tmount *m, const char *name, uint64_t seed)
{
	size_t len = (SIZE + 4095) & ~(size_t)4095;
	char *dst = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *want = malloc(SIZE);
	ASSERT_TRUE(dst != MAP_FAILED);
	fill_pattern(want, SIZE, seed, 0);
	int fd = cu_open(tm_path(m, name), O_RDONLY);
	uint64_t off = 0;
	while (off < SIZE) {	/* one call, unless the kernel returns short */
		ssize_t r = read(fd, dst + off, SIZE - off);
		ASSERT_GE(r, 1);
		off += (uint64_t)r;
	}
	ASSERT_EQ(memcmp(dst, want, SIZE), 0);
	cu_close(fd);
	munmap(dst, len);
	free(want);
}

static void check_map(struct tmount *m, const char *name, uint64_t seed, int how)
{
	char *want = malloc(SIZE);
	fill_pattern(want, SIZE, seed, 0);
	int fd = cu_open(tm_path(m, name), O_RDONLY);
	char *map = mmap(NULL, SIZE, PROT_READ, how, fd, 0);
	ASSERT_TRUE(map != MAP_FAILED);
	ASSERT_EQ(memcmp(map, want, SIZE), 0);
	munmap(map, SIZE);
	cu_close(fd);
	free(want);
}

int main(void)
{
	struct tmount m;
	char got[64];

	tm_require_fuse();
	tm_init(&m, "rdio");
	tm_mount(&m, "passthrough=off", NULL);
	const char *stats = cu_slurp(tm_path(&m, ".ckptfs/stats"));
	bool on = strstr(stats, "\"read_direct\": true") != NULL;
	if (!on) {
		ASSERT_TRUE(strstr(stats, "\"read_direct\": false") != NULL);
		fprintf(stderr, "the kernel cannot map direct-I/O FUSE files here: read_direct stays off;"
			" checking reads only\n");
	}

	cu_write_pattern(tm_path(&m, "a"), SIZE, 1);
	uint64_t o0 = cu_stat(&m, "read_direct_opens");
	ASSERT_GE(read_whole(&m, "a", 1), SIZE);
	uint64_t second = read_whole(&m, "a", 1), third = read_whole(&m, "a", 1);
	if (on) {
		/*
		 * Every read reached the daemon: no page cache kept between them
		 * (with it, the third read would be served from the page cache
		 * the second left: the read_direct=off part below).
		 */
		ASSERT_GE(second, SIZE);
		ASSERT_GE(third, SIZE);
		ASSERT_EQ(cu_stat(&m, "read_direct_opens"), o0 + 3);
		/* ... and within one handle too: the same range twice, twice to the daemon. */
		int fd = cu_open(tm_path(&m, "a"), O_RDONLY);
		for (int i = 0; i < 2; i++) {
			uint64_t rb = cu_stat(&m, "read_bytes");
			cu_check_range(fd, "a", 0, SIZE, 1);
			ASSERT_GE(cu_stat(&m, "read_bytes"), rb + SIZE);
		}
		cu_close(fd);
	} else {
		ASSERT_EQ(cu_stat(&m, "read_direct_opens"), 0);
	}
	read_pieces(&m, "a", 1);
	read_fresh(&m, "a", 1);
	check_map(&m, "a", 1, MAP_SHARED);
	check_map(&m, "a", 1, MAP_PRIVATE);

	/*
	 * What a writer wrote before the read, the read returns.  While the
	 * file is open for writing, read-only opens use the page cache (a
	 * writer's shared mapping stores there).
	 */
	int w = cu_open(tm_path(&m, "a"), O_WRONLY);
	cu_pwrite_all(w, "open-writer", 11, 2 * MiB);
	o0 = cu_stat(&m, "read_direct_opens");
	int r = cu_open(tm_path(&m, "a"), O_RDONLY);
	ASSERT_EQ(cu_stat(&m, "read_direct_opens"), o0);
	ASSERT_EQ(pread(r, got, 11, 2 * MiB), 11);
	ASSERT_EQ(memcmp(got, "open-writer", 11), 0);
	cu_close(w);
	int rw = cu_open(tm_path(&m, "a"), O_RDWR);	/* through the page cache */
	cu_pwrite_all(rw, "read-write", 10, 3 * MiB);
	ASSERT_EQ(pread(r, got, 10, 3 * MiB), 10);
	ASSERT_EQ(memcmp(got, "read-write", 10), 0);
	cu_close(rw);
	cu_close(r);
	/* A shared writable mapping: a reader opened while it exists sees its bytes. */
	rw = cu_open(tm_path(&m, "a"), O_RDWR);
	char *wmap = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0);
	ASSERT_TRUE(wmap != MAP_FAILED);
	cu_close(rw);	/* the mapping keeps the file open for writing */
	memcpy(wmap + 4 * MiB, "mapped", 6);
	r = cu_open(tm_path(&m, "a"), O_RDONLY);
	ASSERT_EQ(pread(r, got, 6, 4 * MiB), 6);
	ASSERT_EQ(memcmp(got, "mapped", 6), 0);
	cu_close(r);
	munmap(wmap, SIZE);
	cu_write_pattern(tm_path(&m, "a"), SIZE, 2);	/* a rewrite, closed */
	read_pieces(&m, "a", 2);
	read_fresh(&m, "a", 2);
	check_map(&m, "a", 2, MAP_SHARED);
	tm_sync(&m);
	cu_check_pattern(tm_bpath(&m, "a"), SIZE, 2);
	tm_stop(&m);

	/* Off: the kernel keeps what the first read brought in. */
	tm_mount(&m, "passthrough=off,read_direct=off", NULL);
	ASSERT_TRUE(strstr(cu_slurp(tm_path(&m, ".ckptfs/stats")), "\"read_direct\": false") != NULL);
	ASSERT_GE(read_whole(&m, "a", 2), SIZE);
	read_whole(&m, "a", 2);	/* the first read-only open refilled the page cache... */
	ASSERT_EQ(read_whole(&m, "a", 2), 0);	/* ... which later opens keep */
	read_pieces(&m, "a", 2);
	check_map(&m, "a", 2, MAP_SHARED);
	ASSERT_EQ(cu_stat(&m, "read_direct_opens"), 0);
	tm_stop(&m);
	tm_cleanup(&m);
	return 0;
}
