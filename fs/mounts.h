/*
 * mounts.h — reading /proc/self/mountinfo: which mounts exist, their type
 * and source.  Shared by the daemon (is the mountpoint taken?) and the CLIs
 * (which mounts are ckptfs, and over which backend).
 */
#ifndef CKPTFS_MOUNTS_H
#define CKPTFS_MOUNTS_H

#include <stdbool.h>
#include <stddef.h>

struct mountent {
	char *target;	/* mount point */
	char *fstype;	/* e.g. "fuse.ckptfs" */
	char *source;	/* for ckptfs: the backend directory */
	char *options;	/* the mount's and the superblock's options, "a,b,c" */
};

/* All mounts; returns the count (>= 0) or -errno.  Free with mounts_free. */
int mounts_read(struct mountent **out);
void mounts_free(struct mountent *m, int n);
/* Index of the mount whose target is exactly path (the last one), or -1. */
int mounts_find(const struct mountent *m, int n, const char *path);
/* Index of the mount containing path (longest target prefix), or -1. */
int mounts_containing(const struct mountent *m, int n, const char *path);

/*
 * Does flock(2) on a file system of this type, mounted with these options,
 * exclude every client of it, or only processes on this host?  true: every
 * client (local disks, where this host is all there is; NFS with its lock
 * protocol; GlusterFS, GPFS, CephFS, GFS2, OCFS2; Lustre with -o flock).
 * false, with why: this host only, or not known to reach further (NFS with
 * nolock or local_lock=flock|all, Lustre with localflock or without flock,
 * BeeGFS, SMB, any type not listed).  Pure: the tests feed it lines.
 */
bool mounts_flock_global(const char *fstype, const char *options, char *why, size_t len);
/* The same for the mount holding path (mounts_containing); unreadable: false. */
bool mounts_flock_global_at(const char *path, char *why, size_t len);

#endif
