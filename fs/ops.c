/*
 * ops.c — the FUSE low-level handlers.  Each handler is small, takes the
 * namespace lock for as short a time as it can, drops every lock, and then
 * replies exactly once.  The ops table is at the bottom.
 *
 * Where sequence numbers come from (DESIGN "Order"): namespace changes take
 * theirs under fs->ns before the reply, as changes of the requesting uid;
 * a file's contents are sealed as a version when seal.c says so (close,
 * fsync, truncate(2) of a file nobody writes, rename or link of a file never
 * sealed).
 */
#include "fs/bcall.h"
#include "fs/bread.h"
#include "fs/fs.h"
#include "fs/session.h"
#include "cache/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

static struct ckptfs *FS(fuse_req_t req) { return fuse_req_userdata(req); }

/* The uid a request acts for: its operations' order domain (backend.h P1). */
static uid_t actor_of(fuse_req_t req) { return fuse_req_ctx(req)->uid; }

static void now_ts(struct timespec *ts) { clock_gettime(CLOCK_REALTIME, ts); }

/*
 * Fill an entry reply naming kernel inode gen of n, and count the kernel's
 * new reference (ns held).
 */
static void fill_entry_gen(struct ckptfs *fs, struct fsnode *n, unsigned gen,
			   struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = node_ino(fs, n, gen);
	e->generation = 1;
	e->attr_timeout = fs->opt.attr_timeout;
	e->entry_timeout = fs->opt.attr_timeout;
	node_fill_stat(fs, n, &e->attr);
	e->attr.st_ino = e->ino;
	node_lookup(n, gen);
}

/* ... naming the kernel inode new lookups get. */
static void fill_entry(struct ckptfs *fs, struct fsnode *n, struct fuse_entry_param *e)
{
	fill_entry_gen(fs, n, n->gen, e);
}

static void touch_mtime(struct fsnode *n)
{
	pthread_mutex_lock(&n->alock);
	now_ts(&n->mtime);
	n->ctime = n->mtime;
	pthread_mutex_unlock(&n->alock);
}

/*
 * A write or truncate by anyone but root clears set-user-ID, and
 * set-group-ID where group-execute is set, as a local file system does (the
 * kernel leaves this to a FUSE file system).  The bits go with the next
 * version, which carries the mode.  Cheap when there is nothing to do: one
 * test of the mode.  alock held; true if the mode changed.
 */
static bool setid_kill_locked(struct fsnode *n, uid_t caller)
{
	mode_t m = n->mode;

	if (!(m & (S_ISUID | S_ISGID)) || caller == 0)
		return false;
	m &= ~(mode_t)S_ISUID;
	if ((m & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP))
		m &= ~(mode_t)S_ISGID;
	if (m == n->mode)
		return false;
	n->mode = m;
	now_ts(&n->ctime);
	return true;
}

static bool setid_kill(struct fsnode *n, uid_t caller)
{
	pthread_mutex_lock(&n->alock);
	bool k = setid_kill_locked(n, caller);
	pthread_mutex_unlock(&n->alock);
	return k;
}

/*
 * Would a file of this size be one the backend cannot hold?  Then the
 * write or truncate fails now, with EFBIG, as it would there — not its
 * publication later, which would hold up every later operation of its user.
 */
static bool too_big(const struct ckptfs *fs, uint64_t size)
{
	return fs->max_file_size && size > fs->max_file_size;
}

/* The kernel caches attributes: tell it the mode of node id ino changed (no lock held). */
static void attrs_changed(struct ckptfs *fs, fuse_ino_t ino)
{
	fuse_lowlevel_notify_inval_inode(fs->se, ino, -1, 0);
}

/*
 * After a write by `caller`: times, set-ID bits, and when the file started
 * to differ from its last version.  True if the mode changed.
 */
static bool note_write(struct fsnode *n, uid_t caller)
{
	pthread_mutex_lock(&n->alock);
	now_ts(&n->mtime);
	n->ctime = n->mtime;
	if (!n->dirty_ns)
		n->dirty_ns = now_ns();
	bool killed = setid_kill_locked(n, caller);
	pthread_mutex_unlock(&n->alock);
	return killed;
}

/* Is the caller root or a member of group gid?  Its groups are read only if needed. */
static bool caller_in_group(fuse_req_t req, gid_t gid)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	gid_t groups[256];
	int n;

	if (ctx->uid == 0 || ctx->gid == gid)
		return true;
	n = fuse_req_getgroups(req, CKPT_ARRAY_LEN(groups), groups);
	for (int i = 0; i < n && i < (int)CKPT_ARRAY_LEN(groups); i++)
		if (groups[i] == gid)
			return true;
	return false;
}

static void touch_ctime(struct fsnode *n)
{
	pthread_mutex_lock(&n->alock);
	now_ts(&n->ctime);
	pthread_mutex_unlock(&n->alock);
}

/*
 * A directory to change: loaded (node.c reads it with fs->ns dropped), or an
 * error.  0 or DIR_DROPPED (dentries found before are stale), or -errno.
 */
static int dir_ready(struct ckptfs *fs, struct fsnode *d)
{
	if (!S_ISDIR(d->mode))
		return -ENOTDIR;
	return dir_load(fs, d);
}

/* A directory to look into: loaded, and revalidated against the backend when due. */
static int dir_ready_fresh(struct ckptfs *fs, struct fsnode *d)
{
	if (!S_ISDIR(d->mode))
		return -ENOTDIR;
	return dir_fresh(fs, d);
}

/*
 * Does dir/name fit the path a manifest record holds?  Else the operation
 * could only be refused at publication (blocking its user's later ones):
 * it is refused now.  (A directory renamed to a longer name can still
 * take what is below it past the limit: those changes are refused at
 * publication.)
 */
static bool path_fits(struct fsnode *dir, const char *name)
{
	size_t len = strlen(name), parts = 1;

	for (struct fsdent *d; (d = node_first_dent(dir)) != NULL; dir = d->parent) {
		len += strlen(d->name) + 1;
		if (++parts > BACKEND_PATH_PARTS || len > BACKEND_PATH_LEN)
			return false;
	}
	return len <= BACKEND_PATH_LEN;
}

/* May a new entry take this name here? */
static int name_check(struct ckptfs *fs, struct fsnode *dir, const char *name)
{
	if (dir->ctl)
		return -EPERM;
	if (dir->gone)
		return -ENOENT;	/* another node removed it from the backend */
	if (strlen(name) > 255 || !path_fits(dir, name))
		return -ENAMETOOLONG;
	if (!name_valid(name) || backend_name_reserved(name, dir == fs->root))
		return -EINVAL;
	return 0;
}

/* ---- lookups and attributes ---------------------------------------------- */

