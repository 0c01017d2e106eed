/*
 * recovery.c — what a mount after a crash finds and says (backend/manifest.c,
 * recovery steps 1–4), with the crash placed deterministically by slowing
 * the backend through CKPTFS_FAULT instead of by chance.
 *
 * In flight: every pwrite sleeps, so closed files sit in the flushers; the
 * daemon is killed once a flusher has begun one (its "intent" record is in
 * the manifest).  The next mount must log "in flight ... never persisted"
 * for each begun file that did not reach the backend and for none that
 * did (files still queued, never begun, leave no record to report), log
 * the recovery summary, append a "recovered" record naming the dead mount
 * and itself, remove the dead mount's temporary files (there were some),
 * and show exactly the backend.
 *
 * Applied but not durable: every directory fsync sleeps, so the publisher
 * has applied a batch — a file written as m.tmp and renamed to m (as DCP
 * and torch.save users do), then `latest` rewritten in place — but not yet
 * declared it durable when the daemon is killed.  The backend holds all of
 * it.  Recovery must see that all of it was applied (P1: a prefix): its
 * "recovered" record covers the last of those operations, and verify of
 * the whole backend passes with every file OK (none MISMATCH or UNTRACKED).
 */
#include "tests/integrity/integ.h"

#define NFLIGHT 4

/* Poll until the manifest has a record of type t for path; false on timeout. */
static bool wait_record(struct tmount *m, const char *t, const char *path, unsigned timeout_ms)
{
	for (uint64_t t0 = mono_ms(); mono_ms() - t0 < timeout_ms; usleep(10000)) {
		struct it_log l;
		int n = 0;
		if (it_log_read(it_manifest_path(m), &l) == 0)
			n = it_log_count_type(&l, t, path);
		it_log_free(&l);
		if (n)
			return true;
	}
	return false;
}

/* The "recovered" record of the log (payload copy), failing if there is not one. */
static void recovered_record(struct tmount *m, char *out, size_t len)
{
	struct it_log l;
	char t[32];
	int n = 0;

	ASSERT_EQ(it_log_read(it_manifest_path(m), &l), 0);
	for (size_t i = 0; i < l.n; i++)
		if (it_json_get(l.r[i].payload, "t", t, sizeof(t)) && !strcmp(t, "recovered")) {
			snprintf(out, len, "%s", l.r[i].payload);
			n++;
		}
	it_log_free(&l);
	ASSERT_EQ(n, 1);
}

static void mount_shows_backend(struct tmount *m)
{
	struct it_tree b, mt;
	char why[1024];

	ASSERT_EQ(it_tree_scan(m->backend, &b), 0);
	ASSERT_EQ(b.temps, 0);
	ASSERT_EQ(it_tree_scan(m->mnt, &mt), 0);
	if (it_tree_diff(&b, &mt, why, sizeof(why)))
		FAILF("the mount does not show the backend (first: backend, second: mount):%s", why);
	it_tree_free(&b);
	it_tree_free(&mt);
}

/* What became of flight<i> at the crash: on the backend, begun (intent), or neither. */
enum fate { F_PUBLISHED, F_BEGUN, F_QUEUED };

static void flight_fates(struct tmount *m, enum fate *fate)
{
	struct it_tree b;
	struct it_log l;
	char name[32];

	ASSERT_EQ(it_tree_scan(m->backend, &b), 0);
	ASSERT_TRUE(b.temps > 0);	/* the begun files left temporaries */
	ASSERT_EQ(it_log_read(it_manifest_path(m), &l), 0);
	for (int i = 0; i < NFLIGHT; i++) {
		snprintf(name, sizeof(name), "flight%d", i);
		fate[i] = it_tree_find(&b, name) ? F_PUBLISHED
			  : it_log_count_type(&l, "intent", name) ? F_BEGUN : F_QUEUED;
	}
	it_log_free(&l);
	it_tree_free(&b);
}

