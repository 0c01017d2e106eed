/*
 * powerloss.c — a layer over the backend system call table (bsys.h) that
 * keeps, in a shadow directory outside the backend, what a power cut would
 * leave of the backend at every moment: the state POSIX promises to survive.
 * Tests (tests/integrity/powerloss.c) kill the daemon, then build the image
 * of the backend "after the power came back" from the shadow, and check it.
 *
 * CKPTFS_POWERLOSS=SHADOW (a new or empty directory outside the backend)
 * installs it, beneath the fault wrappers if CKPTFS_FAULT is set too: a
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
 * generation is the inode's FS_IOC_GETVERSION, or its birth time where there
 * is none), so an inode number reused by a new file is a new object.
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
 *     C t DIR OBJ - mode  name        a file created (open O_CREAT)
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
 * its older durable listing).  The shadow's own files are written with plain
 * system calls: they are the test's truth, not the backend.
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

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define PL_KEY_LEN 48
#define PL_STRIPES 16
#define PL_TAIL_CHECK 4096u	/* bytes compared before appending only a tail */

static struct {
	int data, dirs;			/* SHADOW/data, SHADOW/dirs */
	int journal;			/* SHADOW/journal, O_APPEND */
	pthread_mutex_t ns_lock;
	uint64_t records;		/* journal records written; ns_lock */
	atomic_bool broken;		/* a record was lost: nothing is durable any more */
	pthread_mutex_t file_lock[PL_STRIPES];
	atomic_uint_least64_t tmp;	/* temporary names in the shadow */
	struct bsys real;
} pl;

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

/*
 * The generation of the inode at (dirfd, name) — ext4, XFS and btrfs give
 * each new inode a fresh one — or, where there is none (symlinks, file
 * systems without FS_IOC_GETVERSION), its birth time.
 */
static uint64_t pl_generation(int dirfd, const char *name, const struct statx *sx)
{
	char self[64];
	unsigned gen;
	int fd, r = -1;

	if (S_ISREG(sx->stx_mode) || S_ISDIR(sx->stx_mode)) {
		snprintf(self, sizeof(self), "/proc/self/fd/%d", dirfd);
		fd = name[0] ? openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
			     : open(self, O_RDONLY | O_NONBLOCK | O_CLOEXEC);	/* dirfd may be O_PATH */
		if (fd >= 0) {
			r = ioctl(fd, FS_IOC_GETVERSION, &gen);
			close(fd);
		}
		if (r == 0)
			return (uint64_t)gen << 1 | 1;
	}
	return (sx->stx_mask & STATX_BTIME)
		? ((uint64_t)sx->stx_btime.tv_sec * 1000000000ull + sx->stx_btime.tv_nsec) << 1 : 0;
}

/* The object at (dirfd, name), or dirfd itself for name "". */
static int pl_stat(int dirfd, const char *name, struct pl_obj *o)
{
	struct statx sx;

	if (statx(dirfd, name, AT_SYMLINK_NOFOLLOW | (name[0] ? 0 : AT_EMPTY_PATH),
		  STATX_TYPE | STATX_MODE | STATX_INO | STATX_SIZE | STATX_BTIME, &sx) < 0)
		return -errno;
	snprintf(o->key, sizeof(o->key), "%llx.%llx", (unsigned long long)sx.stx_ino,
		 (unsigned long long)pl_generation(dirfd, name, &sx));
	o->mode = sx.stx_mode & 07777;
	o->size = sx.stx_size;
	o->type = S_ISREG(sx.stx_mode) ? 'f' : S_ISDIR(sx.stx_mode) ? 'd'
		  : S_ISLNK(sx.stx_mode) ? 'l' : 'o';
	return 0;
}

static unsigned pl_stripe(const char *key)
{
	unsigned h = 5381;
	while (*key)
		h = h * 33 + (unsigned char)*key++;
	return h % PL_STRIPES;
}

