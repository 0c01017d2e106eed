/*
 * bsys.h — every system call ckptfs makes on the backend, through one table.
 *
 * Each entry returns >= 0 on success or -errno: callers never read errno.
 * The default entries call libc.  fault.c can wrap them (CKPTFS_FAULT in the
 * environment, see docs/testing.md) to inject errors, short writes and
 * delays; io_uring completions pass through `io_result` for the same reason.
 *
 * The table is filled before any thread starts and only read afterwards.
 */
#ifndef CKPTFS_BSYS_H
#define CKPTFS_BSYS_H

#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

enum bsys_op {
	BOP_OPENAT, BOP_CLOSE, BOP_PREAD, BOP_PWRITE, BOP_FSYNC, BOP_FDATASYNC,
	BOP_FTRUNCATE, BOP_RENAMEAT2, BOP_UNLINKAT, BOP_MKDIRAT, BOP_SYMLINKAT,
	BOP_LINKAT, BOP_FCHMODAT, BOP_FCHOWNAT, BOP_UTIMENSAT, BOP_SETXATTR,
	BOP_REMOVEXATTR, BOP_FSTATAT, BOP_FALLOCATE, BOP_COPY_FILE_RANGE, BOP_COUNT
};

extern const char *const bsys_op_names[BOP_COUNT];

struct bsys {
	int (*openat)(int dirfd, const char *name, int flags, mode_t mode);
	int (*close)(int fd);
	ssize_t (*pread)(int fd, void *buf, size_t n, off_t off);
	ssize_t (*pwrite)(int fd, const void *buf, size_t n, off_t off);
	int (*fsync)(int fd);
	int (*fdatasync)(int fd);
	int (*ftruncate)(int fd, off_t len);
	int (*renameat2)(int olddir, const char *oldname, int newdir, const char *newname,
			 unsigned flags);
	int (*unlinkat)(int dirfd, const char *name, int flags);
	int (*mkdirat)(int dirfd, const char *name, mode_t mode);
	int (*symlinkat)(const char *target, int dirfd, const char *name);
	int (*linkat)(int olddir, const char *oldname, int newdir, const char *newname);
	int (*fchmodat)(int dirfd, const char *name, mode_t mode);	/* no symlink follow */
	int (*fchownat)(int dirfd, const char *name, uid_t uid, gid_t gid);
	int (*utimensat)(int dirfd, const char *name, const struct timespec ts[2]);
	/* xattrs by (dirfd, name) without following symlinks; value NULL = remove */
	int (*setxattr)(int dirfd, const char *name, const char *key, const void *val,
			size_t len, int flags);
	int (*removexattr)(int dirfd, const char *name, const char *key);
	int (*fstatat)(int dirfd, const char *name, struct stat *st);
	int (*fallocate)(int fd, int mode, off_t off, off_t len);
	/* copy_file_range(2) with explicit offsets: bytes copied, 0 at EOF, or -errno */
	ssize_t (*copy_file_range)(int in, off_t in_off, int out, off_t out_off, size_t len);
	/* io_uring completion results: (op, fd, requested length, result) -> result */
	int (*io_result)(enum bsys_op op, int fd, size_t len, int res);
	/* Non-zero when a wrapper is installed: io_uring completions must consult it. */
	int faults_active;
};

extern struct bsys bsys;

/* Install fault wrappers from CKPTFS_FAULT; 0, or -EINVAL with a message. */
int bsys_faults_from_env(void);

#endif
