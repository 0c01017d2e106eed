/*
 * devio.c — the one door between libfuse and /dev/fuse for everything the
 * daemon sends: libfuse 3.14 writes replies through the custom I/O hooks
 * installed here (fuse_session_custom_io), and they decide where each goes.
 *
 * What passes through, and why it has to be here:
 *   - INIT.  libfuse 3.14 knows neither FUSE over io_uring nor passthrough,
 *     so it drops those bits of the kernel's INIT and never asks for them.
 *     The request loop shows us the raw INIT request (devio_note_init); the
 *     INIT reply is amended here: FUSE_OVER_IO_URING when the kernel offers
 *     it and uring.c has its rings ready, FUSE_PASSTHROUGH (with
 *     max_stack_depth 1) when the kernel offers it and the daemon holds
 *     CAP_SYS_ADMIN (the backing-file ioctl needs it),
 *     FUSE_DIRECT_IO_ALLOW_MMAP for read_direct (ops.c), and the request size
 *     our own loop can take (max_write, max_pages: libfuse caps them at its
 *     own 1 MiB buffers, which this loop does not use).  Only once the
 *     kernel has accepted the reply (the write returned) are the io_uring
 *     queues registered (uring.c).
 *   - Open replies.  A handler that wants passthrough (or must use it
 *     because the inode already has a backing file, passthrough.c) calls
 *     devio_open_patch() just before fuse_reply_open/create on the same
 *     thread; the hook sets FOPEN_PASSTHROUGH and the backing id in the
 *     fuse_open_out libfuse built.
 *   - Replies to requests that came through an io_uring entry go into that
 *     entry's buffers and are committed there (uring.c); everything else —
 *     replies to /dev/fuse requests, notifications — is written to the
 *     device as libfuse would.
 *
 * Invariants:
 *   D1  A flag is added to the INIT reply only if the kernel offered it.
 *   D2  An open patch is consumed by the next open or create reply of the
 *       thread that set it, or cleared unused (devio_open_patch_clear).
 *   D3  Every reply is delivered exactly once: to its ring entry, or to the
 *       device.
 * No locks: the INIT state is written before any other request exists
 * (the kernel sends nothing before INIT is answered) and read after; only
 * init_unique is cleared once the reply is taken, when other replies may
 * already be under way: it is atomic.
 */
#include "fs/fs.h"
#include "fs/fuse_kapi.h"
#include "cache/log.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <linux/capability.h>

static struct {
	struct ckptfs *fs;
	int fd;
	atomic_uint_least64_t init_unique;	/* the INIT request, 0 once answered */
	uint64_t kflags;	/* what the kernel's INIT offered */
	atomic_bool passthrough;	/* negotiated */
	atomic_bool uring;		/* negotiated (the queues may still fail) */
	atomic_bool dio_mmap;	/* negotiated: direct-I/O files may be mmapped shared */
	unsigned max_pages;	/* negotiated request size, pages */
} D = { .fd = -1 };

/* A pending amendment of this thread's next open reply (D2). */
static __thread struct {
	bool set;
	uint32_t add, clear;
	int32_t backing_id;
} open_patch;

/* Does this process hold CAP_SYS_ADMIN (passthrough's ioctl needs it)? */
static bool cap_sys_admin(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];

	if (syscall(SYS_capget, &h, d) < 0)
		return false;
	return d[CAP_SYS_ADMIN / 32].effective & (1u << (CAP_SYS_ADMIN % 32));
}

void devio_note_init(const void *req, size_t len)
{
	const struct fuse_in_header *ih = req;
	struct kapi_init_in in = { 0 };

	if (len < sizeof(*ih) + 16 || ih->opcode != FUSE_INIT)
		return;
	memcpy(&in, ih + 1, CKPT_MIN(len - sizeof(*ih), sizeof(in)));
	atomic_store(&D.init_unique, ih->unique);
	D.kflags = in.flags;
	if ((in.flags & KAPI_INIT_EXT) && len >= sizeof(*ih) + 20)
		D.kflags |= (uint64_t)in.flags2 << 32;
}

/* Amend libfuse's INIT reply (D1); returns what was asked for. */
static uint64_t init_amend(struct iovec *iov, int count)
{
	struct kapi_init_out out;
	uint64_t add = 0;

	if (count < 2 || iov[1].iov_len < offsetof(struct kapi_init_out, max_stack_depth) + 4)
		return 0;
	memcpy(&out, iov[1].iov_base, CKPT_MIN(iov[1].iov_len, sizeof(out)));
	if (D.fs->opt.passthrough && (D.kflags & KAPI_PASSTHROUGH) && cap_sys_admin()) {
		add |= KAPI_PASSTHROUGH;
		out.max_stack_depth = 1;
	}
	if ((D.kflags & KAPI_OVER_IO_URING) && fsu_offerable())
		add |= KAPI_OVER_IO_URING;
	if (D.fs->opt.read_direct && (D.kflags & KAPI_DIRECT_IO_ALLOW_MMAP))
		add |= KAPI_DIRECT_IO_ALLOW_MMAP;	/* read_direct (ops.c) */
	if (add) {
		out.flags |= KAPI_INIT_EXT;
		out.flags2 |= (uint32_t)(add >> 32);
	}
	/* Our loop's pipes and ring buffers, not libfuse's, receive requests. */
	unsigned want = fs_loop_max_write();
	if (want > out.max_write && D.fs->own_loop) {
		out.max_write = want;
		out.max_pages = (uint16_t)CKPT_MIN(65535u, (want + 4095) / 4096);
		D.fs->max_write = want;
	}
	D.max_pages = out.max_pages ? out.max_pages : 32;
	memcpy(iov[1].iov_base, &out, CKPT_MIN(iov[1].iov_len, sizeof(out)));
	return add;
}

