/*
 * compact.c — manifest compaction through the real daemon.
 *
 * A backend sees three mounts with compaction held off
 * (CKPTFS_MANIFEST_COMPACT=records=100000000): checkpoints step_1..3 of
 * CKPT_FILES files each with a `latest` marker, a file renamed into place,
 * step_1 removed; then step_4 and a crash (SIGKILL); then a mount that
 * recovers it and unmounts cleanly.  `ckptfs-ctl verify` of that backend is
 * the reference.  Then:
 *
 *  - a mount with a low threshold compacts the log at mount: its records
 *    shrink to the live files plus a few, the log stays valid, and verify
 *    says exactly the reference, before and after another mount;
 *  - on copies of the uncompacted backend, the daemon is killed
 *    (CKPTFS_FAULT err=kill) at each step of that compaction — opening the
 *    temp file, its first write, its fdatasync, the rename over
 *    manifest.log, the directory fsync: the mount fails, and the next mount
 *    (no fault) comes up, leaves no temp file, and verify says exactly the
 *    reference again;
 *  - hard links: rewrites through one name of a group, and a rename over a
 *    linked name, before and after compactions: verify agrees.
 */
#include "tests/integrity/integ.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define CKPT_FILES 40
#define NO_COMPACT "CKPTFS_MANIFEST_COMPACT=records=100000000,bytes=1T"
#define COMPACT "CKPTFS_MANIFEST_COMPACT=records=50"

static void checkpoint(struct tmount *m, int step)
{
	char rel[96], dir[32];

	snprintf(dir, sizeof(dir), "step_%d", step);
	CHECK_SYS(mkdir(tm_path(m, dir), 0755));
	for (int i = 0; i < CKPT_FILES; i++) {
		snprintf(rel, sizeof(rel), "%s/shard_%02d.pt", dir, i);
		ASSERT_EQ(it_write_pattern(tm_path(m, rel), (uint64_t)step * 1000 + i, 1000 + i), 0);
	}
	/* torch.save users write a temp name and rename it into place. */
	snprintf(rel, sizeof(rel), "%s/meta.tmp", dir);
	ASSERT_EQ(it_write_pattern(tm_path(m, rel), (uint64_t)step, 64), 0);
	char to[96];
	snprintf(to, sizeof(to), "%s/meta.json", dir);
	CHECK_SYS(rename(tm_path(m, rel), tm_path(m, to)));
	cu_write_text(tm_path(m, "latest"), dir);
}

static void remove_checkpoint(struct tmount *m, int step)
{
	char rel[96], dir[32];

	snprintf(dir, sizeof(dir), "step_%d", step);
	for (int i = 0; i < CKPT_FILES; i++) {
		snprintf(rel, sizeof(rel), "%s/shard_%02d.pt", dir, i);
		CHECK_SYS(unlink(tm_path(m, rel)));
	}
	snprintf(rel, sizeof(rel), "%s/meta.json", dir);
	CHECK_SYS(unlink(tm_path(m, rel)));
	CHECK_SYS(rmdir(tm_path(m, dir)));
}

static char *verdicts(const char *backend)
{
	char *out, *lines;
	it_verify(backend, 0, &out);
	lines = it_verdict_lines(out);
	free(out);
	return lines;
}

/* verify's verdicts v: `ok` files OK, none MISMATCH, MISSING or UNTRACKED. */
static void all_ok(const char *v, int ok)
{
	ASSERT_EQ(it_verdict_count(v, "OK"), ok);
	ASSERT_EQ(it_verdict_count(v, "MISMATCH") + it_verdict_count(v, "MISSING") +
		  it_verdict_count(v, "UNTRACKED"), 0);
}

static size_t log_records(const char *path, int *compacted, uint64_t *bad)
{
	struct it_log l;
	ASSERT_EQ(it_log_read(path, &l), 0);
	size_t n = l.n;
	*compacted = it_log_count_type(&l, "compacted", NULL);
	*bad = l.bad;
	it_log_free(&l);
	return n;
}

/* The mount of backend `b` on m->mnt with env, expecting it to fail (the daemon killed). */
static int mount_dies(struct tmount *m, const char *rule)
{
	char out[4096];
	const char *argv[] = { "ckptfs", m->backend, m->mnt, "-o", "cache_size=64M", NULL };

	setenv("CKPTFS_FAULT", rule, 1);
	setenv("CKPTFS_MANIFEST_COMPACT", "records=50", 1);
	int st = tm_run_daemon(argv, out, sizeof(out));
	unsetenv("CKPTFS_FAULT");
	unsetenv("CKPTFS_MANIFEST_COMPACT");
	if (st == 0) {
		cu_unmount(m->mnt);
		FAILF("the mount with %s came up: the fault never hit", rule);
	}
	return st;
}

