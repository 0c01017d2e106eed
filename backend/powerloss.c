/*
 * powerloss.c — a layer over the backend system call table (bsys.h) that
 * keeps, in a shadow directory outside the backend, what a power cut would
 * leave of the backend at every moment: the state POSIX promises to survive.
 * Tests (tests/integrity/powerloss.c) kill the daemon, then build the image
 * of the backend "after the power came back" from the shadow, and check it.
 *
 * CKPTFS_POWERLOSS=SHADOW (an absolute path, without symlinks, "." or "..",
 * of a new or empty directory outside the backend) installs it, beneath the fault wrappers if CKPTFS_FAULT is set too: a
 * fault's delay is spent before the layer takes its locks, and a call that
 * a fault fails never reaches the backend or the shadow.  Unset, nothing is
 * installed and nothing costs anything.
 *
 * What is durable, as POSIX defines it:
 *  D1  everything on the backend when the layer starts (it walks the tree);
 *  D2  a file's contents, size and mode as of an fsync or fdatasync of it
 *      that returned 0 (through bsys, or completed through io_uring:
 *      bsys.io_result) — data written by any means, O_DIRECT included;
 *  D3  a directory's entries (name -> object, symlink targets) as of an
 *      fsync of it that returned 0.
 * And, for a journaling file system that keeps metadata in order but not
 * data ("metadata in order, data lost"):
 *  D4  every namespace operation made through bsys (create, mkdir, symlink,
 *      link, rename, unlink, rmdir), in the order made; a prefix of them
 *      survives, at least up to where the last fsync or fdatasync call began.
 *
 * The shadow records D1..D4 before the call returns to the daemon, so
 * nothing the daemon does after an fsync returns can be recorded as durable
 * at it.  Objects are named by KEY = "<inode>.<generation>" (hex; the
 * generation is the inode's FS_IOC_GETVERSION), so an inode number reused by
 * a new file is a new object.  Where there is no generation (tmpfs, which
 * never reuses inode numbers anyway; symlinks) it is 0.
 *
 *   SHADOW/root         the KEY of the backend root directory, one line
 *   SHADOW/data/KEY     a file's durable contents; its mode bits are the
 *                       file's durable mode.  Written to a temporary name and
 *                       renamed, so a kill never tears it — except that a
 *                       file the daemon only appends to (O_APPEND: the
 *                       manifest log) gets just its grown tail appended.
 *   SHADOW/dirs/KEY     a directory's durable listing: "D <mode octal>\n",
 *                       then per entry "<t> <KEY> <namelen> <targetlen>\n"
 *                       followed by the name, the symlink target (empty for
 *                       others) and "\n"; t is f, d, l or o (other).
 *   SHADOW/journal      D4, one record per operation, appended in order:
 *                       "<op> <t> <K1> <K2> <K3> <flags> <len1> <len2>\n"
 *                       then len1 + len2 bytes (two strings) and "\n".
 *     C t DIR OBJ - mode  name        a file created (open O_CREAT, mknod)
 *     M d DIR OBJ - mode  name        a directory made
 *     S l DIR OBJ - 0     name target a symlink made
 *     L t OLD OBJ NEW 0   old new     a hard link made (OBJ: the object)
 *     R t OLD OBJ NEW fl  old new     renamed (renameat2 flags fl; OBJ: the
 *                                     object now at NEW/new)
 *     U - DIR - - 0       name        a name removed (unlink, rmdir)
 *     F - - - - N         (none)      an fsync returned 0: the first N
 *                                     records are committed
 *                       Unused keys are "-".  The initial walk (D1) is written
 *                       as C/M/S records followed by an F.  A record torn by
 *                       a kill is incomplete and readers drop it.
 *
 * What the layer cannot see is not recorded: a backend system call made
 * outside bsys changes the real backend but not the shadow (a file created
 * that way is missing from the journal; a directory fsync'd that way keeps
 * its older durable listing).  The layer reads the backend and writes the
 * shadow through `bsys_direct` (the confined table, never wrapped): the
 * shadow is the test's truth, not the backend, and faults never reach it.
 * It reads a file's contents through the fd being synced, which must be
 * readable and not O_DIRECT (the daemon syncs the fds it writes through
 * the page cache); one that is not fails the fsync with EIO, loudly.
 *
 * A fault rule with lose=1 (fault.c) models a failed write-back the kernel
 * forgets: the bytes of an append-only file that the failed sync was to
 * write (past its durable copy) stay zeros in every later durable copy, as
 * a later fsync that returns 0 does not write pages marked clean
 * (bsys_powerloss_lose; at most PL_DROPS ranges in all).
 *
 * If the shadow cannot be updated, the fsync that needed it returns -EIO (and
 * after a lost journal record, every fsync does): the daemon is never told
 * "durable" about something the shadow did not record.
 *
 * Threads: flushers, the publisher and the spiller all come through here.
 * Lock order: pl.ns_lock -> pl.file_lock[i].  ns_lock is held across every
 * namespace operation and its journal record, and across a directory fsync
 * and the listing read after it, so the journal's order is the backend's
 * and a listing shows exactly the state its fsync made durable.  The copy of
 * a file's contents at its fsync holds the file's stripe lock, so two syncs
 * of one file store their copies in the order they happened.
 */
