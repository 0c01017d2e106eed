/*
 * linkmarkers.c — a marker made by symlink(2) or link(2) waits for the peers
 * like one written or renamed into place (nodes.h N4).  PyTorch Lightning's
 * save_last="link" makes last.ckpt a symlink to the checkpoint; a job may
 * also hard-link it.
 *
 * Node a names peer b, which is never mounted, with markers=+last.ckpt and
 * marker_timeout=2, marker_policy=release.  A hard link last.ckpt to a
 * checkpoint file, then (once the policy released it) a symlink last.ckpt:
 * each must be held — off the backend, reported as the held marker — for
 * HELD_MS, and reach the backend after the timeout.  Fails on the old code:
 * the link was published at once, never held.
 */
#include "tests/multinode/mn_util.h"

#include <sys/stat.h>

#define HELD_MS 1500

static bool on_backend(struct mcluster *c, bool symlink_want)
{
	struct stat st;
	if (lstat(mn_bpath(c, "last.ckpt"), &st) < 0)
		return false;
	return symlink_want ? S_ISLNK(st.st_mode) : S_ISREG(st.st_mode);
}

static void held_then_released(struct mcluster *c, const char *how, bool symlink_made)
{
	char held[64] = "";

	for (uint64_t t0 = mono_ms(); mono_ms() - t0 < HELD_MS; usleep(20000)) {
		if (on_backend(c, symlink_made))
			FAILF("last.ckpt made by %s reached the backend while peer b confirmed nothing",
			      how);
		snprintf(held, sizeof(held), "%s", mn_stat(c, 0, "marker_held"));
	}
	if (strcmp(held, "last.ckpt"))
		FAILF("last.ckpt made by %s is not reported held: marker_held '%s'", how, held);
	uint64_t t0 = mono_ms();
	while (!on_backend(c, symlink_made) && mono_ms() - t0 < 8000)
		usleep(20000);
	if (!on_backend(c, symlink_made))
		FAILF("last.ckpt made by %s was not released by marker_policy=release", how);
	fprintf(stderr, "last.ckpt made by %s: held, released by the policy\n", how);
}

int main(void)
{
	struct mcluster c;

	tm_require_fuse();
	cu_require_root();
	mn_init(&c, "mn-linkmarkers", 2);
	mn_mount(&c, 0, "markers=+last.ckpt,marker_timeout=2,marker_policy=release", NULL);
	mn_write(mn_path(&c, 0, "epoch1.ckpt"), 4096, 1);
	ASSERT_TRUE(mn_wait_file(mn_bpath(&c, "epoch1.ckpt"), 4096, 5000) != 0);
	CHECK_SYS(link(mn_path(&c, 0, "epoch1.ckpt"), mn_path(&c, 0, "last.ckpt")));
	held_then_released(&c, "link(2)", false);
	CHECK_SYS(unlink(mn_path(&c, 0, "last.ckpt")));
	CHECK_SYS(symlink("epoch1.ckpt", mn_path(&c, 0, "last.ckpt")));
	held_then_released(&c, "symlink(2)", true);
	ASSERT_EQ(mn_stat_num(&c, 0, "markers_released_by_policy"), 2);
	mn_cleanup(&c);
	return 0;
}