/* renamed: the new log is in place; temp: the kill left the temp file behind. */
static const struct { const char *step, *rule; bool renamed, temp; } kills[] = {
	/* At mount, before compaction: one append (the mount record) and two
	 * writes of state.json's temp file, one fdatasync (of the log), nine
	 * fsyncs (the parents of .ckptfs, nodes and the node directory, once
	 * for the lease and once for the log; that directory for a new log's
	 * name; state.json's temp file and the directory again). */
	{ "open the temp file", "op=openat,name=manifest.log.tmp,err=kill", false, false },
	{ "first write", "op=append,after=2,err=kill", false, true },
	{ "fdatasync", "op=fdatasync,after=1,err=kill", false, true },
	{ "rename", "op=rename,name=manifest.log,err=kill", false, true },
	{ "directory fsync", "op=fsync,after=9,err=kill", true, false },
};

/*
 * Hard links: every name of a file shares each later version (the
 * publisher relinks them), and verify follows them as one group.  A
 * snapshot that kept the names as separate copies expected the old
 * version at the other name.  Before and after a compaction, a rewrite
 * through one name; and a rename over a linked name.  `ok`: the files
 * verify says OK before.
 */
/* Records enough for the next mount to compact (the log at least doubled). */
static void pad_log(struct tmount *m)
{
	char rel[64];

	for (int i = 0; i < 150; i++) {
		snprintf(rel, sizeof(rel), "links/pad_%d", i);
		ASSERT_EQ(it_write_pattern(tm_path(m, rel), (uint64_t)i, 16), 0);
	}
	tm_sync(m);
	for (int i = 0; i < 150; i++) {
		snprintf(rel, sizeof(rel), "links/pad_%d", i);
		CHECK_SYS(unlink(tm_path(m, rel)));
	}
	tm_sync(m);
}