#include "backend/bsys.h"
#include "cache/util.h"

#include <errno.h>
#include <limits.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define PL_KEY_LEN 48
#define PL_STRIPES 16
#define PL_TAIL_CHECK 4096u	/* bytes compared before appending only a tail */
#define PL_DROPS 64		/* ranges lost by failed syncs (bsys_powerloss_lose) */

#define D bsys_direct

static struct {
	int data, dirs;			/* SHADOW/data, SHADOW/dirs */
	int journal;			/* SHADOW/journal, O_APPEND */
	pthread_mutex_t ns_lock;
	uint64_t records;		/* journal records written; ns_lock */
	atomic_bool broken;		/* a record was lost: nothing is durable any more */
	pthread_mutex_t file_lock[PL_STRIPES];
	atomic_uint_least64_t tmp;	/* temporary names in the shadow */
	struct bsys real;
	bool on;			/* installed */
	pthread_mutex_t drop_lock;	/* the ranges below */
	unsigned ndrops;
	struct pl_drop {
		char key[PL_KEY_LEN];
		uint64_t off, end;
	} drops[PL_DROPS];
} pl = { .drop_lock = PTHREAD_MUTEX_INITIALIZER };

struct pl_obj {
	char key[PL_KEY_LEN];
	char type;			/* f d l o */
	mode_t mode;
	uint64_t size;
};

static void pl_warn(const char *what, int err)
{
	fprintf(stderr, "ckptfs: CKPTFS_POWERLOSS: %s: %s\n", what, strerror(-err));
}

/* FS_IOC_GETVERSION of an open fd, or 0 where the file system has none. */
static uint64_t pl_fd_generation(int fd)
{
	unsigned gen;

	return ioctl(fd, FS_IOC_GETVERSION, &gen) == 0 ? (uint64_t)gen + 1 : 0;
}

/* The generation of (dirfd, name) — or of dirfd itself for name "" — with st its lstat. */
static uint64_t pl_generation(int dirfd, const char *name, const struct stat *st)
{
	uint64_t gen = 0;
	int fd;

	if (!S_ISREG(st->st_mode) && !S_ISDIR(st->st_mode))
		return 0;
	if (!name[0] && (gen = pl_fd_generation(dirfd)))
		return gen;
	/* By name, or dirfd is an O_PATH directory handle: open it for the ioctl. */
	fd = D.openat(dirfd, name[0] ? name : ".", O_RDONLY | O_NONBLOCK |
		      (S_ISDIR(st->st_mode) ? O_DIRECTORY : 0), 0);
	if (fd >= 0) {
		gen = pl_fd_generation(fd);
		D.close(fd);
	}
	return gen;
}

