/*
 * manifest_log.c — the manifest log at the API level (no mount):
 *
 *  - framing and scan: a torn tail, garbage in the middle, an oversized
 *    length field, a line too long to be a record, a record claiming a huge
 *    length at the end, header fields sscanf used to accept (upper case,
 *    signs, blanks), a length that disagrees with the line, a raw newline in
 *    a payload — each classified as torn or corrupt, the valid records
 *    around them read, and the next mount cutting exactly the torn tail;
 *  - a scan that is linear: a 16 MiB log of lines each claiming a length
 *    that ends on a later line's newline (a parser that trusts the length
 *    hashes ~64 GiB; this one must finish well within the test's timeout);
 *  - compaction changes no answer: over a history of three mounts of one
 *    node (clean, crashed, crashed with records not yet durable) and a
 *    second node whose files the first removes and moves, `ckptfs-ctl
 *    verify` says the same before and after, and the next mount's recovery
 *    finds the same thing; and the log shrinks;
 *  - compaction interrupted at every step (temp open, first write, a half
 *    write, fdatasync, rename, directory fsync) by a crash (CKPTFS_FAULT
 *    err=kill) and by an error (err=EIO): the next mount recovers the same
 *    prefix and verify gives the same verdicts as without compaction, and
 *    no temp file is left behind;
 *  - a node's wall clock stepped back between two of its records (a file
 *    written, then renamed 1 s "earlier"): verify replays that node's log
 *    in its order, so the file is OK at its new name (it was UNTRACKED
 *    there and MISSING at the old one).
 */
#include "tests/integrity/mlog.h"
#include "backend/bsys.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

/* ---- framing --------------------------------------------------------------- */

/* A framed record for payload p (as docs/manifest.md says), malloc'd. */
static char *frame(const char *p)
{
	char *out;
	if (asprintf(&out, "C1 %08zx %016llx %s\n", strlen(p), (unsigned long long)XXH3_64bits(p, strlen(p)), p) < 0)
		abort();
	return out;
}

static void put_bytes(const char *path, const char *s, size_t n)
{
	int fd = (int)CHECK_SYS(open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644));
	ASSERT_EQ(write(fd, s, n), (ssize_t)n);
	close(fd);
}

struct scanned {
	struct manifest_scan s;
	int count;
	char last[256];
};

static int count_cb(void *arg, const char *p, size_t len, uint64_t off)
{
	struct scanned *x = arg;
	x->count++;
	snprintf(x->last, sizeof(x->last), "%.*s", (int)len, p);
	return 0;
}

static struct scanned scan_file(const char *path)
{
	struct scanned x = { 0 };
	int fd = (int)CHECK_SYS(open(path, O_RDONLY));
	ASSERT_EQ(manifest_scan_fd(fd, count_cb, &x, &x.s), 0);
	close(fd);
	return x;
}