/* The reply to a request that makes or finds a name: the entry, or -r. */
static void reply_entry(fuse_req_t req, int r, const struct fuse_entry_param *e)
{
	if (r < 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_entry(req, e);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct ckptfs *fs = FS(req);
	struct fuse_entry_param e;
	struct fsnode *p;
	struct fsdent *d = NULL;
	int r;

	pthread_mutex_lock(&fs->ns);
	p = fs_node(fs, parent);
	r = CKPT_MIN(dir_ready_fresh(fs, p), 0);
	if (r == 0 && !backend_name_reserved(name, p == fs->root))
		d = dent_find(fs, p, name);
	if (d && atomic_exchange(&d->node->base_stale, false)) {
		/*
		 * Its published file was found replaced (node_open_base: the open
		 * got ESTALE, and the kernel looks the name up again): what the
		 * name holds now is read from the backend, not the old node.
		 */
		p->valid_ns = 0;
		memset(&p->stamp, 0, sizeof(p->stamp));	/* listed again, not trusted unchanged */
		r = CKPT_MIN(dir_ready_fresh(fs, p), 0);
		d = r == 0 ? dent_find(fs, p, name) : NULL;
	}
	if (r == 0 && p == fs->root && strcmp(name, CKPTFS_META_DIR) == 0) {
		fill_entry(fs, fs->ctl_dir, &e);	/* reachable by name, never listed */
	} else if (r == 0 && d) {
		fill_entry(fs, d->node, &e);
	} else if (r == 0) {
		memset(&e, 0, sizeof(e));	/* negative entry: we are authoritative */
		e.entry_timeout = fs->opt.attr_timeout;
	}
	pthread_mutex_unlock(&fs->ns);
	reply_entry(req, r, &e);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct ckptfs *fs = FS(req);

	pthread_mutex_lock(&fs->ns);
	node_forget(fs, ino, nlookup);
	pthread_mutex_unlock(&fs->ns);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	struct ckptfs *fs = FS(req);

	pthread_mutex_lock(&fs->ns);
	for (size_t i = 0; i < count; i++)
		node_forget(fs, forgets[i].ino, forgets[i].nlookup);
	pthread_mutex_unlock(&fs->ns);
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ckptfs *fs = FS(req);
	struct stat st;

	pthread_mutex_lock(&fs->ns);
	node_fill_stat(fs, fs_node(fs, ino), &st);
	pthread_mutex_unlock(&fs->ns);
	st.st_ino = ino;	/* an earlier kernel inode of a rewritten file keeps its number */
	fuse_reply_attr(req, &st, fs->opt.attr_timeout);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	struct ckptfs *fs = FS(req);
	struct fsnode *n;
	struct stat st;
	int r = 0;

	bool killed = false;

	pthread_mutex_lock(&fs->ns);
	n = fs_node(fs, ino);
	if ((to_set & FUSE_SET_ATTR_SIZE) && S_ISREG(n->mode) && !n->ctl && attr->st_size &&
	    cfile_base_lazy(node_cfile(fs, n))) {
		/* Its new version keeps part of the backend file: open it off the lock. */
		pthread_mutex_unlock(&fs->ns);
		r = node_open_base(fs, n);
		pthread_mutex_lock(&fs->ns);
		if (r < 0)
			goto out;
	}
	if (n->ctl) {
		r = (to_set & FUSE_SET_ATTR_SIZE) && n->ctl != CTL_DIR ? 0 : -EPERM;
		goto out;	/* O_TRUNC on a control file is harmless */
	}
	/*
	 * With default_permissions the kernel drops S_ISGID from a chmod by
	 * someone outside the file's group; so does this, in case it did not.
	 */
	if ((to_set & FUSE_SET_ATTR_MODE) && (attr->st_mode & S_ISGID) && !S_ISDIR(n->mode) &&
	    !caller_in_group(req, (to_set & FUSE_SET_ATTR_GID) ? attr->st_gid : n->gid))
		attr->st_mode &= ~(mode_t)S_ISGID;
	if (to_set & FUSE_SET_ATTR_SIZE) {
		if (!S_ISREG(n->mode)) {
			r = S_ISDIR(n->mode) ? -EISDIR : -EINVAL;
			goto out;
		}
		if (too_big(fs, (uint64_t)attr->st_size)) {
			r = -EFBIG;
			goto out;
		}
		killed = setid_kill(n, fuse_req_ctx(req)->uid);
		/*
		 * truncate(2) of a file no one is writing, or with nothing unsealed
		 * in it (a writer's handle may still be open: the kernel releases
		 * handles after close(2) returns): that is its new version, in the
		 * order the caller made it — a marker written next comes after it.
		 * Not a file bound to a capture session: what landed so far is no
		 * version (session.c S2), and it changes the file as a write does.
		 */
		bool unsealed = node_needs_seal(n), bound = session_node_bound(n);
		pt_changing_locked(fs, n);
		cfile_truncate(node_cfile(fs, n), (uint64_t)attr->st_size);
		touch_mtime(n);
		if (!fi && !bound && (n->writers == 0 || !unsealed) &&
		    (r = seal_locked(fs, n, actor_of(req))) < 0)
			goto out;
	}
	unsigned valid = 0;
	pthread_mutex_lock(&n->alock);
	uid_t owner = n->uid;	/* before the change: the backend object's (bsys C5) */
	if (to_set & FUSE_SET_ATTR_MODE) {
		n->mode = (n->mode & S_IFMT) | (attr->st_mode & 07777);
		valid |= OPA_MODE;
	}
	if (to_set & FUSE_SET_ATTR_UID) {
		n->uid = attr->st_uid;
		valid |= OPA_UID;
	}
	if (to_set & FUSE_SET_ATTR_GID) {
		n->gid = attr->st_gid;
		valid |= OPA_GID;
	}
	if (to_set & FUSE_SET_ATTR_ATIME_NOW)
		now_ts(&n->atime);
	else if (to_set & FUSE_SET_ATTR_ATIME)
		n->atime = attr->st_atim;
	if (to_set & FUSE_SET_ATTR_MTIME_NOW)
		now_ts(&n->mtime);
	else if (to_set & FUSE_SET_ATTR_MTIME)
		n->mtime = attr->st_mtim;
	if (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW))
		valid |= OPA_ATIME;
	if (to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW))
		valid |= OPA_MTIME;
	if (valid)
		now_ts(&n->ctime);
	struct op *op = NULL;
	if (valid) {
		op = op_new(OP_SETATTR);
		op->node = bnode_get(n->b);
		op->valid = valid;
		op->mode = n->mode;
		op->uid = n->uid;
		op->gid = n->gid;
		op->atime = n->atime;
		op->mtime = n->mtime;
		op->owner = owner;
		op->owner_known = true;
	}
	pthread_mutex_unlock(&n->alock);
	if (op)
		fs_submit(fs, actor_of(req), op);
out:
	if (r == 0) {
		node_fill_stat(fs, n, &st);
		st.st_ino = ino;
	}
	pthread_mutex_unlock(&fs->ns);
	if (killed && !(to_set & FUSE_SET_ATTR_MODE))
		attrs_changed(fs, ino);
	if (r < 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_attr(req, &st, fs->opt.attr_timeout);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct ckptfs *fs = FS(req);
	struct fsnode *n;
	char *target = NULL;

	pthread_mutex_lock(&fs->ns);
	n = fs_node(fs, ino);
	if (S_ISLNK(n->mode) && n->symlink)
		target = xstrdup(n->symlink);
	pthread_mutex_unlock(&fs->ns);
	if (!target) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	fuse_reply_readlink(req, target);
	free(target);
}

/* ---- creating and removing names --------------------------------------- */

/*
 * Owner and mode for a new object in dir, honouring a set-group-ID dir as a
 * local file system does: the object takes dir's group, a directory keeps
 * the bit, and a group-executable file keeps S_ISGID only if its creator is
 * in that group (the kernel strips it before asking; so does this).
 */
