/*
 * order.c — which pending operations the publisher may apply now (P1, P4).
 *
 * Every operation has an actor: the uid that made the change.  One actor's
 * operations are applied in sequence order, so a trainer's shards always
 * reach the backend before its `latest`.  Operations of different actors
 * are independent unless they touch the same thing, so one user's blocked
 * operation (a permission error, a quota) does not hold back another
 * user's checkpoints on a shared node.  What an operation touches, by role:
 *
 *   object  the node it creates, changes, moves or removes (and a rename's
 *           victim);
 *   parent  a directory it adds a name to or removes one from;
 *   name    a (directory, name) pair it creates, replaces or removes.
 *
 * Two operations conflict when they share an object, when one's object is
 * the other's parent (a mkdir and the files made in that directory; an
 * rmdir and the unlinks that emptied it; a chmod of a directory and what is
 * created in it), or when they share a name; and a rename of a directory
 * waits for every earlier operation inside that directory at any depth,
 * through any name of a hard-linked file and through directories the
 * same pass's batch makes or moves there (order_moved_below: another
 * user's shard two levels down must reach the backend before the
 * directory's publishing rename).  Two operations that
 * only add names to the same directory commute.  An operation may be applied when
 * every earlier operation of its actor has been, and every earlier
 * operation it conflicts with has been, whoever made it: the set applied is
 * then closed under these dependencies, and the backend equals the mount's
 * state after exactly that set (P1).
 *
 * A pass walks the queue in sequence order with a set of fingerprints of
 * everything touched by operations not applied yet (false positives only
 * delay an operation, never reorder one).  Each operation left behind
 * remembers the BLOCKED operation that holds it back, if any, so waiters
 * and FLUSH can report that operation's error.
 *
 * Called with be->lock held; nothing here makes a system call.
 */
#include "backend/pub.h"
#include "cache/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define BACKOFF_MIN_NS (50ull * 1000000)		/* transient errors */
#define BACKOFF_MAX_NS (5ull * 1000000000)
#define SLOW_MIN_NS (2ull * 1000000000)		/* permanent: an admin must act */
#define SLOW_MAX_NS (60ull * 1000000000)

/* ---- fingerprints ----------------------------------------------------- */

enum fp_role { FP_OBJ = 1, FP_PARENT = 2, FP_NAME = 3 };

static uint64_t fp_of(enum fp_role role, const struct bnode *b, const char *name)
{
	uint64_t h = (uint64_t)(uintptr_t)b * 0x9E3779B97F4A7C15ull ^ (uint64_t)role << 56;

	if (name)
		h ^= XXH3_64bits(name, strlen(name));
	h ^= h >> 31;
	h *= 0xBF58476D1CE4E5B9ull;
	h ^= h >> 29;
	return h ? h : 1;
}

/* What op touches, by role (at most 2 of each). */
struct touch {
	const struct bnode *obj[2], *parent[2];
	struct { const struct bnode *dir; const char *name; } name[2];
	unsigned nobj, nparent, nname;
};

static void touch_of(const struct op *op, struct touch *t)
{
	memset(t, 0, sizeof(*t));
	if (op->node)
		t->obj[t->nobj++] = op->node;
	switch (op->kind) {
	case OP_SETATTR:
	case OP_SETXATTR:
	case OP_RMXATTR:
		return;
	case OP_LINK:
		t->parent[t->nparent++] = op->dir2;
		t->name[t->nname].dir = op->dir2;
		t->name[t->nname++].name = op->name2;
		return;
	case OP_RENAME:
		if (op->victim)
			t->obj[t->nobj++] = op->victim;
		t->parent[t->nparent++] = op->dir2;
		t->name[t->nname].dir = op->dir2;
		t->name[t->nname++].name = op->name2;
		break;
	default:
		break;
	}
	if (op->dir) {
		t->parent[t->nparent++] = op->dir;
		t->name[t->nname].dir = op->dir;
		t->name[t->nname++].name = op->name;
	}
}

/* ---- the fingerprint set ------------------------------------------------ */

static struct fpslot *fpset_find(const struct fpset *s, uint64_t fp)
{
	if (!s->cap)
		return NULL;
	for (size_t i = fp & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
		if (s->v[i].fp == fp)
			return &s->v[i];
		if (!s->v[i].fp)
			return NULL;
	}
}

