/*
 * passthrough — clean, durable files opened read-only are read by the
 * kernel straight from the backend file (fs/passthrough.c), and nothing
 * else changes for anyone:
 *   - a durable file opened read-only, all of it still in cache memory and
 *     its backend file in no page cache (as the O_DIRECT flushers leave
 *     it): read from the cache through the daemon, not from the disk
 *     (passthrough_from_cache); once the backend file is in the page
 *     cache: passthrough, the right bytes, by read(2) and by mmap(2); a
 *     file read from the cache twice: the second time from the daemon's
 *     cache again (read_direct, tests/speed/readdirect.c) or, where the
 *     kernel cannot map direct-I/O files, from the mount's page cache; and
 *     after a write-only rewrite the new bytes at once;
 *   - a file with data not yet durable (its flush held back by a slow
 *     fdatasync) or open for writing: through the daemon, the newest bytes;
 *   - a write-only open of a file that passthrough readers hold: it opens
 *     (the kernel wants every open of such a file to be passthrough: the
 *     daemon gives it FOPEN_PASSTHROUGH | FOPEN_DIRECT_IO), its writes reach
 *     the cache and the backend; earlier readers keep the version they
 *     opened (close-to-open), later ones read the new bytes through the
 *     daemon, by read(2) and by mmap(2) (the name gets a new kernel
 *     inode: passthrough_renewed); a read-write open is refused (ETXTBSY)
 *     until they close, and an O_TRUNC one that is refused truncates nothing;
 *   - after a remount (cold, the base not opened yet): passthrough again;
 *   - -o passthrough=off: never.
 * Where the kernel does not offer passthrough, the reads are checked all
 * the same and the test says what it could not check.
 */
#include "tests/core/core_util.h"

#include <sys/mman.h>

static uint64_t pt_opens(struct tmount *m)
{
	return cu_stat(m, "passthrough_opens");
}

/* Drop the backend file's page cache (it is clean: written and synced). */
static void backend_uncache(struct tmount *m, const char *name)
{
	int fd = cu_open(tm_bpath(m, name), O_RDONLY);
	ASSERT_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	cu_close(fd);
}

static void drain(struct tmount *m)
{
	tm_sync(m);	/* everything durable, or the test fails */
}

/* Wait (boundedly) until path names another kernel inode than fd. */
static void wait_new_inode(const char *path, int fd)
{
	struct stat held, named;

	CHECK_SYS(fstat(fd, &held));
	for (int i = 0; i < 500; i++) {
		CHECK_SYS(stat(path, &named));
		if (named.st_ino != held.st_ino)
			return;
		usleep(10000);
	}
	ASSERT_TRUE(named.st_ino != held.st_ino);
}

/* A mapping of path's first len bytes holds pattern seed. */
static void check_mapped(int fd, uint64_t len, uint64_t seed)
{
	char *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	char *want = malloc(len);

	ASSERT_TRUE(map != MAP_FAILED && want);
	fill_pattern(want, len, seed, 0);
	ASSERT_EQ(memcmp(map, want, len), 0);
	munmap(map, len);
	free(want);
}

