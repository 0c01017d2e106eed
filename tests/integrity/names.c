/*
 * names.c — hostile names end to end (issue 10 item 5): file and directory
 * names of 255 bytes holding newlines, quotes, backslashes, control
 * characters and bytes that are not UTF-8, on a mount point whose own name
 * has a quote, control and non-UTF-8 bytes.  Each must round-trip:
 *
 *  - through the mount: created, listed by readdir, read back;
 *  - through MOUNT/.ckptfs/files while pending, and the stats JSON (the
 *    mount's own name): one strict JSON object per line, decoding to the
 *    exact bytes (\udcXX for bytes that are not UTF-8, docs/manifest.md);
 *  - through `ckptfs-stat --prometheus`: valid exposition text (UTF-8, one
 *    sample per line, only \\, \" and \n escapes in label values) and
 *    `ckptfs-stat` for people (one line per file);
 *  - through the manifest: after a SIGKILL with some of them blocked, the
 *    next mount's recovery names exactly those as in flight (the records'
 *    paths decode to them), and the rest are published;
 *  - through `ckptfs-ctl verify`: one OK line per file, whose escaped name
 *    (\\, \n, \t, \r, \xNN; ckptfs-ctl(1)) decodes to the exact bytes;
 *  - through the rescue directory: with the backend refusing every rename
 *    and drain_timeout=1, the unmount rescues them; manifest.jsonl decodes
 *    to the exact paths and the saved files hold their contents.
 */
#include "tests/integrity/integ.h"
#include "cache/json.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#define NNAMES 6
static char names[NNAMES][256];	/* paths below the root; [4] and [5] are in directory [3] */
static char dirname_[256];

static void make_names(void)
{
	static const char core[] = "n\n\"q\\b\x01\x1f\x7f\t\r\xff\xfe\xc3\x28\xed\xa0\x80\xf4\x90\x80\x80 caf\xc3\xa9 \xf0\x9f\x98\x80 %s$";
	for (int i = 0; i < 3; i++) {
		size_t n = 0;
		char *p = names[i];
		n = (size_t)snprintf(p, 256, "%d", i);
		memcpy(p + n, core, sizeof(core) - 1);
		n += sizeof(core) - 1;
		for (; n < 255; n++)	/* 255 bytes: the longest name there is */
			p[n] = "xyz\n\""[n % 5];
		p[255] = '\0';
	}
	/* A directory of 200 bytes, and files in it (path 200 + 1 + 40). */
	memset(dirname_, 'd', 200);
	memcpy(dirname_, "dir\n\"\\\xff\x01", 8);
	dirname_[200] = '\0';
	snprintf(names[3], sizeof(names[3]), "top\xfe\"\n");
	snprintf(names[4], 256, "%.200s/%s", dirname_, "in\ndir\"\\\x80.pt");
	snprintf(names[5], 256, "%.200s/%s", dirname_, "second\x1b[31m");
}

static uint64_t seed(int i) { return 0x5eed0000u + (uint64_t)i; }
static size_t size_of(int i) { return 1000 + (size_t)i * 4097; }

/* ---- independent decoders ------------------------------------------------------ */

/* verify's escaped name back to bytes (ckptfs-ctl(1)): \\ \n \t \r \xNN. */
static bool unescape(const char *s, size_t n, char *out, size_t outlen)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (k + 1 >= outlen)
			return false;
		if (s[i] != '\\') {
			out[k++] = s[i];
			continue;
		}
		if (++i >= n)
			return false;
		switch (s[i]) {
		case '\\': out[k++] = '\\'; break;
		case 'n': out[k++] = '\n'; break;
		case 't': out[k++] = '\t'; break;
		case 'r': out[k++] = '\r'; break;
		case 'x': {
			unsigned v;
			if (i + 2 >= n || sscanf(s + i + 1, "%2x", &v) != 1)
				return false;
			out[k++] = (char)v;
			i += 2;
			break;
		}
		default:
			return false;
		}
	}
	out[k] = '\0';
	return true;
}

/* Well-formed UTF-8 (RFC 3629), checked here without the daemon's code. */
static bool utf8_ok(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned c = s[i], need, cp;
		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xC2 && c <= 0xDF)
			need = 1, cp = c & 0x1F;
		else if (c >= 0xE0 && c <= 0xEF)
			need = 2, cp = c & 0x0F;
		else if (c >= 0xF0 && c <= 0xF4)
			need = 3, cp = c & 0x07;
		else
			return false;
		for (unsigned k = 1; k <= need; k++) {
			if (i + k >= n || (s[i + k] & 0xC0) != 0x80)
				return false;
			cp = cp << 6 | (s[i + k] & 0x3F);
		}
		if ((need == 2 && cp < 0x800) || (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
		    (cp >= 0xD800 && cp <= 0xDFFF))
			return false;
		i += need + 1;
	}
	return true;
}

