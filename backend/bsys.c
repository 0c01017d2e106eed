/*
 * bsys.c — the default backend system call table: libc, confined to what
 * bsys.h promises (C1..C4).
 *
 * How each call reaches an object without following a symlink:
 *  - names only (rename, unlink, mkdir, symlink, link, mknod, readlink,
 *    lstat): these system calls never follow a final symlink; they act on
 *    the name itself;
 *  - chmod: fchmodat2(AT_SYMLINK_NOFOLLOW) (Linux 6.6+; the kernel refuses
 *    to change a symlink's mode with EOPNOTSUPP, which we report as -ELOOP);
 *    where that system call is missing, through a pinned handle (below);
 *  - chown, utimens, xattrs: through a pinned handle — an O_PATH|O_NOFOLLOW
 *    fd of the object itself, checked with fstat not to be a symlink, then
 *    acted on with AT_EMPTY_PATH or through its /proc/self/fd magic link,
 *    which resolves to that inode and not to a path: the object checked is
 *    the object changed, whatever is renamed meanwhile.  A symlink's own
 *    owner, times and xattrs (BSYS_LINK) the same way, checked to be a
 *    symlink: the magic link of an O_PATH symlink fd, followed, reaches the
 *    link itself, never its target (what open(2) documents for O_PATH);
 *  - open of an existing non-directory: the same pinned handle, checked to
 *    be a regular file, reopened through /proc/self/fd.  Not O_NONBLOCK +
 *    fstat: opening a device runs its driver's open (a tape rewinds, a
 *    watchdog arms) and opening a FIFO for reading releases a writer blocked
 *    on it, O_NONBLOCK or not.  O_PATH runs neither, and costs two system
 *    calls more per open of a published file (once per file read back);
 *  - directories: O_DIRECTORY|O_NOFOLLOW (never a FIFO or a device).
 * Every refusal is logged, naming the call and the name, so a planted
 * symlink shows in the daemon's log whoever met it; at most REFUSE_BURST
 * lines a minute, so a user planting thousands cannot flood syslog.
 */
#include "backend/bsys.h"
#include "cache/log.h"
#include "cache/util.h"

#include <dirent.h>
#include <errno.h>
#include <linux/limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452	/* Linux 6.6, every architecture */
#endif

const char *const bsys_op_names[BOP_COUNT] = {
	"openat", "close", "pread", "pwrite", "fsync", "fdatasync", "ftruncate",
	"rename", "unlink", "mkdir", "symlink", "link", "chmod", "chown",
	"utimens", "setxattr", "removexattr", "stat", "getxattr", "listxattr",
	"readlink", "mknod", "readdir", "fchmod", "fchown", "futimens", "append", "fallocate",
	"copy_file_range", "flock", "splice", "fstatvfs",
};

#define RET(expr) do { long r_ = (long)(expr); return r_ < 0 ? -errno : r_; } while (0)

#define WANT_FILE_OR_DIR "a file or directory"

/* ---- refusals ------------------------------------------------------------ */

#define REFUSE_BURST 64
#define REFUSE_WINDOW_NS (60ull * 1000000000)

static pthread_mutex_t refuse_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t refuse_window_ns, refuse_count, refuse_dropped;

static const char *kind_of(mode_t m)
{
	switch (m & S_IFMT) {
	case S_IFLNK: return "a symlink";
	case S_IFDIR: return "a directory";
	case S_IFIFO: return "a FIFO";
	case S_IFSOCK: return "a socket";
	case S_IFCHR: return "a character device";
	case S_IFBLK: return "a block device";
	case S_IFREG: return "a regular file";
	default: return "an unknown kind of file";
	}
}

