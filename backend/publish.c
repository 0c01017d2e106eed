/*
 * publish.c — the operation queue, the publisher thread that applies it to
 * the backend, durability waiters, and the administrator's levers on
 * blocked operations (invariants P1..P7 in backend.h).
 *
 * The publisher loops: it writes the intent records of newly queued
 * versions, asks order.c for a batch of operations that may be applied now
 * (each actor's in sequence order, dependencies across actors respected),
 * applies them one by one (apply.c), fsyncs the manifest and the
 * directories they touched, and only then declares them durable and
 * answers waiters: group commit.  An operation that fails stays where it is
 * (P4): BLOCKED, with its error, retried with backoff (seconds to a minute
 * for permanent errors such as EACCES, which need an administrator), while
 * its actor's later operations and its dependants wait and report its
 * error; every other actor's operations go on.  backend_retry() tries again
 * at once; backend_skip() drops it with its dependants, recorded in the
 * manifest as skipped.  A skip also voids the removals (unlinks, rmdirs)
 * of each actor who loses an operation to it, queued behind it and
 * submitted until that actor's next marker: behind a skipped marker,
 * deleting the previous checkpoint would leave none complete (P4).  They
 * take no dependants: what they remove simply stays on the backend, and a
 * name made there later is published.
 *
 * Threads: one publisher (this file), flushers and a spiller (flush.c);
 * callers of backend_submit, backend_wait, backend_retry and backend_skip from
 * the front end.  Only the publisher frees operations.
 * Lock order: be->lock -> be->mv_lock -> be->bt_lock.  be->lock is never
 * held across a system call; a waiter's callback runs with no lock held.
 */
#include "backend/pub.h"
#include "backend/bsys.h"
#include "backend/nodes.h"
#include "cache/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void flush_threads_start(struct backend *be);
bool flush_threads_stop(struct backend *be, uint64_t deadline_ns);

static struct ckpt_ratelimit err_rl;

struct op *op_new(enum op_kind kind)
{
	struct op *op = xcalloc(1, sizeof(*op));
	op->kind = kind;
	list_init(&op->link);
	list_init(&op->qlink);
	list_init(&op->ilink);
	return op;
}

/* Take op off be->ops (be->lock held): a mkdir no longer pending is not its directory's. */
static void op_unlist_locked(struct backend *be, struct op *op)
{
	list_del(&op->link);
	order_forget(be, op);	/* the last pass's picture must not outlive it */
	if (op->kind == OP_MKDIR && op->node && op->node->mk_op == op)
		op->node->mk_op = NULL;
}

void op_free(struct op *op)
{
	if (!op)
		return;
	bnode_put(op->node);
	bnode_put(op->dir);
	bnode_put(op->dir2);
	bnode_put(op->victim);
	free(op->name);
	free(op->name2);
	free(op->target);
	free(op->value);
	free(op->path_hint);
	if (op->ver)
		cver_free(op->ver);
	cfd_put(op->out);
	cleaves_put(op->leaves);
	free(op);
}

uint64_t backend_reserve_seq(struct backend *be)
{
	pthread_mutex_lock(&be->lock);
	if (!be->reserved_seq)
		be->reserved_seq = ++be->last_seq;
	uint64_t s = be->reserved_seq;
	pthread_mutex_unlock(&be->lock);
	return s;
}

void backend_release_seq(struct backend *be)
{
	pthread_mutex_lock(&be->lock);
	be->reserved_seq = 0;	/* a gap in the numbers: harmless */
	pthread_mutex_unlock(&be->lock);
}

/* durable_seq after the queue lost operations (applied and synced, or skipped); be->lock. */
static void durable_advance_locked(struct backend *be)
{
	uint64_t durable = backend_durable_upto_locked(be);

	if (durable > atomic_load(&be->durable_seq))
		atomic_store(&be->durable_seq, durable);
}

uint64_t backend_durable_upto_locked(const struct backend *be)
{
	uint64_t next = list_empty(&be->ops) ? be->last_seq + 1
		      : list_entry(be->ops.next, struct op, link)->seq;

	if (be->reserved_seq)
		next = CKPT_MIN(next, be->reserved_seq);
	return next - 1;
}

uint64_t backend_last_seq(struct backend *be)
{
	pthread_mutex_lock(&be->lock);
	uint64_t s = be->last_seq;
	pthread_mutex_unlock(&be->lock);
	return s;
}

/* ---- removals kept after a skip (P4) -------------------------------------- */

static bool op_is_removal(const struct op *op)
{
	return op->kind == OP_UNLINK || op->kind == OP_RMDIR;
}

/* Are actor's removals voided until its next marker?  (be->lock held) */
static bool keep_has_locked(const struct backend *be, uid_t actor)
{
	for (unsigned i = 0; i < be->nkeep; i++)
		if (be->keep_actors[i] == actor)
			return true;
	return false;
}

static void keep_set_locked(struct backend *be, uid_t actor, bool on)
{
	for (unsigned i = 0; i < be->nkeep; i++) {
		if (be->keep_actors[i] != actor)
			continue;
		if (!on)
			be->keep_actors[i] = be->keep_actors[--be->nkeep];
		return;
	}
	if (!on)
		return;
	be->keep_actors = xrealloc(be->keep_actors, (be->nkeep + 1) * sizeof(*be->keep_actors));
	be->keep_actors[be->nkeep++] = actor;
}

/*
 * Queue op.  No I/O here: the caller holds the front end's namespace lock.
 * Returns the error of a blocked operation that will hold it back (-errno),
 * or 0, so that close() can report it at once.
 */