static struct fsnode *new_child(struct ckptfs *fs, fuse_req_t req, struct fsnode *dir, mode_t mode)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	gid_t gid = ctx->gid;

	if (dir->mode & S_ISGID) {
		gid = dir->gid;
		if (S_ISDIR(mode))
			mode |= S_ISGID;
		else if ((mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP) &&
			 !caller_in_group(req, gid))
			mode &= ~(mode_t)S_ISGID;
	}
	struct fsnode *n = node_new(fs, mode, ctx->uid, gid);
	n->xattrs_loaded = true;	/* new here: it has no xattrs to read anywhere */
	return n;
}

/* Checks shared by everything that adds a name: 0 or -errno (ns held). */
static int prepare_add(struct ckptfs *fs, struct fsnode *p, const char *name)
{
	int r = CKPT_MIN(dir_ready(fs, p), 0);
	if (r == 0)
		r = name_check(fs, p, name);
	if (r == 0 && dent_find(fs, p, name))
		r = -EEXIST;
	return r;
}

/*
 * mkdir, symlink and mknod: a new node named `name` in `parent`, created on
 * the backend by an operation of `kind` (a regular file by its first
 * version, sealed at once; target: the symlink's; rdev: a device's).
 * Replies.
 */
static void add_named(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      enum op_kind kind, const char *target, dev_t rdev)
{
	struct ckptfs *fs = FS(req);
	struct fuse_entry_param e;
	struct fsnode *p, *n;
	int r;

	pthread_mutex_lock(&fs->ns);
	p = fs_node(fs, parent);
	if ((r = prepare_add(fs, p, name)) == 0) {
		n = new_child(fs, req, p, mode);
		if (S_ISDIR(mode))
			n->loaded = true;	/* new: nothing to read from the backend */
		if (target)
			n->symlink = xstrdup(target);
		n->rdev = rdev;
		n->new_file = S_ISREG(mode);
		dent_add(fs, p, name, n);
		if (kind == OP_VERSION) {
			r = seal_locked(fs, n, actor_of(req));
		} else {
			struct op *op = op_new(kind);
			op->node = bnode_get(n->b);
			op->dir = bnode_get(p->b);
			op->name = xstrdup(name);
			op->target = target ? xstrdup(target) : NULL;
			op->rdev = rdev;
			op->mode = n->mode;
			op->uid = n->uid;
			op->gid = n->gid;
			op->valid = OPA_UID | OPA_GID;
			fs_submit(fs, actor_of(req), op);
		}
		touch_mtime(p);
		fill_entry(fs, n, &e);
	}
	pthread_mutex_unlock(&fs->ns);
	reply_entry(req, r, &e);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	add_named(req, parent, name, S_IFDIR | (mode & 07777), OP_MKDIR, NULL, 0);
}

static void op_symlink(fuse_req_t req, const char *target, fuse_ino_t parent, const char *name)
{
	add_named(req, parent, name, S_IFLNK | 0777, OP_SYMLINK, target, 0);
}

/*
 * mknod(2), mkfifo(3), bind(2) of a Unix socket: the node is made on the
 * backend in order like any other (OP_MKNOD).  Device nodes only for root:
 * the kernel already requires CAP_MKNOD before asking; whether they work is
 * the mount's business (nodev, the FUSE default).
 */
static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	mode_t perm = mode & 07777;

	switch (mode & S_IFMT) {
	case S_IFREG:
		add_named(req, parent, name, S_IFREG | perm, OP_VERSION, NULL, 0);
		break;
	case S_IFIFO:
	case S_IFSOCK:
		add_named(req, parent, name, (mode & S_IFMT) | perm, OP_MKNOD, NULL, 0);
		break;
	case S_IFCHR:
	case S_IFBLK:
		if (fuse_req_ctx(req)->uid != 0)
			fuse_reply_err(req, EPERM);
		else
			add_named(req, parent, name, (mode & S_IFMT) | perm, OP_MKNOD, NULL, rdev);
		break;
	default:
		fuse_reply_err(req, EINVAL);
	}
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	struct ckptfs *fs = FS(req);
	struct fuse_entry_param e;
	struct fsnode *n, *p;
	int r;

	pthread_mutex_lock(&fs->ns);
	n = fs_node(fs, ino);
	p = fs_node(fs, newparent);
	r = S_ISDIR(n->mode) || n->ctl ? -EPERM : prepare_add(fs, p, newname);
	if (r == 0 && S_ISREG(n->mode) && !n->ever_sealed)
		r = seal_locked(fs, n, actor_of(req));
	if (r == 0) {
		struct op *op = op_new(OP_LINK);
		op->node = bnode_get(n->b);
		op->dir2 = bnode_get(p->b);
		op->name2 = xstrdup(newname);
		fs_submit(fs, actor_of(req), op);
		dent_add(fs, p, newname, n);
		touch_ctime(n);
		touch_mtime(p);
		fill_entry(fs, n, &e);
	}
	pthread_mutex_unlock(&fs->ns);
	reply_entry(req, r, &e);
}

/*
 * Remove a name (unlink or rmdir); ns held.  DIR_DROPPED: a directory had to
 * be read with the lock dropped; do it again.
 */
static int remove_name(struct ckptfs *fs, uid_t actor, fuse_ino_t parent, const char *name,
		       bool dir)
{
	struct fsnode *p = fs_node(fs, parent), *n;
	struct fsdent *d;
	int r = CKPT_MIN(dir_ready(fs, p), 0);

	if (r < 0)
		return r;
	if (p->ctl)
		return -EPERM;
	if (backend_name_reserved(name, p == fs->root) || !(d = dent_find(fs, p, name)))
		return -ENOENT;
	n = d->node;
	if (dir && !S_ISDIR(n->mode))
		return -ENOTDIR;
	if (!dir && S_ISDIR(n->mode))
		return -EISDIR;
	if (dir) {
		/* Empty as the backend has it now: another node may have filled it. */
		if ((r = dir_fresh(fs, n)) != 0)
			return r;	/* or DIR_DROPPED: d may be stale */
		if (n->nentries)
			return -ENOTEMPTY;
	}
	/* A file never sealed was never sent to the backend: nothing to remove. */
	if (!S_ISREG(n->mode) || n->ever_sealed) {
		struct op *op = op_new(dir ? OP_RMDIR : OP_UNLINK);
		op->node = bnode_get(n->b);
		op->dir = bnode_get(p->b);
		op->name = xstrdup(name);
		fs_submit(fs, actor, op);
	}
	touch_ctime(n);
	touch_mtime(p);
	dent_remove(fs, d);
	return 0;
}

static void do_remove(fuse_req_t req, fuse_ino_t parent, const char *name, bool dir)
{
	struct ckptfs *fs = FS(req);
	int r;

	pthread_mutex_lock(&fs->ns);
	while ((r = remove_name(fs, actor_of(req), parent, name, dir)) == DIR_DROPPED)
		;
	pthread_mutex_unlock(&fs->ns);
	fuse_reply_err(req, -r);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	do_remove(req, parent, name, false);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	do_remove(req, parent, name, true);
}

/* Is `n` the directory `anc` or below it? (ns held) */
static bool is_within(struct fsnode *n, struct fsnode *anc)
{
	for (;;) {
		if (n == anc)
			return true;
		struct fsdent *d = node_first_dent(n);
		if (!d)
			return false;
		n = d->parent;
	}
}