/* The object at (dirfd, name), or dirfd itself for name "". */
static int pl_stat(int dirfd, const char *name, struct pl_obj *o)
{
	struct stat st;
	int r = D.fstatat(dirfd, name, &st);

	if (r < 0)
		return r;
	snprintf(o->key, sizeof(o->key), "%llx.%llx", (unsigned long long)st.st_ino,
		 (unsigned long long)pl_generation(dirfd, name, &st));
	o->mode = st.st_mode & 07777;
	o->size = (uint64_t)st.st_size;
	o->type = S_ISREG(st.st_mode) ? 'f' : S_ISDIR(st.st_mode) ? 'd'
		  : S_ISLNK(st.st_mode) ? 'l' : 'o';
	return 0;
}

static unsigned pl_stripe(const char *key)
{
	unsigned h = 5381;
	while (*key)
		h = h * 33 + (unsigned char)*key++;
	return h % PL_STRIPES;
}

/* A new temporary name in a shadow directory, opened for writing. */
static int pl_tmp_open(int dirfd, char name[32])
{
	snprintf(name, 32, ".t.%llu", (unsigned long long)atomic_fetch_add(&pl.tmp, 1));
	return D.openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL, 0600);
}

/* Give the temporary `tmp` (fd, its contents written) its mode and name, or remove it. */
static int pl_tmp_commit(int dirfd, int fd, const char *tmp, const char *name, mode_t mode, int r)
{
	if (r == 0)
		r = D.fchmod(fd, mode);
	D.close(fd);
	if (r == 0)
		r = D.renameat2(dirfd, tmp, dirfd, name, 0);
	if (r < 0)
		D.unlinkat(dirfd, tmp, 0);
	return r;
}

/* Write buf as dirfd/name whole: a temporary name, then rename. */
static int pl_store(int dirfd, const char *name, const void *buf, size_t len, mode_t mode)
{
	char tmp[32];
	int fd = pl_tmp_open(dirfd, tmp);

	if (fd < 0)
		return fd;
	return pl_tmp_commit(dirfd, fd, tmp, name, mode, write_full(fd, buf, len));
}

/* Copy [off, end) of src to dst at the same offsets. */
static int pl_copy_range(int src, int dst, uint64_t off, uint64_t end)
{
	char buf[1 << 16];

	while (off < end) {
		loff_t in = (loff_t)off, out = (loff_t)off;
		ssize_t n = copy_file_range(src, &in, dst, &out, (size_t)(end - off), 0);
		if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP ||
			      errno == ENOSYS)) {
			n = pread(src, buf, (size_t)CKPT_MIN(end - off, sizeof(buf)), (off_t)off);
			if (n > 0 && pwrite(dst, buf, (size_t)n, (off_t)off) != n)
				return errno ? -errno : -EIO;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;	/* the file shrank meanwhile: it ends here */
		off += (uint64_t)n;
	}
	return 0;
}

/* True if the first `len` bytes of shadow file dst end as src's do. */
static bool pl_same_tail(int src, int dst, uint64_t len)
{
	char a[PL_TAIL_CHECK], b[PL_TAIL_CHECK];
	size_t k = (size_t)CKPT_MIN(len, sizeof(a));
	off_t off = (off_t)(len - k);

	return pread(src, a, k, off) == (ssize_t)k && pread(dst, b, k, off) == (ssize_t)k &&
	       memcmp(a, b, k) == 0;
}

/* A file only appended to: append its grown tail to its copy (1), or 0 if that will not do. */
static int pl_append_tail(int src, const char *key, uint64_t end)
{
	struct stat st;
	int r = 0, dst = D.openat(pl.data, key, O_RDWR, 0);

	if (dst < 0)
		return 0;
	/* A kill mid-copy leaves part of the tail, as a cut during the fsync may. */
	if (D.fstatat(dst, "", &st) == 0 && (uint64_t)st.st_size <= end &&
	    pl_same_tail(src, dst, (uint64_t)st.st_size))
		r = (r = pl_copy_range(src, dst, (uint64_t)st.st_size, end)) < 0 ? r : 1;
	D.close(dst);
	return r;
}

