/*
 * stat_cli.c — ckptfs-stat's output, format by format: golden structure,
 * never golden numbers.
 *
 * Two mounts: M1 holds a file whose publish fails (EIO) while a flag file
 * exists, so it has a pending file and a degraded backend; M2 is healthy.
 *  - default: per mount, a header line "MOUNT  (backend DIR)" then the
 *    lines cache:, held:, durable:, pending:, rates:, sequence:,
 *    backpressure:, backend:, io:, descriptors:, fuse:, reads:, node: in that order, each matched by a
 *    pattern (bars, percentages, units); reports of two mounts separated
 *    by one blank line; "backend: ok" on M2, "BLOCKED at seq" on M1;
 *  - --json: exactly one strict JSON object per mount per line, in order;
 *  - --prometheus: every line is a HELP, a TYPE or a sample
 *    `ckptfs_<name>{mount="..."} <number>`; each metric has one HELP and
 *    one TYPE before its samples, and all lines of a metric form one group
 *    (the text format's rule), with one sample per mount;
 *  - --files: the pending file, in the table and as JSON lines;
 *  - `--watch 1` under `timeout 3`: killed by timeout, at least 2 reports;
 *  - no MOUNT: both mounts are shown;
 *  - a third mount whose daemon is stopped (SIGSTOP): `--timeout 1` without
 *    MOUNT still shows M2, names the silent mount on stderr and exits 1
 *    within seconds; named as MOUNT, the same (found without touching it);
 *  - a path that is not a ckptfs mount (a plain directory, a directory
 *    inside a mount, a missing path): exit 2, a message naming the path;
 *    bad options: exit 2; --help: exit 0.
 */
#include "tests/ctl/ctl_util.h"

#include <regex.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

static struct tmount m1, m2, m3;

/* A failure stops the harness's current mount, M2 once it exists: stop M1 (and M3) too. */
static void kill_m1(void)
{
	if (m1.pid > 0)
		tm_kill(&m1);
	if (m3.pid > 0)
		tm_kill(&m3);	/* SIGKILL ends a stopped daemon too */
}

/* The lines of text (malloc'd array of malloc'd strings); count in *n. */
static char **split_lines(const char *text, size_t *n)
{
	char **v = NULL;

	*n = 0;
	for (const char *p = text; *p;) {
		size_t len = strcspn(p, "\n");
		v = realloc(v, (*n + 1) * sizeof(*v));
		v[(*n)++] = strndup(p, len);
		p += len + (p[len] == '\n');
	}
	return v;
}

static void free_lines(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static bool matches(const char *pattern, const char *line)
{
	regex_t re;
	int r;

	if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0)
		FAILF("bad test regex %s", pattern);
	r = regexec(&re, line, 0, NULL, 0);
	regfree(&re);
	return r == 0;
}

static void stat_run(struct ct_result *r, const char *a1, const char *a2, const char *a3,
		     const char *a4)
{
	const char *argv[] = { ct_tool("ckptfs-stat"), a1, a2, a3, a4, NULL };
	ct_run(r, argv);
}

/* ---- the human view ---- */

