/*
 * manifest.h — the consistency metadata ckptfs keeps on the backend.
 *
 * BACKEND/.ckptfs/nodes/<node>/manifest.log is an append-only log, one per
 * node.  Each record is one line, self-checking:
 *
 *     C1 <len:8 hex> <xxh3-64 of payload:16 hex> <payload>\n
 *
 * where payload is a flat JSON object with a "t" (type) key; the formats are
 * in docs/manifest.md (format version MANIFEST_FORMAT).  A reader tells a
 * torn tail (an incomplete or failing last record: cut) from corruption (a
 * failing record with valid ones after it: skipped and reported).
 *
 * Writers: the publisher appends each operation's record before applying it
 * and fdatasyncs the log together with the directories of the batch (group
 * commit), then appends a "durable" record; flushers append "intent"
 * records for versions they start.  BACKEND/.ckptfs/nodes/<host>/state.json
 * holds the format, the mount id, whether the last unmount was clean and the
 * last durable sequence number.
 */
#ifndef CKPTFS_MANIFEST_H
#define CKPTFS_MANIFEST_H

#include "cache/util.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <xxhash.h>

#define MANIFEST_FORMAT 1
#define MANIFEST_NODES_DIR ".ckptfs/nodes"

struct manifest {
	int fd;			/* manifest.log, O_APPEND */
	int dirfd;		/* nodes/<host> */
	pthread_mutex_t lock;	/* appends */
	char host[256];		/* the node name */
	char mount_id[24];
	uint64_t records;
};

/* What recovery found when the mount began (shown in stats and the log). */
struct recovery_report {
	bool previous;			/* an earlier mount of this node existed */
	bool unclean;			/* ... and it did not unmount cleanly */
	char prev_mount_id[24];
	uint64_t prev_seq_applied;	/* last operation of it found applied */
	uint64_t torn_bytes;		/* cut from the log's tail */
	uint64_t corrupt_records;	/* failing records with valid ones after them */
	uint64_t inflight_files;	/* versions queued but never published */
	uint64_t orphans_removed;	/* temporary files removed */
};

/*
 * This machine's node name: the hostname up to its first dot, or
 * "localhost".  (The default; -o node=NAME may choose another.)
 */
void manifest_node_default(char *buf, size_t len);
/*
 * Open (creating) node `node`'s log under the backend root and recover from
 * an unclean end of the previous mount.  Returns 0, or -errno with a
 * message printed (e.g. a newer format it cannot read: -EPROTO).
 */
int manifest_open(struct manifest *m, int root_fd, const char *node, const char *mount_id,
		  struct recovery_report *rep);
/* A manifest that records nothing (manifest=off): appends and syncs do nothing. */
void manifest_disabled(struct manifest *m);
/* Append one record (payload: a flat JSON object, no newline): 0 or -errno. */
int manifest_append(struct manifest *m, const char *payload, size_t len);
int manifest_sync(struct manifest *m);
/* Write the unmount record and the state file (clean or not). */
void manifest_close(struct manifest *m, uint64_t seq_durable, bool clean);

/*
 * Read every valid record of a log in order.  cb returns 0 to go on.
 * *good_end is the offset after the last record of the valid prefix
 * (where a torn tail starts); *corrupt counts failing records that had
 * valid ones after them.
 */
typedef int (*manifest_cb)(void *arg, const char *payload, size_t len, uint64_t off);
int manifest_scan_fd(int fd, manifest_cb cb, void *arg, uint64_t *good_end, uint64_t *corrupt);

/* XXH3-128 of a whole file read from fd (large sequential reads). */
int hash_fd(int fd, XXH128_hash_t *out, uint64_t *size);
void hash_hex(XXH128_hash_t h, char out[33]);

#endif
