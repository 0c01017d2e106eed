/*
 * pub.h — what the publisher's files share inside backend/: the scheduling
 * pass (order.c), applying one operation (apply.c), and the publisher
 * thread with its waiters and blocked-operation bookkeeping (publish.c).
 * Nothing outside backend/ includes this.
 */
#ifndef CKPTFS_PUB_H
#define CKPTFS_PUB_H

#include "backend/backend.h"

#define PUB_BATCH 512
#define PASS_GAP_NS (1000ull * 1000000)	/* the publisher looks at least this often */

/* ---- order.c ------------------------------------------------------------ */

/*
 * Fingerprints of what an operation touches, and which of them conflict
 * (order.c's essay).  A fingerprint set maps each to the blocked operation
 * that holds it back (or NULL when it is merely not done yet).
 */
struct fpset {
	struct fpslot { uint64_t fp; struct op *blocker; } *v;
	size_t cap, n;
};
void fpset_clear(struct fpset *s);
void fpset_free(struct fpset *s);
/* Does op conflict with anything in s?  *blocker gets the first blocker found. */
bool fpset_conflicts(const struct fpset *s, const struct op *op, struct op **blocker);
void fpset_add_op(struct fpset *s, const struct op *op, struct op *blocker);

/* Per-actor result of a pass: what waiters and FLUSH need to know. */
struct actor_state {
	uid_t uid;
	uint64_t min_unapplied;		/* first not applied nor in the batch; UINT64_MAX: none */
	uint64_t min_undurable;		/* first not durable (the batch counts); UINT64_MAX: none */
	uint64_t first_blocked;		/* seq of its first operation held by a blocker */
	struct op *blocker;
	uint64_t first_failing;		/* seq of its first operation that failed before */
	struct op *failing;		/* ... (possibly being retried now) */
};

struct order_state {
	struct fpset keys;		/* every unapplied operation's fingerprints */
	struct fpset batch;		/* those of the batch the pass chose */
	struct actor_state *actors;
	unsigned nactors, cap;
	struct actor_state all;		/* the same over every actor (uid unused) */
	unsigned nblocked;		/* operations in state BLOCKED */
	uint64_t blocks;		/* failures so far (op_block calls): the publisher logs new ones */
	struct op *first_blocked_op;	/* the BLOCKED one with the lowest seq */
	struct op **pend;		/* the pass's unapplied operations so far, in order */
	unsigned npend, pcap;
	/* Where the batch chosen so far puts nodes (sorted by node): a name the backend does not
	 * have yet, for order_moved_below. */
	struct oplace { const struct bnode *node, *dir; } *placed;
	unsigned nplaced, plcap;
};

struct order_state *order_new(void);
void order_free(struct order_state *st);
struct actor_state *order_actor(struct order_state *st, uid_t uid, bool create);
/*
 * op leaves the list (applied, skipped, dropped; be->lock held): the last
 * pass's picture must not point at it once it is freed.
 */
void order_forget(struct backend *be, const struct op *op);

/*
 * One scheduling pass over be->ops (be->lock held): fills batch with up to
 * max operations that may be applied now, in sequence order, assuming each
 * earlier one in the batch succeeds; turns FAILED flushes into BLOCKED ones,
 * retries BLOCKED ones whose time has come, and rebuilds be->order.
 * *wake_ns is lowered to the next time something must be looked at again.
 */
unsigned order_pass(struct backend *be, struct op **batch, unsigned max, uint64_t now,
		    uint64_t *wake_ns);
/*
 * The first of ops[0..n) (operations not applied) that touches something
 * inside a directory op moves (a rename of a directory, at any depth
 * below it, through any of its names), or NULL: op must wait for it
 * whoever made either (takes bt_lock).  plan: the pass's state, whose
 * batch will have put nodes where the backend has no name for them yet
 * (NULL: the backend's names are all there is).
 */
struct op *order_moved_below(struct backend *be, const struct order_state *plan,
			     const struct op *op, struct op *const *ops, unsigned n);
/* A newly submitted op joins the last pass's picture (be->lock held). */
struct op *order_note_submit(struct backend *be, struct op *op);

/* Put a version in the flush queue at its place by sequence number (be->lock). */
void flushq_insert_sorted(struct backend *be, struct op *op);
/* Describe a pending operation for stats and logs (be->lock held). */
void blocked_fill(struct backend *be, const struct op *op, struct backend_blocked *b);
/* Block op after a failure with err at time now (be->lock held); logs the first. */
void op_block(struct backend *be, struct op *op, int err, uint64_t now);
bool err_transient(int err);

/* ---- seal times (publish.c) --------------------------------------------- */

/*
 * The wall time to stamp a seal with: never earlier than one given before
 * (be->lock); *ahead (may be NULL): how far past the clock that put it,
 * after the clock stepped back.
 */
uint64_t backend_wall_stamp_locked(struct backend *be, uint64_t *ahead);
/*
 * The last sequence number whose operation, and every one before it, is
 * durable: before the first queued one, and before a reserved one that is
 * not queued yet (a seal in progress must not be counted durable by a
 * publisher's pass that finds the queue empty).  be->lock held.
 */
