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
 * Publish invariants (tests cite them as P1..P7):
 *  P1  each actor's operations (an actor is the uid that made the change)
 *      are applied in strictly increasing sequence order, and an operation
 *      is applied only after every earlier operation it conflicts with
 *      (order.c: same object, same name, or a directory it works in),
 *      whoever made that one.  So the backend always equals the mount's
 *      state after a prefix of every actor's sequence closed under those
 *      dependencies; with one actor, a prefix of the sequence;
 *  P2  a file version's data is written and fdatasync'd before the rename
 *      that gives it its final name, so a final name never shows a torn,
 *      zero-filled or partial file;
 *  P3  the directories an operation touched are fsync'd before its sequence
 *      number is declared durable;
 *  P4  an operation the backend refuses, transiently or permanently, is
 *      never skipped by the daemon: it blocks its actor's later operations
 *      and its dependants, is retried (with backoff; slowly for permanent
 *      errors; at once on backend_retry()), and waiters behind it get its
 *      error.  Only an administrator's backend_skip() moves past it, taking
 *      its dependants with it, and the manifest records that.  A skip never
 *      lets its actor's removals delete what that actor's last published
 *      marker may name: its unlinks and rmdirs queued behind the skipped
 *      operation, and those it makes after the skip until its next marker,
 *      are voided too (what they remove stays on the backend), and take no
 *      dependants with them;
 *  P5  temporary names never collide with user names (reserved prefix) and
 *      are removed when their version will never be published;
 *  P6  a backend node's recorded location is changed only by the publisher,
 *      right after the system call that moves it and before the next one;
 *      both happen under mv_lock, so a reader that met the gap can wait;
 *  P7  manifest records are appended in the order operations are applied;
 *      an operation whose record could not be appended is not applied.
 *
 * Lock order: (fs namespace lock) -> cfile->lock -> be->lock -> be->mv_lock
 * -> be->bt_lock -> be->dfd_lock (btree.c).  Staged directories (stage.c):
 * be->stage_rw -> be->mv_lock -> be->bt_lock, and be->stage_mx alone (with
 * at most dfd_lock inside); be->lock is never taken under stage_rw, which
 * a temporary file of a stage takes when it is released.
 * The publisher and flushers take be->lock only to move operations between
 * queues and never hold it across a system call.
 */
#ifndef CKPTFS_BACKEND_H
#define CKPTFS_BACKEND_H

#include "cache/cfile.h"
#include "cache/strmap.h"
#include "backend/bio.h"
#include "backend/ledger.h"
#include "backend/manifest.h"
#include "backend/nodes.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <xxhash.h>

#define CKPTFS_RESERVED_PREFIX ".ckptfs."	/* temporary files on the backend */
/* The longest path below the backend root a manifest record holds: bytes, names. */
#define BACKEND_PATH_LEN 4095
#define BACKEND_PATH_PARTS 256
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
	bool is_special;	/* a FIFO, socket or device: never opened */
	bool is_root;		/* dfd is the backend root, owned by the backend */
	atomic_bool present;
	atomic_int sticky_err;	/* last flush/publish error of this object, 0 if none */
	/*
	 * The last of its versions (or its creation) an administrator skipped,
	 * 0 if none: sticky_err stays ECANCELED through its later renames and
	 * attribute changes until a later version of it is published.
	 */
	atomic_uint_least64_t skipped_seq;
	/* The last of its operations of any kind an administrator skipped, 0 if none. */
	atomic_uint_least64_t cancel_seq;
	int dfd;		/* directories: an open fd, lazily; -1 until then or
				 * once closed for room (be->dfd_lock) */
	uint32_t dfd_users;	/* holders of dfd (bnode_dirfd .. bnode_dirfd_put) */
	struct list dfd_lru;	/* in be->dfd_lru while dfd is open (not the root) */
	struct backend *dfd_home;	/* set when dfd is first opened (not the root) */
	atomic_uint_least64_t ino;	/* directories: backend inode once opened, else 0 */
	struct blink *links;	/* links[0] is the primary name */
	uint32_t nlinks;
	XXH128_hash_t digest;	/* of the last published version (files) */
	atomic_bool has_digest;
	uint64_t published_seq;
	/* files: the inode its last version renamed in has (0: none or not known), set
	   just before the rename (put back if it fails), before the version's publication
	   is declared (node_open_base) */
	atomic_uint_least64_t published_ino;
	/*
	 * The last operation submitted on it (a version, rename, link, chmod,
	 * xattr change...) and its user, and the last that gave it a name
	 * (made, published, renamed, linked): written under be->lock, the seqs
	 * also read without it (backend_node_state).
	 */
	atomic_uint_least64_t last_seq, name_seq;
	uid_t last_actor, name_actor;
	/*
	 * backend/stage.c.  A directory made through the mount: mk_op, its
	 * mkdir while pending (be->lock); stage, where its files are written
	 * ahead meanwhile (be->stage_mx; has_stage mirrors it for lock-free
	 * looks); no_stage: never staged; staging: being made.  A stage itself
	 * (is_stage) lists its temporary files in stemps (be->stage_mx).
	 */
	struct op *mk_op;
	struct bnode *stage;
	atomic_bool has_stage, no_stage, staging;
	bool is_stage;
	struct list stemps;
};