int backend_submit(struct backend *be, struct op *op)
{
	op->enqueued_ns = now_ns();
	pthread_mutex_lock(&be->lock);
	op->sealed_wall_ns = backend_wall_stamp_locked(be, &op->sealed_ahead_ns);	/* N3 */
	if (!op->seq)
		op->seq = ++be->last_seq;
	if (op->seq == be->reserved_seq)
		be->reserved_seq = 0;
	struct bnode *named[2] = { op->node, op->kind == OP_RENAME && (op->flags & RENAME_EXCHANGE) ?
					     op->victim : NULL };
	for (unsigned i = 0; i < 2; i++) {
		if (!named[i])
			continue;
		named[i]->last_actor = op->actor;
		atomic_store(&named[i]->last_seq, op->seq);
		if (op->kind != OP_SETATTR && op->kind != OP_SETXATTR && op->kind != OP_RMXATTR) {
			named[i]->name_actor = op->actor;
			atomic_store(&named[i]->name_seq, op->seq);
		}
	}
	ledger_seal(&be->ledger, op->seq);	/* a store into a mapped page */
	list_add_tail(&be->ops, &op->link);
	if (op->kind == OP_MKDIR && op->node && !atomic_load(&op->node->present))
		op->node->mk_op = op;	/* its files may be written ahead (flush.c) */
	if (op->kind == OP_VERSION) {
		op->state = OPS_QUEUED;
		list_add_tail(&be->flushq, &op->qlink);
		list_add_tail(&be->intents, &op->ilink);
		atomic_fetch_add(&be->st.pending_versions, 1);
		pthread_cond_signal(&be->flush_cond);
	} else {
		op->state = OPS_READY;
	}
	if (be->nkeep && op_is_marker(op)) {
		keep_set_locked(be, op->actor, false);	/* a newer checkpoint is named */
	} else if (be->nkeep && op_is_removal(op) && keep_has_locked(be, op->actor)) {
		op->skipped = op->kept = true;		/* the publisher drops it (P4) */
		publisher_kick_locked(be);
		pthread_mutex_unlock(&be->lock);
		return 0;
	}
	struct op *blocker = order_note_submit(be, op);
	int err = blocker ? blocker->err : 0;
	if (op->state == OPS_READY && op->flush_first)
		publisher_kick_locked(be);	/* nothing before it holds it */
	else if (op->kind == OP_VERSION)
		pthread_cond_signal(&be->pub_cond);	/* its intent record, no pass */
	pthread_mutex_unlock(&be->lock);
	return err;
}

void publisher_kick_locked(struct backend *be)
{
	be->pass_due = true;
	pthread_cond_signal(&be->pub_cond);
}

/* ---- seal times (nodes.h N3) ------------------------------------------ */

uint64_t backend_wall_stamp_locked(struct backend *be, uint64_t *ahead)
{
	uint64_t now = wall_ns(), w = CKPT_MAX(now, be->wall_floor);

	be->wall_floor = w;	/* the wall clock may step back: seal times never do */
	if (ahead)
		*ahead = w - now;
	return w;
}

uint64_t backend_durable_wall_locked(struct backend *be, uint64_t *seq)
{
	uint64_t wall = UINT64_MAX;

	for (struct list *e = be->ops.next; e != &be->ops; e = e->next)
		wall = CKPT_MIN(wall, list_entry(e, struct op, link)->sealed_wall_ns);
	if (seq)
		*seq = backend_durable_upto_locked(be);
	/* Nothing pending: no later seal can be stamped before now. */
	return wall != UINT64_MAX ? wall : backend_wall_stamp_locked(be, NULL);
}

/* ---- waiters ------------------------------------------------------- */

/*
 * Where w stands after the last pass: 1 done, 0 waiting, or -errno (the
 * blocker's error, a failing group sync, or -ETIMEDOUT).  be->lock held.
 */
static int waiter_state(struct backend *be, const struct pub_waiter *w, uint64_t now)
{
	const struct order_state *st = be->order;
	const struct actor_state *a = w->any_actor ? &st->all
				      : order_actor(be->order, w->actor, false);

	if (!a || w->seq < a->min_undurable)
		return 1;
	/* (A blocker just skipped goes at the next pass: wait for that.) */
	if (a->first_blocked <= w->seq && a->blocker && !a->blocker->skipped)
		return a->blocker->err ? a->blocker->err : -EIO;
	if (be->sync_err && w->seq >= be->sync_first_seq)
		return be->sync_err;
	if (w->deadline_ns && now >= w->deadline_ns)
		return -ETIMEDOUT;
	if (w->cancelled && w->cancelled((struct pub_waiter *)w))
		return -EINTR;
	return 0;
}

/*
 * Move waiters that can be answered onto `out`, their result in w->result;
 * *next gets the time the remaining ones must be looked at again (a
 * deadline, or the next look for an interrupt).
 */
static void waiters_collect(struct backend *be, struct list *out, uint64_t now, uint64_t *wake)
{
	struct list *e = be->waiters.next;

	while (e != &be->waiters) {
		struct list *next = e->next;
		struct pub_waiter *w = list_entry(e, struct pub_waiter, link);
		int s = waiter_state(be, w, now);
		if (s) {
			w->result = s > 0 ? 0 : s;
			list_del(&w->link);
			list_add_tail(out, &w->link);
		} else {
			if (w->deadline_ns)
				*wake = CKPT_MIN(*wake, w->deadline_ns);
			if (w->cancelled)	/* look for interrupts a few times a second */
				*wake = CKPT_MIN(*wake, now + 200ull * 1000000);
		}
		e = next;
	}
}

static void waiters_answer(struct list *ready)
{
	while (!list_empty(ready)) {
		struct pub_waiter *w = list_entry(ready->next, struct pub_waiter, link);
		list_del(&w->link);
		w->done(w, w->result);
	}
}

void backend_wait_async(struct backend *be, struct pub_waiter *w)
{
	struct list ready;

	list_init(&ready);
	pthread_mutex_lock(&be->lock);
	/*
	 * A request's waiter (it can be interrupted) after the session's
	 * waiters were cancelled: its answer must go out now, before the
	 * unmount.  The daemon's own drain at exit (backend_wait) still waits.
	 */
	if (be->waiters_closed && w->cancelled) {
		int err = be->waiters_closed;
		pthread_mutex_unlock(&be->lock);
		w->result = err;
		w->done(w, err);
		return;
	}
	list_add_tail(&be->waiters, &w->link);
	uint64_t next = UINT64_MAX;
	waiters_collect(be, &ready, now_ns(), &next);
	if (next != UINT64_MAX)
		pthread_cond_signal(&be->waiter_cond);	/* it must see the deadline */
	pthread_mutex_unlock(&be->lock);
	waiters_answer(&ready);
}

bool backend_wait_rearm(struct backend *be, struct pub_waiter *w, uint64_t *progress,
			double timeout_s)
{
	uint64_t p = backend_progress(be);

	if (p == *progress)
		return false;
	*progress = p;	/* slow, not stuck: wait on */
	w->deadline_ns = now_ns() + (uint64_t)(timeout_s * 1e9);
	backend_wait_async(be, w);
	return true;
}

