/*
 * plimage.h — build the backend "after the power came back" from the shadow
 * directory that the daemon's power-loss layer (backend/powerloss.c,
 * CKPTFS_POWERLOSS) kept.  An independent reader of the shadow format that
 * powerloss.c's header describes.
 *
 * Two loss models:
 *   PL_STRICT   only what POSIX made durable survives: the tree is walked
 *               from the root directory's durable listing (as of its last
 *               fsync); a directory never fsync'd is empty; files get their
 *               contents as of their last fsync/fdatasync, or none;
 *   PL_ORDERED  "metadata in order, data lost" (a journaling file system
 *               that orders metadata but not data): the first `cut` records
 *               of the namespace journal are replayed over the initial tree,
 *               `cut` at least the committed prefix (everything before the
 *               last fsync that returned); file contents as in PL_STRICT.
 * A file durable under two names is one inode in the image (hard links).
 */
#ifndef CKPTFS_TESTS_PLIMAGE_H
#define CKPTFS_TESTS_PLIMAGE_H

#include <stddef.h>
#include <stdint.h>

enum pl_model { PL_STRICT, PL_ORDERED };

struct pl_image_info {
	size_t records;		/* complete journal records */
	size_t committed;	/* of them, the prefix that must survive */
	size_t cut;		/* records replayed (PL_ORDERED) */
	unsigned dirs, files, empty_files, links, symlinks;
	unsigned anomalies;	/* directories met twice on one path (cycles), skipped */
};

/* The journal's size and committed prefix, to choose a cut; 0 or -errno. */
int pl_image_bounds(const char *shadow, size_t *records, size_t *committed);
/*
 * Build the image in `out` (an existing empty directory).  For PL_ORDERED,
 * `cut` is clamped to [committed, records].  0 or -errno; *info filled.
 */
int pl_image_build(const char *shadow, const char *out, enum pl_model model, size_t cut,
		   struct pl_image_info *info);

/*
 * For tests: the PL_STRICT image of `shadow` in a new directory `name`
 * under the mount's scratch root, its path in out; fails the test if it
 * cannot be built (plcheck.c).
 */
struct tmount;
void pl_strict_image(struct tmount *m, const char *shadow, const char *name, char *out,
		     size_t len);

#endif
