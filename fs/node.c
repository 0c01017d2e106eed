/*
 * node.c — the mount's namespace: nodes, dentries, the dentry hash, and the
 * lazy loading of directories from the backend.  Lock rules in fs.h; every
 * function here expects fs->ns held unless its comment says otherwise.
 *
 * A node's inode number is its address plus the index of the kernel inode
 * new lookups get (struct fsgen, fs_ino; root: FUSE_ROOT_ID).  A node lives
 * while the kernel holds lookups on any of them (nlookup) or anything here holds a
 * reference (refs: one per dentry naming it, one per open handle, one per
 * directory snapshot entry).
 */
#include "fs/bcall.h"
#include "fs/fs.h"
#include "cache/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void changed_note(struct fsnode *dir, const char *name);
static void changed_clear(struct fsnode *dir);

static uint64_t name_hash(const struct fsnode *dir, const char *name)
{
	uint64_t seed = (uint64_t)(uintptr_t)dir;
	return XXH3_64bits_withSeed(name, strlen(name), seed);
}

bool name_valid(const char *name)
{
	size_t n = strlen(name);
	return n > 0 && n < 256 && strcmp(name, ".") && strcmp(name, "..") && !strchr(name, '/');
}

/* A node's address has its low bits clear (malloc's alignment): they name its kernel inode. */
_Static_assert(_Alignof(max_align_t) >= NODE_GENS, "node ids need NODE_GENS low bits");

struct fsnode *fs_node(struct ckptfs *fs, fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? fs->root :
		(struct fsnode *)(uintptr_t)(ino & ~(fuse_ino_t)(NODE_GENS - 1));
}

fuse_ino_t node_ino(struct ckptfs *fs, struct fsnode *n, unsigned gen)
{
	return n == fs->root ? FUSE_ROOT_ID : (fuse_ino_t)(uintptr_t)n | gen;
}

fuse_ino_t fs_ino(struct ckptfs *fs, struct fsnode *n)
{
	return node_ino(fs, n, n->gen);
}

unsigned fs_ino_gen(struct ckptfs *fs, fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? 0 : (unsigned)(ino & (NODE_GENS - 1));
}

struct fsgen *node_gen(struct fsnode *n, unsigned i)
{
	if (i == 0)
		return &n->gen0;
	if (!n->gens)
		n->gens = xcalloc(NODE_GENS - 1, sizeof(*n->gens));
	return &n->gens[i - 1];
}

void node_lookup(struct fsnode *n, unsigned gen)
{
	n->nlookup++;
	node_gen(n, gen)->nlookup++;
}

void node_unlookup(struct fsnode *n, unsigned gen)
{
	n->nlookup--;
	node_gen(n, gen)->nlookup--;
}

struct fsnode *node_new(struct ckptfs *fs, mode_t mode, uid_t uid, gid_t gid)
{
	struct fsnode *n = xcalloc(1, sizeof(*n));
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	list_init(&n->dents);
	list_init(&n->entries);
	list_init(&n->rlink);
	pthread_mutex_init(&n->alock, NULL);
	n->mode = mode;
	n->uid = uid;
	n->gid = gid;
	n->atime = n->mtime = n->ctime = now;
	n->b = bnode_new(S_ISDIR(mode));
	n->b->is_link = S_ISLNK(mode);
	n->b->is_special = !S_ISREG(mode) && !S_ISDIR(mode) && !S_ISLNK(mode);
	list_add_tail(&fs->all_nodes, &n->all);
	fs->nodes++;
	return n;
}

static void node_free(struct ckptfs *fs, struct fsnode *n)
{
	if (n->cf) {
		pthread_mutex_lock(&n->cf->lock);
		n->cf->owner = NULL;
		pthread_mutex_unlock(&n->cf->lock);
		cfile_put(n->cf);
	}
	bnode_put(n->b);
	xattrs_free(n);
	changed_clear(n);
	free(n->gens);
	free(n->symlink);
	pthread_mutex_destroy(&n->alock);
	list_del(&n->all);
	free(n);
	fs->nodes--;
}

static void node_maybe_free(struct ckptfs *fs, struct fsnode *n)
{
	if (n != fs->root && n->nlookup == 0 && n->refs == 0)
		node_free(fs, n);
}

void node_ref(struct fsnode *n) { n->refs++; }

void node_unref(struct ckptfs *fs, struct fsnode *n)
{
	n->refs--;
	node_maybe_free(fs, n);
}