static void framing(void)
{
	char dir[PATH_MAX], path[PATH_MAX + 16];
	struct strbuf b = { 0 };
	char *r1 = frame("{\"t\": \"a\", \"m\": \"x\"}"), *r2 = frame("{\"t\": \"b\", \"m\": \"x\"}");
	struct scanned x;

	ml_scratch(dir, sizeof(dir), "mlog-framing");
	snprintf(path, sizeof(path), "%s/log", dir);

	/* Torn tail: half a record at the end. */
	sb_printf(&b, "%s%s%.20s", r1, r2, r1);
	put_bytes(path, b.s, b.len);
	x = scan_file(path);
	ASSERT_EQ(x.count, 2);
	ASSERT_EQ(x.s.good_end, strlen(r1) + strlen(r2));
	ASSERT_EQ(x.s.size - x.s.good_end, 20);
	ASSERT_EQ(x.s.corrupt_records, 0);

	/* Garbage in the middle: corrupt, and the record after it is read. */
	b.len = 0;
	sb_printf(&b, "%sgarbage that is no record\n%s", r1, r2);
	put_bytes(path, b.s, b.len);
	x = scan_file(path);
	ASSERT_EQ(x.count, 2);
	ASSERT_EQ(x.s.corrupt_records, 1);
	ASSERT_EQ(x.s.good_end, x.s.size);
	ASSERT_STR_EQ(x.last, "{\"t\": \"b\", \"m\": \"x\"}");

	/* An oversized length field, and header fields sscanf would have taken. */
	static const char *const bad[] = {
		"C1 ffffffff 0000000000000000 {}\n",		/* 4 GiB claimed */
		"C1 00100001 0000000000000000 {}\n",		/* one byte over the cap */
		"C1 0000000A 0000000000000000 0123456789\n",	/* upper case */
		"C1 +000000a 0000000000000000 0123456789\n",	/* a sign */
		"C1  000000a 0000000000000000 0123456789\n",	/* a blank */
		"C1 00000003 0000000000000000 {}\n",		/* length is not the line's */
	};
	for (size_t i = 0; i < CKPT_ARRAY_LEN(bad); i++) {
		b.len = 0;
		sb_printf(&b, "%s%s%s", r1, bad[i], r2);
		put_bytes(path, b.s, b.len);
		x = scan_file(path);
		if (x.count != 2 || x.s.corrupt_records != 1)
			FAILF("line %zu (%s): %d records, %llu corrupt", i, bad[i], x.count,
			      (unsigned long long)x.s.corrupt_records);
	}
	/* A valid hash over a payload holding a raw newline: two bad lines, not a record. */
	const char *nl = "{\"t\": \"a\nb\"}";
	b.len = 0;
	sb_printf(&b, "%sC1 %08zx %016llx %s\n%s", r1, strlen(nl),
		  (unsigned long long)XXH3_64bits(nl, strlen(nl)), nl, r2);
	put_bytes(path, b.s, b.len);
	x = scan_file(path);
	ASSERT_EQ(x.count, 2);
	ASSERT_EQ(x.s.corrupt_records, 2);

	/* A line far longer than any record (3 MiB, no newline until its end). */
	b.len = 0;
	sb_printf(&b, "%sC1 ", r1);
	for (int i = 0; i < 3 * 1024; i++)
		sb_printf(&b, "%01024d", i);
	sb_printf(&b, "\n%s", r2);
	put_bytes(path, b.s, b.len);
	x = scan_file(path);
	ASSERT_EQ(x.count, 2);
	ASSERT_EQ(x.s.corrupt_records, 1);
	ASSERT_EQ(x.s.good_end, x.s.size);

	/* A record claiming a huge length at the very end: a torn tail, nothing allocated for it. */
	b.len = 0;
	sb_printf(&b, "%s%sC1 ffffffff 0123456789abcdef {\"t\": \"file\", \"pa", r1, r2);
	put_bytes(path, b.s, b.len);
	x = scan_file(path);
	ASSERT_EQ(x.count, 2);
	ASSERT_EQ(x.s.corrupt_records, 0);
	ASSERT_EQ(x.s.good_end, strlen(r1) + strlen(r2));

	/* The framing check alone refuses a line without its newline. */
	const char *payload;
	size_t plen;
	ASSERT_TRUE(manifest_record_check(r1, strlen(r1), &payload, &plen));
	ASSERT_TRUE(!manifest_record_check(r1, strlen(r1) - 1, &payload, &plen));

	sb_free(&b);
	free(r1);
	free(r2);
	const char *rm[] = { "rm", "-rf", dir, NULL };
	tm_run(rm, NULL);
	printf("framing: torn, corrupt, oversized and malformed lines classified\n");
}