struct bnode *bnode_new(bool is_dir);
struct bnode *bnode_get(struct bnode *b);
void bnode_put(struct bnode *b);

/* ---- operations ------------------------------------------------------ */

enum op_kind {
	OP_VERSION,	/* a file's contents and attributes as of a close/fsync */
	OP_MKDIR, OP_RMDIR, OP_UNLINK, OP_RENAME, OP_SYMLINK, OP_LINK,
	OP_SETATTR, OP_SETXATTR, OP_RMXATTR,
	OP_MKNOD,	/* a FIFO, socket or device node (mode has the type, rdev) */
};

/*
 * QUEUED: a version waiting for a flusher; FLUSHING: being written;
 * READY: may be applied once order allows; FAILED: its flush failed (the
 * publisher turns it into BLOCKED); BLOCKED: the backend refused it (err),
 * tried again at retry_ns.
 */
enum op_state { OPS_QUEUED, OPS_FLUSHING, OPS_READY, OPS_FAILED, OPS_BLOCKED };

/* setattr fields (op->valid) */
#define OPA_MODE  0x1
#define OPA_UID   0x2
#define OPA_GID   0x4
#define OPA_ATIME 0x8
#define OPA_MTIME 0x10

struct op {
	struct list link;	/* be->ops, in sequence order */
	struct list qlink;	/* be->flushq (versions) */
	struct list ilink;	/* be->intents (versions whose intent is not logged yet) */
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
	dev_t rdev;		/* mknod: the device number */
	void *value;		/* xattr value */
	size_t value_len;
	/* attributes: setattr, mkdir/symlink owner, and a version's snapshot */
	unsigned valid;
	mode_t mode;
	uid_t uid;
	gid_t gid;
	struct timespec atime, mtime;
	/*
	 * setattr, xattrs, rename: the object's owner as the mount knew it
	 * before the change; a root daemon changes or moves only an object with
	 * that owner (bsys C5).
	 */
	uid_t owner;
	bool owner_known;
	/* OP_VERSION */
	struct cver *ver;
	struct cfd *out;	/* the temporary file being written */
	bool copy_xattrs;	/* carry the replaced file's xattrs over */
	bool xattr_blob;	/* value holds the version's xattrs (fs/xattr.c format) */
	bool recorded;		/* its manifest record is written */
	bool renamed;		/* versions: the temporary file has its final name */
	unsigned records;	/* write-ahead records written (each attempt's "try") */
	char *path_hint;	/* versions: the mount path at seal, for the intent record */
	XXH128_hash_t digest;
	struct cleaves *leaves;	/* versions: the flushed file's block digests, or NULL */
	uint64_t out_ino;	/* versions: the flushed file's inode (0: unknown) */
	uint64_t enqueued_ns;
	uint64_t sealed_wall_ns;	/* wall clock when it was sequenced (floored) */
	uint64_t sealed_ahead_ns;	/* how far the floor put it past the clock (L1) */
	uid_t actor;		/* who made the change: its order domain (P1) */
	/* publisher state (be->lock) */
	bool reflush;		/* BLOCKED in its flush: flush again on retry */
	bool skipped;		/* an administrator skipped it: drop, never apply */
	bool kept;		/* ... a removal voided by a skip: what it removes stays (P4) */
	bool in_batch;		/* the publisher is applying it now */
	bool flush_first;	/* nothing before it holds it back (last order pass):
				 * flushed even when temporary files are at their cap */
	uint64_t retry_ns;	/* BLOCKED: when to try again */
	uint64_t blocked_ns;	/* BLOCKED: since when */
	unsigned attempts;	/* BLOCKED: failed attempts so far */
	int last_err;		/* the error of the last failed attempt (-errno) */
	struct op *blocker;	/* the BLOCKED operation holding it back, or NULL (order.c) */
};