/* Zero, in the durable copy of key (end bytes long), what failed syncs lost. */
static int pl_drops_apply(const char *key, uint64_t end)
{
	static const char zeros[4096];
	int r = 0, dst = -1;

	pthread_mutex_lock(&pl.drop_lock);
	for (unsigned i = 0; i < pl.ndrops && r == 0; i++) {
		if (strcmp(pl.drops[i].key, key) != 0)
			continue;
		if (dst < 0 && (dst = D.openat(pl.data, key, O_WRONLY, 0)) < 0) {
			r = dst;
			break;
		}
		for (uint64_t o = pl.drops[i].off; o < CKPT_MIN(pl.drops[i].end, end) && r == 0;) {
			size_t k = (size_t)CKPT_MIN(CKPT_MIN(pl.drops[i].end, end) - o, sizeof(zeros));
			r = pwrite(dst, zeros, k, (off_t)o) == (ssize_t)k ? 0 : -EIO;
			o += k;
		}
	}
	pthread_mutex_unlock(&pl.drop_lock);
	if (dst >= 0)
		D.close(dst);
	return r < 0 ? r : 0;
}

void bsys_powerloss_lose(int fd)
{
	struct pl_obj o;
	struct stat st;
	int fl = fcntl(fd, F_GETFL);
	uint64_t durable = 0;

	if (!pl.on || fl < 0 || !(fl & O_APPEND) || pl_stat(fd, "", &o) < 0)
		return;		/* append-only files only: their lost bytes are a range */
	if (D.fstatat(pl.data, o.key, &st) == 0)
		durable = (uint64_t)st.st_size;
	pthread_mutex_lock(&pl.drop_lock);
	if (o.size > durable && pl.ndrops < PL_DROPS) {
		struct pl_drop *d = &pl.drops[pl.ndrops++];
		snprintf(d->key, sizeof(d->key), "%s", o.key);
		d->off = durable;
		d->end = o.size;
	} else if (o.size > durable) {
		pl_warn("remembering bytes a failed sync lost", -ENOSPC);
	}
	pthread_mutex_unlock(&pl.drop_lock);
}

/*
 * D2: fd's contents became durable.  bound: how much of an append-only file
 * the sync covers (its size when the call began), or UINT64_MAX.
 */
static int pl_file_synced(int fd, uint64_t bound)
{
	struct pl_obj o;
	char tmp[32];
	int fl = fcntl(fd, F_GETFL), r, dst;
	unsigned s;

	if (fl < 0 || (fl & O_ACCMODE) == O_WRONLY || (fl & O_DIRECT))
		return -EBADF;	/* the layer reads through the fd being synced */
	if ((r = pl_stat(fd, "", &o)) < 0)
		return r;
	uint64_t end = (fl & O_APPEND) ? CKPT_MIN(bound, o.size) : o.size;
	s = pl_stripe(o.key);
	pthread_mutex_lock(&pl.file_lock[s]);
	if (!(fl & O_APPEND) || (r = pl_append_tail(fd, o.key, end)) == 0) {
		if ((dst = pl_tmp_open(pl.data, tmp)) < 0)
			r = dst;
		else
			r = pl_tmp_commit(pl.data, dst, tmp, o.key, o.mode,
					  pl_copy_range(fd, dst, 0, end));
	}
	if (r >= 0)
		r = pl_drops_apply(o.key, end);
	pthread_mutex_unlock(&pl.file_lock[s]);
	return r < 0 ? r : 0;
}

/* One listing being built: the directory's fd and the text so far. */
struct pl_listing {
	int fd;
	struct strbuf b;
};

static int pl_list_one(void *arg, const char *name)
{
	struct pl_listing *l = arg;
	struct pl_obj o;
	char target[PATH_MAX];
	ssize_t tl = 0;

	if (pl_stat(l->fd, name, &o) < 0)
		return 0;	/* gone meanwhile: not ours (ns_lock held) */
	if (o.type == 'l' && (tl = D.readlinkat(l->fd, name, target, sizeof(target))) < 0)
		tl = 0;
	sb_printf(&l->b, "%c %s %zu %zu\n%s%.*s\n", o.type, o.key, strlen(name), (size_t)tl,
		  name, (int)tl, target);
	return 0;
}

