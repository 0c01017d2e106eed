/*
 * mn_util.h — what the multi-node tests share (tests/multinode only):
 * several daemons with distinct node names over one backend, as the nodes
 * of a job share a parallel file system.
 *
 * The backend is a scratch directory, or, when CKPTFS_MN_BACKENDS lists
 * directories separated by ':' (gluster.sh sets it: one directory per
 * GlusterFS client mount of one volume), node i uses the i-th of them
 * (cycling), so each daemon sees the backend through its own client, as
 * nodes do.  mn_bpath() reads the backend through the first one.
 *
 * Every daemon logs to its own file; when a test fails, all of them are
 * printed and every daemon is killed and unmounted (an atexit handler).
 */
#ifndef CKPTFS_TESTS_MN_UTIL_H
#define CKPTFS_TESTS_MN_UTIL_H

#include "tests/integrity/integ.h"

#define MN_MAX 4

struct mnode {
	struct tmount m;
	char name[32];
	bool up;
};

struct mcluster {
	int n;
	struct mnode node[MN_MAX];
	char backend[PATH_MAX];		/* what mn_bpath reads: node 0's view */
	bool shared_backends;		/* from CKPTFS_MN_BACKENDS */
};

/* n nodes named a, b, c, d with scratch directories; nothing mounted yet. */
void mn_init(struct mcluster *c, const char *test, int n);
/*
 * Mount node i with "node=<name>,peers=a:b:...,<opts>" (opts may be NULL)
 * and extra environment entries; wait until mounted.
 */
void mn_mount(struct mcluster *c, int i, const char *opts, const char *const *env);
/* Mount node i with exactly these -o options (no node= or peers= added). */
void mn_mount_raw(struct mcluster *c, int i, const char *opts, const char *const *env);
void mn_stop(struct mcluster *c, int i);	/* unmount, drain, exit 0 */
void mn_kill(struct mcluster *c, int i);	/* SIGKILL: a crashed node */
void mn_cleanup(struct mcluster *c);		/* every node down, scratch removed */

const char *mn_path(struct mcluster *c, int i, const char *rel);
const char *mn_bpath(struct mcluster *c, const char *rel);

/* A stats value of node i ("" if absent; static buffer). */
const char *mn_stat(struct mcluster *c, int i, const char *key);
double mn_stat_num(struct mcluster *c, int i, const char *key);
/*
 * Wait until node i has read its peers' records n more times (peer_reads):
 * with one peer, n = 2 means a whole read began after the call.  Fails
 * after 10 s.
 */
void mn_wait_peer_reads(struct mcluster *c, int i, unsigned n);
/* Lines of node i's log containing needle. */
int mn_log_count(struct mcluster *c, int i, const char *needle);

/* Create path (through a mount) with `size` bytes of pattern `seed`; close must succeed. */
void mn_write(const char *path, size_t size, uint64_t seed);
/* Does path (on the backend) hold exactly `size` bytes of pattern `seed`? */
bool mn_has(const char *path, size_t size, uint64_t seed);
/* Poll until path exists with `size` bytes; its time (mono_ms), or 0 after timeout_ms. */
uint64_t mn_wait_file(const char *path, size_t size, unsigned timeout_ms);
/*
 * ckptfs-stat's report for node i must contain want: fail otherwise, else
 * print the line holding it, labelled.
 */
void mn_stat_report(struct mcluster *c, int i, const char *want, const char *label);
/*
 * Once a held shard is let go: wait until the backend's `shard` holds size
 * bytes, then until its `marker` reads text (node 0's marker); fail if
 * either takes over timeout_ms.  Milliseconds from the shard to the marker.
 */
uint64_t mn_marker_follows(struct mcluster *c, const char *shard, size_t size,
			   const char *marker, const char *text, unsigned timeout_ms);
/*
 * Checkpoints of two nodes, as the lost-window tests write them: node i's
 * watermark record through its own backend client (GlusterFS: no stale
 * view; static buffer); does it report an open window (N5)?  Shards of
 * checkpoint s<step> on both nodes, b's first, seeds step*10 + node; rank
 * 0's marker `latest` naming it; does the backend's `latest` name it
 * within ms?  `ckptfs-ctl ack-lost` on node i: its exit status, *out its
 * output.
 */
const char *mn_record(struct mcluster *c, int i);
bool mn_window_open(struct mcluster *c, int i);
void mn_shards(struct mcluster *c, unsigned step, size_t size);
void mn_marker(struct mcluster *c, unsigned step);
bool mn_latest_names(struct mcluster *c, unsigned step, unsigned ms);
int mn_ack_lost(struct mcluster *c, int i, char **out);
/* ack-lost on node i, which must succeed (exit 0). */
void mn_ack_lost_ok(struct mcluster *c, int i);
/*
 * After an acknowledged window: checkpoint 2 (shards of `size`) is written
 * and its marker must reach the backend within 5 s, not by the policy;
 * `label` names the case in the figure printed.
 */
void mn_released_after_ack(struct mcluster *c, size_t size, const char *label);
/* A tool built beside the daemon ("ckptfs-stat", "ckptfs-ctl"); static buffer. */
const char *mn_tool(const char *name);
/* Milliseconds now, finer than mono_ms: for figures. */
/*
 * Within ms, does node 0 hold its marker `latest` for node `node`, with a
 * reason that contains reason_part (unless NULL)?  The reason may pass
 * through another wording while the peer rewrites its record (a client of
 * a distributed file system may read it missing meanwhile).
 */
bool mn_wait_held(struct mcluster *c, const char *node, const char *reason_part, unsigned ms);
double mn_now_ms(void);

#endif
