/*
 * crash_gpu.c — the crash loop (tests/integrity/crash.c, linked again with
 * this file, whose hooks the stream in ckstream.c calls) with captured
 * files among the checkpoint stream: about every other new checkpoint file
 * (by a hash of its name) is written by capture through libckptfs and the
 * mock driver — its first 4 KiB by pwrite, the rest in two captures, last
 * part first — then closed by ckptfs_file_close.  Files that exist already
 * (rewritten in place) are left to the plain writer.  The daemon is SIGKILLed at random moments as in the
 * plain loop, so crashes land while captures are in flight, adopted,
 * sealed, flushed and published; the same judge checks prefix consistency,
 * whole files and verify.  A session is opened by the stream process on
 * its first capture.
 */
#include "tests/gpu/gpu_util.h"

#include <unistd.h>

static ckptfs_session *sess;

int crash_capture_open(int root, const char *rel, const char *buf, size_t len);
int crash_capture_close(int root, int fd, bool do_fsync);

int crash_capture_open(int root, const char *rel, const char *buf, size_t len)
{
	uint64_t h = it_hash64(rel, strlen(rel));
	size_t head = len < 4096 ? len : 4096, mid = head + (len - head) / 2;
	char self[64];
	int fd;

	if (h % 2)
		return -1;	/* written by crash.c as usual */
	if (!sess) {
		snprintf(self, sizeof(self), "/proc/self/fd/%d", root);
		if (!(sess = ckptfs_session_open(self)))
			return -2;
	}
	/* Only new files can be bound; one that exists is rewritten by the plain path. */
	if ((fd = openat(root, rel, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644)) < 0)
		return errno == EEXIST ? -1 : -2;
	int r = ckptfs_file_bind(sess, fd, len);
	if (r < 0 || pwrite(fd, buf, head, 0) != (ssize_t)head ||
	    ckptfs_capture(sess, fd, mid, (uint64_t)(uintptr_t)(buf + mid), len - mid, NULL) < 0 ||
	    ckptfs_capture(sess, fd, head, (uint64_t)(uintptr_t)(buf + head), mid - head, NULL) < 0) {
		ckptfs_file_close(sess, fd, NULL, 0, NULL, NULL);
		return -2;
	}
	return fd;
}

int crash_capture_close(int root, int fd, bool do_fsync)
{
	if (ckptfs_file_close(sess, fd, NULL, 0, NULL, NULL) < 0 || ckptfs_wait_files(sess) < 0)
		return -1;
	return do_fsync ? fsync(root) : 0;	/* the mount root: everything before is durable */
}