static int rename_locked(struct ckptfs *fs, uid_t actor, fuse_ino_t parent, const char *name,
			 fuse_ino_t newparent, const char *newname, unsigned flags)
{
	struct fsnode *p = fs_node(fs, parent), *np = fs_node(fs, newparent), *sn, *dn = NULL;
	struct fsdent *sd, *dd;
	bool exchange = flags & RENAME_EXCHANGE;
	int r;

	if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return -EINVAL;
	if ((r = dir_ready(fs, p)) < 0 || (r = dir_ready(fs, np)) < 0)
		return r;
	if (p->ctl || np->ctl)
		return -EPERM;
	if (backend_name_reserved(name, p == fs->root) || !(sd = dent_find(fs, p, name)))
		return -ENOENT;
	if ((r = name_check(fs, np, newname)) < 0)
		return r;
	sn = sd->node;
	dd = dent_find(fs, np, newname);
	if (dd)
		dn = dd->node;
	if (exchange && !dd)
		return -ENOENT;
	if ((flags & RENAME_NOREPLACE) && dd)
		return -EEXIST;
	if (dn == sn)
		return 0;	/* two names of one file: nothing to do */
	if (S_ISDIR(sn->mode) && is_within(np, sn))
		return -EINVAL;
	if (exchange && S_ISDIR(dn->mode) && is_within(p, dn))
		return -EINVAL;
	if (dn && !exchange) {
		if (S_ISDIR(sn->mode) && !S_ISDIR(dn->mode))
			return -ENOTDIR;
		if (!S_ISDIR(sn->mode) && S_ISDIR(dn->mode))
			return -EISDIR;
		if (S_ISDIR(dn->mode)) {
			if ((r = dir_fresh(fs, dn)) != 0)
				return r;	/* or DIR_DROPPED: sd, dd may be stale */
			if (dn->nentries)
				return -ENOTEMPTY;
		}
	}
	/* Whatever moves must exist on the backend, in order, before it moves. */
	if (S_ISREG(sn->mode) && !sn->ever_sealed && (r = seal_locked(fs, sn, actor)) < 0)
		return r;
	if (exchange && S_ISREG(dn->mode) && !dn->ever_sealed && (r = seal_locked(fs, dn, actor)) < 0)
		return r;

	struct op *op = op_new(OP_RENAME);
	op->node = bnode_get(sn->b);
	op->dir = bnode_get(p->b);
	op->name = xstrdup(name);
	op->dir2 = bnode_get(np->b);
	op->name2 = xstrdup(newname);
	/*
	 * RENAME_NOREPLACE goes to the backend too: a name another node or
	 * tool made there since this mount looked is refused (EEXIST, the
	 * operation blocked and reported), never replaced.
	 */
	op->flags = flags & (RENAME_EXCHANGE | RENAME_NOREPLACE);
	op->victim = dn ? bnode_get(dn->b) : NULL;
	pthread_mutex_lock(&sn->alock);
	op->owner = sn->uid;	/* who owns what is moved, as the mount knows it */
	pthread_mutex_unlock(&sn->alock);
	op->owner_known = true;
	fs_submit(fs, actor, op);

	node_ref(sn);
	if (dn)
		node_ref(dn);
	if (dd)
		dent_remove(fs, dd);
	dent_remove(fs, sd);
	dent_add(fs, np, newname, sn);
	if (exchange)
		dent_add(fs, p, name, dn);
	touch_ctime(sn);
	touch_mtime(p);
	if (np != p)
		touch_mtime(np);
	node_unref(fs, sn);
	if (dn)
		node_unref(fs, dn);
	return 0;
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	struct ckptfs *fs = FS(req);
	int r;

	pthread_mutex_lock(&fs->ns);
	while ((r = rename_locked(fs, actor_of(req), parent, name, newparent, newname, flags)) ==
	       DIR_DROPPED)
		;
	pthread_mutex_unlock(&fs->ns);
	fuse_reply_err(req, -r);
}

/* ---- files -------------------------------------------------------------- */

/* A handle on n, listed in fs->handles until handle_drop (ns held). */
static struct fshandle *handle_new(fuse_req_t req, struct fsnode *n, int flags)
{
	struct fshandle *h = xcalloc(1, sizeof(*h));
	h->node = n;
	h->flags = flags;
	h->writable = (flags & O_ACCMODE) != O_RDONLY;
	/*
	 * Write-only opens (how checkpoints are written) bypass the kernel's page
	 * cache: the writer's pages go by reference into our pipe and are copied
	 * once, into the cache.  Others keep the page cache (mmap needs it), and
	 * keep what it holds unless a write-only handle changed the file since
	 * it was last dropped (handle_refreshed).
	 */
	h->direct_io = (flags & O_DIRECT) || (flags & O_ACCMODE) == O_WRONLY;
	if (h->direct_io) {
		n->bypassed = true;
		n->bypass_gen++;
	}
	h->keep_cache = !h->direct_io && !n->bypassed;
	h->refresh_gen = n->bypass_gen;	/* before pt_open_locked may drop ns */
	h->uid = actor_of(req);
	node_ref(n);
	n->opens++;
	if (h->writable) {
		n->writers++;
		n->writer_uid = h->uid;
	} else if (!n->ctl) {	/* a restore's file, not a look at the stats */
		cache_prefault_readers(&FS(req)->cache, 1);
	}
	if (n->cf)
		cfile_opened(n->cf);
	list_add_tail(&FS(req)->handles, &h->link);
	return h;
}

/*
 * A read-only open that the daemon serves (not passthrough) bypasses the
 * kernel's page cache (read_direct=on): a read from the cache is copied
 * once, straight into the reader's pages, which the kernel pins a batch at
 * a time (and a read of the backend's bytes is copied into them, not into
 * page-cache pages first).  Through the page cache the kernel would allocate
 * and zero its pages, copy twice, and take a page fault for every 4 KiB of
 * a destination the reader has not touched yet — torch.load reads each
 * tensor into new memory.  Only where the kernel lets such files be mapped
 * shared (FUSE_DIRECT_IO_ALLOW_MMAP), so mmap keeps working, and only while
 * nobody has the file open for writing: a writer's shared mapping stores
 * into the page cache, which such reads would not see.
 */
bool fs_read_direct(const struct ckptfs *fs)
{
	return fs->opt.read_direct && devio_dio_mmap();
}

static bool read_direct(const struct ckptfs *fs, const struct fshandle *h)
{
	return !h->writable && h->pt == PT_NONE && !h->node->ctl && h->node->writers == 0 &&
	       fs_read_direct(fs);
}

/*
 * A read-only open through the page cache that does not keep it makes the
 * kernel drop the node's page cache before its first read; once that handle
 * is released, with no write past the page cache since its open, what the
 * page cache holds is current, and later opens may keep it: a checkpoint
 * read twice right after its save is read through the daemon once (with
 * read_direct off; a read_direct handle, decided first, never refreshes).
 * (ns held; h's passthrough mode decided.)
 */
static void handle_opened(struct ckptfs *fs, struct fshandle *h)
{
	if (read_direct(fs, h)) {
		h->direct_io = true;
		h->keep_cache = false;
		atomic_fetch_add(&fs->rd_opens, 1);
	}
	h->refreshes = !h->writable && !h->direct_io && !h->keep_cache && h->pt == PT_NONE;
}

static void handle_refreshed(struct fsnode *n, struct fshandle *h)
{
	if (h->refreshes && n->bypass_gen == h->refresh_gen && n->writers == 0)
		n->bypassed = false;
}

/*
 * Undo handle_new (ns held); after dropping the lock, close what `drop`
 * holds (pt_drop_finish: a passthrough backing file) and free h with
 * handle_free.
 */
