/*
 * passthrough.c — restores at the backend's speed: a clean, durable file
 * opened read-only is served by the kernel straight from the backend file
 * (FUSE passthrough, Linux 6.9+, CONFIG_FUSE_PASSTHROUGH), with no request
 * to the daemon and no copy through it.  Data still in the cache and not
 * durable keeps today's path; so does a durable file still whole in cache
 * memory whose backend file is not in the page cache (read_from_cache).
 *
 * How: the published backend file behind the node (the cfile's base, which
 * holds exactly the file's contents: cfile_clean_base) is reopened
 * read-only and registered with the connection (FUSE_DEV_IOC_BACKING_OPEN);
 * the open reply carries FOPEN_PASSTHROUGH and the backing id (devio.c
 * amends the reply libfuse built).  The id is closed when the node's last
 * passthrough handle is released.
 *
 * The kernel's rules, and what they mean here:
 *   - an inode with passthrough handles has one backing file, and every
 *     further open of it must be passthrough too (else open fails with
 *     EIO).  So while a kernel inode of a node has passthrough handles,
 *     every open of it gets FOPEN_PASSTHROUGH: read-only opens of the unchanged contents
 *     read the backing file; write-only opens, and readers once the
 *     contents changed, get FOPEN_PASSTHROUGH | FOPEN_DIRECT_IO — their
 *     reads and writes come to the daemon as always, and only mmap(2)
 *     uses the backing file (a write-only descriptor cannot be mapped).
 *   - mmap(2) of a passthrough file maps the backing file whatever mode
 *     that was opened in: a shared writable mapping through a read-write
 *     descriptor would write the published backend file in place, behind
 *     the cache.  So a read-write open of a file that passthrough readers
 *     hold is refused with ETXTBSY (the kernel would fail it with EIO
 *     otherwise); it succeeds again once they have closed it.
 *   - a passthrough open of an inode with page-cache handles fails.  So the
 *     first passthrough open of a node happens only when it is the node's
 *     only handle (and nobody writes it).
 * Consistency: a passthrough reader reads the version that was published
 * when its kernel inode's first passthrough handle was opened, as NFS's
 * close-to-open consistency would give it; a later rewrite is published
 * under the same name (a rename over it).
 *
 * Rewrites.  The backing file is the kernel inode's, and mmap(2) of any
 * handle on that inode maps it: were later readers to open the same
 * inode, they would map the earlier version.  So the kernel knows a node
 * by one of NODE_GENS node ids (its address plus an index; fs_ino), each
 * a kernel inode with its own lookups and passthrough state (struct
 * fsgen).  When a node's contents are about to change (a write-capable
 * open, a truncate) while its current kernel inode has a backing file,
 * later lookups get another id whose kernel inode the kernel no longer
 * holds (pt_changing_locked), and the kernel's entries for its names are
 * dropped: later opens get a fresh inode, with no backing file until its
 * own first passthrough open, of the then published version.
 *   R1  An open on node id g uses only kernel inode g's passthrough state;
 *       a handle remembers g (h->gen) for its release.
 *   R2  Where every other id is still held (readers of NODE_GENS - 1
 *       earlier versions open at once), the rewrite keeps the id: later
 *       readers read the new version but map the earlier one, as before.
 *   R3  The entries are dropped from a helper (bcall_post): the kernel
 *       takes the parent directory's lock for it, which the request being
 *       served may hold.  An open that looks the name up before that uses
 *       the earlier inode (R2's outcome); at once, in practice.
 *
 * Invariants:
 *   T1  A kernel inode of a node (struct fsgen) has a backing id iff it
 *       has passthrough handles (pt_handles > 0), outside the short MAKING
 *       window.
 *   T2  Backing files are opened read-only.
 *   T3  No backend I/O under fs->ns: the reopen, the ioctls and the last
 *       close of a backing file happen with it dropped; opens of a node
 *       whose backing is being made wait on fs->pt_cond.
 *   T4  Making a backing file waits for the backend boundedly: the base's
 *       open (node_open_base) and the reopen run on bcall helpers, at most
 *       drain_timeout each; a backend that does not answer costs the open
 *       its passthrough (it reads through the daemon), not a worker.
 * Lock order: fs->ns (pt_* fields of nodes); cfile->lock inside.
 */