static const char *const human[] = {
	"^  cache: +\\[[#.]{30}\\] +[0-9]+%  [0-9.]+ [KMGT]?i?B of [0-9.]+ [KMGT]?i?B"
	"(, [0-9.]+ [KMGT]?i?B ready \\(pre-faulting\\))?$",
	"^  held: +dirty [0-9.]+ [KMGT]?i?B, flushing [0-9.]+ [KMGT]?i?B, clean [0-9.]+ [KMGT]?i?B$",
	"^  durable: +\\[[#.]{30}\\] +[0-9]+%  [0-9.]+ [KMGT]?i?B of [0-9.]+ [KMGT]?i?B absorbed"
	"( \\([0-9.]+ [KMGT]?i?B dropped: deleted before a close published them\\))?$",
	"^  published: +[0-9.]+ [KMGT]?i?B in durable versions, [0-9.]+ [KMGT]?i?B written to the backend$",
	"^  pending: +[0-9]+ files, [0-9]+ operations, oldest [0-9]+\\.[0-9] s$",
	"^  rates: +absorb [0-9.]+ [KMGT]?i?B/s, persist [0-9.]+ [KMGT]?i?B/s$",
	"^  sequence: +[0-9]+ durable of [0-9]+$",
	"^  backpressure: +[0-9]+ waits, [0-9]+\\.[0-9]{3} s$",
	"^  backend: +(ok \\([0-9]+ errors so far\\)|DEGRADED: .+ \\([0-9]+ errors, [0-9]+ retries\\); data stays cached"
	"|BLOCKED at seq [0-9]+: [a-z]+ .+: .+ \\(uid [0-9]+, for [0-9]+ s, [0-9]+ operations behind it\\); "
	"retrying; data stays cached .+)$",
	"^  io: +(io_uring|pwrite), fsync (durable|lazy), up [0-9]+ s$",
	"^  descriptors: +dirs [0-9]+/[0-9]+ \\([0-9]+ closed for room\\), temp files [0-9]+/[0-9]+"
	"( \\(at the cap: versions wait in the cache\\))?$",
	"^  fuse: +(/dev/fuse|io_uring \\([0-9]+ queues\\)), requests up to [0-9]+ KiB"
	"(, [0-9]+% of writes taken without a copy)?$",
	"^  reads: +passthrough (on|off) \\([0-9]+ opens\\), direct (on|off) \\([0-9]+ opens\\)$",
	"^  node: +[A-Za-z0-9._-]+, (no peers|peers [0-9]+/[0-9]+ seen, .+), lease (held|lost)$",
};
#define BACKEND_LINE 8	/* human[] index of the backend: line */
#define HUMAN_LINES (1 + sizeof(human) / sizeof(*human))

/* Check one report starting at lines[at]; its backend line must contain `backend`. */
static void check_report(char **lines, size_t n, size_t at, struct tmount *m, const char *backend)
{
	char head[2 * PATH_MAX + 32], real[PATH_MAX], breal[PATH_MAX];

	if (at + HUMAN_LINES > n)
		FAILF("report of %s is cut short at line %zu of %zu", m->mnt, at, n);
	snprintf(head, sizeof(head), "%s  (backend %s)", realpath(m->mnt, real),
		 realpath(m->backend, breal));
	ASSERT_STR_EQ(lines[at], head);
	for (size_t i = 0; i < HUMAN_LINES - 1; i++)
		if (!matches(human[i], lines[at + 1 + i]))
			FAILF("line %zu of the report does not match %s:\n%s", at + 2 + i, human[i],
			      lines[at + 1 + i]);
	ct_expect_in(lines[at + 1 + BACKEND_LINE], backend, "the backend: line");
}

static void check_human(void)
{
	struct ct_result r;
	size_t n;
	char **lines;

	stat_run(&r, m2.mnt, NULL, NULL, NULL);
	ct_expect_status(&r, 0, "ckptfs-stat M2");
	ASSERT_STR_EQ(r.err, "");
	lines = split_lines(r.out, &n);
	ASSERT_EQ(n, HUMAN_LINES);
	check_report(lines, n, 0, &m2, "ok (0 errors so far)");
	free_lines(lines, n);
	ct_result_free(&r);

	stat_run(&r, m1.mnt, m2.mnt, NULL, NULL);
	ct_expect_status(&r, 0, "ckptfs-stat M1 M2");
	lines = split_lines(r.out, &n);
	ASSERT_EQ(n, 2 * HUMAN_LINES + 1);
	check_report(lines, n, 0, &m1, "BLOCKED at seq");	/* its publish is refused */
	ASSERT_STR_EQ(lines[HUMAN_LINES], "");
	check_report(lines, n, HUMAN_LINES + 1, &m2, "ok");
	free_lines(lines, n);
	ct_result_free(&r);
}

/* ---- JSON ---- */

/* Parse each line of out: the "mount" of each object, in order, must be mounts[]. */
static void check_json_lines(const char *out, struct tmount *const *mounts, size_t nm)
{
	struct json_obj *objs;
	size_t n = ct_parse_lines(out, &objs, "ckptfs-stat --json");
	char real[PATH_MAX];

	ASSERT_EQ(n, nm);
	for (size_t i = 0; i < n; i++) {
		ASSERT_EQ(ct_num(&objs[i], "version"), 1);
		ASSERT_STR_EQ(ct_str(&objs[i], "mount"), realpath(mounts[i]->mnt, real));
	}
	ct_lines_free(objs, n);
}