static void handle_drop(struct ckptfs *fs, struct fshandle *h, struct pt_drop *drop)
{
	struct fsnode *n = h->node;

	pt_release_locked(fs, n, h, drop);
	handle_refreshed(n, h);
	list_del(&h->link);
	n->opens--;
	if (h->writable)
		n->writers--;
	else if (!n->ctl)
		cache_prefault_readers(&fs->cache, -1);
	if (n->cf)
		cfile_closed(n->cf);
	node_unref(fs, n);
}

void handle_free(struct fshandle *h)
{
	sb_free(&h->out);
	free(h);
}

/*
 * Which open file table wrote through h: the kernel names it in each write
 * (lock_owner, for direct-I/O writes) and in each FLUSH.  A FLUSH from a
 * table that never wrote — a forked child closing the descriptor it
 * inherited (DataLoader workers, multiprocessing) — does not seal the file
 * half-written.  Writes that carry no owner (through the page cache) make
 * every FLUSH seal, as before.
 */
#define OWNER_ANY UINT64_MAX

static void handle_note_writer(struct fshandle *h, uint64_t owner)
{
	uint64_t cur = atomic_load(&h->wowner), want = owner ? owner : OWNER_ANY;

	while (cur != want && cur != OWNER_ANY)
		if (atomic_compare_exchange_weak(&h->wowner, &cur, cur ? OWNER_ANY : want))
			break;
}

/* Does a FLUSH from `owner` end the writes made through h? */
static bool handle_flush_seals(struct fshandle *h, uint64_t owner)
{
	uint64_t w = atomic_load(&h->wowner);
	return w == 0 || w == OWNER_ANY || w == owner;
}

static void handle_setup(struct fshandle *h, struct fuse_file_info *fi)
{
	fi->fh = (uint64_t)(uintptr_t)h;
	fi->direct_io = h->direct_io;	/* handle_new says why */
	fi->keep_cache = h->keep_cache;
	/*
	 * A read-only handle has nothing to seal at close (unless it created the
	 * file): the kernel need not send FLUSH for it.
	 */
	fi->noflush = !h->writable && !h->node->new_file && !h->node->ctl;
	pt_setup(h, fi);
}

/*
 * O_TRUNC: empty the file (a truncate by `caller`); true if its mode
 * changed.  Linux truncates on a read-only open too (the kernel checked
 * write permission, and FUSE_CAP_ATOMIC_O_TRUNC leaves the truncation to
 * the open): such a handle never seals, so its empty file is sealed here,
 * as truncate(2)'s is (op_setattr).
 */
static bool open_truncate(struct ckptfs *fs, struct fsnode *n, const struct fshandle *h,
			  uid_t caller)
{
	if (!(h->flags & O_TRUNC))
		return false;
	bool unsealed = node_needs_seal(n), bound = session_node_bound(n);
	cfile_truncate(node_cfile(fs, n), 0);
	touch_mtime(n);
	bool killed = setid_kill(n, caller);
	if (!h->writable && !bound && (n->writers == 0 || !unsealed))
		seal_locked(fs, n, caller);	/* if it cannot, the next drain seals it */
	return killed;
}

/* Will h change the file's contents (a write-capable open, or O_TRUNC)? */
static bool handle_changes(const struct fshandle *h)
{
	return h->writable || (h->flags & O_TRUNC);
}

/* Drop a handle the kernel never got (ns not held). */
static void open_undo(struct ckptfs *fs, struct fshandle *h)
{
	struct pt_drop drop;

	pthread_mutex_lock(&fs->ns);
	h->refreshes = false;	/* the kernel never opened it: it dropped no page cache */
	handle_drop(fs, h, &drop);
	pthread_mutex_unlock(&fs->ns);
	pt_drop_finish(&drop);
	handle_free(h);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ckptfs *fs = FS(req);
	struct fsnode *n;
	struct fshandle *h = NULL;
	bool killed = false;
	int r = 0;

	pthread_mutex_lock(&fs->ns);
	n = fs_node(fs, ino);
	if (n->ctl) {
		h = handle_new(req, n, fi->flags);
		if ((r = ctl_open(fs, req, h)) < 0) {
			struct pt_drop drop;	/* none: control files are never passthrough */
			handle_drop(fs, h, &drop);
			handle_free(h);
			h = NULL;
		}
	} else if (S_ISDIR(n->mode)) {
		r = -EISDIR;
	} else if (!S_ISREG(n->mode)) {
		r = -EINVAL;
	} else {
		node_cfile(fs, n);
		h = handle_new(req, n, fi->flags);
		h->gen = (uint8_t)fs_ino_gen(fs, ino);
		if (pt_open_locked(fs, n, h) == PT_REFUSE) {	/* may drop and retake ns */
			struct pt_drop drop;	/* none: h has no passthrough */
			handle_drop(fs, h, &drop);
			handle_free(h);
			r = -ETXTBSY;
		} else {
			if (handle_changes(h))
				pt_changing_locked(fs, n);
			/* Only an open that succeeds truncates. */
			killed = open_truncate(fs, n, h, fuse_req_ctx(req)->uid);
			handle_opened(fs, h);
		}
	}
	pthread_mutex_unlock(&fs->ns);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	if (killed)
		attrs_changed(fs, ino);
	/*
	 * A published file nobody had open keeps no backend descriptor
	 * (cfile_opened): take one now, off the lock, so the handle reads its
	 * file even if the name is unlinked meanwhile.
	 */
	if (!n->ctl && !(fi->flags & O_TRUNC) && cfile_base_lazy(n->cf) &&
	    node_open_base(fs, n) == -ESTALE) {	/* other failures: a read retries, reports */
		open_undo(fs, h);	/* another file has its name: the kernel looks again */
		fuse_reply_err(req, ESTALE);
		return;
	}
	handle_setup(h, fi);
	if (n->ctl) {		/* generated contents: no size, no page cache */
		fi->direct_io = 1;
		fi->keep_cache = 0;
	}
	int rr = fuse_reply_open(req, fi);
	devio_open_patch_clear();
	if (rr == -ENOENT)	/* the opener was interrupted */
		open_undo(fs, h);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	struct ckptfs *fs = FS(req);
	struct fuse_entry_param e;
	struct fsnode *p, *n = NULL;
	struct fsdent *d;
	struct fshandle *h = NULL;
	bool killed = false, existing = false;
	int r;

	pthread_mutex_lock(&fs->ns);
	p = fs_node(fs, parent);
	if ((r = CKPT_MIN(dir_ready(fs, p), 0)) == 0 && (r = name_check(fs, p, name)) == 0) {
		d = dent_find(fs, p, name);
		if (d && (fi->flags & O_EXCL)) {
			r = -EEXIST;
		} else if (d) {		/* raced with another creator: plain open */
			n = d->node;
			if (!S_ISREG(n->mode))
				r = S_ISDIR(n->mode) ? -EISDIR : -EINVAL;
			existing = true;
		} else {
			n = new_child(fs, req, p, S_IFREG | (mode & 07777));
			n->new_file = true;
			n->dirty_ns = now_ns();
			dent_add(fs, p, name, n);
			touch_mtime(p);
		}
	}
	if (r == 0) {
		node_cfile(fs, n);
		/*
		 * The kernel opens h on the node id of the entry this replies: the
		 * one later lookups get, so a write-capable open of an existing file
		 * takes a new one first, if passthrough readers hold it.
		 */
		if (existing && ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)))
			pt_changing_locked(fs, n);
		h = handle_new(req, n, fi->flags);
		h->gen = n->gen;
		if (pt_open_locked(fs, n, h) == PT_REFUSE) {	/* an existing file; may drop ns */
			struct pt_drop drop;
			handle_drop(fs, h, &drop);
			handle_free(h);
			r = -ETXTBSY;
		} else {
			if (existing)	/* only an open that succeeds truncates */
				killed = open_truncate(fs, n, h, fuse_req_ctx(req)->uid);
			handle_opened(fs, h);
			fill_entry_gen(fs, n, h->gen, &e);	/* pt_open_locked may have dropped ns */
		}
	}
	pthread_mutex_unlock(&fs->ns);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	if (killed)
		attrs_changed(fs, e.ino);
	handle_setup(h, fi);
	int rr = fuse_reply_create(req, &e, fi);
	devio_open_patch_clear();
	if (rr == -ENOENT) {	/* the creator was interrupted: the kernel has neither */
		open_undo(fs, h);
		pthread_mutex_lock(&fs->ns);
		node_forget(fs, e.ino, 1);
		pthread_mutex_unlock(&fs->ns);
	}
}

