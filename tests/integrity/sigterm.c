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
 *     manifest.jsonl.  With our splice loop and with libfuse's loop
 *     (splice=off).
 *  2. Hung backend (every data write takes 5 s, one flusher): a read of
 *     MOUNT/.ckptfs/drain, which waits for the backend with no deadline of
 *     its own, returns {"ok": false, ...} at SIGTERM; the daemon exits
 *     within drain_timeout plus a few seconds (an in-flight write of the
 *     hung backend included) and rescues the file.
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

static void sigterm_blocked_writer(const char *loop)
{
	static const char *const fills[] = { "fill0", "fill1", "fill2" };
	static const uint64_t seeds[] = { 100, 101, 102 };
	struct tmount m;
	struct bw_child w;
	char rescue[PATH_MAX], opts[PATH_MAX + 128], mid[32];
	const char *env[] = { cu_fault_env("op=pwrite,err=EIO"), NULL };
	uint64_t written;
	int err, st;

	tm_init(&m, "sigterm-writer");
	snprintf(rescue, sizeof(rescue), "%s/rescue", m.root);
	snprintf(opts, sizeof(opts), BW_OPTS ",drain_timeout=3,rescue_dir=%s,%s", rescue, loop);
	tm_mount(&m, opts, env);
	ASSERT_TRUE(it_json_get(it_stats(&m), "mount_id", mid, sizeof(mid)));
	bw_fill(&m);
	bw_spawn(&w, tm_path(&m, "w"), 8 * MiB, 0);
	bw_assert_blocked(&w, 700);

	uint64_t t_sig = mono_ms();
	CHECK_SYS(kill(m.pid, SIGTERM));
	if (!bw_report(&w, 2000, &err, &written))
		FAILF("[%s] the blocked writer still waits 2 s after SIGTERM", loop);
	if (err != ESHUTDOWN)
		FAILF("[%s] the blocked writer got %s at SIGTERM, expected %s", loop,
		      err ? strerror(err) : "no error", strerror(ESHUTDOWN));
	ASSERT_EQ(written, BW_BLOCKED_AT);
	int rc = bw_wait_daemon(&m, (3 + 8) * 1000);
	if (rc < 0)
		FAILF("[%s] the daemon did not exit within 11 s of SIGTERM (drain_timeout=3)", loop);
	uint64_t took = mono_ms() - t_sig;
	ASSERT_EQ(rc, 1);			/* the backend took nothing: rescued */
	ASSERT_GE(took, 3000);			/* it gave the backend drain_timeout */
	ASSERT_EQ(cu_mount_count(m.mnt), 0);
	ASSERT_TRUE(bw_reap(&w, 5000, &st));
	check_rescue(rescue, mid, fills, seeds, BW_NFILL, BW_FILL_SIZE);
	ASSERT_EQ(it_log_count(&m, "saved them in"), 1);
	tm_cleanup(&m);
}

static void sigterm_blocked_drain(const char *loop)
{
	static const char *const names[] = { "f" };
	static const uint64_t seeds[] = { 9 };
	struct tmount m;
	struct bw_child r;
	char rescue[PATH_MAX], opts[PATH_MAX + 128], mid[32];
	const char *env[] = { cu_fault_env("op=pwrite,delay_ms=5000"), NULL };
	uint64_t got;
	int err, st;

	tm_init(&m, "sigterm-drain");
	snprintf(rescue, sizeof(rescue), "%s/rescue", m.root);
	snprintf(opts, sizeof(opts), "drain_timeout=2,flush_threads=1,rescue_dir=%s,%s", rescue, loop);
	tm_mount(&m, opts, env);
	ASSERT_TRUE(it_json_get(it_stats(&m), "mount_id", mid, sizeof(mid)));
	ASSERT_EQ(it_write_pattern(tm_path(&m, "f"), seeds[0], MiB), 0);	/* one write */
	bw_spawn_drain(&r, &m);
	bw_assert_blocked(&r, 700);

	uint64_t t_sig = mono_ms();
	CHECK_SYS(kill(m.pid, SIGTERM));
	if (!bw_report(&r, 2000, &err, &got))
		FAILF("[%s] the drain read still waits 2 s after SIGTERM", loop);
	ASSERT_EQ(err, 0);
	const char *text = bw_text(&r);
	if (!strstr(text, "\"ok\": false"))
		FAILF("[%s] the drain read at SIGTERM returned: %s", loop, text);
	int rc = bw_wait_daemon(&m, (2 + 9) * 1000);
	if (rc < 0)
		FAILF("[%s] the daemon did not exit within 11 s of SIGTERM (drain_timeout=2, "
		      "writes take 5 s)", loop);
	ASSERT_EQ(rc, 1);
	ASSERT_GE(mono_ms() - t_sig, 2000);	/* it gave the backend drain_timeout */
	ASSERT_EQ(cu_mount_count(m.mnt), 0);
	ASSERT_TRUE(bw_reap(&r, 5000, &st));
	check_rescue(rescue, mid, names, seeds, 1, MiB);
	tm_cleanup(&m);
}

int main(void)
{
	tm_require_fuse();
	sigterm_blocked_writer("splice=on");
	sigterm_blocked_writer("splice=off");
	sigterm_blocked_drain("splice=off");
	return 0;
}