static void fpset_put(struct fpset *s, uint64_t fp, struct op *blocker)
{
	if ((s->n + 1) * 2 > s->cap) {
		struct fpset g = { .cap = s->cap ? s->cap * 2 : 256 };
		g.v = xcalloc(g.cap, sizeof(*g.v));
		for (size_t i = 0; i < s->cap; i++)
			if (s->v[i].fp)
				fpset_put(&g, s->v[i].fp, s->v[i].blocker);
		free(s->v);
		*s = g;
	}
	size_t i = fp & (s->cap - 1);
	while (s->v[i].fp && s->v[i].fp != fp)
		i = (i + 1) & (s->cap - 1);
	if (!s->v[i].fp) {
		s->v[i].fp = fp;
		s->v[i].blocker = blocker;
		s->n++;
	} else if (!s->v[i].blocker) {
		s->v[i].blocker = blocker;
	}
}

void fpset_clear(struct fpset *s)
{
	if (s->n)
		memset(s->v, 0, s->cap * sizeof(*s->v));
	s->n = 0;
}

void fpset_free(struct fpset *s)
{
	free(s->v);
	memset(s, 0, sizeof(*s));
}

/* Is fp in s?  Keeps the first blocker met in *blocker. */
static bool fp_hit(const struct fpset *s, uint64_t fp, struct op **blocker)
{
	const struct fpslot *e = fpset_find(s, fp);

	if (!e)
		return false;
	if (e->blocker && !*blocker)
		*blocker = e->blocker;
	return true;
}

bool fpset_conflicts(const struct fpset *s, const struct op *op, struct op **blocker)
{
	struct touch t;
	bool hit = false;

	touch_of(op, &t);
	for (unsigned i = 0; i < t.nobj; i++) {
		hit |= fp_hit(s, fp_of(FP_OBJ, t.obj[i], NULL), blocker);
		hit |= fp_hit(s, fp_of(FP_PARENT, t.obj[i], NULL), blocker);
	}
	for (unsigned i = 0; i < t.nparent; i++)
		hit |= fp_hit(s, fp_of(FP_OBJ, t.parent[i], NULL), blocker);
	for (unsigned i = 0; i < t.nname; i++)
		hit |= fp_hit(s, fp_of(FP_NAME, t.name[i].dir, t.name[i].name), blocker);
	return hit;
}

void fpset_add_op(struct fpset *s, const struct op *op, struct op *blocker)
{
	struct touch t;

	touch_of(op, &t);
	for (unsigned i = 0; i < t.nobj; i++)
		fpset_put(s, fp_of(FP_OBJ, t.obj[i], NULL), blocker);
	for (unsigned i = 0; i < t.nparent; i++)
		fpset_put(s, fp_of(FP_PARENT, t.parent[i], NULL), blocker);
	for (unsigned i = 0; i < t.nname; i++)
		fpset_put(s, fp_of(FP_NAME, t.name[i].dir, t.name[i].name), blocker);
}

/* ---- actors ------------------------------------------------------------- */

struct order_state *order_new(void)
{
	struct order_state *st = xcalloc(1, sizeof(*st));
	st->all.min_unapplied = st->all.min_undurable = st->all.first_blocked = UINT64_MAX;
	return st;
}

void order_free(struct order_state *st)
{
	if (!st)
		return;
	fpset_free(&st->keys);
	fpset_free(&st->batch);
	free(st->actors);
	free(st->pend);
	free(st->placed);
	free(st);
}

struct actor_state *order_actor(struct order_state *st, uid_t uid, bool create)
{
	for (unsigned i = 0; i < st->nactors; i++)
		if (st->actors[i].uid == uid)
			return &st->actors[i];
	if (!create)
		return NULL;
	if (st->nactors == st->cap) {
		st->cap = st->cap ? st->cap * 2 : 8;
		st->actors = xrealloc(st->actors, st->cap * sizeof(*st->actors));
	}
	struct actor_state *a = &st->actors[st->nactors++];
	a->uid = uid;
	a->min_unapplied = a->min_undurable = a->first_blocked = a->first_failing = UINT64_MAX;
	a->blocker = a->failing = NULL;
	return a;
}

/* Drop every slot's reference to blocker (the slots stay: not done yet). */
static void fpset_forget(struct fpset *s, const struct op *blocker)
{
	for (size_t i = 0; i < s->cap && s->n; i++)
		if (s->v[i].blocker == blocker)
			s->v[i].blocker = NULL;
}

