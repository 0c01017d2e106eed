/*
 * cli.h — what ckptfs-stat and ckptfs-ctl share: finding ckptfs mounts,
 * reading their control files, and writing names on one line.  The flat
 * JSON the daemon writes is read with cache/json.h.
 * The CLIs use only the public interface (MOUNT/.ckptfs/ and the backend).
 */
#ifndef CKPTFS_CLI_H
#define CKPTFS_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define CLI_USAGE 2

/*
 * Write a path (or any name) for a line-oriented output: printable UTF-8 as
 * it is; a backslash as \\; newline, tab and carriage return as \n, \t,
 * \r; any other control byte, DEL, and every byte that is not part of
 * well-formed UTF-8 as \xNN.  So one name stays on one line and its bytes
 * can be recovered (documented in ckptfs-ctl(1)).
 */
void cli_put_path(FILE *f, const char *s);

/*
 * Resolve path to the ckptfs mount it names exactly.  On success fills
 * mnt (realpath) and backend (the mount's source) and returns 0; otherwise
 * prints "<prog>: '<path>' is not a ckptfs mount" and returns CLI_USAGE.
 */
int cli_mount(const char *prog, const char *path, char *mnt, size_t mlen, char *backend,
	      size_t blen);
/* Every ckptfs mount on the machine: count, mount points into *out (free each). */
int cli_all_mounts(char ***out);
/*
 * Read MOUNT/.ckptfs/<name> whole; NULL with a message on failure.  The
 * read runs in a child process: a mount whose daemon does not answer (it
 * is stopped, or hung) is given up after timeout_s seconds without a byte
 * (the child is killed: a fatal signal ends a FUSE wait), with a message
 * naming the mount; 0 waits as long as the daemon is alive: every
 * CLI_LIVE_CHECK_S without an answer, its stats are read (at most
 * CLI_LIVE_ANSWER_S), and a daemon that answers neither is given up.
 */
#define CLI_LIVE_CHECK_S 10
#define CLI_LIVE_ANSWER_S 30.0	/* stats wait for the namespace lock, held briefly but not only */
#define CLI_READ_TIMEOUT_S 10.0
char *cli_read_ctl(const char *prog, const char *mnt, const char *name, double timeout_s);
/* The same, writing msg to the control file first (its answer is then read). */
char *cli_exchange_ctl(const char *prog, const char *mnt, const char *name, const char *msg,
		       double timeout_s);
/*
 * A flag a signal handler sets: once it is set, an exchange waiting for a
 * daemon gives up at once (NULL, "interrupted"), as a timeout would.
 */
void cli_cancel_on(volatile sig_atomic_t *flag);

#endif