/*
 * Deadlines and interrupts are the waiter thread's, not the publisher's: a
 * publisher stuck in a slow backend call must not delay a drain's timeout.
 */
static void *waiter_main(void *arg)
{
	struct backend *be = arg;

	pthread_mutex_lock(&be->lock);
	while (!be->waiter_stop) {
		struct list ready;
		uint64_t now = now_ns(), next = UINT64_MAX;

		list_init(&ready);
		waiters_collect(be, &ready, now, &next);
		if (!list_empty(&ready)) {
			pthread_mutex_unlock(&be->lock);
			waiters_answer(&ready);
			pthread_mutex_lock(&be->lock);
			continue;
		}
		if (next == UINT64_MAX)
			pthread_cond_wait(&be->waiter_cond, &be->lock);
		else if (next > now)
			cond_wait_ns(&be->waiter_cond, &be->lock, next - now);
	}
	pthread_mutex_unlock(&be->lock);
	return NULL;
}

struct sync_wait {
	struct pub_waiter w;
	pthread_mutex_t m;
	pthread_cond_t c;
	bool done;
};

static void sync_wait_done(struct pub_waiter *w, int err)
{
	struct sync_wait *s = CKPT_CONTAINER_OF(w, struct sync_wait, w);
	pthread_mutex_lock(&s->m);
	s->done = true;
	pthread_cond_signal(&s->c);
	pthread_mutex_unlock(&s->m);
}

int backend_wait(struct backend *be, uint64_t seq, uint64_t timeout_ns)
{
	struct sync_wait s = { .w = { .seq = seq, .any_actor = true, .done = sync_wait_done } };

	if (timeout_ns)
		s.w.deadline_ns = now_ns() + timeout_ns;
	pthread_mutex_init(&s.m, NULL);
	pthread_cond_init(&s.c, NULL);
	backend_wait_async(be, &s.w);
	pthread_mutex_lock(&s.m);
	while (!s.done)
		pthread_cond_wait(&s.c, &s.m);
	pthread_mutex_unlock(&s.m);
	pthread_mutex_destroy(&s.m);
	pthread_cond_destroy(&s.c);
	return s.w.result;
}

/* The error holding back a's operations up to seq, or 0 (be->lock held). */
static int actor_error_locked(const struct actor_state *a, uint64_t seq)
{
	if (a && a->blocker && !a->blocker->skipped && a->first_blocked <= seq)
		return a->blocker->err ? a->blocker->err : -EIO;
	if (a && a->failing && !a->failing->skipped && a->first_failing <= seq)
		return a->failing->last_err ? a->failing->last_err : -EIO;
	return 0;
}

int backend_actor_error(struct backend *be, uid_t actor, uint64_t seq)
{
	pthread_mutex_lock(&be->lock);
	int err = actor_error_locked(order_actor(be->order, actor, false), seq);
	pthread_mutex_unlock(&be->lock);
	return err;
}

int backend_node_state(struct backend *be, struct bnode *b, bool names_only)
{
	atomic_uint_least64_t *at = names_only ? &b->name_seq : &b->last_seq;
	uint64_t seq = atomic_load(at);
	int r = 0;

	if (!seq || seq <= atomic_load(&be->durable_seq))
		return 0;	/* everything up to it is durable */
	pthread_mutex_lock(&be->lock);
	seq = atomic_load(at);
	const struct actor_state *a = order_actor(be->order, names_only ? b->name_actor : b->last_actor,
						  false);
	if (a && seq >= a->min_undurable) {
		int err = actor_error_locked(a, seq);
		r = err ? err : 1;
	}
	pthread_mutex_unlock(&be->lock);
	return r;
}

/* ---- blocked operations: what stats show, what an admin can do ------------- */

void blocked_fill(struct backend *be, const struct op *op, struct backend_blocked *b)
{
	memset(b, 0, sizeof(*b));
	b->seq = op->seq;
	b->kind = op->kind;
	b->err = op->err ? op->err : op->last_err;	/* being retried: why it was blocked */
	b->actor = op->actor;
	b->since_ns = op->blocked_ns;
	b->attempts = op->attempts;
	/* A link has no dir/name: it is named by the name it gives (a marker's, say). */
	struct bnode *dir = op->kind == OP_LINK ? op->dir2 : op->dir;
	const char *name_in = op->kind == OP_LINK ? op->name2 : op->name;

	if (op->path_hint) {	/* versions: where the mount had it at seal */
		snprintf(b->path, sizeof(b->path), "%s", op->path_hint);
	} else if (!dir || bnode_path(be, dir, name_in, b->path, sizeof(b->path)) < 0) {
		struct bnode *at = NULL;
		char name[256];
		if (op->node && bnode_locate(be, op->node, &at, name, sizeof(name)) == 0) {
			if (bnode_path(be, at, name, b->path, sizeof(b->path)) < 0)
				snprintf(b->path, sizeof(b->path), "%s", name);
			bnode_put(at);
		} else if (op->name) {
			snprintf(b->path, sizeof(b->path), "%s", op->name);
		}
	}
}

unsigned backend_blocked(struct backend *be, struct backend_blocked *out, unsigned max)
{
	unsigned n = 0;

	pthread_mutex_lock(&be->lock);
	for (struct list *e = be->ops.next; e != &be->ops; e = e->next) {
		struct op *op = list_entry(e, struct op, link);
		if (op->attempts && !op->skipped) {	/* blocked, or being retried */
			if (n < max)
				blocked_fill(be, op, &out[n]);
			n++;
		} else if (op->blocker && !op->skipped) {
			for (unsigned i = 0; i < CKPT_MIN(n, max); i++)
				if (out[i].seq == op->blocker->seq)
					out[i].behind++;
		}
	}
	pthread_mutex_unlock(&be->lock);
	return n;
}

void backend_blocked_describe(const struct backend_blocked *b, char *buf, size_t len)
{
	snprintf(buf, len, "seq %llu: %s %s: %s", (unsigned long long)b->seq,
		 op_kind_name(b->kind), b->path[0] ? b->path : "/",
		 b->err ? strerror(-b->err) : "waiting behind it");
}

void backend_retry(struct backend *be)
{
	pthread_mutex_lock(&be->lock);
	be->retry_now = true;
	publisher_kick_locked(be);
	pthread_mutex_unlock(&be->lock);
}

