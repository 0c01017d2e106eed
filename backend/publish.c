/*
 * publish.c — the operation log and the single publisher that applies it to
 * the backend in sequence order (invariants P1..P6 in backend.h).
 *
 * The publisher takes the longest run of ready operations at the head of
 * be->ops (a version is ready once a flusher has written and fdatasync'd its
 * temporary file), applies them one by one, fsyncs the directories they
 * touched, and only then advances durable_seq and answers waiters: group
 * commit.  A failure stops the run at the failing operation (P4): it is
 * retried with exponential backoff, waiters at or beyond it are answered
 * with the error, and the degraded flag is raised until it succeeds.
 *
 * Threads: one publisher (this file), flushers and a spiller (flush.c).
 * Lock order: be->lock -> be->mv_lock -> be->bt_lock.  A system call that
 * moves or removes a name runs under mv_lock (for writing); the recorded
 * links are then updated under bt_lock, held only for that moment (P6).  So
 * a reader of links never waits for a slow backend; one that raced a move
 * and met ENOENT waits for it with backend_move_wait() and tries again.
 */
#include "backend/backend.h"
#include "backend/bsys.h"
#include "cache/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

void flush_threads_start(struct backend *be);
void flush_threads_stop(struct backend *be);
void flush_temp_mark_published(struct cfd *out);
const char *flush_temp_name(struct cfd *out, struct bnode **dir);

#define PUB_BATCH 512

/* Put a version back in the flush queue at its place by sequence number. */
static void flushq_insert_sorted(struct backend *be, struct op *op)
{
	struct list *pos = be->flushq.next;
	while (pos != &be->flushq && list_entry(pos, struct op, qlink)->seq < op->seq)
		pos = pos->next;
	op->qlink.next = pos;
	op->qlink.prev = pos->prev;
	pos->prev->next = &op->qlink;
	pos->prev = &op->qlink;
}
#define BACKOFF_MIN_NS (50ull * 1000000)
#define BACKOFF_MAX_NS (5ull * 1000000000)

static struct ckpt_ratelimit err_rl;

struct op *op_new(enum op_kind kind)
{
	struct op *op = xcalloc(1, sizeof(*op));
	op->kind = kind;
	list_init(&op->link);
	list_init(&op->qlink);
	return op;
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
	free(op);
}

uint64_t backend_next_seq(struct backend *be)
{
	pthread_mutex_lock(&be->lock);
	uint64_t s = ++be->last_seq;
	pthread_mutex_unlock(&be->lock);
	return s;
}

uint64_t backend_last_seq(struct backend *be)
{
	pthread_mutex_lock(&be->lock);
	uint64_t s = be->last_seq;
	pthread_mutex_unlock(&be->lock);
	return s;
}

/*
 * Note in the manifest that a version is queued, so that after a crash
 * recovery can name every closed file that never became durable.
 */
static void record_intent(struct backend *be, struct op *op)
{
	struct strbuf b = { 0 };

	sb_printf(&b, "{\"t\": \"intent\", \"m\": \"%s\", \"seq\": %llu, \"path\": ",
		  be->mount_id, (unsigned long long)op->seq);
	sb_json_str(&b, op->path_hint ? op->path_hint : op->name);
	sb_printf(&b, ", \"size\": %llu}", (unsigned long long)op->ver->size);
	(void)manifest_append(&be->man, b.s, b.len);
	sb_free(&b);
}

void backend_submit(struct backend *be, struct op *op)
{
	op->enqueued_ns = now_ns();
	if (op->kind == OP_VERSION)
		record_intent(be, op);
	pthread_mutex_lock(&be->lock);
	if (!op->seq)
		op->seq = ++be->last_seq;
	bool was_empty = list_empty(&be->ops);
	list_add_tail(&be->ops, &op->link);
	if (op->kind == OP_VERSION) {
		op->state = OPS_QUEUED;
		list_add_tail(&be->flushq, &op->qlink);
		atomic_fetch_add(&be->st.pending_versions, 1);
		pthread_cond_signal(&be->flush_cond);
	} else {
		op->state = OPS_READY;
		if (was_empty)
			pthread_cond_signal(&be->pub_cond);
	}
	pthread_mutex_unlock(&be->lock);
}

/* ---- waiters ------------------------------------------------------- */

