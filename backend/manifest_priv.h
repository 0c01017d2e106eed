/*
 * manifest_priv.h — what the manifest's files share, and nothing else
 * includes: manifest.c (framing, the metadata directories and files, open
 * and close), recover.c and rprefix.c (recovery at mount) and compact.c
 * (rewriting the log).  See manifest.h for the whole picture.
 */
#ifndef CKPTFS_MANIFEST_PRIV_H
#define CKPTFS_MANIFEST_PRIV_H

#include "backend/manifest.h"
#include "cache/strmap.h"

#define MANIFEST_LOG "manifest.log"
#define MANIFEST_LOG_TMP "manifest.log.tmp"
#define MANIFEST_STATE "state.json"
#define MANIFEST_STATE_TMP "state.json.tmp"
/* Bytes a record adds to its payload: "C1 <8> <16> " and the newline. */
#define REC_FRAME_LEN 30

/* Replace b's contents with payload framed as one record line. */
void manifest_frame(struct strbuf *b, const char *payload, size_t len);
/* Write len bytes at off of an O_APPEND file, retrying EINTR; *done: how many were. */
int manifest_write_all(int fd, const char *buf, size_t len, uint64_t off, size_t *done);
/* The log's first `size` bytes are durable: what is kept of them in memory goes; m->lock held. */
void manifest_synced_to_locked(struct manifest *m, uint64_t size);
/*
 * Replace manifest.log by what fill(arg, fd, &size, &records) writes to a
 * new file: manifest.log.tmp, fdatasync'd, renamed over the log, the
 * directory fsync'd (if that fails, m->resync: written anew at the next
 * sync).  The new file is m->fd from then on, wholly synced; m->size and
 * m->records are set.  A failure before the rename leaves the log as it
 * was.  m->lock held.
 */
int manifest_replace_locked(struct manifest *m,
			    int (*fill)(void *arg, int fd, uint64_t *size, uint64_t *records),
			    void *arg);
/*
 * Check an open metadata file (fd) is ours: a regular file owned by the
 * daemon's euid, one link, no group/other write.  0, or -MANIFEST_EREFUSED
 * with a line naming `shown` printed.
 */
int manifest_file_check(int fd, const char *shown);

/* ---- recovery (recover.c, rprefix.c) ---- */
/* A record, as recovery needs it. */
struct rrec {
	char t[16];
	uint64_t seq, try;	/* try: which attempt (a "void" names one) */
	char *path, *to, *xxh3;
	char *target;		/* a symlink's */
	uint64_t size;
	bool has_mode;		/* mkdir, mknod: the mode recorded */
	uint64_t mode;
	bool exchange;
	bool has_owner;		/* mkdir, symlink, mknod of a root daemon: whose it is to be */
	uint64_t owner, group;
	uint64_t format;	/* its mount's manifest format */
};

/* What a path holds after the records replayed so far: its newest version. */
struct hnode {
	struct strmap_node n;
	struct hnode *next;	/* in a list hashes_take returns */
	char *path;
	char xxh3[33];
	uint64_t size;
	uint64_t format;	/* of the mount that wrote it: which digest (0: not known) */
};


/*
 * Which prefix of the previous mount's unsettled operations the backend
 * shows (rprefix.c).  `settled`: path -> struct hnode, what each path held
 * before the first of them; zeroed `paths` is empty.
 */
struct rprefix {
	const struct strmap *settled;
	struct strmap paths;	/* path -> its history */
	/*
	 * Names linked to each other by the operations noted (a "link" of
	 * one to another): one file, so a version written at one name is
	 * what every other name shows (the daemon relinks them).
	 */
	struct rlgroup {
		char **names;
		size_t n;
	} *groups;
	size_t ngroups;
};
/* Note ops[p] (in log order): what each path it touches holds from prefix p + 1 on. */
void rprefix_note(struct rprefix *x, const struct rrec *r, size_t p);
/*
 * How many of the n operations noted were applied: the prefix the backend
 * shows, judged by every touched path at once (rprefix.c's comment);
 * `mount` names them in warnings.
 */
size_t rprefix_judge(struct rprefix *x, int root_fd, size_t n, const char *mount);
void rprefix_free(struct rprefix *x);


struct rscan;
struct rscan *rscan_new(void);
void rscan_free(struct rscan *s);
/* manifest_cb: feed every record of the log in order. */
int rscan_cb(void *arg, const char *payload, size_t len, uint64_t off);
/* After the scan: was there a previous mount (its id into id), did it end cleanly? */
bool rscan_previous(const struct rscan *s, bool *clean, char *id, size_t len);
/* Records and bytes the last compaction left (its "compacted" record), or 0. */
void rscan_compacted(const struct rscan *s, uint64_t *records, uint64_t *bytes);
/* Recover the previous mount (unclean): evidence, "recovered" record, orphans; 0 or -errno. */
int manifest_recover(struct manifest *m, int root_fd, struct rscan *s,
		      struct recovery_report *rep);

#endif
