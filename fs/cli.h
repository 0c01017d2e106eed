/*
 * cli.h — what ckptfs-stat and ckptfs-ctl share: finding ckptfs mounts,
 * reading their control files, and reading the flat JSON the daemon writes.
 * The CLIs use only the public interface (MOUNT/.ckptfs/ and the backend).
 */
#ifndef CKPTFS_CLI_H
#define CKPTFS_CLI_H

#include <stdbool.h>
#include <stddef.h>

#define CLI_USAGE 2

/* A flat JSON object: keys and values as text (strings unescaped). */
struct jobj {
	int n;
	char **keys;
	char **vals;
	bool *is_str;
};
/* Parse one flat object; false if it is not one. */
bool jobj_parse(const char *text, struct jobj *o);
void jobj_free(struct jobj *o);
const char *jobj_get(const struct jobj *o, const char *key);
double jobj_num(const struct jobj *o, const char *key);

/*
 * Resolve path to the ckptfs mount it names exactly.  On success fills
 * mnt (realpath) and backend (the mount's source) and returns 0; otherwise
 * prints "<prog>: '<path>' is not a ckptfs mount" and returns CLI_USAGE.
 */
int cli_mount(const char *prog, const char *path, char *mnt, size_t mlen, char *backend,
	      size_t blen);
/* Every ckptfs mount on the machine: count, mount points into *out (free each). */
int cli_all_mounts(char ***out);
/* Read MOUNT/.ckptfs/<name> whole; NULL with a message on failure. */
char *cli_read_ctl(const char *prog, const char *mnt, const char *name);

#endif