void order_forget(struct backend *be, const struct op *op)
{
	struct order_state *st = be->order;

	/*
	 * Only an operation that failed was ever a blocker (op_block counts
	 * its attempt); the picture of the last pass, and the operations it
	 * held, may still point at it until the next pass: not after it is
	 * freed.  Rare (once per blocked operation), so a sweep is fine.
	 */
	if (op->attempts) {
		fpset_forget(&st->keys, op);
		fpset_forget(&st->batch, op);
		for (struct list *e = be->ops.next; e != &be->ops; e = e->next) {
			struct op *o = list_entry(e, struct op, link);
			if (o->blocker == op)
				o->blocker = NULL;
		}
	}
	for (unsigned i = 0; i < st->nactors; i++) {
		struct actor_state *a = &st->actors[i];
		if (a->blocker == op) {
			a->blocker = NULL;
			a->first_blocked = UINT64_MAX;
		}
		if (a->failing == op) {
			a->failing = NULL;
			a->first_failing = UINT64_MAX;
		}
	}
	if (st->all.blocker == op) {
		st->all.blocker = NULL;
		st->all.first_blocked = UINT64_MAX;
	}
	if (st->first_blocked_op == op)
		st->first_blocked_op = NULL;
}

static void order_reset(struct order_state *st)
{
	fpset_clear(&st->keys);
	fpset_clear(&st->batch);
	st->nactors = 0;
	st->all.min_unapplied = st->all.min_undurable = st->all.first_blocked = UINT64_MAX;
	st->all.blocker = NULL;
	st->nblocked = 0;
	st->first_blocked_op = NULL;
	st->npend = 0;
	st->nplaced = 0;
}

/* op stays behind (blocker: what holds it, or NULL): record it in the picture. */
/* The first operation of a's (and of everyone's) held back by blocker. */
static void note_blocker(struct order_state *st, struct actor_state *a, const struct op *op,
			 struct op *blocker)
{
	struct actor_state *both[2] = { a, &st->all };
	for (unsigned i = 0; i < 2 && blocker; i++)
		if (!both[i]->blocker) {
			both[i]->blocker = blocker;
			both[i]->first_blocked = op->seq;
		}
}

/*
 * op failed before and has not gone through yet — it may be being retried
 * right now: close() of a's later files still reports its error (waiters,
 * which can wait for the retry's outcome, use only blockers).
 */
static void note_failing(struct actor_state *a, struct op *op)
{
	if (op->attempts && !a->failing) {
		a->failing = op;
		a->first_failing = op->seq;
	}
}

static void note_unapplied(struct order_state *st, struct actor_state *a, struct op *op,
			   struct op *blocker)
{
	op->blocker = blocker;
	fpset_add_op(&st->keys, op, blocker);
	if (st->npend == st->pcap) {
		st->pcap = st->pcap ? 2 * st->pcap : 64;
		st->pend = xrealloc(st->pend, st->pcap * sizeof(*st->pend));
	}
	st->pend[st->npend++] = op;
	struct actor_state *both[2] = { a, &st->all };
	for (unsigned i = 0; i < 2; i++) {
		if (both[i]->min_unapplied == UINT64_MAX)
			both[i]->min_unapplied = op->seq;
		if (both[i]->min_undurable == UINT64_MAX)
			both[i]->min_undurable = op->seq;
	}
	note_blocker(st, a, op, blocker);
}

/* ---- directories moved over pending work ---------------------------------- */

/* The first of the batch's placements of b (st->placed is sorted by node), or NULL. */
static const struct oplace *placed_first(const struct order_state *st, const struct bnode *b)
{
	unsigned lo = 0, hi = st ? st->nplaced : 0;

	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;
		if ((uintptr_t)st->placed[mid].node < (uintptr_t)b)
			lo = mid + 1;
		else
			hi = mid;
	}
	return st && lo < st->nplaced && st->placed[lo].node == b ? &st->placed[lo] : NULL;
}

static void place(struct order_state *st, const struct bnode *node, const struct bnode *dir)
{
	if (!node || !dir)
		return;
	if (st->nplaced == st->plcap) {
		st->plcap = st->plcap ? 2 * st->plcap : 16;
		st->placed = xrealloc(st->placed, st->plcap * sizeof(*st->placed));
	}
	unsigned i = st->nplaced++;
	for (; i && (uintptr_t)st->placed[i - 1].node > (uintptr_t)node; i--)
		st->placed[i] = st->placed[i - 1];
	st->placed[i] = (struct oplace){ node, dir };
}

