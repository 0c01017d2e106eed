/*
 * stat_main.c — ckptfs-stat: what a ckptfs cache holds and how far
 * persistence lags, for people and for machines.
 *
 *   ckptfs-stat [--json | --prometheus] [--files] [--watch N] [MOUNT...]
 *
 * Reads MOUNT/.ckptfs/stats (and files) and renders them: a compact
 * key: value view with bars (default), the daemon's JSON as it is (--json),
 * or Prometheus text exposition for node_exporter's textfile collector
 * (--prometheus).  Without MOUNT, every ckptfs mount on the machine.
 * Exit: 0, 1 if a mount could not be read, 2 for bad usage or a path that
 * is not a ckptfs mount.
 */
#include "fs/cli.h"
#include "cache/json.h"
#include "cache/util.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum fmt { FMT_HUMAN, FMT_JSON, FMT_PROM };

static const char *prog = "ckptfs-stat";
static double read_timeout = CLI_READ_TIMEOUT_S;	/* --timeout */

static void usage(FILE *f)
{
	fprintf(f,
"usage: ckptfs-stat [--json | --prometheus] [--files] [--watch N] [--timeout S]\n"
"                   [MOUNT...]\n"
"\n"
"Show the state of ckptfs mounts: cache fill, dirty and durable bytes,\n"
"pending files, rates, backpressure and backend errors.\n"
"\n"
"  -j, --json        the daemon's stats as JSON, one object per mount per line\n"
"  -p, --prometheus  Prometheus text format (node_exporter textfile collector)\n"
"  -f, --files       also list the files not yet durable\n"
"  -w, --watch N     repeat every N seconds (0.1 to 86400) until interrupted\n"
"  -t, --timeout S   give up on a mount that does not answer in S seconds\n"
"                    (default 10; 0 waits as long as it takes)\n"
"  -h, --help        this help\n"
"\n"
"Without MOUNT, every ckptfs mount on this machine is shown.\n");
}

