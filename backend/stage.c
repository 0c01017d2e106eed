/*
 * stage.c — staged directories: the files of a directory made through the
 * mount are written before its mkdir's turn comes.
 *
 * A version's temporary file is made in its directory on the backend.  A
 * directory made through the mount is not there until the publisher
 * applies its mkdir, in order, after everything its user did before; so in
 * a tree of new directories (one per array, zarr-like) each directory cost
 * a flush round and a publish round in turn.  Instead, a flusher that
 * finds versions waiting for such a directory D makes a *stage* for it: a
 * private directory of the daemon's — mode 0700, its own, under a
 * temporary name (".ckptfs.d.<mount id>.<n>") in D's parent, or in the
 * parent's stage — and writes D's temporary files there.  At the mkdir's
 * turn the publisher makes D exactly as before (mkdirat, then created_as:
 * mode, default ACL, setgid and owner as a plain mkdir gives them), then
 * moves the stage's entries into D by their reserved names and removes
 * the stage (stage_merge).  So:
 *
 *   S1  A stage is a bnode of its own (is_stage), never one of D's links:
 *       D is absent from the backend until its mkdir, for every rule that
 *       asks (order.c, the namespace's revalidation), and D's directory
 *       descriptor is opened only once D exists.
 *   S2  A stage holds only this mount's temporary files and stages, and is
 *       reachable by no one else (0700, the daemon's; its owner and mode
 *       are checked again before it is emptied).  Nothing is published
 *       from a stage: a version is applied after its directory's mkdir,
 *       which has emptied the stage into D by then.
 *   S3  A stage is made only while D's mkdir is pending (mk_op) and never
 *       once the publisher has begun that mkdir (no_stage, set under
 *       stage_mx before its first call; a staging in flight then loses and
 *       is undone).  A staging that fails is not tried again: D's files
 *       wait for the mkdir, as before.
 *   S4  stage_rw: temporary files are made and released, and stages made,
 *       under it for reading; a stage is emptied or removed under it for
 *       writing, so none of those meets a stage half moved, and a temporary
 *       file's directory (btemp->dir) changes only then.
 *   S5  A stage whose mkdir will never come is removed: when the mkdir is
 *       skipped by the administrator, and at the stop (before the manifest
 *       is closed clean); after a crash, recovery removes the dead mount's
 *       stages with its temporary files (recover.c).
 */
#include "backend/pub.h"
#include "backend/bsys.h"
#include "cache/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- making stages (flushers) ------------------------------------------ */

bool stage_collect_locked(struct backend *be, struct bnode *d, struct stage_job *job)
{
	struct bnode *chain[STAGE_DEPTH], *parents[STAGE_DEPTH];
	unsigned n = 0;

	(void)be;
	for (struct bnode *b = d; !atomic_load(&b->present) && !atomic_load(&b->has_stage);
	     b = parents[n - 1]) {
		if (n == STAGE_DEPTH || !b->is_dir || !b->mk_op || !b->mk_op->dir ||
		    atomic_load(&b->no_stage) || atomic_load(&b->staging))
			return false;
		chain[n] = b;
		parents[n++] = b->mk_op->dir;
	}
	job->n = n;
	for (unsigned i = 0; i < n; i++) {	/* top down: each parent first */
		job->d[i] = bnode_get(chain[n - 1 - i]);
		job->p[i] = bnode_get(parents[n - 1 - i]);
	}
	return n > 0;
}

void stage_job_free(struct stage_job *job)
{
	for (unsigned i = 0; i < job->n; i++) {
		bnode_put(job->d[i]);
		bnode_put(job->p[i]);
	}
	job->n = 0;
}

/* Where things for dir are made: dir, its stage, or NULL (stage_mx held). */
static struct bnode *target_locked(struct bnode *dir)
{
	if (atomic_load(&dir->present))
		return dir;
	return atomic_load(&dir->has_stage) ? dir->stage : NULL;
}

struct bnode *stage_target(struct backend *be, struct bnode *dir)
{
	if (atomic_load(&dir->present))
		return bnode_get(dir);	/* the common case: no lock */
	pthread_mutex_lock(&be->stage_mx);
	struct bnode *at = target_locked(dir);
	bnode_get(at ? at : dir);
	pthread_mutex_unlock(&be->stage_mx);
	return at ? at : dir;
}

