/*
 * ctl_main.c — ckptfs-ctl: act on ckptfs mounts and backends.
 *
 *   ckptfs-ctl drain MOUNT [--timeout S]   wait until everything written so
 *                                          far is durable on the backend
 *   ckptfs-ctl flush MOUNT PATH            persist one file now (in order)
 *   ckptfs-ctl retry MOUNT                 try blocked operations again now
 *   ckptfs-ctl skip MOUNT SEQ              drop a blocked operation and what
 *                                          depends on it (an administrator's act)
 *   ckptfs-ctl ack-lost MOUNT              acknowledge the files this node lost
 *                                          in an unclean stop (peers' markers)
 *   ckptfs-ctl verify PATH...              check backend files against the
 *                                          manifest (see verify.c)
 *   ckptfs-ctl hash [--format N] FILE...   print the digest the manifest
 *                                          records for each file (digest.h)
 *   ckptfs-ctl help
 *
 * Exit: 0 success; 1 not durable (timeout, backend error), a verify
 * failure or a file hash could not read; 2 usage errors.
 */
#include "fs/cli.h"
#include "backend/digest.h"
#include "backend/manifest.h"
#include "cache/json.h"
#include "cache/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int verify_main(int argc, char **argv);	/* verify.c */

static const char *prog = "ckptfs-ctl";

static void usage(FILE *f)
{
	fprintf(f,
"usage: ckptfs-ctl COMMAND [ARGS]\n"
"\n"
"  drain MOUNT [--timeout S]  wait until everything written to MOUNT so far is\n"
"                             durable on the backend; exit 1 on timeout or error\n"
"  flush MOUNT PATH           persist one file now; files closed before it are\n"
"                             persisted first, so the backend keeps their order\n"
"  retry MOUNT                try the operations the backend refused again now\n"
"                             (they are retried on their own, slowly)\n"
"  skip MOUNT SEQ             give up on blocked operation SEQ (see ckptfs-stat):\n"
"                             it, every later operation that depends on it, and\n"
"                             that user's later checkpoint markers are dropped and\n"
"                             recorded as skipped in the manifest; that user's\n"
"                             unlinks and rmdirs behind it, and until its next\n"
"                             marker, are dropped too: kept on the backend\n"
"  ack-lost MOUNT             acknowledge the files this node lost in an unclean\n"
"                             stop (\"LOST:\" in ckptfs-stat): until then peers hold\n"
"                             every checkpoint marker they seal, since it may name\n"
"                             a lost file; markers sealed after the acknowledgement\n"
"                             pass again, those sealed before stay held (only\n"
"                             marker_policy=release lets them go).  Run it once the\n"
"                             job has restarted from the marker the backend holds\n"
"  verify [-j N | --jobs N] [-q | --quiet] PATH...\n"
"                             recompute the digest of backend files and compare\n"
"                             with the manifest; PATH is a backend directory or\n"
"                             file (no daemon needed) or one in a ckptfs mount\n"
"  hash [--format N] [--] FILE...\n"
"                             print each file's digest as the manifest records it\n"
"                             (N=2, the default: block-run XXH3-128, holes not\n"
"                             read; N=1: XXH3-128 of the whole file, as format-1\n"
"                             manifests did); FILE - is standard input\n"
"  help                       this help\n");
}

/*
 * Talk to a control file: write `msg` (if any), then read the answer whole,
 * in a child given up after timeout_s (0: as long as it takes), so that a
 * daemon that does not answer (stopped, or every worker stuck in a hung
 * backend) cannot hold a drain past its --timeout, or an epilog forever.
 */
#define CTL_ANSWER_S 60.0	/* ctl commands answer at once (retry: within 20 s) */
#define DRAIN_GRACE_S 10.0	/* a drain's answer comes at its timeout: this much later is silence */

static char *ctl_exchange(const char *mnt, const char *name, const char *msg, double timeout_s)
{
	return cli_exchange_ctl(prog, mnt, name, msg, timeout_s);
}