/* The next mount cuts a torn tail and counts corruption, and appends after it. */
static void open_cuts_torn_tail(void)
{
	char root[PATH_MAX];
	struct mlog l;
	struct scanned x;
	const char *tail = "C1 ffffffff 0123456789abcdef {\"t\": \"fi";

	ml_scratch(root, sizeof(root), "mlog-torn");
	ml_open(&l, root, "n1", "aaaaaaaaaaa1");
	ml_file(&l, "a", "A", true);
	ml_durable(&l);
	ml_close(&l);
	const char *log = ml_log_path(root, "n1");
	x = scan_file(log);
	int fd = (int)CHECK_SYS(open(log, O_WRONLY | O_APPEND));
	ASSERT_EQ(write(fd, "junk line\n", 10), 10);
	close(fd);
	ml_open(&l, root, "n1", "aaaaaaaaaaa2");	/* junk at the end: torn, cut */
	ASSERT_EQ(l.rep.torn_bytes, 10);
	ASSERT_EQ(l.rep.corrupt_records, 0);
	ml_close(&l);
	fd = (int)CHECK_SYS(open(log, O_WRONLY | O_APPEND));
	ASSERT_EQ(write(fd, tail, strlen(tail)), (ssize_t)strlen(tail));
	close(fd);
	ml_open(&l, root, "n1", "aaaaaaaaaaa3");
	ASSERT_EQ(l.rep.torn_bytes, strlen(tail));
	ASSERT_TRUE(l.rep.previous && !l.rep.unclean);
	ml_file(&l, "b", "B", true);
	ml_durable(&l);
	ml_close(&l);
	x = scan_file(log);
	ASSERT_EQ(x.s.good_end, x.s.size);
	ASSERT_EQ(x.s.corrupt_records, 0);
	char *v = ml_verdicts(root);
	ASSERT_STR_EQ(v, "OK a\nOK b\n");
	free(v);
	const char *rm[] = { "rm", "-rf", root, NULL };
	tm_run(rm, NULL);
	printf("open: torn tails cut (%zu and 10 bytes), appends go on after them\n", strlen(tail));
}

/* Lines that each claim to run to the end of the file: linear, or the test times out. */
static void linear_scan(void)
{
	char dir[PATH_MAX], path[PATH_MAX + 16];
	const size_t line = 256, lines = 65536, size = line * lines;
	char *buf = malloc(size);
	struct scanned x;

	ml_scratch(dir, sizeof(dir), "mlog-linear");
	snprintf(path, sizeof(path), "%s/log", dir);
	for (size_t i = 0; i < lines; i++) {
		char *p = buf + i * line;
		/* The claimed end is a later line's newline: a parser trusting it hashes ~1 MiB. */
		size_t claim = CKPT_MIN(lines - i, (size_t)4096) * line - 30;
		snprintf(p, 30, "C1 %08zx 0123456789abcdef ", claim);
		memset(p + 29, 'x', line - 30);
		p[line - 1] = '\n';
	}
	put_bytes(path, buf, size);
	uint64_t t0 = mono_ms();
	x = scan_file(path);
	ASSERT_EQ(x.count, 0);
	ASSERT_EQ(x.s.size, size);
	ASSERT_EQ(x.s.good_end, 0);
	printf("linear scan: %zu MiB of lines claiming long lengths read in %llu ms\n", size >> 20,
	       (unsigned long long)(mono_ms() - t0));
	free(buf);
	const char *rm[] = { "rm", "-rf", dir, NULL };
	tm_run(rm, NULL);
}

/* ---- a history, and compaction ------------------------------------------------ */

/*
 * Node n2 writes files that node n1 later unlinks and moves; n1 has a clean
 * mount A (files, a directory rename, links, an exchange, a voided record,
 * removals of its own and of n2's files), a mount B that crashed with
 * operations in flight, and a mount C (which recovered B) whose last
 * records are not durable yet.  Mount C is left open in a child that
 * crashes: the backend at root then holds what a crash leaves.
 */