/* Move waiters that can be answered onto `out`; be->lock held. */
static void waiters_collect(struct backend *be, struct list *out)
{
	uint64_t durable = atomic_load(&be->durable_seq);

	while (!list_empty(&be->waiters)) {
		struct pub_waiter *w = list_entry(be->waiters.next, struct pub_waiter, link);
		if (w->seq > durable && !(be->blocked_seq && w->seq >= be->blocked_seq))
			break;
		list_del(&w->link);
		list_add_tail(out, &w->link);
	}
	/* Blocked: everything at or beyond the failing op fails now (P4). */
	if (be->blocked_seq) {
		struct list *e = be->waiters.next;
		while (e != &be->waiters) {
			struct list *next = e->next;
			struct pub_waiter *w = list_entry(e, struct pub_waiter, link);
			if (w->seq >= be->blocked_seq) {
				list_del(&w->link);
				list_add_tail(out, &w->link);
			}
			e = next;
		}
	}
}

static void waiters_answer(struct backend *be, struct list *ready)
{
	uint64_t durable = atomic_load(&be->durable_seq);
	int err = -atomic_load(&be->st.last_error);

	while (!list_empty(ready)) {
		struct pub_waiter *w = list_entry(ready->next, struct pub_waiter, link);
		list_del(&w->link);
		w->done(w, w->seq <= durable ? 0 : (err ? err : -EIO));
	}
}

void backend_wait_async(struct backend *be, struct pub_waiter *w)
{
	struct list ready;

	list_init(&ready);
	pthread_mutex_lock(&be->lock);
	/* Keep the list sorted by seq: almost always an append. */
	struct list *pos = be->waiters.prev;
	while (pos != &be->waiters && list_entry(pos, struct pub_waiter, link)->seq > w->seq)
		pos = pos->prev;
	w->link.prev = pos;
	w->link.next = pos->next;
	pos->next->prev = &w->link;
	pos->next = &w->link;
	waiters_collect(be, &ready);
	pthread_mutex_unlock(&be->lock);
	waiters_answer(be, &ready);
}

int backend_wait(struct backend *be, uint64_t seq, uint64_t timeout_ns)
{
	uint64_t deadline = timeout_ns ? now_ns() + timeout_ns : 0;
	int r = 0;

	pthread_mutex_lock(&be->lock);
	while (atomic_load(&be->durable_seq) < seq) {
		if (be->blocked_seq && seq >= be->blocked_seq) {
			r = be->blocked_err ? be->blocked_err : -EIO;
			break;
		}
		if (deadline) {
			uint64_t now = now_ns();
			if (now >= deadline) {
				r = -ETIMEDOUT;
				break;
			}
			cond_wait_ns(&be->durable_cond, &be->lock,
				     CKPT_MIN(deadline - now, 200ull * 1000000));
		} else {
			pthread_cond_wait(&be->durable_cond, &be->lock);
		}
	}
	pthread_mutex_unlock(&be->lock);
	return r;
}

/* ---- applying one operation ------------------------------------------- */

static bool err_transient(int err)
{
	switch (-err) {
	case EIO: case ENOSPC: case EDQUOT: case EAGAIN: case EINTR: case ETIMEDOUT:
	case ESTALE: case ENOMEM: case EROFS: case EBUSY: case ENOLCK: case ECONNRESET:
	case ECONNREFUSED: case EHOSTDOWN: case ENETDOWN: case ENFILE: case EMFILE:
		return true;
	default:
		return false;
	}
}

static const char *op_kind_name(enum op_kind k);

struct touched {
	struct bnode *dirs[PUB_BATCH * 2];
	unsigned n;
	struct bnode *files[PUB_BATCH];	/* fsync the object itself (setattr) */
	unsigned nfiles;
};

static void touch_dir(struct touched *t, struct bnode *d)
{
	if (!d)
		return;
	for (unsigned i = 0; i < t->n; i++)
		if (t->dirs[i] == d)
			return;
	if (t->n < CKPT_ARRAY_LEN(t->dirs))
		t->dirs[t->n++] = bnode_get(d);
}

static void touch_file(struct touched *t, struct bnode *b)
{
	for (unsigned i = 0; i < t->nfiles; i++)
		if (t->files[i] == b)
			return;
	if (t->nfiles < CKPT_ARRAY_LEN(t->files))
		t->files[t->nfiles++] = bnode_get(b);
}