/* Copy the next len bytes of a write request into cache memory. */
static int copy_from_bufvec(void *arg, char *dst, size_t len, size_t src_off)
{
	struct fuse_bufvec *src = arg;
	struct fuse_bufvec d = FUSE_BUFVEC_INIT(len);
	ssize_t n;

	(void)src_off;		/* chunks are filled in order: the bufvec advances itself */
	d.buf[0].mem = dst;
	n = fuse_buf_copy(&d, src, 0);
	if (n < 0)
		return (int)n;
	return (size_t)n == len ? 0 : -EIO;
}

static void op_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *bufv, off_t off,
			 struct fuse_file_info *fi)
{
	struct ckptfs *fs = FS(req);
	struct fshandle *h = (struct fshandle *)(uintptr_t)fi->fh;
	struct fsnode *n = h->node;
	size_t len = fuse_buf_size(bufv);
	struct fuse_bufvec *staged;
	struct chunk *spare = NULL;
	int r;

	/* loop=readv: the data lie at the start of a free cache chunk (loop.c). */
	if ((staged = fs_loop_staged(bufv, &spare)))
		bufv = staged;
	if (n->ctl) {
		char small[4096];
		struct fuse_bufvec d = FUSE_BUFVEC_INIT(CKPT_MIN(len, sizeof(small)));
		d.buf[0].mem = small;
		ssize_t got = fuse_buf_copy(&d, bufv, 0);
		if (got < 0)
			fuse_reply_err(req, (int)-got);
		else
			ctl_write(fs, req, h, small, (size_t)got, off);
		return;
	}
	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (too_big(fs, (uint64_t)off + len)) {
		fuse_reply_err(req, EFBIG);
		return;
	}
	bool changed = false;
	fs_req_wait_begin(fs, req);	/* waiting for space ends on interrupt (wait.c) */
	for (;;) {
		/* A write that starts a chunk takes the spare as it is; others copy. */
		r = spare ? cfile_write_chunk(n->cf, (uint64_t)off, len, spare) : 1;
		if (r == 0)
			fs_loop_staged_taken();
		else if (r == 1)
			r = cfile_write(n->cf, (uint64_t)off, len, copy_from_bufvec, bufv, &changed);
		if (r != -EAGAIN || (r = node_open_base(fs, n)) < 0)
			break;
	}
	fs_req_wait_end(req);
	if (r < 0) {
		/* A part that went in before the error changed the file all the same. */
		if (changed && note_write(n, fuse_req_ctx(req)->uid))
			attrs_changed(fs, ino);
		fuse_reply_err(req, -r);
		return;
	}
	if (note_write(n, fuse_req_ctx(req)->uid))
		attrs_changed(fs, ino);
	handle_note_writer(h, fi->lock_owner);
	fuse_reply_write(req, len);
}

/*
 * Reply from the cache.  Chunk memory goes out as an iovec (the kernel
 * copies it once, into the reader's pages); holes come from the zero page.
 * Ranges only a backend file holds are read first (fs/bread.c), bounded:
 * over a hung backend the request gets EIO after drain_timeout.  They
 * wait in a pipe (page references) where they fit, and fuse_reply_data
 * moves them on; read requests are capped at READ_MAX (the max_read mount
 * option, main.c) so a reply fits the 1 MiB pipe libfuse may use without
 * privileges.
 */
static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct ckptfs *fs = FS(req);
	struct fshandle *h = (struct fshandle *)(uintptr_t)fi->fh;
	struct fsnode *n = h->node;
	struct bread *from_fd = NULL;
	struct cseg *segs;
	uint32_t nseg, nfd = 0, k = 0, nbuf = 0;
	bool piped = false;
	int r;

	if (n->ctl) {
		ctl_read(fs, req, h, size, off);
		return;
	}
	while ((r = cfile_map(n->cf, (uint64_t)off, size, &segs, &nseg)) == -EAGAIN)
		if ((r = node_open_base(fs, n)) < 0)
			break;
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	for (uint32_t i = 0; i < nseg; i++)
		nfd += segs[i].kind == CSEG_FD;
	if (nfd && (r = bread_segs(fs, req, segs, nseg, &from_fd)) != 0) {
		cfile_unmap(n->cf, segs, nseg);
		if (r < 0)
			fuse_reply_err(req, -r);
		return;		/* or answered already (BREAD_ANSWERED) */
	}
	size_t nb = 2 * (size_t)nseg + size / fs->zeros_len + 1;
	struct fuse_bufvec *bv = xcalloc(1, sizeof(*bv) + nb * sizeof(struct fuse_buf));
	uint64_t total = 0;
	for (uint32_t i = 0; i < nseg; i++) {
		struct cseg *s = &segs[i];
		if (s->kind == CSEG_MEM) {
			bv->buf[nbuf++] = (struct fuse_buf){ .size = s->len, .mem = s->mem };
		} else if (s->kind == CSEG_FD) {
			size_t in_pipe;
			const char *rest = bread_piece(from_fd, k++, &in_pipe);
			if (in_pipe) {
				piped = true;
				bv->buf[nbuf++] = (struct fuse_buf){
					.size = in_pipe, .flags = FUSE_BUF_IS_FD,
					.fd = bread_pipe(from_fd) };
			}
			if (s->len > in_pipe)
				bv->buf[nbuf++] = (struct fuse_buf){ .size = s->len - in_pipe,
								     .mem = (void *)rest };
		} else {
			for (uint64_t done = 0; done < s->len;) {
				size_t z = (size_t)CKPT_MIN(s->len - done, fs->zeros_len);
				bv->buf[nbuf++] = (struct fuse_buf){ .size = z, .mem = fs->zeros };
				done += z;
			}
		}
		total += s->len;
	}
	bv->count = nbuf;
	atomic_fetch_add(&fs->read_bytes, total);	/* before the reader can see its data */
	if (piped) {
		fuse_reply_data(req, bv, FUSE_BUF_SPLICE_MOVE);
	} else {
		struct iovec *iov = xmalloc(nbuf * sizeof(*iov) + 1);
		for (uint32_t i = 0; i < nbuf; i++)
			iov[i] = (struct iovec){ bv->buf[i].mem, bv->buf[i].size };
		fuse_reply_iov(req, iov, (int)nbuf);
		free(iov);
	}
	cfile_unmap(n->cf, segs, nseg);
	bread_free(from_fd);
	free(bv);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ckptfs *fs = FS(req);
	struct fshandle *h = (struct fshandle *)(uintptr_t)fi->fh;
	struct fsnode *n = h->node;
	int r = 0;

	bool sealed = false;

	pthread_mutex_lock(&fs->ns);
	if ((h->writable || n->new_file) && node_needs_seal(n) &&
	    handle_flush_seals(h, fi->lock_owner))
		sealed = (r = seal_locked(fs, n, actor_of(req))) == 0;
	/*
	 * A failed earlier version, or a blocked operation its version waits
	 * behind, is the writers' news, told at their close (P4).  (A version
	 * an administrator skipped is not, once this close has sealed a new
	 * one: that one is what its writer asks about.)
	 */
	if (r == 0 && h->writable)
		r = -atomic_load(&n->b->sticky_err);
	if (r == -ECANCELED && (sealed || n->seal_seq > atomic_load(&n->b->cancel_seq)))
		r = 0;	/* a version sealed since the skip is what is pending now */
	if (r == 0 && h->writable && n->seal_seq)
		r = backend_actor_error(&fs->be, n->seal_actor, n->seal_seq);
	pthread_mutex_unlock(&fs->ns);
	fuse_reply_err(req, -r);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ckptfs *fs = FS(req);
	struct fshandle *h = (struct fshandle *)(uintptr_t)fi->fh;

	struct pt_drop drop;

	pthread_mutex_lock(&fs->ns);
	handle_drop(fs, h, &drop);
	pthread_mutex_unlock(&fs->ns);
	pt_drop_finish(&drop);
	handle_free(h);
	fuse_reply_err(req, 0);
}