void node_forget(struct ckptfs *fs, fuse_ino_t ino, uint64_t nlookup)
{
	struct fsnode *n = fs_node(fs, ino);
	struct fsgen *g = node_gen(n, fs_ino_gen(fs, ino));

	nlookup = CKPT_MIN(nlookup, g->nlookup);
	g->nlookup -= nlookup;
	n->nlookup -= nlookup;
	node_maybe_free(fs, n);
}

struct cfile *node_cfile(struct ckptfs *fs, struct fsnode *n)
{
	if (!n->cf) {
		n->cf = cfile_new(&fs->cache, n);
		if (n->ever_sealed && n->loaded_size)
			cfile_set_base_lazy(n->cf, n->loaded_size, 1, n->bknown ? n->bid.ino : 0);
	}
	return n->cf;
}

struct fsdent *node_first_dent(struct fsnode *n)
{
	return list_empty(&n->dents) ? NULL : list_entry(n->dents.next, struct fsdent, nlink);
}

/* ---- the dentry hash ------------------------------------------------------ */

static void htab_grow(struct ckptfs *fs)
{
	size_t nsize = fs->hsize ? fs->hsize * 2 : 1024;
	struct fsdent **nt = xcalloc(nsize, sizeof(*nt));

	for (size_t i = 0; i < fs->hsize; i++) {
		struct fsdent *d = fs->htab[i];
		while (d) {
			struct fsdent *next = d->hnext;
			size_t h = name_hash(d->parent, d->name) & (nsize - 1);
			d->hnext = nt[h];
			nt[h] = d;
			d = next;
		}
	}
	free(fs->htab);
	fs->htab = nt;
	fs->hsize = nsize;
}

struct fsdent *dent_find(struct ckptfs *fs, struct fsnode *dir, const char *name)
{
	if (!fs->hsize)
		return NULL;
	for (struct fsdent *d = fs->htab[name_hash(dir, name) & (fs->hsize - 1)]; d; d = d->hnext)
		if (d->parent == dir && strcmp(d->name, name) == 0)
			return d;
	return NULL;
}

struct fsdent *dent_add(struct ckptfs *fs, struct fsnode *dir, const char *name, struct fsnode *n)
{
	size_t len = strlen(name) + 1;
	struct fsdent *d = xmalloc(sizeof(*d) + len);

	memcpy(d->name, name, len);
	d->parent = dir;
	d->node = n;
	if (fs->hcount + 1 > fs->hsize)
		htab_grow(fs);
	size_t h = name_hash(dir, name) & (fs->hsize - 1);
	d->hnext = fs->htab[h];
	fs->htab[h] = d;
	fs->hcount++;
	list_add_tail(&dir->entries, &d->dlink);
	dir->nentries++;
	changed_note(dir, name);
	if (S_ISDIR(n->mode))
		dir->nsubdirs++;
	list_add_tail(&n->dents, &d->nlink);
	n->refs++;
	return d;
}

void dent_remove(struct ckptfs *fs, struct fsdent *d)
{
	struct fsdent **pp = &fs->htab[name_hash(d->parent, d->name) & (fs->hsize - 1)];

	while (*pp != d)
		pp = &(*pp)->hnext;
	*pp = d->hnext;
	fs->hcount--;
	changed_note(d->parent, d->name);
	list_del(&d->dlink);
	d->parent->nentries--;
	if (S_ISDIR(d->node->mode))
		d->parent->nsubdirs--;
	list_del(&d->nlink);
	node_unref(fs, d->node);
	free(d);
}

/* ---- attributes ---------------------------------------------------------- */

static uint32_t node_nlink(struct fsnode *n)
{
	uint32_t k = 0;

	if (S_ISDIR(n->mode))
		return 2 + n->nsubdirs;
	for (struct list *e = n->dents.next; e != &n->dents; e = e->next)
		k++;
	return k;
}

void node_fill_stat(struct ckptfs *fs, struct fsnode *n, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = fs_ino(fs, n);
	st->st_nlink = node_nlink(n);
	pthread_mutex_lock(&n->alock);
	st->st_mode = n->mode;
	st->st_uid = n->uid;
	st->st_gid = n->gid;
	st->st_atim = n->atime;
	st->st_mtim = n->mtime;
	st->st_ctim = n->ctime;
	pthread_mutex_unlock(&n->alock);
	if (S_ISREG(n->mode))
		st->st_size = (off_t)(n->cf ? cfile_size(n->cf) : n->loaded_size);
	else if (S_ISLNK(n->mode))
		st->st_size = n->symlink ? (off_t)strlen(n->symlink) : 0;
	else if (S_ISDIR(n->mode))
		st->st_size = 4096;
	st->st_rdev = n->rdev;
	st->st_blksize = 1 << 20;
	st->st_blocks = (st->st_size + 511) / 512;
}

