/*
 * apply.c — applying one operation to the backend, and the manifest
 * records that go with it.
 *
 * The publisher (publish.c) calls apply_op() for each operation of a batch
 * in order, then sync_touched() once for the batch (group commit, P3).
 * apply_op() appends the operation's manifest record first (write-ahead,
 * P7): a crash can leave a record whose operation did not happen, which
 * recovery detects, but never an applied operation without its record; if
 * the record cannot be appended the operation is not applied.  A retried
 * operation is recorded once.  Every system call goes through bsys, relative
 * to directory fds of the backend tree (btree.c), so nothing leaves it.
 *
 * Runs in the publisher thread only, with no lock held except the moments
 * under mv_lock/bt_lock that P6 needs.
 */
#include "backend/pub.h"
#include "backend/bsys.h"
#include "cache/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

void flush_temp_mark_published(struct cfd *out);
const char *flush_temp_name(struct cfd *out, struct bnode **dir);

const char *op_record_type(enum op_kind k)
{
	return k == OP_VERSION ? "file" : op_kind_name(k);
}

void sb_json_paths(struct strbuf *b, const char *path, const char *to)
{
	sb_printf(b, "\"path\": ");
	sb_json_str(b, path);
	if (to && to[0]) {
		sb_printf(b, ", \"to\": ");
		sb_json_str(b, to);
	}
}

const char *op_kind_name(enum op_kind k)
{
	static const char *const names[] = { "version", "mkdir", "rmdir", "unlink", "rename",
					     "symlink", "link", "setattr", "setxattr", "removexattr",
					     "mknod" };
	return k < CKPT_ARRAY_LEN(names) ? names[k] : "?";
}

/*
 * Note in the manifest that a version is queued, so that after a crash
 * recovery can name every closed file that never became durable.
 */
void record_intent(struct backend *be, const struct op *op)
{
	struct strbuf b = { 0 };

	sb_printf(&b, "{\"t\": \"intent\", \"m\": \"%s\", \"seq\": %llu, \"path\": ",
		  be->mount_id, (unsigned long long)op->seq);
	sb_json_str(&b, op->path_hint ? op->path_hint : op->name);
	sb_printf(&b, ", \"size\": %llu}", (unsigned long long)op->ver->size);
	if (manifest_append(&be->man, b.s, b.len) < 0)
		log_debug("the intent record of operation %llu could not be written",
			  (unsigned long long)op->seq);
	sb_free(&b);
}

static void touch_add(struct bnode ***v, unsigned *n, unsigned *cap, struct bnode *b)
{
	for (unsigned i = 0; i < *n; i++)
		if ((*v)[i] == b)
			return;
	if (*n == *cap) {
		*cap = *cap ? *cap * 2 : 64;
		*v = xrealloc(*v, *cap * sizeof(**v));
	}
	(*v)[(*n)++] = bnode_get(b);
}

/*
 * d is to be synced with the batch.  ordered: an operation's effect is in
 * it; else only a temporary file written there left it for another
 * directory (apply_version), which orders nothing: later operations in d
 * must still wait for the sync of the directory that file went to.
 */
static void touch_dir_as(struct touched *t, struct bnode *d, bool ordered)
{
	if (!d)
		return;
	for (unsigned i = 0; i < t->n; i++)
		if (t->dirs[i] == d) {
			t->ordered[i] |= ordered;
			return;
		}
	if (t->n == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 64;
		t->dirs = xrealloc(t->dirs, t->cap * sizeof(*t->dirs));
		t->ordered = xrealloc(t->ordered, t->cap * sizeof(*t->ordered));
	}
	t->ordered[t->n] = ordered;
	t->dirs[t->n++] = bnode_get(d);
}

static void touch_dir(struct touched *t, struct bnode *d)
{
	touch_dir_as(t, d, true);
}

static void touch_file(struct touched *t, struct bnode *b)
{
	touch_add(&t->files, &t->nfiles, &t->capfiles, b);
}

void touched_free(struct touched *t)
{
	for (unsigned i = 0; i < t->n; i++)
		bnode_put(t->dirs[i]);
	free(t->ordered);
	for (unsigned i = 0; i < t->nfiles; i++)
		bnode_put(t->files[i]);
	free(t->dirs);
	free(t->files);
	free(t);
}

