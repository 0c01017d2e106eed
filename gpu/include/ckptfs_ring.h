/*
 * ckptfs_ring.h — the wire protocol of a GPU capture session: the one
 * header both the daemon (fs/session.c) and the client library (gpu/)
 * include.  Nothing here is a pointer: everything that crosses the process
 * boundary is an offset, an index or a token.
 *
 * A session, in order:
 *
 *  1. The client opens any file or directory of the mount and asks
 *     CKPTFS_IOC_INFO for the session endpoint (a Unix socket address).
 *     ENOTTY: not ckptfs (or one too old); EOPNOTSUPP: mounted sessions=off.
 *  2. It connects and sends a struct ckptfs_hello.  The daemon reads the
 *     peer's credentials (SO_PEERCRED) as it accepts the connection; if
 *     that user (or all users) already has too many connections waiting
 *     in the handshake, it answers at once with a welcome saying -EAGAIN
 *     and closes it.  It reserves `nchunks` chunks of its cache for the
 *     session (at most a quarter of the cache for one user's sessions,
 *     half for all; -ENOSPC beyond), and answers with a struct ckptfs_welcome and,
 *     by SCM_RIGHTS, four descriptors in this order: the arena (a sealed
 *     memfd of nchunks * chunk_size bytes, pre-faulted, on the GPU's NUMA
 *     node where the machine says which), the ring (a sealed memfd holding
 *     struct ckptfs_ring_hdr, the submission entries and the free bitmap),
 *     the submission doorbell (eventfd, client -> daemon) and the progress
 *     doorbell (eventfd, daemon -> client).  The socket stays open: its end
 *     is the session's end.  A forked child must not hold it (libckptfs
 *     closes it, and the doorbells, in the child of a fork), or the session
 *     outlives the process that opened it.
 *  3. The client binds each file it captures into: CKPTFS_IOC_BIND on the
 *     open file, with the session id and key, returns a file token.  The
 *     daemon checks the caller's uid against the session's peer uid, that
 *     the session's user owns the file (or is root: EPERM otherwise; a
 *     bound file may be dropped, and write access is no right to that),
 *     that the file is open for writing (EBADF), that it was created in
 *     this mount and never closed since (its first version is still to
 *     come: EEXIST), and that no session has it bound already (EBUSY).
 *  4. It copies device memory into arena chunks it took from the free
 *     bitmap, at the offset within the chunk that the bytes have within
 *     their file chunk (file offset % chunk_size), so the daemon can make
 *     the arena chunk that file chunk without moving a byte.  When a
 *     chunk's copies have completed it posts one CKPTFS_SQE_DATA entry per
 *     contiguous range it holds, the last with CKPTFS_SQE_ADOPT, and rings
 *     the submission doorbell.  The daemon then adopts the chunk as the
 *     file's chunk: bytes of the chunk outside the posted ranges are taken
 *     from what the file held there (written bytes or zeros).  Only ranges
 *     whose copy completed are ever posted.
 *  5. When the daemon no longer needs a chunk (its version is published, the
 *     file is deleted, or it was moved out of the arena to make room) it
 *     sets the chunk's bit in the free bitmap and, if the client said it is
 *     waiting, rings the progress doorbell.
 *  6. CKPTFS_IOC_UNBIND ends a binding after the daemon has consumed every
 *     entry posted before it, and returns the first error any of the file's
 *     entries met (such a file is dropped, like one unbound with
 *     CKPTFS_UNBIND_DROP).  Only then does the client close the file: while a file
 *     is bound, no close, truncate or drain seals it and fsync fails with
 *     EBUSY (it is never reported durable), so a file whose captures did
 *     not all land is never published.  A session that ends with files
 *     still bound (its process died, or closed the socket early) abandons
 *     them: files never sealed are removed from the mount, and nothing of
 *     them reaches the backend.
 *
 * Shared memory is writable by both sides.  The daemon trusts none of it: it
 * keeps its own copy of the consumer index and of each chunk's state, copies
 * each entry before it checks it, and ends a session whose producer index
 * runs ahead of the ring.  The arena memfd is sealed against shrinking, so
 * the daemon never faults on it.  A client can still scribble over arena
 * bytes it handed over — which only damages the files bound to its own
 * session (it could write them anyway); each session has its own arena and
 * ring, shared with no one else.
 */
#ifndef CKPTFS_RING_H
#define CKPTFS_RING_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <stdatomic.h>
#define CKPTFS_ATOMIC(t) _Atomic t

#define CKPTFS_PROTO_VERSION 1
#define CKPTFS_HELLO_MAGIC   0x31656b6174706b63ull	/* "ckptake1" */
#define CKPTFS_RING_MAGIC    0x31676e6972706b63ull	/* "ckpring1" */

/* ---- ioctls on a file (or directory) of the mount -------------------- */

#define CKPTFS_IOC_TYPE 0xCE
#define CKPTFS_ADDR_MAX 108	/* sizeof(sun_path); abstract names start with '@' */

struct ckptfs_ioc_info {
	uint32_t version;	/* CKPTFS_PROTO_VERSION */
	uint32_t chunk_size;
	char addr[CKPTFS_ADDR_MAX];	/* "@name" (abstract) or a path */
};

struct ckptfs_ioc_bind {
	uint64_t session;	/* in: ckptfs_welcome.session */
	uint64_t key[2];	/* in: ckptfs_welcome.key */
	uint64_t limit;		/* in: bytes the file will have (captures beyond fail); 0 = no limit */
	uint32_t token;		/* out */
	uint32_t chunk_size;	/* out */
};