/* ---- loading directories from the backend --------------------------------- */

/*
 * Every backend call here goes through bsys (bsys.h): the listing, the lstat
 * of each entry and readlink never follow a symlink, and a directory the walk
 * cannot reach without one is refused (-ELOOP) with a line in the log.
 * Regular files, directories, symlinks, FIFOs, sockets and device nodes are
 * shown as they are; opening a FIFO, socket or device through the mount is
 * the kernel's business (FUSE sends no OPEN for them), so the daemon never
 * opens one.
 *
 * No backend call is made under fs->ns.  A directory is read in two steps:
 * its entries are listed and stat'ed with the lock dropped (the directory
 * node is referenced meanwhile; `loading` makes other threads wait on
 * fs->load_cond for the one read), then the lock is taken again and the
 * entries installed.  Callers that looked up dentries before must look
 * again when dir_load says DIR_DROPPED (fsnodes are referenced, dentries
 * are not).
 */
static bool type_shown(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG: case S_IFDIR: case S_IFLNK:
	case S_IFIFO: case S_IFSOCK: case S_IFCHR: case S_IFBLK:
		return true;
	default:
		return false;
	}
}

/* One backend entry, read with the lock dropped. */
struct bent {
	char *name;
	struct stat st;
	char *target;		/* symlinks */
	ino_t local_ino;	/* refresh: the inode this node's file has there, 0 unknown */
	bool keep;		/* refresh: this node's file could not be asked: left as it is */
};

struct blist {
	struct bent *v;
	size_t n, cap;
	int dfd;
	bool at_root;
};

static int blist_add(void *arg, const char *name)
{
	struct blist *l = arg;
	struct bent e = { 0 };

	if (!name_valid(name) || backend_name_reserved(name, l->at_root))
		return 0;
	/*
	 * Vanished meanwhile (or replaced by what readlink refuses), or nothing
	 * the mount shows: left out.  Any other error fails the listing: an
	 * entry left out would read as removed from the backend (a revalidation
	 * drops it from the mount), a symlink as pointing nowhere.
	 */
	int r = bsys.fstatat(l->dfd, name, &e.st);
	if (r == -ENOENT || r == -ESTALE || (r == 0 && !type_shown(e.st.st_mode)))
		return 0;	/* (ESTALE: removed by another NFS client) */
	if (r < 0)
		return r;
	if (S_ISLNK(e.st.st_mode)) {
		char buf[4096];
		ssize_t len = bsys.readlinkat(l->dfd, name, buf, sizeof(buf) - 1);
		if (len == -ENOENT || len == -ESTALE || len == -EINVAL)
			return 0;
		if (len < 0)
			return (int)len;
		buf[len] = '\0';
		e.target = xstrdup(buf);
	}
	e.name = xstrdup(name);
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 64;
		l->v = xrealloc(l->v, l->cap * sizeof(*l->v));
	}
	l->v[l->n++] = e;
	return 0;
}

static void blist_free(struct blist *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i].name);
		free(l->v[i].target);
	}
	free(l->v);
	memset(l, 0, sizeof(*l));
}

static int bent_cmp(const void *a, const void *b)
{
	return strcmp(((const struct bent *)a)->name, ((const struct bent *)b)->name);
}

static struct bent *blist_find(struct blist *l, const char *name)
{
	struct bent key = { .name = (char *)name };
	return l->n ? bsearch(&key, l->v, l->n, sizeof(*l->v), bent_cmp) : NULL;
}

/* List dir's backend entries (no lock held): 0 or -errno; *st gets the directory's own. */
static int backend_list(struct ckptfs *fs, struct bnode *dir, bool at_root, struct blist *l,
			struct stat *st)
{
	int r;

	memset(l, 0, sizeof(*l));
	l->at_root = at_root;
	if ((l->dfd = bnode_dirfd(&fs->be, dir)) < 0)
		return l->dfd;
	if ((r = bsys.fstatat(l->dfd, "", st)) == 0)
		r = bsys.readdir(l->dfd, blist_add, l);
	bnode_dirfd_put(&fs->be, dir);
	l->dfd = -1;
	if (r < 0) {
		blist_free(l);
		return r;
	}
	if (l->n)
		qsort(l->v, l->n, sizeof(*l->v), bent_cmp);
	return 0;
}

/* A node's attributes and identity as the backend has them. */
static void attrs_from_backend(struct fsnode *n, const struct stat *st)
{
	pthread_mutex_lock(&n->alock);
	n->mode = st->st_mode;
	n->uid = st->st_uid;
	n->gid = st->st_gid;
	n->atime = st->st_atim;
	n->mtime = st->st_mtim;
	n->ctime = st->st_ctim;
	pthread_mutex_unlock(&n->alock);
	bstamp_of(st, &n->bid);
	n->bknown = true;
}

