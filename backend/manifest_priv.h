/*
 * manifest_priv.h — what the manifest's three files share, and nothing
 * else includes: manifest.c (framing, the metadata directories and files,
 * open and close), recover.c (recovery at mount) and compact.c (rewriting
 * the log).  See manifest.h for the whole picture.
 */
#ifndef CKPTFS_MANIFEST_PRIV_H
#define CKPTFS_MANIFEST_PRIV_H

#include "backend/manifest.h"

#define MANIFEST_LOG "manifest.log"
#define MANIFEST_LOG_TMP "manifest.log.tmp"
#define MANIFEST_STATE "state.json"
#define MANIFEST_STATE_TMP "state.json.tmp"
/* Bytes a record adds to its payload: "C1 <8> <16> " and the newline. */
#define REC_FRAME_LEN 30

/* Replace b's contents with payload framed as one record line. */
void manifest_frame(struct strbuf *b, const char *payload, size_t len);
/*
 * Check an open metadata file (fd) is ours: a regular file owned by the
 * daemon's euid, one link, no group/other write.  0, or -MANIFEST_EREFUSED
 * with a line naming `shown` printed.
 */
int manifest_file_check(int fd, const char *shown);

/* ---- recovery (recover.c) ---- */
struct rscan;
struct rscan *rscan_new(void);
void rscan_free(struct rscan *s);
/* manifest_cb: feed every record of the log in order. */
int rscan_cb(void *arg, const char *payload, size_t len, uint64_t off);
/* After the scan: was there a previous mount, did it end cleanly? */
bool rscan_previous(const struct rscan *s, bool *clean);
/* Records and bytes the last compaction left (its "compacted" record), or 0. */
void rscan_compacted(const struct rscan *s, uint64_t *records, uint64_t *bytes);
/* Recover the previous mount (unclean): evidence, "recovered" record, orphans; 0 or -errno. */
int manifest_recover(struct manifest *m, int root_fd, struct rscan *s,
		      struct recovery_report *rep);

#endif
