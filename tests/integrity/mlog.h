/*
 * mlog.h — what the manifest tests (manifest_log.c, manifest_append.c)
 * share: writing a history of records through the manifest's own API
 * (manifest_open / manifest_append / manifest_close, as the publisher
 * does), the files those records describe, and copies of a backend.
 *
 * Records are built here, by hand, in the documented format
 * (docs/manifest.md); digests are computed with libxxhash directly.
 * Times are the wall clock, strictly increasing, so the order `ckptfs-ctl
 * verify` replays is the order the test wrote, across processes too.
 */
#ifndef CKPTFS_TESTS_MLOG_H
#define CKPTFS_TESTS_MLOG_H

#include "tests/integrity/integ.h"
#include "backend/manifest.h"

struct mlog {
	struct manifest m;
	struct recovery_report rep;
	const char *root;	/* the backend directory */
	int root_fd;
	char id[16];		/* this mount's id */
	uint64_t seq;		/* last operation seq written */
};

/* The next time stamp (the wall clock: records of every node interleave as written). */
uint64_t ml_time(void);
/* Open node `node` of the backend at root as mount `id`: manifest_open must succeed. */
void ml_open(struct mlog *l, const char *root, const char *node, const char *id);
/* Append a payload (printf format): manifest_append must succeed. */
void ml_rec(struct mlog *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Record a file version of `content` at path (next seq); on disk too when `apply`. */
uint64_t ml_file(struct mlog *l, const char *path, const char *content, bool apply);
/* Record an intent for the next seq (a version queued, not published). */
uint64_t ml_intent(struct mlog *l, const char *path);
/* Namespace operations (next seq), applied on disk too when `apply`. */
uint64_t ml_unlink(struct mlog *l, const char *path, bool apply);
uint64_t ml_rmdir(struct mlog *l, const char *path, bool apply);
uint64_t ml_rename(struct mlog *l, const char *from, const char *to, bool exchange, bool apply);
uint64_t ml_mkdir(struct mlog *l, const char *path, bool apply);
uint64_t ml_symlink(struct mlog *l, const char *target, const char *path, bool apply);
uint64_t ml_link(struct mlog *l, const char *from, const char *to, bool apply);
void ml_durable(struct mlog *l);
void ml_void(struct mlog *l, uint64_t seq);
/* A clean unmount. */
void ml_close(struct mlog *l);

/* Write content to root/path, making parent directories. */
void ml_put(const char *root, const char *path, const char *content);
/* cp -a from to (to must not exist). */
void ml_copy_tree(const char *from, const char *to);
/* A fresh scratch directory (mkdtemp) under TMPDIR or /tmp. */
void ml_scratch(char *out, size_t len, const char *name);
/* verify's verdict lines for the backend at root (timing left out); malloc'd. */
char *ml_verdicts(const char *root);
/* node's manifest.log under root. */
const char *ml_log_path(const char *root, const char *node);

#endif
