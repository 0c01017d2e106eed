/*
 * bsys.h — every system call ckptfs makes on the backend, through one table,
 * and the only door to the backend: no other object file of the daemon calls
 * a path-resolving system call (tests/security/bsys_door.py checks that).
 *
 * The daemon runs as root over directories its users own, so anything on the
 * backend may have been planted.  The table's contract (bsys.c implements it):
 *
 *  C1  Every name is one component (no '/'), relative to a directory fd that
 *      btree.c reached one component at a time with O_NOFOLLOW|O_DIRECTORY
 *      from the backend root.  "." names the directory itself.
 *  C2  No entry follows a symlink in its final component.  Where the daemon
 *      expects a file or a directory and finds a symlink, the call fails with
 *      -ELOOP and the refusal is logged; callers that act on a symlink itself
 *      (a symlink the mount made) pass BSYS_LINK.
 *  C3  openat() of an existing file that is not a directory opens it only if
 *      it is a regular file: it takes an O_PATH|O_NOFOLLOW handle (which runs
 *      no driver open and wakes no FIFO writer), checks it with fstat, and
 *      reopens exactly that inode through /proc/self/fd.  A FIFO, socket or
 *      device there is refused (-ENXIO), a symlink too (-ELOOP), and logged.
 *      O_CREAT|O_EXCL creates; O_CREAT alone creates or opens as above.
 *  C4  Each entry returns >= 0 on success or -errno: callers never read errno.
 *  C5  While an owner guard is set on the calling thread (bsys_owner_guard),
 *      the attribute entries (fchmodat, fchownat, utimensat and the xattr
 *      calls) act only on an object owned by that uid: anything else is
 *      refused with -EPERM and logged.  The check and the change are made on
 *      one pinned inode, so a name swapped in between cannot take the change
 *      (a user who renames the daemon's root-owned stage file over their own
 *      file's name, then chmods "their" file, gets -EPERM, not a set-user-ID
 *      root file).  Symlinks themselves (BSYS_LINK) the same way: a pinned
 *      O_PATH handle of the link.  renameat2 checks the object at the source name the
 *      same way, then renames by name (there is no rename of a pinned
 *      inode): an object the directory's owner swapped in before the rename
 *      is applied is refused, not carried into a directory they may not
 *      write; a swap within the microseconds between the check and the
 *      rename is not caught.
 *
 * The default entries call libc.  fault.c can wrap them (CKPTFS_FAULT in the
 * environment, see docs/testing.md) to inject errors, short writes and
 * delays, and powerloss.c (CKPTFS_POWERLOSS) to record what a power cut
 * would leave; io_uring completions pass through `io_result` for the same
 * reason.  `bsys_direct` is the same libc table, never wrapped: for files
 * the daemon keeps outside the backend (the rescue directory, the power-loss
 * shadow), which faults injected into the backend must not reach.
 *
 * The table is filled before any thread starts and only read afterwards.
 */
#ifndef CKPTFS_BSYS_H
#define CKPTFS_BSYS_H

#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>

enum bsys_op {
	BOP_OPENAT, BOP_CLOSE, BOP_PREAD, BOP_PWRITE, BOP_FSYNC, BOP_FDATASYNC,
	BOP_FTRUNCATE, BOP_RENAMEAT2, BOP_UNLINKAT, BOP_MKDIRAT, BOP_SYMLINKAT,
	BOP_LINKAT, BOP_FCHMODAT, BOP_FCHOWNAT, BOP_UTIMENSAT, BOP_SETXATTR,
	BOP_REMOVEXATTR, BOP_FSTATAT, BOP_GETXATTR, BOP_LISTXATTR, BOP_READLINKAT,
	BOP_MKNODAT, BOP_READDIR, BOP_FCHMOD, BOP_FCHOWN, BOP_FUTIMENS, BOP_APPEND,
	BOP_FALLOCATE, BOP_COPY_FILE_RANGE, BOP_FLOCK, BOP_SPLICE, BOP_FSTATVFS, BOP_COUNT
};

extern const char *const bsys_op_names[BOP_COUNT];

/* `at` argument: the object is a symlink; act on the link itself (C2). */
#define BSYS_LINK 0x1

