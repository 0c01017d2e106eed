/*
 * flush.c — flusher threads, which write sealed versions to temporary files
 * on the backend, and the spiller, which writes dirty chunks of files not
 * yet sealed to their stage files when the cache runs short.
 *
 * A flusher takes a batch of versions from the head of be->flushq (lowest
 * sequence first; at most FLUSH_BATCH versions or FLUSH_BATCH_BYTES), writes
 * each to its output — a new temporary file beside its final name, or the
 * stage file the spiller already began — through its io_uring (or pwrite)
 * engine with at most queue_depth requests in flight, feeding the contents
 * to the version's digest (digest.h) in file order as it goes, then sets
 * size and attributes and fdatasyncs (P2); a new temporary file written with
 * O_DIRECT gets its runs of data allocated first (prealloc_fresh).  It marks
 * each version ready (or failed) and wakes the publisher.  Short writes and
 * -EAGAIN are resubmitted.
 *
 * Work is proportional to data, not to size.  A hole (CSEG_ZERO) is never
 * written and never hashed byte by byte: the digest takes it as a run of
 * zeros in O(1); a fresh temporary file keeps it as a hole, a stage file
 * gets it punched (FALLOC_FL_PUNCH_HOLE; where punching is unsupported,
 * zeros are written over the stage's own data extents only).  A range that
 * comes from a published file (CSEG_FD) is copied extent by extent: only
 * the source's data extents are read, hashed and copied — with
 * copy_file_range where it works (a reflink on XFS/btrfs, a server-side
 * copy on NFS 4.2), else pread/pwrite; bytes read to be hashed are written
 * from the buffer where the backend would only copy them again — and its
 * holes stay holes.  The extents are the ranges a flusher wrote into that
 * file when it made it (struct runrec, kept with its leaves: no system
 * call per extent) while the file is unchanged since it was published
 * (base_unchanged), else what SEEK_DATA/SEEK_HOLE report; rescue
 * (flush_copy_version) always asks.
 *
 * A version whose target directory is not on the backend yet (its mkdir is
 * still queued) is written into that directory's stage, made for it by the
 * flusher that finds it (stage.c), and moves into the directory once the
 * mkdir makes it; where no stage can be made it waits in the queue: the
 * publisher wakes the flushers after each mkdir, and blocks the version if
 * nothing before it will create that directory (order.c).
 *
 * Spilled bytes are written through the page cache, so a write-back error
 * reaches only the next sync of their stage file, and only once: a later
 * sync of the same file succeeds over bytes the kernel may have dropped.
 * So a stage is synced by one thread at a time, by stage_sync, which marks
 * a stage whose sync failed lost (cfd->lost) before anyone else may sync
 * it, and nothing is published from a lost stage: not the version whose
 * output it is, nor one that copies spilled bytes from it (synced first) —
 * every attempt fails with EIO, and the administrator's skip gives them up
 * — nor a rescue copy (which reads the mark only: it runs when the backend
 * stopped answering).
 *
 * Temporary files are named ".ckptfs.<kind>.<mount id>.<n>" (P5).  Their
 * cfd carries a btemp tag; when the last reference goes and the file was
 * never published, the tag unlinks it.
 */
#include "backend/pub.h"
#include "backend/bsys.h"
#include "backend/digest.h"
#include "cache/log.h"

#include <errno.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FLUSH_BATCH 64
#define FLUSH_BATCH_BYTES (256ull << 20)
#define BOUNCE_SIZE (1u << 20)
/* Versions this large keep their block digests for the next version (flush_fd_seg). */
#define LEAVES_MIN (4ull * DIGEST_BLOCK)

/* ---- copying from the published file ------------------------------------ */

void base_copy_decide(struct backend *be)
{
	struct statfs sf;
	bool cheap = false;

	if (fstatfs(be->root_fd, &sf) == 0)
		cheap = sf.f_type == XFS_SUPER_MAGIC || sf.f_type == BTRFS_SUPER_MAGIC ||
			sf.f_type == NFS_SUPER_MAGIC;
	if (be->opt.base_copy >= 0) {
		be->base_copy = be->opt.base_copy;
		be->base_copy_why = be->base_copy ? "base_copy=on" : "base_copy=off";
	} else {
		be->base_copy = cheap;
		be->base_copy_why = cheap ? "the backend copies files cheaply (XFS, btrfs or NFS)"
					  : "the backend would copy the bytes (not XFS, btrfs or NFS)";
	}
	be->cache->seal_from_base = be->base_copy;
	log_debug("unchanged ranges of new versions come from %s: %s",
		 be->base_copy ? "the published file" : "the cache", be->base_copy_why);
}

/* ---- temporary files ---------------------------------------------------- */

struct btemp {
	struct backend *be;
	struct bnode *dir;	/* changed only under stage_rw (write): stage_merge */
	struct list slink;	/* in dir->stemps while dir is a stage */
	bool published;
	char name[64];
};

static void temp_release(void *tag)
{
	struct btemp *t = tag;

	if (!t->published) {
		/*
		 * One in a stage is removed under stage_rw, where t->dir cannot
		 * change (stage.c S4); any other never moves: no lock to wait for
		 * (the last put of a file's descriptor may come under the
		 * namespace lock).
		 */
		bool staged = stage_temp_listed(t->be, &t->slink);
		if (staged)
			pthread_rwlock_rdlock(&t->be->stage_rw);
		atomic_fetch_sub(&t->be->temp_open, 1);
		int d = bnode_dirfd(t->be, t->dir);
		if (d >= 0) {
			bsys.unlinkat(d, t->name, 0);
			bnode_dirfd_put(t->be, t->dir);
		}
		if (staged) {
			stage_temp_del(t->be, &t->slink);
			pthread_rwlock_unlock(&t->be->stage_rw);
		}
	}
	bnode_put(t->dir);
	free(t);
}

/*
 * A new temporary file in dir, born private: mode 0600, owned by the daemon,
 * whatever the version will be.  Its owner and mode are set by fd only once
 * its data is written (flush_finish_attrs), so no other user can open it
 * meanwhile and it never holds a user's data with root's set-user-ID bit.
 */
static int temp_create(struct backend *be, struct bnode *dir, char kind, struct cfd **out)
{
	struct btemp *t = xcalloc(1, sizeof(*t));
	uint64_t n;
	int d, fd;

	pthread_mutex_lock(&be->lock);
	n = ++be->temp_counter;
	pthread_mutex_unlock(&be->lock);
	snprintf(t->name, sizeof(t->name), CKPTFS_RESERVED_PREFIX "%c.%s.%llu", kind,
		 be->mount_id, (unsigned long long)n);
	list_init(&t->slink);
	t->be = be;
	pthread_rwlock_rdlock(&be->stage_rw);	/* not while a stage is emptied (stage.c) */
	struct bnode *at = stage_target(be, dir);
	if ((fd = d = bnode_dirfd(be, at)) >= 0) {
		fd = bsys.openat(d, t->name, O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW, 0600);
		bnode_dirfd_put(be, at);
	}
	if (fd >= 0) {
		t->dir = at;	/* before it is listed: a merge may move it at once */
		atomic_fetch_add(&be->temp_open, 1);
		if (at->is_stage)
			stage_temp_add(be, at, &t->slink);
	}
	pthread_rwlock_unlock(&be->stage_rw);
	if (fd < 0) {
		bnode_put(at);
		free(t);
		return fd;
	}
	*out = cfd_new(fd);
	(*out)->tag = t;
	(*out)->tag_free = temp_release;
	return 0;
}