static void check_json(void)
{
	struct ct_result r;

	stat_run(&r, "--json", m1.mnt, m2.mnt, NULL);
	ct_expect_status(&r, 0, "ckptfs-stat --json M1 M2");
	check_json_lines(r.out, (struct tmount *const[]){ &m1, &m2 }, 2);
	ct_result_free(&r);
}

/* ---- Prometheus ---- */

struct family {
	char name[96];
	int help, type, samples;
	size_t first, last;	/* line numbers of its first and last lines */
};

static struct family *family_of(struct family *f, size_t *nf, const char *name, size_t line)
{
	for (size_t i = 0; i < *nf; i++)
		if (!strcmp(f[i].name, name)) {
			f[i].last = line;
			return &f[i];
		}
	memset(&f[*nf], 0, sizeof(*f));
	snprintf(f[*nf].name, sizeof(f->name), "%s", name);
	f[*nf].first = f[*nf].last = line;
	return &f[(*nf)++];
}

static void check_prometheus(void)
{
	static const char *const help_re = "^# HELP ckptfs_[a-z0-9_]+ [^ ].*$";
	static const char *const type_re = "^# TYPE ckptfs_[a-z0-9_]+ (gauge|counter)$";
	static const char *const sample_re =
		"^ckptfs_[a-z0-9_]+\\{mount=\"([^\"\\\\]|\\\\.)*\"\\} -?[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?$";
	struct family fam[128];
	size_t nf = 0, n;
	struct ct_result r;
	char **lines;

	stat_run(&r, "--prometheus", m1.mnt, m2.mnt, NULL);
	ct_expect_status(&r, 0, "ckptfs-stat --prometheus M1 M2");
	ASSERT_TRUE(r.out[0] && r.out[strlen(r.out) - 1] == '\n');
	lines = split_lines(r.out, &n);
	for (size_t i = 0; i < n; i++) {
		const char *l = lines[i];
		char name[96];
		struct family *f;
		if (matches(help_re, l) || matches(type_re, l)) {
			sscanf(l + 7, "%95s", name);
			f = family_of(fam, &nf, name, i);
			if (f->samples)
				FAILF("line %zu: %s after samples of %s", i + 1, l[2] == 'H' ? "HELP" : "TYPE",
				      name);
			if (l[2] == 'H')
				f->help++;
			else
				f->type++;
		} else if (matches(sample_re, l)) {
			sscanf(l, "%95[a-z0-9_]", name);
			f = family_of(fam, &nf, name, i);
			f->samples++;
		} else {
			FAILF("line %zu is not in the Prometheus text format: %s", i + 1, l);
		}
		if (nf == sizeof(fam) / sizeof(*fam))
			FAILF("too many metrics");
	}
	ASSERT_GE(nf, 10);
	for (size_t i = 0; i < nf; i++) {
		const struct family *f = &fam[i];
		if (f->help != 1 || f->type != 1 || f->samples != 2)
			FAILF("%s: %d HELP, %d TYPE, %d samples; expected 1, 1 and 2 (one per mount)",
			      f->name, f->help, f->type, f->samples);
		/* One group: no other metric's line between its first and last. */
		for (size_t j = 0; j < nf; j++)
			if (j != i && fam[j].first > f->first && fam[j].first < f->last)
				FAILF("the lines of %s (lines %zu-%zu) are not one group: %s starts at "
				      "line %zu\n%s",
				      f->name, f->first + 1, f->last + 1, fam[j].name, fam[j].first + 1,
				      r.out);
	}
	ct_expect_in(r.out, "ckptfs_degraded{mount=", "--prometheus");
	free_lines(lines, n);
	ct_result_free(&r);
}

/* ---- --files, --watch, every mount ---- */