/* Copy every xattr of (dir, name) onto (tdir, tname); missing source is fine. */
static void xattrs_copy(int dirfd, const char *name, int tdirfd, const char *tname)
{
	char src[512], keys[4096], val[4096];
	ssize_t n;

	snprintf(src, sizeof(src), "/proc/self/fd/%d/%s", dirfd, name);
	n = llistxattr(src, keys, sizeof(keys));
	for (ssize_t off = 0; n > 0 && off < n; off += (ssize_t)strlen(keys + off) + 1) {
		ssize_t vl = lgetxattr(src, keys + off, val, sizeof(val));
		if (vl >= 0)
			bsys.setxattr(tdirfd, tname, keys + off, val, (size_t)vl, 0);
	}
}

/* Set the xattrs serialised as [u32 keylen][key\0][u32 vallen][value]... */
static void xattrs_apply_blob(const char *p, size_t len, int dfd, const char *name)
{
	while (len >= 8) {
		uint32_t kl, vl;
		memcpy(&kl, p, 4);
		if (len < 8 + (size_t)kl)
			return;
		memcpy(&vl, p + 4 + kl, 4);
		if (len < 8 + (size_t)kl + vl)
			return;
		bsys.setxattr(dfd, name, p + 4, p + 8 + kl, vl, 0);
		p += 8 + kl + vl;
		len -= 8 + (size_t)kl + vl;
	}
}

static int apply_attrs(struct backend *be, int dfd, const char *name, const struct op *op,
		       bool is_link)
{
	int r = 0;

	if ((op->valid & OPA_MODE) && !is_link)
		r = bsys.fchmodat(dfd, name, op->mode & 07777);
	if (r == 0 && (op->valid & (OPA_UID | OPA_GID)) && be->opt.chown)
		r = bsys.fchownat(dfd, name, (op->valid & OPA_UID) ? op->uid : (uid_t)-1,
				  (op->valid & OPA_GID) ? op->gid : (gid_t)-1);
	if (r == 0 && (op->valid & (OPA_ATIME | OPA_MTIME))) {
		struct timespec ts[2] = { op->atime, op->mtime };
		if (!(op->valid & OPA_ATIME))
			ts[0].tv_nsec = UTIME_OMIT;
		if (!(op->valid & OPA_MTIME))
			ts[1].tv_nsec = UTIME_OMIT;
		r = bsys.utimensat(dfd, name, ts);
	}
	return r;
}

/* Give every other hard link of b the contents now at (dir, name). */
static int relink_others(struct backend *be, struct bnode *b, int dfd, const char *name)
{
	for (uint32_t i = 1; i < b->nlinks; i++) {
		char tmp[64];
		int ld = bnode_dirfd(be, b->links[i].dir), r;
		if (ld < 0)
			return ld;
		snprintf(tmp, sizeof(tmp), CKPTFS_RESERVED_PREFIX "l.%s.%u", be->mount_id, i);
		bsys.unlinkat(ld, tmp, 0);
		if ((r = bsys.linkat(dfd, name, ld, tmp)) < 0)
			return r;
		if ((r = bsys.renameat2(ld, tmp, ld, b->links[i].name, 0)) < 0)
			return r;
	}
	return 0;
}

static int apply_version(struct backend *be, struct op *op, struct touched *t)
{
	struct bnode *tdir = NULL;
	const char *tname = flush_temp_name(op->out, &tdir);
	int dfd = bnode_dirfd(be, op->dir), tfd, r;

	if (dfd < 0)
		return dfd;
	if ((tfd = bnode_dirfd(be, tdir)) < 0)
		return tfd;
	if (op->xattr_blob)
		xattrs_apply_blob(op->value, op->value_len, tfd, tname);
	else if (op->copy_xattrs)
		xattrs_copy(dfd, op->name, tfd, tname);
	pthread_rwlock_wrlock(&be->mv_lock);
	r = bsys.renameat2(tfd, tname, dfd, op->name, 0);
	if (r == 0) {
		pthread_rwlock_wrlock(&be->bt_lock);
		flush_temp_mark_published(op->out);
		bnode_link_primary_locked(op->node, op->dir, op->name);
		op->node->digest = op->digest;
		atomic_store(&op->node->has_digest, true);
		op->node->published_seq = op->seq;
		pthread_rwlock_unlock(&be->bt_lock);
	}
	pthread_rwlock_unlock(&be->mv_lock);
	/* Only the publisher changes links, so reading them unlocked here is safe. */
	if (r == 0 && op->node->nlinks > 1)
		r = relink_others(be, op->node, dfd, op->name);
	if (r == 0) {
		touch_dir(t, op->dir);
		touch_dir(t, tdir);
	}
	return r;
}

