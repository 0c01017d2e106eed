/*
 * ckptfs.h — libckptfs: hand device memory to a ckptfs mount and keep
 * training while it is copied (docs/gpu.md).
 *
 *   ckptfs_session *s = ckptfs_session_open("/ckpt");
 *   int fd = open("/ckpt/step100/model.bin", O_CREAT | O_EXCL | O_WRONLY, 0644);
 *   ckptfs_capture(s, fd, 0, (uint64_t)dptr, nbytes, stream);  // returns at once
 *   ckptfs_file_close(s, fd, NULL, 0, NULL, NULL);             // closes once landed
 *   ... forward, backward ...
 *   ckptfs_stream_wait(s, stream);   // or ckptfs_wait_captured(s): before the
 *   optimizer_step();                // tensors change again
 *   ckptfs_wait_files(s);            // files closed, in order: write markers now
 *
 * A capture is an asynchronous write: the bytes at device_ptr as of the
 * moment the producer stream reaches the capture are copied, on the
 * library's own stream, into cache memory the daemon shares with this
 * process, and become part of the file once the copy completes.  The source
 * must not change until ckptfs_wait_captured() returns (or, on the GPU,
 * until work ordered after ckptfs_stream_wait() runs); before that nothing
 * is guaranteed about which bytes were copied.
 *
 * Files: capture only into files created in the mount and not yet closed
 * (open with O_CREAT); the first capture binds the file to the session.  A
 * bound file is not sealed by close(2), fsync(2) or a drain: close it with
 * ckptfs_file_close(), which closes it once every capture has landed.  If
 * the process dies first, the daemon drops the file: a half-captured file
 * is never published.
 *
 * Errors: functions return 0 (or a non-negative value) or -errno, and
 * ckptfs_last_error() describes the last failure of the calling thread.
 *   EOPNOTSUPP  the mount was mounted with sessions=off
 *   ENOTTY      the path is not on a ckptfs mount (or one too old)
 *   EPERM       the file's caller is not the session's user
 *   EEXIST      the file was closed before (published): capture into a new one
 *   EFBIG       a range beyond the size declared with ckptfs_file_bind()
 *   EFAULT      the driver rejects the pointer, and it is not host memory
 *   ENOTCONN    the daemon ended the session (unmount, protocol error)
 *   ENOSPC      the daemon has no cache to lend an arena now
 *   EAGAIN      too many connections are in the daemon's handshake: retry
 *   ECHILD      the session is the parent's: a forked child opens its own
 * Without a CUDA driver, host memory is written with pwrite(2) and device
 * pointers fail with EFAULT.  CKPTFS_LIBCUDA names the driver library
 * (default libcuda.so.1); gpu/mock's libckptfs-cudamock.so emulates one
 * with host memory, for tests.
 *
 * Thread safety: every function may be called from any thread; one
 * session serves the whole process.  In a child forked without exec, the
 * library closes the parent's sessions' socket and doorbells (so they end
 * with the parent) and every call on them fails with ECHILD.
 */
#ifndef CKPTFS_H
#define CKPTFS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CKPTFS_API __attribute__((visibility("default")))

typedef struct ckptfs_session ckptfs_session;

struct ckptfs_session_opts {
	uint64_t arena_bytes;	/* cache memory to ask for; 0: $CKPTFS_ARENA_SIZE or 1 GiB */
	int device;		/* GPU ordinal for NUMA placement; -1: the current context's */
	int crc_threads;	/* threads computing CRC-32s; 0: $CKPTFS_CRC_THREADS or automatic */
};

/* A session with the ckptfs mount holding `path`.  NULL and errno on failure. */
CKPTFS_API ckptfs_session *ckptfs_session_open(const char *path);
CKPTFS_API ckptfs_session *ckptfs_session_open_ex(const char *path,
						  const struct ckptfs_session_opts *opts);
/*
 * Wait for every capture and every ckptfs_file_close(), then end the
 * session.  Files still bound (captured but never closed with
 * ckptfs_file_close) are dropped by the daemon.  Returns the first error of
 * the files it waited for, or 0.
 */