/* The names op, chosen for the batch, gives nodes (an exchange: both). */
static void place_op(struct order_state *st, const struct op *op)
{
	switch (op->kind) {
	case OP_RENAME:
		place(st, op->node, op->dir2);
		place(st, op->victim, op->dir);
		break;
	case OP_LINK:
		place(st, op->node, op->dir2);
		break;
	case OP_VERSION: case OP_MKDIR: case OP_SYMLINK: case OP_MKNOD:
		place(st, op->node, op->dir);
		break;
	default:
		break;
	}
}

/*
 * Is b d or inside it: through any of b's names where the backend has them
 * now, or where the batch (plan) will put b or a directory above it?  At
 * most *budget steps in all (bt_lock held); once they are spent, the
 * answer is yes: the cautious one (the rename waits a pass).
 */
static bool node_within(const struct order_state *plan, const struct bnode *b,
			const struct bnode *d, unsigned *budget)
{
	while (b) {
		if (!*budget)
			return true;
		--*budget;
		if (b == d)
			return true;
		for (uint32_t i = 1; i < b->nlinks; i++)	/* a file's other names */
			if (node_within(plan, b->links[i].dir, d, budget))
				return true;
		const struct oplace *p = placed_first(plan, b);
		for (; p && p < plan->placed + plan->nplaced && p->node == b; p++)
			if (node_within(plan, p->dir, d, budget))
				return true;
		b = bnode_up_locked(b);
	}
	return false;
}

struct op *order_moved_below(struct backend *be, const struct order_state *plan,
			     const struct op *op, struct op *const *ops, unsigned n)
{
	const struct bnode *moved[2];
	unsigned nm = 0;
	struct op *hit = NULL;

	if (op->kind != OP_RENAME)
		return NULL;
	if (op->node && op->node->is_dir)
		moved[nm++] = op->node;
	if (op->victim && op->victim->is_dir)
		moved[nm++] = op->victim;	/* exchanged (an empty one replaced: nothing inside) */
	if (!nm || !n)
		return NULL;
	pthread_rwlock_rdlock(&be->bt_lock);
	for (unsigned i = 0; i < n && !hit; i++) {
		const struct op *p = ops[i];
		const struct bnode *where[4] = { p->dir, p->dir2, p->node, p->victim };
		for (unsigned k = 0; k < 4 && !hit; k++)
			for (unsigned d = 0; d < nm && !hit; d++) {
				unsigned budget = BNODE_DEPTH_MAX;
				if (where[k] && node_within(plan, where[k], moved[d], &budget))
					hit = ops[i];
			}
	}
	pthread_rwlock_unlock(&be->bt_lock);
	return hit;
}

/* ---- blocking and retrying ------------------------------------------------ */

bool err_transient(int err)
{
	switch (-err) {
	case EIO: case ENOSPC: case EDQUOT: case EAGAIN: case EINTR: case ETIMEDOUT:
	case ESTALE: case ENOMEM: case EBUSY: case ENOLCK: case ECONNRESET:
	case ECONNREFUSED: case EHOSTDOWN: case ENETDOWN: case ENFILE: case EMFILE:
		return true;
	default:
		return false;
	}
}

void op_block(struct backend *be, struct op *op, int err, uint64_t now)
{
	uint64_t lo = err_transient(err) ? BACKOFF_MIN_NS : SLOW_MIN_NS;
	uint64_t hi = err_transient(err) ? BACKOFF_MAX_NS : SLOW_MAX_NS;
	uint64_t wait = lo;

	for (unsigned i = 0; i < op->attempts && wait < hi; i++)
		wait *= 2;
	if (op->state != OPS_BLOCKED)
		op->blocked_ns = now;
	op->state = OPS_BLOCKED;
	op->err = op->last_err = err;
	op->attempts++;
	op->retry_ns = now + CKPT_MIN(wait, hi);
	be->order->blocks++;
	atomic_fetch_add(&be->st.errors, 1);
	atomic_store(&be->st.last_error, -err);
	atomic_store(&be->st.degraded, true);
	if (op->attempts == 1) {
		struct backend_blocked b;
		char line[700];
		blocked_fill(be, op, &b);
		backend_blocked_describe(&b, line, sizeof(line));
		log_warn("backend refused an operation: blocked at %s (uid %u); its later "
			 "operations and those that depend on it wait; retrying%s", line,
			 (unsigned)op->actor, err_transient(err) ? "" : " slowly: fix the cause, "
			 "then `ckptfs-ctl retry`, or `ckptfs-ctl skip SEQ`");
	}
	if (op->node)
		atomic_store(&op->node->sticky_err, -err);
}

