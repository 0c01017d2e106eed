/*
 * manifest.h — the consistency metadata ckptfs keeps on the backend.
 *
 * BACKEND/.ckptfs/nodes/<node>/manifest.log is an append-only log, one per
 * node.  Each record is one line, self-checking:
 *
 *     C1 <len:8 hex> <xxh3-64 of payload:16 hex> <payload>\n
 *
 * where payload is a flat JSON object with a "t" (type) key and no raw
 * newline; the formats are in docs/manifest.md (format version
 * MANIFEST_FORMAT).  A reader takes the log line by line (each byte is
 * looked at a bounded number of times), so it tells a torn tail (failing
 * lines at the end: cut) from corruption (failing lines with valid records
 * after them: skipped and counted), and never trusts a length field beyond
 * MANIFEST_REC_MAX.
 *
 * Writers: the publisher appends each operation's record before applying it
 * and fdatasyncs the log together with the directories of the batch (group
 * commit), then appends a "durable" record; "intent" records name versions
 * that were queued.  An append either adds one whole record or, on failure,
 * leaves the log as it was (the partial bytes are cut before anything else
 * is written) and returns -errno: the operation it describes is then not
 * durable.  BACKEND/.ckptfs/nodes/<node>/state.json holds the format, the
 * mount id, whether the last unmount was clean and the last durable seq.
 *
 * The log is compacted (manifest_compact) once it has grown past a size or
 * record threshold and twice its size after the last compaction: it is
 * rewritten atomically to the newest state of every live path plus what
 * recovery still needs, so its size follows the live files, not history.
 *
 * The metadata directories are the daemon's: .ckptfs, .ckptfs/nodes and
 * nodes/<node> are created mode 0755 by the mounting user (the daemon's
 * euid) and checked at every mount — a directory, not a symlink, owned by
 * that user, not writable by group or others — and every file in them is
 * opened with O_NOFOLLOW relative to the checked directory and checked the
 * same way.  A violation refuses the mount (MANIFEST_EREFUSED) with one line
 * naming the path.  Every system call here goes through bsys (bsys.h).
 *
 * Lock order: m->lock is a leaf (nothing else is taken under it).
 */
#ifndef CKPTFS_MANIFEST_H
#define CKPTFS_MANIFEST_H

#include "cache/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <xxhash.h>

#define MANIFEST_FORMAT 2	/* 2: digests are block runs (digest.h); 1: whole-file XXH3-128 */
#define MANIFEST_NODES_DIR ".ckptfs/nodes"
/* Longest payload a record may have; longer length fields are refused unread. */
#define MANIFEST_REC_MAX (1u << 20)
/*
 * manifest_open's answer when the metadata on the backend is not the
 * daemon's own (a symlink, another owner, group/other write, a bad node
 * name): the message is printed, and the mount is refused as a usage error.
 */
#define MANIFEST_EREFUSED EUCLEAN
/* Compaction thresholds, unless CKPTFS_MANIFEST_COMPACT says otherwise. */
#define MANIFEST_COMPACT_RECORDS 65536
#define MANIFEST_COMPACT_BYTES (32ull << 20)

struct manifest {
	int fd;			/* manifest.log, O_APPEND; -1 when manifest=off */
	int dirfd;		/* nodes/<node> */
	pthread_mutex_t lock;	/* appends, compaction; fields below */
	char host[256];		/* the node name */
	char *where;		/* "<backend>/.ckptfs/nodes/<node>", for messages */
	char mount_id[24];
	uint64_t records;	/* whole records in the log */
	uint64_t size;		/* bytes of whole records: where the next one goes */
	bool tail_dirty;	/* a failed append left bytes past size, not yet cut */
	bool dir_unsynced;	/* the log's name (maybe new at mount) not yet synced */
	uint64_t changes;	/* writes and cuts of the log so far ... */
	uint64_t changes_synced;	/* ... and how many of them an fdatasync covered */
	atomic_uint_least64_t syncs;	/* fdatasyncs of the log (read without the lock) */
	/*
	 * A failed fdatasync may have lost the bytes it was to write while a
	 * later one returns 0 (the kernel marks the pages of a failed
	 * write-back clean and reports the error once): the records not yet
	 * covered are kept here, and after a failure the log is written anew
	 * from its synced prefix and them (manifest_sync).
	 */
	uint64_t synced_size;	/* bytes an fdatasync covered ... */
	struct strbuf unsynced;	/* ... and the log after them, [synced_size, size) */
	bool resync;		/* an fdatasync failed: the next sync writes the log anew */
	atomic_uint_least64_t rewrites;	/* logs written anew (a failed sync, or an unclean stop) */
	uint64_t base_records;	/* records and bytes right after the last compaction */
	uint64_t base_bytes;
	uint64_t compact_records;	/* thresholds (manifest_wants_compaction) */
	uint64_t compact_bytes;
	uint64_t compactions;	/* done by this mount */
	struct strbuf rec;	/* the record being appended */
};

