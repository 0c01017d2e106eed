/*
 * verify.c — `ckptfs-ctl verify` through a mount and on the bare backend
 * (contract item 5; fs/verify.c): the same verdicts either way.
 *
 * A tree is written and made durable; then, on the backend directly:
 *  - untouched: every file OK, exit 0;
 *  - a file added that the manifest does not know: UNTRACKED, still exit 0;
 *  - a published file deleted: MISSING, exit 1;
 * and at each stage the verdicts for the mount root, the backend root, a
 * subdirectory and a single file are compared between online (a path in
 * the mount: drained first, then checked on its backend) and offline (the
 * same path on the backend, no daemon involved), and with --jobs 1
 * against the default parallelism.  Then a hard-linked file rewritten
 * through one name verifies OK under every name, and a file renamed into
 * directories made in the same publish batch is found at its new name
 * (their records used to be left out of the manifest).
 */
#include "tests/integrity/integ.h"

static const struct it_file files[] = {
	{ "top", 1, 3 * MiB + 11 },
	{ "d/a", 2, 64 * KiB },
	{ "d/b", 3, 0 },
	{ "d/e/c", 4, 9 * MiB },
	{ "d/e/f", 5, 4097 },
};
#define NFILES (sizeof(files) / sizeof(files[0]))

/* Online and offline verify of rel agree; returns the (shared) exit status. */
static int same_both_ways(struct tmount *m, const char *rel, char **lines)
{
	char *on, *off, *one;
	int st_on = it_verify(*rel ? tm_path(m, rel) : m->mnt, 0, &on);
	int st_off = it_verify(*rel ? tm_bpath(m, rel) : m->backend, 0, &off);
	int st_one = it_verify(*rel ? tm_bpath(m, rel) : m->backend, 1, &one);
	char *l_on = it_verdict_lines(on), *l_off = it_verdict_lines(off), *l_one = it_verdict_lines(one);

	if (st_on != st_off || strcmp(l_on, l_off))
		FAILF("verify '%s' online (exit %d):\n%s\noffline (exit %d):\n%s", rel, st_on, on,
		      st_off, off);
	if (st_one != st_off || strcmp(l_one, l_off))
		FAILF("verify '%s' with --jobs 1 (exit %d):\n%s\ndefault (exit %d):\n%s", rel, st_one,
		      one, st_off, off);
	free(on);
	free(off);
	free(one);
	free(l_on);
	free(l_one);
	*lines = l_off;
	return st_off;
}

/* Verify the whole tree, a subdirectory and one file, both ways. */
static void check_stage(struct tmount *m, const char *changed, const char *verdict, int want_exit)
{
	char *lines, *sub, *one, want[PATH_MAX];

	ASSERT_EQ(same_both_ways(m, "", &lines), want_exit);
	for (size_t i = 0; i < NFILES; i++) {
		const char *v = changed && !strcmp(files[i].rel, changed) ? verdict : "OK";
		snprintf(want, sizeof(want), "%s %s\n", v, files[i].rel);
		if (!strstr(lines, want))
			FAILF("verify does not say '%s %s':\n%s", v, files[i].rel, lines);
	}
	if (changed && !strcmp(verdict, "UNTRACKED")) {
		snprintf(want, sizeof(want), "UNTRACKED %s\n", changed);
		ASSERT_TRUE(strstr(lines, want) != NULL);
	}
	ASSERT_EQ(same_both_ways(m, "d", &sub), want_exit);
	ASSERT_TRUE(strstr(sub, "top") == NULL);
	ASSERT_EQ(same_both_ways(m, "top", &one), 0);
	ASSERT_STR_EQ(one, "OK top\n");
	free(lines);
	free(sub);
	free(one);
}

int main(void)
{
	struct tmount m;

	tm_require_fuse();
	tm_start(&m, "verify", NULL, NULL);
	it_write_files(&m, files, NFILES, 0);
	tm_sync(&m);

	check_stage(&m, NULL, NULL, 0);
	ASSERT_EQ(it_write_pattern(tm_bpath(&m, "d/e/extra"), 9, 1000), 0);
	check_stage(&m, "d/e/extra", "UNTRACKED", 0);
	CHECK_SYS(unlink(tm_bpath(&m, "d/a")));
	check_stage(&m, "d/a", "MISSING", 1);

	/*
	 * A hard-linked file rewritten through one of its names: the daemon
	 * relinks the others to the new version, which one record names; every
	 * name must verify OK (they were MISMATCH), and one name unlinked
	 * leaves the others OK.
	 */
	char *out, *lines;
	ASSERT_EQ(it_write_pattern(tm_path(&m, "h1"), 21, 100000), 0);
	CHECK_SYS(link(tm_path(&m, "h1"), tm_path(&m, "h2")));
	CHECK_SYS(mkdir(tm_path(&m, "hd"), 0755));
	CHECK_SYS(link(tm_path(&m, "h1"), tm_path(&m, "hd/h3")));
	tm_sync(&m);
	ASSERT_EQ(it_write_pattern(tm_path(&m, "h2"), 22, 50000), 0);	/* through another name */
	tm_sync(&m);
	ASSERT_EQ(it_verify(m.backend, 0, &out), 1);	/* d/a is still missing */
	lines = it_verdict_lines(out);
	if (!strstr(lines, "OK h1\n") || !strstr(lines, "OK h2\n") || !strstr(lines, "OK hd/h3\n"))
		FAILF("the names of a rewritten hard-linked file do not all verify:\n%s", out);
	free(out);
	free(lines);
	CHECK_SYS(unlink(tm_path(&m, "h1")));
	ASSERT_EQ(it_write_pattern(tm_path(&m, "hd/h3"), 23, 7000), 0);
	tm_sync(&m);
	ASSERT_EQ(it_verify(m.backend, 0, &out), 1);
	lines = it_verdict_lines(out);
	if (strstr(lines, " h1\n") || !strstr(lines, "OK h2\n") || !strstr(lines, "OK hd/h3\n"))
		FAILF("after an unlink and another rewrite, verify says:\n%s", out);
	free(out);
	free(lines);

	/* A file renamed into a directory made just before (one batch): found at its new name. */
	ASSERT_EQ(it_write_pattern(tm_path(&m, "r1"), 24, 3000), 0);
	tm_sync(&m);
	CHECK_SYS(mkdir(tm_path(&m, "nd"), 0755));
	CHECK_SYS(mkdir(tm_path(&m, "nd/sub"), 0755));
	CHECK_SYS(rename(tm_path(&m, "r1"), tm_path(&m, "nd/sub/r1")));
	tm_sync(&m);
	ASSERT_EQ(it_verify(m.backend, 0, &out), 1);
	lines = it_verdict_lines(out);
	if (strstr(lines, " r1\n") || !strstr(lines, "OK nd/sub/r1\n"))
		FAILF("a file renamed into new directories, verify says:\n%s", out);
	free(out);
	free(lines);
	tm_stop(&m);
	tm_cleanup(&m);
	return 0;
}