struct fsync_wait {
	struct pub_waiter w;
	fuse_req_t req;
	struct ckptfs *fs;
	struct bnode *b;	/* a file's fsync: its object (reference), else NULL */
	uint64_t progress;	/* backend_progress when the deadline was set */
	bool then;		/* once w's order is durable, wait in then_actor's too */
	uid_t then_actor;
};

static bool fsync_cancelled(struct pub_waiter *w)
{
	return fuse_req_interrupted(CKPT_CONTAINER_OF(w, struct fsync_wait, w)->req);
}

/*
 * As a write waiting for cache space: after drain_timeout without the
 * backend making progress, the fsync fails with the backend's last error
 * (EIO when it reported none); a backend that is slow but moving keeps it
 * waiting.
 */
static void fsync_done(struct pub_waiter *w, int err)
{
	struct fsync_wait *fw = CKPT_CONTAINER_OF(w, struct fsync_wait, w);
	/*
	 * Waiting again (slow but moving; or the second order) only while the
	 * session serves: once it stops, every waiter was answered at once
	 * (backend_cancel_waiters) and one put back now would be answered
	 * after the unmount.
	 */
	bool serving = !fs_stopping(fw->fs);
	if (err == -ETIMEDOUT) {
		if (serving &&
		    backend_wait_rearm(&fw->fs->be, w, &fw->progress, fw->fs->opt.drain_timeout))
			return;
		int last = backend_last_error(&fw->fs->be);	/* positive */
		err = last ? -last : -EIO;
	}
	if (err == 0 && fw->then) {
		if (!serving) {
			err = -ESHUTDOWN;
		} else {
			fw->then = false;
			w->actor = fw->then_actor;	/* the same seq, the same deadline */
			backend_wait_async(&fw->fs->be, w);
			return;
		}
	}
	/*
	 * Its version skipped by an administrator while this waited (the
	 * publisher drops it from the order, and the wait ends as if it were
	 * durable), or skipped before and no later version published since.
	 */
	if (err == 0 && fw->b && atomic_load(&fw->b->sticky_err) == ECANCELED)
		err = -ECANCELED;
	fuse_reply_err(fw->req, -err);
	bnode_put(fw->b);
	free(fw);
}

/*
 * Reply once everything `actor` queued so far is durable, with what depends
 * on it — everyone's with any_actor — and then everything `also` queued
 * (when it is another user: a file's contents are in the order of whoever
 * sealed them, the caller's own renames and attribute changes of it in
 * the caller's); or at once with fsync=lazy, or with the sticky error; or
 * with the backend's error once it has made no progress for drain_timeout
 * (fsync_done).
 */
static void reply_when_durable(struct ckptfs *fs, fuse_req_t req, uid_t actor, bool any_actor,
			       uid_t also, int sticky, struct bnode *b)
{
	if (fs->opt.fsync_lazy || sticky) {
		fuse_reply_err(req, -sticky);
		bnode_put(b);
		return;
	}
	struct fsync_wait *fw = xcalloc(1, sizeof(*fw));
	fw->req = req;
	fw->b = b;
	fw->w.seq = backend_last_seq(&fs->be);
	fw->w.actor = actor;
	fw->w.any_actor = any_actor;
	fw->w.done = fsync_done;
	fw->w.cancelled = fsync_cancelled;
	fw->then = !any_actor && also != actor;
	fw->then_actor = also;
	fw->fs = fs;
	fw->progress = backend_progress(&fs->be);
	if (fs->opt.drain_timeout > 0)
		fw->w.deadline_ns = now_ns() + (uint64_t)(fs->opt.drain_timeout * 1e9);
	backend_wait_async(&fs->be, &fw->w);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct ckptfs *fs = FS(req);
	struct fsnode *n = fs_node(fs, ino);
	int r = 0;

	pthread_mutex_lock(&fs->ns);
	/*
	 * A file bound to a capture session has no version to wait for: its
	 * first one comes from the close after the unbind (session.c S2), and
	 * if the session ends first it is dropped (S3).  Waiting could only end
	 * at drain_timeout when the caller is the capturing process itself, so
	 * say at once that it is not durable (docs/gpu.md).
	 */
	if (session_node_bound(n))
		r = -EBUSY;
	else if (node_needs_seal(n))
		r = seal_locked(fs, n, actor_of(req));
	int sticky = -atomic_load(&n->b->sticky_err);
	/* Its contents wait in the order of whoever sealed its last version. */
	uid_t actor = n->seal_seq ? n->seal_actor : actor_of(req);
	struct bnode *b = bnode_get(n->b);
	/*
	 * A skipped version is told after the wait (fsync_done): a version
	 * sealed since, if any, is what this fsync waits for (with fsync=lazy,
	 * one sealed since is what it answers for).
	 */
	if (sticky == -ECANCELED &&
	    (!fs->opt.fsync_lazy || n->seal_seq > atomic_load(&n->b->cancel_seq)))
		sticky = 0;
	pthread_mutex_unlock(&fs->ns);
	if (r < 0) {
		fuse_reply_err(req, -r);
		bnode_put(b);
	} else {
		reply_when_durable(fs, req, actor, false, actor_of(req), sticky, b);
	}
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	/* Root or the mount's owner syncs everyone's changes, as a drain does. */
	uid_t uid = actor_of(req);
	reply_when_durable(FS(req), req, uid, uid == 0 || uid == geteuid(), uid, 0, NULL);
}

/* ---- directories ------------------------------------------------------- */

struct dirsnap {
	struct list link;	/* in fs->dirsnaps (ns) */
	uint32_t n;
	struct {
		struct fsnode *node;
		char *name;
	} e[];
};

