/*
 * harness.h — what every C test of ckptfs shares: assertions that print
 * both values, and a real mount of the daemon over a scratch backend.
 *
 * A test is a small program exiting 0 (pass), 1 (fail) or 77 (skip).  It
 * mounts with tm_start(), works through tm_path() (the mount) and checks
 * the backend directly through tm_bpath().  The daemon runs in the
 * foreground as a child; its log goes to <scratch>/daemon.log and is
 * printed when a test fails.  ctest runs I/O tests twice, with
 * CKPTFS_TEST_IO=uring and =pwrite; tm_start() passes it as io=.
 */
#ifndef CKPTFS_TEST_HARNESS_H
#define CKPTFS_TEST_HARNESS_H

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define TEST_SKIP 77

void tm_fail_hook(void);	/* prints the daemon log of the running mount */

#define FAILF(...)                                                              \
	do {                                                                    \
		fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                 \
		fprintf(stderr, __VA_ARGS__);                                   \
		fprintf(stderr, "\n");                                          \
		tm_fail_hook();                                                 \
		exit(1);                                                        \
	} while (0)

#define ASSERT_TRUE(x)                                                          \
	do {                                                                    \
		if (!(x))                                                       \
			FAILF("assertion failed: %s", #x);                      \
	} while (0)

#define ASSERT_INT_OP(a, op, b)                                                 \
	do {                                                                    \
		long long a_ = (long long)(a), b_ = (long long)(b);             \
		if (!(a_ op b_))                                                \
			FAILF("expected %s %s %s: %lld vs %lld", #a, #op, #b, a_, b_); \
	} while (0)
#define ASSERT_EQ(a, b) ASSERT_INT_OP(a, ==, b)
#define ASSERT_NE(a, b) ASSERT_INT_OP(a, !=, b)
#define ASSERT_LT(a, b) ASSERT_INT_OP(a, <, b)
#define ASSERT_LE(a, b) ASSERT_INT_OP(a, <=, b)
#define ASSERT_GE(a, b) ASSERT_INT_OP(a, >=, b)

#define ASSERT_STR_EQ(a, b)                                                     \
	do {                                                                    \
		const char *a_ = (a), *b_ = (b);                                \
		if (!a_ || !b_ || strcmp(a_, b_) != 0)                          \
			FAILF("expected %s == %s: \"%s\" vs \"%s\"", #a, #b,    \
			      a_ ? a_ : "(null)", b_ ? b_ : "(null)");          \
	} while (0)

/* A system call that must succeed: prints errno's name on failure. */
#define CHECK_SYS(x)                                                            \
	({                                                                      \
		long r_ = (long)(x);                                            \
		if (r_ < 0)                                                     \
			FAILF("%s failed: %s", #x, strerror(errno));            \
		r_;                                                             \
	})

struct tmount {
	char root[PATH_MAX / 2];	/* scratch directory */
	char backend[PATH_MAX];
	char mnt[PATH_MAX];
	char log[PATH_MAX];
	char opts[1024];	/* -o string the daemon got */
	pid_t pid;
	int exit_status;	/* after tm_stop/tm_wait_exit */
};

/* Exit 77 unless /dev/fuse and fusermount3 are usable. */
void tm_require_fuse(void);
/*
 * Run fn(arg) in a child that has become uid/gid (and only that group),
 * umask 0: fn returns 0 or an errno value, which is returned (128+signal
 * if killed).
 */
int tm_as_user(uid_t uid, gid_t gid, int (*fn)(void *arg), void *arg);
/* Create a scratch root with backend/ and mnt/ (no mount yet). */
void tm_init(struct tmount *m, const char *name);
/*
 * Start the daemon on m->backend and m->mnt with extra -o options (may be
 * NULL) and extra environment "K=V" entries (NULL-terminated, may be NULL);
 * wait until mounted.  Fails the test if it does not come up.
 */
void tm_mount(struct tmount *m, const char *extra_opts, const char *const *env);
/* tm_init + tm_mount. */
void tm_start(struct tmount *m, const char *name, const char *extra_opts, const char *const *env);
/* Unmount with fusermount3 -u and wait for the daemon to drain and exit (0). */
void tm_stop(struct tmount *m);
/* SIGKILL the daemon and lazily detach the mount: a crash. */
void tm_kill(struct tmount *m);
/* Remove the scratch directory. */
void tm_cleanup(struct tmount *m);
/* Wait until everything written so far is durable (fsync of the mount root). */
void tm_sync(struct tmount *m);

/* Paths inside the mount and the backend (static rotating buffers). */
const char *tm_path(struct tmount *m, const char *rel);
const char *tm_bpath(struct tmount *m, const char *rel);

/* Run argv (PATH searched); stdout+stderr into *out (malloc'd) unless NULL. */
int tm_run(const char *const *argv, char **out);
/* Run the daemon binary (argv[0] is ignored), capture its output; exit status. */
int tm_run_daemon(const char *const *argv, char *err, size_t errlen);
#define CKPT_ARRAY_LEN_TM(a) (sizeof(a) / sizeof((a)[0]))
const char *tm_daemon_bin(void);

/* ---- small file helpers ---- */
void fill_pattern(void *buf, size_t len, uint64_t seed, uint64_t offset);
void write_file(const char *path, const void *buf, size_t len);
/* Whole file into a malloc'd buffer; NULL with errno set if it cannot be read. */
void *read_file(const char *path, size_t *len);
bool file_exists(const char *path);
/* Fail unless the two files have identical contents. */
void assert_files_equal(const char *a, const char *b);
/* Names in dir matching the temporary-file pattern (".ckptfs."): count. */
int count_temp_files(const char *dir);
uint64_t mono_ms(void);

#endif
