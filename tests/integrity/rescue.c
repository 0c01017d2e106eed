/*
 * rescue.c — unmount while the backend keeps refusing: the data goes to the
 * rescue directory, never silently away (contract item 2; backend/rescue.c).
 *
 * A first, healthy mount publishes "kept".  The second mount runs with
 * every pwrite failing (EIO, no gate: the backend never recovers) and
 * drain_timeout=2,rescue_dir=R.  Through it: mkdir sub (a namespace change,
 * which still succeeds), sub/a, b, c.tmp renamed to c, and a new version of
 * "kept"; fsync reports EIO.  On unmount the daemon gives up after two
 * seconds without progress and must:
 *  - exit non-zero, and log where it saved the data;
 *  - have written R/<host>-<mount id>/files/<path> for every version that
 *    never reached the backend, with exactly the contents written, and a
 *    manifest.jsonl listing them in order with size, saved: true and the
 *    XXH3-128 we compute ourselves, plus the rename still to be done;
 *  - note the rescue in the backend's manifest;
 *  - have left the backend as it was: "kept" still the first version, none
 *    of the new files, state.json not clean.
 * A healthy mount afterwards recovers: no temporary file left, the mount
 * shows the backend.
 *
 * Two versions of one name are both kept: ckpt.tmp written and renamed to
 * ckpt-step1, then written again and renamed to ckpt-step2 (the second
 * save replaced the first before); and a file x renamed away before x
 * became a directory holding x/y (whose save failed).  Each version's line
 * says where its copy is ("file"); a directory made in one still queued
 * is named by its path (it was "unplaced").  The rescue directory's path is long
 * (over 512 bytes): the backend's "rescued" record names it whole (it was
 * cut in a fixed buffer, and read past its end).
 */
#include "tests/integrity/integ.h"

/* Where each was written is where the rescue must put it. */
static const struct it_file unpersisted[] = {
	{ "sub/a", 10, 3 * MiB / 2 },
	{ "b", 11, 100 * KiB },
	{ "c.tmp", 12, 5000 },
	{ "kept", 13, 64 * KiB },
};
#define NVER (sizeof(unpersisted) / sizeof(unpersisted[0]))

/* Versions whose names are taken again later: (name, seed, size), in order. */
static const struct it_file again[] = {
	{ "ckpt.tmp", 20, 3000 },
	{ "ckpt.tmp", 21, 5000 },
	{ "x", 22, 700 },
	{ "x/y", 23, 900 },
};
#define NAGAIN (sizeof(again) / sizeof(again[0]))

/* The line of manifest.jsonl for (op, path), or NULL (static copy). */
static const char *jsonl_find(const char *text, const char *op, const char *path)
{
	static char line[4096];
	char v[PATH_MAX];

	for (const char *p = text; p && *p;) {
		const char *eol = strchr(p, '\n');
		snprintf(line, sizeof(line), "%.*s", (int)(eol ? eol - p : (long)strlen(p)), p);
		p = eol ? eol + 1 : NULL;
		if (it_json_get(line, "op", v, sizeof(v)) && !strcmp(v, op) &&
		    it_json_get(line, "path", v, sizeof(v)) && !strcmp(v, path))
			return line;
	}
	return NULL;
}

static void check_rescued(const char *where)
{
	char mf[PATH_MAX * 3], file[PATH_MAX * 3], want[33], v[PATH_MAX];
	const char *line;
	size_t len;
	char *text;

	snprintf(mf, sizeof(mf), "%s/manifest.jsonl", where);
	if (!(text = read_file(mf, &len)))
		FAILF("cannot read %s: %s", mf, strerror(errno));
	text = realloc(text, len + 1);
	text[len] = '\0';
	for (size_t i = 0; i < NVER; i++) {
		const struct it_file *w = &unpersisted[i];
		void *buf = it_pattern(w->seed, w->size);
		td_digest_buf(buf, w->size, want);
		free(buf);
		if (!(line = jsonl_find(text, "file", w->rel)))
			FAILF("%s is not in %s:\n%s", w->rel, mf, text);
		ASSERT_EQ(it_json_num(line, "size"), w->size);
		ASSERT_TRUE(it_json_get(line, "xxh3", v, sizeof(v)));
		ASSERT_STR_EQ(v, want);
		ASSERT_TRUE(it_json_get(line, "saved", v, sizeof(v)));
		ASSERT_STR_EQ(v, "true");
		snprintf(file, sizeof(file), "%s/files/%s", where, w->rel);
		if (!it_has_pattern(file, w->seed, w->size))
			FAILF("rescued %s does not hold what was written", file);
		ASSERT_EQ(td_digest_file(file, v), 0);
		ASSERT_STR_EQ(v, want);
	}
	/* Each version of a name used twice, in order, where its line says. */
	const char *p = text;
	for (size_t i = 0; i < NAGAIN; i++) {
		const struct it_file *w = &again[i];
		if (!(line = jsonl_find(p, "file", w->rel)))
			FAILF("version %zu of %s is not in %s:\n%s", i, w->rel, mf, text);
		p = strstr(p, strchr(line, ',')) + 1;	/* search on after this line */
		ASSERT_TRUE(it_json_get(line, "saved", v, sizeof(v)));
		if (strcmp(v, "true"))
			FAILF("version %zu of %s was not saved: %s", i, w->rel, line);
		if (!it_json_get(line, "file", v, sizeof(v)))
			FAILF("the line of %s does not say where its copy is: %s", w->rel, line);
		snprintf(file, sizeof(file), "%s/%s", where, v);
		if (!it_has_pattern(file, w->seed, w->size))
			FAILF("the copy of version %zu of %s (%s) does not hold it", i, w->rel, file);
	}
	if (!jsonl_find(text, "mkdir", "q") || !jsonl_find(text, "mkdir", "q/r"))
		FAILF("the mkdirs of q and q/r are not named by their paths in %s:\n%s", mf, text);
	if (!(line = jsonl_find(text, "rename", "c.tmp")) || !it_json_get(line, "to", v, sizeof(v)))
		FAILF("the rename c.tmp -> c is not in %s:\n%s", mf, text);
	ASSERT_STR_EQ(v, "c");
	/* In sequence order: sub/a was written before b, b before c.tmp. */
	ASSERT_TRUE(strstr(text, "\"sub/a\"") < strstr(text, "\"b\""));
	ASSERT_TRUE(strstr(text, "\"b\"") < strstr(text, "\"c.tmp\""));
	free(text);
}