static void check_files(void)
{
	struct ct_result r;
	struct json_obj *objs;
	size_t n, nfiles = 0;

	stat_run(&r, "--files", m1.mnt, NULL, NULL);
	ct_expect_status(&r, 0, "ckptfs-stat --files M1");
	ASSERT_TRUE(matches("\n  STATE +SIZE +AGE  PATH\n", r.out));
	ASSERT_TRUE(matches("\n  (flushing|blocked) +[0-9.]+ [KMGT]?i?B +[0-9]+\\.[0-9]s  pending\\.bin\n", r.out));
	ct_result_free(&r);

	stat_run(&r, "--json", "--files", m1.mnt, NULL);
	ct_expect_status(&r, 0, "ckptfs-stat --json --files M1");
	n = ct_parse_lines(r.out, &objs, "ckptfs-stat --json --files");
	ASSERT_GE(n, 2);
	ASSERT_EQ(ct_num(&objs[0], "version"), 1);
	for (size_t i = 1; i < n; i++)
		if (!strcmp(ct_str(&objs[i], "path"), "pending.bin")) {
			/* Its rename fails: blocked once the backend refused it. */
			ASSERT_TRUE(!strcmp(ct_str(&objs[i], "state"), "flushing") ||
				    !strcmp(ct_str(&objs[i], "state"), "blocked"));
			ASSERT_EQ(ct_num(&objs[i], "size"), 4321);
			nfiles++;
		}
	ASSERT_EQ(nfiles, 1);
	ct_lines_free(objs, n);
	ct_result_free(&r);
}

static void check_watch(void)
{
	struct ct_result r;
	char real[PATH_MAX];
	size_t n, reports = 0;
	char **lines;

	realpath(m2.mnt, real);
	ct_run(&r, (const char *[]){ "timeout", "3", ct_tool("ckptfs-stat"), "--watch", "1", m2.mnt,
				     NULL });
	ct_expect_status(&r, 124, "timeout 3 ckptfs-stat --watch 1");
	lines = split_lines(r.out, &n);
	for (size_t i = 0; i < n; i++)
		if (!strncmp(lines[i], real, strlen(real))) {
			check_report(lines, n, i, &m2, "ok");
			reports++;
		}
	if (reports < 2)
		FAILF("--watch 1 printed %zu reports in 3 s:\n%s", reports, r.out);
	free_lines(lines, n);
	ct_result_free(&r);
}

static void check_all_mounts(void)
{
	struct ct_result r;
	struct json_obj *objs;
	char r1[PATH_MAX], r2[PATH_MAX];
	size_t n;
	int seen = 0;

	realpath(m1.mnt, r1);
	realpath(m2.mnt, r2);
	stat_run(&r, "--json", NULL, NULL, NULL);
	/* Other tests' mounts may come and go meanwhile: 1 is allowed, not 2. */
	if (r.status != 0 && r.status != 1)
		ct_expect_status(&r, 0, "ckptfs-stat --json (every mount)");
	n = ct_parse_lines(r.out, &objs, "ckptfs-stat --json (every mount)");
	for (size_t i = 0; i < n; i++) {
		seen |= !strcmp(ct_str(&objs[i], "mount"), r1) ? 1 : 0;
		seen |= !strcmp(ct_str(&objs[i], "mount"), r2) ? 2 : 0;
	}
	if (seen != 3)
		FAILF("ckptfs-stat without MOUNT does not show both mounts:\n%s", r.out);
	ct_lines_free(objs, n);
	ct_result_free(&r);
}

/* A mount whose daemon does not answer is given up, not waited for. */
static void check_hung(void)
{
	struct ct_result r;
	char r2[PATH_MAX], r3[PATH_MAX], mnt3[PATH_MAX];

	tm_start(&m3, "ctl-stat3", NULL, NULL);
	realpath(m2.mnt, r2);
	realpath(m3.mnt, r3);
	snprintf(mnt3, sizeof(mnt3), "%s", m3.mnt);
	CHECK_SYS(kill(m3.pid, SIGSTOP));

	uint64_t t0 = mono_ms();
	stat_run(&r, "--json", "--timeout", "1", NULL);
	uint64_t took = mono_ms() - t0;
	ct_expect_status(&r, 1, "ckptfs-stat --timeout 1 with a stopped mount");
	ct_expect_in(r.out, r2, "the healthy mount's report");
	ct_expect_in(r.err, r3, "the stopped mount, named");
	ct_expect_in(r.err, "does not answer", "the stopped mount's message");
	if (took > 8000)
		FAILF("ckptfs-stat took %llu ms with a 1 s timeout", (unsigned long long)took);
	ct_result_free(&r);

	t0 = mono_ms();
	stat_run(&r, "--timeout", "1", mnt3, NULL);
	took = mono_ms() - t0;
	ct_expect_status(&r, 1, "ckptfs-stat --timeout 1 STOPPED-MOUNT");
	ct_expect_in(r.err, "does not answer", "the stopped mount named as MOUNT");
	if (took > 8000)
		FAILF("ckptfs-stat MOUNT took %llu ms with a 1 s timeout", (unsigned long long)took);
	ct_result_free(&r);

	CHECK_SYS(kill(m3.pid, SIGCONT));
	tm_stop(&m3);
	m3.pid = 0;
	tm_cleanup(&m3);
}