/* What recovery found when the mount began (shown in stats and the log). */
struct recovery_report {
	bool previous;			/* an earlier mount of this node existed */
	bool unclean;			/* ... and it did not unmount cleanly */
	char prev_mount_id[24];		/* ... its mount id (clean or not) */
	uint64_t prev_seq_applied;	/* last operation of it found applied */
	uint64_t torn_bytes;		/* cut from the log's tail */
	uint64_t corrupt_records;	/* failing lines with valid records after them */
	uint64_t inflight_files;	/* versions queued but never published */
	uint64_t prev_seq_recorded;	/* the last sequence number its log records */
	uint64_t unrecorded_ops;	/* sealed past it, by its seal ledger (ledger.h) */
	uint64_t orphans_removed;	/* temporary files removed */
};

/*
 * This machine's node name: the hostname up to its first dot, or
 * "localhost".  (The default; -o node=NAME may choose another.)
 */
void manifest_node_default(char *buf, size_t len);
/*
 * Write one of the daemon's small metadata files whole: a new temporary
 * file `tmp` in dirfd (a stale one removed first), written, fsync'd,
 * renamed over `name`, the directory fsync'd.  0 or -errno (the old file
 * stays).  state.json, and the node's lease and watermark (lease.c).
 */
int manifest_write_file(int dirfd, const char *name, const char *tmp, const char *buf, size_t len);
/*
 * Open (creating) and check BACKEND/.ckptfs/nodes and node `node`'s
 * directory in it, as manifest_open does: 0 with both fds, or -errno
 * (-MANIFEST_EREFUSED for metadata that is not ours) with a line printed.
 * For the node's lock, lease and watermarks (backend/lease.c).
 */
int manifest_node_dirs(int root_fd, const char *node, int *nodes_fd, int *node_fd);
/*
 * Open (creating) node `node`'s log under the backend root, check that the
 * metadata is the daemon's own, and recover from an unclean end of the
 * previous mount.  Returns 0, or -errno with a message printed:
 * -MANIFEST_EREFUSED for metadata that is not ours, -EPROTO for a newer
 * format it cannot read.
 */
int manifest_open(struct manifest *m, int root_fd, const char *node, const char *mount_id,
		  struct recovery_report *rep);
/* A manifest that records nothing (manifest=off): appends and syncs do nothing. */
void manifest_disabled(struct manifest *m);
/*
 * Append one record (payload: a flat JSON object, no newline, at most
 * MANIFEST_REC_MAX bytes).  0, or -errno with the log unchanged: the
 * operation the record describes is not durable.
 */
int manifest_append(struct manifest *m, const char *payload, size_t len);
/*
 * Make every appended record durable: 0 or -errno.  After a failure the next
 * call writes the log anew (its synced prefix and the records since, kept in
 * memory) to manifest.log.tmp, syncs it and renames it over the log: a later
 * fdatasync of the same file could return 0 over records never written.
 */
int manifest_sync(struct manifest *m);
/* fdatasyncs of the log this mount (for stats; never waits on an append). */
uint64_t manifest_syncs(struct manifest *m);
/* Logs written anew because a sync of the log failed or an unclean stop may hide one (stats). */
uint64_t manifest_rewrites(struct manifest *m);
/* Write the unmount record and the state file (clean or not): whether the stop was recorded clean. */
bool manifest_close(struct manifest *m, uint64_t seq_durable, bool clean);

/*
 * Has the log grown enough to be worth compacting?  Cheap (two compares):
 * at least compact_records records or compact_bytes bytes, and twice what
 * the last compaction left.
 */
bool manifest_wants_compaction(const struct manifest *m);
/*
 * Rewrite the log atomically (temp file in the node directory, fdatasync,
 * rename over manifest.log, directory fsync) to the newest record of every
 * live path, this mount's "mount" record, and every record recovery still
 * needs: this mount's records after durable_seq and intents of versions
 * not yet durable.  Call it when every operation up to durable_seq is
 * settled (its records written, its "durable" record appended) and no
 * record is half-written.  Appends wait meanwhile.  0, or -errno with the
 * old log still in use; a crash at any step leaves a log that recovery and
 * `ckptfs-ctl verify` read correctly.
 */
int manifest_compact(struct manifest *m, uint64_t durable_seq);

/* What one scan of a log found. */
struct manifest_scan {
	uint64_t records;		/* valid records */
	uint64_t size;			/* bytes read */
	uint64_t good_end;		/* after the last valid record: a torn tail starts here */
	uint64_t corrupt_records;	/* failing lines with valid records after them */
	uint64_t corrupt_bytes;
};

/*
 * Read every valid record of a log in order (bounded memory: one record at
 * a time).  cb returns 0 to go on, anything else stops the scan and is
 * returned.  0, the callback's value, or -errno from a read.
 */
typedef int (*manifest_cb)(void *arg, const char *payload, size_t len, uint64_t off);
int manifest_scan_fd(int fd, manifest_cb cb, void *arg, struct manifest_scan *res);
/*
 * The record framing alone, for one line: line[0, n) is a valid record
 * (header, payload, newline at line[n - 1] and nowhere before it).  On true
 * payload and plen point into line.  For tests and fuzzing too.
 */
bool manifest_record_check(const char *line, size_t n, const char **payload, size_t *plen);

/* The digest of a whole file read from fd (digest_fd: holes are not read). */
int hash_fd(int fd, XXH128_hash_t *out, uint64_t *size);
void hash_hex(XXH128_hash_t h, char out[33]);

#endif