/* D3: the listing of directory fd, as it is now, becomes its durable one. */
static int pl_dir_synced(int fd)
{
	struct pl_listing l = { .fd = fd };
	struct pl_obj self;
	int r;

	if ((r = pl_stat(fd, "", &self)) < 0)
		return r;
	sb_printf(&l.b, "D %o\n", (unsigned)self.mode);
	if ((r = D.readdir(fd, pl_list_one, &l)) == 0)
		r = pl_store(pl.dirs, self.key, l.b.s, l.b.len, 0600);
	sb_free(&l.b);
	return r;
}

/* Append one journal record; ns_lock held. */
static int pl_journal(char op, char type, const char *k1, const char *k2, const char *k3,
		      unsigned long long flags, const char *s1, const char *s2)
{
	struct strbuf b = { 0 };
	int r;

	s1 = s1 ? s1 : "";
	s2 = s2 ? s2 : "";
	sb_printf(&b, "%c %c %s %s %s %llu %zu %zu\n%s%s\n", op, type, k1 ? k1 : "-",
		  k2 ? k2 : "-", k3 ? k3 : "-", flags, strlen(s1), strlen(s2), s1, s2);
	/* One write on an O_APPEND fd: records never interleave. */
	r = write_full(pl.journal, b.s, b.len);
	sb_free(&b);
	if (r == 0)
		pl.records++;
	else
		atomic_store(&pl.broken, true);
	return r;
}

/* ---- the wrappers ------------------------------------------------------- */

/* Key of directory fd d (ns_lock held); "" when it cannot be read. */
static const char *pl_dir_key(int d, struct pl_obj *o)
{
	return pl_stat(d, "", o) == 0 ? o->key : "";
}

/* A namespace operation happened but its record did not: say so once. */
static void pl_lost(const char *what, int err)
{
	static atomic_bool said;
	if (err < 0 && !atomic_exchange(&said, true))
		pl_warn(what, err);
}

/* Record that (d, n) was just created, as op (C, M or S); ns_lock held. */
static void pl_created(char op, int d, const char *n, const char *target)
{
	struct pl_obj dir, obj;

	if (pl_stat(d, n, &obj) == 0)
		pl_lost("journal", pl_journal(op, obj.type, pl_dir_key(d, &dir), obj.key, NULL,
					      op == 'S' ? 0 : obj.mode, n, target));
}

static int pl_openat(int d, const char *n, int fl, mode_t m)
{
	struct stat st;
	bool existed;
	int fd;

	if (!(fl & O_CREAT))
		return pl.real.openat(d, n, fl, m);
	pthread_mutex_lock(&pl.ns_lock);
	existed = !(fl & O_EXCL) && D.fstatat(d, n, &st) == 0;
	fd = pl.real.openat(d, n, fl, m);
	if (fd >= 0 && !existed)
		pl_created('C', d, n, NULL);
	pthread_mutex_unlock(&pl.ns_lock);
	return fd;
}

static int pl_mkdirat(int d, const char *n, mode_t m)
{
	int r;

	pthread_mutex_lock(&pl.ns_lock);
	if ((r = pl.real.mkdirat(d, n, m)) == 0)
		pl_created('M', d, n, NULL);
	pthread_mutex_unlock(&pl.ns_lock);
	return r;
}

static int pl_mknodat(int d, const char *n, mode_t m, dev_t dev)
{
	int r;

	pthread_mutex_lock(&pl.ns_lock);
	if ((r = pl.real.mknodat(d, n, m, dev)) == 0)
		pl_created('C', d, n, NULL);
	pthread_mutex_unlock(&pl.ns_lock);
	return r;
}