struct bsys {
	int (*openat)(int dirfd, const char *name, int flags, mode_t mode);	/* C3 */
	int (*close)(int fd);
	ssize_t (*pread)(int fd, void *buf, size_t n, off_t off);
	ssize_t (*pwrite)(int fd, const void *buf, size_t n, off_t off);
	int (*fsync)(int fd);
	int (*fdatasync)(int fd);
	int (*ftruncate)(int fd, off_t len);
	/* Names only: these never follow a symlink, they move or remove it. */
	int (*renameat2)(int olddir, const char *oldname, int newdir, const char *newname,
			 unsigned flags);
	int (*unlinkat)(int dirfd, const char *name, int flags);
	int (*mkdirat)(int dirfd, const char *name, mode_t mode);
	int (*symlinkat)(const char *target, int dirfd, const char *name);
	int (*linkat)(int olddir, const char *oldname, int newdir, const char *newname);
	/* A symlink there: -ELOOP (Linux has no symlink modes). */
	int (*fchmodat)(int dirfd, const char *name, mode_t mode);
	int (*fchownat)(int dirfd, const char *name, uid_t uid, gid_t gid, int at);
	int (*utimensat)(int dirfd, const char *name, const struct timespec ts[2], int at);
	/*
	 * An xattr set on a file the daemon holds open (a new version's
	 * temporary file: by descriptor, never by a name someone could swap);
	 * fault rules name it "setxattr" too.
	 */
	int (*fsetxattr)(int fd, const char *key, const void *val, size_t len, int flags);
	/* xattrs by (dirfd, name); flags as for setxattr(2) */
	int (*setxattr)(int dirfd, const char *name, const char *key, const void *val,
			size_t len, int flags, int at);
	int (*removexattr)(int dirfd, const char *name, const char *key, int at);
	ssize_t (*getxattr)(int dirfd, const char *name, const char *key, void *buf,
			    size_t len, int at);
	ssize_t (*listxattr)(int dirfd, const char *name, char *buf, size_t len, int at);
	/* lstat: name "" is dirfd itself */
	int (*fstatat)(int dirfd, const char *name, struct stat *st);
	/* The target's length (not NUL-terminated), or -errno. */
	ssize_t (*readlinkat)(int dirfd, const char *name, char *buf, size_t len);
	int (*mknodat)(int dirfd, const char *name, mode_t mode, dev_t dev);
	/*
	 * Call fn(arg, name) for each entry of the directory dirfd ("." and ".."
	 * left out) until fn returns non-zero (returned).  0 or -errno.
	 */
	int (*readdir)(int dirfd, int (*fn)(void *arg, const char *name), void *arg);
	/* By fd: the temporary files the daemon created and holds open. */
	int (*fchmod)(int fd, mode_t mode);
	int (*fchown)(int fd, uid_t uid, gid_t gid);
	int (*futimens)(int fd, const struct timespec ts[2]);
	/*
	 * Writes to the daemon's own metadata files (the manifest log, its
	 * compaction, the state file) at off, the end of what was written
	 * (ignored on an O_APPEND fd): a separate door from pwrite, so faults
	 * can hit the manifest (op=append) or the data (op=pwrite) alone.
	 */
	ssize_t (*append)(int fd, const void *buf, size_t n, off_t off);
	/* Data by fd (the temporary and stage files the daemon writes). */
	int (*fallocate)(int fd, int mode, off_t off, off_t len);
	/* copy_file_range(2) with explicit offsets: bytes copied, 0 at EOF, or -errno */
	ssize_t (*copy_file_range)(int in, off_t in_off, int out, off_t out_off, size_t len);
	/* flock(2) on a file the daemon opened (its node lock, lease.c). */
	int (*flock)(int fd, int op);
	/*
	 * splice(2) of up to len bytes of fd at *off into the pipe pipe_w (page
	 * references, no copy), advancing *off: bytes moved, 0 at EOF, or -errno.
	 */
	ssize_t (*splice)(int fd, off_t *off, int pipe_w, size_t len);
	/* fstatvfs(2) of a backend directory (statfs through the mount): 0 or -errno. */
	int (*fstatvfs)(int fd, struct statvfs *sv);
	/* io_uring completion results: (op, fd, requested length, result) -> result */
	int (*io_result)(enum bsys_op op, int fd, size_t len, int res);
	/* Non-zero when a wrapper is installed: io_uring completions must consult it. */
	int faults_active;
};

