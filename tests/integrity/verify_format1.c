/*
 * verify_format1.c — `ckptfs-ctl verify` on a backend whose manifests mix
 * formats: records of a mount whose "mount" record says "format": 1 hold
 * the XXH3-128 of the whole file (what ckptfs wrote before format 2) and
 * are checked with it; records of format-2 mounts hold the block-run
 * digest (docs/manifest.md).
 *
 * A real mount (format 2) publishes new/a and new/b.  Then a format-1 log
 * is built here by hand, as an older ckptfs on another node wrote it:
 * framed records ("C1 <len> <xxh3-64> <payload>"), a mount record with
 * format 1, and file records for old/x, old/y and a sparse old/s (its holes
 * hashed as zeros), with digests computed here with libxxhash alone; plus
 * records of mounts that left no mount record (as in a compacted log): one
 * with the current digest (old/z), one with a format-1 digest (old/w), both
 * accepted.  Checks:
 *  - every file is OK, old and new (a format-1 digest checked as format 2,
 *    or the reverse, would be a MISMATCH: the two differ for every file
 *    here, which is asserted);
 *  - a changed byte in old/y, and then one in a hole of old/s: MISMATCH,
 *    exit 1, the others still OK; a changed byte in new/a: MISMATCH;
 *  - `ckptfs-ctl hash --format 1` prints what the format-1 record holds;
 *  - upgrade and compaction: a format-1 log of this very node (an older
 *    ckptfs, cleanly unmounted) is mounted by this ckptfs with compaction
 *    forced at mount; the compacted log has no format-1 "mount" record
 *    left, yet verify says OK for the old files (and MISMATCH for one
 *    changed afterwards), next to a file this mount published.
 */
#include "tests/integrity/integ.h"

#include <xxhash.h>

static const struct it_file news[] = { { "new/a", 1, 2 * MiB + 3 }, { "new/b", 2, 4096 } };

/* Append one framed record to the log. */
static void log_append(int fd, const char *payload)
{
	char line[4096];
	int n = snprintf(line, sizeof(line), "C1 %08x %016llx %s\n", (unsigned)strlen(payload),
			 (unsigned long long)XXH3_64bits(payload, strlen(payload)), payload);
	ASSERT_LT(n, (int)sizeof(line));
	ASSERT_EQ(write(fd, line, (size_t)n), n);
}

/* A format-1 file record for rel as it now is on the backend. */
static void log_file(int fd, struct tmount *m, const char *mount, int seq, const char *rel,
		     bool flat)
{
	char hex[33], rec[1024];
	struct stat st;

	CHECK_SYS(stat(tm_bpath(m, rel), &st));
	ASSERT_EQ((flat ? td_flat_file : td_digest_file)(tm_bpath(m, rel), hex), 0);
	snprintf(rec, sizeof(rec),
		 "{\"t\": \"file\", \"m\": \"%s\", \"seq\": %d, \"time\": %d000, \"path\": \"%s\", "
		 "\"size\": %lld, \"mode\": 33188, \"mtime\": 1.0, \"xxh3\": \"%s\"}",
		 mount, seq, 1000 + seq, rel, (long long)st.st_size, hex);
	log_append(fd, rec);
}

static void expect(const char *backend, const char *const *ok, const char *bad, int status)
{
	char *out;
	int st = it_verify(backend, 0, &out);

	if (st != status)
		FAILF("verify exited %d, expected %d:\n%s", st, status, out);
	for (; *ok; ok++)
		if (strcmp(it_verdict(out, *ok), "OK"))
			FAILF("verify says '%s' for %s, expected OK:\n%s", it_verdict(out, *ok), *ok, out);
	if (bad && strcmp(it_verdict(out, bad), "MISMATCH"))
		FAILF("verify says '%s' for %s, expected MISMATCH:\n%s", it_verdict(out, bad), bad, out);
	free(out);
}

