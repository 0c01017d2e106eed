/*
 * session.h — GPU capture sessions (session.c): the daemon's side of the
 * protocol in gpu/include/ckptfs_ring.h.  Used by main.c (life cycle),
 * ops.c (the ioctl handler, and the seal gate for bound files) and ctl.c
 * (stats).
 */
#ifndef CKPTFS_SESSION_H
#define CKPTFS_SESSION_H

#include "fs/fs.h"

/* Open the session endpoint (sessions=on): 0 or -errno (logged; the mount goes on without). */
int session_start(struct ckptfs *fs);
/* End every session (their bound files are abandoned) and stop accepting. */
void session_stop(struct ckptfs *fs);
/* After the namespace is freed: give every arena's reservation back to the cache. */
void session_free(struct ckptfs *fs);

/*
 * Is n bound to a session?  A bound file is not sealed by close, fsync or
 * drain: its contents are complete only once the session unbinds it.  ns held.
 */
bool session_node_bound(struct fsnode *n);

/*
 * A CKPTFS_IOC_* ioctl on handle h (NULL: a directory).  Fills out (out_size
 * bytes, as the command's size says) and returns 0, or -errno.
 */
int session_ioctl(struct ckptfs *fs, fuse_req_t req, struct fshandle *h, unsigned int cmd,
		  const void *in, size_t in_size, void *out, size_t out_size);

/* The sessions' part of MOUNT/.ckptfs/stats (", \"gpu_...\": ..." pairs). */
void session_stats_json(struct ckptfs *fs, struct strbuf *b);

#endif
