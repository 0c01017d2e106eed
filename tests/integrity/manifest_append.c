/*
 * manifest_append.c — a failed append makes the operation not durable and
 * never leaves a half record that later records follow (issue 9 item 4),
 * at the manifest API level, with faults injected on the manifest's own
 * writes (CKPTFS_FAULT op=append), its cut-back (op=ftruncate) and its sync
 * (op=fdatasync).  Each case runs in a child, which installs the rule after
 * the mount's own records are written:
 *
 *   EIO                 the append returns -EIO; the log is byte for byte
 *                       what it was; the next append works
 *   short writes        every write halved: the append completes, whole
 *   half, then EIO      the half written is cut back; -EIO; log unchanged
 *   ... and the cut     the half record stays for now, but the next append
 *       fails too       cuts it first: a crash at that point leaves a torn
 *                       tail (cut by the next mount), never a record after
 *                       half of one
 *   ENOSPC              same as EIO, with the errno passed through
 *   fdatasync EIO       manifest_sync returns -EIO (the group is not durable)
 *
 * The publisher's side (an operation whose record failed is retried like
 * any backend error, and fsync/drain report it) is tested through the
 * mount once it lands; this file is where those cases belong.
 */
#include "tests/integrity/mlog.h"
#include "backend/bsys.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

struct logstate {
	char *bytes;
	size_t len;
	size_t records;
	uint64_t bad, valid_end;
};

static struct logstate snap(const char *path)
{
	struct logstate s = { 0 };
	struct it_log l;
	s.bytes = read_file(path, &s.len);
	ASSERT_TRUE(s.bytes != NULL);
	ASSERT_EQ(it_log_read(path, &l), 0);
	s.records = l.n;
	s.bad = l.bad;
	s.valid_end = l.valid_end;
	it_log_free(&l);
	return s;
}

static bool same(const struct logstate *a, const struct logstate *b)
{
	return a->len == b->len && !memcmp(a->bytes, b->bytes, a->len);
}

static const char rec[] = "{\"t\": \"setattr\", \"m\": \"aaaaaaaaaaa1\", \"seq\": 9, \"time\": 1, \"path\": \"p\", \"mode\": 420}";