/* Report a drain answer; 0 when everything is durable. */
static int drain_report(const char *mnt, const char *answer)
{
	struct json_obj o;
	int rc;

	if (!answer)
		return 1;
	if (json_parse(answer, strlen(answer), &o, NULL, 0) < 0) {
		fprintf(stderr, "%s: unexpected answer from %s: %s\n", prog, mnt, answer);
		return 1;
	}
	double open_files = json_num_or0(&o, "open_for_writing");
	if (open_files > 0)
		printf("%s: %.0f file%s open for writing, not included (their last closed "
		       "versions are)\n", mnt, open_files, open_files == 1 ? "" : "s");
	if (json_is_true(&o, "ok")) {
		printf("%s: durable up to operation %.0f (waited %.3f s)\n", mnt,
		       json_num_or0(&o, "seq"), json_num_or0(&o, "waited_s"));
		rc = 0;
	} else {
		fprintf(stderr, "%s: %s: not durable: %s (durable up to %.0f of %.0f)\n", prog, mnt,
			json_str(&o, "error") ? json_str(&o, "error") : "unknown error",
			json_num_or0(&o, "seq_durable"), json_num_or0(&o, "seq"));
		rc = 1;
	}
	json_free(&o);
	return rc;
}

static int cmd_drain(int argc, char **argv)
{
	char mnt[PATH_MAX], msg[64];
	const char *path = NULL;
	double timeout = -1;
	int r;

	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--timeout") || !strncmp(argv[i], "--timeout=", 10)) {
			const char *v = argv[i][9] == '=' ? argv[i] + 10 : (i + 1 < argc ? argv[++i] : "");
			/* What the daemon takes (ctl_parse.c): 0 to 1e9 seconds. */
			if (parse_seconds(v, 0, 1e9, &timeout) < 0) {
				fprintf(stderr, "%s: --timeout needs seconds (0 to 1000000000), not '%s'\n",
					prog, v);
				return CLI_USAGE;
			}
		} else if (argv[i][0] == '-') {
			fprintf(stderr, "%s: drain: unknown option '%s'\n", prog, argv[i]);
			return CLI_USAGE;
		} else if (!path) {
			path = argv[i];
		} else {
			fprintf(stderr, "%s: drain takes one MOUNT\n", prog);
			return CLI_USAGE;
		}
	}
	if (!path) {
		fprintf(stderr, "%s: drain needs a MOUNT\n", prog);
		return CLI_USAGE;
	}
	if ((r = cli_mount(prog, path, mnt, sizeof(mnt), NULL, 0)))
		return r;
	snprintf(msg, sizeof(msg), "timeout=%.3f\n", timeout);
	char *answer = ctl_exchange(mnt, "drain", timeout >= 0 ? msg : NULL,
				    timeout >= 0 ? timeout + DRAIN_GRACE_S : 0);
	r = drain_report(mnt, answer);
	free(answer);
	return r;
}

static int cmd_flush(int argc, char **argv)
{
	char mnt[PATH_MAX], real[PATH_MAX], msg[PATH_MAX + 16];
	struct json_obj o;
	int r;

	if (argc != 2 || !*argv[1]) {
		fprintf(stderr, "%s: flush needs MOUNT and PATH\n", prog);
		return CLI_USAGE;
	}
	if (strchr(argv[1], '\n')) {	/* one line per command to the control file */
		fprintf(stderr, "%s: flush: a PATH with a newline cannot be named\n", prog);
		return CLI_USAGE;
	}
	if ((r = cli_mount(prog, argv[0], mnt, sizeof(mnt), NULL, 0)))
		return r;
	const char *rel = argv[1];
	if (rel[0] == '/') {
		size_t ml = strlen(mnt);
		if (!realpath(rel, real) || strncmp(real, mnt, ml) != 0 || real[ml] != '/') {
			fprintf(stderr, "%s: '%s' is not a file inside %s\n", prog, rel, mnt);
			return CLI_USAGE;
		}
		rel = real + ml + 1;
	} else {
		/*
		 * Relative to the mount's root, as the daemon names files: "." and
		 * empty parts dropped; a ".." could only lead out of it.
		 */
		size_t k = 0;
		for (const char *c = rel; *c;) {
			size_t n = strcspn(c, "/");
			if (n == 2 && c[0] == '.' && c[1] == '.') {
				fprintf(stderr, "%s: '%s' is not a file inside %s\n", prog, rel, mnt);
				return CLI_USAGE;
			}
			if (n && !(n == 1 && c[0] == '.')) {
				if (k + n + 2 >= sizeof(real)) {
					fprintf(stderr, "%s: flush: PATH is too long\n", prog);
					return CLI_USAGE;
				}
				k += (size_t)snprintf(real + k, sizeof(real) - k, "%s%.*s", k ? "/" : "",
						      (int)n, c);
			}
			c += n + (c[n] == '/');
		}
		real[k] = '\0';
		if (!k) {
			fprintf(stderr, "%s: '%s' is not a file inside %s\n", prog, rel, mnt);
			return CLI_USAGE;
		}
		rel = real;
	}
	snprintf(msg, sizeof(msg), "flush %s\n", rel);
	char *answer = ctl_exchange(mnt, "ctl", msg, CTL_ANSWER_S);
	if (!answer)
		return 1;
	if (json_parse(answer, strlen(answer), &o, NULL, 0) < 0 || !json_is_true(&o, "ok")) {
		fprintf(stderr, "%s: flush %s: %s\n", prog, argv[1],
			json_str(&o, "error") ? json_str(&o, "error") : answer);
		json_free(&o);
		free(answer);
		return 1;
	}
	double ahead = json_num_or0(&o, "ahead");
	json_free(&o);
	free(answer);
	if (ahead > 0)
		printf("%s: %.0f earlier operations are published first, to keep their order\n",
		       argv[1], ahead);
	answer = ctl_exchange(mnt, "drain", NULL, 0);
	r = drain_report(mnt, answer);
	free(answer);
	return r;
}

