/*
 * badinput.c — the daemon's command line: every usage error exits 2 with
 * exactly one line naming the option or path at fault, and mounts nothing;
 * `--help` exits 0 and mentions every option, and every NAME=VALUE option
 * it documents refuses a nonsense value that way too.
 *
 * The daemon runs without -f, as mount(8) starts it, so a case it wrongly
 * accepts mounts in the background and is found (and unmounted) here.  All
 * cases run and every failure is listed before the test fails.
 */
#include "tests/core/core_util.h"

#include <pthread.h>
#include <stdatomic.h>

/* Placeholders in the table, filled in at run time. */
#define B "@backend"
#define M "@mnt"
#define F "@file"		/* a regular file */
#define X "@missing"		/* a path that does not exist */
#define I "@inside"		/* a directory inside the backend */
#define L "@link"		/* a symlink to the backend */

struct bad {
	const char *args[8];	/* after argv[0], NULL-terminated */
	const char *needle;	/* the option or path the message must name */
};

static const struct bad cases[] = {
	{ { NULL }, "MOUNTPOINT" },
	{ { B, NULL }, "MOUNTPOINT" },
	{ { B, M, "extra", NULL }, "extra" },
	{ { B, M, "--frobnicate", NULL }, "--frobnicate" },
	{ { B, M, "-o", NULL }, "-o" },
	{ { B, M, "-o", "bogus=1", NULL }, "bogus" },
	{ { B, M, "-o", "nosuchflag", NULL }, "nosuchflag" },
	{ { B, M, "-o", "cache_size=abc", NULL }, "cache_size" },
	{ { B, M, "-o", "cache_size=0", NULL }, "cache_size" },
	{ { B, M, "-o", "cache_size=", NULL }, "cache_size" },
	{ { B, M, "-o", "cache_size=-4M", NULL }, "cache_size" },
	{ { B, M, "-o", "cache_size=100T", NULL }, "cache_size" },
	{ { B, M, "-o", "cache_size=64K", NULL }, "cache_size" },	/* under two chunks */
	{ { B, M, "-o", "chunk_size=3M", NULL }, "chunk_size" },
	{ { B, M, "-o", "chunk_size=32K", NULL }, "chunk_size" },
	{ { B, M, "-o", "chunk_size=128M", NULL }, "chunk_size" },
	{ { B, M, "-o", "chunk_size=big", NULL }, "chunk_size" },
	{ { B, M, "-o", "flush_threads=0", NULL }, "flush_threads" },
	{ { B, M, "-o", "flush_threads=65", NULL }, "flush_threads" },
	{ { B, M, "-o", "flush_threads=two", NULL }, "flush_threads" },
	{ { B, M, "-o", "flush_threads=-1", NULL }, "flush_threads" },
	{ { B, M, "-o", "flush_threads", NULL }, "flush_threads" },
	{ { B, M, "-o", "queue_depth=0", NULL }, "queue_depth" },
	{ { B, M, "-o", "queue_depth=1", NULL }, "queue_depth" },	/* the flushers never got going */
	{ { B, M, "-o", "max_threads=1", NULL }, "max_threads" },
	{ { B, M, "-o", "fsync=maybe", NULL }, "fsync" },
	{ { B, M, "-o", "fsync", NULL }, "fsync" },
	{ { B, M, "-o", "io=aio", NULL }, "'io'" },
	{ { B, M, "-o", "splice=maybe", NULL }, "splice" },
	{ { B, M, "-o", "loop=maybe", NULL }, "loop" },
	{ { B, M, "-o", "loop", NULL }, "loop" },
	{ { B, M, "-o", "direct=maybe", NULL }, "direct" },
	{ { B, M, "-o", "read_direct=maybe", NULL }, "read_direct" },
	{ { B, M, "-o", "read_direct", NULL }, "read_direct" },
	{ { B, M, "-o", "manifest=maybe", NULL }, "manifest" },
	{ { B, M, "-o", "job=12/3", NULL }, "job" },
	{ { B, M, "-o", "job=", NULL }, "job" },
	{ { B, M, "-o", "job=-", NULL }, "job" },
	{ { B, M, "-o", "attr_timeout=-1", NULL }, "attr_timeout" },
	{ { B, M, "-o", "drain_timeout=soon", NULL }, "drain_timeout" },
	{ { B, M, "-o", "rescue_dir=relative/dir", NULL }, "rescue_dir" },
	{ { B, M, "-o", "rescue_dir=" I, NULL }, "rescue_dir" },
	/* The same place under other names: resolved, not compared as written. */
	{ { B "/", M, "-o", "rescue_dir=" I "/resc", NULL }, "rescue_dir" },
	{ { B "/.", M, "-o", "rescue_dir=" I "/resc", NULL }, "rescue_dir" },
	{ { B, M, "-o", "rescue_dir=" L "/resc", NULL }, "rescue_dir" },
	/* ckptfs's own: its tools find the mount and its backend by them. */
	{ { B, M, "-o", "fsname=/elsewhere", NULL }, "fsname" },
	{ { B, M, "-o", "subtype=foo", NULL }, "subtype" },
	/* Numbers as written in decimal only. */
	{ { B, M, "-o", "cache_size=0x10M", NULL }, "cache_size" },
	{ { B, M, "-o", "flush_threads=+3", NULL }, "flush_threads" },
	{ { B, M, "-o", "max_threads= 4", NULL }, "max_threads" },
	{ { B, M, "-o", "lease_ttl=0x10", NULL }, "lease_ttl" },
	{ { B, M, "-o", "lease_ttl=1e5", NULL }, "lease_ttl" },
	{ { B, M, "-o", "peer_skew= 5", NULL }, "peer_skew" },
	{ { B, M, "-o", "marker_timeout=-0", NULL }, "marker_timeout" },
	{ { B, M, "-o", "marker_timeout=1e-3", NULL }, "marker_timeout" },
	{ { B, M, "-o", "drain_timeout=1.2.3", NULL }, "drain_timeout" },
	{ { B, M, "-o", "drain_timeout=0x10", NULL }, "drain_timeout" },
	/* Refused by FUSE, after the backend started: exit 2, and its log stays clean (below). */
	{ { B, M, "-o", "max_read=abc", NULL }, "max_read" },
	{ { B, M, "-o", "allow_other,allow_root", NULL }, "allow_root" },
	{ { B, M, "-o", "allow_root", "-o", "allow_other", NULL }, "allow_other" },
	{ { X, M, NULL }, X },
	{ { F, M, NULL }, F },
	{ { B, X, NULL }, X },
	{ { B, F, NULL }, F },
	{ { B, I, NULL }, I },
};

