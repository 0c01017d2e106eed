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
 * one record of a mount that left no mount record (read as the current
 * format).  Checks:
 *  - every file is OK, old and new (a format-1 digest checked as format 2,
 *    or the reverse, would be a MISMATCH: the two differ for every file
 *    here, which is asserted);
 *  - a changed byte in old/y, and then one in a hole of old/s: MISMATCH,
 *    exit 1, the others still OK; a changed byte in new/a: MISMATCH;
 *  - `ckptfs-ctl hash --format 1` prints what the format-1 record holds.
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
	/* A record whose mount record is not in any log: the current format. */
	log_file(fd, &m, "n0m0untrec0rd", 1, "old/z", false);
	cu_close(fd);

	/* The formats differ for each old file, so a wrong choice cannot pass. */
	static const char *const olds[] = { "old/x", "old/y", "old/s", "old/z" };
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

	expect(m.backend, (const char *[]){ "new/a", "new/b", "old/x", "old/y", "old/s", "old/z", NULL },
	       NULL, 0);
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
	return 0;
}
