/*
 * plrename.c — a rename from one directory into another, cut by a power
 * loss between the two directories' fsyncs (the power-loss layer's strict
 * model: a directory's entries survive as of its last fsync).  The
 * publisher must sync where the file went before where it left, and stop
 * at the first sync that fails: a cut between the two then finds the file
 * in both directories at worst, never in neither.
 *
 * The destination's fsync fails (CKPTFS_FAULT op=fsync, name= its path)
 * while the test holds a gate open; the image "after the power came back"
 * is built from the shadow while the publisher retries.  Then the gate
 * closes, the retry succeeds, and after a power cut the file is in the
 * destination only.  A rename within one directory, and a file written in
 * the source after the cross-directory rename, are judged the same way.
 */
#include "tests/integrity/integ.h"
#include "tests/integrity/plimage.h"

#define SEED_X 0x5151u
#define SEED_Y 0x7272u
#define SIZE 70000

static bool has(const char *img, const char *rel, uint64_t seed)
{
	return it_has_pattern_in(img, rel, seed, SIZE);
}


int main(void)
{
	struct tmount m;
	char shadow[PATH_MAX], gate[PATH_MAX], envpl[PATH_MAX + 32], img[PATH_MAX];
	char from[PATH_MAX], to[PATH_MAX];

	tm_require_fuse();
	tm_init(&m, "plrename");
	snprintf(shadow, sizeof(shadow), "%s/shadow", m.root);
	snprintf(gate, sizeof(gate), "%s/gate", m.root);
	snprintf(envpl, sizeof(envpl), "CKPTFS_POWERLOSS=%s", shadow);
	const char *env[] = {
		envpl, cu_fault_env("op=fsync,err=EIO,name=/plr-dst,while=%s", gate), NULL
	};
	tm_mount(&m, NULL, env);
	CHECK_SYS(mkdir(tm_path(&m, "plr-src"), 0755));
	CHECK_SYS(mkdir(tm_path(&m, "plr-dst"), 0755));
	if (it_write_pattern(tm_path(&m, "plr-src/x"), SEED_X, SIZE) != 0)
		FAILF("%s", "writing plr-src/x");
	tm_sync(&m);

	/* 1. The destination cannot be synced: the file must stay where it was. */
	it_gate_set(gate, true);
	snprintf(from, sizeof(from), "%s", tm_path(&m, "plr-src/x"));
	snprintf(to, sizeof(to), "%s", tm_path(&m, "plr-dst/x"));
	CHECK_SYS(rename(from, to));
	if (it_write_pattern(tm_path(&m, "plr-src/y"), SEED_Y, SIZE) != 0)
		FAILF("%s", "writing plr-src/y");
	it_wait_log(&m, "syncing the backend failed", 1);
	if (!cu_wait_exists(tm_bpath(&m, "plr-dst/x"), 10000))
		FAILF("%s", "the rename was never applied on the backend");
	usleep(300 * 1000);	/* a sync of the source would come right after */
	pl_strict_image(&m, shadow, "image-held", img, sizeof(img));
	if (!has(img, "plr-src/x", SEED_X) && !has(img, "plr-dst/x", SEED_X))
		FAILF("a power cut while the destination could not be synced loses the renamed "
		      "file: neither %s/plr-src/x nor plr-dst/x", img);
	if (has(img, "plr-src/y", SEED_Y))
		FAILF("%s", "plr-src/y, written after the rename, is durable while the rename is not");
	printf("held: the file is still in the source in the strict image (dst %s)\n",
	       has(img, "plr-dst/x", SEED_X) ? "too" : "not yet");

	/* 2. The fault lifted: the retry makes the rename and what follows durable. */
	it_gate_set(gate, false);
	cu_sync_retry(&m, 20000);	/* an fsync during the backoff reports the error */
	CHECK_SYS(rename(tm_path(&m, "plr-src/y"), tm_path(&m, "plr-src/z")));
	tm_sync(&m);
	tm_kill(&m);
	pl_strict_image(&m, shadow, "image-after", img, sizeof(img));
	if (!has(img, "plr-dst/x", SEED_X) || has(img, "plr-src/x", SEED_X))
		FAILF("after the retry, x must be in plr-dst only (image %s)", img);
	if (!has(img, "plr-src/z", SEED_Y) || has(img, "plr-src/y", SEED_Y))
		FAILF("after the retry, y must be durable as plr-src/z only (image %s)", img);
	printf("after the retry: plr-dst/x and plr-src/z durable, nothing in two places\n");
	tm_cleanup(&m);
	return 0;
}