static int find_name(const char *path)
{
	for (int i = 0; i < NNAMES; i++)
		if (!strcmp(path, names[i]))
			return i;
	return -1;
}

/*
 * Each '\n'-terminated line of text (what names it): UTF-8, and one strict
 * JSON object, handed to fn.  Returns the sum of what fn returns.
 */
static int json_lines(char *text, const char *what, int (*fn)(const struct json_obj *o, void *arg),
		      void *arg)
{
	int sum = 0;
	for (char *line = text, *nl; *line; line = nl + 1) {
		struct json_obj o;
		char err[128];
		if (!(nl = strchr(line, '\n')))
			FAILF("%s: the last line has no newline: %s", what, line);
		if (!utf8_ok((unsigned char *)line, (size_t)(nl - line)))
			FAILF("%s: a line is not UTF-8 (RFC 8259 JSON): %.*s", what, (int)(nl - line), line);
		if (json_parse(line, (size_t)(nl - line), &o, err, sizeof(err)) < 0)
			FAILF("%s: a line is not one JSON object (%s): %.*s", what, err, (int)(nl - line), line);
		sum += fn(&o, arg);
		json_free(&o);
	}
	return sum;
}

/* A line of .ckptfs/files: 1 if its path decodes to one of the names. */
static int files_line(const struct json_obj *o, void *arg)
{
	ASSERT_TRUE(json_str(o, "path") != NULL);
	return find_name(json_str(o, "path")) >= 0;
}

/* ---- the checks ---------------------------------------------------------------- */

/*
 * Write names[from, to) through the mount.  With the backend refusing
 * (blocked), close may already report the refusal: may_fail is that errno.
 */
static void write_some(struct tmount *m, int from, int to, int may_fail)
{
	struct stat st;
	if (stat(tm_path(m, dirname_), &st) < 0)
		CHECK_SYS(mkdir(tm_path(m, dirname_), 0755));
	for (int i = from; i < to; i++) {
		int r = it_write_pattern(tm_path(m, names[i]), seed(i), size_of(i));
		if (r < 0 && r != -may_fail)
			FAILF("writing name %d: %s", i, strerror(-r));
	}
}

static void write_all(struct tmount *m, int from, int to)
{
	write_some(m, from, to, 0);
}

static void mount_round_trip(struct tmount *m)
{
	int seen = 0;
	DIR *d = opendir(m->mnt);
	for (struct dirent *de; (de = readdir(d));)
		for (int i = 0; i < NNAMES; i++)
			seen += !strcmp(de->d_name, names[i]) || (i == 0 && !strcmp(de->d_name, dirname_));
	closedir(d);
	d = opendir(tm_path(m, dirname_));
	ASSERT_TRUE(d != NULL);
	for (struct dirent *de; (de = readdir(d));)
		seen += !strcmp(de->d_name, strchr(names[4], '/') + 1) ||
			!strcmp(de->d_name, strchr(names[5], '/') + 1);
	closedir(d);
	ASSERT_EQ(seen, 7);	/* names 0-3 and the directory at the top, 4 and 5 inside it */
	for (int i = 0; i < NNAMES; i++)
		if (!it_has_pattern(tm_path(m, names[i]), seed(i), size_of(i)))
			FAILF("name %d does not read back through the mount", i);
	printf("mount: %d hostile names created, listed and read back\n", NNAMES);
}

/* Every line of .ckptfs/files is one strict object; the pending paths decode exactly. */
static void files_json(struct tmount *m, int want)
{
	size_t len;
	char *text = read_file(tm_path(m, ".ckptfs/files"), &len);
	int found = 0;
	ASSERT_TRUE(text != NULL);
	text = realloc(text, len + 1);
	text[len] = '\0';
	found = json_lines(text, ".ckptfs/files", files_line, NULL);
	free(text);
	if (found != want)
		FAILF(".ckptfs/files lists %d of the %d pending hostile names", found, want);
	printf(".ckptfs/files: %d pending hostile paths decode to their bytes\n", found);
}

static void stats_json(struct tmount *m)
{
	const char *text = it_stats(m);
	struct json_obj o;
	char err[128];
	if (!utf8_ok((const unsigned char *)text, strlen(text)))
		FAILF("stats is not UTF-8 (RFC 8259 JSON): %s", text);
	if (json_parse(text, strlen(text), &o, err, sizeof(err)) < 0)
		FAILF("stats is not one JSON object (%s): %s", err, text);
	char real[PATH_MAX];
	ASSERT_TRUE(realpath(m->mnt, real) != NULL);
	ASSERT_STR_EQ(json_str(&o, "mount"), real);
	json_free(&o);
	printf("stats: the mount's hostile name decodes exactly\n");
}

