/*
 * integ.h — what the integrity tests (tests/integrity) share beyond
 * tests/core/core_util.h (fault environments, unmounting whatever the exit
 * status, syncing a recovering mount): running ckptfs-ctl and reading its
 * verdicts, reading MOUNT/.ckptfs/stats, an independent reading of the
 * manifest log, and tree snapshots.
 *
 * Everything here checks the daemon from the outside: hashes are computed
 * with libxxhash directly (not through the daemon's code; the manifest's
 * digest by tests/digest_ref.h, an independent implementation), manifest records
 * are parsed by our own reader, and trees are walked on the backend itself.
 *
 * A tree snapshot (struct it_tree) lists every object below a root, sorted
 * by path: directories, and files with their size and XXH3-64.  The
 * backend's own names (".ckptfs" at the root, ".ckptfs.*" anywhere) are
 * left out of it but the temporary names are counted, so a snapshot of the
 * backend compares directly with a snapshot of the mount, or with a model
 * that a test builds operation by operation.
 */
#ifndef CKPTFS_TESTS_INTEG_H
#define CKPTFS_TESTS_INTEG_H

#include "tests/core/core_util.h"	/* cu_fault_env, cu_stop_any, cu_sync_retry, ... */
#include "tests/digest_ref.h"		/* td_digest_file, td_digest_buf */

/* ---- commands ---- */
/* ckptfs-ctl, found next to the daemon binary. */
const char *it_ctl_bin(void);
/* ckptfs-ctl verify PATH (--jobs when jobs > 0); its output in *out. */
int it_verify(const char *path, unsigned jobs, char **out);
/* The verdict verify printed for backend path rel ("OK", "MISMATCH", ...), or "". */
const char *it_verdict(const char *out, const char *rel);
/* How many files got the verdict. */
int it_verdict_count(const char *out, const char *verdict);
/* verify's lines for files, in order, without the timing summary (malloc'd). */
char *it_verdict_lines(const char *out);

/* ---- the daemon (core_util.h has the rest) ---- */
/* The daemon log of the mount (malloc'd, "" if none). */
char *it_log_text(struct tmount *m);
/* Lines of the daemon log that contain needle. */
int it_log_count(struct tmount *m, const char *needle);
/* Wait until at least `at_least` lines of the log contain needle; fail after 20 s. */
void it_wait_log(struct tmount *m, const char *needle, int at_least);
/* A scratch file whose existence switches fault rules on (while=PATH). */
void it_gate_set(const char *path, bool on);

/* ---- stats and flat JSON ---- */
/* MOUNT/.ckptfs/stats (static buffer). */
const char *it_stats(struct tmount *m);
/*
 * The value of "key" in a flat JSON object (read whole with cache/json.h:
 * false if it is not one): string contents or the literal.
 */
bool it_json_get(const char *json, const char *key, char *out, size_t len);
long long it_json_num(const char *json, const char *key);
/* Poll stats until "key" reads want; false after timeout_ms. */
bool it_wait_stat(struct tmount *m, const char *key, const char *want, unsigned timeout_ms);

/* ---- contents ---- */
uint64_t it_hash64(const void *buf, size_t len);
/* The digest of a file or buffer as the manifest writes it: tests/digest_ref.h. */
/* `size` bytes of pattern `seed` (malloc'd). */
void *it_pattern(uint64_t seed, size_t size);
/* Create or truncate path with pattern contents; close(2)'s result (0 or -errno). */
int it_write_pattern(const char *path, uint64_t seed, size_t size);
/* True if path holds exactly `size` bytes of pattern `seed`. */
bool it_has_pattern(const char *path, uint64_t seed, size_t size);
/* it_has_pattern of dir/rel. */
bool it_has_pattern_in(const char *dir, const char *rel, uint64_t seed, size_t size);

/* A file of a test's table: its path below the root and its pattern. */
struct it_file {
	const char *rel;
	uint64_t seed;
	size_t size;
};
/*
 * Write each file through the mount, making missing parent directories.
 * close(2) must succeed, or fail with `may_fail` (an errno, 0 for none).
 */
void it_write_files(struct tmount *m, const struct it_file *f, size_t n, int may_fail);

/* ---- the manifest log ---- */
struct it_rec {
	uint64_t off;		/* where the record starts in the log */
	uint64_t len;		/* whole record, header and newline included */
	char *payload;		/* NUL-terminated */
};
struct it_log {
	struct it_rec *r;
	size_t n;
	uint64_t size;		/* of the file */
	uint64_t valid_end;	/* end of the last record of the valid prefix */
	uint64_t bad;		/* records that failed their check */
};
/* BACKEND/.ckptfs/nodes/<this host>/manifest.log (static buffer). */
const char *it_manifest_path(struct tmount *m);
/* Read and check every record (our own parser); 0 or -errno. */
int it_log_read(const char *path, struct it_log *l);
void it_log_free(struct it_log *l);
/* Records whose "t" is type (and "path" is path, when path is non-NULL). */
int it_log_count_type(const struct it_log *l, const char *type, const char *path);

/* ---- trees ---- */
struct it_ent {
	char *path;		/* relative to the root */
	char type;		/* 'd', 'f', 'l' */
	uint64_t size;
	uint64_t hash;		/* XXH3-64 of the contents, files only */
};
struct it_tree {
	struct it_ent *e;	/* sorted by path */
	size_t n, cap;
	int temps;		/* ".ckptfs." names seen (not listed) */
};
/* Snapshot the tree at root; 0 or -errno. */
int it_tree_scan(const char *root, struct it_tree *t);
void it_tree_free(struct it_tree *t);
void it_tree_copy(struct it_tree *dst, const struct it_tree *src);
const struct it_ent *it_tree_find(const struct it_tree *t, const char *path);
/* Add or replace an entry. */
void it_tree_put(struct it_tree *t, const char *path, char type, uint64_t size, uint64_t hash);
/* Remove path (and, for a directory, everything below it). */
void it_tree_del(struct it_tree *t, const char *path);
/* Move path (and everything below it) to `to`, replacing what was there. */
void it_tree_move(struct it_tree *t, const char *path, const char *to);
/*
 * Differences between two trees: 0 if equal; else their number, with the
 * first few described in why (may be NULL).
 */
int it_tree_diff(const struct it_tree *a, const struct it_tree *b, char *why, size_t len);

#endif
