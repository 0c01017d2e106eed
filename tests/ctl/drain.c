/*
 * drain.c — `ckptfs-ctl drain` and MOUNT/.ckptfs/drain wait for the backend,
 * and stop waiting when told to.
 *
 *  1. A slow backend (every publish sleeps 300 ms): right after
 *     `ckptfs-ctl drain MOUNT` exits 0, the backend holds every file written
 *     before it, whole (checked there directly; the last was not there
 *     before the drain).  The same through a read of .ckptfs/drain, which
 *     answers {"ok": true, ...}, and with `--timeout=30`.
 *  2. A stalled backend (one publish sleeps 6 s): `ckptfs-ctl drain MOUNT
 *     --timeout 1` exits 1 after about a second with "timed out", and the
 *     file is still not on the backend; writing "timeout=1" to a drain fd
 *     and reading it back gives {"ok": false, "error": "timed out", ...};
 *     "timeout=0" answers at once; a drain without a timeout waits the
 *     stall out and succeeds.
 *  3. A failing backend (pwrite fails with EIO while a flag file exists):
 *     drain exits 1 naming the error, the drain file answers ok false with
 *     it, stats show the degraded state; once the flag is gone and the
 *     daemon has recovered, drain exits 0 and the file is on the backend.
 *  4. ckptfs-ctl usage errors exit 2 with a message; `help` exits 0.
 */
#include "tests/ctl/ctl_util.h"

#include <unistd.h>

#define NSLOW 8

static void ctl_drain(struct ct_result *r, struct tmount *m, const char *timeout_arg,
		      const char *timeout_val)
{
	const char *argv[] = { ct_tool("ckptfs-ctl"), "drain", m->mnt, timeout_arg, timeout_val, NULL };
	ct_run(r, argv);
}

/* Read .ckptfs/drain, after writing msg (a timeout) to it if any. */
static void drain_file(struct tmount *m, const char *msg, struct json_obj *answer)
{
	ct_exchange(m, "drain", msg, answer);
	if (ct_num(answer, "seq_durable") < 0 || ct_num(answer, "waited_s") < 0)
		FAILF("drain answer has negative numbers");
}

static void slow_backend(void)
{
	struct tmount m;
	const char *env[] = { "CKPTFS_FAULT=op=rename,delay_ms=300", NULL };
	struct ct_result r;
	struct json_obj a;
	char rel[32];

	tm_start(&m, "ctl-drain-slow", NULL, env);
	for (int i = 0; i < NSLOW; i++) {
		snprintf(rel, sizeof(rel), "f%d", i);
		ct_write_seeded(tm_path(&m, rel), 64 * KiB + (size_t)i, (uint64_t)i + 1);
	}
	/* Eight publishes of 300 ms each lie ahead: the last cannot be there yet. */
	snprintf(rel, sizeof(rel), "f%d", NSLOW - 1);
	ASSERT_TRUE(!file_exists(tm_bpath(&m, rel)));

	ctl_drain(&r, &m, NULL, NULL);
	for (int i = 0; i < NSLOW; i++) {
		snprintf(rel, sizeof(rel), "f%d", i);
		ct_check_seeded(tm_bpath(&m, rel), 64 * KiB + (size_t)i, (uint64_t)i + 1);
	}
	ct_expect_status(&r, 0, "ckptfs-ctl drain");
	ct_expect_in(r.out, "durable up to operation", "ckptfs-ctl drain's output");
	ct_result_free(&r);

	/* The control file itself. */
	ct_write_seeded(tm_path(&m, "g1"), 10000, 21);
	ct_write_seeded(tm_path(&m, "g2"), 20000, 22);
	drain_file(&m, NULL, &a);
	ct_check_seeded(tm_bpath(&m, "g1"), 10000, 21);
	ct_check_seeded(tm_bpath(&m, "g2"), 20000, 22);
	ASSERT_TRUE(ct_bool(&a, "ok"));
	ASSERT_GE(ct_num(&a, "seq_durable"), ct_num(&a, "seq"));
	ASSERT_TRUE(json_get(&a, "error") == NULL);
	json_free(&a);

	/* --timeout=S, with time to spare. */
	ct_write_seeded(tm_path(&m, "g3"), 30000, 23);
	ctl_drain(&r, &m, "--timeout=30", NULL);
	ct_check_seeded(tm_bpath(&m, "g3"), 30000, 23);
	ct_expect_status(&r, 0, "ckptfs-ctl drain --timeout=30");
	ct_result_free(&r);
	tm_stop(&m);
	tm_cleanup(&m);
}

