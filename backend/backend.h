/*
 * backend.h — persistence: the backend tree, the ordered operation log, the
 * flushers and the publisher.  Knows nothing of FUSE; fs/ drives it.
 *
 * The front end (fs/) records every namespace change and every sealed file
 * version as an operation with a sequence number, taken while it holds its
 * namespace lock, so sequence order is the order the application saw.
 * Flushers write sealed versions to temporary files (names containing
 * ".ckptfs.") beside their final names, in parallel and ahead of time.  One
 * publisher applies operations strictly in sequence order.
 *
 * Publish invariants (tests cite them as P1..P6):
 *  P1  operations are applied to the backend in strictly increasing sequence
 *      order; none is applied before every lower one has been;
 *  P2  a file version's data is written and fdatasync'd before the rename
 *      that gives it its final name, so a final name never shows a torn,
 *      zero-filled or partial file;
 *  P3  the directories an operation touched are fsync'd before its sequence
 *      number is declared durable;
 *  P4  a failed operation is retried with backoff and never skipped: later
 *      operations wait, waiters beyond it get the error;
 *  P5  temporary names never collide with user names (reserved prefix) and
 *      are removed when their version will never be published;
 *  P6  a backend node's recorded location is changed only by the publisher,
 *      right after the system call that moves it and before the next one;
 *      both happen under mv_lock, so a reader that met the gap can wait.
 *
 * Lock order: (fs namespace lock) -> cfile->lock -> be->lock -> be->mv_lock
 * -> be->bt_lock.
 * The publisher and flushers take be->lock only to move operations between
 * queues and never hold it across a system call.
 */
#ifndef CKPTFS_BACKEND_H
#define CKPTFS_BACKEND_H

#include "cache/cfile.h"
#include "backend/bio.h"
#include "backend/manifest.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <xxhash.h>

#define CKPTFS_RESERVED_PREFIX ".ckptfs."	/* temporary files on the backend */
#define CKPTFS_META_DIR ".ckptfs"		/* metadata dir at the backend root */

/* ---- the backend tree ------------------------------------------------ */

struct blink {
	struct bnode *dir;	/* reference */
	char *name;
};

/*
 * Where an object lives on the backend now (after the applied prefix).
 * Locations (links) are guarded by be->bt_lock; `present` is atomic.
 */
struct bnode {
	atomic_uint refs;
	bool is_dir;
	bool is_link;		/* a symlink: no chmod, no open */
	bool is_root;		/* dfd is the backend root, owned by the backend */
	atomic_bool present;
	atomic_int sticky_err;	/* last flush/publish error of this object, 0 if none */
	atomic_int dfd;		/* directories: an open fd, lazily; -1 until then */
	struct blink *links;	/* links[0] is the primary name */
	uint32_t nlinks;
	XXH128_hash_t digest;	/* of the last published version (files) */
	atomic_bool has_digest;
	uint64_t published_seq;
};

struct bnode *bnode_new(bool is_dir);
struct bnode *bnode_get(struct bnode *b);
void bnode_put(struct bnode *b);

/* ---- operations ------------------------------------------------------ */

enum op_kind {
	OP_VERSION,	/* a file's contents and attributes as of a close/fsync */
	OP_MKDIR, OP_RMDIR, OP_UNLINK, OP_RENAME, OP_SYMLINK, OP_LINK,
	OP_SETATTR, OP_SETXATTR, OP_RMXATTR,
};

enum op_state { OPS_QUEUED, OPS_FLUSHING, OPS_READY, OPS_FAILED };

/* setattr fields (op->valid) */
#define OPA_MODE  0x1
#define OPA_UID   0x2
#define OPA_GID   0x4
#define OPA_ATIME 0x8
#define OPA_MTIME 0x10