/*
 * An xattr the backend would not take: a namespace its file system does not
 * support (ENOTSUP) — or, set by root on the daemon's own new file (own),
 * one even root may not set there (EPERM, EACCES: security.* on NFS) — is
 * left out, counted in stats (xattrs_dropped) and logged with its key, in
 * a version as in a change on its own: blocking the user's every later
 * checkpoint for it could never end.  Anything else (EIO, ENOSPC,
 * EDQUOT...) fails the operation, which is retried: nothing is reported
 * durable without the xattrs it should carry.  (On a change of an existing
 * object EPERM stands: it may be the owner check's refusal, bsys C5.)
 * r: the call's result.  Returns 0 (set), 1 (left out) or -errno.
 */
static int xattr_err(struct backend *be, const char *key, int r, bool own)
{
	static struct ckpt_ratelimit rl;

	if (r >= 0 || (r != -ENOTSUP && r != -EOPNOTSUPP && !(own && (r == -EPERM || r == -EACCES))))
		return r;
	atomic_fetch_add(&be->st.xattrs_dropped, 1);
	ckpt_log_limited(&rl, 10ull * 1000000000, LOG_WARNING,
			 "backend: extended attribute '%s' left out: the backend refuses it (%s)",
			 key, strerror(-r));
	return 1;	/* left out: not set */
}

struct xattr_to {
	struct backend *be;
	int fd;
};

static int xattr_copy_one(void *arg, const char *key, const void *val, size_t len)
{
	const struct xattr_to *to = arg;

	return xattr_err(to->be, key, bsys.fsetxattr(to->fd, key, val, len, 0), true);
}

/*
 * Copy every xattr of (dir, name) onto the file open as fd: how many were
 * set, or -errno.  A missing source is fine (nothing to copy), and so is one that
 * is no longer a file (a symlink planted there is refused by bsys, -ELOOP,
 * logged, and its target never read); any other failure to read them fails
 * the publication, which is retried: the new version never silently loses
 * the xattrs its file had.
 */
static int xattrs_copy(struct backend *be, int dirfd, const char *name, int fd)
{
	struct xattr_to to = { be, fd };
	int r = bsys_xattrs_each(dirfd, name, 0, xattr_copy_one, &to);

	return r == -ENOENT || r == -ENOTSUP || r == -EOPNOTSUPP || r == -ELOOP ? 0 : r;
}

/*
 * Set the xattrs serialised as [u32 keylen][key\0][u32 vallen][value]... on
 * the file open as fd: how many were set, or -errno.
 */
static int xattrs_apply_blob(struct backend *be, const char *p, size_t len, int fd)
{
	int r = 0, set = 0;

	while (r == 0 && len >= 8) {
		uint32_t kl, vl;
		memcpy(&kl, p, 4);
		if (len < 8 + (size_t)kl)
			break;
		memcpy(&vl, p + 4 + kl, 4);
		if (len < 8 + (size_t)kl + vl)
			break;
		r = xattr_err(be, p + 4, bsys.fsetxattr(fd, p + 4, p + 8 + kl, vl, 0), true);
		set += r == 0;	/* (1: left out) */
		r = r < 0 ? r : 0;
		p += 8 + kl + vl;
		len -= 8 + (size_t)kl + vl;
	}
	return r < 0 ? r : set;
}

static int apply_attrs(struct backend *be, int dfd, const char *name, const struct op *op,
		       bool is_link)
{
	int r = 0;

	if ((op->valid & OPA_MODE) && !is_link)
		r = bsys.fchmodat(dfd, name, op->mode & 07777);
	if (r == 0 && (op->valid & (OPA_UID | OPA_GID)) && be->opt.chown)
		r = bsys.fchownat(dfd, name, (op->valid & OPA_UID) ? op->uid : (uid_t)-1,
				  (op->valid & OPA_GID) ? op->gid : (gid_t)-1, is_link ? BSYS_LINK : 0);
	if (r == 0 && (op->valid & (OPA_ATIME | OPA_MTIME))) {
		struct timespec ts[2] = { op->atime, op->mtime };
		if (!(op->valid & OPA_ATIME))
			ts[0].tv_nsec = UTIME_OMIT;
		if (!(op->valid & OPA_MTIME))
			ts[1].tv_nsec = UTIME_OMIT;
		r = bsys.utimensat(dfd, name, ts, is_link ? BSYS_LINK : 0);
	}
	return r;
}

/*
 * Is the temporary file at (tfd, tname) still the one written through
 * out?  The directory is a user's, who may have renamed it away and put
 * their own file there: that one is never published in its place.
 */