static struct fsnode *node_from_bent(struct ckptfs *fs, struct fsnode *dir, const struct bent *e)
{
	const struct stat *st = &e->st;
	struct fsnode *n = node_new(fs, st->st_mode, st->st_uid, st->st_gid);

	attrs_from_backend(n, st);
	if (S_ISREG(st->st_mode)) {
		n->ever_sealed = true;
		n->loaded_size = (uint64_t)st->st_size;
	} else if (S_ISLNK(st->st_mode)) {
		n->symlink = xstrdup(e->target ? e->target : "");
	} else if (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode)) {
		n->rdev = st->st_rdev;
	}
	bnode_set_loaded(&fs->be, n->b, dir->b, e->name);
	return n;
}

/* The first read of dir: install every entry (ns held, dir empty). */
static void install_all(struct ckptfs *fs, struct fsnode *dir, struct blist *l)
{
	struct fsnode *hardlinks[64];	/* multi-link files met in this directory */
	ino_t hl_ino[64];
	unsigned nhl = 0;

	for (size_t i = 0; i < l->n; i++) {
		const struct bent *e = &l->v[i];
		struct fsnode *n = NULL;
		if (S_ISREG(e->st.st_mode) && e->st.st_nlink > 1) {
			for (unsigned k = 0; k < nhl; k++)
				if (hl_ino[k] == e->st.st_ino)
					n = hardlinks[k];
			if (n)
				bnode_set_loaded(&fs->be, n->b, dir->b, e->name);
		}
		if (!n) {
			n = node_from_bent(fs, dir, e);
			if (S_ISREG(e->st.st_mode) && e->st.st_nlink > 1 && nhl < CKPT_ARRAY_LEN(hl_ino)) {
				hl_ino[nhl] = e->st.st_ino;
				hardlinks[nhl++] = n;
			}
		}
		dent_add(fs, dir, e->name, n);
	}
}

/* A directory's first listing, on a helper (bcall.h). */
struct list_call {
	struct bcall c;
	struct ckptfs *fs;
	struct bnode *b;
	bool at_root;
	struct blist l;
	struct stat st;
};

static int list_run(struct bcall *c)
{
	struct list_call *lc = CKPT_CONTAINER_OF(c, struct list_call, c);

	return backend_list(lc->fs, lc->b, lc->at_root, &lc->l, &lc->st);
}

static void list_drop(struct bcall *c)
{
	struct list_call *lc = CKPT_CONTAINER_OF(c, struct list_call, c);

	blist_free(&lc->l);
	bnode_put(lc->b);
	free(lc);
}

/* Read dir for the first time, dropping fs->ns meanwhile: 0 or -errno. */
static int dir_read_first(struct ckptfs *fs, struct fsnode *dir)
{
	struct list_call *lc = xcalloc(1, sizeof(*lc));
	uint64_t t0 = now_ns(), w0 = wall_ns();
	int err, r;

	lc->c = (struct bcall){ .run = list_run, .drop = list_drop, .what = "list a directory" };
	lc->fs = fs;
	lc->b = bnode_get(dir->b);
	lc->at_root = dir == fs->root;
	dir->loading = true;
	node_ref(dir);
	pthread_mutex_unlock(&fs->ns);
	if ((r = bcall_run(fs, &lc->c, &err)) == BCALL_GONE) {
		r = err;
		lc = NULL;
	}
	pthread_mutex_lock(&fs->ns);
	if (r == 0) {
		install_all(fs, dir, &lc->l);
		dir->loaded = true;
		dir->valid_ns = t0;
		dir->listed_wall_ns = w0;
		bstamp_of(&lc->st, &dir->stamp);
	}
	if (lc)
		list_drop(&lc->c);
	dir->loading = false;
	pthread_cond_broadcast(&fs->load_cond);
	node_unref(fs, dir);
	return r;
}

int dir_load(struct ckptfs *fs, struct fsnode *dir)
{
	int dropped = 0;

	while (!dir->loaded) {
		dropped = DIR_DROPPED;
		if (dir->loading) {
			pthread_cond_wait(&fs->load_cond, &fs->ns);
			continue;
		}
		int r = dir_read_first(fs, dir);
		if (r < 0)
			return r;
	}
	return dropped;
}

/* ---- revalidating loaded directories against the backend ------------------- */