/* Once: a published file no longer counts against be->temp_cap, even while it is held open. */
void flush_temp_mark_published(struct cfd *out)
{
	struct btemp *t = out->tag;

	t->published = true;
	atomic_fetch_sub(&t->be->temp_open, 1);
}

bool flush_temp_moved(struct list *stemps, const char *name, struct bnode *to)
{
	for (struct list *e = stemps->next; e != stemps; e = e->next) {
		struct btemp *t = list_entry(e, struct btemp, slink);
		if (strcmp(t->name, name))
			continue;
		list_del(&t->slink);
		list_init(&t->slink);
		bnode_put(t->dir);
		t->dir = bnode_get(to);
		return true;
	}
	return false;
}

const char *flush_temp_name(struct cfd *out, struct bnode **dir)
{
	struct btemp *t = out->tag;
	*dir = t->dir;
	return t->name;
}

/* ---- writing one batch ------------------------------------------------ */

enum { FJ_WRITING, FJ_SYNCING, FJ_DONE };

/*
 * The ranges written to a new temporary file, in file order: once it is
 * published, where it holds data (cleaves.data), so the next version of a
 * big sparse file copies them without a SEEK_DATA/SEEK_HOLE walk.  Where
 * the backend shares copied blocks (base_copy), widened to whole pages: the
 * rest of a page reads as zeros, so copying it is right, and a copy of
 * whole blocks can be a reflink; elsewhere that would only write zeros
 * where a hole was.  Given up (lost) for a write out of order or past
 * RUNS_MAX ranges (CKPTFS_RUNS_MAX=N sets a lower limit, for tests: a file
 * of 65,537 separate 4 KiB ranges costs 200,000 disk writes a version).
 */
#define RUNS_MAX 65536u
#define RUNS_PAGE 4096u

struct runrec {
	struct cext *v;
	uint32_t n, cap;
	uint32_t max;		/* RUNS_MAX or lower */
	uint32_t align;		/* RUNS_PAGE or 1 */
	bool lost;
};

static uint32_t runs_max(void)
{
	const char *env = getenv("CKPTFS_RUNS_MAX");
	uint64_t v;

	if (env && parse_size(env, &v) == 0 && v >= 1 && v < RUNS_MAX)
		return (uint32_t)v;
	return RUNS_MAX;
}

static void runrec_add(struct runrec *r, uint64_t off, uint64_t len)
{
	if (!r || r->lost || !len)
		return;
	const uint64_t a = r->align ? r->align : 1;
	len = (off + len + a - 1) / a * a;
	off = off / a * a;
	len -= off;
	if (r->n && off < r->v[r->n - 1].lo) {
		r->lost = true;
		return;
	}
	if (r->n && off <= r->v[r->n - 1].hi) {
		r->v[r->n - 1].hi = CKPT_MAX(r->v[r->n - 1].hi, off + len);
		return;
	}
	if (r->n >= (r->max ? r->max : RUNS_MAX)) {
		r->lost = true;
		return;
	}
	if (r->n == r->cap) {
		r->cap = r->cap ? 2 * r->cap : 16;
		r->v = xrealloc(r->v, r->cap * sizeof(*r->v));
	}
	r->v[r->n++] = (struct cext){ off, off + len };
}

struct fjob {
	struct op *op;
	struct cver *v;
	struct cfd *out;
	int dfd;		/* out opened O_DIRECT for aligned writes, or -1 */
	bool fresh;		/* out was created by this flush */
	bool taken;		/* counted in be->temp_taken until out is created */
	struct digest dg;	/* of the version, fed in file order */
	uint32_t seg;		/* next segment to submit */
	size_t seg_pos;		/* how much of it is submitted (memory segments) */
	bool seg_hashed;	/* ... and whether it is in the digest yet */
	uint64_t end;		/* end of the last byte written to a fresh out */
	bool base_ok;		/* the base's leaves and data ranges may be used (base_unchanged) */
	uint32_t inflight;
	int err;
	const char *step;	/* what failed, for the log */
	int phase;
	struct digest_range *known;	/* blocks the digest takes from the base's leaves */
	struct runrec runs;	/* what was written to a fresh out */
	struct cfd *synced[4];	/* stage files synced before their bytes were copied */
	unsigned nsynced;
};

/* Record the first failure of a job and where it happened. */
static void fjob_fail(struct fjob *j, int err, const char *step)
{
	if (err && !j->err) {
		j->err = err;
		j->step = step;
	}
}

struct wreq {
	struct fjob *j;
	int fd;
	const char *buf;
	size_t len;
	uint64_t off;
	bool is_fsync;
};

struct flusher {
	struct backend *be;
	struct bio *bio;
	char *bounce;
	const char *zeros;
	bool no_cfr;		/* copy_file_range failed as unsupported: pread/pwrite */
	uint32_t runs_max;	/* ranges a fresh file's struct runrec keeps at most */
};

/*
 * Writes go through a system call table: `bsys` for the backend (fault
 * injection, the power-loss layer), `bsys_direct` for rescue's own files
 * outside the backend, which faults injected into the backend must not
 * reach.
 */