/* Prometheus text exposition format 0.0.4, as far as a sample line goes. */
static void prometheus(struct tmount *m)
{
	char *out;
	const char *argv[] = { "ckptfs-stat", "--prometheus", m->mnt, NULL };
	char bin[PATH_MAX];
	snprintf(bin, sizeof(bin), "%s", it_ctl_bin());
	strcpy(strrchr(bin, '/') + 1, "ckptfs-stat");
	argv[0] = bin;
	ASSERT_EQ(tm_run(argv, &out), 0);
	int samples = 0;
	for (char *line = out, *nl; *line; line = nl + 1) {
		ASSERT_TRUE((nl = strchr(line, '\n')) != NULL);
		size_t n = (size_t)(nl - line);
		if (!utf8_ok((unsigned char *)line, n))
			FAILF("--prometheus: a line is not UTF-8: %.*s", (int)n, line);
		if (!strncmp(line, "# HELP ", 7) || !strncmp(line, "# TYPE ", 7))
			continue;
		char *brace = memchr(line, '{', n);
		ASSERT_TRUE(brace && !strncmp(line, "ckptfs_", 7));
		for (char *p = line; p < brace; p++)
			ASSERT_TRUE((*p >= 'a' && *p <= 'z') || *p == '_');
		ASSERT_TRUE(!strncmp(brace, "{mount=\"", 8));
		char *p = brace + 8;
		for (; p < nl && *p != '"'; p++) {
			if ((unsigned char)*p < 0x20)
				FAILF("--prometheus: a raw control byte in a label: %.*s", (int)n, line);
			if (*p == '\\') {
				p++;
				if (*p != '\\' && *p != '"' && *p != 'n')
					FAILF("--prometheus: escape \\%c in a label: %.*s", *p, (int)n, line);
			}
		}
		ASSERT_TRUE(p < nl && p[1] == '}' && p[2] == ' ');
		char *end;
		strtod(p + 3, &end);
		if (end != nl)
			FAILF("--prometheus: the value is not a number: %.*s", (int)n, line);
		samples++;
	}
	ASSERT_TRUE(samples > 10);
	free(out);
	printf("prometheus: %d samples, valid exposition text for a hostile mount name\n", samples);
}

/* verify: one OK line per file, decoding to its exact bytes. */
static void verify_names(const char *backend)
{
	char *out;
	bool ok[NNAMES] = { 0 };
	ASSERT_EQ(it_verify(backend, 0, &out), 0);
	for (char *line = out, *nl; line && *line; line = nl ? nl + 1 : NULL) {
		char name[1024];
		nl = strchr(line, '\n');
		size_t n = nl ? (size_t)(nl - line) : strlen(line);
		if (strncmp(line, "OK        ", 10) != 0)
			continue;
		if (!unescape(line + 10, n - 10, name, sizeof(name)))
			FAILF("verify: a name that does not decode: %.*s", (int)n, line);
		int i = find_name(name);
		if (i >= 0)
			ok[i] = true;
	}
	for (int i = 0; i < NNAMES; i++)
		if (!ok[i])
			FAILF("verify has no OK line decoding to name %d:\n%s", i, out);
	free(out);
	printf("verify: %d OK lines decode to the hostile names\n", NNAMES);
}