/* In a child: open, install `rule`, run `body`; exit status 0 = the body's checks held. */
static void scenario(const char *root, const char *name, const char *rule,
		     void (*body)(struct mlog *l, const char *log))
{
	static unsigned k;
	char id[16];
	snprintf(id, sizeof(id), "aaaaaaaaab%02u", ++k % 100);
	pid_t pid = fork();
	if (pid == 0) {
		struct mlog l;
		ml_open(&l, root, "n1", id);
		ml_file(&l, "a", "A", true);
		ml_durable(&l);
		setenv("CKPTFS_FAULT", rule, 1);
		if (bsys_faults_from_env() < 0)
			FAILF("bad rule %s", rule);
		body(&l, ml_log_path(root, "n1"));
		_exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		FAILF("%s (%s): failed", name, rule);
	printf("append: %s: ok\n", name);
}

static void fails_cleanly(struct mlog *l, const char *log, int err)
{
	struct logstate before = snap(log), after;
	ASSERT_EQ(manifest_append(&l->m, rec, strlen(rec)), -err);
	after = snap(log);
	if (!same(&before, &after))
		FAILF("the log changed on a failed append: %zu -> %zu bytes", before.len, after.len);
	ASSERT_EQ(manifest_append(&l->m, rec, strlen(rec)), 0);	/* the fault has passed */
	after = snap(log);
	ASSERT_EQ(after.records, before.records + 1);
	ASSERT_EQ(after.bad, 0);
	ASSERT_EQ(after.valid_end, after.len);
}

static void body_eio(struct mlog *l, const char *log) { fails_cleanly(l, log, EIO); }
static void body_enospc(struct mlog *l, const char *log) { fails_cleanly(l, log, ENOSPC); }

static void body_short(struct mlog *l, const char *log)
{
	struct logstate before = snap(log), after;
	for (int i = 0; i < 5; i++)
		ASSERT_EQ(manifest_append(&l->m, rec, strlen(rec)), 0);
	after = snap(log);
	ASSERT_EQ(after.records, before.records + 5);
	ASSERT_EQ(after.bad, 0);
	ASSERT_EQ(after.valid_end, after.len);
}

static void body_half_then_cut_fails(struct mlog *l, const char *log)
{
	struct logstate before = snap(log), now;
	ASSERT_EQ(manifest_append(&l->m, rec, strlen(rec)), -EIO);
	now = snap(log);
	/* The cut failed: half a record is there, at the end, followed by nothing. */
	ASSERT_TRUE(now.len > before.len);
	ASSERT_EQ(now.records, before.records);
	ASSERT_EQ(now.valid_end, before.len);
	/* A crash now: the next mount's scan sees a torn tail, nothing after it. */
	struct manifest_scan s;
	int fd = (int)CHECK_SYS(open(log, O_RDONLY));
	ASSERT_EQ(manifest_scan_fd(fd, NULL, NULL, &s), 0);
	close(fd);
	ASSERT_EQ(s.good_end, before.len);
	ASSERT_EQ(s.corrupt_records, 0);
	/* No crash: the next append cuts the half record first. */
	ASSERT_EQ(manifest_append(&l->m, rec, strlen(rec)), 0);
	now = snap(log);
	ASSERT_EQ(now.records, before.records + 1);
	ASSERT_EQ(now.bad, 0);
	ASSERT_EQ(now.valid_end, now.len);
	ASSERT_EQ(now.len, before.len + 30 + strlen(rec));
}

static void body_sync(struct mlog *l, const char *log)
{
	ASSERT_EQ(manifest_append(&l->m, rec, strlen(rec)), 0);
	ASSERT_EQ(manifest_sync(&l->m), -EIO);
	ASSERT_EQ(manifest_sync(&l->m), 0);
}

/* A refused payload: too long, or with a newline (a record is one line). */
static void refused_payloads(const char *root)
{
	struct mlog l;
	char *big = malloc(MANIFEST_REC_MAX + 2);
	memset(big, 'x', MANIFEST_REC_MAX + 1);
	big[MANIFEST_REC_MAX + 1] = '\0';
	ml_open(&l, root, "n2", "aaaaaaaaaaa2");
	ASSERT_EQ(manifest_append(&l.m, big, MANIFEST_REC_MAX + 1), -EMSGSIZE);
	ASSERT_EQ(manifest_append(&l.m, "{\"a\": 1,\n\"b\": 2}", 16), -EINVAL);
	ASSERT_EQ(manifest_append(&l.m, "{\"a\": 1}", 9), -EINVAL);	/* its NUL: not text */
	ml_close(&l);
	free(big);
	struct logstate s = snap(ml_log_path(root, "n2"));
	ASSERT_EQ(s.bad, 0);
	free(s.bytes);
	printf("append: oversized and multi-line payloads refused, log whole\n");
}

int main(void)
{
	char root[PATH_MAX];

	cu_require_root();
	ml_scratch(root, sizeof(root), "mappend");
	scenario(root, "EIO", "op=append,err=EIO,count=1", body_eio);
	scenario(root, "ENOSPC", "op=append,err=ENOSPC,count=1", body_enospc);
	scenario(root, "short writes", "op=append,err=short", body_short);
	scenario(root, "half, then EIO", "op=append,err=short,count=1;op=append,err=EIO,after=1,count=1",
		 body_eio);
	scenario(root, "half, EIO, and the cut fails",
		 "op=append,err=short,count=1;op=append,err=EIO,after=1,count=1;op=ftruncate,err=EIO,count=1",
		 body_half_then_cut_fails);
	scenario(root, "fdatasync EIO", "op=fdatasync,err=EIO,count=1", body_sync);
	refused_payloads(root);
	/* Whatever happened above, the next mount reads every log whole. */
	struct mlog l;
	ml_open(&l, root, "n1", "aaaaaaaaaaa9");
	ASSERT_EQ(l.rep.corrupt_records, 0);
	ml_close(&l);
	char *v = ml_verdicts(root);
	ASSERT_STR_EQ(v, "OK a\n");
	free(v);
	const char *rm[] = { "rm", "-rf", root, NULL };
	tm_run(rm, NULL);
	return 0;
}