/*
 * Append the manifest record of op, before it is applied (write-ahead): a
 * crash can leave a record whose operation did not happen, which recovery
 * detects, but never an applied operation without its record.
 */
static void record_op(struct backend *be, struct op *op)
{
	struct strbuf b = { 0 };
	char path[4096], to[4096];
	struct bnode *at = NULL;
	char name[256];

	path[0] = to[0] = '\0';
	switch (op->kind) {
	case OP_VERSION:
	case OP_MKDIR:
	case OP_RMDIR:
	case OP_UNLINK:
	case OP_SYMLINK:
	case OP_RENAME:
		if (bnode_path(be, op->dir, op->name, path, sizeof(path)) < 0)
			return;
		if (op->kind == OP_RENAME && bnode_path(be, op->dir2, op->name2, to, sizeof(to)) < 0)
			return;
		break;
	case OP_LINK:
	case OP_SETATTR:
	case OP_SETXATTR:
	case OP_RMXATTR:
		if (op->node->is_root)
			break;	/* path "" */
		if (bnode_locate(be, op->node, &at, name, sizeof(name)) < 0)
			return;	/* not on the backend: nothing happens there */
		int r = bnode_path(be, at, name, path, sizeof(path));
		bnode_put(at);
		if (r < 0 || (op->kind == OP_LINK &&
			      bnode_path(be, op->dir2, op->name2, to, sizeof(to)) < 0))
			return;
		break;
	}
	sb_printf(&b, "{\"t\": \"%s\", \"m\": \"%s\", \"seq\": %llu, \"time\": %llu, \"path\": ",
		  op->kind == OP_VERSION ? "file" : op_kind_name(op->kind), be->mount_id,
		  (unsigned long long)op->seq, (unsigned long long)wall_ns());
	sb_json_str(&b, path);
	if (to[0]) {
		sb_printf(&b, ", \"to\": ");
		sb_json_str(&b, to);
	}
	if (op->kind == OP_VERSION) {
		char hex[33];
		hash_hex(op->digest, hex);
		sb_printf(&b, ", \"size\": %llu, \"mode\": %u, \"mtime\": %lld.%09ld, \"xxh3\": \"%s\"",
			  (unsigned long long)op->ver->size, (unsigned)op->mode,
			  (long long)op->mtime.tv_sec, op->mtime.tv_nsec, hex);
	} else if (op->kind == OP_RENAME) {
		sb_printf(&b, ", \"exchange\": %s", op->flags & RENAME_EXCHANGE ? "true" : "false");
	} else if (op->kind == OP_MKDIR || op->kind == OP_SETATTR) {
		sb_printf(&b, ", \"mode\": %u", (unsigned)op->mode);
	} else if (op->kind == OP_SYMLINK) {
		sb_printf(&b, ", \"target\": ");
		sb_json_str(&b, op->target);
	} else if (op->kind == OP_SETXATTR || op->kind == OP_RMXATTR) {
		sb_printf(&b, ", \"key\": ");
		sb_json_str(&b, op->target);
	}
	sb_printf(&b, "}");
	(void)manifest_append(&be->man, b.s, b.len);
	sb_free(&b);
}

/* A new directory or symlink exists at (op->dir, op->name): owner, location. */
static void created(struct backend *be, struct op *op, int dfd, struct touched *t)
{
	if (be->opt.chown && (op->valid & (OPA_UID | OPA_GID)))
		bsys.fchownat(dfd, op->name, op->uid, op->gid);
	pthread_rwlock_wrlock(&be->bt_lock);
	bnode_link_add_locked(op->node, op->dir, op->name);
	pthread_rwlock_unlock(&be->bt_lock);
	touch_dir(t, op->dir);
}

/* The record of an operation that will never happen: readers skip it. */
static void record_void(struct backend *be, struct op *op)
{
	char rec[128];
	int n = snprintf(rec, sizeof(rec), "{\"t\": \"void\", \"m\": \"%s\", \"seq\": %llu}",
			 be->mount_id, (unsigned long long)op->seq);
	if (op->recorded)
		(void)manifest_append(&be->man, rec, (size_t)n);
}