/* ---- durability waiters -------------------------------------------- */

/*
 * Done (err 0) once every operation up to seq of `actor` (or, with
 * any_actor, of everyone) is durable; with the blocker's error as soon as
 * one of them is blocked; with -ETIMEDOUT at deadline_ns (0: no deadline).
 */
struct pub_waiter {
	struct list link;
	uint64_t seq;
	bool any_actor;
	uid_t actor;
	uint64_t deadline_ns;	/* monotonic */
	void (*done)(struct pub_waiter *w, int err);
	/* Optional: true once the caller gave up (a FUSE interrupt): -EINTR. */
	bool (*cancelled)(struct pub_waiter *w);
	int result;		/* internal: the answer, until done() is called */
};

/* ---- the backend ----------------------------------------------------- */

struct backend_stats {
	atomic_uint_least64_t persisted_bytes;	/* cached bytes of durable versions */
	atomic_uint_least64_t written_bytes;	/* bytes written to the backend */
	atomic_uint_least64_t io_written;	/* the same, counted as each pwrite returns */
	atomic_uint_least64_t copied_bytes;	/* ... copied there from published files (base_copy) */
	atomic_uint_least64_t hashed_bytes;	/* bytes the flushers hashed for digests */
	atomic_uint_least64_t extent_walks;	/* ranges of backend files whose data extents were looked up (SEEK_DATA) */
	atomic_uint_least64_t base_changed;	/* versions whose published file changed behind the mount */
	atomic_uint_least64_t versions_published;
	atomic_uint_least64_t ops_applied;
	atomic_uint_least64_t passes;		/* the publisher's walks of the queue */
	atomic_uint_least64_t errors;
	atomic_uint_least64_t retries;
	atomic_uint_least64_t flushing_bytes;	/* versions being written now */
	atomic_uint_least64_t pending_versions;
	atomic_uint_least64_t dir_fsyncs;
	atomic_uint_least64_t xattr_fsyncs;	/* new versions synced again for their xattrs (apply.c) */
	atomic_uint_least64_t xattrs_dropped;	/* xattrs the backend refuses: left out, logged */
	atomic_uint_least64_t dir_fd_closes;	/* idle directory fds closed for room */
	atomic_uint_least64_t dirs_staged;	/* directories written ahead of their mkdir */
	atomic_int last_error;			/* errno of the last failure, 0 when healthy */
	atomic_bool degraded;
};

struct backend_hooks {
	/* The directory where `owner`'s stage file should go (a reference), or NULL. */
	struct bnode *(*stage_dir)(void *arg, struct cfile *cf);
	/*
	 * May this ready operation be applied now?  0: yes; otherwise it is held
	 * (like an operation still flushing: its actor's later operations and its
	 * dependants wait) and asked again within the returned nanoseconds.
	 * Called by the publisher with be->lock held: it must not block.
	 */
	uint64_t (*hold)(void *arg, const struct op *op);
	/*
	 * After each publish group: every operation sequenced before wall time
	 * durable_wall_ns (sealed_wall_ns) is durable; seq_durable as in stats.
	 * Called by the publisher without locks.
	 */
	void (*published)(void *arg, uint64_t seq_durable, uint64_t durable_wall_ns);
	void *arg;
};

