/*
 * plchmod.c — a file's attributes synced before a later name that needs
 * them (the power-loss layer's strict model: a file's mode survives as of
 * its last fsync, a directory's entries as of its last fsync).
 *
 * In one publisher batch: chmod 0444 of a file, a hard link to it in
 * another directory, and a marker written there after both.  The file's
 * fsync fails (CKPTFS_FAULT op=fsync, name= its path) while a gate is
 * open.  A link's change is a name in its new directory: the chmod must be
 * synced before that name is made, so the marker, later still, is never
 * durable while the chmod is not (the publisher synced the batch's
 * directories, then its files: a link counted as covered by its file's
 * sync made the marker durable first).  The batch is formed by holding an
 * earlier file's rename until all three are queued.  Then the gate closes
 * and everything is durable, with the mode.
 */
#include "tests/integrity/integ.h"
#include "tests/integrity/plimage.h"

#include <sys/stat.h>

#define SEED_F 0x3131u
#define SEED_M 0x4242u
#define SIZE 70000

static bool has(const char *img, const char *rel, uint64_t seed)
{
	return it_has_pattern_in(img, rel, seed, SIZE);
}

static unsigned mode_of(const char *img, const char *rel)
{
	char p[PATH_MAX];
	struct stat st;

	snprintf(p, sizeof(p), "%s/%s", img, rel);
	return stat(p, &st) == 0 ? (unsigned)(st.st_mode & 07777) : 0;
}

int main(void)
{
	struct tmount m;
	char shadow[PATH_MAX], gate[PATH_MAX], hold[PATH_MAX], envpl[PATH_MAX + 32], img[PATH_MAX];

	tm_require_fuse();
	tm_init(&m, "plchmod");
	snprintf(shadow, sizeof(shadow), "%s/shadow", m.root);
	snprintf(gate, sizeof(gate), "%s/gate", m.root);
	snprintf(hold, sizeof(hold), "%s/hold", m.root);
	snprintf(envpl, sizeof(envpl), "CKPTFS_POWERLOSS=%s", shadow);
	const char *env[] = {
		envpl,
		cu_fault_env("op=fsync,err=EIO,name=/plc-f,while=%s;op=rename,name=plc-blocker,hold=%s",
			     gate, hold),
		NULL
	};
	tm_mount(&m, NULL, env);
	CHECK_SYS(mkdir(tm_path(&m, "plc-d"), 0755));
	if (it_write_pattern(tm_path(&m, "plc-f"), SEED_F, SIZE) != 0)
		FAILF("%s", "writing plc-f");
	tm_sync(&m);

	/* The publisher held in an earlier rename while the three are queued. */
	it_gate_set(hold, true);
	if (it_write_pattern(tm_path(&m, "plc-blocker"), SEED_M, SIZE) != 0)
		FAILF("%s", "writing plc-blocker");
	usleep(500 * 1000);
	it_gate_set(gate, true);
	CHECK_SYS(chmod(tm_path(&m, "plc-f"), 0444));
	char from[PATH_MAX];
	snprintf(from, sizeof(from), "%s", tm_path(&m, "plc-f"));
	CHECK_SYS(link(from, tm_path(&m, "plc-d/plc-f2")));
	if (it_write_pattern(tm_path(&m, "plc-d/latest"), SEED_M, SIZE) != 0)
		FAILF("%s", "writing plc-d/latest");
	usleep(500 * 1000);	/* the marker's data flushed: all three ready */
	it_gate_set(hold, false);
	if (!cu_wait_exists(tm_bpath(&m, "plc-blocker"), 10000))
		FAILF("%s", "the held rename was never made");
	it_wait_log(&m, "syncing the backend failed", 1);	/* the file's fsync failed */
	usleep(300 * 1000);
	pl_strict_image(&m, shadow, "image-held", img, sizeof(img));
	if (has(img, "plc-d/latest", SEED_M) && mode_of(img, "plc-f") != 0444)
		FAILF("the marker plc-d/latest is durable while the chmod before it is not "
		      "(plc-f mode %o in the strict image %s)", mode_of(img, "plc-f"), img);
	if (mode_of(img, "plc-d/plc-f2") && mode_of(img, "plc-d/plc-f2") != 0444)
		FAILF("the link plc-d/plc-f2 is durable with mode %o, before the chmod (image %s)",
		      mode_of(img, "plc-d/plc-f2"), img);
	printf("held: marker %s, link %s, plc-f mode %o in the strict image\n",
	       has(img, "plc-d/latest", SEED_M) ? "durable" : "not durable",
	       mode_of(img, "plc-d/plc-f2") ? "durable" : "not durable", mode_of(img, "plc-f"));

	/* The fault lifted: all of it durable, in order. */
	it_gate_set(gate, false);
	cu_sync_retry(&m, 20000);
	tm_sync(&m);
	tm_kill(&m);
	pl_strict_image(&m, shadow, "image-after", img, sizeof(img));
	if (!has(img, "plc-d/latest", SEED_M) || mode_of(img, "plc-f") != 0444 ||
	    mode_of(img, "plc-d/plc-f2") != 0444)
		FAILF("after the retry: marker, link and mode must all be durable (image %s)", img);
	printf("after the retry: the mode, the link and the marker durable\n");
	tm_cleanup(&m);
	return 0;
}