void stage_temp_add(struct backend *be, struct bnode *stage, struct list *link)
{
	pthread_mutex_lock(&be->stage_mx);
	list_add_tail(&stage->stemps, link);
	pthread_mutex_unlock(&be->stage_mx);
}

bool stage_temp_listed(struct backend *be, struct list *link)
{
	pthread_mutex_lock(&be->stage_mx);
	bool listed = list_linked(link);
	pthread_mutex_unlock(&be->stage_mx);
	return listed;
}

void stage_temp_del(struct backend *be, struct list *link)
{
	pthread_mutex_lock(&be->stage_mx);
	if (list_linked(link))
		list_del(link);
	list_init(link);
	pthread_mutex_unlock(&be->stage_mx);
}

/* Remember d as staged (stage_mx held). */
static void stages_add_locked(struct backend *be, struct bnode *d)
{
	if (be->nstages == be->capstages) {
		unsigned k = 0;		/* drop the ones merged or removed since, then grow */
		for (unsigned i = 0; i < be->nstages; i++) {
			if (atomic_load(&be->stages[i]->has_stage))
				be->stages[k++] = be->stages[i];
			else
				bnode_put(be->stages[i]);
		}
		be->nstages = k;
		if (k * 2 >= be->capstages) {
			be->capstages = be->capstages ? be->capstages * 2 : 64;
			be->stages = xrealloc(be->stages, be->capstages * sizeof(*be->stages));
		}
	}
	be->stages[be->nstages++] = bnode_get(d);
}

/* Make d's stage in p's directory (or p's stage): 0, or -errno (S3). */
static int stage_one(struct backend *be, struct bnode *d, struct bnode *p)
{
	char name[64];
	struct bnode *at, *sb = NULL;
	uint64_t n;
	int pfd = -1, r;

	pthread_mutex_lock(&be->lock);	/* not under stage_rw: be->lock is taken outside it */
	n = ++be->temp_counter;
	pthread_mutex_unlock(&be->lock);
	snprintf(name, sizeof(name), CKPTFS_RESERVED_PREFIX "d.%s.%llu", be->mount_id,
		 (unsigned long long)n);
	pthread_rwlock_rdlock(&be->stage_rw);
	pthread_mutex_lock(&be->stage_mx);
	bool done = atomic_load(&d->present) || atomic_load(&d->has_stage);
	at = done || atomic_load(&d->no_stage) || atomic_load(&d->staging) ? NULL : target_locked(p);
	if (at) {
		atomic_store(&d->staging, true);
		bnode_get(at);
	}
	pthread_mutex_unlock(&be->stage_mx);
	if (!at) {
		pthread_rwlock_unlock(&be->stage_rw);
		return done ? 0 : -ENOENT;
	}
	r = pfd = bnode_dirfd(be, at);
	if (pfd >= 0)
		r = bsys.mkdirat(pfd, name, 0700);
	struct stat st;
	if (r == 0 && bsys.fstatat(pfd, name, &st) == 0) {
		sb = bnode_new(true);
		sb->is_stage = true;
		atomic_store(&sb->ino, st.st_ino);	/* who it is (stage_open) */
		pthread_rwlock_wrlock(&be->bt_lock);
		bnode_link_add_locked(sb, at, name);
		pthread_rwlock_unlock(&be->bt_lock);
	} else if (r == 0) {
		bsys.unlinkat(pfd, name, AT_REMOVEDIR);
		r = -EIO;
	}
	pthread_mutex_lock(&be->stage_mx);
	atomic_store(&d->staging, false);
	bool cancel = r == 0 && atomic_load(&d->no_stage);	/* its mkdir began meanwhile */
	if (r == 0 && !cancel) {
		d->stage = sb;
		atomic_store(&d->has_stage, true);
		stages_add_locked(be, d);
		atomic_fetch_add(&be->st.dirs_staged, 1);
	} else if (r < 0) {
		atomic_store(&d->no_stage, true);
	}
	pthread_mutex_unlock(&be->stage_mx);
	if (cancel) {
		bsys.unlinkat(pfd, name, AT_REMOVEDIR);
		bnode_put(sb);
		r = -ECANCELED;
	} else if (r < 0) {
		log_debug("could not stage a directory made through the mount (%s): its files "
			  "wait for its mkdir", strerror(-r));
	}
	if (pfd >= 0)
		bnode_dirfd_put(be, at);
	bnode_put(at);
	pthread_rwlock_unlock(&be->stage_rw);
	return r;
}

