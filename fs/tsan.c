/*
 * tsan.c — ThreadSanitizer builds only (-DCKPTFS_TSAN=ON): tell TSan about
 * the ordering that /dev/fuse gives and it cannot see.
 *
 * The kernel hands out a request only after the replies that made it
 * possible: an OPEN's reply (carrying the handle we allocated) is written
 * before the READ on that handle is read by another worker, a CREATE's
 * before the WRITE, and so on.  That order goes through a system call on
 * each side, so TSan, seeing two threads touch the handle with no lock or
 * atomic between them, reports a race that is none.  Here every write of a
 * reply to a /dev/fuse descriptor (writev, or splice into it) is a release,
 * and every read of a request from one (read, or splice out of it) an
 * acquire, on one sync object — what the kernel's request queue does.
 * Handlers that run at the same time are still unordered, so their real
 * races still show.
 *
 * libfuse calls writev, read and splice through the dynamic linker; the
 * executable's definitions below come first and call the next ones (TSan's
 * interceptors, then libc).  The descriptor is checked with fstat (the
 * misc device 10:229); that costs a system call per request, in this build
 * only.  Without TSan this file is empty.
 */
#if defined(__SANITIZE_THREAD__)
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

void __tsan_acquire(void *addr);
void __tsan_release(void *addr);

static char fuse_order;	/* the sync object: its address is all TSan needs */

static bool is_fuse_dev(int fd)
{
	struct stat st;
	int saved = errno;	/* the caller's result must keep its errno */
	bool r = fd >= 0 && fstat(fd, &st) == 0 && S_ISCHR(st.st_mode) &&
		 st.st_rdev == makedev(10, 229);
	errno = saved;
	return r;
}

/* The next definition of `name` (TSan's interceptor), looked up once. */
#define NEXT(type, name)                                                       \
	static _Atomic(type) next_;                                            \
	type fn_ = atomic_load(&next_);                                        \
	if (!fn_) {                                                            \
		fn_ = (type)dlsym(RTLD_NEXT, name);                            \
		atomic_store(&next_, fn_);                                     \
	}

typedef ssize_t (*writev_fn)(int, const struct iovec *, int);
typedef ssize_t (*read_fn)(int, void *, size_t);
typedef ssize_t (*splice_fn)(int, loff_t *, int, loff_t *, size_t, unsigned int);

ssize_t writev(int fd, const struct iovec *iov, int count)
{
	NEXT(writev_fn, "writev");
	if (is_fuse_dev(fd))
		__tsan_release(&fuse_order);
	return fn_(fd, iov, count);
}

ssize_t read(int fd, void *buf, size_t len)
{
	NEXT(read_fn, "read");
	ssize_t r = fn_(fd, buf, len);
	if (is_fuse_dev(fd))
		__tsan_acquire(&fuse_order);
	return r;
}

ssize_t splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
	       unsigned int flags)
{
	NEXT(splice_fn, "splice");
	if (is_fuse_dev(fd_out))
		__tsan_release(&fuse_order);
	ssize_t r = fn_(fd_in, off_in, fd_out, off_out, len, flags);
	if (is_fuse_dev(fd_in))
		__tsan_acquire(&fuse_order);
	return r;
}
#endif