extern struct bsys bsys;
extern const struct bsys bsys_direct;

/*
 * Open the directory at an absolute path one component at a time from "/",
 * never through a symlink: for the backend root, whose path the command
 * line's check resolved (a symlink that appears since fails, -ELOOP or
 * -ENOTDIR, instead of redirecting the whole mount).  fd or -errno.
 */
int bsys_open_dir_path(const char *path);
/*
 * fsync a directory through bsys; where the file system refuses that
 * (EINVAL: some FUSE and network file systems), syncfs of the file system
 * that holds it instead.  0 or -errno.
 */
int bsys_fsync_dir(int fd);
/*
 * The largest file size the file system of directory dirfd takes: probed
 * with ftruncate on an unnamed file (O_TMPFILE) there, which costs no
 * space; 0 where it cannot tell (no O_TMPFILE: NFS, GlusterFS...).
 */
uint64_t bsys_max_file_size(int dirfd);
/*
 * Every xattr of (dirfd, name), through the table: fn(arg, key, value, len)
 * for each, in listxattr's order, whatever their number and size (the
 * list is sized first, and grows if it grows meanwhile).  A key removed
 * between the list and its read is passed over, and so is one whose value
 * cannot be read at all (ENOTSUP: logged).  at: BSYS_LINK for the link itself.  fn
 * returns 0 (taken), 1 (passed over) or -errno.  Returns how many fn took,
 * the first error fn returned, or -errno of the list or a read (the
 * caller decides which errors of the list mean "none": -ENOENT,
 * -ENOTSUP...).  Any other failure of one key fails the whole.
 */
int bsys_xattrs_each(int dirfd, const char *name, int at,
		     int (*fn)(void *arg, const char *key, const void *val, size_t len), void *arg);
/* Do fds a and b hold the same inode?  (A name reopened: is it still ours?) */
bool bsys_same_file(int a, int b);
/* Is (d, n) itself (not followed) the inode fd holds?  0, -ESTALE if another, or -errno. */
int bsys_name_is(int d, const char *n, int fd);
/*
 * Open `path` below root_fd one component at a time (never through a
 * symlink, never "." or "..", never above the root: a manifest record or a
 * user's tree is data, not trusted); the last with flags (bsys.openat: a
 * FIFO or device is refused, not opened).  fd or -errno.
 */
int bsys_open_beneath(int root_fd, const char *path, int flags);
/* Does the directory fd hold no entry ("." and ".." aside)?  False if it cannot be read. */
bool bsys_dir_empty(int fd);
/*
 * Is the directory fd beneath the directory (dev, ino), by its ".." entries
 * as they are now?  Looked for `depth` levels up first (one call), then at
 * every level.  A directory's fd follows it through renames, out of the
 * backend too (its owner may move it anywhere in the same file system):
 * this is how btree.c notices.  0, -EXDEV if not beneath it, or -errno
 * (-ENOENT: removed).
 */
int bsys_beneath(int fd, uint32_t depth, dev_t dev, ino_t ino);
/* C5: from now on this thread's attribute calls need an object owned by uid. */
void bsys_owner_guard(uid_t uid);
void bsys_owner_guard_off(void);

/* Install fault wrappers from CKPTFS_FAULT; 0, or -EINVAL with a message. */
int bsys_faults_from_env(void);
/*
 * Install the power-loss recorder (powerloss.c) from CKPTFS_POWERLOSS; call
 * it before bsys_faults_from_env, so that faults wrap it.  It records the
 * backend rooted at `backend` as it is now.  0 (also when unset), or -EINVAL
 * with a message.
 */
int bsys_powerloss_from_env(const char *backend);
/*
 * For the fault rule lose=1: a sync of fd (an append-only file) failed and
 * lost what it was to write, as a kernel that marks the pages of a failed
 * write-back clean does; the recorder keeps those bytes zeros in every later
 * durable copy of the file.  Nothing when the recorder is not installed.
 */
void bsys_powerloss_lose(int fd);

#endif
