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
 * Links are guarded by be->bt_lock (P6).  A directory's fd follows the
 * directory through renames, so a holder (bnode_dirfd .. bnode_dirfd_put)
 * needs no lock to use it.  It would follow it out of the backend too (its
 * owner may move it anywhere in the same file system): so each time a
 * cached fd is handed out, its ".." chain is checked to reach the backend
 * root (dfd_check: at the depth its links say, in one call, as a rule),
 * and an fd that does not is replaced by what its name holds now (or
 * refused, -ENOENT).  Open fds are bounded: beyond be->dfd_cap (an
 * eighth of RLIMIT_NOFILE), the least recently used idle ones are closed
 * and reopened by name when next wanted — a checkpoint of tens of
 * thousands of directories (one per array, as tensorstore writes them)
 * must not run the daemon out of descriptors.  be->dfd_lock guards dfd,
 * dfd_users and the LRU list; it is taken after bt_lock, never before.
 */
#include "backend/backend.h"
#include "backend/bsys.h"
#include "cache/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

struct bnode *bnode_new(bool is_dir)
{
	struct bnode *b = xcalloc(1, sizeof(*b));
	atomic_init(&b->refs, 1);
	atomic_init(&b->present, false);
	b->dfd = -1;
	list_init(&b->dfd_lru);
	list_init(&b->stemps);
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

/* Forget b's fd (be->dfd_lock held); the caller closes it. */
static int dfd_unlink_locked(struct backend *be, struct bnode *b)
{
	int fd = b->dfd;

	list_del(&b->dfd_lru);
	b->dfd = -1;
	be->dfd_open--;
	return fd;
}

void bnode_put(struct bnode *b)
{
	while (b && atomic_fetch_sub(&b->refs, 1) == 1) {
		struct bnode *next = NULL;
		struct backend *be = b->dfd_home;	/* written once, by a holder of a reference */
		if (be) {
			pthread_mutex_lock(&be->dfd_lock);
			int fd = b->dfd >= 0 ? dfd_unlink_locked(be, b) : -1;
			pthread_mutex_unlock(&be->dfd_lock);
			if (fd >= 0)
				bsys.close(fd);
		}
		for (uint32_t i = 0; i < b->nlinks; i++) {
			/* Release parents iteratively: deep trees must not recurse. */
			if (i == 0)
				next = b->links[i].dir;
			else
				bnode_put(b->links[i].dir);
			free(b->links[i].name);
		}
		free(b->links);
		bnode_put(b->stage);	/* unused at the stop (stage_remove_all) */
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
static int dfd_check(struct backend *be, struct bnode *dir, int fd);

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
			if (d >= 0)
				bnode_dirfd_put(be, dir);
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

/* Take dir's fd if it is open (be->dfd_lock held): the fd, or -1. */
static int dfd_take_locked(struct backend *be, struct bnode *dir)
{
	if (dir->dfd < 0)
		return -1;
	dir->dfd_users++;
	if (!dir->is_root) {	/* most recently used last */
		list_del(&dir->dfd_lru);
		list_add_tail(&be->dfd_lru, &dir->dfd_lru);
	}
	return dir->dfd;
}

/* Close idle fds, least recently used first, while more than the cap are open. */
static void dfd_trim(struct backend *be)
{
	int close_fds[16];
	unsigned n = 0;

	pthread_mutex_lock(&be->dfd_lock);
	for (struct list *e = be->dfd_lru.next; e != &be->dfd_lru && be->dfd_open > be->dfd_cap &&
						n < CKPT_ARRAY_LEN(close_fds);) {
		struct bnode *b = list_entry(e, struct bnode, dfd_lru);
		e = e->next;
		if (!b->dfd_users)
			close_fds[n++] = dfd_unlink_locked(be, b);
	}
	pthread_mutex_unlock(&be->dfd_lock);
	for (unsigned i = 0; i < n; i++)
		bsys.close(close_fds[i]);
	atomic_fetch_add(&be->st.dir_fd_closes, n);
}

void bnode_dirfd_put(struct backend *be, struct bnode *dir)
{
	bool trim;

	pthread_mutex_lock(&be->dfd_lock);
	dir->dfd_users--;
	trim = !dir->dfd_users && be->dfd_open > be->dfd_cap;
	pthread_mutex_unlock(&be->dfd_lock);
	if (trim)
		dfd_trim(be);
}

void bnode_dirfds_close(struct backend *be)
{
	uint32_t cap = be->dfd_cap;

	be->dfd_cap = 0;
	while (be->dfd_open) {
		uint32_t before = be->dfd_open;
		dfd_trim(be);
		if (be->dfd_open == before)
			break;		/* the rest are held */
	}
	be->dfd_cap = cap;
}

uint32_t fd_limit_share(unsigned div, uint32_t lo, uint32_t hi)
{
	struct rlimit rl;
	uint64_t share = 1024 / div;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		share = rl.rlim_cur / div;
	return (uint32_t)CKPT_MAX(CKPT_MIN(share, hi), lo);
}

static int dfd_install(struct backend *be, struct bnode *dir, int fd);

/*
 * Open dir's fd, one component at a time from the nearest ancestor whose fd
 * is open (iteratively: trees may be deep), and take it.  Each component is
 * opened by its recorded name with bt_lock held for reading, so the
 * publisher cannot move a name between the read and the open (P6): the
 * open finds that directory, or nothing (-ENOENT).  If a component moved
 * since the walk up, the walk starts again.
 */
static int dirfd_open(struct backend *be, struct bnode *dir)
{
	struct bnode **chain = NULL;	/* chain[0] = dir, then its ancestors; each a reference */
	size_t n = 0, cap = 0;
	int fd;

	pthread_mutex_lock(&be->dfd_lock);
	fd = dfd_take_locked(be, dir);
	pthread_mutex_unlock(&be->dfd_lock);
	if (fd >= 0) {
		/*
		 * Removed (rmdir, or replaced by a rename) since its fd was cached:
		 * never hand out a dead directory.  A create in one fails with
		 * ENOENT, or EPERM on ext4 while its link count is already 0.
		 */
		int r = atomic_load(&dir->present) ? dfd_check(be, dir, fd) : -ENOENT;
		if (r == 0)
			return fd;
		bnode_dirfd_put(be, dir);
		return r;
	}
again:
	for (struct bnode *b = bnode_get(dir);;) {
		struct bnode *up;
		if (n == cap)
			chain = xrealloc(chain, (cap = cap ? cap * 2 : 16) * sizeof(*chain));
		chain[n++] = b;
		pthread_rwlock_rdlock(&be->bt_lock);
		if (!b->nlinks || !atomic_load(&b->present)) {
			pthread_rwlock_unlock(&be->bt_lock);
			fd = -ENOENT;
			goto out;
		}
		up = bnode_get(b->links[0].dir);
		pthread_rwlock_unlock(&be->bt_lock);
		pthread_mutex_lock(&be->dfd_lock);
		fd = dfd_take_locked(be, up);
		pthread_mutex_unlock(&be->dfd_lock);
		if (fd >= 0) {
			int r = dfd_check(be, up, fd);
			if (r < 0) {
				bnode_dirfd_put(be, up);
				bnode_put(up);
				fd = r;
				goto out;
			}
			b = up;
			/* Downwards: b is open and taken (fd); chain[n-1] is its child. */
			while (n) {
				struct bnode *c = chain[n - 1];
				int cfd = -1;
				pthread_rwlock_rdlock(&be->bt_lock);
				bool moved = !c->nlinks || c->links[0].dir != b || !atomic_load(&c->present);
				if (!moved)
					cfd = open_dir_at(fd, c->links[0].name);
				pthread_rwlock_unlock(&be->bt_lock);
				bnode_dirfd_put(be, b);
				bnode_put(b);
				if (moved)
					goto again_clean;
				if (cfd < 0) {
					fd = cfd;
					goto out;
				}
				fd = dfd_install(be, c, cfd);
				b = c;		/* its reference moves from the chain */
				n--;
			}
			bnode_put(b);		/* dir: the caller holds its own reference */
			free(chain);
			return fd;
		}
		b = up;
	}
again_clean:
	while (n)
		bnode_put(chain[--n]);
	goto again;
out:
	while (n)
		bnode_put(chain[--n]);
	free(chain);
	return fd;
}

/*
 * How many links down from the backend root dir is, with bt_lock held for
 * reading; 0 if its chain does not reach the root (an ancestor removed).
 */
static uint32_t depth_locked(const struct bnode *dir)
{
	uint32_t depth = 0;
	const struct bnode *b = dir;

	for (; b && !b->is_root; b = bnode_up_locked(b))
		depth++;
	return b ? depth : 0;
}

/*
 * Open dir again by its names, one component at a time from the backend
 * root, and put it in place of fd (dup3: holders of fd use it from now on).
 * Under mv_lock and bt_lock for reading: no move of the publisher's is
 * between the names read and the opens.  0, or -errno (fd left as it was;
 * every use checks it again).
 */
static int dfd_reopen(struct backend *be, struct bnode *dir, int fd, int why)
{
	static struct ckpt_ratelimit rl;
	const struct bnode **chain = NULL;
	size_t n = 0, cap = 0;
	int cur = be->root_fd, r = 0;
	char name[256] = "";

	pthread_rwlock_rdlock(&be->mv_lock);
	pthread_rwlock_rdlock(&be->bt_lock);
	for (const struct bnode *b = dir; !b->is_root; b = bnode_up_locked(b)) {
		if (!b->nlinks) {
			r = -ENOENT;
			break;
		}
		if (n == cap)
			chain = xrealloc(chain, (cap = cap ? cap * 2 : 16) * sizeof(*chain));
		chain[n++] = b;
	}
	if (dir->nlinks)
		snprintf(name, sizeof(name), "%s", dir->links[0].name);
	while (r == 0 && n) {
		const struct bnode *c = chain[--n];
		int nfd = open_dir_at(cur, c->links[0].name);
		if (cur != be->root_fd)
			bsys.close(cur);
		cur = nfd;
		r = nfd < 0 ? nfd : 0;
	}
	pthread_rwlock_unlock(&be->bt_lock);
	pthread_rwlock_unlock(&be->mv_lock);
	free(chain);
	if (r == 0 && !bsys_same_file(cur, fd)) {
		ckpt_log_limited(&rl, 10ull * 1000000000, LOG_WARNING,
				 "backend: directory '%s' was moved away from its place (%s); "
				 "what its name holds now is used, not the directory moved",
				 name, strerror(-why));
		if (dup3(cur, fd, O_CLOEXEC) < 0)
			r = -errno;
	}
	if (cur >= 0 && cur != be->root_fd)
		bsys.close(cur);
	if (r < 0)
		ckpt_log_limited(&rl, 10ull * 1000000000, LOG_WARNING,
				 "backend: directory '%s' was moved away from its place (%s) and "
				 "its name cannot be opened (%s): not followed",
				 name, strerror(-why), strerror(-r));
	return r;
}

/*
 * Is fd (dir's, taken) still beneath the backend root?  Where its links
 * say, as a rule; anywhere beneath it is accepted (a move by its owner
 * within the backend is followed, as before).  If not, once more after any
 * move of the publisher's in flight (P6's gap), it is reopened by name
 * (dfd_reopen).  0, or -errno: do not use fd.
 */
static int dfd_check(struct backend *be, struct bnode *dir, int fd)
{
	int r = -ENOENT;

	if (dir->is_root)
		return 0;
	for (int attempt = 0; attempt < 2 && r < 0; attempt++) {
		if (attempt)
			backend_move_wait(be);
		pthread_rwlock_rdlock(&be->bt_lock);
		uint32_t depth = depth_locked(dir);
		r = depth ? bsys_beneath(fd, depth, be->root_dev, be->root_ino) : -ENOENT;
		pthread_rwlock_unlock(&be->bt_lock);
		if (!depth)
			return -ENOENT;	/* removed from the mount's tree meanwhile */
	}
	return r == 0 ? 0 : dfd_reopen(be, dir, fd, r);
}

/* Keep the fd just opened for dir, unless another thread was first; take it. */
static int dfd_install(struct backend *be, struct bnode *dir, int fd)
{
	struct stat st;

	if (atomic_load(&dir->ino) == 0 && bsys.fstatat(fd, "", &st) == 0)
		atomic_store(&dir->ino, st.st_ino);
	pthread_mutex_lock(&be->dfd_lock);
	int have = dfd_take_locked(be, dir);
	if (have < 0) {
		dir->dfd = fd;
		dir->dfd_users++;
		dir->dfd_home = be;
		list_add_tail(&be->dfd_lru, &dir->dfd_lru);
		be->dfd_open++;
	}
	bool trim = be->dfd_open > be->dfd_cap;
	pthread_mutex_unlock(&be->dfd_lock);
	if (have >= 0) {	/* another thread opened it meanwhile */
		bsys.close(fd);
		fd = have;
	}
	if (trim)
		dfd_trim(be);
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

const struct bnode *bnode_up_locked(const struct bnode *b)
{
	return b->is_root || !b->nlinks ? NULL : b->links[0].dir;
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
	return bnode_path_planned(be, dir, name, buf, len, NULL, 0);
}

const struct bplan *bplan_find(const struct bplan *plan, unsigned n, const struct bnode *b)
{
	for (unsigned i = n; i-- > 0;)	/* the latest plan for it */
		if (plan[i].node == b)
			return &plan[i];
	return NULL;
}

int bnode_path_planned(struct backend *be, const struct bnode *dir, const char *name, char *buf,
		       size_t len, const struct bplan *plan, unsigned nplan)
{
	const char *parts[BACKEND_PATH_PARTS];
	size_t k = 0, pos = 0;
	int r = 0;

	if (name)
		parts[k++] = name;
	pthread_rwlock_rdlock(&be->bt_lock);
	for (const struct bnode *b = dir; b && !b->is_root;) {
		const struct bplan *p = bplan_find(plan, nplan, b);	/* made or moved earlier */
		if (!b->nlinks && !p) {
			r = -ENOENT;
			break;
		}
		if (k == CKPT_ARRAY_LEN(parts)) {
			r = -ENAMETOOLONG;	/* deeper than a record's path goes */
			break;
		}
		parts[k++] = p ? p->name : b->links[0].name;
		b = p ? p->dir : b->links[0].dir;
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
