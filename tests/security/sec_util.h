/*
 * sec_util.h — helpers shared by the security tests (tests/security only):
 * running a piece of a test as another, unprivileged user; waiting for a
 * line in the daemon's log; and a snapshot of everything about a tree that
 * a daemon following a symlink could change (contents, mode, owner, times,
 * xattrs), to prove that something outside the backend was left alone.
 */
#ifndef CKPTFS_TESTS_SEC_UTIL_H
#define CKPTFS_TESTS_SEC_UTIL_H

#include "tests/core/core_util.h"

/* 0 if the call succeeded, else errno: for fn bodies. */
#define SEC_ERR(x) ((x) < 0 ? errno : 0)

/* Wait until one line of the daemon log holds both strings; false after timeout_ms. */
bool sec_log_wait(struct tmount *m, const char *a, const char *b, unsigned timeout_ms);
/* Lines of the daemon log holding s. */
int sec_log_count(struct tmount *m, const char *s);

/*
 * A canonical listing of the tree at root: per object its path, type,
 * mode, owner, size, mtime, ctime, contents (files, up to 4 KiB) or target,
 * and xattrs.  malloc'd.
 */
char *sec_tree_state(const char *root);
/* Fail, printing both, unless the tree at root still has the state `was`. */
void sec_assert_unchanged(const char *what, const char *root, const char *was);

/*
 * A test as root over FUSE (exit 77 otherwise): tm_init(m, name), its
 * scratch root searchable by others, and BACKEND/dir made 0755 and given
 * to uid (a directory that user owns on the backend).
 */
void sec_init_user_dir(struct tmount *m, const char *name, const char *dir, uid_t uid);

/* m->root/rel, in one of four rotating buffers (up to four at once in one call). */
char *sec_root_path(const struct tmount *m, const char *rel);

/* Mode bits and owner of path (lstat), failing if it is missing. */
mode_t sec_mode(const char *path);
uid_t sec_uid(const char *path);
gid_t sec_gid(const char *path);

#endif