static void history(const char *root)
{
	struct mlog l;

	ml_open(&l, root, "n2", "bbbbbbbbbbb1");
	ml_file(&l, "n2/gone", "G", true);
	ml_file(&l, "n2/dir/y", "Y1", true);
	ml_file(&l, "shared/s", "S1", true);
	ml_durable(&l);
	ml_close(&l);

	ml_open(&l, root, "n1", "aaaaaaaaaaa1");
	ml_file(&l, "d1/a", "A1", true);
	ml_file(&l, "d1/b", "B1", true);
	ml_durable(&l);
	ml_file(&l, "tmp/x", "X1", true);
	ml_rename(&l, "tmp", "ckpt", false, true);	/* a directory of this node's files */
	ml_durable(&l);
	ml_file(&l, "f", "F1", true);
	ml_link(&l, "f", "g", true);
	ml_unlink(&l, "f", true);
	ml_durable(&l);
	ml_rename(&l, "d1/a", "d1/a2", false, true);
	ml_rename(&l, "d1/b", "g", true, true);		/* exchange: d1/b F1, g B1 */
	ml_durable(&l);
	ml_file(&l, "old/o1", "O1", true);
	ml_file(&l, "old/o2", "O2", true);
	ml_unlink(&l, "old/o1", true);
	ml_unlink(&l, "old/o2", true);
	ml_rmdir(&l, "old", true);
	ml_durable(&l);
	ml_unlink(&l, "n2/gone", true);			/* another node's file */
	ml_durable(&l);
	uint64_t v = ml_file(&l, "v", "V", false);	/* failed for good, skipped */
	ml_void(&l, v);
	ml_file(&l, "w", "W1", false);
	ml_put(root, "w", "WRONG");			/* not what was published */
	ml_durable(&l);
	ml_file(&l, "d1/a2", "A2", true);		/* a new version */
	ml_rename(&l, "n2/dir", "moved", false, true);	/* another node's directory */
	ml_durable(&l);
	ml_close(&l);

	pid_t pid = fork();
	if (pid == 0) {				/* mount B: crashes in flight */
		ml_open(&l, root, "n1", "aaaaaaaaaaa2");
		ml_intent(&l, "c1");
		l.seq--;
		ml_file(&l, "c1", "C1", true);
		ml_durable(&l);
		ml_intent(&l, "c2");
		l.seq--;
		ml_file(&l, "c2", "C2", true);		/* applied, not yet marked durable */
		ml_intent(&l, "c3");
		l.seq--;
		ml_file(&l, "c3", "C3", false);		/* recorded, never applied */
		ml_intent(&l, "c4");			/* queued only */
		manifest_sync(&l.m);
		_exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);

	pid = fork();
	if (pid == 0) {				/* mount C: recovers B, then crashes */
		ml_open(&l, root, "n1", "aaaaaaaaaaa3");
		if (!l.rep.unclean || l.rep.prev_seq_applied != 2 || l.rep.inflight_files != 2)
			_exit(3);
		ml_file(&l, "e1", "E1", false);		/* durable, then lost on the backend */
		ml_durable(&l);
		ml_file(&l, "e2", "E2", true);
		ml_intent(&l, "e3");
		manifest_sync(&l.m);
		_exit(0);
	}
	waitpid(pid, &st, 0);
	ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	ml_put(root, "stray", "untracked");
}

static const char expected_verdicts[] =
	"OK c1\nOK c2\nOK ckpt/x\nOK d1/a2\nOK d1/b\nMISSING e1\nOK e2\nOK g\n"
	"OK moved/y\nOK shared/s\nUNTRACKED stray\nMISMATCH w\n";

/* What the next mount's recovery finds, and verify then, as one string. */
static char *next_mount(const char *root, const char *id)
{
	struct mlog l;
	char *v, *out;

	ml_open(&l, root, "n1", id);
	int n = asprintf(&out, "previous=%d unclean=%d prev=%s applied=%llu inflight=%llu torn=%llu",
			 l.rep.previous, l.rep.unclean, l.rep.prev_mount_id,
			 (unsigned long long)l.rep.prev_seq_applied,
			 (unsigned long long)l.rep.inflight_files, (unsigned long long)l.rep.torn_bytes);
	ASSERT_TRUE(n > 0);
	ml_close(&l);
	v = ml_verdicts(root);
	char *both;
	ASSERT_TRUE(asprintf(&both, "%s\n%s", out, v) > 0);
	free(out);
	free(v);
	return both;
}

static int count_type(const char *log, const char *type)
{
	struct it_log l;
	ASSERT_EQ(it_log_read(log, &l), 0);
	int n = it_log_count_type(&l, type, NULL);
	it_log_free(&l);
	return n;
}

