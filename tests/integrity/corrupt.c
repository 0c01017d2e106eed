/*
 * corrupt.c — damage on the backend, and what verify and recovery make of it
 * (contract item 5; the manifest format of backend/manifest.h).
 *
 *  1. The manifest agrees with an independent reading: every record passes
 *     our own length + XXH3-64 check, and each file's newest "file" record
 *     holds its size and the XXH3-128 we compute with libxxhash.
 *  2. A flipped byte in one published file: `ckptfs-ctl verify` says
 *     MISMATCH for that file only and exits 1, offline (on the backend) and
 *     online (through a mount) alike; flipped back, it passes again.
 *  3. A manifest cut in the middle of a record (a torn tail): the next
 *     mount cuts the fragment (the log is whole records again, the records
 *     before the cut unchanged), the mount works, and verify passes: files
 *     recorded before the cut OK, the others UNTRACKED, exit 0.
 *  4. A corrupt record in the middle of the manifest (a digest digit
 *     changed): it is skipped, not trusted — its file is UNTRACKED rather
 *     than MISMATCH — the records after it stay, and the mount works.
 */
#include "tests/integrity/integ.h"

static const struct it_file files[] = {
	{ "top.bin", 1, 4 * MiB + 1 },
	{ "d/a", 2, 300 * KiB },
	{ "d/b", 3, 5000 },
	{ "d/e/c", 4, MiB + 7 },
	{ "z", 5, 1 },
};
#define NFILES (sizeof(files) / sizeof(files[0]))

/* Index of the newest "file" record for rel, or -1. */
static long file_record(const struct it_log *l, const char *rel)
{
	char t[32], path[PATH_MAX];
	long found = -1;

	for (size_t i = 0; i < l->n; i++)
		if (it_json_get(l->r[i].payload, "t", t, sizeof(t)) && !strcmp(t, "file") &&
		    it_json_get(l->r[i].payload, "path", path, sizeof(path)) && !strcmp(path, rel))
			found = (long)i;
	return found;
}

static void check_records_match_files(struct tmount *m)
{
	struct it_log l;
	char want[33], got[33];

	ASSERT_EQ(it_log_read(it_manifest_path(m), &l), 0);
	ASSERT_EQ(l.bad, 0);
	ASSERT_EQ(l.valid_end, l.size);
	for (size_t i = 0; i < NFILES; i++) {
		long k = file_record(&l, files[i].rel);
		if (k < 0)
			FAILF("no manifest record for %s", files[i].rel);
		ASSERT_EQ(td_digest_file(tm_bpath(m, files[i].rel), want), 0);
		ASSERT_TRUE(it_json_get(l.r[k].payload, "xxh3", got, sizeof(got)));
		ASSERT_STR_EQ(got, want);
		ASSERT_EQ(it_json_num(l.r[k].payload, "size"), files[i].size);
	}
	it_log_free(&l);
}

/* verify PATH: exit status `want_exit`; `bad` (if any) MISMATCH, the rest OK. */
static char *verify_expect(const char *path, int want_exit, const char *bad)
{
	char *out;
	int st = it_verify(path, 0, &out);

	if (st != want_exit)
		FAILF("verify %s: exit %d, expected %d:\n%s", path, st, want_exit, out);
	for (size_t i = 0; i < NFILES; i++) {
		const char *want = bad && !strcmp(files[i].rel, bad) ? "MISMATCH" : "OK";
		if (strcmp(it_verdict(out, files[i].rel), want))
			FAILF("verify %s: %s is '%s', expected %s:\n%s", path, files[i].rel,
			      it_verdict(out, files[i].rel), want, out);
	}
	ASSERT_EQ(it_verdict_count(out, "MISMATCH"), bad ? 1 : 0);
	char *lines = it_verdict_lines(out);
	free(out);
	return lines;
}

static void flip_byte(const char *path, off_t off)
{
	int fd = CHECK_SYS(open(path, O_RDWR));
	unsigned char c;

	ASSERT_EQ(pread(fd, &c, 1, off), 1);
	c ^= 0x5a;
	ASSERT_EQ(pwrite(fd, &c, 1, off), 1);
	CHECK_SYS(fsync(fd));
	close(fd);
}

static void flipped_file(struct tmount *m)
{
	const char *victim = files[3].rel;
	char *offline, *online;

	flip_byte(tm_bpath(m, victim), (off_t)(files[3].size / 2));
	offline = verify_expect(m->backend, 1, victim);
	tm_mount(m, NULL, NULL);
	online = verify_expect(m->mnt, 1, victim);
	ASSERT_STR_EQ(online, offline);
	tm_stop(m);
	flip_byte(tm_bpath(m, victim), (off_t)(files[3].size / 2));
	free(verify_expect(m->backend, 0, NULL));
	free(offline);
	free(online);
}

static void all_files_readable(struct tmount *m)
{
	for (size_t i = 0; i < NFILES; i++)
		if (!it_has_pattern(tm_path(m, files[i].rel), files[i].seed, files[i].size))
			FAILF("%s through the mount is not what was written", files[i].rel);
}