uint64_t backend_durable_upto_locked(const struct backend *be);
/*
 * Every operation sealed before the returned wall time is durable (be->lock):
 * the oldest pending seal time, or a fresh stamp when nothing is pending;
 * *seq (if not NULL) gets the durable sequence number that goes with it.
 */
uint64_t backend_durable_wall_locked(struct backend *be, uint64_t *seq);

/* ---- stage.c: directories written ahead of their mkdir ------------------ */

#define STAGE_DEPTH 16	/* new directories above one another, staged at once */
struct stage_job {	/* directories to stage, top down: d[i] in p[i] */
	struct bnode *d[STAGE_DEPTH], *p[STAGE_DEPTH];
	unsigned n;
};
/* Can d (not present) be staged, with what is above it?  Fills job (refs); be->lock held. */
bool stage_collect_locked(struct backend *be, struct bnode *d, struct stage_job *job);
/* Stage what job lists (no lock held), then free it: did it stage anything? */
bool stage_run(struct backend *be, struct stage_job *job);
void stage_job_free(struct stage_job *job);
/*
 * Where a temporary file of a version in dir is made (a reference): dir,
 * or while its mkdir is pending its stage.  be->stage_rw held for reading.
 */
struct bnode *stage_target(struct backend *be, struct bnode *dir);
/* A temporary file made in (or released from) a stage: listed there (stage_mx). */
void stage_temp_add(struct backend *be, struct bnode *stage, struct list *link);
void stage_temp_del(struct backend *be, struct list *link);
/* The publisher decides op's mkdir now: no stage is made for its directory after this. */
void stage_close(struct backend *be, struct bnode *dir);
/* op's mkdir made its directory: what was written ahead moves in, the stage goes. 0 or -errno. */
int stage_merge(struct backend *be, struct op *op);
/* dir's mkdir will never come (skipped, or the stop): its stage is removed. */
void stage_discard(struct backend *be, struct bnode *dir);
/* At the stop: every stage left is removed. */
void stage_remove_all(struct backend *be);
/* flush.c: the temporary file `name` listed in stemps is in `to` now (stage_rw held for writing). */
bool flush_temp_moved(struct list *stemps, const char *name, struct bnode *to);
/* Is the temporary file with this link listed in a stage? (stage_mx) */
bool stage_temp_listed(struct backend *be, struct list *link);

/* ---- apply.c ------------------------------------------------------------ */

/* Directories and files a batch touched: fsync'd before it is durable (P3). */
struct touched {
	struct bnode **dirs;	/* grown as needed: a hard-linked file touches */
	unsigned n, cap;	/* every directory it has a name in */
	bool *ordered;		/* dirs[i] holds an operation's effect, not only a
				 * temporary name that left it (touched_covers) */
	struct bnode **files;
	unsigned nfiles, capfiles;
	bool closed;		/* an operation with effects in two directories was
				 * applied: dirs[] are synced in order before the
				 * next one (a cut between them must lose nothing) */
};
void touched_free(struct touched *t);

/*
 * Append op's write-ahead record for this attempt unless it has one (P7):
 * 0, RECORD_LATER or -errno.  Its durability is the caller's: fsync the
 * manifest before applying.
 */
int record_attempt(struct backend *be, struct op *op);
/*
 * record_attempt's answer for an operation whose path goes through a
 * directory not made on the backend yet, or that names an object (a link,
 * attributes) not published yet, when nothing earlier in its batch makes
 * it (record_attempt_planned knows what does) — the batch's records are
 * all written before any of it is applied.  The batch ends before it (it is
 * recorded in the next, once that version is published), unless it comes
 * first: then nothing can publish its object before it, and it has no
 * record (record_none), like any operation on what is not on the backend.
 */
#define RECORD_LATER 1
void record_none(struct op *op);
/*
 * record_attempt for the operations of one batch in order: plan (room for
 * 2 per operation) collects where each leaves what it makes or moves, so
 * the records after it name those paths (a file made in a directory the
 * batch makes first); RECORD_LATER only when nothing before it in the
 * batch explains a path.
 */
int record_attempt_planned(struct backend *be, struct op *op, struct bplan *plan, unsigned *nplan);
/* This attempt will not happen (err, or 0: deferred): void its record. */
void void_attempt(struct backend *be, struct op *op, int err);
/* Record (if needed) and apply one operation: 0 or -errno (its attempt voided). */
int apply_op(struct backend *be, struct op *op, struct touched *t);
/* Does t already cover every directory op touches (so no sync is needed first)? */
bool touched_covers(const struct touched *t, const struct op *op);
/* fsync the manifest and everything touched; keeps the set on failure. */
int sync_touched(struct backend *be, struct touched *t);
/* Manifest records of operations that will never happen. */
void record_void(struct backend *be, const struct op *op, const char *why);
void record_intent(struct backend *be, const struct op *op);

/* ---- markers (marker.c) ------------------------------------------------- */

/* Is this operation the publication of a checkpoint marker? */
bool op_is_marker(const struct op *op);

#endif