static void compaction_same_answers(const char *tmpl)
{
	char before[PATH_MAX], after[PATH_MAX];
	char *v0, *v1, *r0, *r1;
	struct it_log l0, l1;

	snprintf(before, sizeof(before), "%.4000s.before", tmpl);
	snprintf(after, sizeof(after), "%.4000s.after", tmpl);
	ml_copy_tree(tmpl, before);
	ml_copy_tree(tmpl, after);
	v0 = ml_verdicts(before);
	ASSERT_STR_EQ(v0, expected_verdicts);

	/* Compact "after" as a mount that recovered C and is itself mid-way. */
	pid_t pid = fork();
	if (pid == 0) {
		struct mlog l;
		ml_open(&l, after, "n1", "aaaaaaaaaaa4");
		if (manifest_compact(&l.m, 0) != 0 || l.m.compactions != 1)
			_exit(3);
		_exit(0);	/* a crash right after it */
	}
	int st;
	waitpid(pid, &st, 0);
	ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* The same history without the compaction. */
	pid = fork();
	if (pid == 0) {
		struct mlog l;
		ml_open(&l, before, "n1", "aaaaaaaaaaa4");
		_exit(0);
	}
	waitpid(pid, &st, 0);
	ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);

	ASSERT_EQ(it_log_read(ml_log_path(before, "n1"), &l0), 0);
	ASSERT_EQ(it_log_read(ml_log_path(after, "n1"), &l1), 0);
	printf("compaction: %zu records (%llu bytes) -> %zu (%llu bytes)\n", l0.n,
	       (unsigned long long)l0.size, l1.n, (unsigned long long)l1.size);
	ASSERT_LT(l1.n, l0.n);
	ASSERT_EQ(l1.bad, 0);
	ASSERT_EQ(count_type(ml_log_path(after, "n1"), "compacted"), 1);
	/* What a compacted log keeps of the old mounts: one record per live file. */
	ASSERT_EQ(it_log_count_type(&l1, "file", "d1/a2"), 1);
	/* f's record stays, before the link that gives g its contents: a link
	 * group is kept as links (later versions reach all its names). */
	ASSERT_EQ(it_log_count_type(&l1, "file", "f"), 1);
	ASSERT_EQ(it_log_count_type(&l1, "link", "f"), 1);
	ASSERT_EQ(it_log_count_type(&l1, "intent", NULL), 0);
	it_log_free(&l0);
	it_log_free(&l1);

	v1 = ml_verdicts(after);
	ASSERT_STR_EQ(v1, v0);
	/* The next mount recovers the same from both, and verify agrees after it. */
	r0 = next_mount(before, "aaaaaaaaaaa5");
	r1 = next_mount(after, "aaaaaaaaaaa5");
	ASSERT_STR_EQ(r1, r0);
	printf("compaction: verify and recovery agree: %s", r0);

	/*
	 * A compacted log compacted again, after a mount that works on the
	 * snapshot's files: removes a directory of them, renames one, moves a
	 * directory, writes new ones.  Same answers, and one file record per
	 * file verify expects (nothing stale survives in the snapshot).
	 */
	for (int i = 0; i < 2; i++) {
		const char *root = i ? after : before;
		pid = fork();
		if (pid == 0) {
			struct mlog l;
			ml_open(&l, root, "n1", "aaaaaaaaaaa6");
			ml_unlink(&l, "ckpt/x", true);
			ml_rmdir(&l, "ckpt", true);
			ml_rename(&l, "d1/a2", "d1/a3", false, true);
			ml_rename(&l, "d1", "d2", false, true);
			ml_file(&l, "d2/new", "N1", true);
			ml_unlink(&l, "c1", true);
			ml_durable(&l);
			if (i && (manifest_compact(&l.m, l.seq) != 0 || l.m.compactions != 1))
				_exit(3);
			ml_close(&l);
			_exit(0);
		}
		waitpid(pid, &st, 0);
		ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	free(v0);
	free(v1);
	v0 = ml_verdicts(before);
	v1 = ml_verdicts(after);
	ASSERT_STR_EQ(v1, v0);
	ASSERT_EQ(it_log_read(ml_log_path(after, "n1"), &l1), 0);
	/* Files verify expects, less the two whose records are node n2's (moved/y, shared/s). */
	int expected = it_verdict_count(v1, "OK") + it_verdict_count(v1, "MISMATCH") +
		       it_verdict_count(v1, "MISSING") - 2;
	if (it_log_count_type(&l1, "file", NULL) != expected) {
		for (size_t i = 0; i < l1.n; i++)
			fprintf(stderr, "%s\n", l1.r[i].payload);
		FAILF("%d file records in the compacted log, for %d files verify expects:\n%s",
		      it_log_count_type(&l1, "file", NULL), expected, v1);
	}
	ASSERT_EQ(it_log_count_type(&l1, "compacted", NULL), 1);
	it_log_free(&l1);
	printf("compaction of a compacted log: same verdicts, one file record per file of n1's (%d)\n",
	       expected);
	free(v0);
	free(v1);
	free(r0);
	free(r1);
	if (!getenv("CKPTFS_TEST_KEEP")) {
		const char *rm[] = { "rm", "-rf", before, after, NULL };
		tm_run(rm, NULL);
	}
}