/* This node's format-1 history is compacted away by a format-2 mount; verify still works. */
static void upgrade_and_compact(void)
{
	const char *env[] = { "CKPTFS_MANIFEST_COMPACT=records=4", NULL };
	char dir[PATH_MAX * 2], *slash;
	struct tmount m;
	struct it_log l;
	int fd;

	tm_init(&m, "verify-format1-compact");
	CHECK_SYS(mkdir(tm_bpath(&m, "v1"), 0755));
	ASSERT_EQ(it_write_pattern(tm_bpath(&m, "v1/p"), 21, 2 * MiB + 1), 0);
	ASSERT_EQ(it_write_pattern(tm_bpath(&m, "v1/q"), 22, 4000), 0);
	snprintf(dir, sizeof(dir), "%s/.ckptfs", m.backend);
	CHECK_SYS(mkdir(dir, 0755));
	snprintf(dir, sizeof(dir), "%s/.ckptfs/nodes", m.backend);
	CHECK_SYS(mkdir(dir, 0755));
	snprintf(dir, sizeof(dir), "%s", it_manifest_path(&m));
	slash = strrchr(dir, '/');
	*slash = '\0';
	CHECK_SYS(mkdir(dir, 0755));
	fd = cu_open(it_manifest_path(&m), O_CREAT | O_WRONLY | O_TRUNC);
	log_append(fd, "{\"t\": \"mount\", \"m\": \"0ldm0unt0001\", \"host\": \"x\", "
		       "\"format\": 1, \"time\": 1000000}");
	log_file(fd, &m, "0ldm0unt0001", 1, "v1/p", true);
	log_file(fd, &m, "0ldm0unt0001", 2, "v1/q", true);
	log_append(fd, "{\"t\": \"durable\", \"m\": \"0ldm0unt0001\", \"seq\": 2}");
	log_append(fd, "{\"t\": \"unmount\", \"m\": \"0ldm0unt0001\", \"seq\": 2, \"time\": 1004000}");
	cu_close(fd);

	tm_mount(&m, NULL, env);
	ASSERT_EQ(it_write_pattern(tm_path(&m, "v1/r"), 23, 5 * MiB), 0);
	tm_sync(&m);
	tm_stop(&m);
	ASSERT_EQ(it_log_read(it_manifest_path(&m), &l), 0);
	for (size_t i = 0; i < l.n; i++)
		if (strstr(l.r[i].payload, "\"t\": \"mount\"") && strstr(l.r[i].payload, "0ldm0unt0001"))
			FAILF("compaction kept the old mount record; this case tests nothing:\n%s",
			      l.r[i].payload);
	ASSERT_TRUE(it_log_count_type(&l, "file", "v1/p") == 1);
	it_log_free(&l);
	expect(m.backend, (const char *[]){ "v1/p", "v1/q", "v1/r", NULL }, NULL, 0);
	fd = cu_open(tm_bpath(&m, "v1/p"), O_WRONLY);
	cu_pwrite_all(fd, "p", 1, MiB);
	cu_close(fd);
	expect(m.backend, (const char *[]){ "v1/q", "v1/r", NULL }, "v1/p", 1);
	tm_cleanup(&m);
}