static int apply_op(struct backend *be, struct op *op, struct touched *t)
{
	if (!op->recorded) {	/* once, however often it is retried */
		record_op(be, op);
		op->recorded = true;
	}
	int dfd = -1, r = 0;
	char name[256];
	struct bnode *at = NULL;

	if (op->kind == OP_VERSION)
		return apply_version(be, op, t);
	if (op->dir && (dfd = bnode_dirfd(be, op->dir)) < 0)
		return dfd;

	switch (op->kind) {
	case OP_MKDIR:
		r = bsys.mkdirat(dfd, op->name, op->mode & 07777);
		if (r == -EEXIST) {
			struct stat st;
			if (bsys.fstatat(dfd, op->name, &st) == 0 && S_ISDIR(st.st_mode))
				r = 0;
		}
		if (r == 0) {
			created(be, op, dfd, t);
			pthread_mutex_lock(&be->lock);		/* flushers wait for dirs */
			pthread_cond_broadcast(&be->flush_cond);
			pthread_mutex_unlock(&be->lock);
		}
		break;
	case OP_SYMLINK:
		if ((r = bsys.symlinkat(op->target, dfd, op->name)) == 0)
			created(be, op, dfd, t);
		break;
	case OP_RMDIR:
	case OP_UNLINK:
		pthread_rwlock_wrlock(&be->mv_lock);
		r = bsys.unlinkat(dfd, op->name, op->kind == OP_RMDIR ? AT_REMOVEDIR : 0);
		if (r == -ENOENT)
			r = 0;
		if (r == 0) {
			pthread_rwlock_wrlock(&be->bt_lock);
			bnode_link_del_locked(op->node, op->dir, op->name);
			pthread_rwlock_unlock(&be->bt_lock);
		}
		pthread_rwlock_unlock(&be->mv_lock);
		if (r == 0)
			touch_dir(t, op->dir);
		break;
	case OP_RENAME: {
		int d2 = bnode_dirfd(be, op->dir2);
		if (d2 < 0)
			return d2;
		pthread_rwlock_wrlock(&be->mv_lock);
		r = bsys.renameat2(dfd, op->name, d2, op->name2, op->flags);
		if (r == -ENOENT && !atomic_load(&op->node->present))
			r = 0;		/* never published: nothing to move */
		if (r == 0) {
			pthread_rwlock_wrlock(&be->bt_lock);
			if (op->victim && (op->flags & RENAME_EXCHANGE))
				bnode_link_move_locked(op->victim, op->dir2, op->name2, op->dir, op->name);
			else if (op->victim)
				bnode_link_del_locked(op->victim, op->dir2, op->name2);
			if (atomic_load(&op->node->present))
				bnode_link_move_locked(op->node, op->dir, op->name, op->dir2, op->name2);
			pthread_rwlock_unlock(&be->bt_lock);
		}
		pthread_rwlock_unlock(&be->mv_lock);
		if (r == 0) {
			touch_dir(t, op->dir);
			touch_dir(t, op->dir2);
		}
		break;
	}
	case OP_LINK: {
		int d2 = bnode_dirfd(be, op->dir2), sd;
		if (d2 < 0)
			return d2;
		if ((r = bnode_locate(be, op->node, &at, name, sizeof(name))) < 0)
			return r;
		if ((sd = bnode_dirfd(be, at)) < 0) {
			bnode_put(at);
			return sd;
		}
		r = bsys.linkat(sd, name, d2, op->name2);
		if (r == 0) {
			pthread_rwlock_wrlock(&be->bt_lock);
			bnode_link_add_locked(op->node, op->dir2, op->name2);
			pthread_rwlock_unlock(&be->bt_lock);
		}
		if (r == 0)
			touch_dir(t, op->dir2);
		bnode_put(at);
		break;
	}
	case OP_SETATTR:
	case OP_SETXATTR:
	case OP_RMXATTR: {
		int od;
		if (op->node->is_root) {	/* the root has no parent: "." in itself */
			at = bnode_get(be->root);
			snprintf(name, sizeof(name), ".");
		} else if (bnode_locate(be, op->node, &at, name, sizeof(name)) < 0) {
			return 0;	/* not on the backend yet: its first version carries it */
		}
		if ((od = bnode_dirfd(be, at)) < 0) {
			bnode_put(at);
			return od;
		}
		if (op->kind == OP_SETATTR)
			r = apply_attrs(be, od, name, op, op->node->is_link);
		else if (op->kind == OP_SETXATTR)
			r = bsys.setxattr(od, name, op->target, op->value, op->value_len, 0);
		else
			r = bsys.removexattr(od, name, op->target);
		if (r == -ENODATA)
			r = 0;
		if (r == 0) {
			if (op->node->is_dir)
				touch_dir(t, op->node);
			else if (!op->node->is_link)
				touch_file(t, op->node);
			else
				touch_dir(t, at);
		}
		bnode_put(at);
		break;
	}
	default:
		r = -EINVAL;
	}
	return r;
}