/*
 * Other nodes (and other tools) change the backend.  A loaded directory is
 * revalidated when a lookup or listing finds its entries older than
 * attr_timeout: the refresher thread stats the backend directory and, if
 * its stamp (inode, mtime, ctime, size) changed — or is too recent to
 * trust, on file systems with coarse timestamps — lists it again, all with
 * fs->ns dropped, then merges under the lock:
 *
 *   - a name the backend gained appears, unless this node has a pending
 *     operation on that name (a whiteout of its own unlink or rename);
 *   - a name the backend lost disappears, unless this node has anything
 *     unpublished there: a pending operation on the name or on the object
 *     (or anywhere below a directory), a file not yet closed, open for
 *     writing, dirty or flushing, an object never published;
 *   - a name whose backend object changed — another inode (another node
 *     published a new version: always by rename) or the same inode with
 *     another size or mtime (rewritten in place by another tool) — gets a
 *     new node, so readers see the new contents: open descriptors keep the
 *     old node and what they had, as on a local file system, and the old
 *     node's clean cached chunks go with it.  Same object, other
 *     attributes: updated in place.  This node's own publications are
 *     recognised by the inode of the file it published (cfile_base_peek).
 * Names changed here while the refresher read, and files sealed or changed
 * meanwhile, are left as they are for the next round.  Requests wait for a
 * revalidation at most DIR_REFRESH_WAIT_MS: a stalled backend delays what
 * this node learns from others, never this node's own requests.
 */
#define STAMP_SLACK_NS (2000ull * 1000000)	/* trust an unchanged stamp this much after its time */

static void changed_note(struct fsnode *dir, const char *name)
{
	if (!dir->track)
		return;
	if (!dir->changed)
		dir->changed = xcalloc(1, sizeof(*dir->changed));
	strset_add(dir->changed, name);
}

static void changed_clear(struct fsnode *dir)
{
	if (dir->changed)
		strset_clear(dir->changed);
	free(dir->changed);
	dir->changed = NULL;
	dir->track = false;
}

static bool changed_has(const struct fsnode *dir, const char *name)
{
	return dir->changed && strset_has(dir->changed, name);
}

/* Local state that keeps n as this node sees it (ns held); budget bounds subtree walks. */
static bool node_busy(struct ckptfs *fs, struct fsnode *n, const struct pending_set *p,
		      unsigned *budget)
{
	if (!*budget || n->ctl || !atomic_load(&n->b->present) || pending_has_node(p, n->b))
		return true;
	(*budget)--;
	if (S_ISREG(n->mode))
		return n->new_file || n->writers || atomic_load(&n->b->sticky_err) ||
		       (n->cf && cfile_state(n->cf) != CF_DURABLE);
	if (S_ISDIR(n->mode))
		for (struct list *e = n->entries.next; e != &n->entries; e = e->next)
			if (node_busy(fs, list_entry(e, struct fsdent, dlink)->node, p, budget))
				return true;
	return false;
}

/* n left the backend: drop its subtree here; nothing can be made in it any more. */
static void node_prune(struct ckptfs *fs, struct fsnode *n, unsigned depth)
{
	if (!S_ISDIR(n->mode))
		return;
	n->gone = true;
	n->loaded = true;
	while (!list_empty(&n->entries) && depth < 4096) {
		struct fsdent *d = list_entry(n->entries.next, struct fsdent, dlink);
		node_prune(fs, d->node, depth + 1);
		dent_remove(fs, d);
	}
}

static void dent_drop(struct ckptfs *fs, struct fsnode *dir, struct fsdent *d)
{
	struct fsnode *n = d->node;

	log_debug("revalidation: '%s' left the backend or was replaced there", d->name);
	node_ref(n);
	bnode_set_unloaded(&fs->be, n->b, dir->b, d->name);
	dent_remove(fs, d);
	node_prune(fs, n, 0);
	node_unref(fs, n);
}

/* The backend object at a name is n's, perhaps with other attributes (ns held). */
static bool same_object(struct fsnode *n, const struct bent *e)
{
	ino_t ino = e->local_ino ? e->local_ino : n->bknown ? n->bid.ino : 0;

	if ((n->mode & S_IFMT) != (e->st.st_mode & S_IFMT))
		return false;
	if (ino && ino != e->st.st_ino)
		return false;
	if (S_ISREG(n->mode) && !e->local_ino) {
		/* The same inode rewritten in place (not by ckptfs, which renames). */
		uint64_t size = n->cf ? cfile_size(n->cf) : n->loaded_size;
		if ((uint64_t)e->st.st_size != size || !ts_eq(e->st.st_mtim, n->mtime))
			return false;
	}
	return true;
}