static int temp_is_ours(int tfd, const char *tname, struct cfd *out)
{
	int r = bsys_name_is(tfd, tname, out->fd);

	if (r == 0)
		return 0;
	if (r == -ENOENT || r == -ESTALE)
		log_warn("backend: temporary file '%s' was replaced or removed by someone "
			 "else; not publishing what is there", tname);
	return r == -ESTALE ? -EPERM : r;
}

/* Give every other hard link of b the contents now at (dir, name). */
static int relink_others(struct backend *be, struct bnode *b, int dfd, const char *name,
			 struct touched *t)
{
	for (uint32_t i = 1; i < b->nlinks; i++) {
		char tmp[64];
		struct bnode *ldir = b->links[i].dir;
		int ld = bnode_dirfd(be, ldir), r;
		if (ld < 0)
			return ld;
		snprintf(tmp, sizeof(tmp), CKPTFS_RESERVED_PREFIX "l.%s.%u", be->mount_id, i);
		bsys.unlinkat(ld, tmp, 0);
		r = bsys.linkat(dfd, name, ld, tmp);
		if (r == 0)
			r = bsys.renameat2(ld, tmp, ld, b->links[i].name, 0);
		if (r == 0) {
			touch_dir(t, ldir);	/* its entry changed: synced before "durable" */
			t->closed = true;	/* nothing joins a two-directory change */
		}
		bnode_dirfd_put(be, ldir);
		if (r < 0)
			return r;
	}
	return 0;
}

/*
 * A backend whose rename takes no flags (NFS, Lustre, CephFS, a FUSE file
 * system without RENAME2: EINVAL): the name is looked at, then the rename
 * made without the flag.  A name another node makes between the two is
 * replaced, as every rename did before the flag was passed on.
 */
static int rename_noreplace_by_look(int dfd, const char *name, int d2, const char *name2)
{
	struct stat st;
	int r = bsys.fstatat(d2, name2, &st);

	if (r == 0)
		return -EEXIST;
	if (r != -ENOENT)
		return r;
	return bsys.renameat2(dfd, name, d2, name2, 0);
}

static int apply_version(struct backend *be, struct op *op, struct touched *t)
{
	struct bnode *tdir = NULL;
	const char *tname = flush_temp_name(op->out, &tdir);
	int dfd = bnode_dirfd(be, op->dir), tfd, r = 0;

	if (dfd < 0)
		return dfd;
	if ((tfd = bnode_dirfd(be, tdir)) < 0) {
		bnode_dirfd_put(be, op->dir);
		return tfd;
	}
	if (op->renamed)	/* a retry after the hard links failed */
		goto relink;
	if ((r = temp_is_ours(tfd, tname, op->out)) < 0)
		goto relink;	/* skipped there: r < 0 */
	/*
	 * By descriptor: the file checked just now as ours (temp_is_ours) is
	 * the one that gets them, whatever the directory's owner puts at its
	 * name meanwhile (security.capability on their program, say).
	 */
	if (op->xattr_blob)
		r = xattrs_apply_blob(be, op->value, op->value_len, op->out->fd);
	else if (op->copy_xattrs)
		r = xattrs_copy(be, dfd, op->name, op->out->fd);
	/*
	 * The data was fdatasynced by its flusher; xattrs set since are
	 * metadata that only fsync covers.  ext4 and XFS would commit them
	 * with the rename's journal entry, but btrfs logs a renamed file's
	 * xattrs only when the file itself is synced: without this a crash
	 * there could keep the new version and lose its xattrs.
	 */
	if (r > 0 && (r = bsys.fsync(op->out->fd)) == 0)
		atomic_fetch_add(&be->st.xattr_fsyncs, 1);
	if (r < 0)
		goto relink;
	pthread_rwlock_wrlock(&be->mv_lock);
	/* Before the rename: an open that finds this inode at the name takes it. */
	uint64_t was_ino = atomic_exchange(&op->node->published_ino, op->out_ino);
	r = bsys.renameat2(tfd, tname, dfd, op->name, 0);
	if (r == 0 && bsys_name_is(dfd, op->name, op->out->fd) == -ESTALE) {
		/*
		 * Swapped between the check and the rename: what went there is
		 * not ours.  (Any other answer — it could not be looked at —
		 * leaves the rename of the file just checked as done.)
		 */
		log_warn("backend: temporary file '%s' was replaced by someone else before its "
			 "rename; '%s' does not hold what this mount wrote: not published", tname,
			 op->name);
		r = -EPERM;
	} else if (r == 0) {
		op->renamed = true;
		pthread_rwlock_wrlock(&be->bt_lock);
		flush_temp_mark_published(op->out);
		bnode_link_primary_locked(op->node, op->dir, op->name);
		op->node->digest = op->digest;
		atomic_store(&op->node->has_digest, true);
		op->node->published_seq = op->seq;
		pthread_rwlock_unlock(&be->bt_lock);
	}
	if (r != 0)
		atomic_store(&op->node->published_ino, was_ino);
	pthread_rwlock_unlock(&be->mv_lock);
relink:
	/* Only the publisher changes links, so reading them unlocked here is safe. */
	if (r == 0 && op->node->nlinks > 1)
		r = relink_others(be, op->node, dfd, op->name, t);
	if (r == 0) {
		touch_dir(t, op->dir);
		touch_dir_as(t, tdir, false);	/* only its temporary name left it */
	}
	bnode_dirfd_put(be, tdir);
	bnode_dirfd_put(be, op->dir);
	return r;
}

