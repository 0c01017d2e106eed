/*
 * ledger.h — the seal ledger: what a mount sealed, kept where it outlives
 * the daemon's process but costs close() no system call.
 *
 * A close returns once its version is sealed in memory; the publisher notes
 * it in the backend's log (an intent record) a moment later.  A daemon
 * killed in between loses the version without a trace in the log, so
 * recovery could not count it as lost, and a peer's marker naming it could
 * be released (nodes.h N5).  The ledger closes that gap for a daemon that
 * dies while its host keeps running: one page of a file in the rescue
 * directory's .seals (local, private: rescue.c R1), mapped shared, into which every
 * submitted operation stores its sequence number.  The kernel keeps the page
 * when the process dies; the next mount of the node reads it, and whatever
 * the previous mount sealed past the last sequence number its log records
 * was lost unrecorded.  After a reboot the page may be older than the log
 * (it is never synced), so it is read only on the boot that wrote it.
 */
#ifndef CKPTFS_LEDGER_H
#define CKPTFS_LEDGER_H

#include <stdbool.h>
#include <stdint.h>

struct ledger_page;

struct ledger {
	struct ledger_page *page;	/* NULL: no ledger (said once in the log) */
	int dirfd;		/* .seals */
	int parentfd;		/* the rescue directory */
	char name[40];
};

/* Make and map this mount's ledger in dir; a failure leaves lg without one (logged). */
void ledger_open(struct ledger *lg, const char *dir, const char *mount_id, const char *boot_id);
/* Operation seq is sealed: the ledger keeps the highest (calls under one lock). */
void ledger_seal(struct ledger *lg, uint64_t seq);
/* Unmap; clean: the log says everything, so the file goes too. */
void ledger_close(struct ledger *lg, bool clean);
/*
 * The last sequence number mount `prev` sealed, from its ledger in dir,
 * written on this boot: 0 with *seq, or -ENOENT (none), -ESTALE (another
 * boot's or another mount's), -errno.  The file is removed either way.
 */
int ledger_take(const char *dir, const char *prev, const char *boot_id, uint64_t *seq);

#endif
