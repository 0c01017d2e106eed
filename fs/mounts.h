/*
 * mounts.h — reading /proc/self/mountinfo: which mounts exist, their type
 * and source.  Shared by the daemon (is the mountpoint taken?) and the CLIs
 * (which mounts are ckptfs, and over which backend).
 */
#ifndef CKPTFS_MOUNTS_H
#define CKPTFS_MOUNTS_H

#include <stddef.h>

struct mountent {
	char *target;	/* mount point */
	char *fstype;	/* e.g. "fuse.ckptfs" */
	char *source;	/* for ckptfs: the backend directory */
};

/* All mounts; returns the count (>= 0) or -errno.  Free with mounts_free. */
int mounts_read(struct mountent **out);
void mounts_free(struct mountent *m, int n);
/* Index of the mount whose target is exactly path (the last one), or -1. */
int mounts_find(const struct mountent *m, int n, const char *path);
/* Index of the mount containing path (longest target prefix), or -1. */
int mounts_containing(const struct mountent *m, int n, const char *path);

#endif
