/*
 * passthrough — clean, durable files opened read-only are read by the
 * kernel straight from the backend file (fs/passthrough.c), and nothing
 * else changes for anyone:
 *   - a durable file opened read-only: passthrough, the right bytes, by
 *     read(2) and by mmap(2);
 *   - a file with data not yet durable (its flush held back by a slow
 *     fdatasync) or open for writing: through the daemon, the newest bytes;
 *   - a write-only open of a file that passthrough readers hold: it opens
 *     (the kernel wants every open of such a file to be passthrough: the
 *     daemon gives it FOPEN_PASSTHROUGH | FOPEN_DIRECT_IO), its writes reach
 *     the cache and the backend; earlier readers keep the version they
 *     opened (close-to-open), later ones read the new bytes through the
 *     daemon; a read-write open is refused (ETXTBSY) until they close;
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

static void drain(struct tmount *m)
{
	tm_sync(m);	/* everything durable, or the test fails */
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
	if (!pt)
		fprintf(stderr, "the kernel offers no FUSE passthrough here: checking reads only\n");

	/* Durable, opened read-only: passthrough. */
	cu_write_pattern(tm_path(&m, "a"), 5 * MiB + 123, 1);
	drain(&m);
	uint64_t p0 = pt_opens(&m);
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
	if (pt)
		CU_EXPECT_ERRNO(open(tm_path(&m, "a"), O_RDWR), ETXTBSY);

	/* A writer while a passthrough reader holds it: opens, writes, publishes. */
	char text[] = "rewritten!";
	int w = cu_open(tm_path(&m, "a"), O_WRONLY);
	cu_pwrite_all(w, text, sizeof(text) - 1, 1000);
	cu_close(w);
	/* The earlier reader keeps the version it opened. */
	char got[16];
	ASSERT_EQ(pread(fd, got, sizeof(text) - 1, 1000), (ssize_t)sizeof(text) - 1);
	if (pt)
		ASSERT_EQ(memcmp(got, want + 1000, sizeof(text) - 1), 0);
	/* A reader opened now reads the new bytes (through the daemon). */
	int r2 = cu_open(tm_path(&m, "a"), O_RDONLY);
	ASSERT_EQ(pread(r2, got, sizeof(text) - 1, 1000), (ssize_t)sizeof(text) - 1);
	ASSERT_EQ(memcmp(got, text, sizeof(text) - 1), 0);
	if (pt)
		ASSERT_GE(cu_stat(&m, "passthrough_direct_opens"), 2);
	cu_close(r2);
	munmap(map, 5 * MiB + 123);
	cu_close(fd);
	/* All closed and durable: passthrough again, of the new version. */
	drain(&m);
	memcpy(want + 1000, text, sizeof(text) - 1);
	p0 = pt_opens(&m);
	cu_check_content(tm_path(&m, "a"), want, 5 * MiB + 123);
	if (pt)
		ASSERT_EQ(pt_opens(&m), p0 + 1);

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