/*
 * Append the manifest record of op, before it is applied (write-ahead, P7):
 * 0, or -errno if it could not be written (the operation must wait).  An
 * operation whose subject is not on the backend leaves no record.  The
 * batch's records are written before any of it is applied, so paths go
 * through `plan`: where earlier operations of the batch make or move
 * things (a directory made, a file published, a directory renamed); an
 * operation whose path nothing explains yet gets RECORD_LATER (pub.h).
 * Without this, `mkdir -p a/b/c` in one batch recorded no mkdir of a/b/c,
 * and a file linked or renamed into a new directory no link or rename:
 * verify then reported the file missing at its old name.
 */
static int record_op(struct backend *be, struct op *op, const struct bplan *plan, unsigned nplan)
{
	struct strbuf b = { 0 };
	char path[4096], to[4096];
	struct bnode *at = NULL;
	char name[256];
	int r = 0;

	path[0] = to[0] = '\0';
	switch (op->kind) {
	case OP_VERSION:
	case OP_MKDIR:
	case OP_RMDIR:
	case OP_UNLINK:
	case OP_SYMLINK:
	case OP_RENAME:
	case OP_MKNOD:
		r = bnode_path_planned(be, op->dir, op->name, path, sizeof(path), plan, nplan);
		break;
	case OP_LINK:
	case OP_SETATTR:
	case OP_SETXATTR:
	case OP_RMXATTR: {
		if (op->node->is_root)
			break;	/* path "" */
		const struct bplan *p = bplan_find(plan, nplan, op->node);
		if (p) {	/* published or moved earlier in this batch */
			r = bnode_path_planned(be, p->dir, p->name, path, sizeof(path), plan, nplan);
		} else if (bnode_locate(be, op->node, &at, name, sizeof(name)) < 0) {
			return RECORD_LATER;	/* not on the backend (yet) */
		} else {
			r = bnode_path_planned(be, at, name, path, sizeof(path), plan, nplan);
			bnode_put(at);
		}
		break;
	}
	}
	if (r == 0 && (op->kind == OP_RENAME || op->kind == OP_LINK))
		r = bnode_path_planned(be, op->dir2, op->name2, to, sizeof(to), plan, nplan);
	/*
	 * ENOENT: a directory on the way that nothing in this batch makes: wait.
	 * Else (a path longer than a record holds): never applied unrecorded
	 * (P7); the operation fails, and is blocked, saying why.
	 */
	if (r < 0)
		return r == -ENOENT ? RECORD_LATER : r;
	sb_printf(&b, "{\"t\": \"%s\", \"m\": \"%s\", \"seq\": %llu, \"try\": %u, \"time\": %llu, ",
		  op_record_type(op->kind), be->mount_id, (unsigned long long)op->seq, op->records,
		  (unsigned long long)wall_ns());
	sb_json_paths(&b, path, to);
	if (op->kind == OP_VERSION) {
		char hex[33];
		hash_hex(op->digest, hex);
		sb_printf(&b, ", \"size\": %llu, \"mode\": %u, \"mtime\": %lld.%09ld, \"xxh3\": \"%s\"",
			  (unsigned long long)op->ver->size, (unsigned)op->mode,
			  (long long)op->mtime.tv_sec, op->mtime.tv_nsec, hex);
	} else if (op->kind == OP_RENAME) {
		sb_printf(&b, ", \"exchange\": %s", op->flags & RENAME_EXCHANGE ? "true" : "false");
	} else if (op->kind == OP_MKDIR || op->kind == OP_SETATTR || op->kind == OP_MKNOD) {
		sb_printf(&b, ", \"mode\": %u", (unsigned)op->mode);
		if (op->rdev)
			sb_printf(&b, ", \"rdev\": %llu", (unsigned long long)op->rdev);
	} else if (op->kind == OP_SYMLINK) {
		sb_printf(&b, ", \"target\": ");
		sb_json_str(&b, op->target);
	} else if (op->kind == OP_SETXATTR || op->kind == OP_RMXATTR) {
		sb_printf(&b, ", \"key\": ");
		sb_json_str(&b, op->target);
	}
	if ((op->kind == OP_MKDIR || op->kind == OP_SYMLINK || op->kind == OP_MKNOD) &&
	    be->opt.chown && (op->valid & OPA_UID) && (op->valid & OPA_GID))
		/* Whose it is to be: recovery finishes a creation cut before its chown. */
		sb_printf(&b, ", \"owner\": %u, \"group\": %u", (unsigned)op->uid, (unsigned)op->gid);
	sb_printf(&b, ", \"uid\": %u}", (unsigned)op->actor);
	r = manifest_append(&be->man, b.s, b.len);
	sb_free(&b);
	return r;
}

