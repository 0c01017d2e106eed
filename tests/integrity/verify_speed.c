/*
 * verify_speed.c — how fast `ckptfs-ctl verify` checks a checkpoint, against
 * `cat`-ing the same files to /dev/null, in the same run (a figure for the
 * issue's closing note; printed, never asserted).
 *
 * About 1 GiB (CKPTFS_VERIFY_BYTES overrides) is written through a mount
 * as 16 files and drained.  Then, on the backend, each of verify and cat
 * reads everything twice: cold (page cache dropped first, when running as
 * root) and warm.  Verify must say OK for every file — that part is a
 * check; the throughput figures are only printed.
 */
#include "tests/integrity/integ.h"

#define NFILES 16

static bool drop_caches(void)
{
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
	bool ok;

	sync();
	if (fd < 0)
		return false;
	ok = write(fd, "3\n", 2) == 2;
	close(fd);
	return ok;
}

/* Seconds one run of argv takes; its exit status must be 0. */
static double timed(const char *const *argv, const char *what)
{
	uint64_t t0 = mono_ms();
	int st = tm_run(argv, NULL);

	if (st != 0)
		FAILF("%s exited %d", what, st);
	return (double)(mono_ms() - t0) / 1000.0;
}

int main(void)
{
	struct tmount m;
	const char *env = getenv("CKPTFS_VERIFY_BYTES");
	uint64_t total = env && *env ? strtoull(env, NULL, 10) : 1024 * MiB;
	size_t each = (size_t)(total / NFILES) & ~(size_t)4095;
	const char *cat[NFILES + 2] = { "cat" };
	char paths[NFILES][PATH_MAX * 2], name[32], *out;

	tm_require_fuse();
	tm_start(&m, "verify-speed", NULL, NULL);
	CHECK_SYS(mkdir(tm_path(&m, "ckpt"), 0755));
	for (int i = 0; i < NFILES; i++) {
		snprintf(name, sizeof(name), "ckpt/shard%02d.bin", i);
		ASSERT_EQ(it_write_pattern(tm_path(&m, name), 100 + (uint64_t)i, each), 0);
		snprintf(paths[i], sizeof(paths[i]), "%s", tm_bpath(&m, name));
		cat[i + 1] = paths[i];
	}
	tm_stop(&m);

	ASSERT_EQ(it_verify(tm_bpath(&m, "ckpt"), 0, &out), 0);
	ASSERT_EQ(it_verdict_count(out, "OK"), NFILES);
	free(out);

	const char *verify[] = { it_ctl_bin(), "verify", "--quiet", tm_bpath(&m, "ckpt"), NULL };
	double gb = (double)each * NFILES / 1e9, v_cold = 0, c_cold = 0, v_warm, c_warm;
	bool cold = drop_caches();
	if (cold)
		v_cold = timed(verify, "verify");
	v_warm = timed(verify, "verify");
	if (cold && drop_caches())
		c_cold = timed(cat, "cat");
	c_warm = timed(cat, "cat");
	if (cold)
		printf("verify throughput, cold cache: verify %.2f GB/s, cat %.2f GB/s (verify/cat %.2f)\n",
		       gb / v_cold, gb / c_cold, c_cold / v_cold);
	else
		printf("verify throughput, cold cache: not measured (cannot drop caches)\n");
	printf("verify throughput, warm cache: verify %.2f GB/s, cat %.2f GB/s (verify/cat %.2f); "
	       "%d files, %.2f GB\n", gb / v_warm, gb / c_warm, c_warm / v_warm, NFILES, gb);
	tm_cleanup(&m);
	return 0;
}