/* Crash with names[0..2] blocked: recovery names exactly those as in flight. */
static void crash_and_recover(struct tmount *m)
{
	char flag[PATH_MAX];
	snprintf(flag, sizeof(flag), "%s/block", m->root);
	const char *env[] = { cu_fault_env("op=rename,err=EIO,while=%s", flag), NULL };
	struct it_log l;
	int intents = 0;

	tm_mount(m, NULL, env);
	for (int i = 0; i < 3; i++)
		CHECK_SYS(unlink(tm_path(m, names[i])));
	tm_sync(m);
	it_gate_set(flag, true);
	write_some(m, 0, 3, EIO);
	files_json(m, 3);
	char mid[64];
	ASSERT_TRUE(it_json_get(it_stats(m), "mount_id", mid, sizeof(mid)));
	/* Wait for this mount's intents for them (the versions queued). */
	for (uint64_t t0 = mono_ms(); intents < 3 && mono_ms() - t0 < 10000; usleep(20000)) {
		intents = 0;
		ASSERT_EQ(it_log_read(it_manifest_path(m), &l), 0);
		for (size_t i = 0; i < l.n; i++) {
			struct json_obj o;
			if (!utf8_ok((unsigned char *)l.r[i].payload, strlen(l.r[i].payload)))
				FAILF("a manifest record is not UTF-8: %s", l.r[i].payload);
			if (json_parse(l.r[i].payload, strlen(l.r[i].payload), &o, NULL, 0) < 0)
				FAILF("a manifest record is not a JSON object: %s", l.r[i].payload);
			const char *t = json_str(&o, "t"), *p = json_str(&o, "path"), *id = json_str(&o, "m");
			if (t && p && id && !strcmp(t, "intent") && !strcmp(id, mid) && find_name(p) >= 0 &&
			    find_name(p) < 3)
				intents++;
			json_free(&o);
		}
		it_log_free(&l);
	}
	ASSERT_EQ(intents, 3);
	tm_kill(m);
	it_gate_set(flag, false);
	tm_mount(m, NULL, NULL);
	ASSERT_EQ(it_json_num(it_stats(m), "recovered_inflight_files"), 3);
	for (int i = 0; i < 3; i++)
		ASSERT_TRUE(!file_exists(tm_bpath(m, names[i])));
	/* Written again, they publish. */
	write_all(m, 0, 3);
	tm_stop(m);
	printf("recovery: the 3 blocked hostile names were reported in flight, the rest published\n");
}

struct rescued {
	const char *dir, *host, *mid;
};

/* A line of the rescue manifest: 1 if it is one of the names' versions, saved intact. */
static int rescue_line(const struct json_obj *o, void *arg)
{
	const struct rescued *r = arg;
	const char *p = json_str(o, "path"), *op = json_str(o, "op");
	int i = p ? find_name(p) : -1;
	char saved[PATH_MAX * 3];

	if (i < 0 || !op || strcmp(op, "file"))
		return 0;
	ASSERT_TRUE(json_is_true(o, "saved"));
	snprintf(saved, sizeof(saved), "%s/%s-%s/files/%s", r->dir, r->host, r->mid, p);
	if (!it_has_pattern(saved, seed(i), size_of(i)))
		FAILF("the rescued copy of name %d is not its contents", i);
	return 1;
}

static void rescue(struct tmount *m)
{
	char rescue_dir[PATH_MAX], opts[PATH_MAX + 64], mid[64], host[256] = "", where[PATH_MAX * 2];
	const char *env[] = { cu_fault_env("op=rename,err=EIO"), NULL };
	int found = 0;

	snprintf(rescue_dir, sizeof(rescue_dir), "%s/rescue", m->root);
	snprintf(opts, sizeof(opts), "drain_timeout=1,rescue_dir=%s", rescue_dir);
	tm_mount(m, opts, env);
	for (int i = 0; i < NNAMES; i++)
		CHECK_SYS(unlink(tm_path(m, names[i])));
	write_some(m, 0, NNAMES, EIO);
	ASSERT_TRUE(it_json_get(it_stats(m), "mount_id", mid, sizeof(mid)));
	ASSERT_NE(cu_stop_any(m), 0);
	gethostname(host, sizeof(host) - 1);
	snprintf(where, sizeof(where), "%s/%s-%s/manifest.jsonl", rescue_dir, host, mid);
	size_t len;
	char *text = read_file(where, &len);
	if (!text)
		FAILF("no rescue manifest at %s", where);
	text = realloc(text, len + 1);
	text[len] = '\0';
	struct rescued r = { rescue_dir, host, mid };
	found = json_lines(text, "manifest.jsonl", rescue_line, &r);
	free(text);
	ASSERT_EQ(found, NNAMES);
	printf("rescue: manifest.jsonl decodes to the %d hostile paths, their copies intact\n", found);
}

int main(void)
{
	struct tmount m;
	char mnt[PATH_MAX];

	tm_require_fuse();
	cu_require_root();
	make_names();
	tm_init(&m, "names");
	/* A mount point with a quote, control and non-UTF-8 bytes (mountinfo keeps them raw). */
	snprintf(mnt, sizeof(mnt), "%s/mnt\"q'\x01\xff\xfe$", m.root);
	CHECK_SYS(mkdir(mnt, 0755));
	snprintf(m.mnt, sizeof(m.mnt), "%s", mnt);

	tm_mount(&m, NULL, NULL);
	write_all(&m, 0, NNAMES);
	mount_round_trip(&m);
	stats_json(&m);
	prometheus(&m);
	tm_stop(&m);
	verify_names(m.backend);
	crash_and_recover(&m);
	verify_names(m.backend);
	rescue(&m);
	tm_cleanup(&m);
	return 0;
}