static void in_flight(void)
{
	struct tmount m;
	char gate[PATH_MAX], name[32], line[256], dead[32], now[32], rec[1024], v[64];
	const char *env[2];
	enum fate fate[NFLIGHT];
	int count[3] = { 0 };

	tm_init(&m, "recovery-flight");
	snprintf(gate, sizeof(gate), "%s/gate", m.root);
	env[0] = cu_fault_env("op=pwrite,delay_ms=300,while=%s", gate);
	env[1] = NULL;
	tm_mount(&m, NULL, env);
	ASSERT_EQ(it_write_pattern(tm_path(&m, "durable"), 1, 100 * KiB), 0);
	tm_sync(&m);
	ASSERT_TRUE(it_json_get(it_stats(&m), "mount_id", dead, sizeof(dead)));

	it_gate_set(gate, true);
	for (int i = 0; i < NFLIGHT; i++) {
		snprintf(name, sizeof(name), "flight%d", i);
		ASSERT_EQ(it_write_pattern(tm_path(&m, name), 10 + (uint64_t)i, MiB), 0);
	}
	if (!wait_record(&m, "intent", "flight0", 10000))
		FAILF("no flusher began flight0 within 10 s");
	/* Intents are written by the publisher; the flushers make the temporaries. */
	for (uint64_t t0 = mono_ms(); cu_count_temp_tree(m.backend) == 0; usleep(20000))
		if (mono_ms() - t0 > 10000)
			FAILF("no flusher created a temporary file within 10 s");
	tm_kill(&m);
	it_gate_set(gate, false);
	flight_fates(&m, fate);

	tm_mount(&m, NULL, NULL);
	for (int i = 0; i < NFLIGHT; i++) {
		snprintf(name, sizeof(name), "flight%d", i);
		snprintf(line, sizeof(line), "never persisted: %s ", name);
		int n = it_log_count(&m, line);
		if (fate[i] == F_BEGUN && n != 1)
			FAILF("%s was begun and lost but is reported %d times as in flight", name, n);
		if (fate[i] == F_PUBLISHED && n != 0)
			FAILF("%s reached the backend but is reported as never persisted", name);
		count[fate[i]]++;
	}
	printf("in flight at the crash: %d files begun and lost (reported), %d queued and lost "
	       "(not reported: no record of them), %d published\n",
	       count[F_BEGUN], count[F_QUEUED], count[F_PUBLISHED]);
	snprintf(line, sizeof(line), "recovered from an unclean stop of mount %s", dead);
	ASSERT_EQ(it_log_count(&m, line), 1);
	ASSERT_TRUE(it_json_get(it_stats(&m), "mount_id", now, sizeof(now)));
	recovered_record(&m, rec, sizeof(rec));
	ASSERT_TRUE(it_json_get(rec, "m", v, sizeof(v)));
	ASSERT_STR_EQ(v, dead);
	ASSERT_TRUE(it_json_get(rec, "by", v, sizeof(v)));
	ASSERT_STR_EQ(v, now);
	mount_shows_backend(&m);
	ASSERT_TRUE(it_has_pattern(tm_path(&m, "durable"), 1, 100 * KiB));
	tm_stop(&m);
	tm_cleanup(&m);
}

/* Highest "seq" among the operation records of mount `mid`. */
static long long last_op_seq(struct tmount *m, const char *mid)
{
	static const char *const ops[] = { "file", "mkdir", "rename", "unlink", "rmdir" };
	struct it_log l;
	char t[32], v[64];
	long long max = -1;

	ASSERT_EQ(it_log_read(it_manifest_path(m), &l), 0);
	for (size_t i = 0; i < l.n; i++) {
		const char *p = l.r[i].payload;
		if (!it_json_get(p, "t", t, sizeof(t)) || !it_json_get(p, "m", v, sizeof(v)) ||
		    strcmp(v, mid))
			continue;
		for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++)
			if (!strcmp(t, ops[k]) && it_json_num(p, "seq") > max)
				max = it_json_num(p, "seq");
	}
	it_log_free(&l);
	return max;
}

static void applied_not_durable(void)
{
	struct tmount m;
	char gate[PATH_MAX], dead[32], rec[1024], *out;
	const char *env[2];
	bool applied = false;

	tm_init(&m, "recovery-applied");
	snprintf(gate, sizeof(gate), "%s/gate", m.root);
	/* mkdir holds the publisher while the rest gets ready: one batch after it. */
	env[0] = cu_fault_env("op=mkdir,delay_ms=500,while=%s;op=fsync,delay_ms=4000,while=%s",
			      gate, gate);
	env[1] = NULL;
	tm_mount(&m, NULL, env);
	ASSERT_EQ(it_write_pattern(tm_path(&m, "latest"), 1, 30), 0);
	ASSERT_EQ(it_write_pattern(tm_path(&m, "other"), 2, 200 * KiB), 0);
	tm_sync(&m);
	ASSERT_TRUE(it_json_get(it_stats(&m), "mount_id", dead, sizeof(dead)));

	it_gate_set(gate, true);
	CHECK_SYS(mkdir(tm_path(&m, "d"), 0755));
	ASSERT_EQ(it_write_pattern(tm_path(&m, "m.tmp"), 3, 300 * KiB), 0);
	CHECK_SYS(rename(tm_path(&m, "m.tmp"), tm_path(&m, "m")));
	ASSERT_EQ(it_write_pattern(tm_path(&m, "latest"), 4, 31), 0);
	for (uint64_t t0 = mono_ms(); !applied && mono_ms() - t0 < 20000; usleep(5000))
		applied = it_has_pattern(tm_bpath(&m, "latest"), 4, 31) &&
			  it_has_pattern(tm_bpath(&m, "m"), 3, 300 * KiB) &&
			  !file_exists(tm_bpath(&m, "m.tmp"));
	if (!applied)
		FAILF("the publisher did not apply the batch within 20 s");
	ASSERT_EQ(it_json_num(it_stats(&m), "seq_durable") < it_json_num(it_stats(&m), "seq_current"), 1);
	tm_kill(&m);
	it_gate_set(gate, false);

	long long last = last_op_seq(&m, dead);
	tm_mount(&m, NULL, NULL);
	recovered_record(&m, rec, sizeof(rec));
	if (it_json_num(rec, "seq") != last)
		FAILF("recovery found operations up to %lld applied, but all up to %lld were: %s",
		      it_json_num(rec, "seq"), last, rec);
	mount_shows_backend(&m);
	tm_stop(&m);
	int st = it_verify(m.backend, 0, &out);
	if (st != 0 || it_verdict_count(out, "OK") != 3 || strcmp(it_verdict(out, "m"), "OK") ||
	    strcmp(it_verdict(out, "latest"), "OK"))
		FAILF("verify after recovering an applied batch: exit %d\n%s", st, out);
	free(out);
	tm_cleanup(&m);
}

int main(void)
{
	tm_require_fuse();
	in_flight();
	applied_not_durable();
	return 0;
}