static int pl_symlinkat(const char *t, int d, const char *n)
{
	int r;

	pthread_mutex_lock(&pl.ns_lock);
	if ((r = pl.real.symlinkat(t, d, n)) == 0)
		pl_created('S', d, n, t);
	pthread_mutex_unlock(&pl.ns_lock);
	return r;
}

/* A link or rename (op L or R) made (nd, nn) name what (od, on) named; ns_lock held. */
static void pl_moved(char op, int od, const char *on, int nd, const char *nn, unsigned fl)
{
	struct pl_obj odir, ndir, obj;

	if (pl_stat(nd, nn, &obj) == 0)
		pl_lost("journal", pl_journal(op, obj.type, pl_dir_key(od, &odir), obj.key,
					      pl_dir_key(nd, &ndir), fl, on, nn));
}

static int pl_linkat(int od, const char *on, int nd, const char *nn)
{
	int r;

	pthread_mutex_lock(&pl.ns_lock);
	if ((r = pl.real.linkat(od, on, nd, nn)) == 0)
		pl_moved('L', od, on, nd, nn, 0);
	pthread_mutex_unlock(&pl.ns_lock);
	return r;
}

static int pl_renameat2(int od, const char *on, int nd, const char *nn, unsigned fl)
{
	int r;

	pthread_mutex_lock(&pl.ns_lock);
	if ((r = pl.real.renameat2(od, on, nd, nn, fl)) == 0)
		pl_moved('R', od, on, nd, nn, fl);
	pthread_mutex_unlock(&pl.ns_lock);
	return r;
}

static int pl_unlinkat(int d, const char *n, int fl)
{
	struct pl_obj dir;
	int r;

	pthread_mutex_lock(&pl.ns_lock);
	if ((r = pl.real.unlinkat(d, n, fl)) == 0)
		pl_lost("journal", pl_journal('U', '-', pl_dir_key(d, &dir), NULL, NULL, 0, n, NULL));
	pthread_mutex_unlock(&pl.ns_lock);
	return r;
}

/* fsync or fdatasync through bsys: D2 or D3, and the D4 commit point. */
static int pl_sync(int fd, bool data)
{
	struct pl_obj o;
	uint64_t committed;
	int r, rec = 0;

	if (pl_stat(fd, "", &o) < 0)	/* not ours to judge: let the call say */
		return data ? pl.real.fdatasync(fd) : pl.real.fsync(fd);
	pthread_mutex_lock(&pl.ns_lock);
	committed = pl.records;
	if (o.type != 'd')	/* a file's copy need not hold up the namespace */
		pthread_mutex_unlock(&pl.ns_lock);
	r = data ? pl.real.fdatasync(fd) : pl.real.fsync(fd);
	if (r == 0)
		rec = o.type == 'd' ? pl_dir_synced(fd) : pl_file_synced(fd, o.size);
	if (o.type != 'd')
		pthread_mutex_lock(&pl.ns_lock);
	if (r == 0 && rec == 0)
		rec = atomic_load(&pl.broken) ? -EIO
		      : pl_journal('F', '-', NULL, NULL, NULL, committed, NULL, NULL);
	pthread_mutex_unlock(&pl.ns_lock);
	if (rec < 0) {
		pl_warn("recording an fsync", rec);
		return -EIO;
	}
	return r;
}

static int pl_fsync(int fd) { return pl_sync(fd, false); }
static int pl_fdatasync(int fd) { return pl_sync(fd, true); }

/*
 * An fsync completed through io_uring: its call began before we can know,
 * so it records D2/D3 but no commit point (the daemon must not rely on a
 * file's fdatasync to commit unrelated metadata anyway).
 */
static int pl_io_result(enum bsys_op op, int fd, size_t len, int res)
{
	struct pl_obj o;
	int r;

	res = pl.real.io_result(op, fd, len, res);
	if (res < 0 || (op != BOP_FSYNC && op != BOP_FDATASYNC) || pl_stat(fd, "", &o) < 0)
		return res;
	if (atomic_load(&pl.broken))
		return -EIO;
	if (o.type == 'd') {
		pthread_mutex_lock(&pl.ns_lock);
		r = pl_dir_synced(fd);
		pthread_mutex_unlock(&pl.ns_lock);
	} else {
		r = pl_file_synced(fd, UINT64_MAX);
	}
	if (r < 0) {
		pl_warn("recording an fsync", r);
		return -EIO;
	}
	return res;
}