/* A new directory, symlink or node exists at (op->dir, op->name): owner, location. */
/*
 * What op made at (dfd, op->name) gets its owner — only if what is there
 * is still owned by `found` (the daemon, for what it just made): the parent
 * may be a user's, who could swap another object in (bsys C5).
 */
static int created_as(struct backend *be, struct op *op, int dfd, struct touched *t, uid_t found)
{
	if (be->opt.chown && (op->valid & (OPA_UID | OPA_GID))) {
		bsys_owner_guard(found);
		int r = bsys.fchownat(dfd, op->name, op->uid, op->gid,
				      op->kind == OP_SYMLINK ? BSYS_LINK : 0);
		bsys_owner_guard_off();
		if (r < 0) {
			/*
			 * Not done: never the daemon's object where the user made
			 * theirs.  A retry makes it again (a directory it made is
			 * taken back, mkdir_found; anything else is removed first).
			 */
			if (op->kind != OP_MKDIR)
				bsys.unlinkat(dfd, op->name, 0);
			return r;
		}
	}
	bnode_set_loaded(be, op->node, op->dir, op->name);	/* once: a mkdir is retried after it */
	touch_dir(t, op->dir);
	return 0;
}

/*
 * The record of an operation that will never happen (an administrator
 * skipped it): readers skip its write-ahead record, if one was written.
 */
void record_void(struct backend *be, const struct op *op, const char *why)
{
	struct strbuf b = { 0 };

	sb_printf(&b, "{\"t\": \"void\", \"m\": \"%s\", \"seq\": %llu, \"try\": %u, \"time\": %llu, "
		  "\"why\": ", be->mount_id, (unsigned long long)op->seq, op->records - 1,
		  (unsigned long long)wall_ns());
	sb_json_str(&b, why);
	sb_printf(&b, ", \"op\": \"%s\", \"uid\": %u}", op_kind_name(op->kind), (unsigned)op->actor);
	if (manifest_append(&be->man, b.s, b.len) < 0)
		log_err("could not record in the manifest that operation %llu was skipped",
			(unsigned long long)op->seq);
	sb_free(&b);
}

/*
 * A mkdir found a directory at its name (a replay after a crash, or a
 * user's doing: the parent may be theirs).  Taken as this mkdir's only if
 * it already has the owner it is to get, or is an empty one of the
 * daemon's (a crash between the mkdir and its chown); anyone else's — say
 * root's, renamed there by the parent's owner — is never given away.
 * 0 (*found: its owner) or -EEXIST.
 */
static int mkdir_found(struct backend *be, struct op *op, int dfd, uid_t *found)
{
	struct stat st;
	int fd;

	if (bsys.fstatat(dfd, op->name, &st) < 0 || !S_ISDIR(st.st_mode))
		return -EEXIST;
	*found = st.st_uid;
	if (!be->opt.chown || !(op->valid & OPA_UID) || st.st_uid == op->uid)
		return 0;
	if (st.st_uid == geteuid() &&
	    (fd = bsys.openat(dfd, op->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0)) >= 0) {
		bool empty = bsys_dir_empty(fd);
		bsys.close(fd);
		if (empty)
			return 0;
	}
	log_warn("backend: mkdir '%s' found a directory of uid %u there, not %u's: "
		 "not taken", op->name, (unsigned)st.st_uid, (unsigned)op->uid);
	return -EEXIST;
}

