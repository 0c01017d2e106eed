/*
 * wmwrite.c — a record write (watermark, lease) whose append returns 0 —
 * nothing written and no error — fails with EIO, is logged, and is tried
 * again at the keeper's next turn; it never spins in place.
 *
 * Node a (peers=a:b) is mounted with every append returning 0 while a flag
 * file exists (CKPTFS_FAULT err=zero).  With the flag made, a's log must
 * say within WAIT_MS that its watermark cannot be written (EIO); with the
 * flag gone, that it is written again.  Fails on the old code: the write
 * loop retried a 0 forever (the keeper spun on a CPU, no line was logged,
 * and the watermark and lease stopped being written).
 */
#include "tests/multinode/mn_util.h"

#define WAIT_MS 3000

static bool wait_log(struct mcluster *c, const char *needle)
{
	for (uint64_t t0 = mono_ms(); mono_ms() - t0 < WAIT_MS; usleep(20000))
		if (mn_log_count(c, 0, needle) > 0)
			return true;
	return false;
}

int main(void)
{
	struct mcluster c;
	char flag[PATH_MAX], env[PATH_MAX + 64];
	const char *const e[] = { env, NULL };

	tm_require_fuse();
	cu_require_root();
	mn_init(&c, "mn-wmwrite", 2);
	snprintf(flag, sizeof(flag), "%s/zero", c.node[0].m.root);
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=append,err=zero,while=%s", flag);
	mn_mount(&c, 0, NULL, e);
	cu_write_text(flag, "");
	if (!wait_log(&c, "node a: cannot write its watermark: Input/output error"))
		FAILF("appends returning 0 for %d ms: no failed watermark write logged (the writer "
		      "retries in place?)", WAIT_MS);
	unlink(flag);
	if (!wait_log(&c, "node a: its watermark is written again"))
		FAILF("the watermark was not written again within %d ms of appends working", WAIT_MS);
	mn_cleanup(&c);
	return 0;
}