#include "fs/bcall.h"
#include "fs/fs.h"
#include "fs/fuse_kapi.h"
#include "cache/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/*
 * Where a restore right after the save reads fastest.  The flushers write
 * with O_DIRECT, so a file just made durable is in no page cache: through
 * passthrough the kernel would read it from the backend's disk, while the
 * cache still holds every byte in memory.  So a clean file whose contents
 * are all in cache memory, and whose backend file is mostly not in the
 * page cache, is read through the daemon (from memory); once the backend
 * file is in the page cache (another reader, a restore after an eviction),
 * passthrough reads it from there, faster still.
 */
#ifndef __NR_cachestat
#define __NR_cachestat 451	/* Linux 6.5; x86-64, arm64 and the other common ones */
#endif
struct kapi_cachestat_range {
	uint64_t off, len;
};
struct kapi_cachestat {
	uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

/* Is most of f's [0, len) in the page cache?  (No cachestat: say no.) */
static bool backend_cached(const struct cfd *f, uint64_t len)
{
	struct kapi_cachestat_range r = { 0, len };
	struct kapi_cachestat cs;
	long page = sysconf(_SC_PAGESIZE);

	if (syscall(__NR_cachestat, f->fd, &r, &cs, 0) != 0)
		return false;
	return cs.nr_cache * (uint64_t)page * 2 >= len;
}

static bool read_from_cache(struct cfile *cf, const struct cfd *base)
{
	return cfile_in_memory(cf) && !backend_cached(base, cfile_size(cf));
}

/* The read-only reopen of a backend file: an open on the backend (bcall.h). */
struct reopen_call {
	struct bcall c;
	struct cfd *f;	/* referenced */
	int fd;
};

static int reopen_run(struct bcall *c)
{
	struct reopen_call *o = CKPT_CONTAINER_OF(c, struct reopen_call, c);
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", o->f->fd);
	o->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (o->fd < 0 && (fcntl(o->f->fd, F_GETFL) & O_ACCMODE) == O_RDONLY)
		o->fd = fcntl(o->f->fd, F_DUPFD_CLOEXEC, 0);	/* no /proc: read-only already */
	return o->fd < 0 ? -errno : 0;
}

static void reopen_drop(struct bcall *c)
{
	struct reopen_call *o = CKPT_CONTAINER_OF(c, struct reopen_call, c);

	if (o->fd >= 0)
		close(o->fd);
	cfd_put(o->f);
	free(o);
}

/*
 * Register f (read-only, T2) with the connection: the backing id, or
 * -errno (-EIO: the reopen did not return within drain_timeout, T4).
 */
static int32_t backing_open(struct ckptfs *fs, struct cfd *f)
{
	struct reopen_call *o = xcalloc(1, sizeof(*o));
	int fd, e, r;

	o->c = (struct bcall){ .run = reopen_run, .drop = reopen_drop,
			       .what = "reopen a file for passthrough" };
	o->f = cfd_get(f);
	o->fd = -1;
	if ((r = bcall_run(fs, &o->c, &e)) == BCALL_GONE)
		return e;
	fd = o->fd;
	o->fd = -1;
	reopen_drop(&o->c);
	if (r < 0)
		return r;
	struct kapi_backing_map map = { .fd = fd };
	int id = ioctl(devio_fd(), KAPI_DEV_IOC_BACKING_OPEN, &map);
	e = errno;
	close(fd);
	return id > 0 ? id : id == 0 ? -EINVAL : -e;
}

static void backing_close(int32_t id, struct cfd *base)
{
	uint32_t u = (uint32_t)id;

	if (id > 0 && ioctl(devio_fd(), KAPI_DEV_IOC_BACKING_CLOSE, &u) < 0)
		log_debug("passthrough: closing backing id %d: %s", id, strerror(errno));
	if (base)
		cfd_put(base);
}

/*
 * Make the node's backing file (T3: drops and retakes fs->ns).  True if
 * the node now has one.
 */
static bool make_backing(struct ckptfs *fs, struct fsnode *n, struct fsgen *g)
{
	struct cfile *cf = n->cf;
	struct cfd *base;
	int32_t id = -ENOENT;

	g->pt_state = PT_MAKING;
	pthread_mutex_unlock(&fs->ns);
	if (cfile_base_lazy(cf))
		node_open_base(fs, n);	/* loaded from the backend, not opened yet */
	base = cfile_clean_base(cf);
	if (base && read_from_cache(cf, base))
		id = 0;		/* from memory, through the daemon */
	else if (base)
		id = backing_open(fs, base);
	pthread_mutex_lock(&fs->ns);
	g->pt_state = PT_IDLE;
	pthread_cond_broadcast(&fs->pt_cond);
	if (id > 0) {
		g->pt_id = id;
		g->pt_base = base;
		return true;
	}
	if (!base)
		return false;
	if (id == 0) {
		atomic_fetch_add(&fs->pt_from_cache, 1);
	} else {
		static atomic_bool told;
		if (!atomic_exchange(&told, true))
			log_warn("passthrough: cannot register a backing file: %s; reads go through "
				 "the daemon", strerror((int)-id));
		atomic_fetch_add(&fs->pt_failures, 1);
	}
	pthread_mutex_unlock(&fs->ns);
	cfd_put(base);	/* its last close may reach the backend (T3) */
	pthread_mutex_lock(&fs->ns);
	return false;
}

enum pt_mode pt_open_locked(struct ckptfs *fs, struct fsnode *n, struct fshandle *h)
{
	if (!devio_passthrough() || n->ctl || !S_ISREG(n->mode) || !n->cf)
		return PT_NONE;
	struct fsgen *g = node_gen(n, h->gen);	/* the kernel inode h is opened on */
	for (;;) {
		while (g->pt_state == PT_MAKING)
			pthread_cond_wait(&fs->pt_cond, &fs->ns);
		if (g->pt_handles) {
			/* The inode has a backing file: this open must use it too. */
			if ((h->flags & O_ACCMODE) == O_RDWR)
				return PT_REFUSE;	/* mmap would write the backend file */
			bool changes = h->writable || (h->flags & O_TRUNC);
			struct cfd *now = changes ? NULL : cfile_clean_base(n->cf);
			h->pt = now && now == g->pt_base ? PT_READ : PT_DIRECT;
			if (now) {
				pthread_mutex_unlock(&fs->ns);
				cfd_put(now);
				pthread_mutex_lock(&fs->ns);
				if (g->pt_state == PT_MAKING || !g->pt_handles) {
					h->pt = PT_NONE;	/* changed meanwhile: decide again */
					continue;
				}
			}
			break;
		}
		/* The first passthrough handle: only as the node's only one. */
		if (h->writable || (h->flags & (O_DIRECT | O_TRUNC)) || n->opens != 1 || n->writers)
			return PT_NONE;
		if (!make_backing(fs, n, g))
			return PT_NONE;
		/* Opens that came meanwhile waited for us: they see pt_handles > 0. */
		h->pt = PT_READ;
		break;
	}
	g->pt_handles++;
	h->pt_id = g->pt_id;
	atomic_fetch_add(h->pt == PT_READ ? &fs->pt_opens : &fs->pt_direct_opens, 1);
	return (enum pt_mode)h->pt;
}

void pt_setup(struct fshandle *h, struct fuse_file_info *fi)
{
	if (h->pt == PT_NONE)
		return;
	fi->keep_cache = 0;
	if (h->pt == PT_READ) {
		fi->direct_io = 0;
		fi->noflush = !h->writable && !h->node->new_file;
	} else {
		fi->direct_io = 1;	/* reads and writes come to the daemon; mmap uses the backing */
		/* A writer here is write-only (read-write is refused): handle_new marked the node. */
	}
	devio_open_patch(KAPI_FOPEN_PASSTHROUGH, KAPI_FOPEN_KEEP_CACHE, h->pt_id);
}

void pt_release_locked(struct ckptfs *fs, struct fsnode *n, struct fshandle *h,
		       struct pt_drop *drop)
{
	drop->id = 0;
	drop->base = NULL;
	if (h->pt == PT_NONE)
		return;
	h->pt = PT_NONE;
	struct fsgen *g = node_gen(n, h->gen);
	if (--g->pt_handles == 0) {	/* T1 */
		drop->id = g->pt_id;
		drop->base = g->pt_base;
		g->pt_id = 0;
		g->pt_base = NULL;
	}
}

void pt_drop_finish(struct pt_drop *drop)
{
	backing_close(drop->id, drop->base);
	drop->id = 0;
	drop->base = NULL;
}

/* ---- rewrites: a new kernel inode ---------------------------------------- */

/* The kernel's entries for a node's names, dropped on a helper (bcall_post). */
struct inval_call {
	struct bcall c;
	struct ckptfs *fs;
	uint32_t n;
	struct {
		fuse_ino_t parent;
		char *name;
	} *e;
};

static int inval_run(struct bcall *c)
{
	struct inval_call *v = CKPT_CONTAINER_OF(c, struct inval_call, c);

	for (uint32_t i = 0; i < v->n; i++)
		fuse_lowlevel_notify_inval_entry(v->fs->se, v->e[i].parent, v->e[i].name,
						 strlen(v->e[i].name));
	return 0;
}

static void inval_drop(struct bcall *c)
{
	struct inval_call *v = CKPT_CONTAINER_OF(c, struct inval_call, c);

	for (uint32_t i = 0; i < v->n; i++)
		free(v->e[i].name);
	free(v->e);
	free(v);
}

void pt_changing_locked(struct ckptfs *fs, struct fsnode *n)
{
	struct fsgen *cur = node_gen(n, n->gen);
	unsigned next;

	if (!cur->pt_handles && cur->pt_state != PT_MAKING)
		return;		/* no backing file on it: its mappings read through the daemon */
	for (next = 0; next < NODE_GENS; next++) {
		const struct fsgen *g = node_gen(n, next);
		if (next != n->gen && !g->nlookup && !g->pt_handles && g->pt_state == PT_IDLE)
			break;	/* the kernel holds no inode of this id */
	}
	if (next == NODE_GENS)
		return;		/* all in use: later readers map the earlier version (R2) */
	n->gen = (uint8_t)next;
	atomic_fetch_add(&fs->pt_renewed, 1);

	/*
	 * The kernel's dentries still name the earlier inode: drop them.  Not
	 * from this thread: the kernel takes the parent directory's lock for
	 * it, which the request being served may hold (an O_CREAT open).
	 */
	struct inval_call *v = xcalloc(1, sizeof(*v));
	v->c = (struct bcall){ .run = inval_run, .drop = inval_drop,
			       .what = "drop the kernel's entries of a rewritten file" };
	v->fs = fs;
	for (struct list *e = n->dents.next; e != &n->dents; e = e->next) {
		struct fsdent *d = list_entry(e, struct fsdent, nlink);
		v->e = xrealloc(v->e, (v->n + 1) * sizeof(*v->e));
		v->e[v->n].parent = fs_ino(fs, d->parent);
		v->e[v->n++].name = xstrdup(d->name);
	}
	bcall_post(fs, &v->c);
}
