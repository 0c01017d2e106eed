/*
 * sigterm.c — SIGTERM always reaches drain-or-rescue, whatever the request
 * workers are blocked on (contract item 2; fs/loop.c, fs/wait.c W1).
 *
 *  1. Dead backend (every data write fails with EIO), drain_timeout=3: a
 *     writer blocked on the full cache (blockw.h) when SIGTERM arrives gets
 *     an error (ESHUTDOWN) at once, not after drain_timeout; the daemon
 *     unmounts, gives up on the backend after drain_timeout and exits 1
 *     within drain_timeout plus a few seconds of the signal; the rescue
 *     directory holds every closed file with its contents, listed in its
 *     manifest.jsonl.  With our loop reading with readv (the default) or
 *     splice, and with libfuse's loop (splice=off).
 *  2. Hung backend (every data write takes 5 s, one flusher): a read of
 *     MOUNT/.ckptfs/drain, which waits for the backend with no deadline of
 *     its own, returns {"ok": false, ...} at SIGTERM; the daemon exits
 *     within drain_timeout plus a few seconds (an in-flight write of the
 *     hung backend included) and rescues the file.
 *  3. A request whose backend call takes 30 s (opening a file to read it;
 *     libfuse's loop, whose workers no signal reaches): the call runs on a
 *     helper (fs/bcall.c), so at SIGTERM the worker answers the reader with
 *     an error and leaves; the daemon unmounts, drains and exits 0 well
 *     before the call returns, saying a backend call was left behind.
 *  4. A hung backend (its calls never return while a flag exists: a
 *     flusher stuck in pwrite, fdatasync or the temporary file's open): at
 *     SIGTERM the daemon gives up on the backend after drain_timeout, stops
 *     waiting for the stuck flusher after its 5 s bound, rescues the file
 *     (contents and manifest) and exits 1 while the calls still hang.
 */
#include "tests/integrity/blockw.h"

#include <signal.h>

/* The rescue directory of the mount whose id is mid, checked for the fill files. */
static void check_rescue(const char *rescue, const char *mid, const char *const *names,
			 const uint64_t *seeds, size_t n, uint64_t size)
{
	char where[PATH_MAX * 2], mf[PATH_MAX * 3], file[PATH_MAX * 3], host[256] = "";
	char line[4096], v[256];
	size_t len;
	char *text;

	gethostname(host, sizeof(host) - 1);
	snprintf(where, sizeof(where), "%s/%s-%s", rescue, host, mid);
	snprintf(mf, sizeof(mf), "%s/manifest.jsonl", where);
	if (!(text = read_file(mf, &len)))
		FAILF("no rescue manifest %s: %s", mf, strerror(errno));
	text = realloc(text, len + 1);
	text[len] = '\0';
	for (size_t i = 0; i < n; i++) {
		bool found = false;
		for (const char *p = text; p && *p && !found;) {
			const char *eol = strchr(p, '\n');
			snprintf(line, sizeof(line), "%.*s", (int)(eol ? eol - p : (long)strlen(p)), p);
			p = eol ? eol + 1 : NULL;
			found = it_json_get(line, "path", v, sizeof(v)) && !strcmp(v, names[i]) &&
				it_json_get(line, "saved", v, sizeof(v)) && !strcmp(v, "true");
		}
		if (!found)
			FAILF("%s is not saved in %s:\n%s", names[i], mf, text);
		snprintf(file, sizeof(file), "%s/files/%s", where, names[i]);
		if (!it_has_pattern(file, seeds[i], size))
			FAILF("rescued %s does not hold what was written", file);
	}
	free(text);
}

/* A mount with a rescue directory in its scratch dir, the loop under test, and its id. */
struct run {
	struct tmount m;
	const char *loop;	/* "loop=readv", "splice=on" or "splice=off" */
	unsigned drain_s;	/* drain_timeout */
	char rescue[PATH_MAX];
	char mid[32];
};