static void hard_links(struct tmount *m, int ok)
{
	const char *no_compact[] = { NO_COMPACT, NULL }, *compact[] = { COMPACT, NULL };
	char a[PATH_MAX], b[PATH_MAX], c[PATH_MAX], d[PATH_MAX], x[PATH_MAX];
	char *v;
	int compactions = it_log_count(m, "manifest: compacted");

	tm_mount(m, NULL, no_compact);
	CHECK_SYS(mkdir(tm_path(m, "links"), 0755));
	snprintf(a, sizeof(a), "%s", tm_path(m, "links/a"));
	snprintf(b, sizeof(b), "%s", tm_path(m, "links/b"));
	snprintf(c, sizeof(c), "%s", tm_path(m, "links/c"));
	snprintf(d, sizeof(d), "%s", tm_path(m, "links/d"));
	snprintf(x, sizeof(x), "%s", tm_path(m, "links/x"));
	ASSERT_EQ(it_write_pattern(a, 1, 4096), 0);
	ASSERT_EQ(it_write_pattern(c, 3, 4096), 0);
	tm_sync(m);
	CHECK_SYS(link(a, b));
	CHECK_SYS(link(c, d));
	tm_sync(m);
	ASSERT_EQ(it_write_pattern(a, 2, 8192), 0);	/* a and b: version 2 */
	tm_sync(m);
	/*
	 * The version of a name that then goes is its group's: e (through f)
	 * and g (through h) keep what was written through the other name;
	 * and an unlink, a new file and its unlink of the same linked name.
	 */
	const char *grp[] = { "links/e", "links/f", "links/g", "links/h", "links/p", "links/q",
			      "links/y" };
	char gp[7][PATH_MAX];
	for (int i = 0; i < 7; i++)
		snprintf(gp[i], sizeof(gp[i]), "%s", tm_path(m, grp[i]));
	ASSERT_EQ(it_write_pattern(gp[0], 7, 3000), 0);
	ASSERT_EQ(it_write_pattern(gp[2], 8, 3000), 0);
	ASSERT_EQ(it_write_pattern(gp[4], 9, 3000), 0);
	tm_sync(m);
	CHECK_SYS(link(gp[0], gp[1]));
	CHECK_SYS(link(gp[2], gp[3]));
	CHECK_SYS(link(gp[4], gp[5]));
	tm_sync(m);
	ASSERT_EQ(it_write_pattern(gp[1], 10, 5000), 0);	/* e and f: version 2 */
	ASSERT_EQ(it_write_pattern(gp[2], 11, 5000), 0);	/* g and h: version 2 */
	tm_sync(m);
	CHECK_SYS(unlink(gp[1]));			/* e keeps version 2 */
	ASSERT_EQ(it_write_pattern(gp[6], 12, 10), 0);
	tm_sync(m);
	CHECK_SYS(rename(gp[6], gp[2]));		/* h keeps version 2 */
	CHECK_SYS(unlink(gp[5]));
	tm_sync(m);
	ASSERT_EQ(it_write_pattern(gp[5], 13, 700), 0);	/* q anew, not p's */
	tm_sync(m);
	CHECK_SYS(unlink(gp[5]));
	tm_sync(m);
	/* A linked name renamed over, rewritten, unlinked: gone, r keeps its own. */
	char r[PATH_MAX], sn[PATH_MAX], t[PATH_MAX];
	snprintf(r, sizeof(r), "%s", tm_path(m, "links/r"));
	snprintf(sn, sizeof(sn), "%s", tm_path(m, "links/s"));
	snprintf(t, sizeof(t), "%s", tm_path(m, "links/t"));
	ASSERT_EQ(it_write_pattern(r, 14, 900), 0);
	tm_sync(m);
	CHECK_SYS(link(r, sn));
	ASSERT_EQ(it_write_pattern(t, 15, 901), 0);
	tm_sync(m);
	CHECK_SYS(rename(t, sn));
	tm_sync(m);
	ASSERT_EQ(it_write_pattern(sn, 16, 902), 0);
	tm_sync(m);
	CHECK_SYS(unlink(sn));
	tm_sync(m);
	pad_log(m);
	tm_stop(m);
	v = verdicts(m->backend);
	all_ok(v, ok + 9);	/* a b c d e g h p r */
	free(v);
	tm_mount(m, NULL, compact);	/* the snapshot */
	tm_stop(m);
	ASSERT_EQ(it_log_count(m, "manifest: compacted"), compactions + 1);
	v = verdicts(m->backend);
	all_ok(v, ok + 9);
	free(v);
	tm_mount(m, NULL, no_compact);
	ASSERT_EQ(it_write_pattern(d, 4, 12288), 0);	/* c and d: version 2, after the snapshot */
	tm_sync(m);
	ASSERT_EQ(it_write_pattern(x, 5, 100), 0);
	CHECK_SYS(rename(x, b));	/* b leaves a's group */
	tm_sync(m);
	ASSERT_EQ(it_write_pattern(a, 6, 200), 0);	/* a alone */
	tm_sync(m);
	pad_log(m);
	tm_stop(m);
	v = verdicts(m->backend);
	all_ok(v, ok + 9);
	free(v);
	tm_mount(m, NULL, compact);
	tm_stop(m);
	v = verdicts(m->backend);
	all_ok(v, ok + 9);
	free(v);
	ASSERT_EQ(it_log_count(m, "manifest: compacted"), compactions + 2);
	printf("hard links: verify agrees before and after compactions of linked names\n");
}

