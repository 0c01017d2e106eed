/*
 * blockw.h — a writer blocked on a full cache, for the tests of bounded
 * waits (fullcache, sigterm, interrupt).
 *
 * The mount gets a cache of 8 chunks of 1 MiB (BW_OPTS).  bw_fill() writes
 * and closes three 2 MiB files: their versions hold six chunks that a
 * backend which takes nothing can neither publish nor let go.  A writer
 * (bw_spawn, a child process) then writes BW_BLOCKED_AT bytes of a new file
 * into the last two chunks and blocks on the next write, with nothing to
 * evict and nothing the spiller can write.  It reports once, through a pipe,
 * how its write ended (errno, 0 if every write succeeded) and how many bytes
 * it had written, then closes the file and exits.
 */
#ifndef CKPTFS_TESTS_BLOCKW_H
#define CKPTFS_TESTS_BLOCKW_H

#include "tests/integrity/integ.h"

#define BW_OPTS "cache_size=8M,chunk_size=1M"
#define BW_NFILL 3
#define BW_FILL_SIZE (2 * MiB)
#define BW_BLOCKED_AT (2 * MiB)		/* what the writer gets in before it blocks */
#define BW_WRITER_SEED 77

/*
 * Write and close the fill files "fill0"..: close must succeed, or fail with
 * may_fail (the failing backend's errno: a close reports the error of an
 * earlier operation of the same user; 0: none may fail).
 */
void bw_fill(struct tmount *m, int may_fail);
/* Fail unless every fill file is under root with its contents. */
void bw_check_fill(const char *root);
/* Open the gate (the backend recovers), wait until all is durable, check the fill files. */
void bw_recover(struct tmount *m, const char *gate);

struct bw_child {
	pid_t pid;
	int rfd;		/* the report pipe */
	uint64_t t_start;	/* mono_ms() when it was spawned */
	struct tmount *m;	/* a writer's mount */
	uint64_t waits0;	/* its backpressure_waits when the writer was spawned */
};
/*
 * Fork a writer of `total` bytes of pattern BW_WRITER_SEED to m's file name,
 * in 1 MiB writes.  restart_sig: a signal it catches with an empty SA_RESTART
 * handler (0: none).
 */
void bw_spawn(struct bw_child *c, struct tmount *m, const char *name, uint64_t total,
	      int restart_sig);
/* Its report within timeout_ms: true, with *err (0: all written) and *written. */
bool bw_report(struct bw_child *c, unsigned timeout_ms, int *err, uint64_t *written);
/*
 * Wait (30 s at most) until the child waits where it should — a writer for
 * cache space (the mount's backpressure_waits went up since its spawn), a
 * reader in a FUSE request — then fail unless it is still there ms later
 * (no report).
 */
void bw_assert_blocked(struct bw_child *c, unsigned ms);
/*
 * Fork a reader of path (up to 4 KiB, one read): it reports (bw_report) the
 * errno of its open or read (0 if it succeeded) and the bytes read;
 * bw_text() then returns what it read.
 */
void bw_spawn_reader(struct bw_child *c, const char *path);
/* A reader of MOUNT/.ckptfs/drain. */
void bw_spawn_drain(struct bw_child *c, struct tmount *m);
/* After bw_report of a reader: the text it read (static buffer). */
const char *bw_text(struct bw_child *c);
/* Reap it within timeout_ms: true, with its wait status in *status. */
bool bw_reap(struct bw_child *c, unsigned timeout_ms, int *status);

/* Wait for the daemon (signalled, not unmounted) to exit: its status, or -1 after timeout_ms. */
int bw_wait_daemon(struct tmount *m, unsigned timeout_ms);

#endif
