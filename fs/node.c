/*
 * node.c — the mount's namespace: nodes, dentries, the dentry hash, and the
 * lazy loading of directories from the backend.  Lock rules in fs.h; every
 * function here expects fs->ns held unless its comment says otherwise.
 *
 * A node's inode number is its address (root: FUSE_ROOT_ID).  A node lives
 * while the kernel holds lookups on it (nlookup) or anything here holds a
 * reference (refs: one per dentry naming it, one per open handle, one per
 * directory snapshot entry).
 */
#include "fs/fs.h"
#include "cache/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

struct fsnode *fs_node(struct ckptfs *fs, fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? fs->root : (struct fsnode *)(uintptr_t)ino;
}

fuse_ino_t fs_ino(struct ckptfs *fs, struct fsnode *n)
{
	return n == fs->root ? FUSE_ROOT_ID : (fuse_ino_t)(uintptr_t)n;
}

struct fsnode *node_new(struct ckptfs *fs, mode_t mode, uid_t uid, gid_t gid)
{
	struct fsnode *n = xcalloc(1, sizeof(*n));
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	list_init(&n->dents);
	list_init(&n->entries);
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

void node_forget(struct ckptfs *fs, struct fsnode *n, uint64_t nlookup)
{
	n->nlookup = nlookup > n->nlookup ? 0 : n->nlookup - nlookup;
	node_maybe_free(fs, n);
}

struct cfile *node_cfile(struct ckptfs *fs, struct fsnode *n)
{
	if (!n->cf) {
		n->cf = cfile_new(&fs->cache, n);
		if (n->ever_sealed && n->loaded_size)
			cfile_set_base_lazy(n->cf, n->loaded_size, 1);
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

static struct fsnode *node_from_stat(struct ckptfs *fs, struct fsnode *dir, const char *name,
				     const struct stat *st, int dfd)
{
	struct fsnode *n = node_new(fs, st->st_mode, st->st_uid, st->st_gid);

	n->atime = st->st_atim;
	n->mtime = st->st_mtim;
	n->ctime = st->st_ctim;
	if (S_ISREG(st->st_mode)) {
		n->ever_sealed = true;
		n->loaded_size = (uint64_t)st->st_size;
	} else if (S_ISLNK(st->st_mode)) {
		char buf[4096];
		ssize_t len = bsys.readlinkat(dfd, name, buf, sizeof(buf) - 1);
		buf[len < 0 ? 0 : len] = '\0';
		n->symlink = xstrdup(buf);
	} else if (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode)) {
		n->rdev = st->st_rdev;
	}
	bnode_set_loaded(&fs->be, n->b, dir->b, name);
	return n;
}

struct dir_loader {
	struct ckptfs *fs;
	struct fsnode *dir;
	int dfd;
	struct fsnode *hardlinks[64];	/* multi-link files met in this directory */
	ino_t hl_ino[64];
	unsigned nhl;
};

static int dir_load_entry(void *arg, const char *name)
{
	struct dir_loader *l = arg;
	struct ckptfs *fs = l->fs;
	struct fsnode *n = NULL;
	struct stat st;

	if (!name_valid(name) || backend_name_reserved(name, l->dir == fs->root))
		return 0;
	if (bsys.fstatat(l->dfd, name, &st) < 0)
		return 0;	/* vanished meanwhile */
	if (!type_shown(st.st_mode))
		return 0;
	if (S_ISREG(st.st_mode) && st.st_nlink > 1) {
		for (unsigned i = 0; i < l->nhl; i++)
			if (l->hl_ino[i] == st.st_ino)
				n = l->hardlinks[i];
		if (n)
			bnode_set_loaded(&fs->be, n->b, l->dir->b, name);
	}
	if (!n) {
		n = node_from_stat(fs, l->dir, name, &st, l->dfd);
		if (S_ISREG(st.st_mode) && st.st_nlink > 1 && l->nhl < CKPT_ARRAY_LEN(l->hl_ino)) {
			l->hl_ino[l->nhl] = st.st_ino;
			l->hardlinks[l->nhl++] = n;
		}
	}
	dent_add(fs, l->dir, name, n);
	return 0;
}

int dir_load(struct ckptfs *fs, struct fsnode *dir)
{
	struct dir_loader l = { .fs = fs, .dir = dir };
	int r;

	if (dir->loaded)
		return 0;
	if ((l.dfd = bnode_dirfd(&fs->be, dir->b)) < 0)
		return l.dfd;
	if ((r = bsys.readdir(l.dfd, dir_load_entry, &l)) < 0)
		return r;
	dir->loaded = true;
	return 0;
}

int node_open_base(struct ckptfs *fs, struct fsnode *n)
{
	int fd = bnode_open(&fs->be, n->b, O_RDONLY);

	if (fd < 0)
		return fd;
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);	/* restores read whole files */
	cfile_set_base_fd(n->cf, fd);
	return 0;
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