/*
 * Mark op skipped, and remember its seal time for the node's watermark
 * record (nodes.h N6): the op leaves be->ops, so T passes it, but it never
 * reaches the backend, and a peer's marker may name its checkpoint.
 */
static void skip_note_locked(struct backend *be, struct op *op)
{
	uint64_t at = op->sealed_wall_ns - op->sealed_ahead_ns;	/* the clock's, not the floor's (L1) */

	op->skipped = true;
	if (!be->skipped_ops++ || at < be->skipped_from_wall)
		be->skipped_from_wall = at;
	/*
	 * Its object says so from now on, not from the publisher's next pass:
	 * a waiter answered meanwhile (fsync_done) must not read it durable.
	 */
	if (op->node) {
		if ((op->kind == OP_VERSION || op->kind == OP_MKDIR || op->kind == OP_SYMLINK ||
		     op->kind == OP_MKNOD) && op->seq > atomic_load(&op->node->skipped_seq))
			atomic_store(&op->node->skipped_seq, op->seq);
		if (op->seq > atomic_load(&op->node->cancel_seq))
			atomic_store(&op->node->cancel_seq, op->seq);
		atomic_store(&op->node->sticky_err, ECANCELED);
	}
}

static bool uid_in(const uid_t *v, unsigned n, uid_t u)
{
	for (unsigned i = 0; i < n; i++)
		if (v[i] == u)
			return true;
	return false;
}

/* Attributes only: what depends on them is their object's later changes alone. */
static bool op_is_attrs(const struct op *op)
{
	return op->kind == OP_SETATTR || op->kind == OP_SETXATTR || op->kind == OP_RMXATTR;
}

long backend_skip(struct backend *be, uint64_t seq, struct strbuf *report)
{
	struct fpset gone = { 0 };
	struct op *first = NULL;
	long n = 0;

	pthread_mutex_lock(&be->lock);
	for (struct list *e = be->ops.next; e != &be->ops; e = e->next) {
		struct op *op = list_entry(e, struct op, link);
		if (op->seq == seq && !op->skipped)
			first = op;
	}
	if (!first || !first->attempts || first->in_batch) {
		pthread_mutex_unlock(&be->lock);
		return first ? -EBUSY : -ENOENT;
	}
	if (first->renamed) {	/* on the backend in part: it can only be finished */
		pthread_mutex_unlock(&be->lock);
		return -EALREADY;
	}
	/*
	 * It, and every later operation that depends on it or on one that goes;
	 * and the later markers and removals of every user who loses one (the
	 * operations of another user that go with it are in that user's
	 * checkpoint: their marker must not name it).  A removal that depends
	 * on nothing that goes is voided alone (P4): no marker of the user
	 * behind the skip reaches the backend, so the last one published still
	 * names the old checkpoint, which must stay whole.  Its dependants (a
	 * file made again at that name) are published as usual.  Attribute
	 * changes that go take nothing with them: a chmod of a directory
	 * orders the names made in it later only by caution (order.c).
	 */
	uid_t *losers = NULL;
	unsigned nlosers = 0;
	for (struct list *e = &first->link; e != &be->ops; e = e->next) {
		struct op *op = list_entry(e, struct op, link);
		struct op *unused = NULL;
		bool keep = false, loser = uid_in(losers, nlosers, op->actor);
		if (op->skipped)
			continue;
		if (op != first && !fpset_conflicts(&gone, op, &unused) &&
		    !(loser && op_is_marker(op))) {
			if (!loser || !op_is_removal(op))
				continue;
			keep = true;
		}
		struct backend_blocked b;
		char line[700];
		blocked_fill(be, op, &b);
		backend_blocked_describe(&b, line, sizeof(line));
		sb_printf(report, "%s%s\n", op == first ? "skipped " : keep ?
			  "skipped with it (kept on the backend) " : "skipped with it ", line);
		if (keep) {
			op->skipped = op->kept = true;
		} else {
			if (!op_is_attrs(op))
				fpset_add_op(&gone, op, NULL);
			skip_note_locked(be, op);
			/* (Another user's attribute change is no part of their checkpoint.) */
			if (!loser && (op == first || !op_is_attrs(op))) {
				losers = xrealloc(losers, (nlosers + 1) * sizeof(*losers));
				losers[nlosers++] = op->actor;
			}
		}
		if (op->state == OPS_QUEUED)
			list_del(&op->qlink);
		n++;
	}
	for (unsigned i = 0; i < nlosers; i++) {
		keep_set_locked(be, losers[i], true);
		sb_printf(report, "until uid %u's next checkpoint marker, its unlinks and rmdirs are "
			  "skipped too: what they remove is kept on the backend\n",
			  (unsigned)losers[i]);
	}
	publisher_kick_locked(be);
	pthread_mutex_unlock(&be->lock);
	free(losers);
	fpset_free(&gone);
	return n;
}

/* ---- the publisher ------------------------------------------------------ */

static void op_published(struct backend *be, struct op *op, struct cfd_bin *later)
{
	atomic_fetch_add(&be->st.ops_applied, 1);
	/*
	 * Nothing earlier on this node is pending (order.c), so no error
	 * stands — unless what the mount holds of it was skipped and this is
	 * not a version of it (a rename or chmod of a file whose version an
	 * administrator gave up: its contents are still not on the backend).
	 */
	if (op->node) {
		pthread_mutex_lock(&be->lock);	/* against a skip's marks (skip_note_locked) */
		if (op->kind == OP_VERSION && op->seq > atomic_load(&op->node->skipped_seq))
			atomic_store(&op->node->skipped_seq, 0);
		atomic_store(&op->node->sticky_err, atomic_load(&op->node->skipped_seq) ? ECANCELED : 0);
		pthread_mutex_unlock(&be->lock);
	}
	if (op->kind != OP_VERSION)
		return;
	atomic_fetch_add(&be->st.versions_published, 1);
	atomic_fetch_sub(&be->st.pending_versions, 1);
	atomic_fetch_add(&be->st.persisted_bytes, op->ver->bytes_cached);
	struct stat st;
	/* The file as published (renamed, relinked, its attributes set): what later versions
	 * check before they take its leaves and data ranges on trust. */
	if (op->leaves && bsys.fstatat(op->out->fd, "", &st) == 0) {
		bstamp_of(&st, &op->leaves->stamp);
		op->leaves->stamped = true;
	}
	cfile_published(op->ver, op->out, op->leaves, op->out_ino, later);
	op->leaves = NULL;
}