/* Apply this thread's open patch to an open or create reply (D2). */
static void open_amend(struct iovec *iov, int count)
{
	const struct fuse_out_header *oh = iov[0].iov_base;
	size_t at;

	if (!open_patch.set || oh->error || count != 2)
		return;
	if (iov[1].iov_len == sizeof(struct fuse_open_out))
		at = 0;			/* OPEN */
	else if (iov[1].iov_len == sizeof(struct fuse_entry_out) + sizeof(struct fuse_open_out))
		at = sizeof(struct fuse_entry_out);	/* CREATE */
	else
		return;
	struct kapi_open_out o;
	memcpy(&o, (char *)iov[1].iov_base + at, sizeof(o));
	o.open_flags = (o.open_flags & ~open_patch.clear) | open_patch.add;
	o.backing_id = open_patch.backing_id;
	memcpy((char *)iov[1].iov_base + at, &o, sizeof(o));
	open_patch.set = false;
}

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	struct fuse_out_header *oh = iov[0].iov_base;
	uint64_t add = 0;
	uint64_t init_unique = atomic_load(&D.init_unique);
	bool init = init_unique && oh->unique == init_unique;

	(void)userdata;
	if (init)
		add = init_amend(iov, count);
	else if (open_patch.set)
		open_amend(iov, count);
	if (!init && oh->unique) {
		ssize_t n = fsu_reply(iov, count);	/* a ring entry's request? */
		if (n != 0)
			return n;
	}
	ssize_t n = writev(fd, iov, count);
	if (init) {
		int e = errno;
		atomic_store(&D.init_unique, 0);
		if (n >= 0) {
			atomic_store(&D.passthrough, (add & KAPI_PASSTHROUGH) != 0);
			atomic_store(&D.uring, (add & KAPI_OVER_IO_URING) != 0);
			atomic_store(&D.dio_mmap, (add & KAPI_DIRECT_IO_ALLOW_MMAP) != 0);
			log_info("FUSE: %s; passthrough %s; max request %u KiB; reads through the daemon %s",
				 add & KAPI_OVER_IO_URING ? "requests over io_uring" :
				 D.kflags & KAPI_OVER_IO_URING ? "io_uring offered, not used" :
				 "requests over /dev/fuse (io_uring not offered: see enable_uring)",
				 add & KAPI_PASSTHROUGH ? "on" :
				 D.kflags & KAPI_PASSTHROUGH ? "off (not asked for, or no CAP_SYS_ADMIN)" :
				 "not offered by the kernel", D.max_pages * 4,
				 add & KAPI_DIRECT_IO_ALLOW_MMAP ? "bypass the page cache" :
				 D.fs->opt.read_direct ? "use the page cache (the kernel cannot map direct-I/O files)" :
				 "use the page cache (read_direct=off)");
		}
		/* The kernel took INIT: register the queues now, or let them go. */
		if (n >= 0 && (add & KAPI_OVER_IO_URING))
			fsu_start();
		else
			fsu_cancel();
		errno = e;
	}
	return n;
}

bool devio_dio_mmap(void)
{
	return atomic_load(&D.dio_mmap);
}

static ssize_t io_read(int fd, void *buf, size_t len, void *userdata)
{
	(void)userdata;
	return read(fd, buf, len);
}

static ssize_t io_splice_receive(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
				 unsigned int flags, void *userdata)
{
	(void)userdata;
	return splice(fdin, offin, fdout, offout, len, flags);
}

/* A reply libfuse assembled in a pipe (fuse_reply_data with file segments). */
static ssize_t io_splice_send(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
			      unsigned int flags, void *userdata)
{
	(void)userdata;
	ssize_t n = fsu_reply_pipe(fdin, len);	/* a ring entry's request? */
	if (n != 0)
		return n;
	return splice(fdin, offin, fdout, offout, len, flags);
}

int devio_install(struct ckptfs *fs, struct fuse_session *se)
{
	static const struct fuse_custom_io io = {
		.writev = io_writev,
		.read = io_read,
		.splice_receive = io_splice_receive,
		.splice_send = io_splice_send,
	};

	D.fs = fs;
	D.fd = fuse_session_fd(se);
	pthread_cond_init(&fs->pt_cond, NULL);
	return fuse_session_custom_io(se, &io, D.fd);
}

void devio_open_patch(uint32_t add, uint32_t clear, int32_t backing_id)
{
	open_patch.set = true;
	open_patch.add = add;
	open_patch.clear = clear;
	open_patch.backing_id = backing_id;
}

void devio_open_patch_clear(void)
{
	open_patch.set = false;
}

bool devio_passthrough(void)
{
	return atomic_load(&D.passthrough);
}

bool devio_uring(void)
{
	return atomic_load(&D.uring);
}

int devio_fd(void)
{
	return D.fd;
}

unsigned devio_max_pages(void)
{
	return D.max_pages;
}