/* One Prometheus metric per numeric stats key: name, type, help. */
static const struct metric {
	const char *key, *type, *help;
} metrics[] = {
	{ "uptime_s", "gauge", "Seconds since the mount" },
	{ "cache_capacity_bytes", "gauge", "Cache size" },
	{ "cache_ready_bytes", "gauge", "Cache bytes whose pages are populated (pre-faulted)" },
	{ "cache_used_bytes", "gauge", "Cache bytes in use" },
	{ "cache_dirty_bytes", "gauge", "Cached bytes not yet durable and not being written" },
	{ "cache_flushing_bytes", "gauge", "Cached bytes being written to the backend" },
	{ "cache_clean_bytes", "gauge", "Cached bytes equal to the backend (evictable)" },
	{ "files_pending", "gauge", "Files not yet durable" },
	{ "ops_pending", "gauge", "Operations not yet durable" },
	{ "oldest_pending_age_s", "gauge", "Age of the oldest pending operation" },
	{ "absorbed_bytes", "counter", "Bytes written into the cache (every write(2), overwrites too)" },
	{ "absorbed_durable_bytes", "counter", "Absorbed bytes whose version is durable on the backend" },
	{ "absorbed_dropped_bytes", "counter",
	  "Absorbed bytes never published (file deleted before a close sealed them, or rescued)" },
	{ "absorbed_pending_bytes", "gauge", "Absorbed bytes not yet durable" },
	{ "persisted_bytes", "counter",
	  "Bytes of durable versions that came from the cache (a rewritten file's unchanged cached "
	  "data counts again with each version)" },
	{ "backend_written_bytes", "counter", "Bytes written to the backend" },
	{ "backend_copied_bytes", "counter", "Bytes copied on the backend from published files" },
	{ "backend_hashed_bytes", "counter",
	  "Bytes hashed for version digests (blocks a version did not change take the published "
	  "file's leaves, unhashed)" },
	{ "backend_extent_walks", "counter",
	  "Ranges of published files whose data extents were looked up with SEEK_DATA/SEEK_HOLE "
	  "(not needed where ckptfs wrote the file whole itself)" },
	{ "backend_base_changed", "counter",
	  "Versions built on a published file that had changed on the backend behind the mount "
	  "(read and hashed whole where it was kept)" },
	{ "fuse_adopted_bytes", "counter",
	  "Written bytes the files took in the cache chunk the request was read into (no copy)" },
	{ "read_bytes", "counter", "Bytes read through the mount" },
	{ "absorb_rate_bps", "gauge", "Bytes absorbed per second, recent" },
	{ "persist_rate_bps", "gauge", "Bytes persisted per second, recent" },
	{ "seq_current", "counter", "Last operation sequence number" },
	{ "seq_durable", "counter", "Last durable sequence number" },
	{ "versions_published", "counter", "File versions published" },
	{ "backpressure_waits", "counter", "Writes that waited for cache space" },
	{ "backpressure_wait_s", "counter", "Seconds writers waited for cache space" },
	{ "spilled_bytes", "counter", "Bytes of open files written early to free cache" },
	{ "evictions", "counter", "Clean chunks evicted" },
	{ "backend_errors", "counter", "Backend operations that failed" },
	{ "backend_retries", "counter", "Backend retries" },
	{ "degraded", "gauge", "1 while the backend is failing" },
	{ "blocked_ops", "gauge", "Operations the backend refused, holding back later ones" },
	{ "dir_fds_open", "gauge", "Backend directory descriptors open" },
	{ "dir_fd_closes", "counter", "Idle backend directory descriptors closed for room" },
	{ "dirs_staged", "counter", "New directories whose files were written ahead of their mkdir" },
	{ "publisher_passes", "counter", "Publisher walks of the queue of pending operations" },
	{ "backend_calls", "counter", "Backend calls of requests, bounded by drain_timeout" },
	{ "backend_calls_timed_out", "counter", "Requests answered EIO: their backend call hung past drain_timeout" },
	{ "backend_calls_stuck", "gauge", "Backend calls of requests running longer than drain_timeout now" },
	{ "temp_fds_open", "gauge", "Temporary files written and not yet published" },
	{ "temp_fds_cap", "gauge", "Temporary files beyond which further versions wait in the cache" },
	{ "files_open_for_writing", "gauge", "Modified files still open for writing" },
	{ "watermark_age_s", "gauge", "Age of this node's durable watermark" },
	{ "peers_known", "gauge", "Peers whose watermark this node has read" },
	{ "peer_behind_s", "gauge", "Age of the watermark of the peer furthest behind" },
	{ "markers_held", "gauge", "Markers held until the peers confirm them" },
	{ "marker_held_since_s", "gauge", "Seconds the oldest held marker has waited" },
	{ "markers_released_by_policy", "counter", "Markers released by marker_policy=release" },
	{ "peer_reads", "counter", "Peers' watermark records read" },
};

/*
 * A label value as the exposition format wants it: UTF-8, with backslash,
 * double quote and line feed escaped.  Other control characters and bytes
 * that are not well-formed UTF-8 cannot be written there; each becomes
 * U+FFFD (the label is for display: the mount is named exactly in --json).
 */
static void prom_escape(const char *s)
{
	const char *end = s + strlen(s);

	while (s < end) {
		unsigned char c = (unsigned char)*s;
		size_t k = utf8_valid_len(s, (size_t)(end - s));
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c == '\n')
			fputs("\\n", stdout);
		else if (!k || c < 0x20 || c == 0x7f)
			fputs("\xef\xbf\xbd", stdout);
		else {
			fwrite(s, 1, k, stdout);
			s += k;
			continue;
		}
		s++;
	}
}

/* A sample's value: a number as the daemon wrote it, a boolean as 1 or 0. */
static bool prom_value(const struct json_obj *o, const char *key, char *out, size_t len)
{
	const struct json_member *m = json_get(o, key);
	if (!m || (m->type != JSON_NUM && m->type != JSON_BOOL))
		return false;
	snprintf(out, len, "%s", m->type == JSON_BOOL ? (m->b ? "1" : "0") : m->str);
	return true;
}