/* Write the intent records of versions queued since the last look (no lock held on entry). */
static void intents_write(struct backend *be)
{
	pthread_mutex_lock(&be->lock);
	while (!list_empty(&be->intents)) {
		struct op *op = list_entry(be->intents.next, struct op, ilink);
		list_del(&op->ilink);
		pthread_mutex_unlock(&be->lock);
		record_intent(be, op);	/* only the publisher frees ops: op stays valid */
		pthread_mutex_lock(&be->lock);
	}
	pthread_mutex_unlock(&be->lock);
}

/*
 * Drop what an administrator skipped, once no flusher holds it (be->lock
 * held; the records and frees happen after unlocking, into `out`).
 */
static void skipped_collect(struct backend *be, struct list *out)
{
	struct list *e = be->ops.next;

	while (e != &be->ops) {
		struct list *next = e->next;
		struct op *op = list_entry(e, struct op, link);
		if (op->skipped && op->state != OPS_FLUSHING) {
			op_unlist_locked(be, op);
			if (list_linked(&op->ilink))
				list_del(&op->ilink);
			list_add_tail(out, &op->link);
		}
		e = next;
	}
}

static void skipped_drop(struct backend *be, struct list *gone)
{
	struct bnode *mkdirs[64] = { 0 };
	unsigned nmk = 0;

	while (!list_empty(gone)) {
		struct op *op = list_entry(gone->next, struct op, link);
		list_del(&op->link);
		if (op->kept) {		/* a removal: nothing of the mount's is lost */
			log_warn("operation %llu (%s of '%s', uid %u) skipped after an "
				 "administrator's skip: what it removes is kept on the backend",
				 (unsigned long long)op->seq, op_kind_name(op->kind),
				 op->name ? op->name : "", (unsigned)op->actor);
			record_void(be, op, "skipped by the administrator: kept on the backend");
			op_free(op);
			continue;
		}
		log_warn("operation %llu (%s of '%s', uid %u) skipped by the administrator: "
			 "it will never reach the backend", (unsigned long long)op->seq,
			 op_kind_name(op->kind), op->name ? op->name : "", (unsigned)op->actor);
		/* (Its node was marked at the skip: a version published since has cleared it.) */
		record_void(be, op, "skipped by the administrator");
		if (op->kind == OP_MKDIR && op->node && nmk < CKPT_ARRAY_LEN(mkdirs))
			mkdirs[nmk++] = bnode_get(op->node);	/* its stage: once its files are closed */
		else if (op->kind == OP_MKDIR && op->node)
			stage_discard(be, op->node);
		if (op->kind == OP_VERSION)
			atomic_fetch_sub(&be->st.pending_versions, 1);
		op_free(op);
	}
	for (unsigned i = 0; i < nmk; i++) {	/* what was written ahead for them (stage.c S5) */
		stage_discard(be, mkdirs[i]);
		bnode_put(mkdirs[i]);
	}
}

/* Keep the degraded flag and the last error true; remind now and then (no lock held). */
static void blocked_log(struct backend *be)
{
	struct backend_blocked b[4];
	char line[700];
	unsigned n = backend_blocked(be, b, CKPT_ARRAY_LEN(b));
	bool was = atomic_load(&be->st.degraded);

	atomic_store(&be->st.degraded, n > 0);
	atomic_store(&be->st.last_error, n ? -b[0].err : 0);
	if (!n) {
		if (was)
			log_info("backend recovered: nothing is blocked, publishing resumed");
		return;
	}
	backend_blocked_describe(&b[0], line, sizeof(line));
	ckpt_log_limited(&err_rl, 30ull * 1000000000, LOG_WARNING, "still blocked at %s", line);
}

/* Void the records of batch[from, to): not applied in this round. */
static void void_rest(struct backend *be, struct op **batch, unsigned from, unsigned to)
{
	for (unsigned k = from; k < to; k++)
		void_attempt(be, batch[k], 0);
}

/*
 * Apply a batch so that what becomes durable is always a prefix of it
 * (P1, P3, P7), even after a power cut:
 *  1. every operation's write-ahead record is appended, then the manifest
 *     is fsync'd once: none is applied before its record is durable;
 *  2. operations are applied in order, and before one that touches a
 *     directory the operations since the last sync did not, those are synced
 *     first — a directory fsync makes all of that directory's entries
 *     durable at once, so syncing every directory at the end, in first-touch
 *     order, would let a later operation in one directory become durable
 *     before an earlier one in another;
 *  3. an operation that fails stays behind with its dependants and its
 *     actor's later operations; their records are voided.
 * Returns how many were applied (moved to the front of batch, in order; the
 * rest behind them); the caller syncs what remains touched.  A sync failing
 * in between stops the batch there; the caller retries it before anything
 * else.
 */
static unsigned batch_apply(struct backend *be, struct op **batch, unsigned n, struct touched *t,
			    struct op **failed, int *ferr, unsigned *nfailed)
{
	struct fpset bad = { 0 };
	uid_t bad_actors[PUB_BATCH];
	struct op *bad_ops[PUB_BATCH];
	unsigned applied = 0, nbad = 0, nrec = 0;
	int r = 0;

	*nfailed = 0;
	struct bplan *plan = xcalloc(2 * (size_t)n + 1, sizeof(*plan));
	unsigned nplan = 0;