int main(void)
{
	struct tmount m;
	const char *no_compact[] = { NO_COMPACT, NULL }, *compact[] = { COMPACT, NULL };
	char *ref, *v, copy[PATH_MAX], work[PATH_MAX], orig_backend[PATH_MAX];
	int compacted;
	uint64_t bad;

	tm_require_fuse();
	cu_require_root();
	tm_start(&m, "compact", NULL, no_compact);
	checkpoint(&m, 1);
	checkpoint(&m, 2);
	checkpoint(&m, 3);
	remove_checkpoint(&m, 1);
	tm_stop(&m);
	tm_mount(&m, NULL, no_compact);
	checkpoint(&m, 4);
	tm_sync(&m);
	tm_kill(&m);
	tm_mount(&m, NULL, no_compact);
	tm_stop(&m);
	ref = verdicts(m.backend);
	all_ok(ref, 3 * (CKPT_FILES + 1) + 1);
	size_t before = log_records(it_manifest_path(&m), &compacted, &bad);
	ASSERT_EQ(compacted, 0);
	snprintf(copy, sizeof(copy), "%s/uncompacted", m.root);
	snprintf(orig_backend, sizeof(orig_backend), "%s", m.backend);
	const char *cp[] = { "cp", "-a", m.backend, copy, NULL };
	ASSERT_EQ(tm_run(cp, NULL), 0);

	/* Compaction at mount. */
	tm_mount(&m, NULL, compact);
	ASSERT_EQ(it_log_count(&m, "manifest: compacted"), 1);
	tm_stop(&m);
	size_t after = log_records(it_manifest_path(&m), &compacted, &bad);
	printf("compaction at mount: %zu records -> %zu\n", before, after);
	ASSERT_EQ(compacted, 1);
	ASSERT_EQ(bad, 0);
	ASSERT_LT(after, before / 2);
	ASSERT_LT(after, 3 * (CKPT_FILES + 2) + 20);
	v = verdicts(m.backend);
	ASSERT_STR_EQ(v, ref);
	free(v);
	tm_mount(&m, NULL, no_compact);
	tm_stop(&m);
	v = verdicts(m.backend);
	ASSERT_STR_EQ(v, ref);
	free(v);

	/*
	 * Compacting a compacted log: another job removes a checkpoint of the
	 * snapshot and writes one, the next mount compacts again.  The log then
	 * holds one file record per file verify expects, no stale ones.
	 */
	tm_mount(&m, NULL, no_compact);
	remove_checkpoint(&m, 2);
	checkpoint(&m, 5);
	tm_stop(&m);
	tm_mount(&m, NULL, compact);
	ASSERT_EQ(it_log_count(&m, "manifest: compacted"), 2);
	tm_stop(&m);
	v = verdicts(m.backend);
	all_ok(v, 3 * (CKPT_FILES + 1) + 1);
	struct it_log lg;
	ASSERT_EQ(it_log_read(it_manifest_path(&m), &lg), 0);
	ASSERT_EQ(it_log_count_type(&lg, "file", NULL), it_verdict_count(v, "OK"));
	ASSERT_EQ(it_log_count_type(&lg, "compacted", NULL), 1);
	printf("compacted twice: %zu records, one file record per live file (%d)\n", lg.n,
	       it_verdict_count(v, "OK"));
	it_log_free(&lg);
	free(v);

	/*
	 * Compaction while mounted: the publisher compacts between publish groups
	 * once the log has doubled, a crash follows, and recovery and verify
	 * still agree with what the mount made durable.
	 */
	int before_live = it_log_count(&m, "manifest: compacted");
	tm_mount(&m, NULL, compact);
	for (int step = 6; step <= 8; step++) {
		checkpoint(&m, step);
		tm_sync(&m);
	}
	remove_checkpoint(&m, 3);
	tm_sync(&m);
	ASSERT_GE(it_log_count(&m, "manifest: compacted"), before_live + 1);	/* while mounted */
	tm_kill(&m);
	tm_mount(&m, NULL, no_compact);
	tm_stop(&m);
	v = verdicts(m.backend);
	all_ok(v, 5 * (CKPT_FILES + 1) + 1);
	printf("compacted while mounted (%d times), crashed, recovered: verify agrees\n",
	       it_log_count(&m, "manifest: compacted") - before_live);
	free(v);

	/* Killed at each step of that compaction, on copies of the uncompacted backend. */
	for (size_t i = 0; i < CKPT_ARRAY_LEN_TM(kills); i++) {
		snprintf(work, sizeof(work), "%s/kill%zu", m.root, i);
		const char *cpw[] = { "cp", "-a", copy, work, NULL };
		ASSERT_EQ(tm_run(cpw, NULL), 0);
		snprintf(m.backend, sizeof(m.backend), "%s", work);
		int st = mount_dies(&m, kills[i].rule);
		char tmp[PATH_MAX + 64];
		snprintf(tmp, sizeof(tmp), "%s", it_manifest_path(&m));
		log_records(tmp, &compacted, &bad);
		if (compacted != (kills[i].renamed ? 1 : 0))
			FAILF("killed at %s: the log %s compacted", kills[i].step,
			      compacted ? "is" : "is not");
		strcat(tmp, ".tmp");
		if (file_exists(tmp) != kills[i].temp)	/* the kill hit the compaction, where meant */
			FAILF("killed at %s: the temp file %s", kills[i].step,
			      kills[i].temp ? "is missing" : "is there");
		tm_mount(&m, NULL, no_compact);
		tm_stop(&m);
		if (file_exists(tmp))
			FAILF("killed at %s: %s is left after the next mount", kills[i].step, tmp);
		v = verdicts(m.backend);
		if (strcmp(v, ref) != 0)
			FAILF("killed at %s: verify says\n%s\ninstead of\n%s", kills[i].step, v, ref);
		free(v);
		printf("compaction killed at '%s' (mount exit %d): next mount and verify as before\n",
		       kills[i].step, st);
	}
	snprintf(m.backend, sizeof(m.backend), "%s", orig_backend);
	hard_links(&m, 5 * (CKPT_FILES + 1) + 1);
	free(ref);
	tm_cleanup(&m);
	return 0;
}