bool stage_run(struct backend *be, struct stage_job *job)
{
	bool any = false;

	for (unsigned i = 0; i < job->n; i++) {
		bool had = atomic_load(&job->d[i]->has_stage);
		if (stage_one(be, job->d[i], job->p[i]) < 0)
			break;
		any |= !had;
	}
	stage_job_free(job);
	return any;
}

/* ---- emptying and removing them (the publisher; the stop) ---------------- */

void stage_close(struct backend *be, struct bnode *dir)
{
	pthread_mutex_lock(&be->stage_mx);
	atomic_store(&dir->no_stage, true);
	pthread_mutex_unlock(&be->stage_mx);
}

struct names {
	char **v;
	unsigned n, cap;
};

static int names_add(void *arg, const char *name)
{
	struct names *l = arg;

	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 16;
		l->v = xrealloc(l->v, l->cap * sizeof(*l->v));
	}
	l->v[l->n++] = xstrdup(name);
	return 0;
}

static void names_free(struct names *l)
{
	for (unsigned i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = l->cap = 0;
}

/* A name this mount made (a temporary file or a stage). */
static bool ours(const struct backend *be, const char *name)
{
	char needle[40];

	snprintf(needle, sizeof(needle), ".%s.", be->mount_id);
	return !strncmp(name, CKPTFS_RESERVED_PREFIX, sizeof(CKPTFS_RESERVED_PREFIX) - 1) &&
	       strstr(name, needle);
}

/*
 * Open stage sb, checked (S2): still a directory of the daemon's, mode
 * 0700 (the parent's owner may have swapped another in).  An fd or -errno.
 */
static int stage_open(struct backend *be, struct bnode *sb)
{
	struct stat st;
	int fd = bnode_dirfd(be, sb), r;

	if (fd < 0)
		return fd;
	r = bsys.fstatat(fd, "", &st);
	/* (setgid may be inherited from the parent: the permission bits are what count) */
	if (r == 0 && (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
		       (st.st_mode & 0777) != 0700 || st.st_ino != atomic_load(&sb->ino))) {
		log_warn("backend: a staged directory is not the daemon's private one any more "
			 "(uid %u, mode %o): left alone", (unsigned)st.st_uid, st.st_mode & 07777);
		r = -EPERM;
	}
	if (r < 0) {
		bnode_dirfd_put(be, sb);
		return r;
	}
	return fd;
}

/*
 * sb's own name goes (its entries moved or removed), and d forgets it,
 * also if the rmdir fails (logged by the caller; recovery after a crash,
 * or an administrator, removes it).  stage_rw held for writing.
 */
static int stage_unlink(struct backend *be, struct bnode *d, struct bnode *sb)
{
	struct bnode *at = NULL;
	char name[256];
	int r = bnode_locate(be, sb, &at, name, sizeof(name)), pfd;

	if (r == 0 && (pfd = r = bnode_dirfd(be, at)) >= 0) {
		r = bsys.unlinkat(pfd, name, AT_REMOVEDIR);
		bnode_dirfd_put(be, at);
	}
	if (at) {
		pthread_rwlock_wrlock(&be->bt_lock);
		bnode_link_del_locked(sb, at, name);
		pthread_rwlock_unlock(&be->bt_lock);
	}
	pthread_mutex_lock(&be->stage_mx);
	d->stage = NULL;
	atomic_store(&d->has_stage, false);
	pthread_mutex_unlock(&be->stage_mx);
	bnode_put(sb);
	bnode_put(at);
	return r == -ENOENT ? 0 : r;
}

int stage_merge(struct backend *be, struct op *op)
{
	struct bnode *d = op->node, *sb;
	struct names l = { 0 };
	int sfd = -1, dfd = -1, r = 0;

	pthread_rwlock_wrlock(&be->stage_rw);	/* S4 */
	pthread_mutex_lock(&be->stage_mx);
	sb = atomic_load(&d->has_stage) ? d->stage : NULL;
	pthread_mutex_unlock(&be->stage_mx);
	if (!sb)
		goto out;
	if ((sfd = stage_open(be, sb)) < 0) {
		/* Not ours to empty (S2): its files stay there, their versions are refused. */
		r = 0;
		goto out;
	}
	if ((dfd = r = bnode_dirfd(be, d)) < 0 || (r = bsys.readdir(sfd, names_add, &l)) < 0)
		goto out;
	pthread_rwlock_wrlock(&be->mv_lock);	/* a walk that finds a name moved waits, then walks again */
	for (unsigned i = 0; i < l.n && r == 0; i++) {
		if (!ours(be, l.v[i]))
			continue;	/* not ours: never carried (S2) */
		r = bsys.renameat2(sfd, l.v[i], dfd, l.v[i], 0);
		pthread_mutex_lock(&be->stage_mx);
		if (r == 0)	/* each as it moves: a merge cut short is consistent */
			flush_temp_moved(&sb->stemps, l.v[i], d);
		struct bnode *child = NULL;
		for (unsigned k = 0; r == 0 && k < be->nstages && !child; k++) {
			struct bnode *c = be->stages[k]->stage;	/* a stage inside: it moved too */
			if (atomic_load(&be->stages[k]->has_stage) && c && c->nlinks &&
			    c->links[0].dir == sb && !strcmp(c->links[0].name, l.v[i]))
				child = c;
		}
		pthread_mutex_unlock(&be->stage_mx);
		if (child) {
			pthread_rwlock_wrlock(&be->bt_lock);
			bnode_link_move_locked(child, sb, l.v[i], d, l.v[i]);
			pthread_rwlock_unlock(&be->bt_lock);
		}
	}
	pthread_rwlock_unlock(&be->mv_lock);
	if (r < 0)
		goto out;	/* tried again with the mkdir: what moved stays moved */
	bnode_dirfd_put(be, sb);
	sfd = -1;
	if ((r = stage_unlink(be, d, sb)) < 0)
		log_warn("backend: an emptied staged directory could not be removed: %s",
			 strerror(-r));
	r = 0;	/* its files are in place: the mkdir is done */
out:
	if (sfd >= 0)
		bnode_dirfd_put(be, sb);
	if (dfd >= 0)
		bnode_dirfd_put(be, d);
	names_free(&l);
	pthread_rwlock_unlock(&be->stage_rw);
	return r;
}

/* Remove d's stage and what this mount put in it, stages inside first (stage_rw, write). */
static void discard_locked(struct backend *be, struct bnode *d)
{
	struct names l = { 0 };
	struct bnode *sb;
	int sfd;

	pthread_mutex_lock(&be->stage_mx);
	atomic_store(&d->no_stage, true);
	sb = atomic_load(&d->has_stage) ? d->stage : NULL;
	pthread_mutex_unlock(&be->stage_mx);
	if (!sb)
		return;
	for (;;) {	/* stages inside it first: each is forgotten once discarded */
		struct bnode *inner = NULL;
		pthread_mutex_lock(&be->stage_mx);
		for (unsigned k = 0; k < be->nstages && !inner; k++) {
			struct bnode *c = be->stages[k]->stage;
			if (atomic_load(&be->stages[k]->has_stage) && c && c->nlinks &&
			    c->links[0].dir == sb)
				inner = bnode_get(be->stages[k]);
		}
		pthread_mutex_unlock(&be->stage_mx);
		if (!inner)
			break;
		discard_locked(be, inner);
		bnode_put(inner);
	}
	if ((sfd = stage_open(be, sb)) >= 0) {
		bsys.readdir(sfd, names_add, &l);
		for (unsigned i = 0; i < l.n; i++)
			if (ours(be, l.v[i]))
				bsys.unlinkat(sfd, l.v[i], 0);	/* temporary files: never published */
		bnode_dirfd_put(be, sb);
	}
	names_free(&l);
	if (stage_unlink(be, d, sb) < 0)
		log_warn("backend: a staged directory (of a mkdir that never came) could not be "
			 "removed; the next mount's recovery does not see it");
}

void stage_discard(struct backend *be, struct bnode *dir)
{
	pthread_rwlock_wrlock(&be->stage_rw);
	discard_locked(be, dir);
	pthread_rwlock_unlock(&be->stage_rw);
}

void stage_remove_all(struct backend *be)
{
	pthread_rwlock_wrlock(&be->stage_rw);
	for (unsigned i = be->nstages; i-- > 0;)	/* the deepest were staged last */
		discard_locked(be, be->stages[i]);
	for (unsigned i = 0; i < be->nstages; i++)
		bnode_put(be->stages[i]);
	free(be->stages);
	be->stages = NULL;
	be->nstages = be->capstages = 0;
	pthread_rwlock_unlock(&be->stage_rw);
}
