/*
 * gpu_util.h — what the GPU session tests (tests/gpu) share: the mock
 * driver (libckptfs-cudamock.so, whose "device" memory is this process's
 * memory) selected before libckptfs loads a driver, sessions that must
 * open, files created in the mount for capture, and the verdicts that
 * matter — the bytes on the backend, and ckptfs-ctl verify's XXH3 check
 * against the manifest.  Built on tests/integrity/integ.h.
 */
#ifndef CKPTFS_TESTS_GPU_UTIL_H
#define CKPTFS_TESTS_GPU_UTIL_H

#include "tests/integrity/integ.h"
#include "ckptfs.h"

/* Exit 77 without FUSE; select the mock driver unless CKPTFS_LIBCUDA is set. */
void gt_init(void);
/* The mock driver's path (the build's). */
const char *gt_mock_path(void);
/* A session with the mount that must open (fails the test with the library's message). */
ckptfs_session *gt_open(struct tmount *m, uint64_t arena_bytes);
/* A new file in the mount, open for writing, parents made (thread-safe). */
int gt_create(struct tmount *m, const char *rel);
/* Hand fd to ckptfs_file_close and wait for it: must succeed. */
void gt_close_wait(ckptfs_session *s, int fd);
/* r must be -err, and ckptfs_last_error() must mention needle. */
#define GT_EXPECT_ERR(r, err, needle) gt_expect_err((r), (err), (needle), #r, __LINE__)
void gt_expect_err(long r, int err, const char *needle, const char *what, int line);
/* Everything durable, then: each rel holds exactly buf[i] on the backend and verify says OK. */
void gt_check_backend(struct tmount *m, const char *const *rel, void *const *buf,
		      const size_t *len, size_t n);
/* Exit 1 with "what" if the process is still running `seconds` from now (0: cancel). */
void gt_watchdog(unsigned seconds, const char *what);
/* A stats number of the mount. */
long long gt_stat(struct tmount *m, const char *key);
/*
 * A trainer process: fn(m, out) runs in a child (it must not return) and
 * reports on `out`; gt_trainer_report reads len bytes of its report, or
 * fails the test with its exit status if it ended before.
 */
pid_t gt_trainer(struct tmount *m, void (*fn)(struct tmount *m, int out), int *from);
void gt_trainer_report(pid_t pid, int from, void *buf, size_t len);

#endif