/* A local entry as the refresher saw it before listing (to confirm identities off the lock). */
struct snap {
	char *name;
	struct cfd *base;	/* its published file, for its inode */
	uint64_t base_ino;	/* ... or that inode, kept when the file is not open */
	bool unknown;		/* its file's lock was busy: not asked (cfile_base_peek) */
	struct bnode *dirb;	/* directories: their backend node, for their fd's inode */
	struct bstamp bid;
	bool bknown;
};

/*
 * Merge the backend's entries into dir (ns held): how many names changed
 * here; *kept is set if an entry its file could not be asked about was
 * left as it is.
 */
static unsigned dir_merge(struct ckptfs *fs, struct fsnode *dir, struct blist *l,
			  const struct pending_set *p, uint64_t seq0, bool *kept)
{
	unsigned changes = 0;

	/* What the backend lost, or holds as another object. */
	for (struct list *e = dir->entries.next; e != &dir->entries;) {
		struct fsdent *d = list_entry(e, struct fsdent, dlink);
		struct fsnode *n = d->node;
		struct bent *b = blist_find(l, d->name);
		unsigned budget = 100000;
		e = e->next;
		if (pending_has_name(p, d->name) || changed_has(dir, d->name) ||
		    n->seal_seq > seq0 || node_busy(fs, n, p, &budget))
			continue;	/* this node's own changes keep precedence */
		if (b && b->keep) {
			*kept = true;	/* not asked: asked again next round */
			continue;
		}
		if (b && same_object(n, b)) {
			struct bstamp bs;
			bstamp_of(&b->st, &bs);
			if (!n->bknown || !bstamp_eq(&n->bid, &bs))
				attrs_from_backend(n, &b->st);
			continue;
		}
		dent_drop(fs, dir, d);
		changes++;
	}
	/* What the backend gained (or holds anew under a name just dropped). */
	for (size_t i = 0; i < l->n; i++) {
		const struct bent *b = &l->v[i];
		if (dent_find(fs, dir, b->name) || pending_has_name(p, b->name) ||
		    changed_has(dir, b->name))
			continue;
		dent_add(fs, dir, b->name, node_from_bent(fs, dir, b));
		changes++;
	}
	return changes;
}

