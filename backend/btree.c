/*
 * btree.c — backend nodes: where each object of the mount lives on the
 * backend after the applied prefix, and directory fds to reach it.
 *
 * Every backend access is relative to a directory fd and a single name that
 * never contains '/' and is never ".." ("." only for the root itself);
 * directory fds are opened one component at a time with O_NOFOLLOW|
 * O_DIRECTORY from the backend root, through the bsys table (bsys.h C1-C3).
 * So no name and no symlink on the backend can lead outside the backend
 * tree: a symlink planted where a directory was is refused (-ELOOP, logged).
 *
 * Links are guarded by be->bt_lock (P6).  A directory's fd, once opened,
 * stays open until the bnode is freed: it follows the directory through
 * renames, so holders need no lock to use it.
 */
#include "backend/backend.h"
#include "backend/bsys.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct bnode *bnode_new(bool is_dir)
{
	struct bnode *b = xcalloc(1, sizeof(*b));
	atomic_init(&b->refs, 1);
	atomic_init(&b->present, false);
	atomic_init(&b->dfd, -1);
	atomic_init(&b->has_digest, false);
	b->is_dir = is_dir;
	return b;
}

struct bnode *bnode_get(struct bnode *b)
{
	if (b)
		atomic_fetch_add(&b->refs, 1);
	return b;
}

void bnode_put(struct bnode *b)
{
	while (b && atomic_fetch_sub(&b->refs, 1) == 1) {
		struct bnode *next = NULL;
		int fd = atomic_load(&b->dfd);
		if (fd >= 0 && !b->is_root)
			bsys.close(fd);
		for (uint32_t i = 0; i < b->nlinks; i++) {
			/* Release parents iteratively: deep trees must not recurse. */
			if (i == 0)
				next = b->links[i].dir;
			else
				bnode_put(b->links[i].dir);
			free(b->links[i].name);
		}
		free(b->links);
		free(b);
		b = next;
	}
}

bool backend_name_reserved(const char *name, bool at_root)
{
	if (strncmp(name, CKPTFS_RESERVED_PREFIX, sizeof(CKPTFS_RESERVED_PREFIX) - 1) == 0)
		return true;
	return at_root && strcmp(name, CKPTFS_META_DIR) == 0;
}

static int open_dir_at(int parent, const char *name)
{
	int fd = bsys.openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
	if (fd == -EACCES)
		fd = bsys.openat(parent, name, O_PATH | O_DIRECTORY | O_NOFOLLOW, 0);
	return fd;
}

void backend_move_wait(struct backend *be)
{
	pthread_rwlock_rdlock(&be->mv_lock);
	pthread_rwlock_unlock(&be->mv_lock);
}

static int dirfd_open(struct backend *be, struct bnode *dir);

int bnode_dirfd(struct backend *be, struct bnode *dir)
{
	int fd = dirfd_open(be, dir);

	if (fd == -ENOENT) {	/* a rename may have moved it under us */
		backend_move_wait(be);
		fd = dirfd_open(be, dir);
	}
	return fd;
}

int bnode_at(struct backend *be, struct bnode *b, int (*fn)(void *arg, int dfd, const char *name),
	     void *arg)
{
	if (b->is_root)		/* the root has no parent: "." in itself */
		return fn(arg, be->root_fd, ".");
	for (int attempt = 0;; attempt++) {
		struct bnode *dir = NULL;
		char name[256];
		int r = bnode_locate(be, b, &dir, name, sizeof(name)), d;

		if (r == 0) {
			d = bnode_dirfd(be, dir);
			r = d < 0 ? d : fn(arg, d, name);
			bnode_put(dir);
		}
		if (r != -ENOENT || attempt)
			return r;
		backend_move_wait(be);
	}
}

static int open_at(void *arg, int dfd, const char *name)
{
	return bsys.openat(dfd, name, *(int *)arg | O_NOFOLLOW, 0);
}

int bnode_open(struct backend *be, struct bnode *b, int flags)
{
	return bnode_at(be, b, open_at, &flags);
}

static int dirfd_open(struct backend *be, struct bnode *dir)
{
	struct bnode *chain[64];
	unsigned n = 0;
	int fd = atomic_load(&dir->dfd);

	if (fd >= 0)
		return fd;
	pthread_rwlock_rdlock(&be->bt_lock);
	/* Walk up to the nearest ancestor with an open fd. */
	for (struct bnode *b = dir; atomic_load(&b->dfd) < 0;) {
		if (!b->nlinks || !atomic_load(&b->present)) {
			pthread_rwlock_unlock(&be->bt_lock);
			return -ENOENT;
		}
		if (n == CKPT_ARRAY_LEN(chain)) {
			/* Very deep: open the top of this stretch first, then retry. */
			pthread_rwlock_unlock(&be->bt_lock);
			fd = bnode_dirfd(be, chain[n - 1]);
			if (fd < 0)
				return fd;
			return bnode_dirfd(be, dir);
		}
		chain[n++] = b;
		b = b->links[0].dir;
	}
	/* Open downwards, one component at a time. */
	while (n--) {
		struct bnode *b = chain[n];
		int parent = atomic_load(&b->links[0].dir->dfd);
		int expect = -1;
		fd = open_dir_at(parent, b->links[0].name);
		if (fd < 0)
			break;
		if (!atomic_compare_exchange_strong(&b->dfd, &expect, fd)) {
			bsys.close(fd);
			fd = expect;
		}
	}
	pthread_rwlock_unlock(&be->bt_lock);
	return fd;
}