/* ---- the initial state (D1) ------------------------------------------------ */

struct pl_walk {
	int fd;
	const char *key;
	int depth;
	int err;
};

static int pl_walk_dir(int fd, const char *key, int depth);

static int pl_walk_one(void *arg, const char *name)
{
	struct pl_walk *w = arg;
	struct pl_obj o;
	char target[PATH_MAX];
	ssize_t tl;
	int sub;

	if (pl_stat(w->fd, name, &o) < 0)
		return 0;
	if (o.type == 'd') {
		w->err = pl_journal('M', 'd', w->key, o.key, NULL, o.mode, name, NULL);
		sub = D.openat(w->fd, name, O_RDONLY | O_DIRECTORY, 0);
		if (w->err == 0 && sub >= 0)
			w->err = pl_walk_dir(sub, o.key, w->depth + 1);
		if (sub >= 0)
			D.close(sub);
	} else if (o.type == 'l') {
		tl = D.readlinkat(w->fd, name, target, sizeof(target) - 1);
		target[tl < 0 ? 0 : tl] = '\0';
		w->err = pl_journal('S', 'l', w->key, o.key, NULL, 0, name, target);
	} else {
		struct stat st;
		w->err = pl_journal('C', o.type, w->key, o.key, NULL, o.mode, name, NULL);
		sub = o.type == 'f' ? D.openat(w->fd, name, O_RDONLY, 0) : -1;
		if (w->err == 0 && sub >= 0 && D.fstatat(pl.data, o.key, &st) < 0)
			w->err = pl_file_synced(sub, UINT64_MAX);	/* once per object */
		if (sub >= 0)
			D.close(sub);
	}
	return w->err;
}

static int pl_walk_dir(int fd, const char *key, int depth)
{
	struct pl_walk w = { .fd = fd, .key = key, .depth = depth };
	int r;

	if (depth > 256)
		return -ELOOP;
	if ((r = pl_dir_synced(fd)) < 0)
		return r;
	r = D.readdir(fd, pl_walk_one, &w);
	return r ? r : w.err;
}

/* One line naming the variable and what is wrong; err 0: no system error. */
static int pl_fail(const char *env, const char *why, int err)
{
	fprintf(stderr, "ckptfs: CKPTFS_POWERLOSS=%s: %s%s%s\n", env, why, err ? ": " : "",
		err ? strerror(-err) : "");
	return -EINVAL;
}

/* An absolute path without "." or ".." components (so, opened without symlinks, canonical). */
static bool pl_plain_path(const char *p)
{
	if (p[0] != '/')
		return false;
	for (const char *c = p; *c; c++)
		if (c[0] == '/' && c[1] == '.' && (c[2] == '/' || c[2] == '\0' ||
						   (c[2] == '.' && (c[3] == '/' || c[3] == '\0'))))
			return false;
	return true;
}

static int pl_any_entry(void *arg, const char *name)
{
	return 1;
}