int main(void)
{
	struct tmount m;
	char dir[PATH_MAX + 64], hex1[33], hex2[33];
	int fd;

	tm_require_fuse();
	tm_start(&m, "verify-format1", NULL, NULL);
	CHECK_SYS(mkdir(tm_path(&m, "new"), 0755));
	it_write_files(&m, news, CU_LEN(news), 0);
	tm_sync(&m);
	tm_stop(&m);

	/* What an older ckptfs left: files and a format-1 log of another node. */
	CHECK_SYS(mkdir(tm_bpath(&m, "old"), 0755));
	ASSERT_EQ(it_write_pattern(tm_bpath(&m, "old/x"), 11, 3 * MiB + 1), 0);
	ASSERT_EQ(it_write_pattern(tm_bpath(&m, "old/y"), 12, 777), 0);
	ASSERT_EQ(it_write_pattern(tm_bpath(&m, "old/z"), 13, 5000), 0);
	ASSERT_EQ(it_write_pattern(tm_bpath(&m, "old/w"), 15, 3 * MiB + 7), 0);
	fd = cu_open(tm_bpath(&m, "old/s"), O_CREAT | O_WRONLY | O_TRUNC);
	cu_write_pattern_fd(fd, 5 * MiB + 3, 10000, 14, 10000);
	CHECK_SYS(ftruncate(fd, 9 * MiB));
	cu_close(fd);
	snprintf(dir, sizeof(dir), "%s/.ckptfs/nodes/oldnode", m.backend);
	CHECK_SYS(mkdir(dir, 0755));
	snprintf(dir, sizeof(dir), "%s/.ckptfs/nodes/oldnode/manifest.log", m.backend);
	fd = cu_open(dir, O_CREAT | O_WRONLY | O_TRUNC);
	log_append(fd, "{\"t\": \"mount\", \"m\": \"0ld0ld0ld0ld\", \"host\": \"oldnode\", "
		       "\"format\": 1, \"time\": 1000000}");
	log_file(fd, &m, "0ld0ld0ld0ld", 1, "old/x", true);
	log_file(fd, &m, "0ld0ld0ld0ld", 2, "old/y", true);
	log_file(fd, &m, "0ld0ld0ld0ld", 3, "old/s", true);
	log_append(fd, "{\"t\": \"unmount\", \"m\": \"0ld0ld0ld0ld\", \"seq\": 3, \"time\": 1004000}");
	/* Records whose mount record is not in any log: either format. */
	log_file(fd, &m, "n0m0untrec0rd", 1, "old/z", false);
	log_file(fd, &m, "c0mpacted0ld", 1, "old/w", true);
	cu_close(fd);

	/* The formats differ for each old file, so a wrong choice cannot pass. */
	static const char *const olds[] = { "old/x", "old/y", "old/s", "old/z", "old/w" };
	for (size_t i = 0; i < CU_LEN(olds); i++) {
		ASSERT_EQ(td_flat_file(tm_bpath(&m, olds[i]), hex1), 0);
		ASSERT_EQ(td_digest_file(tm_bpath(&m, olds[i]), hex2), 0);
		ASSERT_TRUE(strcmp(hex1, hex2) != 0);
	}
	/* ckptfs-ctl hash --format 1 prints what a format-1 record holds. */
	char *out;
	ASSERT_EQ(tm_run((const char *[]){ it_ctl_bin(), "hash", "--format", "1",
					   tm_bpath(&m, "old/s"), NULL }, &out), 0);
	ASSERT_EQ(td_flat_file(tm_bpath(&m, "old/s"), hex1), 0);
	ASSERT_TRUE(strncmp(out, hex1, 32) == 0);
	free(out);

	expect(m.backend, (const char *[]){ "new/a", "new/b", "old/x", "old/y", "old/s", "old/z",
					    "old/w", NULL }, NULL, 0);
	fd = cu_open(tm_bpath(&m, "old/w"), O_WRONLY);
	cu_pwrite_all(fd, "w", 1, 2 * MiB);
	cu_close(fd);
	expect(m.backend, (const char *[]){ "old/x", "old/z", NULL }, "old/w", 1);
	fd = cu_open(tm_bpath(&m, "old/y"), O_WRONLY);
	cu_pwrite_all(fd, "?", 1, 100);
	cu_close(fd);
	expect(m.backend, (const char *[]){ "new/a", "old/x", "old/s", "old/z", NULL }, "old/y", 1);
	fd = cu_open(tm_bpath(&m, "old/s"), O_WRONLY);
	cu_pwrite_all(fd, "!", 1, 8 * MiB);	/* in the hole at the end */
	cu_close(fd);
	expect(m.backend, (const char *[]){ "new/a", "old/x", "old/z", NULL }, "old/s", 1);
	fd = cu_open(tm_bpath(&m, "new/a"), O_WRONLY);
	cu_pwrite_all(fd, "#", 1, MiB);
	cu_close(fd);
	expect(m.backend, (const char *[]){ "new/b", "old/x", "old/z", NULL }, "new/a", 1);
	tm_cleanup(&m);
	upgrade_and_compact();
	return 0;
}