/* Every metric as one group (HELP, TYPE, then a sample per mount), as the format asks. */
static void show_prom(const struct json_obj *o, char *const *mnt, int n)
{
	char v[80];

	for (size_t i = 0; i < CKPT_ARRAY_LEN(metrics); i++) {
		bool header = false;
		for (int k = 0; k < n; k++) {
			if (!prom_value(&o[k], metrics[i].key, v, sizeof(v)))
				continue;
			if (!header)
				printf("# HELP ckptfs_%s %s\n# TYPE ckptfs_%s %s\n", metrics[i].key,
				       metrics[i].help, metrics[i].key, metrics[i].type);
			header = true;
			printf("ckptfs_%s{mount=\"", metrics[i].key);
			prom_escape(mnt[k]);
			printf("\"} %s\n", v);
		}
	}
}

static void bar(double frac, char *out, int width)
{
	int n = (int)(frac * width + 0.5);
	if (n > width)
		n = width;
	for (int i = 0; i < width; i++)
		out[i] = i < n ? '#' : '.';
	out[width] = '\0';
}

static const char *sz(double bytes, char *buf)
{
	return format_size(bytes < 0 ? 0 : (uint64_t)bytes, buf, 32);
}

#define NUM(o, key) json_num_or0(o, key)

/* The node line, and a held marker: "marker `latest` held for node b since 12:00:01". */
static void show_nodes_human(const struct json_obj *o)
{
	const char *node = json_str(o, "node"), *held = json_str(o, "marker_held");
	const char *behind = json_str(o, "peer_behind"), *lease = json_str(o, "lease");
	const char *lerr = json_str(o, "lease_error"), *job = json_str(o, "node_job");
	char lbuf[160], jbuf[96] = "";
	double peers = NUM(o, "peers");

	if (!node)
		return;
	if (lease && !strcmp(lease, "held") && lerr && *lerr) {
		snprintf(lbuf, sizeof(lbuf), "held, cannot renew it: %s", lerr);
		lease = lbuf;
	}
	if (job && *job)	/* with a count, only this job's daemons are peers */
		snprintf(jbuf, sizeof(jbuf), " of job %s", job);
	if (peers > 0)
		printf("  node:         %s, peers%s %.0f/%.0f seen, furthest behind %s by %.1f s, "
		       "lease %s\n", node, jbuf, NUM(o, "peers_known"), peers,
		       behind && *behind ? behind : "-", NUM(o, "peer_behind_s"), lease ? lease : "?");
	else
		printf("  node:         %s, no peers, lease %s\n", node, lease ? lease : "?");
	const char *lost = json_str(o, "lost_window");
	if (lost && !strcmp(lost, "open") && NUM(o, "lost_window_files") == 0)
		printf("  LOST:         window of unconfirmed seals of mount %s open (no file known "
		       "lost: this node's record of it was damaged): peers hold their markers until "
		       "`ckptfs-ctl ack-lost MOUNT` here\n",
		       json_str(o, "lost_window_mount") ? json_str(o, "lost_window_mount") : "?");
	else if (lost && !strcmp(lost, "open"))
		printf("  LOST:         %.0f file%s lost in the unclean stop of mount %s: peers hold "
		       "their markers until `ckptfs-ctl ack-lost MOUNT` here\n",
		       NUM(o, "lost_window_files"), NUM(o, "lost_window_files") == 1 ? "" : "s",
		       json_str(o, "lost_window_mount") ? json_str(o, "lost_window_mount") : "?");
	const char *uids = json_str(o, "node_blocked_uids");
	if (peers <= 0)
		;	/* no peer holds anything for this node */
	else if (json_is_true(o, "node_blocked_uids_all"))
		printf("  failing uids: too many users to list have a failed operation pending "
		       "here: peers hold every user's markers for this node\n");
	else if (uids && *uids)
		printf("  failing uids: %s (a failed operation pending here): peers hold only these "
		       "users' markers for this node\n", uids);
	if (held && *held) {
		const char *for_node = json_str(o, "marker_held_for");
		const char *why = json_str(o, "marker_held_reason");
		char when[32] = "?";
		time_t t = (time_t)NUM(o, "marker_held_since_wall");
		struct tm tm;
		if (localtime_r(&t, &tm))
			strftime(when, sizeof(when), "%H:%M:%S", &tm);
		printf("  MARKER:       marker `%s` held for node %s since %s (%.1f s; %.0f held): %s\n",
		       held, for_node ? for_node : "?", when, NUM(o, "marker_held_since_s"),
		       NUM(o, "markers_held"), why ? why : "");
	}
}