/* Write buf as dirfd/name whole: a temporary name, then rename. */
static int pl_store(int dirfd, const char *name, const void *buf, size_t len, mode_t mode)
{
	char tmp[64];
	int fd, r;

	snprintf(tmp, sizeof(tmp), ".t.%llu", (unsigned long long)atomic_fetch_add(&pl.tmp, 1));
	if ((fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0)
		return -errno;
	r = write_full(fd, buf, len);
	if (r == 0 && fchmod(fd, mode) < 0)
		r = -errno;
	close(fd);
	if (r == 0 && renameat(dirfd, tmp, dirfd, name) < 0)
		r = -errno;
	if (r < 0)
		unlinkat(dirfd, tmp, 0);
	return r;
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

/*
 * D2: fd's contents became durable.  bound: how much of an append-only file
 * the sync covers (its size when the call began), or UINT64_MAX.
 */
static int pl_file_synced(int fd, uint64_t bound)
{
	struct pl_obj o;
	char path[64], tmp[64];
	int src, dst, r, fl;
	unsigned s;

	if ((r = pl_stat(fd, "", &o)) < 0)
		return r;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	if ((src = open(path, O_RDONLY | O_CLOEXEC)) < 0)	/* fd may be O_WRONLY or O_DIRECT */
		return -errno;
	fl = fcntl(fd, F_GETFL);
	s = pl_stripe(o.key);
	pthread_mutex_lock(&pl.file_lock[s]);
	if (fl >= 0 && (fl & O_APPEND) &&
	    (dst = openat(pl.data, o.key, O_WRONLY | O_CLOEXEC)) >= 0) {
		struct stat st;
		uint64_t end = CKPT_MIN(bound, o.size);
		int rd = openat(pl.data, o.key, O_RDONLY | O_CLOEXEC);
		if (fstat(dst, &st) == 0 && (uint64_t)st.st_size <= end && rd >= 0 &&
		    pl_same_tail(src, rd, (uint64_t)st.st_size)) {
			/* Only the grown tail: a kill mid-copy leaves part of it, as a cut may. */
			r = pl_copy_range(src, dst, (uint64_t)st.st_size, end);
			close(rd);
			close(dst);
			goto out;
		}
		if (rd >= 0)
			close(rd);
		close(dst);
	}
	snprintf(tmp, sizeof(tmp), ".t.%llu", (unsigned long long)atomic_fetch_add(&pl.tmp, 1));
	if ((dst = openat(pl.data, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0) {
		r = -errno;
		goto out;
	}
	r = pl_copy_range(src, dst, 0, (fl >= 0 && (fl & O_APPEND)) ? CKPT_MIN(bound, o.size) : o.size);
	if (r == 0 && fchmod(dst, o.mode) < 0)
		r = -errno;
	close(dst);
	if (r == 0 && renameat(pl.data, tmp, pl.data, o.key) < 0)
		r = -errno;
	if (r < 0)
		unlinkat(pl.data, tmp, 0);
out:
	pthread_mutex_unlock(&pl.file_lock[s]);
	close(src);
	return r;
}

/* D3: the listing of directory fd, as it is now, becomes its durable one. */
static int pl_dir_synced(int fd)
{
	struct strbuf b = { 0 };
	struct pl_obj self, o;
	struct dirent *de;
	DIR *d;
	int r, dfd;

	if ((r = pl_stat(fd, "", &self)) < 0)
		return r;
	if ((dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return -errno;
	if (!(d = fdopendir(dfd))) {
		close(dfd);
		return -errno;
	}
	sb_printf(&b, "D %o\n", (unsigned)self.mode);
	while ((de = readdir(d))) {
		char target[PATH_MAX];
		ssize_t tl = 0;
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (pl_stat(dirfd(d), de->d_name, &o) < 0)
			continue;	/* gone meanwhile: not ours (ns_lock held) */
		if (o.type == 'l' && (tl = readlinkat(dirfd(d), de->d_name, target, sizeof(target))) < 0)
			tl = 0;
		sb_printf(&b, "%c %s %zu %zu\n%s%.*s\n", o.type, o.key, strlen(de->d_name), (size_t)tl,
			  de->d_name, (int)tl, target);
	}
	closedir(d);
	r = pl_store(pl.dirs, self.key, b.s, b.len, 0600);
	sb_free(&b);
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

static int pl_openat(int d, const char *n, int fl, mode_t m)
{
	struct pl_obj dir, obj;
	struct stat st;
	bool existed;
	int fd;

	if (!(fl & O_CREAT))
		return pl.real.openat(d, n, fl, m);
	pthread_mutex_lock(&pl.ns_lock);
	existed = !(fl & O_EXCL) && fstatat(d, n, &st, AT_SYMLINK_NOFOLLOW) == 0;
	fd = pl.real.openat(d, n, fl, m);
	if (fd >= 0 && !existed && pl_stat(fd, "", &obj) == 0)
		pl_lost("journal", pl_journal('C', obj.type, pl_dir_key(d, &dir), obj.key, NULL,
					      obj.mode, n, NULL));
	pthread_mutex_unlock(&pl.ns_lock);
	return fd;
}

static int pl_mkdirat(int d, const char *n, mode_t m)
{
	struct pl_obj dir, obj;
	int r;

	pthread_mutex_lock(&pl.ns_lock);
	r = pl.real.mkdirat(d, n, m);
	if (r == 0 && pl_stat(d, n, &obj) == 0)
		pl_lost("journal", pl_journal('M', 'd', pl_dir_key(d, &dir), obj.key, NULL, obj.mode,
					      n, NULL));
	pthread_mutex_unlock(&pl.ns_lock);
	return r;
}

static int pl_symlinkat(const char *t, int d, const char *n)
{
	struct pl_obj dir, obj;
	int r;

	pthread_mutex_lock(&pl.ns_lock);
	r = pl.real.symlinkat(t, d, n);
	if (r == 0 && pl_stat(d, n, &obj) == 0)
		pl_lost("journal", pl_journal('S', 'l', pl_dir_key(d, &dir), obj.key, NULL, 0, n, t));
	pthread_mutex_unlock(&pl.ns_lock);
	return r;
}

static int pl_linkat(int od, const char *on, int nd, const char *nn)
{
	struct pl_obj odir, ndir, obj;
	int r;

	pthread_mutex_lock(&pl.ns_lock);
	r = pl.real.linkat(od, on, nd, nn);
	if (r == 0 && pl_stat(nd, nn, &obj) == 0)
		pl_lost("journal", pl_journal('L', obj.type, pl_dir_key(od, &odir), obj.key,
					      pl_dir_key(nd, &ndir), 0, on, nn));
	pthread_mutex_unlock(&pl.ns_lock);
	return r;
}

static int pl_renameat2(int od, const char *on, int nd, const char *nn, unsigned fl)
{
	struct pl_obj odir, ndir, obj;
	int r;

	pthread_mutex_lock(&pl.ns_lock);
	r = pl.real.renameat2(od, on, nd, nn, fl);
	if (r == 0 && pl_stat(nd, nn, &obj) == 0)
		pl_lost("journal", pl_journal('R', obj.type, pl_dir_key(od, &odir), obj.key,
					      pl_dir_key(nd, &ndir), fl, on, nn));
	pthread_mutex_unlock(&pl.ns_lock);
	return r;
}

static int pl_unlinkat(int d, const char *n, int fl)
{
	struct pl_obj dir;
	int r;

	pthread_mutex_lock(&pl.ns_lock);
	r = pl.real.unlinkat(d, n, fl);
	if (r == 0)
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

static int pl_walk(int fd, const char *key, int depth)
{
	DIR *d;
	struct dirent *de;
	int dfd, r = 0;

	if (depth > 256)
		return -ELOOP;
	if ((r = pl_dir_synced(fd)) < 0)
		return r;
	if ((dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return -errno;
	if (!(d = fdopendir(dfd))) {
		close(dfd);
		return -errno;
	}
	while (r == 0 && (de = readdir(d))) {
		struct pl_obj o;
		char target[PATH_MAX];
		ssize_t tl;
		int sub;
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    pl_stat(dirfd(d), de->d_name, &o) < 0)
			continue;
		if (o.type == 'd') {
			r = pl_journal('M', 'd', key, o.key, NULL, o.mode, de->d_name, NULL);
			sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (r == 0 && sub >= 0)
				r = pl_walk(sub, o.key, depth + 1);
			if (sub >= 0)
				close(sub);
		} else if (o.type == 'l') {
			tl = readlinkat(dirfd(d), de->d_name, target, sizeof(target) - 1);
			target[tl < 0 ? 0 : tl] = '\0';
			r = pl_journal('S', 'l', key, o.key, NULL, 0, de->d_name, target);
		} else {
			r = pl_journal('C', o.type, key, o.key, NULL, o.mode, de->d_name, NULL);
			sub = o.type == 'f' ? openat(dirfd(d), de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
			if (r == 0 && sub >= 0 && faccessat(pl.data, o.key, F_OK, 0) != 0)
				r = pl_file_synced(sub, UINT64_MAX);	/* once per object */
			if (sub >= 0)
				close(sub);
		}
	}
	closedir(d);
	return r;
}

/* One line naming the variable and what is wrong; err 0: no system error. */
static int pl_fail(const char *env, const char *why, int err)
{
	fprintf(stderr, "ckptfs: CKPTFS_POWERLOSS=%s: %s%s%s\n", env, why, err ? ": " : "",
		err ? strerror(-err) : "");
	return -EINVAL;
}

/* The real path `path` has or, if it does not exist yet, will have. */
static int pl_resolve(const char *path, char out[PATH_MAX])
{
	char parent[PATH_MAX], base[NAME_MAX + 1];
	size_t len = strlen(path);
	char *slash;

	if (realpath(path, out))
		return 0;
	if (errno != ENOENT)
		return -errno;
	while (len > 1 && path[len - 1] == '/')
		len--;		/* "dir/" names dir */
	if (len >= sizeof(parent))
		return -ENAMETOOLONG;
	memcpy(parent, path, len);
	parent[len] = '\0';
	slash = strrchr(parent, '/');
	if (snprintf(base, sizeof(base), "%s", slash ? slash + 1 : parent) >= (int)sizeof(base))
		return -ENAMETOOLONG;
	if (!slash)
		snprintf(parent, sizeof(parent), ".");
	else
		slash[slash == parent] = '\0';	/* "/x" -> "/", "a/x" -> "a" */
	if (!realpath(parent, out))
		return -errno;
	if (strlen(out) + 1 + strlen(base) >= PATH_MAX)
		return -ENAMETOOLONG;
	if (strcmp(out, "/"))
		strcat(out, "/");
	strcat(out, base);
	return 0;
}

int bsys_powerloss_from_env(const char *backend)
{
	const char *env = getenv("CKPTFS_POWERLOSS");
	char shadow[PATH_MAX], be[PATH_MAX];
	struct pl_obj root;
	struct dirent *de;
	DIR *d;
	int sfd, bfd, r;

	if (!env || !*env)
		return 0;
	if ((r = pl_resolve(env, shadow)) < 0)
		return pl_fail(env, "cannot resolve the shadow directory", r);
	if (!realpath(backend, be))
		return pl_fail(env, "cannot resolve the backend", -errno);
	size_t bl = strlen(be);
	if (!strncmp(shadow, be, bl) && (shadow[bl] == '/' || shadow[bl] == '\0'))
		return pl_fail(env, "the shadow directory must be outside the backend", 0);
	if (mkdir(shadow, 0700) < 0 && errno != EEXIST)
		return pl_fail(env, "cannot make the shadow directory", -errno);
	if (!(d = opendir(shadow)))
		return pl_fail(env, "cannot open the shadow directory", -errno);
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			closedir(d);
			return pl_fail(env, "the shadow directory must be new or empty", 0);
		}
	closedir(d);
	sfd = open(shadow, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sfd < 0 || mkdirat(sfd, "data", 0700) < 0 || mkdirat(sfd, "dirs", 0700) < 0)
		return pl_fail(env, "cannot set up the shadow directory", -errno);
	pl.data = openat(sfd, "data", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	pl.dirs = openat(sfd, "dirs", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	pl.journal = openat(sfd, "journal", O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0600);
	if (pl.data < 0 || pl.dirs < 0 || pl.journal < 0)
		return pl_fail(env, "cannot set up the shadow directory", -errno);
	pthread_mutex_init(&pl.ns_lock, NULL);
	for (unsigned i = 0; i < PL_STRIPES; i++)
		pthread_mutex_init(&pl.file_lock[i], NULL);

	/* D1: the backend as it is now. */
	if ((bfd = open(be, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return pl_fail(env, "cannot open the backend", -errno);
	if ((r = pl_stat(bfd, "", &root)) == 0 && (r = pl_walk(bfd, root.key, 0)) == 0)
		r = pl_journal('F', '-', NULL, NULL, NULL, pl.records, NULL, NULL);
	if (r == 0) {
		char line[PL_KEY_LEN + 2];
		int n = snprintf(line, sizeof(line), "%s\n", root.key);
		r = pl_store(sfd, "root", line, (size_t)n, 0600);
	}
	close(bfd);
	close(sfd);
	if (r < 0)
		return pl_fail(env, "cannot record the backend's initial state", r);

	pl.real = bsys;
	bsys.openat = pl_openat;
	bsys.mkdirat = pl_mkdirat;
	bsys.symlinkat = pl_symlinkat;
	bsys.linkat = pl_linkat;
	bsys.renameat2 = pl_renameat2;
	bsys.unlinkat = pl_unlinkat;
	bsys.fsync = pl_fsync;
	bsys.fdatasync = pl_fdatasync;
	bsys.io_result = pl_io_result;
	bsys.faults_active = 1;
	return 0;
}
