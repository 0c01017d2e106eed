/*
 * fuse_kapi.h — the parts of the kernel's FUSE protocol (include/uapi/
 * linux/fuse.h, 7.40 and later) that Debian's headers (7.38) and libfuse
 * 3.14 do not have: FUSE over io_uring and passthrough.  Values and layouts
 * are the kernel's ABI and must match it exactly.  Used by devio.c, uring.c
 * and passthrough.c only.
 */
#ifndef CKPTFS_FUSE_KAPI_H
#define CKPTFS_FUSE_KAPI_H

#include <linux/fuse.h>
#include <stdint.h>
#include <sys/ioctl.h>

/* INIT flags (64 bits: flags | flags2 << 32 when FUSE_INIT_EXT is set). */
#define KAPI_INIT_EXT		(1u << 30)
#define KAPI_DIRECT_IO_ALLOW_MMAP (1ull << 36)
#define KAPI_PASSTHROUGH	(1ull << 37)
#define KAPI_OVER_IO_URING	(1ull << 41)

/* fuse_init_in as of 7.36: flags2 follows flags. */
struct kapi_init_in {
	uint32_t major, minor, max_readahead, flags;
	uint32_t flags2;
	uint32_t unused[11];
};

/* fuse_init_out as of 7.40 (64 bytes): max_stack_depth took unused[0]. */
struct kapi_init_out {
	uint32_t major, minor, max_readahead, flags;
	uint16_t max_background, congestion_threshold;
	uint32_t max_write, time_gran;
	uint16_t max_pages, map_alignment;
	uint32_t flags2;
	uint32_t max_stack_depth;
	uint16_t request_timeout;
	uint16_t unused16;
	uint32_t unused[5];
};

/* fuse_open_out as of 7.40: backing_id took the padding. */
struct kapi_open_out {
	uint64_t fh;
	uint32_t open_flags;
	int32_t backing_id;
};
#define KAPI_FOPEN_DIRECT_IO	(1u << 0)
#define KAPI_FOPEN_KEEP_CACHE	(1u << 1)
#define KAPI_FOPEN_NOFLUSH	(1u << 5)
#define KAPI_FOPEN_PASSTHROUGH	(1u << 7)

/* Passthrough: register a backing file with the connection. */
struct kapi_backing_map {
	int32_t fd;
	uint32_t flags;
	uint64_t padding;
};
#define KAPI_DEV_IOC_BACKING_OPEN	_IOW(229, 1, struct kapi_backing_map)
#define KAPI_DEV_IOC_BACKING_CLOSE	_IOW(229, 2, uint32_t)

/* FUSE over io_uring (7.42). */
#define KAPI_URING_IN_OUT_HEADER_SZ 128
#define KAPI_URING_OP_IN_OUT_SZ 128

struct kapi_uring_ent_in_out {
	uint64_t flags;
	uint64_t commit_id;	/* the request's unique, echoed at commit */
	uint32_t payload_sz;	/* bytes valid in the payload, either way */
	uint32_t padding;
	uint64_t reserved;
};

/* iov[0] of a registered entry (288 bytes). */
struct kapi_uring_req_header {
	char in_out[KAPI_URING_IN_OUT_HEADER_SZ];	/* fuse_in_header / fuse_out_header */
	char op_in[KAPI_URING_OP_IN_OUT_SZ];		/* the opcode's fixed argument */
	struct kapi_uring_ent_in_out ring_ent_in_out;
};

enum kapi_uring_cmd {
	KAPI_URING_CMD_REGISTER = 1,
	KAPI_URING_CMD_COMMIT_AND_FETCH = 2,
};

/* In the 80-byte command area of a 128-byte SQE. */
struct kapi_uring_cmd_req {
	uint64_t flags;
	uint64_t commit_id;
	uint16_t qid;
	uint8_t padding[6];
};

#endif