/*
 * fsync the manifest and every directory and file the batch touched (P3).
 * On failure the set is kept, to be synced again: the operations are
 * applied already and must not be applied twice.
 */
static int sync_touched(struct backend *be, struct touched *t)
{
	int err = manifest_sync(&be->man);

	for (unsigned i = 0; i < t->n; i++) {
		int fd = bnode_dirfd(be, t->dirs[i]), r = 0;
		if (fd >= 0 && atomic_load(&t->dirs[i]->present)) {
			r = bsys.fsync(fd);
			if (r == -EBADF || r == -EINVAL)	/* an O_PATH fd, or a fs without dir fsync */
				r = 0;
			atomic_fetch_add(&be->st.dir_fsyncs, 1);
		}
		if (r < 0 && !err)
			err = r;
	}
	for (unsigned i = 0; i < t->nfiles; i++) {
		struct bnode *at = NULL;
		char name[256];
		if (bnode_locate(be, t->files[i], &at, name, sizeof(name)) == 0) {
			int d = bnode_dirfd(be, at), fd = d < 0 ? d : bsys.openat(d, name, O_RDONLY | O_NOFOLLOW, 0);
			if (fd >= 0) {
				int r = bsys.fsync(fd);
				if (r < 0 && !err)
					err = r;
				bsys.close(fd);
			}
			bnode_put(at);
		}
	}
	if (err)
		return err;
	for (unsigned i = 0; i < t->n; i++)
		bnode_put(t->dirs[i]);
	for (unsigned i = 0; i < t->nfiles; i++)
		bnode_put(t->files[i]);
	t->n = t->nfiles = 0;
	return 0;
}

static const char *op_kind_name(enum op_kind k)
{
	static const char *const names[] = { "version", "mkdir", "rmdir", "unlink", "rename",
					     "symlink", "link", "setattr", "setxattr", "removexattr" };
	return k < CKPT_ARRAY_LEN(names) ? names[k] : "?";
}

static void set_blocked(struct backend *be, struct op *op, int err)
{
	struct list ready;

	list_init(&ready);
	atomic_fetch_add(&be->st.errors, 1);
	atomic_store(&be->st.last_error, -err);
	if (op->node)
		atomic_store(&op->node->sticky_err, -err);
	if (!atomic_exchange(&be->st.degraded, true))
		log_warn("backend degraded: %s of '%s' failed: %s; retrying, data stays in cache",
			 op_kind_name(op->kind), op->name ? op->name : "", strerror(-err));
	else
		ckpt_log_limited(&err_rl, 10ull * 1000000000, LOG_WARNING,
				 "still failing: %s of '%s': %s", op_kind_name(op->kind),
				 op->name ? op->name : "", strerror(-err));
	pthread_mutex_lock(&be->lock);
	be->blocked_seq = op->seq;
	be->blocked_err = err;
	waiters_collect(be, &ready);
	pthread_cond_broadcast(&be->durable_cond);
	pthread_mutex_unlock(&be->lock);
	waiters_answer(be, &ready);
}

static void clear_blocked(struct backend *be)
{
	if (atomic_exchange(&be->st.degraded, false))
		log_info("backend recovered: publishing resumed");
	atomic_store(&be->st.last_error, 0);
	pthread_mutex_lock(&be->lock);
	be->blocked_seq = 0;
	be->blocked_err = 0;
	pthread_mutex_unlock(&be->lock);
}

/* Sleep up to ns, waking early if the backend is stopping with nothing left. */
static void backoff_sleep(struct backend *be, uint64_t ns)
{
	pthread_mutex_lock(&be->lock);
	cond_wait_ns(&be->pub_cond, &be->lock, ns);
	pthread_mutex_unlock(&be->lock);
}