struct backend_opts {
	enum bio_kind io;
	unsigned flush_threads;
	unsigned flush_nice;	/* the flushers' nice level: below the threads serving requests */
	unsigned queue_depth;
	bool chown;		/* set owners on the backend (running as root) */
	bool direct;		/* write aligned data with O_DIRECT where the backend allows */
	bool no_manifest;	/* manifest=off: no records, no recovery, no verify */
	int base_copy;		/* -1 auto (by file system), 0 off, 1 on: see base_copy_decide */
	const struct nodes_opts *nodes;	/* node identity, peers, markers (nodes.h); NULL: defaults */
	const char *ledger_dir;		/* where the seal ledger lives (the rescue dir); NULL: none */
};

struct backend {
	int root_fd;
	dev_t root_dev;			/* root_fd's inode: where every ".." chain must end */
	ino_t root_ino;
	struct bnode *root;
	struct cache *cache;
	struct backend_opts opt;
	struct backend_hooks hooks;
	char mount_id[24];
	struct ledger ledger;		/* what this mount sealed, for the next one (ledger.h) */
	enum bio_kind io_in_use;
	atomic_bool direct_unsupported;
	atomic_bool prealloc_unsupported;	/* fallocate refused: flush.c stops trying */
	bool base_copy;			/* unchanged ranges copied from the published file */
	const char *base_copy_why;	/* ... and why (log, stats) */
	const char *io_fallback_reason;

	pthread_rwlock_t bt_lock;	/* bnode links: held only to read or update them */
	pthread_rwlock_t mv_lock;	/* held (write) by the publisher across calls that move names */

	pthread_mutex_t dfd_lock;	/* bnode dfd, dfd_users, dfd_lru; dfd_open */
	struct list dfd_lru;		/* open directory fds, least recently used first */
	uint32_t dfd_open, dfd_cap;	/* how many are open; how many may stay open idle */
	atomic_uint temp_open;		/* temporary files open (written, not yet published) */
	atomic_uint temp_taken;		/* ... and about to be, by flushers that took a version */
	uint32_t temp_cap;		/* beyond it, only flush_first versions get one */
	pthread_mutex_t stage_mx;	/* stage.c: stages, their temporary files, decisions */
	pthread_rwlock_t stage_rw;	/* temporary files made or removed, stages made
					 * (read) vs a stage emptied or removed (write) */
	struct bnode **stages;		/* directories staged, in order (stage_mx) */
	unsigned nstages, capstages;

	pthread_mutex_t lock;		/* everything below */
	pthread_cond_t pub_cond;	/* publisher: head may be ready */
	pthread_cond_t waiter_cond;	/* waiter thread: a deadline to watch */
	bool waiter_stop;
	pthread_cond_t flush_cond;	/* flushers: work queued, or a dir appeared */
	pthread_cond_t spill_cond;
	struct list ops;		/* unpublished operations, sequence order */
	struct list flushq;		/* versions waiting for a flusher */
	struct list waiters;		/* sequence order */
	int waiters_closed;		/* -errno once cancelled: later request waiters get it at once */
	uint64_t last_seq;		/* last assigned */
	uint64_t reserved_seq;		/* taken by a seal, not yet submitted (0: none) */
	uint64_t wall_floor;		/* no seal is stamped before it (nodes.h N3) */
	uint64_t skipped_ops;		/* skipped by the administrator since the mount (N6) */
	uint64_t skipped_from_wall;	/* the earliest seal time among them */
	uid_t *keep_actors;		/* users whose removals are voided until their next
					 * marker (backend_skip, P4); nkeep of them */
	unsigned nkeep;
	atomic_uint_least64_t durable_seq;
	struct list intents;		/* versions whose intent record is not written yet */
	struct order_state *order;	/* the last scheduling pass (order.c) */
	uint64_t wake_ns;		/* publisher: next timed look at the queue */
	bool pass_due;			/* publisher: something may apply now (pub_kick) */
	uint64_t last_pass_ns;		/* publisher: when its last pass ran */
	int sync_err;			/* the group sync is failing (-errno), else 0 */
	uint64_t compact_after_ns;	/* publisher: no manifest compaction before */
	uint64_t sync_first_seq;	/* ... for the batch starting at this seq */
	bool retry_now;			/* backend_retry() asked */
	bool stopping;
	bool aborting;			/* stop now, leave the queue (rescue) */
	bool joined;			/* threads have exited */
	bool threads_stuck;		/* an abort left some inside a hung backend's calls */
	bool spill_wanted;
	uint64_t temp_counter;

