/*
 * opts.h — the daemon's command line: `ckptfs BACKEND MOUNTPOINT [-f] [-d]
 * [-o opt,...]`, the form mount.fuse3 uses for fstab type fuse.ckptfs.
 */
#ifndef CKPTFS_OPTS_H
#define CKPTFS_OPTS_H

#include "backend/bio.h"
#include "backend/nodes.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define CKPTFS_USAGE_ERROR 2

/* How requests come from /dev/fuse (loop.c). */
enum fuse_loop_kind {
	LOOP_READV = 0,	/* our workers: readv, a write's data straight into a free cache chunk */
	LOOP_SPLICE,	/* our workers: splice into a pipe, then copied into the cache */
	LOOP_LIBFUSE,	/* libfuse's multi-threaded loop (no io_uring, no passthrough) */
};

struct ckptfs_opts {
	char *backend;		/* as given */
	char *mountpoint;	/* as given */
	char *backend_real;	/* realpath */
	char *mountpoint_real;
	bool foreground;
	bool debug;
	uint64_t cache_size;
	uint32_t chunk_size;
	unsigned flush_threads;
	unsigned flush_nice;	/* flush_nice=N, 0-19 */
	unsigned queue_depth;
	unsigned max_threads;	/* FUSE worker threads */
	bool fsync_lazy;
	enum bio_kind io;
	enum fuse_loop_kind loop;	/* loop=readv|splice|libfuse (splice=on|off: the old spelling) */
	bool fuse_uring;	/* FUSE requests over io_uring where the kernel offers it */
	bool passthrough;	/* FUSE passthrough for clean files opened read-only */
	bool read_direct;	/* read-only opens served by the daemon bypass the page cache */
	bool direct;		/* flush with O_DIRECT where aligned */
	bool manifest;		/* keep the manifest log (checksums, recovery, verify) */
	bool sessions;		/* offer GPU capture sessions (fs/session.c) */
	int base_copy;		/* base_copy=auto|on|off: -1, 1, 0 (backend_opts) */
	double attr_timeout;
	uint64_t readahead;	/* the mount's kernel readahead, bytes */
	char *rescue_dir;	/* where unpersistable data goes at exit */
	double drain_timeout;	/* seconds without progress before rescuing; 0 = never */
	struct nodes_opts nodes;	/* node=, peers=, peer_skew=, marker_*=, lease_ttl= */
	char *markers;		/* markers= as given (installed by opts_parse) */
	char *fuse_opts;	/* -o string passed on to libfuse */
	bool allow_other;
};

/*
 * Parse argv.  On a usage error prints one line naming the problem to
 * stderr and returns CKPTFS_USAGE_ERROR; -1 means "printed help/version,
 * exit 0"; 0 means go on.
 */
int opts_parse(int argc, char **argv, struct ckptfs_opts *o);
/* Check the paths and sizes against the machine: 0 or CKPTFS_USAGE_ERROR. */
int opts_validate(struct ckptfs_opts *o);
void opts_usage(FILE *f);
void opts_free(struct ckptfs_opts *o);

#endif