/* ---- errors ---- */

static void expect_usage_error(const char *a1, const char *a2, const char *a3, const char *says)
{
	struct ct_result r;
	char what[PATH_MAX];

	snprintf(what, sizeof(what), "ckptfs-stat %s %s %s", a1, a2 ? a2 : "", a3 ? a3 : "");
	stat_run(&r, a1, a2, a3, NULL);
	ct_expect_status(&r, 2, what);
	ct_expect_in(r.err, says, what);
	ASSERT_STR_EQ(r.out, "");
	ct_result_free(&r);
}

static void check_errors(void)
{
	char msg[PATH_MAX + 64], sub[PATH_MAX];
	struct ct_result r;

	snprintf(msg, sizeof(msg), "'%s' is not a ckptfs mount", m1.root);
	expect_usage_error(m1.root, NULL, NULL, msg);
	snprintf(sub, sizeof(sub), "%s", tm_path(&m2, "sub"));
	CHECK_SYS(mkdir(sub, 0755));
	snprintf(msg, sizeof(msg), "'%s' is not a ckptfs mount", sub);
	expect_usage_error(m2.mnt, sub, NULL, msg);	/* one bad path spoils the call */
	expect_usage_error("/no/such/mount", NULL, NULL, "/no/such/mount");
	expect_usage_error("--bogus", m2.mnt, NULL, "usage:");
	expect_usage_error("--watch", "0", m2.mnt, "--watch needs seconds");
	expect_usage_error("--watch", "soon", m2.mnt, "'soon'");
	expect_usage_error("--watch", "nan", m2.mnt, "'nan'");
	expect_usage_error("--watch", "1e-7", m2.mnt, "'1e-7'");	/* a busy loop on the daemon */
	expect_usage_error("--watch", "1e9", m2.mnt, "'1e9'");
	expect_usage_error("--timeout", "-1", m2.mnt, "--timeout needs seconds");
	expect_usage_error("--timeout", "nan", m2.mnt, "'nan'");
	expect_usage_error("--timeout", "0x10", m2.mnt, "'0x10'");	/* decimal only */
	expect_usage_error("--timeout", "+5", m2.mnt, "'+5'");
	expect_usage_error("--watch", "0x1p-3", m2.mnt, "'0x1p-3'");

	stat_run(&r, "--help", NULL, NULL, NULL);
	ct_expect_status(&r, 0, "ckptfs-stat --help");
	ct_expect_in(r.out, "usage: ckptfs-stat", "ckptfs-stat --help");
	ct_result_free(&r);
}

int main(void)
{
	char flag[PATH_MAX];

	tm_require_fuse();
	atexit(kill_m1);
	ct_mount_flagged(&m1, "ctl-stat1", "op=rename,err=EIO,name=pending", flag);
	ct_touch(flag);
	tm_start(&m2, "ctl-stat2", NULL, NULL);
	ct_write_seeded(tm_path(&m1, "pending.bin"), 4321, 1);
	ct_write_seeded(tm_path(&m2, "done.bin"), 1234, 2);
	tm_sync(&m2);
	/* M1 is degraded once its publish has failed. */
	for (uint64_t t0 = mono_ms();; usleep(20000)) {
		struct json_obj s;
		ct_stats(&m1, &s);
		bool d = ct_bool(&s, "degraded");
		json_free(&s);
		if (d)
			break;
		if (mono_ms() - t0 > 10000)
			FAILF("M1 is not degraded 10 s after its publish began failing");
	}

	check_errors();
	check_human();
	check_json();
	check_files();
	check_all_mounts();
	check_hung();
	check_watch();
	check_prometheus();

	CHECK_SYS(unlink(flag));
	tm_stop(&m2);
	tm_stop(&m1);
	ct_check_seeded(tm_bpath(&m1, "pending.bin"), 4321, 1);
	tm_cleanup(&m1);
	tm_cleanup(&m2);
	return 0;
}