static struct tmount m;
static char missing[PATH_MAX + 32], afile[PATH_MAX + 32], inside[PATH_MAX + 32];
static char blink[PATH_MAX + 32];
static int failures;

static const char *fill(const char *s, char *buf, size_t len)
{
	static const struct { const char *key; const char *val; } subst[] = {
		{ B, m.backend }, { M, m.mnt }, { F, afile }, { X, missing }, { I, inside },
		{ L, blink },
	};
	for (size_t i = 0; i < CU_LEN(subst); i++) {
		size_t k = strlen(subst[i].key);
		const char *at = strstr(s, subst[i].key);	/* [option=]@placeholder[/more] */
		if (at) {
			snprintf(buf, len, "%.*s%s%s", (int)(at - s), s, subst[i].val, at + k);
			return buf;
		}
	}
	return s;
}

static void problem(const char *cmd, const char *fmt, const char *a, const char *out)
{
	fprintf(stderr, "FAIL: %s: ", cmd);
	fprintf(stderr, fmt, a);
	fprintf(stderr, "\n  output: %s\n", out);
	failures++;
}

/*
 * While a command runs, unmount anything that appears at m.mnt beyond the
 * `mounted` expected: a wrongly accepted daemon would otherwise keep running
 * (and tm_run_daemon waiting for its output).
 */
struct watch {
	atomic_bool stop;
	atomic_bool found;
	int mounted;
};

static void *watchdog(void *arg)
{
	struct watch *w = arg;
	while (!atomic_load(&w->stop)) {
		if (cu_mount_count(m.mnt) > w->mounted) {
			atomic_store(&w->found, true);
			cu_unmount(m.mnt);
		}
		usleep(50000);
	}
	return NULL;
}