static void run_mount(struct run *r, const char *name, const char *opts, const char *rule)
{
	char o[PATH_MAX + 256];

	tm_init(&r->m, name);
	snprintf(r->rescue, sizeof(r->rescue), "%s/rescue", r->m.root);
	snprintf(o, sizeof(o), "%s,drain_timeout=%u,rescue_dir=%s,%s", opts, r->drain_s, r->rescue,
		 r->loop);
	const char *env[] = { cu_fault_env("%s", rule), NULL };
	tm_mount(&r->m, o, env);
	ASSERT_TRUE(it_json_get(it_stats(&r->m), "mount_id", r->mid, sizeof(r->mid)));
}

/*
 * SIGTERM the daemon while c is blocked: c must report within 2 s (*err,
 * *n), and the daemon exit 1 (rescued), unmounted, no sooner than
 * drain_timeout after the signal and within drain_timeout + 8 s.
 */
static void run_sigterm(struct run *r, struct bw_child *c, const char *what, int *err, uint64_t *n)
{
	bw_assert_blocked(c, 700);
	uint64_t t_sig = mono_ms();
	CHECK_SYS(kill(r->m.pid, SIGTERM));
	if (!bw_report(c, 2000, err, n))
		FAILF("[%s] %s still waits 2 s after SIGTERM", r->loop, what);
	int rc = bw_wait_daemon(&r->m, (r->drain_s + 8) * 1000);
	if (rc < 0)
		FAILF("[%s] the daemon did not exit within %u s of SIGTERM (drain_timeout=%u)", r->loop,
		      r->drain_s + 8, r->drain_s);
	ASSERT_EQ(rc, 1);			/* the backend took nothing: rescued */
	ASSERT_GE(mono_ms() - t_sig, r->drain_s * 1000);	/* it gave the backend its time */
	ASSERT_EQ(cu_mount_count(r->m.mnt), 0);
	ASSERT_EQ(it_log_count(&r->m, "saved them in"), 1);
}

static void sigterm_blocked_writer(const char *loop)
{
	static const char *const fills[] = { "fill0", "fill1", "fill2" };
	static const uint64_t seeds[] = { 100, 101, 102 };
	struct run r = { .loop = loop, .drain_s = 3 };
	struct bw_child w;
	uint64_t written;
	int err, st;

	run_mount(&r, "sigterm-writer", BW_OPTS, "op=pwrite,err=EIO");
	bw_fill(&r.m, EIO);
	bw_spawn(&w, &r.m, "w", 8 * MiB, 0);
	run_sigterm(&r, &w, "the blocked writer", &err, &written);
	if (err != ESHUTDOWN)
		FAILF("[%s] the blocked writer got %s at SIGTERM, expected %s", loop,
		      err ? strerror(err) : "no error", strerror(ESHUTDOWN));
	ASSERT_EQ(written, BW_BLOCKED_AT);
	ASSERT_TRUE(bw_reap(&w, 5000, &st));
	check_rescue(r.rescue, r.mid, fills, seeds, BW_NFILL, BW_FILL_SIZE);
	tm_cleanup(&r.m);
}

static void sigterm_blocked_drain(const char *loop)
{
	static const char *const names[] = { "f" };
	static const uint64_t seeds[] = { 9 };
	struct run r = { .loop = loop, .drain_s = 2 };
	struct bw_child d;
	uint64_t got;
	int err, st;

	run_mount(&r, "sigterm-drain", "flush_threads=1", "op=pwrite,delay_ms=5000");
	ASSERT_EQ(it_write_pattern(tm_path(&r.m, "f"), seeds[0], MiB), 0);	/* one write */
	bw_spawn_drain(&d, &r.m);
	run_sigterm(&r, &d, "the drain read", &err, &got);
	ASSERT_EQ(err, 0);
	const char *text = bw_text(&d);
	if (!strstr(text, "\"ok\": false"))
		FAILF("[%s] the drain read at SIGTERM returned: %s", loop, text);
	ASSERT_TRUE(bw_reap(&d, 5000, &st));
	check_rescue(r.rescue, r.mid, names, seeds, 1, MiB);
	tm_cleanup(&r.m);
}