	struct manifest man;
	struct recovery_report recovery;
	struct nodes *nodes;		/* this node among its peers (nodes.h) */

	pthread_t publisher;
	pthread_t waiter;		/* answers waiters' deadlines and interrupts */
	pthread_t reaper;		/* puts replaced files' last references (reap.c) */
	pthread_mutex_t reap_lock;	/* reapq, reap_stop */
	pthread_cond_t reap_cond;
	struct cfd_bin reapq;
	bool reap_stop;
	bool reaper_started;
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
/*
 * Whether new versions take their unchanged ranges from the published file
 * (copy_file_range) rather than from clean cache chunks: opt->base_copy, or
 * for auto, by the backend's file system — XFS and btrfs reflink, NFS 4.2
 * copies on the server; elsewhere the kernel would copy the bytes itself,
 * from disk, which costs more than writing them from the cache.  Sets
 * be->base_copy(_why) and cache->seal_from_base (flush.c).
 */
void base_copy_decide(struct backend *be);

int backend_start(struct backend *be, int root_fd, struct cache *cache,
		  const struct backend_opts *opt, const struct backend_hooks *hooks);
/* Wait until everything queued is durable, then stop threads and free. */
void backend_stop(struct backend *be);
/* Stop the threads at once, leaving unpublished operations queued. */
void backend_abort(struct backend *be);
/* A file still open for writing at exit: what was written, never closed. */
struct rescue_item {
	char *path;		/* in the mount */
	struct cver *ver;	/* its contents, sealed for the rescue only */
};
/*
 * At exit (after backend_abort, or after a drain with nothing left queued):
 * write every queued file version to <dir>/<host>-<mount id>/files/, the
 * partial contents of files still open for writing to .../partial/, and a
 * manifest.jsonl of all of them and every queued operation.  Returns the
 * number of items saved, or -errno; *where gets the path.
 */
long backend_rescue(struct backend *be, const char *dir, const struct rescue_item *partial,
		    unsigned npartial, char *where, size_t wlen);
/*
 * Check the rescue directory as the rescue will (rescue.c R1), creating it
 * 0700 if missing: 0, or -errno with one line naming the problem in why.
 */
int backend_rescue_dir_check(const char *dir, char *why, size_t wlen);

/* A new operation (zeroed, kind set).  Fill it, then backend_submit it. */
struct op *op_new(enum op_kind kind);
void op_free(struct op *op);
/*
 * Give op the next sequence number and queue it.  Call with the front end's
 * namespace lock held so sequence order is the application's order.
 * For OP_VERSION, op->ver is sealed by the caller with the seq reserved by
 * backend_reserve_seq() under the same lock: until it is submitted (or the
 * reservation released), nothing from it on counts as durable.  Asked
 * again before that, it returns the same seq (a seal's retry).
 */
uint64_t backend_reserve_seq(struct backend *be);
void backend_release_seq(struct backend *be);
/* Returns the -errno of a blocked operation that will hold op back, or 0. */
int backend_submit(struct backend *be, struct op *op);
/*
 * Something may be applied now (a flush ended, a retry, a skip, a peer's
 * news): have the publisher run a pass (be->lock held).  A submission that
 * cannot apply yet does not kick: a pass walks the whole queue, and a
 * backend that stalls with 100,000 queued must not cost a walk per file.
 */
void publisher_kick_locked(struct backend *be);
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
		p += atomic_load(&be->st.written_bytes) + atomic_load(&be->st.copied_bytes) +
		     atomic_load(&be->st.io_written);
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
/*
 * A waiter whose deadline passed (-ETIMEDOUT): if the backend has made
 * progress since *progress, record it, give w timeout_s more and wait
 * again (true: w stays queued); false when it is stuck, and w is done.
 */
bool backend_wait_rearm(struct backend *be, struct pub_waiter *w, uint64_t *progress,
			double timeout_s);
/* Answer every waiter not answered yet with err (< 0), now (cancel.c). */
void backend_cancel_waiters(struct backend *be, int err);
/*
 * Block until everyone's operations up to seq are durable; timeout_ns 0 =
 * forever.  0, -ETIMEDOUT or the blocker's -errno.
 */
int backend_wait(struct backend *be, uint64_t seq, uint64_t timeout_ns);

/*
 * The error of the blocked operation that holds back `actor`'s operations
 * up to seq (-errno), or 0 if none is blocked.
 */
int backend_actor_error(struct backend *be, uid_t actor, uint64_t seq);
/*
 * Is the last operation on b (its contents, a rename, link, chmod or xattr
 * change of it; with names_only, the last that gave it a name) durable?
 * 0 yes (or none), 1 not yet, -errno: its user's order is blocked at or
 * before it.
 */
int backend_node_state(struct backend *be, struct bnode *b, bool names_only);

/* A blocked operation, for stats and the control file. */
struct backend_blocked {
	uint64_t seq;
	enum op_kind kind;
	int err;		/* -errno */
	uid_t actor;
	uint64_t since_ns;	/* monotonic */
	unsigned attempts;
	unsigned behind;	/* operations it holds back */
	char path[512];		/* backend path of its subject */
};
/* Up to max blocked operations, lowest sequence first; returns how many exist. */
unsigned backend_blocked(struct backend *be, struct backend_blocked *out, unsigned max);
/* "seq 8: mkdir step2: Permission denied" */
void backend_blocked_describe(const struct backend_blocked *b, char *buf, size_t len);
/* Try every blocked operation again now. */
void backend_retry(struct backend *be);
/* After backend_abort: were threads left inside backend calls?  (Then exit without freeing.) */
bool backend_threads_stuck(struct backend *be);
/* pthread_join, given up at deadline_ns (monotonic; 0: none): joined? */
bool join_until(pthread_t t, uint64_t deadline_ns);
/*
 * reap.c: replaced files' last references put on a thread of their own.
 * reap_give moves b's references there (or puts them at once when the
 * queue is full or stopped); reap_stop puts what is queued and joins by
 * deadline_ns (0: none): joined?
 */
int reap_start(struct backend *be);
void reap_give(struct backend *be, struct cfd_bin *b);
bool reap_stop(struct backend *be, uint64_t deadline_ns);
/*
 * Administrator's act: drop the blocked operation `seq` and its dependants
 * (every later operation that depends on it, transitively, and every later
 * marker of the same actor), recording them as skipped in the manifest.
 * The actor's later unlinks and rmdirs are voided too, without dependants,
 * and so are those it submits until its next marker (P4): the checkpoint
 * its last published marker names stays on the backend.
 * Returns how many were dropped, -ENOENT if no pending operation has that
 * seq, -EBUSY if it is not blocked.  `report` gets one line per dropped op.
 */
long backend_skip(struct backend *be, uint64_t seq, struct strbuf *report);

const char *op_kind_name(enum op_kind k);
/* The manifest's name for it ("file" for a version). */
const char *op_record_type(enum op_kind k);
/* Append `"path": P` and, if `to` is set, `, "to": T` (JSON strings). */
void sb_json_paths(struct strbuf *b, const char *path, const char *to);

/* Called by the cache when writers wait for space. */
void backend_want_spill(void *be);

/*
 * A directory's fd, opened lazily, held until bnode_dirfd_put(be, dir);
 * -errno (nothing held) if it cannot be opened.  Idle fds beyond
 * be->dfd_cap are closed, least recently used first, and reopened by name
 * when next wanted, so a tree of any size needs a bounded number of fds.
 */
int bnode_dirfd(struct backend *be, struct bnode *dir);
void bnode_dirfd_put(struct backend *be, struct bnode *dir);
/* Close every idle directory fd (backend_stop); the root's stays. */
void bnode_dirfds_close(struct backend *be);
/* A 1/div share of the process's fd limit (RLIMIT_NOFILE), within [lo, hi]. */
uint32_t fd_limit_share(unsigned div, uint32_t lo, uint32_t hi);
/*
 * Location of b: copies the primary (dir ref, name) into *dir / name;
 * returns 0, or -ENOENT if it is not on the backend.
 */
int bnode_locate(struct backend *be, struct bnode *b, struct bnode **dir, char *name, size_t len);
/* Record b as present at (dir, name) — for objects found on the backend. */
void bnode_set_loaded(struct backend *be, struct bnode *b, struct bnode *dir, const char *name);
/*
 * b is no longer at (dir, name): something else removed or replaced it on
 * the backend (another node).  The front end calls it only for objects no
 * pending operation touches (backend_pending_scan).
 */
void bnode_set_unloaded(struct backend *be, struct bnode *b, struct bnode *dir, const char *name);

/*
 * What the pending operations touch, for revalidating a directory against
 * the backend (pending.c): the names they create, replace or remove in
 * `dir`, and every backend node they touch with all its ancestors (so a
 * subtree with anything pending in it is seen from its top).
 */
struct pending_set {
	struct strset names;
	const struct bnode **nodes;	/* open-addressed hash set */
	size_t cap, nnodes;
};
void backend_pending_scan(struct backend *be, struct bnode *dir, struct pending_set *out);
bool pending_has_name(const struct pending_set *s, const char *name);
bool pending_has_node(const struct pending_set *s, const struct bnode *b);
void pending_free(struct pending_set *s);

/* Wait for a name move in progress (after ENOENT on a location just read). */
void backend_move_wait(struct backend *be);
/*
 * Call fn(arg, dirfd, name) on the object b at its backend location (the
 * root: its own fd and "."), retrying once if a move raced the lookup.
 * fn's result, or -errno (-ENOENT: not on the backend).
 */
int bnode_at(struct backend *be, struct bnode *b, int (*fn)(void *arg, int dfd, const char *name),
	     void *arg);
/*
 * Open the object b at its backend location (flags as for bsys.openat:
 * never follows a symlink, opens only a regular file unless O_DIRECTORY or
 * O_PATH), retrying once if a move raced the lookup.  fd or -errno.
 */
int bnode_open(struct backend *be, struct bnode *b, int flags);

/* Link bookkeeping, bt_lock held for writing (publisher and loader only). */
void bnode_link_add_locked(struct bnode *b, struct bnode *dir, const char *name);
void bnode_link_del_locked(struct bnode *b, struct bnode *dir, const char *name);
void bnode_link_move_locked(struct bnode *b, struct bnode *dir, const char *name,
			    struct bnode *ndir, const char *nname);
void bnode_link_primary_locked(struct bnode *b, struct bnode *dir, const char *name);

/*
 * The directory b is in where the backend has it now (its primary link), or
 * NULL at the root and for an object with no name there (bt_lock held).  A
 * walk up stops after BNODE_DEPTH_MAX steps whatever it finds.
 */
#define BNODE_DEPTH_MAX 4096
const struct bnode *bnode_up_locked(const struct bnode *b);

/* Backend-relative path of (dir, name) (name may be NULL): 0 or -ENOENT. */
int bnode_path(struct backend *be, struct bnode *dir, const char *name, char *buf, size_t len);
/*
 * Where objects will be once earlier operations of a batch are applied
 * (made, or moved there): node -> (dir, name).  bnode_path_planned() takes
 * a directory on the way from the latest plan for it, else from its name
 * on the backend now.
 */
struct bplan {
	const struct bnode *node, *dir;
	const char *name;
};
int bnode_path_planned(struct backend *be, const struct bnode *dir, const char *name, char *buf,
		       size_t len, const struct bplan *plan, unsigned nplan);
/* The latest plan for b, or NULL. */
const struct bplan *bplan_find(const struct bplan *plan, unsigned n, const struct bnode *b);

/* Is this a name ckptfs reserves on the backend? */
bool backend_name_reserved(const char *name, bool at_root);

#endif