struct op {
	struct list link;	/* be->ops, in sequence order */
	struct list qlink;	/* be->flushq (versions) */
	uint64_t seq;
	enum op_kind kind;
	enum op_state state;
	int err;
	struct bnode *node;	/* subject (reference) */
	struct bnode *dir;	/* parent of name (reference) */
	char *name;
	struct bnode *dir2;	/* rename/link destination parent (reference) */
	char *name2;
	struct bnode *victim;	/* rename: object replaced or exchanged (reference) */
	unsigned flags;		/* rename flags */
	char *target;		/* symlink target; xattr key */
	void *value;		/* xattr value */
	size_t value_len;
	/* attributes: setattr, mkdir/symlink owner, and a version's snapshot */
	unsigned valid;
	mode_t mode;
	uid_t uid;
	gid_t gid;
	struct timespec atime, mtime;
	/* OP_VERSION */
	struct cver *ver;
	struct cfd *out;	/* the temporary file being written */
	bool copy_xattrs;	/* carry the replaced file's xattrs over */
	bool xattr_blob;	/* value holds the version's xattrs (fs/xattr.c format) */
	bool recorded;		/* its manifest record is written */
	char *path_hint;	/* versions: the mount path at seal, for the intent record */
	XXH128_hash_t digest;
	uint64_t enqueued_ns;
};

/* ---- durability waiters -------------------------------------------- */

struct pub_waiter {
	struct list link;
	uint64_t seq;		/* done when durable >= seq, or with an error */
	void (*done)(struct pub_waiter *w, int err);
};

/* ---- the backend ----------------------------------------------------- */

struct backend_stats {
	atomic_uint_least64_t persisted_bytes;	/* cached bytes of durable versions */
	atomic_uint_least64_t written_bytes;	/* bytes written to the backend */
	atomic_uint_least64_t versions_published;
	atomic_uint_least64_t ops_applied;
	atomic_uint_least64_t errors;
	atomic_uint_least64_t retries;
	atomic_uint_least64_t flushing_bytes;	/* versions being written now */
	atomic_uint_least64_t pending_versions;
	atomic_uint_least64_t dir_fsyncs;
	atomic_int last_error;			/* errno of the last failure, 0 when healthy */
	atomic_bool degraded;
};

struct backend_hooks {
	/* The directory where `owner`'s stage file should go (a reference), or NULL. */
	struct bnode *(*stage_dir)(void *arg, struct cfile *cf);
	void *arg;
};

struct backend_opts {
	enum bio_kind io;
	unsigned flush_threads;
	unsigned queue_depth;
	bool chown;		/* set owners on the backend (running as root) */
	bool direct;		/* write aligned data with O_DIRECT where the backend allows */
	bool no_manifest;	/* manifest=off: no records, no recovery, no verify */
};

struct backend {
	int root_fd;
	struct bnode *root;
	struct cache *cache;
	struct backend_opts opt;
	struct backend_hooks hooks;
	char mount_id[24];
	enum bio_kind io_in_use;
	atomic_bool direct_unsupported;
	const char *io_fallback_reason;

	pthread_rwlock_t bt_lock;	/* bnode links: held only to read or update them */
	pthread_rwlock_t mv_lock;	/* held (write) by the publisher across calls that move names */

	pthread_mutex_t lock;		/* everything below */
	pthread_cond_t pub_cond;	/* publisher: head may be ready */
	pthread_cond_t flush_cond;	/* flushers: work queued, or a dir appeared */
	pthread_cond_t durable_cond;	/* durable_seq advanced or error */
	pthread_cond_t spill_cond;
	struct list ops;		/* unpublished operations, sequence order */
	struct list flushq;		/* versions waiting for a flusher */
	struct list waiters;		/* sequence order */
	uint64_t last_seq;		/* last assigned */
	atomic_uint_least64_t durable_seq;
	uint64_t blocked_seq;		/* seq of a failing op, 0 if none */
	int blocked_err;
	bool stopping;
	bool aborting;			/* stop now, leave the queue (rescue) */
	bool joined;			/* threads have exited */
	bool spill_wanted;
	uint64_t temp_counter;

	struct manifest man;
	struct recovery_report recovery;

	pthread_t publisher;
	pthread_t *flushers;
	pthread_t spiller;
	unsigned nflushers;
	void *flush_priv;		/* flush.c's per-thread state */
	uint64_t started_ns;
	struct backend_stats st;
};

/*
 * Open the backend at root_fd (ownership passes) and start the threads.
 * Returns 0 or -errno.
 */
int backend_start(struct backend *be, int root_fd, struct cache *cache,
		  const struct backend_opts *opt, const struct backend_hooks *hooks);