int main(void)
{
	struct tmount m;
	char hold[PATH_MAX];

	tm_require_fuse();
	tm_init(&m, "pt");
	snprintf(hold, sizeof(hold), "%s/hold", m.root);
	const char *env[] = { cu_fault_env("op=fdatasync,delay_ms=1500,while=%s", hold), NULL };
	tm_mount(&m, NULL, env);
	bool pt = strstr(cu_slurp(tm_path(&m, ".ckptfs/stats")), "\"passthrough\": true") != NULL;
	bool rdio = strstr(cu_slurp(tm_path(&m, ".ckptfs/stats")), "\"read_direct\": true") != NULL;
	if (!pt)
		fprintf(stderr, "the kernel offers no FUSE passthrough here: checking reads only\n");

	/*
	 * Durable, all of it still in cache memory, its backend file in no page
	 * cache: read from the cache, through the daemon (passthrough would read
	 * the disk).
	 */
	cu_write_pattern(tm_path(&m, "a"), 5 * MiB + 123, 1);
	drain(&m);
	backend_uncache(&m, "a");
	uint64_t p0 = pt_opens(&m), c0 = cu_stat(&m, "passthrough_from_cache");
	cu_check_pattern(tm_path(&m, "a"), 5 * MiB + 123, 1);
	if (pt) {
		ASSERT_EQ(pt_opens(&m), p0);
		ASSERT_EQ(cu_stat(&m, "passthrough_from_cache"), c0 + 1);
	}
	/*
	 * Read again.  With read_direct (the default, where the kernel allows
	 * it) the daemon serves it again, from its cache; with the page cache
	 * (read_direct off), the first read-only open dropped the mount's page
	 * cache and filled it with current bytes, so this one keeps it (no
	 * byte through the daemon)...
	 */
	uint64_t rb = cu_stat(&m, "read_bytes");
	cu_check_pattern(tm_path(&m, "a"), 5 * MiB + 123, 1);
	if (rdio)
		ASSERT_GE(cu_stat(&m, "read_bytes"), rb + 5 * MiB + 123);
	else
		ASSERT_EQ(cu_stat(&m, "read_bytes"), rb);
	/* ... until a write past the page cache: then the new bytes, at once. */
	cu_write_pattern(tm_path(&m, "r"), 2 * MiB, 7);
	drain(&m);
	cu_check_pattern(tm_path(&m, "r"), 2 * MiB, 7);
	int rw = cu_open(tm_path(&m, "r"), O_WRONLY);
	cu_pwrite_all(rw, "fresh", 5, MiB);
	cu_close(rw);
	int rr = cu_open(tm_path(&m, "r"), O_RDONLY);
	char fresh[5];
	cu_pread_all(rr, fresh, 5, MiB);
	ASSERT_EQ(memcmp(fresh, "fresh", 5), 0);
	cu_check_range(rr, "r", 0, MiB, 7);
	cu_close(rr);
	drain(&m);

	/* Durable, its backend file in the page cache: passthrough. */
	cu_check_pattern(tm_bpath(&m, "a"), 5 * MiB + 123, 1);
	cu_check_pattern(tm_path(&m, "a"), 5 * MiB + 123, 1);
	if (pt)
		ASSERT_EQ(pt_opens(&m), p0 + 1);
	/* mmap of a passthrough file maps the backend file. */
	int fd = cu_open(tm_path(&m, "a"), O_RDONLY);
	char *map = mmap(NULL, 5 * MiB + 123, PROT_READ, MAP_SHARED, fd, 0);
	ASSERT_TRUE(map != MAP_FAILED);
	char *want = malloc(5 * MiB + 123);
	fill_pattern(want, 5 * MiB + 123, 1, 0);
	ASSERT_EQ(memcmp(map, want, 5 * MiB + 123), 0);
	/*
	 * A read-write open while a passthrough reader holds it is refused: its
	 * shared writable mapping would write the backend file behind the cache.
	 */
	if (pt) {
		CU_EXPECT_ERRNO(open(tm_path(&m, "a"), O_RDWR), ETXTBSY);
		/* Refused, it truncates nothing either (h5py's 'w', Python's "w+"). */
		CU_EXPECT_ERRNO(open(tm_path(&m, "a"), O_RDWR | O_CREAT | O_TRUNC, 0644), ETXTBSY);
		struct stat st;
		CHECK_SYS(stat(tm_path(&m, "a"), &st));
		ASSERT_EQ((uint64_t)st.st_size, 5 * MiB + 123);
		drain(&m);	/* nothing to publish: the backend keeps it whole */
		cu_check_pattern(tm_bpath(&m, "a"), 5 * MiB + 123, 1);
	}

	/*
	 * A writer while a passthrough reader holds it: opens, writes,
	 * publishes; and the name gets a new kernel inode, which later readers
	 * open (the earlier one's backing file holds the earlier version).
	 */
	char text[] = "rewritten!";
	uint64_t renewed = cu_stat(&m, "passthrough_renewed");
	int w = cu_open(tm_path(&m, "a"), O_WRONLY);
	cu_pwrite_all(w, text, sizeof(text) - 1, 1000);
	cu_close(w);
	if (pt) {
		ASSERT_GE(cu_stat(&m, "passthrough_direct_opens"), 1);	/* w */
		ASSERT_EQ(cu_stat(&m, "passthrough_renewed"), renewed + 1);
		/* The kernel's entry is dropped from a helper thread: at once, in practice. */
		wait_new_inode(tm_path(&m, "a"), fd);
	}
	/* The earlier reader keeps the version it opened. */
	char got[16];
	ASSERT_EQ(pread(fd, got, sizeof(text) - 1, 1000), (ssize_t)sizeof(text) - 1);
	if (pt)
		ASSERT_EQ(memcmp(got, want + 1000, sizeof(text) - 1), 0);
	/* A reader opened now reads the new bytes (through the daemon), by read(2) and by mmap(2). */
	int r2 = cu_open(tm_path(&m, "a"), O_RDONLY);
	ASSERT_EQ(pread(r2, got, sizeof(text) - 1, 1000), (ssize_t)sizeof(text) - 1);
	ASSERT_EQ(memcmp(got, text, sizeof(text) - 1), 0);
	char *map2 = mmap(NULL, 5 * MiB + 123, PROT_READ, MAP_SHARED, r2, 0);
	ASSERT_TRUE(map2 != MAP_FAILED);
	ASSERT_EQ(memcmp(map2 + 1000, text, sizeof(text) - 1), 0);
	ASSERT_EQ(memcmp(map2, want, 1000), 0);
	munmap(map2, 5 * MiB + 123);
	/* ... and the earlier reader's mapping still shows the version it opened. */
	if (pt)
		ASSERT_EQ(memcmp(map + 1000, want + 1000, sizeof(text) - 1), 0);
	cu_close(r2);
	munmap(map, 5 * MiB + 123);
	cu_close(fd);
	/* All closed and durable (its backend file read once): passthrough again, of the new version. */
	drain(&m);
	memcpy(want + 1000, text, sizeof(text) - 1);
	cu_check_content(tm_bpath(&m, "a"), want, 5 * MiB + 123);
	p0 = pt_opens(&m);
	cu_check_content(tm_path(&m, "a"), want, 5 * MiB + 123);
	if (pt)
		ASSERT_EQ(pt_opens(&m), p0 + 1);

	/*
	 * A rewrite as torch.save makes it (O_TRUNC, new contents) while a
	 * passthrough reader maps the file: a later reader maps the new
	 * version, the earlier one keeps its own; then truncate(2) of the name
	 * while a passthrough reader holds it, the same.
	 */
	cu_write_pattern(tm_path(&m, "c"), 2 * MiB, 4);
	drain(&m);
	cu_check_pattern(tm_bpath(&m, "c"), 2 * MiB, 4);	/* into the page cache */
	p0 = pt_opens(&m);
	renewed = cu_stat(&m, "passthrough_renewed");
	int c1 = cu_open(tm_path(&m, "c"), O_RDONLY);
	char *cmap = mmap(NULL, 2 * MiB, PROT_READ, MAP_SHARED, c1, 0);
	ASSERT_TRUE(cmap != MAP_FAILED);
	cu_write_pattern(tm_path(&m, "c"), 3 * MiB, 5);
	drain(&m);
	if (pt) {
		ASSERT_EQ(pt_opens(&m), p0 + 1);
		ASSERT_EQ(cu_stat(&m, "passthrough_renewed"), renewed + 1);
		wait_new_inode(tm_path(&m, "c"), c1);
	}
	int c2 = cu_open(tm_path(&m, "c"), O_RDONLY);
	check_mapped(c2, 3 * MiB, 5);
	if (pt)
		check_mapped(c1, 2 * MiB, 4);
	munmap(cmap, 2 * MiB);
	cu_close(c2);
	cu_close(c1);
	cu_check_pattern(tm_bpath(&m, "c"), 3 * MiB, 5);
	c1 = cu_open(tm_path(&m, "c"), O_RDONLY);	/* alone, durable, cached: passthrough */
	if (pt)
		ASSERT_EQ(pt_opens(&m), p0 + 2);
	CHECK_SYS(truncate(tm_path(&m, "c"), MiB));
	if (pt) {
		ASSERT_EQ(cu_stat(&m, "passthrough_renewed"), renewed + 2);
		wait_new_inode(tm_path(&m, "c"), c1);
	}
	c2 = cu_open(tm_path(&m, "c"), O_RDONLY);
	struct stat cst;
	CHECK_SYS(fstat(c2, &cst));
	ASSERT_EQ((uint64_t)cst.st_size, MiB);
	check_mapped(c2, MiB, 5);
	cu_close(c2);
	cu_close(c1);
	drain(&m);
	cu_check_pattern(tm_bpath(&m, "c"), MiB, 5);

	/* Not durable yet (fdatasync takes 1.5 s while `hold` exists): through the daemon. */
	cu_write_text(hold, "x");
	cu_write_pattern(tm_path(&m, "b"), 3 * MiB, 2);
	p0 = pt_opens(&m);
	cu_check_pattern(tm_path(&m, "b"), 3 * MiB, 2);
	ASSERT_EQ(pt_opens(&m), p0);
	/* Open for writing: through the daemon too, and it sees the writer's bytes. */
	w = cu_open(tm_path(&m, "a"), O_WRONLY);
	cu_pwrite_all(w, "ZZ", 2, 0);
	int r3 = cu_open(tm_path(&m, "a"), O_RDONLY);
	ASSERT_EQ(pread(r3, got, 2, 0), 2);
	ASSERT_TRUE(got[0] == 'Z' && got[1] == 'Z');
	cu_close(r3);
	cu_close(w);
	ASSERT_EQ(pt_opens(&m), p0);
	unlink(hold);
	drain(&m);
	tm_stop(&m);
	want[0] = 'Z';
	want[1] = 'Z';
	cu_check_content(tm_bpath(&m, "a"), want, 5 * MiB + 123);
	cu_check_pattern(tm_bpath(&m, "b"), 3 * MiB, 2);

	/* Cold, after a remount: the base is opened on the way. */
	tm_mount(&m, NULL, NULL);
	p0 = pt_opens(&m);
	cu_check_pattern(tm_path(&m, "b"), 3 * MiB, 2);
	if (pt)
		ASSERT_EQ(pt_opens(&m), p0 + 1);
	tm_stop(&m);

	/* Switched off. */
	tm_mount(&m, "passthrough=off", NULL);
	ASSERT_TRUE(strstr(cu_slurp(tm_path(&m, ".ckptfs/stats")), "\"passthrough\": false") != NULL);
	cu_check_pattern(tm_path(&m, "b"), 3 * MiB, 2);
	ASSERT_EQ(pt_opens(&m), 0);
	tm_stop(&m);
	free(want);
	tm_cleanup(&m);
	return 0;
}