static void show_human(const struct json_obj *o)
{
	char a[32], b[32], c[32], d[32], e[32], bb[41];
	double cap = NUM(o, "cache_capacity_bytes"), used = NUM(o, "cache_used_bytes");
	double dirty = NUM(o, "cache_dirty_bytes"), fl = NUM(o, "cache_flushing_bytes");
	double absorbed = NUM(o, "absorbed_bytes"), persisted = NUM(o, "persisted_bytes");
	const char *err = json_str(o, "last_error"), *engine = json_str(o, "io_engine");
	const char *fsync = json_str(o, "fsync");

	cli_put_path(stdout, json_str(o, "mount") ? json_str(o, "mount") : "?");
	printf("  (backend ");
	cli_put_path(stdout, json_str(o, "backend") ? json_str(o, "backend") : "?");
	printf(")\n");
	bar(cap > 0 ? used / cap : 0, bb, 30);
	double ready = NUM(o, "cache_ready_bytes");
	printf("  cache:        [%s] %3.0f%%  %s of %s", bb, cap > 0 ? 100 * used / cap : 0,
	       sz(used, a), sz(cap, b));
	if (json_get(o, "cache_ready_bytes") && ready < cap)
		printf(", %s ready (pre-faulting)", sz(ready, a));
	printf("\n");
	printf("  held:         dirty %s, flushing %s, clean %s\n", sz(dirty, a), sz(fl, b),
	       sz(NUM(o, "cache_clean_bytes"), c));
	if (json_get(o, "absorbed_durable_bytes")) {
		/* Of what was written, how much is durable: each absorbed byte once. */
		double ad = NUM(o, "absorbed_durable_bytes");
		double dropped = NUM(o, "absorbed_dropped_bytes");
		double base = absorbed - dropped;
		bar(base > 0 ? ad / base : 1, bb, 30);
		printf("  durable:      [%s] %3.0f%%  %s of %s absorbed", bb,
		       base > 0 ? 100 * ad / base : 100, sz(ad, d), sz(absorbed, e));
		if (dropped > 0)
			printf(" (%s dropped: deleted before a close published them)", sz(dropped, a));
		printf("\n");
		printf("  published:    %s in durable versions, %s written to the backend",
		       sz(persisted, b), sz(NUM(o, "backend_written_bytes"), c));
		if (NUM(o, "backend_copied_bytes") > 0)
			printf(", %s copied there from published files",
			       sz(NUM(o, "backend_copied_bytes"), a));
		printf("\n");
	} else {
		bar(absorbed > 0 ? persisted / absorbed : 1, bb, 30);
		printf("  durable:      [%s] %3.0f%%  %s of %s absorbed\n", bb,
		       absorbed > 0 ? 100 * persisted / absorbed : 100, sz(persisted, d), sz(absorbed, e));
	}
	printf("  pending:      %.0f files, %.0f operations, oldest %.1f s\n",
	       NUM(o, "files_pending"), NUM(o, "ops_pending"), NUM(o, "oldest_pending_age_s"));
	printf("  rates:        absorb %s/s, persist %s/s\n", sz(NUM(o, "absorb_rate_bps"), a),
	       sz(NUM(o, "persist_rate_bps"), b));
	printf("  sequence:     %.0f durable of %.0f\n", NUM(o, "seq_durable"), NUM(o, "seq_current"));
	printf("  backpressure: %.0f waits, %.3f s\n", NUM(o, "backpressure_waits"),
	       NUM(o, "backpressure_wait_s"));
	const char *state = json_str(o, "backend_state"), *blocked = json_str(o, "blocked");
	if (state && !strcmp(state, "blocked")) {
		printf("  backend:      BLOCKED at ");
		cli_put_path(stdout, blocked ? blocked : "?");
		printf(" (uid %.0f, for %.0f s, %.0f operations behind it); retrying; data stays "
		       "cached — fix the cause and run `ckptfs-ctl retry`, or `ckptfs-ctl skip %.0f`\n",
		       NUM(o, "blocked_uid"), NUM(o, "blocked_for_s"), NUM(o, "blocked_behind"),
		       NUM(o, "blocked_seq"));
	} else if (json_is_true(o, "degraded"))
		printf("  backend:      DEGRADED: %s (%.0f errors, %.0f retries); data stays cached\n",
		       err ? err : "?", NUM(o, "backend_errors"), NUM(o, "backend_retries"));
	else
		printf("  backend:      ok (%.0f errors so far)\n", NUM(o, "backend_errors"));
	if (NUM(o, "backend_calls_stuck") > 0)
		printf("  backend:      HUNG: %.0f calls of requests (listings, opens, xattrs, data) "
		       "running past drain_timeout; such requests get EIO (%.0f so far)\n",
		       NUM(o, "backend_calls_stuck"), NUM(o, "backend_calls_timed_out"));
	printf("  io:           %s, fsync %s, up %.0f s\n", engine ? engine : "?", fsync ? fsync : "?",
	       NUM(o, "uptime_s"));
	double temps = NUM(o, "temp_fds_open"), temp_cap = NUM(o, "temp_fds_cap");
	printf("  descriptors:  dirs %.0f/%.0f (%.0f closed for room), temp files %.0f/%.0f%s\n",
	       NUM(o, "dir_fds_open"), NUM(o, "dir_fds_cap"), NUM(o, "dir_fd_closes"), temps, temp_cap,
	       temp_cap > 0 && temps >= temp_cap ? " (at the cap: versions wait in the cache)" : "");
	const char *tr = json_str(o, "fuse_transport");
	if (tr) {
		bool ring = !strcmp(tr, "io_uring");
		printf("  fuse:         %s", ring ? "io_uring" : "/dev/fuse");
		if (ring)
			printf(" (%.0f queues)", NUM(o, "fuse_uring_queues"));
		printf(", requests up to %.0f KiB", NUM(o, "fuse_max_write") / 1024);
		const char *loop = json_str(o, "fuse_loop");
		double written = NUM(o, "absorbed_bytes");
		if (loop && !strcmp(loop, "readv") && written > 0)
			printf(", %.0f%% of writes taken without a copy",
			       100.0 * NUM(o, "fuse_adopted_bytes") / written);
		printf("\n");
		printf("  reads:        passthrough %s (%.0f opens), direct %s (%.0f opens)\n",
		       json_is_true(o, "passthrough") ? "on" : "off", NUM(o, "passthrough_opens"),
		       json_is_true(o, "read_direct") ? "on" : "off", NUM(o, "read_direct_opens"));
	}
	show_nodes_human(o);
}