/* Revalidate dir against the backend (ns held on entry and exit, dropped meanwhile). */
static void dir_refresh(struct ckptfs *fs, struct fsnode *dir)
{
	uint64_t t0 = now_ns(), w0 = wall_ns(), seq0;
	struct pending_set p = { 0 };
	struct snap *sn = NULL;
	size_t nsn = 0;
	struct blist l = { 0 };
	struct stat st;
	struct bnode *db = dir->b;
	bool at_root = dir == fs->root;
	int dfd, r;

	if (dir->gone || !dir->loaded || !atomic_load(&db->present))
		goto done;
	/* Has the backend directory changed since it was listed? */
	pthread_mutex_unlock(&fs->ns);
	dfd = bnode_dirfd(&fs->be, db);
	r = dfd < 0 ? dfd : bsys.fstatat(dfd, "", &st);
	if (dfd >= 0)
		bnode_dirfd_put(&fs->be, db);
	pthread_mutex_lock(&fs->ns);
	if (r < 0)
		goto done;	/* gone or unreachable: its parent's revalidation will tell */
	struct bstamp now_stamp;
	bstamp_of(&st, &now_stamp);
	uint64_t stamp_time = CKPT_MAX((uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec,
				       (uint64_t)st.st_ctim.tv_sec * 1000000000ull + (uint64_t)st.st_ctim.tv_nsec);
	if (bstamp_eq(&now_stamp, &dir->stamp) && dir->listed_wall_ns > stamp_time + STAMP_SLACK_NS)
		goto done;
	/* Read it again: what this node has, then the backend, then merge. */
	size_t cap = 0;
	for (struct list *e = dir->entries.next; e != &dir->entries; e = e->next) {
		struct fsdent *d = list_entry(e, struct fsdent, dlink);
		struct fsnode *n = d->node;
		if (nsn == cap) {
			cap = cap ? cap * 2 : 64;
			sn = xrealloc(sn, cap * sizeof(*sn));
		}
		sn[nsn] = (struct snap){ .name = xstrdup(d->name), .bid = n->bid, .bknown = n->bknown };
		if (S_ISREG(n->mode) && n->cf) {
			sn[nsn].unknown = cfile_base_peek(n->cf, &sn[nsn].base,
							  &sn[nsn].base_ino) == -EBUSY;
		}
		else if (S_ISDIR(n->mode) && !n->bknown)
			sn[nsn].dirb = bnode_get(n->b);
		nsn++;
	}
	dir->track = true;
	seq0 = backend_last_seq(&fs->be);
	backend_pending_scan(&fs->be, db, &p);
	pthread_mutex_unlock(&fs->ns);
	r = backend_list(fs, db, at_root, &l, &st);
	bool kept = false;
	for (size_t i = 0; r == 0 && i < nsn; i++) {
		struct bent *b = blist_find(&l, sn[i].name);
		struct bstamp bs;
		struct stat ls;
		if (b)
			bstamp_of(&b->st, &bs);
		if (!b || (sn[i].bknown && bstamp_eq(&sn[i].bid, &bs)))
			continue;	/* gone, or unchanged since it was last seen */
		if (sn[i].unknown) {
			b->keep = true;	/* maybe its own new version: the next round asks */
			continue;
		}
		int fd = sn[i].base ? sn[i].base->fd : -1;
		if (sn[i].base_ino)
			b->local_ino = (ino_t)sn[i].base_ino;
		else if (sn[i].dirb && atomic_load(&sn[i].dirb->ino))
			b->local_ino = (ino_t)atomic_load(&sn[i].dirb->ino);
		else if (fd >= 0 && bsys.fstatat(fd, "", &ls) == 0)
			b->local_ino = ls.st_ino;
	}
	pthread_mutex_lock(&fs->ns);
	dir->track = false;	/* the merge's own changes are not the user's */
	if (r == 0) {
		backend_pending_scan(&fs->be, db, &p);	/* and what was queued meanwhile */
		if (!dir->gone && dir_merge(fs, dir, &l, &p, seq0, &kept))
			log_debug("revalidated a directory: the backend changed it");
		dir->listed_wall_ns = w0;
		bstamp_of(&st, &dir->stamp);
		if (kept)	/* not seen as unchanged next time: asked again */
			memset(&dir->stamp, 0, sizeof(dir->stamp));
	}
	changed_clear(dir);
	blist_free(&l);
	pending_free(&p);
	for (size_t i = 0; i < nsn; i++) {
		free(sn[i].name);
		cfd_put(sn[i].base);
		bnode_put(sn[i].dirb);
	}
	free(sn);
done:
	dir->valid_ns = t0;
}

static void *refresher_main(void *arg)
{
	struct ckptfs *fs = arg;

	pthread_mutex_lock(&fs->ns);
	while (!fs->refresher_stop) {
		if (list_empty(&fs->refresh_q)) {
			pthread_cond_wait(&fs->refresh_cond, &fs->ns);
			continue;
		}
		struct fsnode *dir = list_entry(fs->refresh_q.next, struct fsnode, rlink);
		list_del(&dir->rlink);
		dir_refresh(fs, dir);
		dir->refreshing = false;
		pthread_cond_broadcast(&fs->load_cond);
		node_unref(fs, dir);
	}
	while (!list_empty(&fs->refresh_q)) {
		struct fsnode *dir = list_entry(fs->refresh_q.next, struct fsnode, rlink);
		list_del(&dir->rlink);
		dir->refreshing = false;
		node_unref(fs, dir);
	}
	pthread_mutex_unlock(&fs->ns);
	return NULL;
}

int dir_fresh(struct ckptfs *fs, struct fsnode *dir)
{
	int r = dir_load(fs, dir);
	uint64_t now = now_ns();

	if (r < 0 || dir->ctl || dir->gone || !fs->refresher_started ||
	    now - dir->valid_ns < (uint64_t)(fs->opt.attr_timeout * 1e9) ||
	    !atomic_load(&dir->b->present))
		return r;
	if (!dir->refreshing) {
		dir->refreshing = true;
		dir->refresh_deadline_ns = now + DIR_REFRESH_WAIT_MS * 1000000ull;
		node_ref(dir);
		list_add_tail(&fs->refresh_q, &dir->rlink);
		pthread_cond_signal(&fs->refresh_cond);
	}
	while (dir->refreshing && (now = now_ns()) < dir->refresh_deadline_ns) {
		cond_wait_ns(&fs->load_cond, &fs->ns, dir->refresh_deadline_ns - now);
		r = DIR_DROPPED;
	}
	return r;
}

void fs_refresher_stop(struct ckptfs *fs)
{
	pthread_mutex_lock(&fs->ns);
	bool started = fs->refresher_started;
	fs->refresher_stop = true;
	fs->refresher_started = false;
	pthread_cond_signal(&fs->refresh_cond);
	pthread_mutex_unlock(&fs->ns);
	if (started)
		pthread_join(fs->refresher, NULL);
}

/* Opening a file's published version, on a helper (bcall.h). */
struct open_call {
	struct bcall c;
	struct ckptfs *fs;
	struct bnode *b;
	int fd;
	uint64_t ino;		/* what it opened (0: not known) */
};

static int open_run(struct bcall *c)
{
	struct open_call *o = CKPT_CONTAINER_OF(c, struct open_call, c);
	struct stat st;

	o->fd = bnode_open(&o->fs->be, o->b, O_RDONLY);
	if (o->fd >= 0 && fstat(o->fd, &st) == 0)
		o->ino = st.st_ino;
	return o->fd < 0 ? o->fd : 0;
}

static void open_drop(struct bcall *c)
{
	struct open_call *o = CKPT_CONTAINER_OF(c, struct open_call, c);

	if (o->fd >= 0)
		bsys.close(o->fd);
	bnode_put(o->b);
	free(o);
}

int node_open_base(struct ckptfs *fs, struct fsnode *n)
{
	struct open_call *o = xcalloc(1, sizeof(*o));
	int err, r;

	o->c = (struct bcall){ .run = open_run, .drop = open_drop, .what = "open a file" };
	o->fs = fs;
	o->b = bnode_get(n->b);
	o->fd = -1;
	if ((r = bcall_run(fs, &o->c, &err)) == BCALL_GONE)
		return err;
	int fd = o->fd;
	uint64_t ino = o->ino;
	bnode_put(o->b);
	free(o);
	if (r < 0)
		return r;
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);	/* restores read whole files */
	if ((r = cfile_set_base_fd(n->cf, fd, ino, atomic_load(&n->b->published_ino))) < 0) {
		/*
		 * Another file has its name now: another node's version, or
		 * one a user put there.  Neither is served as this file's; the
		 * next lookup of the name revalidates its directory (op_lookup).
		 */
		static struct ckpt_ratelimit told;
		atomic_store(&n->base_stale, true);
		ckpt_log_limited(&told, 10ull * 1000000000ull, LOG_WARNING,
				 "backend: a published file was replaced by another (inode %llu "
				 "now); not read as the file this mount knows: ESTALE until its "
				 "directory is looked at again", (unsigned long long)ino);
	}
	return r;
}