/* Log that `call` met `found` at `name` where `wanted` was expected; return err. */
static int refuse(int err, const char *call, const char *name, mode_t found, const char *wanted)
{
	uint64_t now = now_ns(), dropped = 0;
	char safe[256];
	size_t k = 0;
	bool say;

	pthread_mutex_lock(&refuse_lock);
	if (!refuse_window_ns || now - refuse_window_ns > REFUSE_WINDOW_NS) {
		dropped = refuse_dropped;
		refuse_window_ns = now;
		refuse_count = refuse_dropped = 0;
	}
	say = refuse_count++ < REFUSE_BURST;
	if (!say)
		refuse_dropped++;
	pthread_mutex_unlock(&refuse_lock);
	if (dropped)
		log_warn("backend: %llu more refusals were not logged", (unsigned long long)dropped);
	if (!say)
		return err;
	/* The name is a user's: no control characters into the log. */
	for (const char *s = name; *s && k + 1 < sizeof(safe); s++)
		safe[k++] = (unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s;
	safe[k] = '\0';
	log_warn("backend: refused to %s '%s': %s where %s was expected (not followed)", call,
		 safe, kind_of(found), wanted);
	return err;
}

/* ---- pinned handles ------------------------------------------------------- */

/*
 * An O_PATH fd of the object at (d, n) itself, its type in *st; refused
 * (-ELOOP, logged) if it is a symlink.  fd or -errno.
 */
static __thread bool guard_on;		/* C5 */
static __thread uid_t guard_uid;

void bsys_owner_guard(uid_t uid)
{
	guard_on = true;
	guard_uid = uid;
}

void bsys_owner_guard_off(void)
{
	guard_on = false;
}

/* C5: may this thread change the attributes of an object with this owner? */
static int guard_check(const struct stat *st, const char *call, const char *n)
{
	if (!guard_on || st->st_uid == guard_uid)
		return 0;
	char wanted[48];
	snprintf(wanted, sizeof(wanted), "an object of uid %u (found uid %u)", (unsigned)guard_uid,
		 (unsigned)st->st_uid);
	return refuse(-EPERM, call, n, st->st_mode, wanted);
}

static int pin(int d, const char *n, const char *call, const char *wanted, struct stat *st)
{
	int fd = openat(d, n, O_PATH | O_NOFOLLOW | O_CLOEXEC), e;

	if (fd < 0)
		return -errno;
	if (fstat(fd, st) < 0) {
		e = -errno;
		close(fd);
		return e;
	}
	if (S_ISLNK(st->st_mode)) {
		close(fd);
		return refuse(-ELOOP, call, n, st->st_mode, wanted);
	}
	if ((e = guard_check(st, call, n)) < 0) {
		close(fd);
		return e;
	}
	return fd;
}

bool bsys_same_file(int a, int b)
{
	struct stat sa, sb;

	return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
	       sa.st_ino == sb.st_ino;
}

int bsys_open_beneath(int root_fd, const char *path, int flags)
{
	char *dup = xstrdup(path), *save = NULL, *comp, *next;
	int dir = root_fd, fd = -ENOENT;

	comp = strtok_r(dup, "/", &save);
	while (comp) {
		next = strtok_r(NULL, "/", &save);
		if (!strcmp(comp, "..") || !strcmp(comp, ".")) {
			fd = -EINVAL;
			break;
		}
		fd = bsys.openat(dir, comp, next ? O_RDONLY | O_DIRECTORY : flags, 0);
		if (dir != root_fd)
			bsys.close(dir);
		dir = root_fd;
		if (fd < 0 || !next)
			break;
		dir = fd;
		comp = next;
	}
	if (dir != root_fd && dir != fd)
		bsys.close(dir);
	free(dup);
	return fd;
}

static int stop_at_one(void *arg, const char *name)
{
	(void)arg;
	(void)name;
	return 1;
}

bool bsys_dir_empty(int fd)
{
	return bsys.readdir(fd, stop_at_one, NULL) == 0;
}

int bsys_name_is(int d, const char *n, int fd)
{
	struct stat sn, sf;

	if (fstatat(d, n, &sn, AT_SYMLINK_NOFOLLOW) < 0 || fstat(fd, &sf) < 0)
		return -errno;
	return sn.st_dev == sf.st_dev && sn.st_ino == sf.st_ino ? 0 : -ESTALE;
}

/*
 * bsys_beneath's slow path: up one ".." at a time from fd until the
 * directory (dev, ino) (0), or the top, whose ".." is itself (-EXDEV).
 */
static int beneath_walk(int fd, dev_t dev, ino_t ino)
{
	struct stat st, up_st;
	int at = fd, r = -EXDEV;

	for (unsigned i = 0; i < 65536; i++) {
		if (fstat(at, &st) < 0) {
			r = -errno;
			break;
		}
		if (st.st_dev == dev && st.st_ino == ino) {
			r = 0;
			break;
		}
		int up = openat(at, "..", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (up < 0 || fstat(up, &up_st) < 0) {
			r = -errno;
			if (up >= 0)
				close(up);
			break;
		}
		if (at != fd)
			close(at);
		at = up;
		if (up_st.st_dev == st.st_dev && up_st.st_ino == st.st_ino)
			break;	/* the top: -EXDEV */
	}
	if (at != fd)
		close(at);
	return r;
}

int bsys_beneath(int fd, uint32_t depth, dev_t dev, ino_t ino)
{
	enum { HOP = 1024 };	/* "../" x HOP fits PATH_MAX */
	char path[HOP * 3];
	struct stat st;
	int at = fd, e;

	for (;;) {	/* the depth its links say first: one call, as a rule */
		uint32_t n = depth < HOP ? depth : HOP;
		for (uint32_t i = 0; i < n; i++)
			memcpy(path + 3 * i, "../", 3);
		path[n ? 3 * n - 1 : 0] = '\0';	/* "" (AT_EMPTY_PATH): the fd itself */
		depth -= n;
		if (!depth) {
			e = fstatat(at, path, &st, AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) < 0 ? -errno : 0;
			break;
		}
		int up = openat(at, path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		e = up < 0 ? -errno : 0;
		if (at != fd)
			close(at);
		if (up < 0)
			return e;
		at = up;
	}
	if (at != fd)
		close(at);
	if (e == 0 && st.st_dev == dev && st.st_ino == ino)
		return 0;
	/* Moved, by its owner, within the backend to another depth, or out of it. */
	return e == -ENOENT ? e : beneath_walk(fd, dev, ino);
}

/*
 * A symlink itself, pinned (O_PATH|O_NOFOLLOW) and C5-checked, for a chown
 * through AT_EMPTY_PATH: the link checked is the link changed.  Anything
 * else found at the name is refused.  fd or -errno.
 */
static int pin_link(int d, const char *n, const char *call)
{
	int fd = openat(d, n, O_PATH | O_NOFOLLOW | O_CLOEXEC), e;
	struct stat st;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		e = -errno;
	else if (!S_ISLNK(st.st_mode))
		e = refuse(-EPERM, call, n, st.st_mode, "a symlink");
	else
		e = guard_check(&st, call, n);
	if (e < 0) {
		close(fd);
		return e;
	}
	return fd;
}

/*
 * C5 for the object at a name, checked by name (renameat2: there is no
 * rename of a pinned inode): a narrow race left.
 */
static int name_guard(int d, const char *n, const char *call)
{
	struct stat st;

	if (!guard_on)
		return 0;
	if (fstatat(d, n, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	return guard_check(&st, call, n);
}

/* The magic link that reaches a pinned fd's inode. */
static void fd_path(int fd, char buf[32])
{
	snprintf(buf, 32, "/proc/self/fd/%d", fd);
}

/* Is (d, n) a symlink now?  For turning a vaguer error into a refusal. */
static bool is_symlink(int d, const char *n)
{
	struct stat st;
	return fstatat(d, n, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
}

/* ---- opening --------------------------------------------------------------- */

/* C3: an existing regular file, opened only after it was checked to be one. */
static int open_regular(int d, const char *n, int flags)
{
	struct stat st;
	char p[32];
	int h = pin(d, n, "open", "a regular file", &st), fd;

	if (h < 0)
		return h;
	if (!S_ISREG(st.st_mode)) {
		close(h);
		return refuse(S_ISDIR(st.st_mode) ? -EISDIR : -ENXIO, "open", n, st.st_mode,
			      "a regular file");
	}
	fd_path(h, p);
	do {
		fd = open(p, (flags & ~(O_NOFOLLOW | O_CREAT | O_EXCL)) | O_CLOEXEC);
	} while (fd < 0 && errno == EINTR);
	fd = fd < 0 ? -errno : fd;
	close(h);
	return fd;
}

static int open_plain(int d, const char *n, int flags, mode_t mode)
{
	int fd;

	do {
		fd = openat(d, n, flags, mode);
	} while (fd < 0 && errno == EINTR);
	return fd < 0 ? -errno : fd;
}

static int d_openat(int d, const char *n, int flags, mode_t mode)
{
	int fd;

	flags |= O_NOFOLLOW | O_CLOEXEC;
	if (flags & (O_DIRECTORY | O_PATH)) {
		fd = open_plain(d, n, flags, mode);
		/* O_DIRECTORY|O_NOFOLLOW on a symlink says ENOTDIR: say what it was. */
		if ((fd == -ENOTDIR || fd == -ELOOP) && (flags & O_DIRECTORY) && is_symlink(d, n))
			return refuse(-ELOOP, "open", n, S_IFLNK, "a directory");
		return fd;
	}
	if ((flags & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL))
		return open_plain(d, n, flags, mode);	/* never follows, never opens what exists */
	for (int tries = 0; tries < 4; tries++) {
		if (flags & O_CREAT) {
			fd = open_plain(d, n, flags | O_EXCL, mode);
			if (fd != -EEXIST)
				return fd;
		}
		fd = open_regular(d, n, flags);
		if (fd != -ENOENT || !(flags & O_CREAT))
			return fd;
		/* removed between the two: create it after all */
	}
	return -ENOENT;
}

static int d_close(int fd) { RET(close(fd)); }
static ssize_t d_pread(int fd, void *b, size_t n, off_t o) { RET(pread(fd, b, n, o)); }
static ssize_t d_pwrite(int fd, const void *b, size_t n, off_t o) { RET(pwrite(fd, b, n, o)); }
static int d_fsync(int fd) { RET(fsync(fd)); }
static int d_fdatasync(int fd) { RET(fdatasync(fd)); }
static int d_ftruncate(int fd, off_t len) { RET(ftruncate(fd, len)); }

/* ---- names ------------------------------------------------------------------ */

static int d_renameat2(int od, const char *on, int nd, const char *nn, unsigned fl)
{
	int r = name_guard(od, on, "rename");	/* C5: what moves must be the owner's */

	if (r < 0)
		return r;
	RET(renameat2(od, on, nd, nn, fl));
}
static int d_unlinkat(int d, const char *n, int fl) { RET(unlinkat(d, n, fl)); }
static int d_mkdirat(int d, const char *n, mode_t m) { RET(mkdirat(d, n, m)); }
static int d_symlinkat(const char *t, int d, const char *n) { RET(symlinkat(t, d, n)); }
static int d_linkat(int od, const char *on, int nd, const char *nn) { RET(linkat(od, on, nd, nn, 0)); }
static int d_mknodat(int d, const char *n, mode_t m, dev_t dev) { RET(mknodat(d, n, m, dev)); }
static ssize_t d_readlinkat(int d, const char *n, char *b, size_t l) { RET(readlinkat(d, n, b, l)); }
static int d_fstatat(int d, const char *n, struct stat *st)
{
	RET(fstatat(d, n, st, AT_SYMLINK_NOFOLLOW | (n[0] ? 0 : AT_EMPTY_PATH)));
}

static int d_readdir(int d, int (*fn)(void *arg, const char *name), void *arg)
{
	int fd = open_plain(d, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0), r;
	struct dirent *de;
	DIR *dir;

	if (fd < 0)
		return fd;
	if (!(dir = fdopendir(fd))) {
		r = -errno;
		close(fd);
		return r;
	}
	for (;;) {
		errno = 0;
		if (!(de = readdir(dir))) {
			r = errno ? -errno : 0;
			break;
		}
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if ((r = fn(arg, de->d_name)) != 0)
			break;
	}
	closedir(dir);
	return r;
}

/* ---- attributes -------------------------------------------------------------- */

static atomic_bool no_fchmodat2;

static int d_fchmodat(int d, const char *n, mode_t m)
{
	struct stat st;
	char p[32];
	int h, r;

	if (!guard_on && !atomic_load(&no_fchmodat2)) {	/* C5 needs the pinned path */
		if (syscall(SYS_fchmodat2, d, n, m, AT_SYMLINK_NOFOLLOW) == 0)
			return 0;
		r = -errno;
		if (r == -EOPNOTSUPP && is_symlink(d, n))
			return refuse(-ELOOP, "chmod", n, S_IFLNK, WANT_FILE_OR_DIR);
		if (r != -ENOSYS)
			return r;
		atomic_store(&no_fchmodat2, true);	/* before Linux 6.6 */
	}
	if ((h = pin(d, n, "chmod", WANT_FILE_OR_DIR, &st)) < 0)
		return h;
	fd_path(h, p);
	r = chmod(p, m) < 0 ? -errno : 0;
	close(h);
	return r;
}

static int d_fchownat(int d, const char *n, uid_t u, gid_t g, int at)
{
	struct stat st;
	int h, r;

	if ((at & BSYS_LINK) && !guard_on)
		RET(fchownat(d, n, u, g, AT_SYMLINK_NOFOLLOW));
	h = at & BSYS_LINK ? pin_link(d, n, "chown") : pin(d, n, "chown", WANT_FILE_OR_DIR, &st);
	if (h < 0)
		return h;
	r = fchownat(h, "", u, g, AT_EMPTY_PATH) < 0 ? -errno : 0;
	close(h);
	return r;
}

static int d_utimensat(int d, const char *n, const struct timespec ts[2], int at)
{
	struct stat st;
	char p[32];
	int h, r;

	h = at & BSYS_LINK ? pin_link(d, n, "utimens") : pin(d, n, "utimens", WANT_FILE_OR_DIR, &st);
	if (h < 0)
		return h;
	fd_path(h, p);
	r = utimensat(AT_FDCWD, p, ts, 0) < 0 ? -errno : 0;
	close(h);
	return r;
}

static int d_fchmod(int fd, mode_t m) { RET(fchmod(fd, m)); }
static int d_fchown(int fd, uid_t u, gid_t g) { RET(fchown(fd, u, g)); }
static int d_futimens(int fd, const struct timespec ts[2]) { RET(futimens(fd, ts)); }
static int d_fallocate(int fd, int mode, off_t o, off_t l) { RET(fallocate(fd, mode, o, l)); }
static ssize_t d_copy_file_range(int in, off_t io, int out, off_t oo, size_t n)
{
	loff_t i = io, o = oo;
	RET(copy_file_range(in, &i, out, &o, n, 0));
}
static int d_flock(int fd, int op) { RET(flock(fd, op)); }
static int d_fstatvfs(int fd, struct statvfs *sv) { RET(fstatvfs(fd, sv)); }
static ssize_t d_splice(int fd, off_t *off, int pipe_w, size_t len)
{
	loff_t o = *off;
	ssize_t n = splice(fd, &o, pipe_w, NULL, len, SPLICE_F_MOVE);
	*off = (off_t)o;
	RET(n);
}

/* ---- xattrs ----------------------------------------------------------------- */

/*
 * The path an xattr call takes to (d, n): the magic link of a pinned handle
 * (h, to close after) — of the object, or of a symlink itself (BSYS_LINK).
 * The xattr system calls take no O_PATH fd, AT_EMPTY_PATH or not (EBADF).
 */
struct xpath {
	char p[32];
	int h;
};

static int xpath_get(struct xpath *x, int d, const char *n, int at, const char *call)
{
	struct stat st;

	x->h = at & BSYS_LINK ? pin_link(d, n, call) : pin(d, n, call, WANT_FILE_OR_DIR, &st);
	if (x->h < 0)
		return x->h;
	fd_path(x->h, x->p);
	return 0;
}

static void xpath_put(struct xpath *x)
{
	if (x->h >= 0)
		close(x->h);
}

static int d_fsetxattr(int fd, const char *k, const void *v, size_t l, int fl)
{
	RET(fsetxattr(fd, k, v, l, fl));
}

static int d_setxattr(int d, const char *n, const char *k, const void *v, size_t l, int fl, int at)
{
	struct xpath x;
	int r = xpath_get(&x, d, n, at, "setxattr");

	if (r == 0)
		r = setxattr(x.p, k, v, l, fl) < 0 ? -errno : 0;
	xpath_put(&x);
	return r;
}

static int d_removexattr(int d, const char *n, const char *k, int at)
{
	struct xpath x;
	int r = xpath_get(&x, d, n, at, "removexattr");

	if (r == 0)
		r = removexattr(x.p, k) < 0 ? -errno : 0;
	xpath_put(&x);
	return r;
}

static ssize_t d_getxattr(int d, const char *n, const char *k, void *b, size_t l, int at)
{
	struct xpath x;
	ssize_t r = xpath_get(&x, d, n, at, "getxattr");

	if (r == 0) {
		r = getxattr(x.p, k, b, l);
		r = r < 0 ? -errno : r;
	}
	xpath_put(&x);
	return r;
}

static ssize_t d_listxattr(int d, const char *n, char *b, size_t l, int at)
{
	struct xpath x;
	ssize_t r = xpath_get(&x, d, n, at, "listxattr");

	if (r == 0) {
		r = listxattr(x.p, b, l);
		r = r < 0 ? -errno : r;
	}
	xpath_put(&x);
	return r;
}

static int d_io_result(enum bsys_op op, int fd, size_t len, int res) { return res; }

int bsys_fsync_dir(int fd)
{
	int r = bsys.fsync(fd);

	if (r == -EINVAL)
		r = syncfs(fd) == 0 ? 0 : -errno;
	return r;
}

int bsys_open_dir_path(const char *path)
{
	char *dup = strdup(path), *save = NULL, *comp;
	int fd = path[0] == '/' ? open_plain(AT_FDCWD, "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0)
				: -EINVAL;

	if (!dup) {
		if (fd >= 0)
			close(fd);
		return -ENOMEM;
	}
	for (comp = strtok_r(dup, "/", &save); fd >= 0 && comp; comp = strtok_r(NULL, "/", &save)) {
		int sub = d_openat(fd, comp, O_RDONLY | O_DIRECTORY, 0);
		close(fd);
		fd = sub;
	}
	free(dup);
	return fd;
}

uint64_t bsys_max_file_size(int dirfd)
{
	int fd = openat(dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	uint64_t lo = 0, hi = (uint64_t)INT64_MAX;	/* lo fits; hi, once tried, does not */

	if (fd < 0)
		return 0;
	if (ftruncate(fd, (off_t)hi) == 0) {
		close(fd);
		return hi;
	}
	if (errno != EFBIG && errno != EINVAL) {
		close(fd);
		return 0;
	}
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (ftruncate(fd, (off_t)mid) == 0)
			lo = mid;
		else
			hi = mid;
	}
	close(fd);	/* unnamed: it goes with its last descriptor */
	return lo;
}

int bsys_xattrs_each(int dirfd, const char *name, int at,
		     int (*fn)(void *arg, const char *key, const void *val, size_t len), void *arg)
{
	char *keys = NULL, *val = NULL;
	ssize_t n = 0;
	int r = 0, took = 0;

	for (int tries = 0; tries < 8; tries++) {
		ssize_t want = bsys.listxattr(dirfd, name, NULL, 0, at);
		if (want <= 0) {
			n = want;
			break;
		}
		keys = xrealloc(keys, (size_t)want);
		n = bsys.listxattr(dirfd, name, keys, (size_t)want, at);
		if (n != -ERANGE)
			break;		/* (-ERANGE: it grew since it was sized) */
	}
	if (n < 0)
		r = (int)n;
	if (n > 0)
		val = xmalloc(XATTR_SIZE_MAX);	/* the largest value Linux takes */
	for (ssize_t off = 0; r == 0 && n > 0 && off < n; off += (ssize_t)strlen(keys + off) + 1) {
		ssize_t vl = bsys.getxattr(dirfd, name, keys + off, val, XATTR_SIZE_MAX, at);
		if (vl == -ENOTSUP || vl == -EOPNOTSUPP) {
			static struct ckpt_ratelimit rl;
			ckpt_log_limited(&rl, 10ull * 1000000000, LOG_WARNING,
					 "backend: extended attribute '%s' of '%s' is listed but cannot "
					 "be read (%s): left out", keys + off, name, strerror((int)-vl));
			continue;
		}
		if (vl == -ENODATA)
			continue;	/* removed since the list */
		if (vl < 0)
			r = (int)vl;
		else if ((r = fn(arg, keys + off, val, (size_t)vl)) == 0)
			took++;
		else if (r > 0)
			r = 0;		/* passed over by fn */
	}
	free(keys);
	free(val);
	return r < 0 ? r : took;
}

/* Writes to the daemon's own metadata files (bsys.h): pwrite, behind its own door. */
static ssize_t d_append(int fd, const void *b, size_t n, off_t o) { RET(pwrite(fd, b, n, o)); }

#define BSYS_LIBC {                                                                      \
	.openat = d_openat, .close = d_close, .pread = d_pread, .pwrite = d_pwrite,        \
	.fsync = d_fsync, .fdatasync = d_fdatasync, .ftruncate = d_ftruncate,              \
	.renameat2 = d_renameat2, .unlinkat = d_unlinkat, .mkdirat = d_mkdirat,            \
	.symlinkat = d_symlinkat, .linkat = d_linkat, .fchmodat = d_fchmodat,              \
	.fchownat = d_fchownat, .utimensat = d_utimensat, .setxattr = d_setxattr, .fsetxattr = d_fsetxattr,          \
	.removexattr = d_removexattr, .getxattr = d_getxattr, .listxattr = d_listxattr,    \
	.fstatat = d_fstatat, .readlinkat = d_readlinkat, .mknodat = d_mknodat,            \
	.readdir = d_readdir, .fchmod = d_fchmod, .fchown = d_fchown,                      \
	.futimens = d_futimens, .io_result = d_io_result, .append = d_append,              \
	.fallocate = d_fallocate, .copy_file_range = d_copy_file_range,                    \
	.flock = d_flock, .splice = d_splice, .fstatvfs = d_fstatvfs,                                              \
}

struct bsys bsys = BSYS_LIBC;
const struct bsys bsys_direct = BSYS_LIBC;