void flushq_insert_sorted(struct backend *be, struct op *op)
{
	struct list *pos = be->flushq.next;
	while (pos != &be->flushq && list_entry(pos, struct op, qlink)->seq < op->seq)
		pos = pos->next;
	op->qlink.next = pos;
	op->qlink.prev = pos->prev;
	pos->prev->next = &op->qlink;
	pos->prev = &op->qlink;
}

/* A BLOCKED op's time has come: back to the flushers, or ready to apply again. */
static void op_retry(struct backend *be, struct op *op)
{
	atomic_fetch_add(&be->st.retries, 1);
	if (op->reflush) {
		op->reflush = false;
		op->state = OPS_QUEUED;
		op->err = 0;
		flushq_insert_sorted(be, op);
		pthread_cond_broadcast(&be->flush_cond);
	} else {
		op->state = OPS_READY;
	}
}

/* ---- the pass --------------------------------------------------------------- */

unsigned order_pass(struct backend *be, struct op **batch, unsigned max, uint64_t now,
		    uint64_t *wake_ns)
{
	struct order_state *st = be->order;
	bool retry_all = be->retry_now, newly_first = false;
	unsigned n = 0;

	be->retry_now = false;
	order_reset(st);
	for (struct list *e = be->ops.next; e != &be->ops; e = e->next) {
		struct op *op = list_entry(e, struct op, link);

		if (op->skipped)
			continue;	/* the publisher drops it */
		struct actor_state *a = order_actor(st, op->actor, true);
		struct op *blocker = a->blocker;
		if (op->state == OPS_FAILED) {		/* its flush failed */
			op->reflush = true;
			op_block(be, op, op->err ? op->err : -EIO, now);
		}
		if (op->state == OPS_BLOCKED && (retry_all || op->retry_ns <= now))
			op_retry(be, op);
		bool behind = a->min_unapplied != UINT64_MAX;
		behind |= fpset_conflicts(&st->keys, op, &blocker);
		if (!behind && op->kind == OP_RENAME) {
			struct op *below = order_moved_below(be, st, op, st->pend, st->npend);
			if (below) {
				behind = true;
				if (!blocker)
					blocker = below->state == OPS_BLOCKED ? below : below->blocker;
			}
		}
		newly_first |= !behind && !op->flush_first && op->state == OPS_QUEUED;
		op->flush_first = !behind;

		if (!behind && op->state == OPS_QUEUED && !op->ver->out &&
		    !atomic_load(&op->dir->present) && !fpset_conflicts(&st->batch, op, &blocker)) {
			/* Nothing before it will create its directory: it cannot be written. */
			list_del(&op->qlink);
			op->reflush = true;
			op_block(be, op, -ENOENT, now);
		}
		if (op->state == OPS_BLOCKED) {
			blocker = op;
			st->nblocked++;
			if (!st->first_blocked_op)
				st->first_blocked_op = op;
			*wake_ns = CKPT_MIN(*wake_ns, op->retry_ns);
		}
		if (!behind && op->state == OPS_READY && n < max) {
			uint64_t hold = be->hooks.hold ? be->hooks.hold(be->hooks.arg, op) : 0;
			if (!hold) {
				op->blocker = NULL;
				op->in_batch = true;
				batch[n++] = op;	/* assumed applied for the rest of the pass */
				fpset_add_op(&st->batch, op, NULL);
				place_op(st, op);
				if (a->min_undurable == UINT64_MAX)
					a->min_undurable = op->seq;
				if (st->all.min_undurable == UINT64_MAX)
					st->all.min_undurable = op->seq;
				note_failing(a, op);
				continue;
			}
			*wake_ns = CKPT_MIN(*wake_ns, now + hold);
		}
		note_failing(a, op);
		note_unapplied(st, a, op, op->state == OPS_BLOCKED ? op : blocker);
	}
	if (newly_first && atomic_load(&be->temp_open) >= be->temp_cap)
		pthread_cond_broadcast(&be->flush_cond);	/* one may be taken now */
	return n;
}

struct op *order_note_submit(struct backend *be, struct op *op)
{
	struct order_state *st = be->order;
	struct actor_state *a = order_actor(st, op->actor, true);
	struct op *blocker = a->blocker;
	bool behind = a->min_unapplied != UINT64_MAX;

	behind |= fpset_conflicts(&st->keys, op, &blocker);
	op->flush_first = !behind;
	note_unapplied(st, a, op, blocker);
	return blocker;
}