static void op_published(struct backend *be, struct op *op)
{
	atomic_fetch_add(&be->st.ops_applied, 1);
	if (op->kind != OP_VERSION)
		return;
	atomic_fetch_add(&be->st.versions_published, 1);
	atomic_fetch_sub(&be->st.pending_versions, 1);
	atomic_fetch_add(&be->st.persisted_bytes, op->ver->bytes_cached);
	atomic_store(&op->node->sticky_err, 0);
	cfile_published(op->ver, op->out);
}

static void *publisher_main(void *arg)
{
	struct backend *be = arg;
	struct touched *t = xcalloc(1, sizeof(*t));
	struct op *batch[PUB_BATCH];
	uint64_t backoff = BACKOFF_MIN_NS;

	pthread_mutex_lock(&be->lock);
	for (;;) {
		if (be->aborting)
			break;
		struct op *head = list_empty(&be->ops) ? NULL
				  : list_entry(be->ops.next, struct op, link);
		if (!head) {
			if (be->stopping)
				break;
			pthread_cond_wait(&be->pub_cond, &be->lock);
			continue;
		}
		if (head->state == OPS_FAILED && !err_transient(head->err)) {
			int err = head->err;
			list_del(&head->link);
			pthread_mutex_unlock(&be->lock);
			log_err("writing '%s' failed permanently: %s; version skipped",
				 head->name ? head->name : "", strerror(-err));
			record_void(be, head);
			atomic_fetch_add(&be->st.errors, 1);
			atomic_fetch_sub(&be->st.pending_versions, 1);
			atomic_store(&head->node->sticky_err, -err);
			pthread_mutex_lock(&be->lock);
			if (atomic_load(&be->durable_seq) < head->seq)
				atomic_store(&be->durable_seq, head->seq);
			op_free(head);
			continue;
		}
		if (head->state == OPS_FAILED) {
			/* The flush failed: report, back off, hand it back to the flushers. */
			int err = head->err;
			pthread_mutex_unlock(&be->lock);
			set_blocked(be, head, err);
			atomic_fetch_add(&be->st.retries, 1);
			backoff_sleep(be, backoff);
			backoff = CKPT_MIN(backoff * 2, BACKOFF_MAX_NS);
			pthread_mutex_lock(&be->lock);
			head->state = OPS_QUEUED;
			head->err = 0;
			flushq_insert_sorted(be, head);
			pthread_cond_broadcast(&be->flush_cond);
			continue;
		}
		if (head->state != OPS_READY) {
			pthread_cond_wait(&be->pub_cond, &be->lock);
			continue;
		}
		unsigned n = 0;
		for (struct list *e = be->ops.next; e != &be->ops && n < PUB_BATCH; e = e->next) {
			struct op *op = list_entry(e, struct op, link);
			if (op->state != OPS_READY)
				break;
			batch[n++] = op;
		}
		pthread_mutex_unlock(&be->lock);

		unsigned applied = 0;
		int err = 0;
		for (; applied < n; applied++) {
			err = apply_op(be, batch[applied], t);
			if (err < 0 && !err_transient(err)) {
				log_err("%s of '%s' failed permanently: %s; skipped",
					 op_kind_name(batch[applied]->kind),
					 batch[applied]->name ? batch[applied]->name : "", strerror(-err));
				record_void(be, batch[applied]);
				atomic_fetch_add(&be->st.errors, 1);
				if (batch[applied]->node)
					atomic_store(&batch[applied]->node->sticky_err, -err);
				err = 0;
			}
			if (err < 0)
				break;
		}
		/* Applied but not durable until synced: retry the sync, never the run. */
		int serr;
		while ((serr = sync_touched(be, t)) < 0 && !be->aborting) {
			set_blocked(be, applied ? batch[0] : batch[applied], serr);
			atomic_fetch_add(&be->st.retries, 1);
			backoff_sleep(be, backoff);
			backoff = CKPT_MIN(backoff * 2, BACKOFF_MAX_NS);
		}
		if (serr < 0) {		/* aborting: the rescue takes what is queued */
			pthread_mutex_lock(&be->lock);
			continue;
		}
		struct list ready;
		list_init(&ready);
		/* Bookkeeping first, so whoever is told "durable" sees it all done. */
		for (unsigned i = 0; i < applied; i++)
			op_published(be, batch[i]);
		pthread_mutex_lock(&be->lock);
		for (unsigned i = 0; i < applied; i++)
			list_del(&batch[i]->link);
		if (applied) {
			char rec[128];
			int len = snprintf(rec, sizeof(rec), "{\"t\": \"durable\", \"m\": \"%s\", \"seq\": %llu}",
					   be->mount_id, (unsigned long long)batch[applied - 1]->seq);
			(void)manifest_append(&be->man, rec, (size_t)len);
			atomic_store(&be->durable_seq, batch[applied - 1]->seq);
		}
		if (!err && be->blocked_seq) {
			pthread_mutex_unlock(&be->lock);
			clear_blocked(be);
			pthread_mutex_lock(&be->lock);
		}
		waiters_collect(be, &ready);
		pthread_cond_broadcast(&be->durable_cond);
		pthread_mutex_unlock(&be->lock);
		waiters_answer(be, &ready);
		for (unsigned i = 0; i < applied; i++)
			op_free(batch[i]);
		if (err < 0) {
			set_blocked(be, batch[applied], err);
			atomic_fetch_add(&be->st.retries, 1);
			backoff_sleep(be, backoff);
			backoff = CKPT_MIN(backoff * 2, BACKOFF_MAX_NS);
		} else {
			backoff = BACKOFF_MIN_NS;
		}
		pthread_mutex_lock(&be->lock);
	}
	pthread_mutex_unlock(&be->lock);
	free(t);
	return NULL;
}