/* Make (if missing) and open the shadow directory, which must be empty. */
static int pl_open_shadow(const char *env, const char *backend)
{
	char parent[PATH_MAX], base[NAME_MAX + 1];
	size_t len = strlen(env), bl = strlen(backend);
	int pfd, sfd, r;

	if (!pl_plain_path(env))
		return pl_fail(env, "must be an absolute path without \".\" or \"..\"", 0);
	while (len > 1 && env[len - 1] == '/')
		len--;
	if (len <= 1 || len >= sizeof(parent))
		return pl_fail(env, "not a usable directory path", 0);
	/* The backend's path is canonical, and the shadow's is once opened without symlinks. */
	if (!strncmp(env, backend, bl) && (bl == 1 || env[bl] == '/' || bl == len))
		return pl_fail(env, "the shadow directory must be outside the backend", 0);
	memcpy(parent, env, len);
	parent[len] = '\0';
	char *slash = strrchr(parent, '/');
	if (strlen(slash + 1) > NAME_MAX)
		return pl_fail(env, "cannot make the shadow directory", -ENAMETOOLONG);
	snprintf(base, sizeof(base), "%s", slash + 1);
	slash[slash == parent] = '\0';	/* "/x" -> "/", "/a/x" -> "/a" */
	if ((pfd = bsys_open_dir_path(parent)) < 0)
		return pl_fail(env, "cannot open its parent directory", pfd);
	r = D.mkdirat(pfd, base, 0700);
	sfd = r == 0 || r == -EEXIST ? D.openat(pfd, base, O_RDONLY | O_DIRECTORY, 0) : r;
	D.close(pfd);
	if (sfd < 0)
		return pl_fail(env, "cannot make or open the shadow directory", sfd);
	if ((r = D.readdir(sfd, pl_any_entry, NULL)) != 0) {
		D.close(sfd);
		return pl_fail(env, r > 0 ? "the shadow directory must be new or empty"
				   : "cannot read the shadow directory", r > 0 ? 0 : r);
	}
	return sfd;
}

int bsys_powerloss_from_env(const char *backend)
{
	const char *env = getenv("CKPTFS_POWERLOSS");
	struct pl_obj root;
	int sfd, bfd, r;

	if (!env || !*env)
		return 0;
	if ((sfd = pl_open_shadow(env, backend)) < 0)
		return sfd;
	if ((r = D.mkdirat(sfd, "data", 0700)) < 0 || (r = D.mkdirat(sfd, "dirs", 0700)) < 0 ||
	    (pl.data = D.openat(sfd, "data", O_RDONLY | O_DIRECTORY, 0)) < 0 ||
	    (pl.dirs = D.openat(sfd, "dirs", O_RDONLY | O_DIRECTORY, 0)) < 0 ||
	    (pl.journal = D.openat(sfd, "journal", O_WRONLY | O_CREAT | O_EXCL | O_APPEND, 0600)) < 0) {
		D.close(sfd);
		return pl_fail(env, "cannot set up the shadow directory",
			       r < 0 ? r : pl.data < 0 ? pl.data : pl.dirs < 0 ? pl.dirs : pl.journal);
	}
	pthread_mutex_init(&pl.ns_lock, NULL);
	for (unsigned i = 0; i < PL_STRIPES; i++)
		pthread_mutex_init(&pl.file_lock[i], NULL);

	/* D1: the backend as it is now. */
	if ((bfd = bsys_open_dir_path(backend)) < 0) {
		D.close(sfd);
		return pl_fail(env, "cannot open the backend", bfd);
	}
	if ((r = pl_stat(bfd, "", &root)) == 0 && (r = pl_walk_dir(bfd, root.key, 0)) == 0)
		r = pl_journal('F', '-', NULL, NULL, NULL, pl.records, NULL, NULL);
	if (r == 0) {
		char line[PL_KEY_LEN + 2];
		int n = snprintf(line, sizeof(line), "%s\n", root.key);
		r = pl_store(sfd, "root", line, (size_t)n, 0600);
	}
	D.close(bfd);
	D.close(sfd);
	if (r < 0)
		return pl_fail(env, "cannot record the backend's initial state", r);

	pl.real = bsys;
	bsys.openat = pl_openat;
	bsys.mkdirat = pl_mkdirat;
	bsys.mknodat = pl_mknodat;
	bsys.symlinkat = pl_symlinkat;
	bsys.linkat = pl_linkat;
	bsys.renameat2 = pl_renameat2;
	bsys.unlinkat = pl_unlinkat;
	bsys.fsync = pl_fsync;
	bsys.fdatasync = pl_fdatasync;
	bsys.io_result = pl_io_result;
	bsys.faults_active = 1;
	pl.on = true;
	return 0;
}