int main(void)
{
	struct tmount m;
	char rescue[PATH_MAX], opts[PATH_MAX + 64], where[PATH_MAX * 2], host[256] = "";
	char mid[32], line[PATH_MAX * 3], *state;
	const char *env[] = { cu_fault_env("op=pwrite,err=EIO"), NULL };
	struct it_log l;
	struct it_tree b, mt;
	size_t len;
	int fd, rc;

	tm_require_fuse();
	tm_init(&m, "rescue");
	snprintf(rescue, sizeof(rescue), "%s/rescue", m.root);
	CHECK_SYS(mkdir(rescue, 0700));
	for (int i = 0; i < 3; i++) {		/* 3 x 200 more bytes */
		size_t n = strlen(rescue);
		snprintf(rescue + n, sizeof(rescue) - n, "/%0200d", i);
		CHECK_SYS(mkdir(rescue, 0700));
	}
	snprintf(opts, sizeof(opts), "drain_timeout=2,rescue_dir=%s", rescue);

	tm_mount(&m, NULL, NULL);
	ASSERT_EQ(it_write_pattern(tm_path(&m, "kept"), 1, 200 * KiB), 0);
	tm_stop(&m);

	tm_mount(&m, opts, env);
	it_write_files(&m, unpersisted, NVER, EIO);	/* close may see its own failure */
	CHECK_SYS(rename(tm_path(&m, "c.tmp"), tm_path(&m, "c")));
	CHECK_SYS(mkdir(tm_path(&m, "q"), 0755));	/* directories queued in queued ones */
	CHECK_SYS(mkdir(tm_path(&m, "q/r"), 0755));
	for (size_t i = 0; i < NAGAIN; i++) {
		if (!strcmp(again[i].rel, "x/y"))
			CHECK_SYS(mkdir(tm_path(&m, "x"), 0755));
		it_write_pattern(tm_path(&m, again[i].rel), again[i].seed, again[i].size);
		const char *to = i == 0 ? "ckpt-step1" : i == 1 ? "ckpt-step2" : i == 2 ? "x.old" : NULL;
		char from[PATH_MAX];
		snprintf(from, sizeof(from), "%s", tm_path(&m, again[i].rel));
		if (to)
			CHECK_SYS(rename(from, tm_path(&m, to)));
	}
	fd = CHECK_SYS(open(m.mnt, O_RDONLY | O_DIRECTORY));
	ASSERT_EQ(fsync(fd), -1);
	ASSERT_EQ(errno, EIO);
	close(fd);
	ASSERT_TRUE(it_json_get(it_stats(&m), "mount_id", mid, sizeof(mid)));

	rc = cu_stop_any(&m);
	if (rc == 0)
		FAILF("the daemon exited 0 although it could not persist its data");
	gethostname(host, sizeof(host) - 1);
	snprintf(where, sizeof(where), "%s/%s-%s", rescue, host, mid);
	snprintf(line, sizeof(line), "saved them in %s", where);
	if (it_log_count(&m, line) != 1)
		FAILF("the daemon log does not say \"%s\"", line);
	check_rescued(where);

	/* The backend is as the failing mount found it, and knows of the rescue. */
	ASSERT_TRUE(it_has_pattern(tm_bpath(&m, "kept"), 1, 200 * KiB));
	for (size_t i = 0; i < NVER; i++)
		if (strcmp(unpersisted[i].rel, "kept") && file_exists(tm_bpath(&m, unpersisted[i].rel)))
			FAILF("%s reached the backend although every write failed", unpersisted[i].rel);
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "c")));
	ASSERT_EQ(it_log_read(it_manifest_path(&m), &l), 0);
	ASSERT_EQ(it_log_count_type(&l, "rescued", NULL), 1);
	for (size_t i = 0; i < l.n; i++) {
		char v[PATH_MAX * 2];
		if (it_json_get(l.r[i].payload, "t", v, sizeof(v)) && !strcmp(v, "rescued") &&
		    (!it_json_get(l.r[i].payload, "where", v, sizeof(v)) || strcmp(v, where)))
			FAILF("the backend's rescued record does not name %s: %s", where,
			      l.r[i].payload);
	}
	it_log_free(&l);
	snprintf(line, sizeof(line), "%s", it_manifest_path(&m));
	snprintf(strrchr(line, '/'), 16, "/state.json");
	ASSERT_TRUE((state = read_file(line, &len)) != NULL);
	state = realloc(state, len + 1);
	state[len] = '\0';
	ASSERT_TRUE(strstr(state, "\"clean\": false") != NULL);
	free(state);

	tm_mount(&m, NULL, NULL);
	ASSERT_EQ(it_tree_scan(m.backend, &b), 0);
	ASSERT_EQ(b.temps, 0);
	ASSERT_EQ(it_tree_scan(m.mnt, &mt), 0);
	ASSERT_EQ(it_tree_diff(&b, &mt, NULL, 0), 0);
	it_tree_free(&b);
	it_tree_free(&mt);
	tm_stop(&m);
	tm_cleanup(&m);
	return 0;
}