	for (; nrec < n && r == 0; nrec++) {
		if ((r = record_attempt_planned(be, batch[nrec], plan, &nplan)) == RECORD_LATER) {
			r = 0;
			if (nrec)
				break;	/* recorded after what comes before it is applied */
			record_none(batch[nrec]);
		}
		if (r < 0) {
			failed[0] = batch[nrec];	/* the rest wait for the next round */
			ferr[0] = r;
			*nfailed = 1;
			break;
		}
	}
	free(plan);
	if (nrec && (r = manifest_sync(&be->man)) < 0) {
		void_rest(be, batch, 0, nrec);
		failed[0] = batch[0];
		ferr[0] = r;
		*nfailed = 1;
		return 0;
	}
	for (unsigned i = 0; i < nrec; i++) {
		struct op *op = batch[i], *unused = NULL;
		bool after_failure = fpset_conflicts(&bad, op, &unused);
		for (unsigned k = 0; k < nbad && !after_failure; k++)
			after_failure = bad_actors[k] == op->actor;
		if (!after_failure && nbad)	/* a directory moved over one that stayed behind */
			after_failure = order_moved_below(be, NULL, op, bad_ops, nbad) != NULL;
		/* (files too: a chmod's inode is synced before a later mkdir is applied) */
		if (!after_failure && (t->n || t->nfiles) && !touched_covers(t, op) &&
		    sync_touched(be, t) < 0) {
			void_rest(be, batch, i, nrec);	/* the caller retries the sync */
			break;
		}
		if (!after_failure && be->nodes && !lease_valid(be->nodes)) {
			/*
			 * N2 per operation, not per pass: a backend that stalled
			 * past the lease's ttl mid-batch may have let another
			 * daemon take the node and recover it; nothing more is
			 * applied (its hold keeps them queued).
			 */
			void_rest(be, batch, i, nrec);
			break;
		}
		int err = after_failure ? 1 : apply_op(be, op, t);
		if (err == 0) {
			/*
			 * Swapped, not overwritten: the ones not applied stay in
			 * batch too, for the caller's clearing of in_batch (else a
			 * blocked one kept it, and a skip of it was refused).
			 */
			batch[i] = batch[applied];
			batch[applied++] = op;
			continue;
		}
		if (err < 0) {
			failed[*nfailed] = op;
			ferr[(*nfailed)++] = err;
		} else {
			void_attempt(be, op, 0);	/* deferred behind a failure */
		}
		fpset_add_op(&bad, op, NULL);	/* it stays behind: so do its dependants */
		bad_ops[nbad] = op;
		bad_actors[nbad++] = op->actor;
	}
	fpset_free(&bad);
	return applied;
}

static void *publisher_main(void *arg)
{
	struct backend *be = arg;
	struct touched *t = xcalloc(1, sizeof(*t));
	struct op **batch = xcalloc(PUB_BATCH, sizeof(*batch));
	struct op **failed = xcalloc(PUB_BATCH, sizeof(*failed));
	int *ferr = xcalloc(PUB_BATCH, sizeof(*ferr));
	uint64_t backoff = 50ull * 1000000;

	for (;;) {
		struct list ready, gone;
		uint64_t blocks_before;

		list_init(&ready);
		list_init(&gone);
		intents_write(be);
		pthread_mutex_lock(&be->lock);
		if (be->aborting) {
			pthread_mutex_unlock(&be->lock);
			break;
		}
		uint64_t now = now_ns();
		/*
		 * A pass walks the whole queue: run one only when something may
		 * apply (publisher_kick_locked), at the time the last one asked
		 * for (a retry, a held marker), and at least every PASS_GAP_NS
		 * while anything is queued — a bound on any wake-up missed.
		 */
		uint64_t gap_end = be->last_pass_ns + PASS_GAP_NS;
		if (!be->pass_due && now < be->wake_ns && (list_empty(&be->ops) || now < gap_end)) {
			if (list_empty(&be->intents)) {
				uint64_t until = list_empty(&be->ops) ? be->wake_ns : CKPT_MIN(be->wake_ns, gap_end);
				if (until == UINT64_MAX)
					pthread_cond_wait(&be->pub_cond, &be->lock);
				else
					cond_wait_ns(&be->pub_cond, &be->lock, until - now);
			}
			pthread_mutex_unlock(&be->lock);
			continue;
		}
		be->pass_due = false;
		be->last_pass_ns = now;
		atomic_fetch_add(&be->st.passes, 1);
		be->wake_ns = UINT64_MAX;
		uint64_t unused = UINT64_MAX;
		skipped_collect(be, &gone);
		blocks_before = be->order->blocks;
		unsigned n = order_pass(be, batch, PUB_BATCH, now, &be->wake_ns);
		bool newly_blocked = be->order->blocks != blocks_before;
		waiters_collect(be, &ready, now, &unused);
		bool idle = list_empty(&be->ops);
		if (!n && list_empty(&gone) && list_empty(&ready)) {
			if (idle && be->stopping) {
				pthread_mutex_unlock(&be->lock);
				break;
			}
			pthread_mutex_unlock(&be->lock);
			continue;	/* waits at the top until kicked or due */
		}
		be->pass_due = true;	/* look again once these are done with */
		durable_advance_locked(be);	/* skipped ones left the queue */
		pthread_mutex_unlock(&be->lock);
		waiters_answer(&ready);
		skipped_drop(be, &gone);
		if (newly_blocked || atomic_load(&be->st.degraded))
			blocked_log(be);
		if (!n)
			continue;

		unsigned nfailed;
		unsigned applied = batch_apply(be, batch, n, t, failed, ferr, &nfailed);
		/* Applied but not durable until synced: retry the sync, never the ops. */
		int serr;
		while ((serr = sync_touched(be, t)) < 0) {
			pthread_mutex_lock(&be->lock);
			be->sync_err = serr;
			be->sync_first_seq = applied ? batch[0]->seq : 0;
			for (unsigned i = 0; i < applied; i++)
				if (batch[i]->node)
					atomic_store(&batch[i]->node->sticky_err, -serr);
			waiters_collect(be, &ready, now_ns(), &unused);
			bool abort = be->aborting;
			if (!abort)
				cond_wait_ns(&be->pub_cond, &be->lock, backoff);
			abort = be->aborting;
			pthread_mutex_unlock(&be->lock);
			waiters_answer(&ready);
			atomic_fetch_add(&be->st.errors, 1);
			atomic_fetch_add(&be->st.retries, 1);
			atomic_store(&be->st.last_error, -serr);
			atomic_store(&be->st.degraded, true);
			ckpt_log_limited(&err_rl, 10ull * 1000000000, LOG_WARNING,
					 "syncing the backend failed: %s; retrying", strerror(-serr));
			backoff = CKPT_MIN(backoff * 2, 5ull * 1000000000);
			if (abort)
				break;
		}
		if (serr < 0)
			break;	/* aborting: the rescue takes what is queued */
		backoff = 50ull * 1000000;
		/* Bookkeeping first, so whoever is told "durable" sees it all done. */
		struct cfd_bin later = { 0 };
		for (unsigned i = 0; i < applied; i++)
			op_published(be, batch[i], &later);
		if (applied) {
			char rec[128];
			int len = snprintf(rec, sizeof(rec), "{\"t\": \"durable\", \"m\": \"%s\", \"seq\": %llu}",
					   be->mount_id, (unsigned long long)batch[applied - 1]->seq);
			if (manifest_append(&be->man, rec, (size_t)len) < 0)
				log_debug("durable record not written; recovery will look for evidence");
		}
		pthread_mutex_lock(&be->lock);
		be->sync_err = 0;
		be->pass_due = true;	/* what waited behind the batch */
		for (unsigned i = 0; i < n; i++)
			batch[i]->in_batch = false;
		for (unsigned i = 0; i < applied; i++)
			op_unlist_locked(be, batch[i]);
		now = now_ns();
		for (unsigned i = 0; i < nfailed; i++)
			op_block(be, failed[i], ferr[i], now);
		durable_advance_locked(be);
		uint64_t durable = atomic_load(&be->durable_seq);
		uint64_t wall = backend_durable_wall_locked(be, NULL);
		/*
		 * Answer who waited for this before the clean-up: closing what the
		 * batch replaced (a file's last descriptor frees its blocks) and
		 * freeing the operations can take longer than the batch's syncs.
		 */
		waiters_collect(be, &ready, now, &unused);
		pthread_mutex_unlock(&be->lock);
		waiters_answer(&ready);
		for (unsigned i = 0; i < applied; i++)
			op_free(batch[i]);
		reap_give(be, &later);
		if (nfailed || atomic_load(&be->st.degraded))
			blocked_log(be);
		if (be->hooks.published)
			be->hooks.published(be->hooks.arg, durable, wall);
		/*
		 * Between groups nothing is half-recorded: the log may be rewritten
		 * to what is live (it keeps whatever is not settled by `durable`).
		 */
		if (manifest_wants_compaction(&be->man) && now_ns() >= be->compact_after_ns) {
			int c = manifest_compact(&be->man, durable);
			if (c == -EAGAIN) {
				be->compact_after_ns = now_ns() + 1000000000ull;	/* after the rewrite due */
			} else if (c < 0) {
				be->compact_after_ns = now_ns() + 60ull * 1000000000;
				log_warn("manifest compaction failed: %s; the log keeps growing; "
					 "tried again in a minute", strerror(-c));
			}
		}
	}
	touched_free(t);
	free(batch);
	free(failed);
	free(ferr);
	return NULL;
}