/* ---- compaction interrupted ----------------------------------------------------- */

struct step {
	const char *name;
	const char *rule;	/* err=%s is appended */
};

static const struct step steps[] = {
	{ "open the temp file", "op=openat,name=manifest.log.tmp" },
	{ "first write", "op=append" },
	{ "after a half write", "op=append,err=short,count=1;op=append,after=1" },
	{ "fdatasync the temp file", "op=fdatasync" },
	{ "rename over manifest.log", "op=rename,name=manifest.log" },
	{ "fsync the directory", "op=fsync" },
	{ NULL, NULL },		/* no fault: the compaction completes */
};

/*
 * A child opens mount D over a copy of tmpl (recovering C), writes records
 * of its own (some not durable), compacts with `rule` (err=kill or EIO)
 * installed, then, if alive, writes one more record and crashes.  Returns
 * how it ended: 'K' killed, 'E' compaction failed, 'C' compacted.
 */
static char interrupted(const char *dir, const char *rule)
{
	int pipefd[2];
	char what = '?';

	CHECK_SYS(pipe(pipefd));
	pid_t pid = fork();
	if (pid == 0) {
		struct mlog l;
		close(pipefd[0]);
		ml_open(&l, dir, "n1", "aaaaaaaaaaa4");
		ml_file(&l, "p1", "P1", true);
		ml_durable(&l);
		ml_file(&l, "p2", "P2", true);
		ml_intent(&l, "p3");
		manifest_sync(&l.m);
		if (rule) {
			setenv("CKPTFS_FAULT", rule, 1);
			if (bsys_faults_from_env() < 0)
				_exit(4);
		}
		int r = manifest_compact(&l.m, 1);
		char c = r == 0 ? 'C' : 'E';
		if (write(pipefd[1], &c, 1) != 1)
			_exit(5);
		ml_file(&l, "p4", "P4", true);		/* the log in use takes it */
		if (manifest_sync(&l.m) < 0)
			ASSERT_EQ(manifest_sync(&l.m), 0);	/* a failed dir fsync is retried */
		_exit(0);
	}
	close(pipefd[1]);
	int st;
	waitpid(pid, &st, 0);
	if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
		what = 'K';
	else if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && read(pipefd[0], &what, 1) != 1)
		what = '?';
	close(pipefd[0]);
	return what;
}