struct bnode *fs_stage_dir(void *arg, struct cfile *cf)
{
	struct ckptfs *fs = arg;
	struct fsnode *n;
	struct bnode *b = NULL;

	/* cf->owner is cleared under fs->ns when the node goes away. */
	pthread_mutex_lock(&fs->ns);
	n = cf->owner;
	if (n) {
		struct fsdent *d = node_first_dent(n);
		if (d && atomic_load(&d->parent->b->present))
			b = bnode_get(d->parent->b);
	}
	pthread_mutex_unlock(&fs->ns);
	return b;
}

/* ---- setup --------------------------------------------------------------- */

int fs_init_namespace(struct ckptfs *fs)
{
	struct stat st;

	pthread_mutex_init(&fs->ns, NULL);
	pthread_cond_init(&fs->load_cond, NULL);
	pthread_cond_init(&fs->refresh_cond, NULL);
	list_init(&fs->refresh_q);
	list_init(&fs->all_nodes);
	int r = bsys.fstatat(fs->root_fd, "", &st);
	if (r < 0)
		return r;
	fs->root = node_new(fs, st.st_mode, st.st_uid, st.st_gid);
	fs->root->atime = st.st_atim;
	fs->root->mtime = st.st_mtim;
	fs->root->ctime = st.st_ctim;
	/* The root's backend node is the backend's own root. */
	bnode_put(fs->root->b);
	fs->root->b = bnode_get(fs->be.root);
	fs->root->refs = 1;
	if (pthread_create(&fs->refresher, NULL, refresher_main, fs) == 0)
		fs->refresher_started = true;
	else
		log_warn("cannot start the directory refresher: what other nodes publish will not "
			 "appear in loaded directories");
	return 0;
}

void fs_free_namespace(struct ckptfs *fs)
{
	for (size_t i = 0; i < fs->hsize; i++) {
		struct fsdent *d = fs->htab[i];
		while (d) {
			struct fsdent *next = d->hnext;
			free(d);
			d = next;
		}
	}
	free(fs->htab);
	fs->htab = NULL;
	fs->hsize = fs->hcount = 0;
	while (!list_empty(&fs->all_nodes)) {
		struct fsnode *n = list_entry(fs->all_nodes.next, struct fsnode, all);
		list_init(&n->dents);
		n->nlookup = 0;
		n->refs = 0;
		node_free(fs, n);
	}
	fs->root = NULL;
}
