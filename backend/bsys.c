/*
 * bsys.c — the default backend system call table: thin -errno wrappers.
 */
#include "backend/bsys.h"

#include <errno.h>
#include <stdio.h>
#include <sys/xattr.h>
#include <unistd.h>

const char *const bsys_op_names[BOP_COUNT] = {
	"openat", "close", "pread", "pwrite", "fsync", "fdatasync", "ftruncate",
	"rename", "unlink", "mkdir", "symlink", "link", "chmod", "chown",
	"utimens", "setxattr", "removexattr", "stat", "fallocate", "copy_file_range",
};

#define RET(expr) do { long r_ = (long)(expr); return r_ < 0 ? -errno : r_; } while (0)

static int d_openat(int dirfd, const char *name, int flags, mode_t mode)
{
	int fd;
	do {
		fd = openat(dirfd, name, flags | O_CLOEXEC, mode);
	} while (fd < 0 && errno == EINTR);
	return fd < 0 ? -errno : fd;
}
static int d_close(int fd) { RET(close(fd)); }
static ssize_t d_pread(int fd, void *b, size_t n, off_t o) { RET(pread(fd, b, n, o)); }
static ssize_t d_pwrite(int fd, const void *b, size_t n, off_t o) { RET(pwrite(fd, b, n, o)); }
static int d_fsync(int fd) { RET(fsync(fd)); }
static int d_fdatasync(int fd) { RET(fdatasync(fd)); }
static int d_ftruncate(int fd, off_t len) { RET(ftruncate(fd, len)); }
static int d_renameat2(int od, const char *on, int nd, const char *nn, unsigned fl)
{
	RET(renameat2(od, on, nd, nn, fl));
}
static int d_unlinkat(int d, const char *n, int fl) { RET(unlinkat(d, n, fl)); }
static int d_mkdirat(int d, const char *n, mode_t m) { RET(mkdirat(d, n, m)); }
static int d_symlinkat(const char *t, int d, const char *n) { RET(symlinkat(t, d, n)); }
static int d_linkat(int od, const char *on, int nd, const char *nn) { RET(linkat(od, on, nd, nn, 0)); }
/* Callers never pass a symlink (Linux has no symlink modes), so follow is moot. */
static int d_fchmodat(int d, const char *n, mode_t m) { RET(fchmodat(d, n, m, 0)); }
static int d_fchownat(int d, const char *n, uid_t u, gid_t g)
{
	RET(fchownat(d, n, u, g, AT_SYMLINK_NOFOLLOW));
}
static int d_utimensat(int d, const char *n, const struct timespec ts[2])
{
	RET(utimensat(d, n, ts, AT_SYMLINK_NOFOLLOW));
}
static int proc_path(int d, const char *n, char *buf, size_t len)
{
	int r = snprintf(buf, len, "/proc/self/fd/%d/%s", d, n);
	return r < 0 || (size_t)r >= len ? -ENAMETOOLONG : 0;
}
static int d_setxattr(int d, const char *n, const char *k, const void *v, size_t l, int fl)
{
	char p[512];
	int r = proc_path(d, n, p, sizeof(p));
	if (r)
		return r;
	RET(lsetxattr(p, k, v, l, fl));
}
static int d_removexattr(int d, const char *n, const char *k)
{
	char p[512];
	int r = proc_path(d, n, p, sizeof(p));
	if (r)
		return r;
	RET(lremovexattr(p, k));
}
static int d_fstatat(int d, const char *n, struct stat *st)
{
	RET(fstatat(d, n, st, AT_SYMLINK_NOFOLLOW | (n[0] ? 0 : AT_EMPTY_PATH)));
}
static int d_fallocate(int fd, int mode, off_t o, off_t l) { RET(fallocate(fd, mode, o, l)); }
static ssize_t d_copy_file_range(int in, off_t io, int out, off_t oo, size_t n)
{
	loff_t i = io, o = oo;
	RET(copy_file_range(in, &i, out, &o, n, 0));
}
static int d_io_result(enum bsys_op op, int fd, size_t len, int res) { return res; }

struct bsys bsys = {
	.openat = d_openat, .close = d_close, .pread = d_pread, .pwrite = d_pwrite,
	.fsync = d_fsync, .fdatasync = d_fdatasync, .ftruncate = d_ftruncate,
	.renameat2 = d_renameat2, .unlinkat = d_unlinkat, .mkdirat = d_mkdirat,
	.symlinkat = d_symlinkat, .linkat = d_linkat, .fchmodat = d_fchmodat,
	.fchownat = d_fchownat, .utimensat = d_utimensat, .setxattr = d_setxattr,
	.removexattr = d_removexattr, .fstatat = d_fstatat, .fallocate = d_fallocate,
	.copy_file_range = d_copy_file_range, .io_result = d_io_result,
};