/* ---- start and stop --------------------------------------------------- */

int backend_start(struct backend *be, int root_fd, struct cache *cache,
		  const struct backend_opts *opt, const struct backend_hooks *hooks)
{
	FILE *f;
	uint64_t rnd = now_ns() ^ ((uint64_t)getpid() << 32);

	memset(be, 0, sizeof(*be));
	be->root_fd = root_fd;
	be->cache = cache;
	be->opt = *opt;
	if (hooks)
		be->hooks = *hooks;
	be->root = bnode_new(true);
	be->root->is_root = true;
	atomic_store(&be->root->dfd, root_fd);
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
	pthread_mutex_init(&be->lock, NULL);
	pthread_cond_init(&be->pub_cond, NULL);
	pthread_cond_init(&be->flush_cond, NULL);
	pthread_cond_init(&be->durable_cond, NULL);
	pthread_cond_init(&be->spill_cond, NULL);
	list_init(&be->ops);
	list_init(&be->flushq);
	list_init(&be->waiters);
	be->started_ns = now_ns();
	if (opt->no_manifest) {
		manifest_disabled(&be->man);
	} else {
		char node[256];
		manifest_node_default(node, sizeof(node));
		int r = manifest_open(&be->man, root_fd, node, be->mount_id, &be->recovery);
		if (r < 0)
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

	cache->spill_wanted = backend_want_spill;
	cache->spill_arg = be;
	if (pthread_create(&be->publisher, NULL, publisher_main, be) != 0)
		return -EAGAIN;
	flush_threads_start(be);
	return 0;
}

static void threads_join(struct backend *be, bool abort)
{
	if (be->joined)
		return;
	pthread_mutex_lock(&be->lock);
	be->stopping = true;
	be->aborting = abort;
	pthread_cond_broadcast(&be->pub_cond);
	pthread_cond_broadcast(&be->flush_cond);
	pthread_cond_broadcast(&be->spill_cond);
	pthread_cond_broadcast(&be->durable_cond);
	pthread_mutex_unlock(&be->lock);
	pthread_join(be->publisher, NULL);
	flush_threads_stop(be);
	be->joined = true;
}

void backend_abort(struct backend *be)
{
	threads_join(be, true);
}

void backend_stop(struct backend *be)
{
	threads_join(be, false);
	bool clean = list_empty(&be->ops);
	manifest_close(&be->man, atomic_load(&be->durable_seq), clean);
	while (!list_empty(&be->ops)) {
		struct op *op = list_entry(be->ops.next, struct op, link);
		list_del(&op->link);
		op_free(op);
	}
	be->cache->spill_wanted = NULL;
	bnode_put(be->root);
	pthread_rwlock_destroy(&be->bt_lock);
	pthread_rwlock_destroy(&be->mv_lock);
	pthread_mutex_destroy(&be->lock);
	pthread_cond_destroy(&be->pub_cond);
	pthread_cond_destroy(&be->flush_cond);
	pthread_cond_destroy(&be->durable_cond);
	pthread_cond_destroy(&be->spill_cond);
}