static void show_files_human(const char *text)
{
	printf("  %-10s %12s %9s  %s\n", "STATE", "SIZE", "AGE", "PATH");
	for (const char *line = text; *line;) {
		const char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		struct json_obj o;
		char s[32];
		if (json_parse(line, len, &o, NULL, 0) == 0) {
			const char *st = json_str(&o, "state"), *path = json_str(&o, "path");
			printf("  %-10s %12s %8.1fs  ", st ? st : "?", sz(NUM(&o, "size"), s),
			       NUM(&o, "age_s"));
			cli_put_path(stdout, path ? path : "?");
			putchar('\n');
			json_free(&o);
		}
		line += len + (nl ? 1 : 0);
	}
}

/* Read and parse one mount's stats: 0, or 1 with a message. */
static int read_stats(const char *mnt, struct json_obj *o, char **text)
{
	char err[96];

	if (!(*text = cli_read_ctl(prog, mnt, "stats", read_timeout)))
		return 1;
	if (json_parse(*text, strlen(*text), o, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s: %s/.ckptfs/stats is not a flat JSON object (%s)\n", prog, mnt, err);
		free(*text);
		*text = NULL;
		return 1;
	}
	return 0;
}

/* Show one mount in the human or JSON view; returns 0 or 1. */
static int show_mount(const char *mnt, enum fmt fmt, bool files)
{
	char *text, *ftext = NULL;
	struct json_obj o;
	int rc = 0;

	if (read_stats(mnt, &o, &text))
		return 1;
	if (files && !(ftext = cli_read_ctl(prog, mnt, "files", read_timeout)))
		rc = 1;
	if (fmt == FMT_JSON) {
		fputs(text, stdout);
		if (ftext)
			fputs(ftext, stdout);
	} else {
		show_human(&o);
		if (ftext)
			show_files_human(ftext);
	}
	json_free(&o);
	free(text);
	free(ftext);
	return rc;
}

/* All mounts in the Prometheus format; returns 0 or 1. */
static int show_all_prom(char **mounts, int nm)
{
	struct json_obj *o = xcalloc((size_t)nm, sizeof(*o));
	char **names = xcalloc((size_t)nm, sizeof(char *));
	int n = 0, rc = 0;

	for (int i = 0; i < nm; i++) {
		char *text;
		if (read_stats(mounts[i], &o[n], &text)) {
			rc = 1;
			continue;
		}
		free(text);
		names[n++] = mounts[i];
	}
	show_prom(o, names, n);
	for (int i = 0; i < n; i++)
		json_free(&o[i]);
	free(o);
	free(names);
	return rc;
}

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' }, { "prometheus", no_argument, NULL, 'p' },
		{ "files", no_argument, NULL, 'f' }, { "watch", required_argument, NULL, 'w' },
		{ "timeout", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 },
	};
	enum fmt fmt = FMT_HUMAN;
	bool files = false;
	double watch = 0;
	char **mounts = NULL;
	int nm = 0, c, rc = 0;

	argv[0] = (char *)prog;	/* getopt's own messages name the tool, not its path */
	while ((c = getopt_long(argc, argv, "jpfw:t:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'j': fmt = FMT_JSON; break;
		case 'p': fmt = FMT_PROM; break;
		case 'f': files = true; break;
		case 'w': {
			if (parse_seconds(optarg, 0.1, 86400, &watch) < 0) {
				fprintf(stderr, "%s: --watch needs seconds from 0.1 to 86400, not '%s'\n",
					prog, optarg);
				return CLI_USAGE;
			}
			break;
		}
		case 't': {
			if (parse_seconds(optarg, 0, 86400, &read_timeout) < 0) {
				fprintf(stderr, "%s: --timeout needs seconds from 0 to 86400, not '%s'\n",
					prog, optarg);
				return CLI_USAGE;
			}
			break;
		}
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return CLI_USAGE;
		}
	}
	if (optind < argc) {
		for (int i = optind; i < argc; i++) {
			char mnt[PATH_MAX];
			int r = cli_mount(prog, argv[i], mnt, sizeof(mnt), NULL, 0);
			if (r) {
				for (int k = 0; k < nm; k++)
					free(mounts[k]);
				free(mounts);
				return r;
			}
			mounts = xrealloc(mounts, (size_t)(nm + 1) * sizeof(char *));
			mounts[nm++] = xstrdup(mnt);
		}
	} else if ((nm = cli_all_mounts(&mounts)) == 0) {
		fprintf(stderr, "%s: no ckptfs mounts on this machine\n", prog);
		return 1;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	cli_cancel_on(&stop);	/* a mount that does not answer does not outlive a signal */
	do {
		if (fmt == FMT_PROM) {
			rc |= show_all_prom(mounts, nm);
		} else {
			for (int i = 0; i < nm; i++) {
				if (fmt == FMT_HUMAN && i)
					putchar('\n');
				rc |= show_mount(mounts[i], fmt, files);
			}
		}
		fflush(stdout);
		if (watch > 0 && !stop) {
			struct timespec ts = { (time_t)watch, (long)((watch - (double)(time_t)watch) * 1e9) };
			while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !stop)
				;
			if (fmt == FMT_HUMAN && !stop)
				putchar('\n');
		}
	} while (watch > 0 && !stop);
	for (int i = 0; i < nm; i++)
		free(mounts[i]);
	free(mounts);
	return rc;
}