/* Apply a namespace or attribute change, op->dir's fd held (dfd, or -1): 0 or -errno. */
static int apply_change_at(struct backend *be, struct op *op, struct touched *t, int dfd)
{
	int r = 0;
	char name[256];
	struct bnode *at = NULL;

	switch (op->kind) {
	case OP_MKDIR:
		stage_close(be, op->node);	/* no stage is begun for it from now on */
		r = bsys.mkdirat(dfd, op->name, op->mode & 07777);
		uid_t found = geteuid();	/* who owns what is there now */
		if (r == -EEXIST)
			r = mkdir_found(be, op, dfd, &found);
		if (r == 0 && (r = created_as(be, op, dfd, t, found)) == 0 &&
		    (r = stage_merge(be, op)) == 0) {	/* what was written ahead moves in */
			pthread_mutex_lock(&be->lock);		/* flushers wait for dirs */
			pthread_cond_broadcast(&be->flush_cond);
			pthread_mutex_unlock(&be->lock);
		}
		break;
	case OP_SYMLINK:
		if ((r = bsys.symlinkat(op->target, dfd, op->name)) == 0)
			r = created_as(be, op, dfd, t, geteuid());
		break;
	case OP_MKNOD:
		if ((r = bsys.mknodat(dfd, op->name, op->mode & (S_IFMT | 07777), op->rdev)) == 0)
			r = created_as(be, op, dfd, t, geteuid());
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
		/* The object there must still be the one the user renamed (bsys C5). */
		if (be->opt.chown && op->owner_known)
			bsys_owner_guard(op->owner);
		r = bsys.renameat2(dfd, op->name, d2, op->name2, op->flags);
		if (r == -EINVAL && (op->flags & RENAME_NOREPLACE))
			r = rename_noreplace_by_look(dfd, op->name, d2, op->name2);
		bsys_owner_guard_off();
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
		bnode_dirfd_put(be, op->dir2);
		if (r == 0 && op->dir2 != op->dir) {
			/*
			 * Where it went first, then where it left (a cut between
			 * finds it in both, never in neither); touched_covers()
			 * made this the set's first change, and nothing else joins
			 * it before both are synced.
			 */
			touch_dir(t, op->dir2);
			touch_dir(t, op->dir);
			t->closed = true;
		} else if (r == 0) {
			touch_dir(t, op->dir);
		}
		break;
	}
	case OP_LINK: {
		int d2 = bnode_dirfd(be, op->dir2), sd;
		if (d2 < 0)
			return d2;
		if ((r = bnode_locate(be, op->node, &at, name, sizeof(name))) < 0) {
			bnode_dirfd_put(be, op->dir2);
			return r;
		}
		if ((sd = bnode_dirfd(be, at)) < 0) {
			bnode_dirfd_put(be, op->dir2);
			bnode_put(at);
			return sd;
		}
		r = bsys.linkat(sd, name, d2, op->name2);
		bnode_dirfd_put(be, at);
		bnode_dirfd_put(be, op->dir2);
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
		/* The object there must still be the one the user may change (bsys C5). */
		if (be->opt.chown && op->owner_known)
			bsys_owner_guard(op->owner);
		if (op->kind == OP_SETATTR)
			r = apply_attrs(be, od, name, op, op->node->is_link);
		else if (op->kind == OP_SETXATTR)
			r = CKPT_MIN(0, xattr_err(be, op->target,
						  bsys.setxattr(od, name, op->target, op->value,
								op->value_len, 0,
								op->node->is_link ? BSYS_LINK : 0),
						  false));
		else	/* (one never set there, the backend refusing it: nothing to remove) */
			r = CKPT_MIN(0, xattr_err(be, op->target,
						  bsys.removexattr(od, name, op->target,
								   op->node->is_link ? BSYS_LINK : 0),
						  false));
		bsys_owner_guard_off();
		bnode_dirfd_put(be, at);
		if (r == -ENODATA)
			r = 0;
		if (r == 0) {
			if (op->node->is_dir)
				touch_dir(t, op->node);
			else if (!op->node->is_link && !op->node->is_special)
				touch_file(t, op->node);	/* no FIFO or device is ever opened */
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

/* Apply a namespace or attribute change: 0 or -errno. */
static int apply_change(struct backend *be, struct op *op, struct touched *t)
{
	int dfd = -1, r;

	if (op->dir && (dfd = bnode_dirfd(be, op->dir)) < 0)
		return dfd;
	r = apply_change_at(be, op, t, dfd);
	if (op->dir)
		bnode_dirfd_put(be, op->dir);
	return r;
}

/* Where op leaves what it makes or moves, for the records after it in its batch. */
static void plan_add(const struct op *op, struct bplan *plan, unsigned *nplan)
{
	const struct bnode *node = op->node, *dir = op->dir;
	const char *name = op->name;

	if (!plan || !node)
		return;
	if (op->kind == OP_RENAME) {
		dir = op->dir2;
		name = op->name2;
		if (op->victim && (op->flags & RENAME_EXCHANGE))
			plan[(*nplan)++] = (struct bplan){ op->victim, op->dir, op->name };
	} else if (op->kind != OP_MKDIR && op->kind != OP_VERSION && op->kind != OP_SYMLINK &&
		   op->kind != OP_MKNOD) {
		return;
	}
	plan[(*nplan)++] = (struct bplan){ node, dir, name };
}

int record_attempt_planned(struct backend *be, struct op *op, struct bplan *plan, unsigned *nplan)
{
	int r;

	if (op->recorded)
		return 0;
	if ((r = record_op(be, op, plan, plan ? *nplan : 0)) < 0)
		return r;
	if (r == RECORD_LATER)
		return r;	/* op->recorded stays false */
	op->recorded = true;
	op->records++;
	plan_add(op, plan, nplan);
	return 0;
}

int record_attempt(struct backend *be, struct op *op)
{
	return record_attempt_planned(be, op, NULL, NULL);
}

void record_none(struct op *op)
{
	op->recorded = true;	/* nothing of it on the backend: no record, as for any such op */
	op->records++;
}

void void_attempt(struct backend *be, struct op *op, int err)
{
	char why[128];

	if (!op->recorded || op->renamed)	/* renamed: it did happen, in part */
		return;
	snprintf(why, sizeof(why), err ? "attempt failed: %s" : "attempt deferred%s",
		 err ? strerror(-err) : "");
	record_void(be, op, why);
	op->recorded = false;
}

int apply_op(struct backend *be, struct op *op, struct touched *t)
{
	int r = record_attempt(be, op);

	if (r == 0)
		r = op->kind == OP_VERSION ? apply_version(be, op, t) : apply_change(be, op, t);
	if (r < 0)
		void_attempt(be, op, r);	/* the next attempt is recorded anew */
	return r;
}

bool touched_covers(const struct touched *t, const struct op *op)
{
	const struct bnode *dirs[2] = { op->dir, op->kind == OP_RENAME || op->kind == OP_LINK ?
					op->dir2 : NULL };

	if (t->closed)
		return false;
	if (op->kind == OP_RENAME && op->dir2 != op->dir)
		return false;	/* its two directories' sync order is its own */

	/*
	 * Attributes: the object itself is synced.  (A link has no op->dir
	 * either, but its change is a name in dir2: a file synced for an
	 * earlier chmod does not cover it, and the chmod must be synced
	 * before the new name, since sync_touched syncs directories first.)
	 */
	if ((op->kind == OP_SETATTR || op->kind == OP_SETXATTR || op->kind == OP_RMXATTR) &&
	    !op->dir && op->node) {
		for (unsigned i = 0; i < t->nfiles; i++)
			if (t->files[i] == op->node)
				return true;
		dirs[0] = op->node;	/* a directory's own attributes: its fsync */
	}
	for (unsigned k = 0; k < 2; k++) {
		bool found = !dirs[k];
		for (unsigned i = 0; i < t->n && !found; i++)
			found = t->dirs[i] == dirs[k] && t->ordered[i];
		if (!found)
			return false;
	}
	return true;
}

/* Sync the backend's whole file system, once per group: it covers them all. */
static int root_syncfs(struct backend *be, bool *root_synced)
{
	if (*root_synced)
		return 0;
	if (syncfs(be->root_fd) < 0)
		return -errno;
	*root_synced = true;
	return 0;
}

/*
 * A directory fsync the file system refused with r: EINVAL (no directory
 * fsync: its whole file system is synced instead), EBADF (an O_PATH
 * descriptor — the daemon may not read the directory, as on NFS with
 * root_squash: the whole file system, through the backend's root, when
 * the directory is on that file system).  Otherwise it cannot be synced,
 * and is not durable: the error stands.
 */
static int dir_sync_refused(struct backend *be, int fd, int r, bool *root_synced)
{
	struct stat st;

	if (r == -EINVAL)
		return syncfs(fd) == 0 ? 0 : -errno;	/* as bsys_fsync_dir, its fsync made already */
	if (r != -EBADF)
		return r;
	if (bsys.fstatat(fd, "", &st) < 0 || st.st_dev != be->root_dev)
		return -EACCES;		/* it could not be opened to be synced */
	return root_syncfs(be, root_synced);
}

/*
 * A changed file the daemon may not open to sync it (a daemon not run by
 * root, and a mode without read permission, as `chmod a-r` leaves): the
 * whole backend file system is synced instead, once per group, if it is a
 * file there.  Retrying the open would stall every user's publication for
 * good over one file's mode.
 */
static int file_sync_refused(struct backend *be, int dfd, const char *name, bool *root_synced)
{
	struct stat st;
	int r = bsys.fstatat(dfd, name, &st);

	if (r < 0)
		return r;
	if (!S_ISREG(st.st_mode) || st.st_dev != be->root_dev)
		return -EACCES;
	return root_syncfs(be, root_synced);
}

/*
 * A name the batch changed no longer holds a file or directory this mount
 * could sync: removed, or replaced by its directory's owner with something
 * bsys refuses to open there (a symlink, a FIFO, a directory for a file),
 * or moved out of the backend (bsys logs each refusal, rate-limited).
 * The object that was changed is not at the name any more, so there is
 * nothing of it to sync there; retrying would stall every user's
 * publication for good over what one user did to their own directory.
 */
static bool left_its_name(int r)
{
	return r == -ENOENT || r == -ELOOP || r == -ENXIO || r == -EISDIR || r == -ENOTDIR ||
	       r == -EXDEV;	/* (not ESTALE: an NFS handle gone stale may still name it) */
}

/*
 * fsync the manifest and every directory and file the batch touched (P3),
 * directories in the order they were touched, stopping at the first that
 * fails (a rename's source is not synced while its destination is not).
 * On failure the set is kept, to be synced again: the operations are
 * applied already and must not be applied twice.
 */
int sync_touched(struct backend *be, struct touched *t)
{
	int err = manifest_sync(&be->man);
	bool root_synced = false;

	for (unsigned i = 0; i < t->n; i++) {
		int fd = bnode_dirfd(be, t->dirs[i]), r = 0;
		if (fd < 0 && !left_its_name(fd) && atomic_load(&t->dirs[i]->present))
			r = fd;	/* not synced: not durable */
		if (fd >= 0 && atomic_load(&t->dirs[i]->present)) {
			r = bsys.fsync(fd);
			if (r == -EBADF || r == -EINVAL)	/* an O_PATH fd, or a fs without dir fsync */
				r = dir_sync_refused(be, fd, r, &root_synced);
			atomic_fetch_add(&be->st.dir_fsyncs, 1);
		}
		if (fd >= 0)
			bnode_dirfd_put(be, t->dirs[i]);
		if (r < 0) {
			err = err ? err : r;
			break;
		}
	}
	for (unsigned i = 0; i < t->nfiles; i++) {
		struct bnode *at = NULL;
		char name[256];
		if (bnode_locate(be, t->files[i], &at, name, sizeof(name)) == 0) {
			int d = bnode_dirfd(be, at), fd = d < 0 ? d : bsys.openat(d, name, O_RDONLY | O_NOFOLLOW, 0);
			int r = fd;	/* gone since (a later unlink): nothing to sync */
			if (d >= 0 && (fd == -EACCES || fd == -EPERM))
				r = file_sync_refused(be, d, name, &root_synced);
			if (d >= 0)
				bnode_dirfd_put(be, at);
			if (fd >= 0) {
				r = bsys.fsync(fd);
				bsys.close(fd);
			}
			if (r < 0 && !left_its_name(r) && !err)
				err = r;	/* could not be opened is not synced */
			else if (r < 0 && r != -ENOENT)
				log_debug("%s: no longer a file the daemon may open (%s): its change "
					  "is not synced there", name, strerror(-r));
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
	t->closed = false;
	return 0;
}