/* ---- start and stop --------------------------------------------------- */

/*
 * After recovery, before the node reports its window (nodes_run): what the
 * previous mount sealed past its log's last record, by its seal ledger
 * (ledger.h), counts as lost; then this mount's ledger.
 */
static void ledger_start(struct backend *be)
{
	struct recovery_report *rep = &be->recovery;
	uint64_t sealed = 0;

	if (rep->unclean) {
		int r = ledger_take(be->opt.ledger_dir, rep->prev_mount_id, be->nodes->boot_id,
				    &sealed);
		if (r == 0 && sealed > rep->prev_seq_recorded) {
			rep->unrecorded_ops = sealed - rep->prev_seq_recorded;
			log_warn("recovery: mount %s sealed %llu operation%s after the last its log "
				 "records (its seal ledger says %llu, the log %llu): closed, never "
				 "noted on the backend, lost", rep->prev_mount_id,
				 (unsigned long long)rep->unrecorded_ops,
				 rep->unrecorded_ops == 1 ? "" : "s", (unsigned long long)sealed,
				 (unsigned long long)rep->prev_seq_recorded);
		} else if (r < 0 && r != -ENOENT) {
			log_warn("recovery: the seal ledger of mount %s cannot be used (%s): what it "
				 "sealed after its log's last record is not known", rep->prev_mount_id,
				 r == -ESTALE ? "written on another boot" : strerror(-r));
		}
	} else if (rep->previous) {
		/* A clean stop whose last sync failed kept its ledger: of no use now. */
		(void)ledger_take(be->opt.ledger_dir, rep->prev_mount_id, be->nodes->boot_id, &sealed);
	}
	ledger_open(&be->ledger, be->opt.ledger_dir, be->mount_id, be->nodes->boot_id);
}

int backend_start(struct backend *be, int root_fd, struct cache *cache,
		  const struct backend_opts *opt, const struct backend_hooks *hooks)
{
	FILE *f;
	struct stat rst;
	uint64_t rnd = now_ns() ^ ((uint64_t)getpid() << 32);

	memset(be, 0, sizeof(*be));
	be->ledger.dirfd = be->ledger.parentfd = -1;
	be->root_fd = root_fd;
	int e = bsys.fstatat(root_fd, "", &rst);
	if (e < 0)
		return e;
	be->root_dev = rst.st_dev;
	be->root_ino = rst.st_ino;
	be->cache = cache;
	be->opt = *opt;
	if (hooks)
		be->hooks = *hooks;
	be->root = bnode_new(true);
	be->root->is_root = true;
	be->root->dfd = root_fd;
	atomic_store(&be->root->present, true);
	if ((f = fopen("/dev/urandom", "re"))) {
		if (fread(&rnd, sizeof(rnd), 1, f) != 1)
			rnd ^= now_ns();
		fclose(f);
	}
	snprintf(be->mount_id, sizeof(be->mount_id), "%012llx",
		 (unsigned long long)(rnd & 0xffffffffffffull));
	pthread_rwlock_init(&be->bt_lock, NULL);
	pthread_rwlock_init(&be->mv_lock, NULL);
	pthread_mutex_init(&be->dfd_lock, NULL);
	pthread_mutex_init(&be->stage_mx, NULL);
	pthread_rwlockattr_t rwa;	/* a stage emptied is not starved by flushers */
	pthread_rwlockattr_init(&rwa);
	pthread_rwlockattr_setkind_np(&rwa, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&be->stage_rw, &rwa);
	pthread_rwlockattr_destroy(&rwa);
	list_init(&be->dfd_lru);
	/*
	 * Idle directory fds: an eighth of the limit.  Temporary files: a
	 * quarter, as many again while written (the O_DIRECT descriptor).
	 */
	be->dfd_cap = fd_limit_share(8, 16, 65536);
	be->temp_cap = fd_limit_share(4, 32, UINT32_MAX);
	pthread_mutex_init(&be->lock, NULL);
	pthread_cond_init(&be->pub_cond, NULL);
	pthread_cond_init(&be->waiter_cond, NULL);
	pthread_cond_init(&be->flush_cond, NULL);
	pthread_cond_init(&be->spill_cond, NULL);
	list_init(&be->ops);
	list_init(&be->flushq);
	list_init(&be->waiters);
	list_init(&be->intents);
	be->order = order_new();
	be->started_ns = now_ns();
	/* The node is taken (lease.c) before recovery touches its directory. */
	static const struct nodes_opts no_nodes_opts = { .peer_skew = -1, .lease_ttl = 30 };
	be->nodes = xcalloc(1, sizeof(*be->nodes));
	int r = nodes_start(be->nodes, be, root_fd, be->mount_id,
			    opt->nodes ? opt->nodes : &no_nodes_opts);
	if (r == 0 && opt->no_manifest)
		manifest_disabled(&be->man);
	else if (r == 0)
		r = manifest_open(&be->man, root_fd, be->nodes->node, be->mount_id, &be->recovery);
	if (r == 0 && !opt->no_manifest)
		ledger_start(be);
	if (r == 0)
		r = nodes_run(be->nodes);
	if (r < 0) {	/* not started: leave nothing behind */
		nodes_stop(be->nodes, false);
		free(be->nodes);
		be->nodes = NULL;
		order_free(be->order);
		be->order = NULL;
		bnode_put(be->root);
		return r;
	}

	/* Probe the I/O engine once so stats can say which one runs and why. */
	const char *why;
	struct bio *probe = bio_create(opt->io, 1, &why);
	be->io_in_use = bio_kind(probe);
	be->io_fallback_reason = why;
	bio_destroy(probe);
	if (why)
		log_warn("%s; flushing with pwrite", why);

	base_copy_decide(be);
	cache->spill_wanted = backend_want_spill;
	cache->spill_arg = be;
	if (reap_start(be) < 0 || pthread_create(&be->publisher, NULL, publisher_main, be) != 0 ||
	    pthread_create(&be->waiter, NULL, waiter_main, be) != 0)
		return -EAGAIN;
	flush_threads_start(be);
	return 0;
}