/* Release a directory handle (ns held); unref: drop its node references too. */
static void dirsnap_drop(struct ckptfs *fs, struct dirsnap *s, struct fsnode *dir, bool unref)
{
	list_del(&s->link);
	for (uint32_t i = 0; i < s->n; i++) {
		free(s->e[i].name);
		if (unref)
			node_unref(fs, s->e[i].node);
	}
	if (unref)
		node_unref(fs, dir);
	free(s);
}

void fs_free_dirsnaps(struct ckptfs *fs)
{
	while (!list_empty(&fs->dirsnaps))	/* the namespace goes next, whole */
		dirsnap_drop(fs, list_entry(fs->dirsnaps.next, struct dirsnap, link), NULL, false);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ckptfs *fs = FS(req);
	struct fsnode *dir;
	struct dirsnap *s = NULL;
	int r;

	pthread_mutex_lock(&fs->ns);
	dir = fs_node(fs, ino);
	if ((r = CKPT_MIN(dir_ready_fresh(fs, dir), 0)) == 0) {
		uint32_t i = 0;
		s = xmalloc(sizeof(*s) + dir->nentries * sizeof(s->e[0]));
		for (struct list *e = dir->entries.next; e != &dir->entries; e = e->next) {
			struct fsdent *d = list_entry(e, struct fsdent, dlink);
			s->e[i].node = d->node;
			s->e[i].name = xstrdup(d->name);
			node_ref(d->node);
			i++;
		}
		s->n = i;
		node_ref(dir);
		list_add_tail(&fs->dirsnaps, &s->link);
	}
	pthread_mutex_unlock(&fs->ns);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)s;
	if (fuse_reply_open(req, fi) == -ENOENT) {	/* the opener was interrupted: no RELEASEDIR */
		pthread_mutex_lock(&fs->ns);
		dirsnap_drop(fs, s, dir, true);
		pthread_mutex_unlock(&fs->ns);
	}
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi, bool plus)
{
	struct ckptfs *fs = FS(req);
	struct dirsnap *s = (struct dirsnap *)(uintptr_t)fi->fh;
	struct fsnode *dir = fs_node(fs, ino);
	char *buf = xmalloc(size);
	size_t pos = 0;

	pthread_mutex_lock(&fs->ns);
	for (off_t i = off; i < (off_t)s->n + 2; i++) {
		struct fuse_entry_param e;
		struct fsnode *n;
		const char *name;
		size_t len;

		if (i < 2) {
			struct fsdent *up = node_first_dent(dir);
			n = i == 0 || !up ? dir : up->parent;
			name = i == 0 ? "." : "..";
		} else {
			n = s->e[i - 2].node;
			name = s->e[i - 2].name;
		}
		if (plus) {
			fill_entry(fs, n, &e);
			if (i < 2) {	/* the kernel takes no reference on these */
				node_unlookup(n, n->gen);
				e.ino = 0;
			}
			len = fuse_add_direntry_plus(req, buf + pos, size - pos, name, &e, i + 1);
			if (len > size - pos && i >= 2)
				node_unlookup(n, n->gen);
		} else {
			struct stat st = { .st_ino = fs_ino(fs, n), .st_mode = n->mode };
			len = fuse_add_direntry(req, buf + pos, size - pos, name, &st, i + 1);
		}
		if (len > size - pos)
			break;
		pos += len;
	}
	pthread_mutex_unlock(&fs->ns);
	fuse_reply_buf(req, buf, pos);
	free(buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, false);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, true);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ckptfs *fs = FS(req);
	struct dirsnap *s = (struct dirsnap *)(uintptr_t)fi->fh;

	pthread_mutex_lock(&fs->ns);
	dirsnap_drop(fs, s, fs_node(fs, ino), true);
	pthread_mutex_unlock(&fs->ns);
	fuse_reply_err(req, 0);
}

/* GPU capture sessions (session.c): a small fixed-size request, no pointers. */
static void op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
		     struct fuse_file_info *fi, unsigned flags, const void *in_buf,
		     size_t in_bufsz, size_t out_bufsz)
{
	struct fshandle *h = flags & FUSE_IOCTL_DIR ? NULL : (struct fshandle *)(uintptr_t)fi->fh;
	char out[256];
	int r = out_bufsz > sizeof(out) ? -EINVAL
		: session_ioctl(FS(req), req, h, cmd, in_buf, in_bufsz, out, out_bufsz);

	if (r < 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_ioctl(req, 0, out_bufsz ? out : NULL, out_bufsz);
}

/* The backend's statvfs, on a helper (bcall.h): EIO once drain_timeout passes. */
struct statfs_call {
	struct bcall c;
	int fd;
	struct statvfs sv;
};

static int statfs_run(struct bcall *c)
{
	struct statfs_call *s = CKPT_CONTAINER_OF(c, struct statfs_call, c);

	return bsys.fstatvfs(s->fd, &s->sv);
}

static void statfs_drop(struct bcall *c)
{
	free(CKPT_CONTAINER_OF(c, struct statfs_call, c));
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct ckptfs *fs = FS(req);
	struct statfs_call *s = xcalloc(1, sizeof(*s));
	int err, r;

	(void)ino;
	s->c = (struct bcall){ .run = statfs_run, .drop = statfs_drop, .what = "statfs" };
	s->fd = fs->root_fd;	/* open until the daemon exits, which waits for no helper */
	if ((r = bcall_run(fs, &s->c, &err)) == BCALL_GONE) {
		fuse_reply_err(req, -err);	/* the helper frees s when the call returns */
		return;
	}
	struct statvfs sv = s->sv;
	free(s);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	sv.f_namemax = 255;
	fuse_reply_statfs(req, &sv);
}

/* ---- session ------------------------------------------------------------- */

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	struct ckptfs *fs = userdata;

	/* Our loop's largest request: what the kernel allows, and with loop=splice what fits its pipe. */
	conn->max_write = fs->own_loop ? fs_loop_max_write() : 1u << 20;
	fs->max_write = conn->max_write;
	conn->max_readahead = 1u << 20;
	/* libfuse requires the max_read mount option (main.c) repeated here. */
	conn->max_read = fs->max_read;
	conn->time_gran = 1;
	if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
		conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
	/* Kernel write-back caching would make close wait and split writes. */
	conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
	/* libfuse's own splice reading is never used: loop.c does it, or nothing. */
	conn->want &= ~FUSE_CAP_SPLICE_READ;
	if (conn->capable & FUSE_CAP_SPLICE_WRITE)
		conn->want |= FUSE_CAP_SPLICE_WRITE;
	if (conn->capable & FUSE_CAP_READDIRPLUS)
		conn->want |= FUSE_CAP_READDIRPLUS;
	atomic_store(&fs->inited, true);
}

const struct fuse_lowlevel_ops ckptfs_ops = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.readlink = op_readlink,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.symlink = op_symlink,
	.link = op_link,
	.unlink = op_unlink,
	.rmdir = op_rmdir,
	.rename = op_rename,
	.open = op_open,
	.create = op_create,
	.read = op_read,
	.write_buf = op_write_buf,
	.flush = op_flush,
	.release = op_release,
	.fsync = op_fsync,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.readdirplus = op_readdirplus,
	.releasedir = op_releasedir,
	.fsyncdir = op_fsyncdir,
	.statfs = op_statfs,
	.ioctl = op_ioctl,
	.setxattr = fs_setxattr,
	.getxattr = fs_getxattr,
	.listxattr = fs_listxattr,
	.removexattr = fs_removexattr,
};