static void sigterm_stuck_worker(void)
{
	struct run r = { .loop = "splice=off", .drain_s = 2 };
	struct bw_child rd;
	char path[PATH_MAX * 2];
	uint64_t got;
	int err, st;

	tm_init(&r.m, "sigterm-stuck");
	snprintf(path, sizeof(path), "%s/slow", r.m.backend);
	ASSERT_EQ(it_write_pattern(path, 5, 4096), 0);	/* published before the mount */
	/* In TSan builds: the daemon leaves that worker behind on purpose (no thread-leak report). */
	const char *env[] = { cu_fault_env("op=openat,delay_ms=30000,name=slow"),
			      "TSAN_OPTIONS=halt_on_error=1:report_thread_leaks=0", NULL };
	tm_mount(&r.m, "splice=off,drain_timeout=2", env);
	bw_spawn_reader(&rd, tm_path(&r.m, "slow"));
	bw_assert_blocked(&rd, 700);

	uint64_t t_sig = mono_ms();
	CHECK_SYS(kill(r.m.pid, SIGTERM));
	int rc = bw_wait_daemon(&r.m, 12000);
	if (rc < 0)
		FAILF("the daemon waited for a worker stuck in a backend call (12 s after SIGTERM)");
	ASSERT_EQ(rc, 0);	/* nothing was pending: drained */
	ASSERT_LT(mono_ms() - t_sig, 12000);
	ASSERT_EQ(cu_mount_count(r.m.mnt), 0);
	/* The worker left the call to its helper (fs/bcall.c) and answered; the helper is left. */
	ASSERT_EQ(it_log_count(&r.m, "still blocked in a handler"), 0);
	ASSERT_EQ(it_log_count(&r.m, "exiting with a backend call of a request still blocked"), 1);
	if (!bw_report(&rd, 5000, &err, &got))
		FAILF("the reader of the stuck request never got an answer");
	ASSERT_NE(err, 0);
	ASSERT_TRUE(bw_reap(&rd, 5000, &st));
	tm_cleanup(&r.m);
}

static void sigterm_hung_backend(void)
{
	static const char *const names[] = { "f" };
	static const uint64_t seeds[] = { 11 };
	struct run r = { .loop = "splice=on", .drain_s = 2 };
	char hold[PATH_MAX], rule[PATH_MAX + 64];

	tm_init(&r.m, "sigterm-hung");
	snprintf(hold, sizeof(hold), "%s/hold", r.m.root);
	snprintf(r.rescue, sizeof(r.rescue), "%s/rescue", r.m.root);
	snprintf(rule, sizeof(rule), "op=pwrite|fdatasync|openat,name=.ckptfs.,hold=%s", hold);
	const char *env[] = { cu_fault_env("%s", rule),
			      "TSAN_OPTIONS=halt_on_error=1:report_thread_leaks=0", NULL };
	char o[PATH_MAX + 128];
	snprintf(o, sizeof(o), "drain_timeout=2,io=pwrite,rescue_dir=%s", r.rescue);
	tm_mount(&r.m, o, env);
	ASSERT_TRUE(it_json_get(it_stats(&r.m), "mount_id", r.mid, sizeof(r.mid)));
	write_file(hold, "", 0);	/* the backend hangs from here on */
	ASSERT_EQ(it_write_pattern(tm_path(&r.m, "f"), seeds[0], MiB), 0);
	usleep(500 * 1000);	/* a flusher is inside the hung call */

	uint64_t t_sig = mono_ms();
	CHECK_SYS(kill(r.m.pid, SIGTERM));
	int rc = bw_wait_daemon(&r.m, 15000);
	if (rc < 0)
		FAILF("the daemon waited for a flusher stuck in a hung backend (15 s after SIGTERM)");
	ASSERT_EQ(rc, 1);
	ASSERT_LT(mono_ms() - t_sig, 15000);
	ASSERT_EQ(cu_mount_count(r.m.mnt), 0);
	ASSERT_EQ(it_log_count(&r.m, "left there"), 1);
	check_rescue(r.rescue, r.mid, names, seeds, 1, MiB);
	unlink(hold);
	tm_cleanup(&r.m);
}

int main(void)
{
	tm_require_fuse();
	sigterm_blocked_writer("loop=readv");
	sigterm_blocked_writer("splice=on");
	sigterm_blocked_writer("splice=off");
	sigterm_blocked_drain("splice=off");
	sigterm_stuck_worker();
	sigterm_hung_backend();
	return 0;
}