#define ABORT_JOIN_NS (5ull * 1000000000)

/* pthread_join, given up at deadline_ns (monotonic; 0: none): joined? */
bool join_until(pthread_t t, uint64_t deadline_ns)
{
	if (!deadline_ns)
		return pthread_join(t, NULL) == 0;
	for (;;) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);	/* timedjoin takes the wall clock */
		uint64_t now = now_ns();
		if (now >= deadline_ns)
			return pthread_tryjoin_np(t, NULL) == 0;
		uint64_t left = CKPT_MIN(deadline_ns - now, 100ull * 1000000);
		ts.tv_nsec += (long)(left % 1000000000);
		ts.tv_sec += (time_t)(left / 1000000000) + ts.tv_nsec / 1000000000;
		ts.tv_nsec %= 1000000000;
		int r = pthread_timedjoin_np(t, NULL, &ts);
		if (r == 0)
			return true;
		if (r != ETIMEDOUT)
			return false;
	}
}

static void threads_join(struct backend *be, bool abort)
{
	pthread_mutex_lock(&be->lock);	/* these flags share words with the threads' */
	if (be->joined || be->threads_stuck) {
		pthread_mutex_unlock(&be->lock);
		return;
	}
	be->stopping = true;
	be->aborting = abort;
	be->pass_due = true;
	pthread_cond_broadcast(&be->pub_cond);
	pthread_cond_broadcast(&be->flush_cond);
	pthread_cond_broadcast(&be->spill_cond);
	pthread_mutex_unlock(&be->lock);
	/* Aborting: threads stuck in a hung backend's calls are left there. */
	uint64_t deadline = abort ? now_ns() + ABORT_JOIN_NS : 0;
	bool all = join_until(be->publisher, deadline);
	all &= flush_threads_stop(be, deadline);
	all &= reap_stop(be, deadline);	/* after its only giver, the publisher */
	if (!all) {
		pthread_mutex_lock(&be->lock);
		be->threads_stuck = true;
		pthread_mutex_unlock(&be->lock);
		log_err("backend threads still inside backend calls after %.0f s: left there; "
			"the rescue goes on without them", ABORT_JOIN_NS / 1e9);
		return;
	}
	pthread_mutex_lock(&be->lock);
	be->waiter_stop = true;
	pthread_cond_signal(&be->waiter_cond);
	pthread_mutex_unlock(&be->lock);
	pthread_join(be->waiter, NULL);
	pthread_mutex_lock(&be->lock);
	be->joined = true;
	pthread_mutex_unlock(&be->lock);
}

bool backend_threads_stuck(struct backend *be)
{
	pthread_mutex_lock(&be->lock);
	bool stuck = be->threads_stuck;
	pthread_mutex_unlock(&be->lock);
	return stuck;
}

void backend_abort(struct backend *be)
{
	threads_join(be, true);
}

void backend_stop(struct backend *be)
{
	threads_join(be, false);
	if (!be->threads_stuck)
		stage_remove_all(be);	/* stages of mkdirs that never came (stage.c S5) */
	bool clean = list_empty(&be->ops);
	ledger_close(&be->ledger, manifest_close(&be->man, atomic_load(&be->durable_seq), clean));
	if (be->nodes) {
		nodes_stop(be->nodes, clean);	/* the last watermark, then the lease */
		free(be->nodes);
		be->nodes = NULL;
	}
	while (!list_empty(&be->ops)) {
		struct op *op = list_entry(be->ops.next, struct op, link);
		op_unlist_locked(be, op);
		op_free(op);
	}
	be->cache->spill_wanted = NULL;
	order_free(be->order);
	be->order = NULL;
	free(be->keep_actors);
	be->keep_actors = NULL;
	be->nkeep = 0;
	/* dfd_lock and the stage locks stay usable: the namespace puts its nodes' bnodes, and
	 * the cache its temporary files, later. */
	bnode_dirfds_close(be);
	bnode_put(be->root);
	pthread_rwlock_destroy(&be->bt_lock);
	pthread_rwlock_destroy(&be->mv_lock);
	pthread_mutex_destroy(&be->lock);
	pthread_cond_destroy(&be->pub_cond);
	pthread_cond_destroy(&be->waiter_cond);
	pthread_cond_destroy(&be->flush_cond);
	pthread_cond_destroy(&be->spill_cond);
	pthread_mutex_destroy(&be->reap_lock);
	pthread_cond_destroy(&be->reap_cond);
}
