/*
 * safepath.h — paths a root daemon is handed (the backend, the mount point,
 * the rescue directory), judged before it acts on them.
 *
 * A user who can write somewhere along such a path can plant a symlink
 * there, or rename a directory away and put a symlink in its place: the
 * backend would then be wherever they point it (the daemon makes .ckptfs/
 * there, as root), and the mount (which every user sees, allow_other)
 * would cover any directory they name, /usr/bin included.  So, run as
 * root, ckptfs resolves the backend and the mount point one component at
 * a time and follows a symlink only if root owns it; the mount point must
 * moreover be a path no other user can change (every directory it is
 * looked up in passes safepath_dir_problem, and in a sticky directory
 * the entry is root's), because mount(2) resolves it again by name.  The
 * backend's own directories may be a user's (a job directory): the daemon
 * opens it once by a walk that follows no symlink (bsys_open_dir_path),
 * so one swapped in after this check fails that open instead of
 * redirecting it.  Run as another user, the daemon acts with that user's
 * rights only, and the paths are resolved as realpath(3) does.
 */
#ifndef CKPTFS_SAFEPATH_H
#define CKPTFS_SAFEPATH_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

/*
 * Why the directory st may not lie on the way to something a root daemon
 * trusts (another user could rename what lies below it), or NULL: it must
 * be owned by root or the daemon's user, and not writable by its group or
 * others unless sticky.
 */
const char *safepath_dir_problem(const struct stat *st);

/* safepath_resolve's flags */
#define SAFEPATH_UNCHANGEABLE 0x1	/* no user but root may change the path (the mount point) */

/*
 * Resolve `path` (absolute, or relative to the working directory) to the
 * directory it names, as described above: its canonical path in out, and 0;
 * or -errno with one line in why naming the component at fault.
 */
int safepath_resolve(const char *path, unsigned flags, char *out, size_t len, char *why,
		     size_t wlen);

/*
 * Open the rescue directory `path` (absolute) by the same walk, whatever the
 * daemon's user, under stricter rules (rescue.c R1): it follows no symlink,
 * root's neither, and takes no '.' or '..'; "/" and every directory on the
 * way pass safepath_dir_problem; the last component, made 0700 if missing,
 * must be a directory the daemon's user owns that its group and others may
 * not write.  Each directory is judged as opened, not as looked at.  Its fd,
 * or -errno with one line in why naming the component at fault.
 */
int safepath_open_private(const char *path, char *why, size_t wlen);

#endif