struct ckptfs_ioc_unbind {
	uint64_t session;
	uint64_t key[2];
	uint32_t token;		/* in */
	uint32_t flags;		/* in: CKPTFS_UNBIND_DROP */
	int32_t error;		/* out: 0, or the first -errno an entry of this file met */
	uint32_t pad;
	uint64_t adopted;	/* out: captured bytes adopted into the file */
};
/*
 * Drop the file instead (a capture failed on the client's side).  A file
 * whose entries met an error is dropped at unbind in any case: a file
 * missing captured bytes is never published.  Dropping a file that was
 * never sealed removes its names from the mount.
 */
#define CKPTFS_UNBIND_DROP 0x1
/*
 * Only consume what was posted and report the file's error: the binding
 * stays.  Bytes written after it land in the adopted chunks (patches of
 * headers inside captured chunks must come after the captures).
 */
#define CKPTFS_UNBIND_FENCE 0x2

#define CKPTFS_IOC_INFO   _IOR(CKPTFS_IOC_TYPE, 1, struct ckptfs_ioc_info)
#define CKPTFS_IOC_BIND   _IOWR(CKPTFS_IOC_TYPE, 2, struct ckptfs_ioc_bind)
#define CKPTFS_IOC_UNBIND _IOWR(CKPTFS_IOC_TYPE, 3, struct ckptfs_ioc_unbind)

/* ---- the socket handshake -------------------------------------------- */

/*
 * The sockaddr of an endpoint address as CKPTFS_IOC_INFO gives it ("@name":
 * abstract; else a path): its length, or 0 if the address does not fit.
 */
static inline socklen_t ckptfs_sockaddr(const char *addr, struct sockaddr_un *sa)
{
	size_t len = strlen(addr);

	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (len == 0 || len >= sizeof(sa->sun_path))
		return 0;
	memcpy(sa->sun_path, addr, len);
	if (addr[0] == '@')
		sa->sun_path[0] = '\0';
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
}

struct ckptfs_hello {
	uint64_t magic;		/* CKPTFS_HELLO_MAGIC */
	uint32_t version;	/* CKPTFS_PROTO_VERSION */
	int32_t numa_node;	/* the GPU's NUMA node, -1 if unknown */
	uint64_t arena_bytes;	/* wanted; the daemon may give less */
	char pci_bus_id[32];	/* the GPU's, e.g. "0000:3b:00.0" (numa_node wins if >= 0) */
};

struct ckptfs_welcome {
	uint64_t magic;		/* CKPTFS_HELLO_MAGIC */
	int32_t error;		/* 0, or -errno: then no descriptors follow */
	uint32_t version;
	uint64_t session;
	uint64_t key[2];	/* proves the binder holds the session */
	uint32_t chunk_size;
	uint32_t nchunks;	/* arena = nchunks * chunk_size bytes */
	uint64_t ring_bytes;	/* size of the ring memfd */
	int32_t numa_node;	/* where the arena was placed, -1 if not bound */
	uint32_t flags;		/* CKPTFS_WELCOME_* */
	char message[128];	/* why, when error != 0 */
};
#define CKPTFS_WELCOME_HUGEPAGES 0x1	/* the arena asked for transparent huge pages */

/* ---- the shared ring --------------------------------------------------- */

enum ckptfs_sqe_op { CKPTFS_SQE_DATA = 1 };
#define CKPTFS_SQE_ADOPT 0x1	/* flags: the last range of this chunk: adopt it */

struct ckptfs_sqe {
	uint16_t op;		/* enum ckptfs_sqe_op */
	uint16_t flags;
	uint32_t token;		/* the file (CKPTFS_IOC_BIND) */
	uint32_t chunk;		/* arena chunk: bytes [chunk * chunk_size, +chunk_size) */
	uint32_t lo, hi;	/* the range within the chunk, = within file chunk `index` */
	uint32_t pad;
	uint64_t index;		/* file chunk: file offset = index * chunk_size + lo */
	uint64_t t_ns;		/* CLOCK_MONOTONIC when the copy completed (for latency) */
};

struct ckptfs_ring_hdr {
	uint64_t magic;		/* CKPTFS_RING_MAGIC */
	uint32_t version;
	uint32_t sq_entries;	/* a power of two */
	uint32_t sq_off;	/* byte offset of struct ckptfs_sqe[sq_entries] */
	uint32_t bitmap_off;	/* byte offset of uint64_t free[(nchunks + 63) / 64] */
	uint32_t nchunks;
	uint32_t chunk_size;

	/* written by the client */
	_Alignas(64) CKPTFS_ATOMIC(uint32_t) sq_tail;
	CKPTFS_ATOMIC(uint32_t) client_waiting;	/* blocked for a free chunk or ring space */

	/* written by the daemon (statistics are for the client's own eyes) */
	_Alignas(64) CKPTFS_ATOMIC(uint32_t) sq_head;
	CKPTFS_ATOMIC(int32_t) dead;		/* the daemon ended the session: -errno */
	CKPTFS_ATOMIC(uint64_t) entries;	/* entries consumed */
	CKPTFS_ATOMIC(uint64_t) adopted_chunks;
	CKPTFS_ATOMIC(uint64_t) adopted_bytes;	/* captured bytes that became file bytes */
	CKPTFS_ATOMIC(uint64_t) merged_bytes;	/* bytes the daemon copied into adopted chunks */
	CKPTFS_ATOMIC(uint64_t) moved_chunks;	/* moved out of the arena to free it */
	CKPTFS_ATOMIC(uint64_t) rejected;	/* entries refused */
	CKPTFS_ATOMIC(uint64_t) lat_ns_sum;	/* copy completion -> adoption, summed */
	CKPTFS_ATOMIC(uint64_t) lat_ns_max;
	CKPTFS_ATOMIC(uint64_t) full_waits;	/* times the client waited for the arena */
	CKPTFS_ATOMIC(uint64_t) full_wait_ns;
};

#endif