/* Wait until everything queued is durable, then stop threads and free. */
void backend_stop(struct backend *be);
/* Stop the threads at once, leaving unpublished operations queued. */
void backend_abort(struct backend *be);
/*
 * After backend_abort: write every queued file version to
 * <dir>/<host>-<mount id>/ with a manifest.jsonl of all queued operations.
 * Returns the number of operations saved, or -errno; *where gets the path.
 */
long backend_rescue(struct backend *be, const char *dir, char *where, size_t wlen);

/* A new operation (zeroed, kind set).  Fill it, then backend_submit it. */
struct op *op_new(enum op_kind kind);
void op_free(struct op *op);
/*
 * Give op the next sequence number and queue it.  Call with the front end's
 * namespace lock held so sequence order is the application's order.
 * For OP_VERSION, op->ver is sealed by the caller with the seq returned by
 * backend_next_seq() under the same lock.  Returns the seq.
 */
uint64_t backend_next_seq(struct backend *be);
void backend_submit(struct backend *be, struct op *op);
uint64_t backend_last_seq(struct backend *be);
static inline uint64_t backend_durable_seq(struct backend *be)
{
	return atomic_load(&be->durable_seq);
}

/*
 * A number that changes whenever the backend moves forward: operations
 * applied, and bytes written while it is healthy (a failing backend that
 * rewrites a version on every retry is not moving).  For "no progress for
 * drain_timeout" decisions; lock-free.
 */
static inline uint64_t backend_progress(struct backend *be)
{
	uint64_t p = atomic_load(&be->st.ops_applied);
	if (!atomic_load(&be->st.degraded))
		p += atomic_load(&be->st.written_bytes);
	return p;
}
/* The errno the backend last failed with (positive), 0 while healthy. */
static inline int backend_last_error(struct backend *be)
{
	return atomic_load(&be->st.last_error);
}

/*
 * Call w->done once everything up to w->seq is durable (err 0), or when an
 * operation at or below... before it fails (err < 0).  May call at once.
 */
void backend_wait_async(struct backend *be, struct pub_waiter *w);
/* Answer every waiter not answered yet with err (< 0), now (cancel.c). */
void backend_cancel_waiters(struct backend *be, int err);
/* Block until seq is durable; timeout_ns 0 = forever.  0, -ETIMEDOUT or -errno. */
int backend_wait(struct backend *be, uint64_t seq, uint64_t timeout_ns);

/* Called by the cache when writers wait for space. */
void backend_want_spill(void *be);

/* A directory's fd (opened lazily); -errno if it cannot be opened. */
int bnode_dirfd(struct backend *be, struct bnode *dir);
/*
 * Location of b: copies the primary (dir ref, name) into *dir / name;
 * returns 0, or -ENOENT if it is not on the backend.
 */
int bnode_locate(struct backend *be, struct bnode *b, struct bnode **dir, char *name, size_t len);
/* Record b as present at (dir, name) — for objects found on the backend. */
void bnode_set_loaded(struct backend *be, struct bnode *b, struct bnode *dir, const char *name);

/* Wait for a name move in progress (after ENOENT on a location just read). */
void backend_move_wait(struct backend *be);
/*
 * Open the object b at its backend location (flags as for openat; O_NOFOLLOW
 * is added), retrying once if a move raced the lookup.  fd or -errno.
 */
int bnode_open(struct backend *be, struct bnode *b, int flags);

/* Link bookkeeping, bt_lock held for writing (publisher and loader only). */
void bnode_link_add_locked(struct bnode *b, struct bnode *dir, const char *name);
void bnode_link_del_locked(struct bnode *b, struct bnode *dir, const char *name);
void bnode_link_move_locked(struct bnode *b, struct bnode *dir, const char *name,
			    struct bnode *ndir, const char *nname);
void bnode_link_primary_locked(struct bnode *b, struct bnode *dir, const char *name);

/* Backend-relative path of (dir, name) (name may be NULL): 0 or -ENOENT. */
int bnode_path(struct backend *be, struct bnode *dir, const char *name, char *buf, size_t len);

/* Is this a name ckptfs reserves on the backend? */
bool backend_name_reserved(const char *name, bool at_root);

#endif