static int pwrite_all_io(const struct bsys *sys, int fd, const char *buf, size_t len, uint64_t off)
{
	while (len) {
		ssize_t n = sys->pwrite(fd, buf, len, (off_t)off);
		if (n == -EINTR || n == -EAGAIN)
			continue;
		if (n < 0)
			return (int)n;
		if (n == 0)
			return -EIO;
		buf += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

static int pwrite_all(int fd, const char *buf, size_t len, uint64_t off)
{
	return pwrite_all_io(&bsys, fd, buf, len, off);
}

/*
 * Pages of zeros.  A fresh output (a new temporary file, a rescued file)
 * reads zeros wherever nothing was written, so the 4 KiB pages (aligned in
 * the file) of a buffer that hold only zeros are left out: they stay holes,
 * as they would on ext4, whether they came from a hole the writer skipped
 * around inside a cache chunk or from zeros a published file stored as
 * data.  A page with any data is written whole.  Checking costs a look at
 * the first byte of a page of data, and a scan of a page of zeros.
 */
#define ZPAGE 4096u

static bool all_zero(const char *p, size_t n)
{
	return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

/* Where the page holding file offset off + i ends, as an index into the buffer (<= len). */
static size_t zpage_end(uint64_t off, size_t i, size_t len)
{
	uint64_t next = ((off + i) / ZPAGE + 1) * ZPAGE - off;
	return next < len ? (size_t)next : len;
}

/*
 * The next run of pages with data in buf[pos, len) (buf holds file offsets
 * [off, off + len)): [*a, *b).  False if only zeros are left.
 */
static bool next_data_run(const char *buf, uint64_t off, size_t len, size_t pos, size_t *a,
			  size_t *b)
{
	size_t i = pos, e;

	while (i < len && all_zero(buf + i, (e = zpage_end(off, i, len)) - i))
		i = e;
	if (i >= len)
		return false;
	*a = i;
	while (i < len && !all_zero(buf + i, (e = zpage_end(off, i, len)) - i))
		i = e;
	*b = i;
	return true;
}

/* copy_file_range errors that mean "not here", not "failed": fall back for good. */
static bool cfr_unsupported(ssize_t r)
{
	return r == -EXDEV || r == -EINVAL || r == -EOPNOTSUPP || r == -ENOSYS || r == -EBADF;
}

/*
 * One range of a backend file, extent by extent, into the digest and (when
 * dst >= 0) into dst at the same offset plus `shift`.
 */
struct xcopy {
	struct digest *dg;
	int src, dst;		/* dst -1: only hash (the bytes are in place already) */
	uint64_t shift;		/* dst offset = src offset + shift (mod 2^64) */
	uint64_t pos;		/* source offset: everything before it is fed */
	char *buf;		/* BOUNCE_SIZE */
	const struct bsys *sys;	/* &bsys, or &bsys_direct (rescue) */
	bool skip_zeros;	/* dst is fresh: pages of zeros are not written */
	bool *no_cfr;
	bool written_read;	/* bytes read and hashed are written from the buffer, not copied again */
	const struct cleaves *lv;	/* where src holds data (lv->data), or NULL: ask src */
	struct runrec *runs;	/* records the ranges written to dst (a fresh file), or NULL */
	uint64_t walks;		/* ranges whose extents were asked of the file system */
	uint64_t written;	/* bytes that reached dst */
	uint64_t copied;	/* ... of them, by copy_file_range of whole extents (cfr_extent) */
	uint64_t end;		/* dst offset after the last byte written (0: none) */
};

/*
 * copy_file_range of source [src, src + len) to dst at src + shift, for as
 * long as it works: the bytes copied (short when the source ended, or when
 * the call is unsupported here: *no_cfr is then set for good), or -errno.
 */
static int64_t cfr_range(struct xcopy *x, uint64_t src, uint64_t len)
{
	uint64_t done = 0;

	while (done < len && !*x->no_cfr) {
		ssize_t k = x->sys->copy_file_range(x->src, (off_t)(src + done), x->dst,
						    (off_t)(src + done + x->shift),
						    (size_t)CKPT_MIN(len - done, 1ull << 30));
		if (k == -EINTR || k == -EAGAIN)
			continue;
		if (k < 0 && cfr_unsupported(k))
			*x->no_cfr = true;
		else if (k < 0)
			return k;
		else if (k == 0)
			break;	/* the source ended meanwhile */
		else
			done += (uint64_t)k;
	}
	return (int64_t)done;
}

/* x->buf[a, b), read from source offset x->pos, to dst: copy_file_range, else pwrite. */
static int xcopy_out(struct xcopy *x, size_t a, size_t b)
{
	const uint64_t src = x->pos + a;
	const size_t n = b - a;
	int64_t c = x->written_read ? 0 : cfr_range(x, src, n);

	if (c < 0)
		return (int)c;
	size_t done = (size_t)c;	/* the rest: pwrite what was read */
	if (done < n) {
		int r = pwrite_all_io(x->sys, x->dst, x->buf + a + done, n - done,
				      src + done + x->shift);
		if (r < 0)
			return r;
	}
	x->written += n;
	x->end = src + n + x->shift;
	runrec_add(x->runs, src + x->shift, n);
	return 0;
}

static int cfr_extent(void *arg, uint64_t start, uint64_t len);

static int xcopy_extent(void *arg, uint64_t start, uint64_t len)
{
	struct xcopy *x = arg;

	if (start > x->pos)
		digest_zeros(x->dg, start - x->pos);	/* a hole: stays one in dst */
	x->pos = start;
	while (len) {
		size_t want = (size_t)CKPT_MIN(len, BOUNCE_SIZE);
		if (digest_skip(x->dg, want)) {
			/* In blocks whose leaves come from the base: copied unread. */
			uint64_t p = x->pos;
			int r = x->dst >= 0 ? cfr_extent(x, p, want) : 0;
			if (r < 0)
				return r;
			x->pos = p + want;
			len -= want;
			continue;
		}
		ssize_t n = x->sys->pread(x->src, x->buf, want, (off_t)x->pos);
		if (n == -EINTR)
			continue;
		if (n < 0)
			return (int)n;
		if (n == 0)
			return 0;	/* shorter than its extents said: the rest reads as zeros */
		/*
		 * The digest is of the bytes read here, from the source, or (above)
		 * the leaves of what ckptfs published there — never of bytes assumed
		 * to have been copied right: copy_file_range moves data we do not
		 * see, and a copy that went wrong then shows up as a MISMATCH in
		 * verify instead of being recorded as correct.
		 */
		digest_update(x->dg, x->buf, (size_t)n);
		size_t a = 0, b = (size_t)n;
		while (x->dst >= 0 &&
		       (x->skip_zeros ? next_data_run(x->buf, x->pos + x->shift, (size_t)n, a, &a, &b)
				      : a < b)) {
			int r = xcopy_out(x, a, b);
			if (r < 0)
				return r;
			a = b;
			b = (size_t)n;
		}
		x->pos += (uint64_t)n;
		len -= (uint64_t)n;
	}
	return 0;
}

/*
 * The data extents of [off, off + len) of x->src: the ranges ckptfs wrote
 * there when it knows them (x->lv), else as the file system reports them.
 */
static int data_extents(struct xcopy *x, uint64_t off, uint64_t len, digest_extent_fn cb)
{
	const struct cleaves *lv = x->lv;
	const uint64_t end = off + len;
	uint32_t lo = 0, hi;

	if (!lv) {
		x->walks++;
		return digest_data_extents(x->src, off, len, cb, x);
	}
	for (hi = lv->ndata; lo < hi;) {	/* the first range that ends after off */
		uint32_t mid = lo + (hi - lo) / 2;
		if (lv->data[mid].hi <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (uint32_t i = lo; i < lv->ndata && lv->data[i].lo < end; i++) {
		uint64_t a = CKPT_MAX(lv->data[i].lo, off), b = CKPT_MIN(lv->data[i].hi, end);
		int r = cb(x, a, b - a);
		if (r)
			return r;
	}
	return 0;
}

/*
 * [soff, soff + len) of src into the digest, copying its data extents to
 * dst at doff (dst -1: hash only).  Holes and bytes past the source's end
 * are zeros to the digest and are not written.  0 or -errno.
 */
static int xcopy_range(struct xcopy *x, uint64_t soff, uint64_t doff, uint64_t len)
{
	int r;

	x->pos = soff;
	x->shift = doff - soff;
	r = data_extents(x, soff, len, xcopy_extent);
	if (r < 0)
		return r;
	if (soff + len > x->pos)
		digest_zeros(x->dg, soff + len - x->pos);
	return 0;
}

/* Copy a data extent without reading it (copy_file_range; pread/pwrite where it cannot). */
static int cfr_extent(void *arg, uint64_t start, uint64_t len)
{
	struct xcopy *x = arg;
	int64_t c = cfr_range(x, start, len);

	if (c < 0)
		return (int)c;
	if (c) {
		x->copied += (uint64_t)c;
		x->end = start + (uint64_t)c + x->shift;
		runrec_add(x->runs, start + x->shift, (uint64_t)c);
	}
	if ((uint64_t)c < len && !*x->no_cfr)
		return 0;	/* the source ended meanwhile */
	start += (uint64_t)c;
	len -= (uint64_t)c;
	while (len) {
		ssize_t n = x->sys->pread(x->src, x->buf, (size_t)CKPT_MIN(len, BOUNCE_SIZE), (off_t)start);
		if (n == -EINTR)
			continue;
		if (n <= 0)
			return (int)n;
		x->pos = start;
		int r = xcopy_out(x, 0, (size_t)n);
		if (r < 0)
			return r;
		start += (uint64_t)n;
		len -= (uint64_t)n;
	}
	return 0;
}

/*
 * A range of the published file that the version keeps unchanged, at the
 * same offsets, with the leaves that file was flushed with: the whole
 * blocks go into the digest from the leaves and the data is copied without
 * passing through the daemon (a reflink on XFS/btrfs, a server-side copy on
 * NFS 4.2; elsewhere the kernel's copy); only the partial blocks at its ends
 * are read and hashed.  The digest then states what ckptfs published, so a
 * base changed behind its back on the backend shows up in verify.  False
 * when the range does not qualify (the caller reads and hashes it all).
 */
static bool flush_fd_seg_leaves(struct flusher *fl, struct fjob *j, const struct cseg *s, int *err)
{
	const uint64_t B = DIGEST_BLOCK, o = s->off, e = s->off + s->len;
	uint64_t b0 = (o + B - 1) / B, b1 = e / B;
	struct xcopy x = { .dg = &j->dg, .src = s->f->fd, .dst = -1, .buf = fl->bounce,
			   .sys = &bsys, .no_cfr = &fl->no_cfr, .lv = s->data_known ? s->lv : NULL };
	int r;

	if (!j->base_ok || !s->lv || s->foff != s->off || s->f == j->out || b1 > s->lv->blocks)
		return false;
	if (b0 >= b1 || (b1 - b0) * B < s->len / 2)
		return false;	/* mostly partial blocks: reading them is as cheap */
	r = xcopy_range(&x, o, o, b0 * B - o);	/* the head's bytes, hashed */
	if (r == 0 && !digest_feed_leaves(&j->dg, s->lv, b0, b1 - b0))
		r = -EIO;	/* cannot happen: checked above */
	if (r == 0)
		r = xcopy_range(&x, b1 * B, b1 * B, e - b1 * B);	/* the tail's */
	if (r == 0) {
		x.dst = j->out->fd;
		x.shift = 0;
		x.runs = j->fresh ? &j->runs : NULL;
		r = data_extents(&x, o, s->len, cfr_extent);
	}
	atomic_fetch_add(&fl->be->st.written_bytes, x.written);
	atomic_fetch_add(&fl->be->st.copied_bytes, x.copied);
	atomic_fetch_add(&fl->be->st.extent_walks, x.walks);
	j->end = CKPT_MAX(j->end, x.end);
	*err = r;
	return true;
}

/*
 * A segment held in a backend file: copied extent by extent, or only hashed
 * when it is the output itself (a stage file's spilled ranges).
 */
/*
 * Sync stage f: 0, or -EIO if it is lost — now, or by an earlier sync
 * (see the top).  One at a time: the sync that gets a write-back error
 * marks f lost before any other may sync it and succeed.
 */
static int stage_sync(struct cfd *f)
{
	/* One at a time per file: a lock of a few, chosen by the file, so others need not wait. */
	static pthread_mutex_t one_at_a_time[16] = {
		PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
		PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
		PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
		PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
		PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
		PTHREAD_MUTEX_INITIALIZER,
	};
	pthread_mutex_t *mx = &one_at_a_time[((uintptr_t)f >> 6) % 16];

	pthread_mutex_lock(mx);
	if (!atomic_load(&f->lost) && bsys.fdatasync(f->fd) < 0)
		atomic_store(&f->lost, true);
	pthread_mutex_unlock(mx);
	return atomic_load(&f->lost) ? -EIO : 0;
}

#define LOST_STEP "publishing spilled bytes whose stage file failed a sync (they may be lost; " \
		  "`ckptfs-ctl skip` gives the version up)"

/* Before spilled bytes of stage f are copied into another file: f synced, not lost. */
static int stage_synced(struct fjob *j, struct cfd *f)
{
	for (unsigned i = 0; i < j->nsynced; i++)
		if (j->synced[i] == f)
			return 0;
	int r = stage_sync(f);
	if (r < 0) {
		fjob_fail(j, r, LOST_STEP);
		return r;
	}
	if (j->nsynced < CKPT_ARRAY_LEN(j->synced))
		j->synced[j->nsynced++] = f;
	return 0;
}

static int flush_fd_seg(struct flusher *fl, struct fjob *j, const struct cseg *s)
{
	bool own = s->f == j->out;
	int err;

	if (s->staged && !own && (err = stage_synced(j, s->f)) < 0)
		return err;
	if (flush_fd_seg_leaves(fl, j, s, &err))
		return err;
	struct xcopy x = { .dg = &j->dg, .src = s->f->fd, .dst = own ? -1 : j->out->fd,
			   .buf = fl->bounce, .sys = &bsys, .skip_zeros = j->fresh,
			   .no_cfr = &fl->no_cfr, .lv = s->data_known && !own && j->base_ok ? s->lv : NULL,
			   .written_read = !fl->be->base_copy,
			   .runs = j->fresh && !own ? &j->runs : NULL };
	int r = xcopy_range(&x, s->foff, s->off, s->len);

	atomic_fetch_add(&fl->be->st.written_bytes, x.written);
	atomic_fetch_add(&fl->be->st.copied_bytes, x.copied);
	atomic_fetch_add(&fl->be->st.extent_walks, x.walks);
	j->end = CKPT_MAX(j->end, x.end);
	return r;
}

/* Zeros over the data extents of a stage file (where it cannot punch). */
struct zfill {
	int fd;
	const char *zeros;
};

static int zfill_extent(void *arg, uint64_t start, uint64_t len)
{
	struct zfill *z = arg;

	for (uint64_t done = 0; done < len;) {
		size_t n = (size_t)CKPT_MIN(len - done, BOUNCE_SIZE);
		int r = pwrite_all(z->fd, z->zeros, n, start + done);
		if (r < 0)
			return r;
		done += n;
	}
	return 0;
}

static int flush_zero_seg(struct flusher *fl, struct fjob *j, const struct cseg *s)
{
	digest_zeros(&j->dg, s->len);	/* O(1) per whole block: never byte by byte */
	if (j->fresh)
		return 0;	/* a fresh file is a hole there already */
	/* A stage file may hold stale spilled bytes here: punch them out. */
	int r = bsys.fallocate(j->out->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			       (off_t)s->off, (off_t)s->len);
	if (r != -EOPNOTSUPP && r != -ENOSYS)
		return r;
	/* Cannot punch: zero what the stage holds there (its holes read as zeros). */
	struct zfill z = { .fd = j->out->fd, .zeros = fl->zeros };
	return digest_data_extents(j->out->fd, s->off, s->len, zfill_extent, &z);
}

/*
 * Size, owner, mode and times of the sealed version, set on the temp file
 * through the fd the data went through (never by name: the directory is a
 * user's).  Owner before mode: a chown clears the set-ID bits, so they are
 * set last, once the file holds its final owner and contents.
 */
static int flush_finish_attrs(struct backend *be, struct fjob *j, const char **step)
{
	struct op *op = j->op;
	int fd = j->out->fd, r;

	/* A new file already ends where its data ends, unless in a hole. */
	bool hole_at_end = j->v->nseg && j->v->segs[j->v->nseg - 1].kind == CSEG_ZERO;
	*step = "ftruncate";
	if ((!j->fresh || hole_at_end) && (r = bsys.ftruncate(fd, (off_t)j->v->size)) < 0)
		return r;
	/* Always, even for root's files: a set-group-ID directory gave it its group. */
	*step = "chown";
	if (be->opt.chown && (r = bsys.fchown(fd, op->uid, op->gid)) < 0)
		return r;
	*step = "chmod";
	if ((r = bsys.fchmod(fd, op->mode & 07777)) < 0)
		return r;
	struct timespec ts[2] = { op->atime, op->mtime };
	*step = "utimensat";
	return bsys.futimens(fd, ts);
}

#define DIRECT_ALIGN 4096u

static bool direct_aligned(const char *buf, size_t len, uint64_t off)
{
	return ((uintptr_t)buf | len | off) % DIRECT_ALIGN == 0;
}

static void submit_write(struct flusher *fl, struct fjob *j, int fd, const char *buf, size_t len,
			 uint64_t off)
{
	struct wreq *w = xmalloc(sizeof(*w));
	*w = (struct wreq){ .j = j, .fd = fd, .buf = buf, .len = len, .off = off };
	j->inflight++;
	j->end = CKPT_MAX(j->end, off + len);
	if (j->fresh)
		runrec_add(&j->runs, off, len);
	bio_prep_write(fl->bio, fd, buf, len, off, w);
}

/*
 * Open the output again with O_DIRECT: arena chunks are page aligned, so
 * most of a version goes to the backend by DMA, without a copy through its
 * page cache that would take CPU from the writers.  -1 if not possible.
 */
static int open_direct(struct backend *be, struct cfd *out)
{
	struct bnode *tdir;
	const char *tname;
	int d, fd;

	if (!be->opt.direct || atomic_load(&be->direct_unsupported))
		return -1;
	pthread_rwlock_rdlock(&be->stage_rw);	/* where it is stays so (stage.c S4) */
	tname = flush_temp_name(out, &tdir);
	fd = d = bnode_dirfd(be, tdir);
	if (d >= 0) {
		fd = bsys.openat(d, tname, O_WRONLY | O_DIRECT | O_NOFOLLOW, 0);
		bnode_dirfd_put(be, tdir);
	}
	pthread_rwlock_unlock(&be->stage_rw);
	if (d < 0)
		return -1;
	if (fd == -EINVAL || fd == -EOPNOTSUPP)
		atomic_store(&be->direct_unsupported, true);
	if (fd >= 0 && !bsys_same_file(fd, out->fd)) {
		/* The directory is a user's: the name may now be theirs, not ours. */
		log_warn("backend: temporary file '%s' was replaced by someone else; "
			 "not writing to what is there now", tname);
		bsys.close(fd);
		return -1;
	}
	return fd < 0 ? -1 : fd;
}

/*
 * Allocate, before the first O_DIRECT write to a fresh temporary file, the
 * blocks of its runs of pages with data, with fallocate(2) mode 0, which
 * also sets the size.  A write that extends a file, or fills blocks not yet
 * allocated, takes the inode's lock exclusively (ext4, XFS), so io_uring
 * cannot issue it without blocking and hands it to a worker thread:
 * queue_depth workers, each allocating in turn under that lock, and a
 * context switch per hand-off on CPUs the trainer's writes need.  Into
 * allocated blocks below the size, an aligned O_DIRECT write goes straight
 * from the flusher's own submission.
 *
 * A page counts as data here when its first 8 bytes are not all zero: one
 * cache line per page, so a version full of zeros (a fresh optimizer's
 * moments) is not read an extra time.  Such a page is never a hole
 * (submit_mem_seg writes every page that is not all zeros), so nothing is
 * allocated that would have stayed a hole; a page with data that starts
 * with zeros is allocated by its write, as before.  Only runs of at least
 * PREALLOC_MIN, at most PREALLOC_RUNS calls per version.  Best effort:
 * where the backend cannot, the writes allocate as they go and report any
 * real error themselves.
 */
#define PREALLOC_MIN (1u << 20)
#define PREALLOC_RUNS 64

static bool page_starts_with_data(const char *p, size_t n)
{
	uint64_t w = 0;

	memcpy(&w, p, n < sizeof(w) ? n : sizeof(w));
	return w != 0;
}

static void prealloc_run(struct backend *be, struct fjob *j, uint64_t a, uint64_t b, unsigned *calls)
{
	if (b - a < PREALLOC_MIN || *calls >= PREALLOC_RUNS || atomic_load(&be->prealloc_unsupported))
		return;
	(*calls)++;
	int r = bsys.fallocate(j->out->fd, 0, (off_t)a, (off_t)(b - a));
	if (r == -EOPNOTSUPP || r == -ENOSYS || r == -EINVAL)
		atomic_store(&be->prealloc_unsupported, true);
}

static void prealloc_fresh(struct backend *be, struct fjob *j)
{
	uint64_t ra = 0, rb = 0;	/* the run being gathered, file offsets */
	unsigned calls = 0;

	if (!j->fresh || j->dfd < 0)
		return;
	for (uint32_t k = 0; k < j->v->nseg && calls < PREALLOC_RUNS; k++) {
		const struct cseg *s = &j->v->segs[k];
		if (s->kind != CSEG_MEM)
			continue;
		for (size_t i = 0, e; i < s->len; i = e) {
			e = zpage_end(s->off, i, s->len);
			if (!page_starts_with_data(s->mem + i, e - i))
				continue;
			if (rb != s->off + i) {
				prealloc_run(be, j, ra, rb, &calls);
				ra = s->off + i;
			}
			rb = s->off + e;
		}
	}
	prealloc_run(be, j, ra, rb, &calls);
}

/*
 * Submit what is left of a memory segment: hashed whole at once, written in
 * runs (a fresh output leaves out pages of zeros).  False if the queue
 * filled up first; called again, it goes on where it stopped.
 */
static bool submit_mem_seg(struct flusher *fl, struct fjob *j, const struct cseg *s)
{
	size_t a, b;

	if (!j->seg_hashed)
		digest_update(&j->dg, s->mem, s->len);
	j->seg_hashed = true;
	while (j->seg_pos < s->len) {
		if (bio_space(fl->bio) < 2)
			return false;
		a = j->seg_pos;
		b = s->len;
		if (j->fresh && !next_data_run(s->mem, s->off, s->len, a, &a, &b))
			break;
		size_t n = b - a, direct = 0;
		if (j->dfd >= 0 && direct_aligned(s->mem + a, 0, s->off + a))
			direct = n & ~(size_t)(DIRECT_ALIGN - 1);
		if (direct)
			submit_write(fl, j, j->dfd, s->mem + a, direct, s->off + a);
		if (n > direct)	/* the unaligned tail goes through the page cache */
			submit_write(fl, j, j->out->fd, s->mem + a + direct, n - direct,
				     s->off + a + direct);
		j->seg_pos = b;
	}
	j->seg_pos = 0;
	j->seg_hashed = false;
	return true;
}

static void fjob_submit(struct flusher *fl, struct fjob *j)
{
	while (j->phase == FJ_WRITING && !j->err && j->seg < j->v->nseg && bio_space(fl->bio) >= 2) {
		const struct cseg *s = &j->v->segs[j->seg];
		int r = 0;

		if (s->kind == CSEG_MEM) {
			if (!submit_mem_seg(fl, j, s))
				break;
		} else if (s->kind == CSEG_FD) {
			r = flush_fd_seg(fl, j, s);
		} else {
			r = flush_zero_seg(fl, j, s);
		}
		if (r < 0)
			fjob_fail(j, r, s->kind == CSEG_FD ? "copying from a backend file" : "zeroing a hole");
		j->seg++;
	}
	if (j->phase == FJ_WRITING && j->inflight == 0 &&
	    (j->err || j->seg == j->v->nseg) && bio_space(fl->bio)) {
		/*
		 * A fresh file ends where its last write ends.  When that is short
		 * of the version's size (zeros left out, a hole copied as a hole),
		 * extend it here; flush_finish_attrs sets the size itself only
		 * after a hole of the version's own (CSEG_ZERO) at the end.
		 */
		bool zero_end = j->v->nseg && j->v->segs[j->v->nseg - 1].kind == CSEG_ZERO;
		if (!j->err && j->fresh && !zero_end && j->end < j->v->size)
			fjob_fail(j, bsys.ftruncate(j->out->fd, (off_t)j->v->size), "ftruncate");
		if (!j->err) {
			const char *step = NULL;	/* set by the call: not an argument beside it */
			int r = flush_finish_attrs(fl->be, j, &step);
			fjob_fail(j, r, step);
		}
		if (!j->err && !j->fresh) {
			fjob_fail(j, stage_sync(j->out), LOST_STEP);	/* a stage: see the top */
			j->phase = FJ_DONE;
		} else if (j->err) {
			j->phase = FJ_DONE;
		} else {
			struct wreq *w = xcalloc(1, sizeof(*w));
			w->j = j;
			w->is_fsync = true;
			j->phase = FJ_SYNCING;
			j->inflight++;
			bio_prep_fsync(fl->bio, j->out->fd, true, w);
		}
	}
}

static void fjob_complete(struct flusher *fl, const struct bio_cqe *c)
{
	struct wreq *w = c->cookie;
	struct fjob *j = w->j;

	if (w->is_fsync) {
		j->inflight--;
		if (c->res < 0)
			fjob_fail(j, c->res, "fdatasync");
		j->phase = FJ_DONE;
		free(w);
		return;
	}
	if (c->res == -EAGAIN || c->res == -EINTR || (c->res > 0 && (size_t)c->res < w->len)) {
		if (c->res > 0) {	/* short write: resubmit the rest */
			atomic_fetch_add(&fl->be->st.written_bytes, (uint64_t)c->res);
			w->buf += c->res;
			w->len -= (size_t)c->res;
			w->off += (uint64_t)c->res;
		}
		if (w->fd != j->out->fd && !direct_aligned(w->buf, w->len, w->off))
			w->fd = j->out->fd;	/* what is left is not aligned for O_DIRECT */
		bio_prep_write(fl->bio, w->fd, w->buf, w->len, w->off, w);
		return;
	}
	j->inflight--;
	if (c->res < 0)
		fjob_fail(j, c->res, w->fd == j->dfd ? "O_DIRECT write" : "write");
	else if (c->res == 0)
		fjob_fail(j, -EIO, "write (no progress)");
	else if (c->res > 0)
		atomic_fetch_add(&fl->be->st.written_bytes, (uint64_t)c->res);
	free(w);
}

/*
 * May the version take its base's leaves (the digest of its unchanged
 * blocks) and data ranges (where to copy) on trust?  Only while the file it
 * copies from is still the one those leaves were made for, as stamped when
 * it was published: the same inode, size, mode and times, its ctime above
 * all, which moves with any change and which no program can set (but for
 * a file with no name left: replacing it moved its ctime).  A file
 * rewritten in place on the backend, or another one at the name (even
 * under a reused inode number), is copied where the file system says it
 * has data and hashed from what is read: the new version is what the
 * mount showed, and its digest is of those bytes.  A base never opened
 * since it was published lends only leaves of clean chunks, which hold the
 * bytes published (C2): nothing there to check.
 */
static bool base_unchanged(struct backend *be, const struct cver *v)
{
	const struct cleaves *lv = NULL;
	struct stat st;
	struct bstamp now;

	for (uint32_t i = 0; i < v->nseg && !lv; i++)
		lv = v->segs[i].lv;
	if (!lv || !v->base_f)
		return true;
	if (lv->stamped && bsys.fstatat(v->base_f->fd, "", &st) == 0) {
		bstamp_of(&st, &now);
		/* Replaced by a later version (or removed) since, which moves its ctime: it has
		 * no name left to be rewritten through, and a write by an earlier opener would
		 * have moved its mtime. */
		if (st.st_nlink == 0)
			now.ctime = lv->stamp.ctime;
		if (bstamp_eq(&now, &lv->stamp))
			return true;
	}
	atomic_fetch_add(&be->st.base_changed, 1);
	return false;
}

/*
 * The blocks of a version that hold the same bytes as the published file
 * it replaces: every byte of them comes from a segment with the base's
 * leaves (a clean chunk, or the base itself at the same offsets), and they
 * are whole blocks of the version and of the base (whose leaves are of its
 * whole blocks only).  Their leaves come from the base (digest_known): of a small
 * change to a big file, only the blocks it touched are hashed.
 */
static void fjob_known(struct fjob *j)
{
	const struct cver *v = j->v;
	const struct cleaves *lv = NULL;
	uint32_t n = 0, cap = 0;
	uint64_t a = 0, b = 0;	/* the run of such bytes being gathered */

	for (uint32_t k = 0; j->base_ok && k <= v->nseg; k++) {
		const struct cseg *s = k < v->nseg ? &v->segs[k] : NULL;
		bool same = s && s->lv && (!lv || s->lv == lv) &&
			    (s->kind == CSEG_MEM || (s->kind == CSEG_FD && s->foff == s->off && s->f != j->out));
		if (same && b == s->off && b > a) {
			b += s->len;
			continue;
		}
		if (b > a) {
			uint64_t b0 = (a + DIGEST_BLOCK - 1) / DIGEST_BLOCK;
			uint64_t b1 = CKPT_MIN(b / DIGEST_BLOCK, lv->blocks);
			if (b0 < b1) {
				if (n == cap) {
					cap = cap ? 2 * cap : 8;
					j->known = xrealloc(j->known, cap * sizeof(*j->known));
				}
				j->known[n++] = (struct digest_range){ b0, b1 };
			}
		}
		a = b = 0;
		if (same) {
			lv = s->lv;
			a = s->off;
			b = s->off + s->len;
		}
	}
	digest_known(&j->dg, lv, j->known, n);
}

static void flush_batch(struct flusher *fl, struct fjob *jobs, unsigned n)
{
	struct backend *be = fl->be;
	struct bio_cqe cqes[64];
	unsigned pending = n;

	for (unsigned i = 0; i < n; i++) {
		struct fjob *j = &jobs[i];
		j->v = j->op->ver;
		j->nsynced = 0;
		if (j->v->out && atomic_load(&j->v->out->lost))
			fjob_fail(j, -EIO, LOST_STEP);
		j->base_ok = base_unchanged(be, j->v);
		digest_init(&j->dg);
		if (j->v->size >= LEAVES_MIN)
			digest_record(&j->dg);
		j->dfd = -1;
		if (j->v->out) {
			j->out = cfd_get(j->v->out);
		} else {
			fjob_fail(j, temp_create(be, j->op->dir, 't', &j->out),
				  "creating the temporary file");
			j->fresh = true;
			j->runs.align = be->base_copy ? RUNS_PAGE : 1;
			j->runs.max = fl->runs_max;
		}
		fjob_known(j);
		if (j->taken)
			atomic_fetch_sub(&be->temp_taken, 1);	/* counted in temp_open now */
		if (!j->err)
			j->dfd = open_direct(be, j->out);
		if (!j->err)
			prealloc_fresh(be, j);
		if (j->err)
			j->phase = FJ_DONE;
		atomic_fetch_add(&be->st.flushing_bytes, j->v->size);
	}
	while (pending) {
		for (unsigned i = 0; i < n; i++)
			fjob_submit(fl, &jobs[i]);
		pending = 0;
		for (unsigned i = 0; i < n; i++)
			pending += jobs[i].phase != FJ_DONE;
		if (!pending)
			break;
		unsigned got = bio_reap(fl->bio, cqes, CKPT_ARRAY_LEN(cqes), 1);
		for (unsigned k = 0; k < got; k++)
			fjob_complete(fl, &cqes[k]);
	}
	for (unsigned i = 0; i < n; i++) {
		struct fjob *j = &jobs[i];
		atomic_fetch_sub(&be->st.flushing_bytes, j->v->size);
		if (j->dfd >= 0)
			bsys.close(j->dfd);
		if (!j->err) {
			struct stat st;
			/* Its inode: how the mount recognises its own publication on the backend. */
			j->op->out_ino = bsys.fstatat(j->out->fd, "", &st) == 0 ? st.st_ino : 0;
			cleaves_put(j->op->leaves);
			j->op->leaves = digest_take_leaves(&j->dg);
			if (j->op->leaves && j->fresh && !j->runs.lost) {
				j->op->leaves->data_known = true;
				j->op->leaves->data = j->runs.v;
				j->op->leaves->ndata = j->runs.n;
				j->runs.v = NULL;
			}
			atomic_fetch_add(&be->st.hashed_bytes, j->dg.hashed);
			j->op->digest = digest_final(&j->dg);
		}
		digest_free(&j->dg);
		free(j->known);
		j->known = NULL;
		free(j->runs.v);
		j->runs = (struct runrec){ 0 };
		if (j->err && j->out && j->fresh) {
			cfd_put(j->out);	/* unlinks the temp file */
			j->out = NULL;
		}
	}
	pthread_mutex_lock(&be->lock);
	for (unsigned i = 0; i < n; i++) {
		struct fjob *j = &jobs[i];
		j->op->err = j->err;
		j->op->state = j->err ? OPS_FAILED : OPS_READY;
		if (j->err)
			ckpt_log(LOG_WARNING, "writing '%s' failed while %s: %s", j->op->name,
				 j->step ? j->step : "flushing", strerror(-j->err));
		if (!j->err) {
			cfd_put(j->op->out);
			j->op->out = j->out;
		} else {
			cfd_put(j->out);
		}
	}
	publisher_kick_locked(be);
	pthread_mutex_unlock(&be->lock);
}

/*
 * Take a batch off the queue; be->lock held.  Each version written to a new
 * temporary file holds its descriptor until it is published; once
 * be->temp_cap are open (the publisher is held back — a blocked operation
 * with thousands of files behind it), only versions that nothing before
 * them holds back are taken, so the daemon keeps descriptors for its users
 * and the publisher always gets what it can publish next.
 */
static unsigned flush_pick(struct backend *be, struct fjob *jobs, struct stage_job *stage)
{
	unsigned n = 0, fresh = atomic_load(&be->temp_open) + atomic_load(&be->temp_taken);
	uint64_t bytes = 0;
	struct list *e = be->flushq.next;

	stage->n = 0;

	while (e != &be->flushq && n < FLUSH_BATCH && bytes < FLUSH_BATCH_BYTES) {
		struct list *next = e->next;
		struct op *op = list_entry(e, struct op, qlink);
		bool room = op->ver->out || fresh < be->temp_cap || op->flush_first;
		if (room && (op->ver->out || atomic_load(&op->dir->present) ||
			     atomic_load(&op->dir->has_stage))) {
			list_del(&op->qlink);
			op->state = OPS_FLUSHING;
			memset(&jobs[n], 0, sizeof(jobs[n]));
			if (!op->ver->out) {
				jobs[n].taken = true;
				atomic_fetch_add(&be->temp_taken, 1);
				fresh++;
			}
			jobs[n++].op = op;
			bytes += op->ver->size;
		} else if (room && !op->ver->out && !stage->n) {
			/* Its directory is made through the mount and not there yet: stage it (stage.c). */
			stage_collect_locked(be, op->dir, stage);
		}
		/* Else no room, or its directory is not on the backend yet: the publisher decides (order.c). */
		e = next;
	}
	return n;
}

static void *flusher_main(void *arg)
{
	struct flusher *fl = arg;
	struct backend *be = fl->be;
	struct fjob *jobs = xcalloc(FLUSH_BATCH, sizeof(*jobs));
	const char *why;

	thread_background("ckptfs-flush", (int)be->opt.flush_nice);
	fl->bio = bio_create(be->opt.io, be->opt.queue_depth, &why);
	bio_count_written(fl->bio, &be->st.io_written);	/* progress within a batch */
	struct stage_job stage = { 0 };

	pthread_mutex_lock(&be->lock);
	for (;;) {
		if (be->aborting)
			break;
		unsigned n = flush_pick(be, jobs, &stage);
		if (stage.n) {	/* then its files, in the next pick */
			pthread_mutex_unlock(&be->lock);
			bool staged = stage_run(be, &stage);
			pthread_mutex_lock(&be->lock);
			if (!n && staged)
				continue;
		}
		if (!n) {
			if (be->stopping && list_empty(&be->ops))
				break;
			cond_wait_ns(&be->flush_cond, &be->lock, 100 * 1000000);
			continue;
		}
		pthread_mutex_unlock(&be->lock);
		flush_batch(fl, jobs, n);
		pthread_mutex_lock(&be->lock);
	}
	pthread_mutex_unlock(&be->lock);
	bio_destroy(fl->bio);
	free(jobs);
	return NULL;
}

/* ---- the spiller ---------------------------------------------------------- */

/*
 * A version's whole contents into fd (a new, empty file outside the
 * backend), with its digest (rescue.c).  Holes stay holes; ranges from
 * backend files are copied extent by extent as the flushers do.
 */
int flush_copy_version(struct cver *v, int fd, XXH128_hash_t *digest)
{
	struct digest dg;
	bool no_cfr = false;
	struct xcopy x = { .dg = &dg, .dst = fd, .buf = xmalloc(BOUNCE_SIZE), .sys = &bsys_direct,
			   .skip_zeros = true, .no_cfr = &no_cfr };
	int r = 0;

	/*
	 * Spilled bytes from a stage that failed a sync may be gone: no rescue
	 * copy of them.  Only the mark is read: the rescue runs when the
	 * backend stopped answering, and a sync (or a flusher stuck in one,
	 * holding stage_sync's lock) could hold it for good.
	 */
	for (uint32_t i = 0; i < v->nseg; i++)
		if (v->segs[i].kind == CSEG_FD && v->segs[i].staged && atomic_load(&v->segs[i].f->lost)) {
			free(x.buf);
			return -EIO;
		}
	digest_init(&dg);
	for (uint32_t i = 0; i < v->nseg && r == 0; i++) {
		const struct cseg *s = &v->segs[i];
		size_t a = 0, b;
		if (s->kind == CSEG_MEM) {
			digest_update(&dg, s->mem, s->len);
			while (r == 0 && next_data_run(s->mem, s->off, s->len, a, &a, &b)) {
				r = pwrite_all_io(&bsys_direct, fd, s->mem + a, b - a, s->off + a);
				a = b;
			}
		} else if (s->kind == CSEG_ZERO) {
			digest_zeros(&dg, s->len);
		} else {
			x.src = s->f->fd;
			r = xcopy_range(&x, s->foff, s->off, s->len);
		}
	}
	if (r == 0)
		r = bsys_direct.ftruncate(fd, (off_t)v->size);
	*digest = digest_final(&dg);
	free(x.buf);
	return r;
}

static struct ckpt_ratelimit spill_rl;	/* spiller thread only */

/* Spill ch of cf: -EBUSY if cf's lock stayed held (cfile_spill_begin), else 0. */
static int spill_one(struct backend *be, struct cfile *cf, struct chunk *ch)
{
	struct spill_job job;
	int r = cfile_spill_begin(cf, ch, &job);

	if (r == -EBUSY)
		return r;
	if (r == -EAGAIN && be->hooks.stage_dir) {
		struct bnode *dir = be->hooks.stage_dir(be->hooks.arg, cf);
		struct cfd *f = NULL;
		if (!dir)
			return 0;
		if (atomic_load(&dir->present) && temp_create(be, dir, 's', &f) == 0)
			cfile_set_stage(cf, f);
		bnode_put(dir);
		r = cfile_spill_begin(cf, ch, &job);
		if (r < 0 && f)	/* sealed meanwhile: an unused stage must not linger */
			cfile_drop_empty_stage(cf, f);
		cfd_put(f);	/* unlinks it if the file does not hold it */
	}
	if (r < 0)
		return 0;
	r = pwrite_all(job.f->fd, job.mem, job.len, job.off);
	if (r == 0)
		atomic_fetch_add(&be->st.written_bytes, job.len);
	else	/* per chunk, round after round while writers wait (a full backend) */
		ckpt_log_limited(&spill_rl, 10ull * 1000000000ull, LOG_WARNING,
				 "spilling to the backend failed: %s", strerror(-r));
	cfile_spill_end(cf, &job, r);
	return 0;
}

static void *spiller_main(void *arg)
{
	struct backend *be = arg;
	struct cache *c = be->cache;
	uint32_t low = CKPT_MAX(2u, c->nchunks / 16);

	pthread_mutex_lock(&be->lock);
	while (!be->stopping) {
		if (!be->spill_wanted)
			cond_wait_ns(&be->spill_cond, &be->lock, 100 * 1000000);
		be->spill_wanted = false;
		pthread_mutex_unlock(&be->lock);
		/*
		 * Below the low mark, or while a write waits for space: the
		 * estimate counts free slots of split chunks, which a full
		 * chunk cannot use while one dirty slot keeps each chunk split.
		 */
		struct cfile *busy[8];	/* files whose lock stayed held this round: passed over */
		unsigned nbusy = 0;
		for (unsigned i = 0; i < c->nchunks && (cache_reclaimable(c) < low ||
							cache_has_waiters(c)); i++) {
			struct cfile *cf;
			struct chunk *ch = cache_spill_pick(c, &cf);
			if (!ch)
				break;
			bool skip = false;
			for (unsigned k = 0; k < nbusy && !skip; k++)
				skip = busy[k] == cf;
			if (!skip && spill_one(be, cf, ch) == -EBUSY && nbusy < CKPT_ARRAY_LEN(busy))
				busy[nbusy++] = cf;	/* compared as an address only */
			cfile_put(cf);
		}
		pthread_mutex_lock(&be->lock);
	}
	pthread_mutex_unlock(&be->lock);
	return NULL;
}

void backend_want_spill(void *arg)
{
	struct backend *be = arg;

	pthread_mutex_lock(&be->lock);
	be->spill_wanted = true;
	pthread_cond_signal(&be->spill_cond);
	pthread_mutex_unlock(&be->lock);
}

/* ---- threads ------------------------------------------------------------- */

struct flush_priv {
	struct flusher *fl;
	char *zeros;
};

void flush_threads_start(struct backend *be)
{
	struct flush_priv *p = xcalloc(1, sizeof(*p));

	be->nflushers = be->opt.flush_threads ? be->opt.flush_threads : 1;
	be->flushers = xcalloc(be->nflushers, sizeof(pthread_t));
	p->fl = xcalloc(be->nflushers, sizeof(*p->fl));
	p->zeros = xcalloc(1, BOUNCE_SIZE);
	be->flush_priv = p;
	for (unsigned i = 0; i < be->nflushers; i++) {
		p->fl[i].be = be;
		p->fl[i].bounce = xmalloc(BOUNCE_SIZE);
		p->fl[i].zeros = p->zeros;
		p->fl[i].runs_max = runs_max();
		pthread_create(&be->flushers[i], NULL, flusher_main, &p->fl[i]);
	}
	pthread_create(&be->spiller, NULL, spiller_main, be);
}

/*
 * Join the flushers and the spiller; with a deadline (monotonic ns, 0:
 * none), one still inside a backend call then (a hung server) is left
 * running: false, and nothing is freed, since it may yet come back.
 */
bool flush_threads_stop(struct backend *be, uint64_t deadline_ns)
{
	struct flush_priv *p = be->flush_priv;
	bool all = true;

	for (unsigned i = 0; i < be->nflushers; i++)
		all &= join_until(be->flushers[i], deadline_ns);
	all &= join_until(be->spiller, deadline_ns);
	if (!all)
		return false;
	for (unsigned i = 0; i < be->nflushers; i++)
		free(p->fl[i].bounce);
	free(be->flushers);
	free(p->fl);
	free(p->zeros);
	free(p);
	be->flush_priv = NULL;
	return true;
}