static void stalled_backend(void)
{
	struct tmount m;
	char flag[PATH_MAX];
	struct ct_result r;
	struct json_obj a;

	/* Publishing stall.bin hangs until the flag goes. */
	ct_mount_held(&m, "ctl-drain-stall", "op=rename,name=stall", flag);
	ct_touch(flag);
	ct_write_seeded(tm_path(&m, "stall.bin"), 100 * KiB, 31);

	ctl_drain(&r, &m, "--timeout", "1");
	ct_expect_status(&r, 1, "ckptfs-ctl drain --timeout 1 on a stalled backend");
	ct_expect_in(r.err, "timed out", "ckptfs-ctl drain's message");
	ct_expect_in(r.err, m.mnt, "ckptfs-ctl drain's message");
	ASSERT_GE(r.ms, 900);
	ASSERT_LT(r.ms, 4500);
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "stall.bin")));
	ct_result_free(&r);

	uint64_t t0 = mono_ms();
	drain_file(&m, "timeout=1", &a);
	ASSERT_TRUE(!ct_bool(&a, "ok"));
	ASSERT_STR_EQ(ct_str(&a, "error"), "timed out");
	ASSERT_LT(ct_num(&a, "seq_durable"), ct_num(&a, "seq"));
	ASSERT_TRUE(ct_num(&a, "waited_s") >= 0.9 && ct_num(&a, "waited_s") < 4);
	ASSERT_GE(mono_ms() - t0, 900);
	json_free(&a);

	drain_file(&m, "timeout=0\n", &a);	/* do not wait at all */
	ASSERT_TRUE(!ct_bool(&a, "ok"));
	ASSERT_STR_EQ(ct_str(&a, "error"), "timed out");
	ASSERT_TRUE(ct_num(&a, "waited_s") < 0.5);
	json_free(&a);
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "stall.bin")));

	CHECK_SYS(unlink(flag));
	ctl_drain(&r, &m, NULL, NULL);	/* waits for the publish */
	ct_check_seeded(tm_bpath(&m, "stall.bin"), 100 * KiB, 31);
	ct_expect_status(&r, 0, "ckptfs-ctl drain after the stall");
	ct_result_free(&r);
	tm_stop(&m);
	tm_cleanup(&m);
}

static bool degraded(struct tmount *m)
{
	struct json_obj s;
	bool d;

	ct_stats(m, &s);
	d = ct_bool(&s, "degraded");
	if (d) {
		ASSERT_STR_EQ(ct_str(&s, "last_error"), strerror(EIO));
		ASSERT_GE(ct_num(&s, "backend_errors"), 1);
	}
	json_free(&s);
	return d;
}

