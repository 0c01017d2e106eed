/*
 * ctl_util.h — what the control-interface tests share (tests/ctl only):
 * running the CLIs and capturing what they print, reading MOUNT/.ckptfs
 * files and judging them with the strict flat-JSON reader (cache/json.h), seeded
 * pattern files checked on the backend, the per-file xattrs, and an
 * XXH3-128 computed here, outside the daemon.
 *
 * Everything that must succeed fails the test (FAILF) with the reason, so
 * the tests read as the sequence of things they check.
 */
#ifndef CKPTFS_TESTS_CTL_UTIL_H
#define CKPTFS_TESTS_CTL_UTIL_H

#include "tests/harness.h"
#include "cache/json.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)

/* ---- running programs ---- */
struct ct_result {
	int status;		/* exit status, or 128 + signal */
	char *out, *err;	/* everything printed, NUL-terminated */
	uint64_t ms;		/* wall time */
};
/* Path of a tool built beside the daemon: "ckptfs-stat", "ckptfs-ctl". */
const char *ct_tool(const char *name);
/* Run argv (NULL-terminated; argv[0] a path or a name on PATH) to completion. */
void ct_run(struct ct_result *r, const char *const *argv);
void ct_result_free(struct ct_result *r);
/* Fail, showing argv's output, unless it exited with `status`. */
void ct_expect_status(const struct ct_result *r, int status, const char *what);
/* Fail unless `needle` occurs in `text` (what: which output). */
void ct_expect_in(const char *text, const char *needle, const char *what);

/* ---- the control directory and JSON ---- */
/* MOUNT/.ckptfs/<name>, whole (malloc'd). */
char *ct_read_ctl(struct tmount *m, const char *name);
/*
 * One exchange with MOUNT/.ckptfs/<name>: open it (read-write if msg), write
 * msg if any, read the answer from offset 0 and parse it as one object.
 */
void ct_exchange(struct tmount *m, const char *name, const char *msg, struct json_obj *answer);
/* Parse text[0, len) as one flat JSON object or fail, naming `what`. */
void ct_parse_object(const char *text, size_t len, struct json_obj *out, const char *what);
/* MOUNT/.ckptfs/stats, parsed. */
void ct_stats(struct tmount *m, struct json_obj *out);
/* One number of the stats. */
double ct_stat(struct tmount *m, const char *key);
/* Each '\n'-terminated line of text as an object: the count; free with ct_lines_free. */
size_t ct_parse_lines(const char *text, struct json_obj **out, const char *what);
void ct_lines_free(struct json_obj *v, size_t n);
/* The sequence number of the first blocked operation (stats), as text for `ckptfs-ctl skip`. */
void ct_blocked_seq(struct tmount *m, char seq[32]);
/* A member of the given type, or fail naming the key. */
double ct_num(const struct json_obj *o, const char *key);
const char *ct_str(const struct json_obj *o, const char *key);
bool ct_bool(const struct json_obj *o, const char *key);

/* ---- files ---- */
/* Create path holding `size` bytes of pattern `seed` (harness fill_pattern). */
void ct_write_seeded(const char *path, size_t size, uint64_t seed);
/* Fail unless path holds exactly `size` bytes of pattern `seed`. */
void ct_check_seeded(const char *path, size_t size, uint64_t seed);
/* Create an empty file (a while= flag for CKPTFS_FAULT). */
void ct_touch(const char *path);

/* ---- xattrs and digests ---- */
/* getxattr into buf as a string: its length, or -errno. */
int ct_getxattr(const char *path, const char *key, char *buf, size_t len);
/* Poll user.ckptfs.state until it reads `state`; false after timeout_ms. */
bool ct_wait_state(const char *path, const char *state, unsigned timeout_ms);
/* The manifest's digest of a file, by the reference code (tests/digest_ref.h). */
void ct_digest_hex(const char *path, char hex[33]);

/* ---- the daemon ---- */
/*
 * tm_init + tm_mount with CKPTFS_FAULT="<rule>,while=<scratch>/flag": the
 * fault fires only while the flag file exists.  Its path goes to flag; it is
 * not created (ct_touch it to start the fault, unlink it to end it).
 */
void ct_mount_flagged(struct tmount *m, const char *name, const char *rule, char flag[PATH_MAX]);
/* The same with "<rule>,hold=<flag>": matching calls wait while the flag exists. */
void ct_mount_held(struct tmount *m, const char *name, const char *rule, char flag[PATH_MAX]);
/*
 * tm_mount for more users than root: allow_other (before opts, if any), the
 * scratch directory searchable by all and the mount point given mnt_mode.
 */
void ct_mount_shared(struct tmount *m, const char *opts, const char *const *env, mode_t mnt_mode);
/* ct_mount_flagged on a mount for more users than root (ct_mount_shared, 0755). */
void ct_mount_flagged_shared(struct tmount *m, const char *name, const char *rule,
			     char flag[PATH_MAX]);

#endif