static int cmd_hash(int argc, char **argv)
{
	enum digest_kind kind = DIGEST_RUNS;
	int nfiles = 0, rc = 0, first = argc;	/* argv[first..] are files, options or not */

	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--")) {
			first = i + 1;
			nfiles += argc - first;
			break;
		}
		if (!strcmp(argv[i], "--format") || !strncmp(argv[i], "--format=", 9)) {
			const char *v = argv[i][8] == '=' ? argv[i] + 9 : (i + 1 < argc ? argv[++i] : "");
			if (strcmp(v, "1") && strcmp(v, "2")) {
				fprintf(stderr, "%s: --format needs a manifest format, 1 or 2, not '%s'\n",
					prog, v);
				return CLI_USAGE;
			}
			kind = v[0] == '1' ? DIGEST_FLAT : DIGEST_RUNS;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			fprintf(stderr, "%s: hash: unknown option '%s'\n", prog, argv[i]);
			return CLI_USAGE;
		} else {
			nfiles++;
		}
	}
	if (!nfiles) {
		fprintf(stderr, "%s: hash needs at least one FILE\n", prog);
		return CLI_USAGE;
	}
	for (int i = 0; i < argc; i++) {
		const char *f = argv[i];
		XXH128_hash_t h;
		struct stat st;
		char hex[33];
		int fd, r;

		if (i < first && !strcmp(f, "--")) {
			first = i + 1;
			continue;
		}
		if (i < first && !strcmp(f, "--format")) {
			i++;
			continue;
		}
		if (i < first && !strncmp(f, "--format=", 9))
			continue;
		fd = strcmp(f, "-") ? open(f, O_RDONLY | O_CLOEXEC) : STDIN_FILENO;
		if (fd < 0 || fstat(fd, &st) < 0) {
			r = -errno;
		} else if (S_ISDIR(st.st_mode)) {
			r = -EISDIR;
		} else {
			r = digest_fd_kind(fd, kind, &h, NULL);
		}
		if (fd > STDIN_FILENO)
			close(fd);
		if (r < 0) {
			fprintf(stderr, "%s: hash: %s: %s\n", prog, f, strerror(-r));
			rc = 1;
			continue;
		}
		hash_hex(h, hex);
		printf("%s  %s\n", hex, f);
	}
	return rc;
}

/*
 * After a retry: watch the stats (no daemon thread waits for us) until the
 * first blocked operation went through or failed once more, up to 20 s, and
 * say which.  0 when nothing is blocked any more.
 */
static int retry_outcome(const char *mnt, double n, double seq, double attempts)
{
	printf("%s: retrying %.0f blocked operations now\n", mnt, n);
	if (n == 0)
		return 0;
	for (int i = 0; i < 200; i++) {
		char *text = cli_read_ctl(prog, mnt, "stats", CLI_READ_TIMEOUT_S);
		struct json_obj s;
		int done = -1;
		if (text && json_parse(text, strlen(text), &s, NULL, 0) == 0) {
			if (json_num_or0(&s, "blocked_ops") == 0) {
				printf("%s: nothing is blocked any more\n", mnt);
				done = 0;
			} else if (json_num_or0(&s, "blocked_seq") != seq ||
				   json_num_or0(&s, "blocked_attempts") > attempts) {
				fprintf(stderr, "%s: %s: still blocked at %s\n", prog, mnt,
					json_str(&s, "blocked") ? json_str(&s, "blocked") : "?");
				done = 1;
			}
			json_free(&s);
		}
		free(text);
		if (done >= 0)
			return done;
		usleep(100 * 1000);
	}
	fprintf(stderr, "%s: %s: the retry has not finished after 20 s; see ckptfs-stat\n", prog, mnt);
	return 1;
}