static void torn_tail(struct tmount *m)
{
	struct it_log before, after;
	const char *mf = it_manifest_path(m);
	char mid[32], v[64], cut[128], *out;
	long k;

	ASSERT_EQ(it_log_read(mf, &before), 0);
	k = file_record(&before, "d/b");
	ASSERT_TRUE(k > 0);
	/* Cut in the middle of d/b's record: it and everything after it go. */
	CHECK_SYS(truncate(mf, (off_t)(before.r[k].off + before.r[k].len / 2)));
	tm_mount(m, NULL, NULL);
	snprintf(cut, sizeof(cut), "cut a torn tail of %llu bytes at offset %llu",
		 (unsigned long long)(before.r[k].len / 2), (unsigned long long)before.r[k].off);
	if (it_log_count(m, cut) != 1)
		FAILF("the daemon log does not say \"%s\"", cut);
	ASSERT_TRUE(it_json_get(it_stats(m), "mount_id", mid, sizeof(mid)));
	all_files_readable(m);
	ASSERT_EQ(it_write_pattern(tm_path(m, "after"), 9, 70 * KiB), 0);
	tm_stop(m);

	ASSERT_EQ(it_log_read(mf, &after), 0);
	ASSERT_EQ(after.bad, 0);
	ASSERT_EQ(after.valid_end, after.size);
	ASSERT_TRUE(after.n > (size_t)k);
	for (long i = 0; i < k; i++)
		ASSERT_STR_EQ(after.r[i].payload, before.r[i].payload);
	/* Everything after the cut was written by the new mount. */
	for (size_t i = (size_t)k; i < after.n; i++) {
		const char *key = strstr(after.r[i].payload, "\"t\": \"recovered\"") ? "by" : "m";
		ASSERT_TRUE(it_json_get(after.r[i].payload, key, v, sizeof(v)));
		ASSERT_STR_EQ(v, mid);
	}
	ASSERT_EQ(it_verify(m->backend, 0, &out), 0);
	for (size_t i = 0; i < NFILES; i++) {
		long rec = file_record(&before, files[i].rel);
		const char *want = rec < k ? "OK" : "UNTRACKED";
		if (strcmp(it_verdict(out, files[i].rel), want))
			FAILF("after the cut, %s is '%s', expected %s:\n%s", files[i].rel,
			      it_verdict(out, files[i].rel), want, out);
	}
	ASSERT_STR_EQ(it_verdict(out, "after"), "OK");
	free(out);
	it_log_free(&before);
	it_log_free(&after);
}

static void corrupt_record(struct tmount *m)
{
	struct it_log before, after;
	const char *mf = it_manifest_path(m);
	char *out;
	long k;

	ASSERT_EQ(it_log_read(mf, &before), 0);
	k = file_record(&before, "d/a");
	ASSERT_TRUE(k >= 0);
	/* Change one digit of its digest: the record's own XXH3-64 no longer holds. */
	const char *p = strstr(before.r[k].payload, "\"xxh3\": \"");
	ASSERT_TRUE(p != NULL);
	off_t at = (off_t)(before.r[k].off + 29 + (uint64_t)(p - before.r[k].payload) + 9);
	int fd = CHECK_SYS(open(mf, O_RDWR));
	char c;
	ASSERT_EQ(pread(fd, &c, 1, at), 1);
	c = c == '0' ? '1' : '0';
	ASSERT_EQ(pwrite(fd, &c, 1, at), 1);
	close(fd);

	ASSERT_EQ(it_verify(m->backend, 0, &out), 0);
	ASSERT_STR_EQ(it_verdict(out, "d/a"), "UNTRACKED");
	ASSERT_STR_EQ(it_verdict(out, "top.bin"), "OK");
	ASSERT_TRUE(strstr(out, "corrupt records skipped") != NULL);
	free(out);

	tm_mount(m, NULL, NULL);
	ASSERT_EQ(it_log_count(m, "corrupt records skipped"), 1);
	ASSERT_EQ(it_log_count(m, "cut a torn tail"), 1);	/* only the earlier one */
	all_files_readable(m);
	tm_stop(m);
	ASSERT_EQ(it_log_read(mf, &after), 0);
	ASSERT_EQ(after.bad, 1);
	ASSERT_TRUE(after.n > before.n - 1);
	for (size_t i = (size_t)k; i + 1 < before.n; i++)	/* the records after it stay */
		ASSERT_STR_EQ(after.r[i].payload, before.r[i + 1].payload);
	it_log_free(&before);
	it_log_free(&after);
}

int main(void)
{
	struct tmount m;

	tm_require_fuse();
	tm_start(&m, "corrupt", NULL, NULL);
	it_write_files(&m, files, NFILES, 0);
	tm_stop(&m);

	check_records_match_files(&m);
	free(verify_expect(m.backend, 0, NULL));
	flipped_file(&m);
	torn_tail(&m);
	corrupt_record(&m);
	tm_cleanup(&m);
	return 0;
}