/* Run one bad command line; `mounted` is how many mounts m.mnt should have. */
static void run_bad(const struct bad *c, int mounted)
{
	char bufs[8][PATH_MAX + 128], out[4096], needle[PATH_MAX + 128], cmd[8192] = "ckptfs";
	const char *argv[10] = { "ckptfs" };
	struct watch w = { .mounted = mounted };
	pthread_t th;
	int lines = 0, i, rc;

	for (i = 0; c->args[i]; i++) {
		argv[i + 1] = fill(c->args[i], bufs[i], sizeof(bufs[i]));
		snprintf(cmd + strlen(cmd), sizeof(cmd) - strlen(cmd), " %s", argv[i + 1]);
	}
	argv[i + 1] = NULL;
	ASSERT_EQ(pthread_create(&th, NULL, watchdog, &w), 0);
	rc = tm_run_daemon(argv, out, sizeof(out));
	if (rc != 2)
		usleep(200000);	/* a daemon that forked may mount just after */
	atomic_store(&w.stop, true);
	pthread_join(th, NULL);
	for (char *p = out; *p; p++)
		lines += *p == '\n';
	if (rc != 2) {
		char st[16];
		snprintf(st, sizeof(st), "%d", rc);
		problem(cmd, "exit status %s, expected 2", st, out);
	}
	if (lines != 1 || out[strlen(out) - 1] != '\n')
		problem(cmd, "%s", "expected exactly one line of output", out);
	const char *name = fill(c->needle, needle, sizeof(needle));
	if (!strstr(out, name))
		problem(cmd, "the message does not name '%s'", name, out);
	if (atomic_load(&w.found) || cu_mount_count(m.mnt) != mounted) {
		problem(cmd, "%s", "something got mounted", out);
		for (int tries = 0; cu_mount_count(m.mnt) > mounted && tries < 50; tries++)
			if (cu_unmount(m.mnt) != 0)
				usleep(100000);
	}
}

/* Run `ckptfs --help` into out; fails the case unless it exits 0. */
static void help_text(char *out, size_t len)
{
	const char *argv[] = { "ckptfs", "--help", NULL };
	if (tm_run_daemon(argv, out, len) != 0)
		problem("ckptfs --help", "%s", "exit status is not 0", out);
}

static void help_mentions_all(const char *out)
{
	static const char *const options[] = {
		"cache_size=", "chunk_size=", "flush_threads=", "queue_depth=", "max_threads=",
		"fsync=", "io=", "loop=", "splice=", "direct=", "manifest=", "attr_timeout=",
		"drain_timeout=", "rescue_dir=", "allow_other", "allow_root", "-f", "-d",
	};
	for (size_t i = 0; i < CU_LEN(options); i++)
		if (!strstr(out, options[i]))
			problem("ckptfs --help", "does not mention %s", options[i], out);
}

/* Every NAME=VALUE option the help documents refuses a nonsense value. */
static void help_options_validate(const char *out)
{
	int seen = 0;

	for (const char *line = out; line && *line; line = strchr(line, '\n'), line += !!line) {
		char name[64], opt[96];
		struct bad c = { { B, M, "-o", opt, NULL }, name };
		int end = 0;

		if (strncmp(line, "  ", 2) != 0 || sscanf(line, " %63[a-z_]=%n", name, &end) != 1 ||
		    !end)
			continue;
		snprintf(opt, sizeof(opt), "%s=?bad?", name);
		run_bad(&c, 0);
		seen++;
	}
	if (seen < 10)
		problem("ckptfs --help", "documents only %s NAME=VALUE options", seen < 1 ? "no" : "a few",
			out);
}

int main(void)
{
	tm_require_fuse();
	tm_init(&m, "badinput");
	snprintf(missing, sizeof(missing), "%s/no/such/dir", m.root);
	snprintf(afile, sizeof(afile), "%s/afile", m.root);
	snprintf(inside, sizeof(inside), "%s/sub", m.backend);
	cu_write_text(afile, "x");
	CHECK_SYS(mkdir(inside, 0755));
	snprintf(blink, sizeof(blink), "%s/link", m.root);
	CHECK_SYS(symlink(m.backend, blink));

	for (size_t i = 0; i < CU_LEN(cases); i++)
		run_bad(&cases[i], 0);
	char out[16384];
	help_text(out, sizeof(out));
	help_mentions_all(out);
	help_options_validate(out);

	/* A mountpoint that is already mounted, by another ckptfs. */
	static const struct bad again = { { I, M, NULL }, M };
	tm_mount(&m, NULL, NULL);
	/* None of the refusals above, some after the backend started, left its log unclean. */
	if (!strstr(cu_slurp(tm_path(&m, ".ckptfs/stats")), "\"recovered_unclean\": false"))
		FAILF("a refused start left the backend's log unclean: the next mount ran recovery");
	run_bad(&again, 1);
	tm_stop(&m);

	tm_cleanup(&m);
	if (failures)
		FAILF("%d problems with bad command lines (listed above)", failures);
	return 0;
}