/* retry MOUNT | skip MOUNT SEQ | ack-lost MOUNT: one command to the control file. */
static int cmd_admin(const char *cmd, int argc, char **argv)
{
	char mnt[PATH_MAX], msg[64];
	struct json_obj o;
	int r;

	if (argc != (!strcmp(cmd, "skip") ? 2 : 1)) {
		fprintf(stderr, "%s: usage: ckptfs-ctl %s\n", prog,
			!strcmp(cmd, "skip") ? "skip MOUNT SEQ" : !strcmp(cmd, "retry") ? "retry MOUNT"
			: "ack-lost MOUNT");
		return CLI_USAGE;
	}
	unsigned long long seq;
	if (argc == 2 && parse_whole(argv[1], 1, UINT64_MAX, &seq) < 0) {
		fprintf(stderr, "%s: skip needs the sequence number of a blocked operation "
			"(blocked_seq in ckptfs-stat --json), not '%s'\n", prog, argv[1]);
		return CLI_USAGE;
	}
	if ((r = cli_mount(prog, argv[0], mnt, sizeof(mnt), NULL, 0)))
		return r;
	snprintf(msg, sizeof(msg), "%s%s%s\n", cmd, argc == 2 ? " " : "", argc == 2 ? argv[1] : "");
	char *answer = ctl_exchange(mnt, "ctl", msg, CTL_ANSWER_S);
	if (!answer)
		return 1;
	if (json_parse(answer, strlen(answer), &o, NULL, 0) < 0) {
		fprintf(stderr, "%s: unexpected answer from %s: %s\n", prog, mnt, answer);
		free(answer);
		return 1;
	}
	r = json_is_true(&o, "ok") ? 0 : 1;
	if (r)
		fprintf(stderr, "%s: %s: %s\n", prog, cmd,
			json_str(&o, "error") ? json_str(&o, "error") : answer);
	else if (!strcmp(cmd, "retry"))
		r = retry_outcome(mnt, json_num_or0(&o, "retrying"), json_num_or0(&o, "blocked_seq"),
				  json_num_or0(&o, "blocked_attempts"));
	else if (!strcmp(cmd, "ack-lost") && json_num_or0(&o, "lost_files") == 0)
		printf("%s: node %s: the window of unconfirmed seals of mount %s is acknowledged; "
		       "peers' markers sealed from now on pass this node's watermarks again, those "
		       "sealed before stay held\n", mnt,
		       json_str(&o, "node") ? json_str(&o, "node") : "?",
		       json_str(&o, "lost_mount") ? json_str(&o, "lost_mount") : "?");
	else if (!strcmp(cmd, "ack-lost"))
		printf("%s: node %s: the loss of %.0f files in the unclean stop of mount %s is "
		       "acknowledged; peers' markers sealed from now on pass this node's watermarks "
		       "again, those sealed before stay held\n", mnt,
		       json_str(&o, "node") ? json_str(&o, "node") : "?",
		       json_num_or0(&o, "lost_files"),
		       json_str(&o, "lost_mount") ? json_str(&o, "lost_mount") : "?");
	else
		printf("%s", json_str(&o, "report") ? json_str(&o, "report") : "");
	json_free(&o);
	free(answer);
	return r;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return CLI_USAGE;
	}
	const char *cmd = argv[1];
	if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(cmd, "drain"))
		return cmd_drain(argc - 2, argv + 2);
	if (!strcmp(cmd, "flush"))
		return cmd_flush(argc - 2, argv + 2);
	if (!strcmp(cmd, "retry") || !strcmp(cmd, "skip") || !strcmp(cmd, "ack-lost"))
		return cmd_admin(cmd, argc - 2, argv + 2);
	if (!strcmp(cmd, "verify"))
		return verify_main(argc - 2, argv + 2);
	if (!strcmp(cmd, "hash"))
		return cmd_hash(argc - 2, argv + 2);
	fprintf(stderr, "%s: unknown command '%s' (try: ckptfs-ctl help)\n", prog, cmd);
	return CLI_USAGE;
}