static void compaction_interrupted(const char *tmpl)
{
	char dir[PATH_MAX], rule[256], *ref_kill, *ref_done;

	/* References: the same children, without faults, with and without compaction's end state. */
	snprintf(dir, sizeof(dir), "%.4000s.ref", tmpl);
	ml_copy_tree(tmpl, dir);
	ASSERT_EQ(interrupted(dir, NULL), 'C');
	ref_done = next_mount(dir, "aaaaaaaaaaa5");
	const char *rm[] = { "rm", "-rf", dir, NULL };
	tm_run(rm, NULL);
	ml_copy_tree(tmpl, dir);
	/* A crash before compaction ends = the state without p4. */
	ASSERT_EQ(interrupted(dir, "op=openat,name=manifest.log.tmp,err=kill"), 'K');
	ref_kill = next_mount(dir, "aaaaaaaaaaa5");
	tm_run(rm, NULL);
	/* p3's intent has no record after it: in flight, whatever seq p4 has (per-user order). */
	ASSERT_TRUE(strstr(ref_done, "applied=4 inflight=1") != NULL);
	ASSERT_TRUE(strstr(ref_kill, "applied=2 inflight=1") != NULL);

	for (const struct step *s = steps; s->name; s++) {
		for (int kill = 1; kill >= 0; kill--) {
			char got;
			char *r;
			/* Each rule's last clause carries the error. */
			snprintf(rule, sizeof(rule), "%s,err=%s", s->rule, kill ? "kill" : "EIO,count=1");
			ml_copy_tree(tmpl, dir);
			got = interrupted(dir, rule);
			r = next_mount(dir, "aaaaaaaaaaa5");
			char tmp[PATH_MAX + 64];
			snprintf(tmp, sizeof(tmp), "%s/.ckptfs/nodes/n1/manifest.log.tmp", dir);
			if (file_exists(tmp))
				FAILF("%s: a temp file is left after the next mount", s->name);
			/* A kill ends the child; an error at the dir fsync still compacts. */
			char want = kill ? 'K' : !strcmp(s->rule, "op=fsync") ? 'C' : 'E';
			if (got != want)
				FAILF("%s (%s): the child ended '%c', expected '%c'", s->name, rule, got, want);
			const char *ref = kill ? ref_kill : ref_done;
			if (strcmp(r, ref) != 0)
				FAILF("%s (%s): after it, the next mount and verify say\n%s\ninstead of\n%s",
				      s->name, rule, r, ref);
			free(r);
			tm_run(rm, NULL);
		}
		printf("compaction interrupted at '%s': crash and error both leave a log read correctly\n",
		       s->name);
	}
	free(ref_kill);
	free(ref_done);
}

static void clock_stepped_back(void)
{
	char root[PATH_MAX], hex[33];
	struct mlog l;

	ml_scratch(root, sizeof(root), "mlog-clock");
	ml_open(&l, root, "n1", "aaaaaaaaaaa1");
	uint64_t t = ml_time();
	td_digest_buf("AAAA", 4, hex);
	ml_rec(&l, "{\"t\": \"file\", \"m\": \"aaaaaaaaaaa1\", \"seq\": 1, \"try\": 0, "
		   "\"time\": %llu, \"path\": \"ckpt.tmp\", \"size\": 4, \"xxh3\": \"%s\"}",
	       (unsigned long long)t, hex);
	ml_rec(&l, "{\"t\": \"rename\", \"m\": \"aaaaaaaaaaa1\", \"seq\": 2, \"try\": 0, "
		   "\"time\": %llu, \"path\": \"ckpt.tmp\", \"to\": \"ckpt\", \"exchange\": false}",
	       (unsigned long long)(t - 1000000000ull));
	ml_put(root, "ckpt", "AAAA");
	l.seq = 2;
	ml_durable(&l);
	ml_close(&l);
	char *v = ml_verdicts(root);
	if (!strstr(v, "OK ckpt\n") || strstr(v, "ckpt.tmp"))
		FAILF("a rename recorded after a clock step back, verify says:\n%s", v);
	free(v);
	printf("a clock stepped back between a node's records: verify keeps its log's order\n");
	const char *rm[] = { "rm", "-rf", root, NULL };
	tm_run(rm, NULL);
}

int main(void)
{
	char tmpl[PATH_MAX];

	cu_require_root();
	umask(022);
	framing();
	open_cuts_torn_tail();
	linear_scan();
	clock_stepped_back();
	ml_scratch(tmpl, sizeof(tmpl), "mlog-history");
	history(tmpl);
	compaction_same_answers(tmpl);
	compaction_interrupted(tmpl);
	const char *rm[] = { "rm", "-rf", tmpl, NULL };
	tm_run(rm, NULL);
	return 0;
}