int bnode_locate(struct backend *be, struct bnode *b, struct bnode **dir, char *name, size_t len)
{
	int r = -ENOENT;

	pthread_rwlock_rdlock(&be->bt_lock);
	if (b->nlinks && atomic_load(&b->present)) {
		size_t n = strlen(b->links[0].name);
		if (n >= len) {
			r = -ENAMETOOLONG;
		} else {
			memcpy(name, b->links[0].name, n + 1);
			*dir = bnode_get(b->links[0].dir);
			r = 0;
		}
	}
	pthread_rwlock_unlock(&be->bt_lock);
	return r;
}

/* ---- link bookkeeping (bt_lock held for writing) ------------------ */

void bnode_link_add_locked(struct bnode *b, struct bnode *dir, const char *name)
{
	b->links = xrealloc(b->links, (b->nlinks + 1) * sizeof(*b->links));
	b->links[b->nlinks].dir = bnode_get(dir);
	b->links[b->nlinks].name = xstrdup(name);
	b->nlinks++;
	atomic_store(&b->present, true);
}

static int link_find(struct bnode *b, struct bnode *dir, const char *name)
{
	for (uint32_t i = 0; i < b->nlinks; i++)
		if (b->links[i].dir == dir && strcmp(b->links[i].name, name) == 0)
			return (int)i;
	return -1;
}

void bnode_link_del_locked(struct bnode *b, struct bnode *dir, const char *name)
{
	int i = link_find(b, dir, name);

	if (i < 0)
		return;
	bnode_put(b->links[i].dir);
	free(b->links[i].name);
	memmove(&b->links[i], &b->links[i + 1], (b->nlinks - (uint32_t)i - 1) * sizeof(*b->links));
	if (--b->nlinks == 0)
		atomic_store(&b->present, false);
}

void bnode_link_move_locked(struct bnode *b, struct bnode *dir, const char *name,
			    struct bnode *ndir, const char *nname)
{
	int i = link_find(b, dir, name);

	if (i < 0) {
		bnode_link_add_locked(b, ndir, nname);
		return;
	}
	bnode_get(ndir);
	bnode_put(b->links[i].dir);
	b->links[i].dir = ndir;
	free(b->links[i].name);
	b->links[i].name = xstrdup(nname);
}

/* Make (dir, name) the primary link, keeping any others. */
void bnode_link_primary_locked(struct bnode *b, struct bnode *dir, const char *name)
{
	int i = link_find(b, dir, name);

	if (i < 0) {
		bnode_link_add_locked(b, dir, name);
		i = (int)b->nlinks - 1;
	}
	if (i > 0) {
		struct blink t = b->links[0];
		b->links[0] = b->links[i];
		b->links[i] = t;
	}
	atomic_store(&b->present, true);
}

void bnode_set_loaded(struct backend *be, struct bnode *b, struct bnode *dir, const char *name)
{
	pthread_rwlock_wrlock(&be->bt_lock);
	if (link_find(b, dir, name) < 0)
		bnode_link_add_locked(b, dir, name);
	pthread_rwlock_unlock(&be->bt_lock);
}

void bnode_set_unloaded(struct backend *be, struct bnode *b, struct bnode *dir, const char *name)
{
	pthread_rwlock_wrlock(&be->bt_lock);
	bnode_link_del_locked(b, dir, name);
	pthread_rwlock_unlock(&be->bt_lock);
}

int bnode_path(struct backend *be, struct bnode *dir, const char *name, char *buf, size_t len)
{
	const char *parts[256];
	size_t k = 0, pos = 0;
	int r = 0;

	if (name)
		parts[k++] = name;
	pthread_rwlock_rdlock(&be->bt_lock);
	for (struct bnode *b = dir; b && !b->is_root; b = b->links[0].dir) {
		if (!b->nlinks || k == CKPT_ARRAY_LEN(parts)) {
			r = -ENOENT;
			break;
		}
		parts[k++] = b->links[0].name;
	}
	buf[0] = '\0';
	while (r == 0 && k--) {
		int w = snprintf(buf + pos, len - pos, "%s%s", pos ? "/" : "", parts[k]);
		if (w < 0 || (size_t)w >= len - pos)
			r = -ENAMETOOLONG;
		else
			pos += (size_t)w;
	}
	pthread_rwlock_unlock(&be->bt_lock);
	return r;
}