static void failing_backend(void)
{
	struct tmount m;
	char flag[PATH_MAX];
	struct ct_result r;
	struct json_obj a;

	ct_mount_flagged(&m, "ctl-drain-eio", "op=pwrite,err=EIO", flag);
	ct_touch(flag);
	ct_write_seeded(tm_path(&m, "f"), 200 * KiB, 41);

	ctl_drain(&r, &m, "--timeout", "5");
	ct_expect_status(&r, 1, "ckptfs-ctl drain on a failing backend");
	ct_expect_in(r.err, "not durable", "ckptfs-ctl drain's message");
	ct_expect_in(r.err, strerror(EIO), "ckptfs-ctl drain's message");
	ct_result_free(&r);
	drain_file(&m, "timeout=1", &a);
	ASSERT_TRUE(!ct_bool(&a, "ok"));
	/* It names the operation that holds everything back, and why. */
	ct_expect_in(ct_str(&a, "error"), "blocked at seq", "the drain file's error");
	ct_expect_in(ct_str(&a, "error"), strerror(EIO), "the drain file's error");
	json_free(&a);
	ASSERT_TRUE(degraded(&m));
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "f")));

	CHECK_SYS(unlink(flag));
	for (uint64_t t0 = mono_ms(); degraded(&m); usleep(100000))
		if (mono_ms() - t0 > 30000)
			FAILF("still degraded 30 s after the backend recovered");
	ctl_drain(&r, &m, "--timeout", "30");
	ct_check_seeded(tm_bpath(&m, "f"), 200 * KiB, 41);
	ct_expect_status(&r, 0, "ckptfs-ctl drain after recovery");
	ct_result_free(&r);
	/* A relative PATH with ".." leads out of the mount: a usage error, as an absolute one. */
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "flush", m.mnt, "../../etc/passwd", NULL });
	ct_expect_status(&r, 2, "ckptfs-ctl flush MOUNT ../../etc/passwd");
	ct_expect_in(r.err, "not a file inside", "flush's message");
	ct_result_free(&r);
	tm_stop(&m);
	tm_cleanup(&m);
}

static void usage_errors(void)
{
	static const struct {
		const char *argv[5];
		int status;
		const char *says;
	} cases[] = {
		{ { NULL }, 2, "usage:" },
		{ { "bogus" }, 2, "unknown command 'bogus'" },
		{ { "drain" }, 2, "needs a MOUNT" },
		{ { "drain", "/", "--timeout", "-1" }, 2, "--timeout" },
		{ { "drain", "/", "--timeout", "soon" }, 2, "'soon'" },
		{ { "drain", "/", "--timeout", "nan" }, 2, "'nan'" },	/* was: no timeout at all */
		{ { "drain", "/", "--timeout", "inf" }, 2, "'inf'" },
		{ { "drain", "/", "/tmp" }, 2, "one MOUNT" },
		{ { "drain", "/proc" }, 2, "'/proc' is not a ckptfs mount" },
		{ { "drain", "/no/such/dir" }, 2, "/no/such/dir" },
		{ { "flush", "/" }, 2, "MOUNT and PATH" },
		{ { "flush", "/", "" }, 2, "MOUNT and PATH" },
		{ { "drain", "/", "-t", "5" }, 2, "unknown option '-t'" },
		{ { "drain", "/", "--timeout", "1e2" }, 2, "'1e2'" },	/* decimal only */
		{ { "skip", "/", "0" }, 2, "not '0'" },
		{ { "hash", "--" }, 2, "at least one FILE" },
		{ { "skip", "/", "18446744073709551616" }, 2, "not '18446744073709551616'" },
	};
	struct ct_result r;

	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		const char *argv[6] = { ct_tool("ckptfs-ctl") };
		char what[128];
		int n = 1;
		for (const char *const *a = cases[i].argv; *a && n < 5; a++)
			argv[n++] = *a;
		snprintf(what, sizeof(what), "ckptfs-ctl %s %s", argv[1] ? argv[1] : "",
			 argv[1] && argv[2] ? argv[2] : "");
		ct_run(&r, argv);
		ct_expect_status(&r, cases[i].status, what);
		ct_expect_in(r.err, cases[i].says, what);
		ASSERT_STR_EQ(r.out, "");
		ct_result_free(&r);
	}
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "help", NULL });
	ct_expect_status(&r, 0, "ckptfs-ctl help");
	ct_expect_in(r.out, "drain MOUNT", "ckptfs-ctl help");
	ASSERT_STR_EQ(r.err, "");
	ct_result_free(&r);
}

int main(void)
{
	usage_errors();
	tm_require_fuse();
	slow_backend();
	stalled_backend();
	failing_backend();
	return 0;
}
