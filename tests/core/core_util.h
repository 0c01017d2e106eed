/*
 * core_util.h — helpers shared by the core tests (tests/core only): I/O
 * that must succeed, pattern files of any size checked without holding them
 * in memory, fault-injection environments, and tree snapshots.
 *
 * A tree snapshot is a canonical text listing of a directory tree: one line
 * per object, sorted, "PATH d 0 0" for directories, "PATH f SIZE HASH" for
 * regular files and "PATH l LEN HASH" for symlinks (hash of the target).
 * The backend's own names (".ckptfs.*" anywhere, ".ckptfs" at the root) are
 * left out, so a snapshot of the backend can be compared with a snapshot of
 * the mount, or with a cu_model — an in-memory tree that a test updates op
 * by op to know what the backend may show after each prefix of its ops.
 */
#ifndef CKPTFS_TESTS_CORE_UTIL_H
#define CKPTFS_TESTS_CORE_UTIL_H

#include "tests/harness.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define CU_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define GiB (1ull << 30)

/* A system call that must fail with errno `err`. */
#define CU_EXPECT_ERRNO(x, err)                                                 \
	do {                                                                    \
		errno = 0;                                                      \
		long r_ = (long)(x);                                            \
		if (r_ >= 0 || errno != (err))                                  \
			FAILF("%s: expected %s, got %ld (%s)", #x, strerror(err), r_, \
			      r_ >= 0 ? "success" : strerror(errno));           \
	} while (0)

/* ---- I/O that must succeed (fails the test otherwise) ---- */
int cu_open(const char *path, int flags);
void cu_close(int fd);
void cu_pwrite_all(int fd, const void *buf, size_t len, uint64_t off);
void cu_pread_all(int fd, void *buf, size_t len, uint64_t off);
/* Write [off, off+len) of pattern `seed` through fd in `piece`-byte writes. */
void cu_write_pattern_fd(int fd, uint64_t off, uint64_t len, uint64_t seed, size_t piece);
/* Create or truncate path and fill it with `size` bytes of pattern `seed`. */
void cu_write_pattern(const char *path, uint64_t size, uint64_t seed);
/* Fail unless path holds exactly `size` bytes of pattern `seed`. */
void cu_check_pattern(const char *path, uint64_t size, uint64_t seed);
/* Fail unless [off, off+len) of fd is pattern `seed` (seed 0: zeros). */
void cu_check_range(int fd, const char *what, uint64_t off, uint64_t len, uint64_t seed);
/* A pattern file expected under some root. */
struct cu_pfile {
	const char *name;
	uint64_t size, seed;
};
void cu_check_pfiles(const char *root, const struct cu_pfile *f, size_t n);
/* Fail unless path holds exactly buf[0, len). */
void cu_check_content(const char *path, const void *buf, size_t len);
/* Contents of a small file as a string (static buffer), "" if missing. */
const char *cu_slurp(const char *path);
uint64_t cu_file_size(const char *path);
/* Bytes the file system allocated for path (st_blocks). */
uint64_t cu_allocated(const char *path);
/* Does the file system under dir keep holes? (Allocation is judged only where it does.) */
bool cu_keeps_holes(const char *dir);
/* The file's user.ckptfs.state xattr through the mount (static), "" if none. */
const char *cu_file_state(const char *path);
/* Create path with the text as its contents. */
void cu_write_text(const char *path, const char *text);

/* ---- the daemon ---- */
/* "CKPTFS_FAULT=..." in a static buffer, for tm_mount's env list. */
const char *cu_fault_env(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* How many mounts /proc/self/mountinfo lists at path. */
int cu_mount_count(const char *path);
/* A number from MOUNT/.ckptfs/stats. */
uint64_t cu_stat(struct tmount *m, const char *key);
/* fusermount3 -u path: its exit status. */
int cu_unmount(const char *path);
/* The same, tried again while the mount is busy for a moment (EBUSY just after use); fails after 5 s. */
void cu_unmount_busy(const char *path);
/*
 * Unmount and wait for the daemon to exit, whatever its status (returned):
 * for tests where a failing drain is acceptable.  Fails after 60 s.
 */
int cu_stop_any(struct tmount *m);
/* fsync the mount root until it succeeds (a recovering backend), or fail. */
void cu_sync_retry(struct tmount *m, unsigned timeout_ms);
/* Poll until path exists; false after timeout_ms. */
bool cu_wait_exists(const char *path, unsigned timeout_ms);
/* Skip unless running as root. */
void cu_require_root(void);
/* Mounting with -o opt is refused with exit 2, and the message names `name`. */
void cu_expect_refused(const char *opt, const char *name);

/* ---- trees ---- */
/* Snapshot of the tree at root (malloc'd); NULL if it changed while read. */
char *cu_tree_snapshot(const char *root);
/* Two equal snapshots in a row (malloc'd); NULL if it never held still. */
char *cu_tree_stable(const char *root);
/* Fail, printing both, unless the snapshots are equal. */
void cu_assert_snapshots_equal(const char *what, const char *a, const char *b);
/* The backend's tree equals the mount's (snapshots of both). */
void cu_assert_backend_is_mount(struct tmount *m);
/* ".ckptfs." temporary names in every directory under root. */
int cu_count_temp_tree(const char *root);

struct cu_entry;
struct cu_model {
	struct cu_entry *e;
	size_t n, cap;
};
void cu_model_mkdir(struct cu_model *m, const char *path);
void cu_model_file(struct cu_model *m, const char *path, const void *buf, size_t len);
/* Remove one name (a file, or a directory, empty or not: its subtree goes too). */
void cu_model_remove(struct cu_model *m, const char *path);
/* rename(2): the object and its subtree move; whatever was at `to` is replaced. */
void cu_model_rename(struct cu_model *m, const char *from, const char *to);
char *cu_model_render(const struct cu_model *m);	/* malloc'd snapshot */
void cu_model_free(struct cu_model *m);

#endif