CKPTFS_API int ckptfs_session_close(ckptfs_session *s);

/* Bind fd now, declaring the size it will have (0: none); optional. */
CKPTFS_API int ckptfs_file_bind(ckptfs_session *s, int fd, uint64_t size);

/*
 * Copy `length` bytes at `device_ptr` to [file_offset, +length) of fd,
 * after the work queued so far on `stream` (a CUstream; NULL: the legacy
 * default stream).  Returns at once with the capture's number within the
 * file (0, 1, ...), or -errno.
 */
CKPTFS_API int ckptfs_capture(ckptfs_session *s, int fd, uint64_t file_offset,
			      uint64_t device_ptr, size_t length, void *stream);
#define CKPTFS_CAPTURE_CRC32 0x1	/* compute the CRC-32 of the bytes (for patches) */
CKPTFS_API int ckptfs_capture_ex(ckptfs_session *s, int fd, uint64_t file_offset,
				 uint64_t device_ptr, size_t length, void *stream,
				 unsigned int flags);

/* CPU wait: every copy issued so far has completed; the sources may change. */
CKPTFS_API int ckptfs_wait_captured(ckptfs_session *s);
/* `stream` (a CUstream) waits for the copies issued so far: no CPU stall. */
CKPTFS_API int ckptfs_stream_wait(ckptfs_session *s, void *stream);
/*
 * Without waiting: 1 once every copy issued before the last
 * ckptfs_stream_wait() (or ckptfs_wait_captured()) has completed, so their
 * sources may be freed as well as changed; 0 while some still run; -errno.
 */
CKPTFS_API int ckptfs_stream_wait_done(ckptfs_session *s);

/*
 * Written into the file, in order, once its captures have landed (so they
 * land in the captured chunks instead of beside them): the bytes of a
 * header, or the CRC-32 of a capture where a header wants it.
 */
struct ckptfs_patch {
	uint64_t file_offset;
	uint32_t kind;		/* CKPTFS_PATCH_* */
	int32_t capture;	/* CRC32_LE: whose CRC (a capture made with CKPTFS_CAPTURE_CRC32) */
	const void *data;	/* BYTES: copied by ckptfs_file_close */
	uint64_t len;		/* BYTES */
};
#define CKPTFS_PATCH_CRC32_LE 1	/* 4 bytes, little-endian */
#define CKPTFS_PATCH_BYTES 2

/*
 * Hand fd over: once its captures have landed, write the patches, unbind
 * it, close it (its version is sealed then, in the order of these calls)
 * and, if rename_to is given, rename rename_from to it.  Returns at once;
 * errors come from ckptfs_wait_files().  fd belongs to the library after
 * this call, even on error (a file with an error is dropped, not renamed).
 */
CKPTFS_API int ckptfs_file_close(ckptfs_session *s, int fd, const struct ckptfs_patch *patches,
				 size_t npatches, const char *rename_from, const char *rename_to);
/* Wait until every ckptfs_file_close() so far is done; their first error, or 0. */
CKPTFS_API int ckptfs_wait_files(ckptfs_session *s);

struct ckptfs_stats {
	uint64_t arena_bytes, chunk_size;
	uint64_t captures, captured_bytes, host_written_bytes;
	uint64_t entries, adopted_chunks, adopted_bytes, merged_bytes, moved_chunks, rejected;
	uint64_t arena_waits, arena_wait_ns;	/* the arena was full */
	double adopt_latency_avg_s, adopt_latency_max_s;	/* copy completion -> adoption */
	int numa_node;		/* where the daemon placed the arena, -1 if not bound */
	int hugepages;
	int arena_pinned;	/* registered with the driver (cuMemHostRegister) */
	const char *driver;	/* "cuda", "mock" or "none" */
};
CKPTFS_API int ckptfs_session_stats(ckptfs_session *s, struct ckptfs_stats *st);

/* What the last failing call of this thread said. */
CKPTFS_API const char *ckptfs_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
