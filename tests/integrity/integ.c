/*
 * integ.c — helpers of the integrity tests (see integ.h): commands,
 * stats, the manifest read by our own parser, and tree snapshots.
 */
#include "tests/integrity/integ.h"
#include "cache/json.h"

#include <dirent.h>
#include <libgen.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <xxhash.h>

#define IO_BUF (1u << 20)
#define REC_HDR 29		/* "C1 " + 8 hex + " " + 16 hex + " " */

/* ---- commands ------------------------------------------------------------ */

const char *it_ctl_bin(void)
{
	static char path[PATH_MAX];
	char dir[PATH_MAX];

	if (!path[0]) {
		snprintf(dir, sizeof(dir), "%s", tm_daemon_bin());
		snprintf(path, sizeof(path), "%s/ckptfs-ctl", dirname(dir));
	}
	return path;
}

int it_verify(const char *path, unsigned jobs, char **out)
{
	char j[16];
	snprintf(j, sizeof(j), "%u", jobs);
	const char *with_jobs[] = { it_ctl_bin(), "verify", "--jobs", j, path, NULL };
	const char *plain[] = { it_ctl_bin(), "verify", path, NULL };
	return tm_run(jobs ? with_jobs : plain, out);
}

/* The next line of verify's output that reports a file: verdict and path. */
static const char *verdict_line(const char *p, char *verdict, size_t vlen, char *path, size_t plen)
{
	while (p && *p) {
		const char *eol = strchr(p, '\n');
		size_t len = eol ? (size_t)(eol - p) : strlen(p);
		char line[PATH_MAX + 256];
		snprintf(line, sizeof(line), "%.*s", (int)len, p);
		p = eol ? eol + 1 : NULL;
		char *sp = strchr(line, ' ');
		if (!sp)
			continue;
		*sp = '\0';
		if (strcmp(line, "OK") && strcmp(line, "MISMATCH") && strcmp(line, "MISSING") &&
		    strcmp(line, "UNTRACKED"))
			continue;
		char *name = sp + 1;
		while (*name == ' ')
			name++;
		char *end = strstr(name, " (expected ");
		if (end)
			*end = '\0';
		if (snprintf(verdict, vlen, "%s", line) >= (int)vlen ||
		    snprintf(path, plen, "%s", name) >= (int)plen)
			continue;	/* not a verdict we could hold */
		return p ? p : "";
	}
	return NULL;
}

const char *it_verdict(const char *out, const char *rel)
{
	static char verdict[16];
	char path[PATH_MAX];

	for (const char *p = out; (p = verdict_line(p, verdict, sizeof(verdict), path, sizeof(path)));)
		if (!strcmp(path, rel))
			return verdict;
	return "";
}

int it_verdict_count(const char *out, const char *want)
{
	char verdict[16], path[PATH_MAX];
	int n = 0;

	for (const char *p = out; (p = verdict_line(p, verdict, sizeof(verdict), path, sizeof(path)));)
		n += !strcmp(verdict, want);
	return n;
}

char *it_verdict_lines(const char *out)
{
	char verdict[16], path[PATH_MAX];
	size_t cap = strlen(out) + 1, have = 0;
	char *s = malloc(cap);

	s[0] = '\0';
	for (const char *p = out; (p = verdict_line(p, verdict, sizeof(verdict), path, sizeof(path)));)
		have += (size_t)snprintf(s + have, cap - have, "%s %s\n", verdict, path);
	return s;
}

/* ---- the daemon ---------------------------------------------------------- */

char *it_log_text(struct tmount *m)
{
	size_t len;
	char *s = read_file(m->log, &len);
	if (!s)
		return strdup("");
	s = realloc(s, len + 1);
	s[len] = '\0';
	return s;
}

int it_log_count(struct tmount *m, const char *needle)
{
	char *s = it_log_text(m);
	int n = 0;

	for (char *line = s, *eol; line && *line; line = eol ? eol + 1 : NULL) {
		if ((eol = strchr(line, '\n')))
			*eol = '\0';
		n += strstr(line, needle) != NULL;
	}
	free(s);
	return n;
}

void it_wait_log(struct tmount *m, const char *needle, int at_least)
{
	uint64_t until = mono_ms() + 20000;

	while (it_log_count(m, needle) < at_least) {
		if (mono_ms() > until)
			FAILF("the daemon never logged '%s'", needle);
		usleep(20 * 1000);
	}
}

void it_gate_set(const char *path, bool on)
{
	if (on)
		write_file(path, "on\n", 3);
	else if (unlink(path) < 0 && errno != ENOENT)
		FAILF("unlink %s: %s", path, strerror(errno));
}

/* ---- stats and flat JSON --------------------------------------------------- */

const char *it_stats(struct tmount *m)
{
	static char buf[16384];
	size_t len;
	char *s = read_file(tm_path(m, ".ckptfs/stats"), &len);

	if (!s)
		FAILF("cannot read %s: %s", tm_path(m, ".ckptfs/stats"), strerror(errno));
	snprintf(buf, sizeof(buf), "%.*s", (int)len, s);
	free(s);
	return buf;
}

bool it_json_get(const char *json, const char *key, char *out, size_t len)
{
	struct json_obj o;
	const struct json_member *v;

	if (json_parse(json, strlen(json), &o, NULL, 0) < 0)
		return false;
	if ((v = json_get(&o, key)))
		snprintf(out, len, "%s", v->type == JSON_STR || v->type == JSON_NUM ? v->str :
			 v->type == JSON_BOOL ? (v->b ? "true" : "false") : "null");
	json_free(&o);
	return v != NULL;
}

long long it_json_num(const char *json, const char *key)
{
	char v[64];
	if (!it_json_get(json, key, v, sizeof(v)))
		FAILF("no \"%s\" in %s", key, json);
	return strtoll(v, NULL, 10);
}

bool it_wait_stat(struct tmount *m, const char *key, const char *want, unsigned timeout_ms)
{
	char v[256];

	for (uint64_t t0 = mono_ms(); mono_ms() - t0 < timeout_ms; usleep(20000))
		if (it_json_get(it_stats(m), key, v, sizeof(v)) && !strcmp(v, want))
			return true;
	return false;
}

/* ---- contents ------------------------------------------------------------ */

uint64_t it_hash64(const void *buf, size_t len)
{
	return XXH3_64bits(buf, len);
}

/* Stream a file through libxxhash's XXH3-64; 0 or -errno. */
static int hash_stream(const char *path, XXH3_state_t *st, uint64_t *size)
{
	char *buf = malloc(IO_BUF);
	int fd = open(path, O_RDONLY | O_NOFOLLOW), r = 0;
	uint64_t total = 0;

	if (fd < 0) {
		free(buf);
		return -errno;
	}
	XXH3_64bits_reset(st);
	for (;;) {
		ssize_t n = read(fd, buf, IO_BUF);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			r = -errno;
		if (n <= 0)
			break;
		XXH3_64bits_update(st, buf, (size_t)n);
		total += (uint64_t)n;
	}
	close(fd);
	free(buf);
	if (size)
		*size = total;
	return r;
}

void *it_pattern(uint64_t seed, size_t size)
{
	void *buf = malloc(size ? size : 1);
	fill_pattern(buf, size, seed, 0);
	return buf;
}

int it_write_pattern(const char *path, uint64_t seed, size_t size)
{
	char *buf = it_pattern(seed, size);
	int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644), r = 0;

	if (fd < 0)
		FAILF("open %s: %s", path, strerror(errno));
	for (size_t done = 0; done < size;) {
		ssize_t n = write(fd, buf + done, size - done);
		if (n <= 0)
			FAILF("write %s: %s", path, n < 0 ? strerror(errno) : "wrote nothing");
		done += (size_t)n;
	}
	if (close(fd) < 0)
		r = -errno;
	free(buf);
	errno = -r;
	return r;
}

bool it_has_pattern(const char *path, uint64_t seed, size_t size)
{
	size_t len;
	char *got = read_file(path, &len), *want;
	bool same;

	if (!got)
		return false;
	want = it_pattern(seed, size);
	same = len == size && memcmp(got, want, size) == 0;
	free(got);
	free(want);
	return same;
}

bool it_has_pattern_in(const char *dir, const char *rel, uint64_t seed, size_t size)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	return it_has_pattern(p, seed, size);
}

void it_write_files(struct tmount *m, const struct it_file *f, size_t n, int may_fail)
{
	for (size_t i = 0; i < n; i++) {
		char dir[PATH_MAX];
		snprintf(dir, sizeof(dir), "%s", f[i].rel);
		for (char *p = strchr(dir, '/'); p; p = strchr(p + 1, '/')) {
			*p = '\0';
			if (mkdir(tm_path(m, dir), 0755) < 0 && errno != EEXIST)
				FAILF("mkdir %s: %s", tm_path(m, dir), strerror(errno));
			*p = '/';
		}
		int r = it_write_pattern(tm_path(m, f[i].rel), f[i].seed, f[i].size);
		if (r < 0 && (!may_fail || r != -may_fail))
			FAILF("close of %s failed: %s", f[i].rel, strerror(-r));
	}
}

/* ---- the manifest log ---------------------------------------------------- */

const char *it_manifest_path(struct tmount *m)
{
	static char path[PATH_MAX * 2];
	char host[256] = "localhost";

	/* The daemon's default node name: the hostname up to its first dot. */
	if (gethostname(host, sizeof(host) - 1) < 0 || (host[strcspn(host, ".")] = '\0', !host[0]))
		snprintf(host, sizeof(host), "localhost");
	snprintf(path, sizeof(path), "%s/.ckptfs/nodes/%s/manifest.log", m->backend, host);
	return path;
}

/* Length of the valid record at p, or 0: "C1 <len> <xxh3-64> <payload>\n". */
static size_t rec_check(const char *p, size_t avail)
{
	char hex[17];
	unsigned long long len, h;

	if (avail < REC_HDR + 1 || memcmp(p, "C1 ", 3) || p[11] != ' ' || p[28] != ' ')
		return 0;
	snprintf(hex, sizeof(hex), "%.8s", p + 3);
	len = strtoull(hex, NULL, 16);
	snprintf(hex, sizeof(hex), "%.16s", p + 12);
	h = strtoull(hex, NULL, 16);
	if (avail < REC_HDR + len + 1 || p[REC_HDR + len] != '\n')
		return 0;
	if (XXH3_64bits(p + REC_HDR, len) != h)
		return 0;
	return REC_HDR + len + 1;
}

int it_log_read(const char *path, struct it_log *l)
{
	size_t size, pos = 0;
	char *data = read_file(path, &size);

	memset(l, 0, sizeof(*l));
	if (!data)
		return -errno;
	l->size = size;
	while (pos < size) {
		size_t k = rec_check(data + pos, size - pos);
		if (!k) {
			/* A failing record: go on at the next line that starts one. */
			char *next = memmem(data + pos + 1, size - pos - 1, "\nC1 ", 4);
			l->bad++;
			if (!next)
				break;
			pos = (size_t)(next + 1 - data);
			continue;
		}
		l->r = realloc(l->r, (l->n + 1) * sizeof(*l->r));
		l->r[l->n] = (struct it_rec){ .off = pos, .len = k,
					      .payload = strndup(data + pos + REC_HDR, k - REC_HDR - 1) };
		l->n++;
		pos += k;
		if (!l->bad)
			l->valid_end = pos;
	}
	free(data);
	return 0;
}

void it_log_free(struct it_log *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->r[i].payload);
	free(l->r);
	memset(l, 0, sizeof(*l));
}

int it_log_count_type(const struct it_log *l, const char *type, const char *path)
{
	char v[PATH_MAX];
	int n = 0;

	for (size_t i = 0; i < l->n; i++)
		if (it_json_get(l->r[i].payload, "t", v, sizeof(v)) && !strcmp(v, type) &&
		    (!path || (it_json_get(l->r[i].payload, "path", v, sizeof(v)) && !strcmp(v, path))))
			n++;
	return n;
}

/* ---- trees --------------------------------------------------------------- */

static int ent_cmp(const void *a, const void *b)
{
	return strcmp(((const struct it_ent *)a)->path, ((const struct it_ent *)b)->path);
}

/* Index of path, or of where it would go (*found false). */
static size_t tree_index(const struct it_tree *t, const char *path, bool *found)
{
	size_t lo = 0, hi = t->n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(t->e[mid].path, path);
		if (c == 0) {
			*found = true;
			return mid;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = false;
	return lo;
}

const struct it_ent *it_tree_find(const struct it_tree *t, const char *path)
{
	bool found;
	size_t i = tree_index(t, path, &found);
	return found ? &t->e[i] : NULL;
}

void it_tree_put(struct it_tree *t, const char *path, char type, uint64_t size, uint64_t hash)
{
	bool found;
	size_t i = tree_index(t, path, &found);

	if (!found) {
		if (t->n == t->cap)
			t->e = realloc(t->e, (t->cap = t->cap ? t->cap * 2 : 64) * sizeof(*t->e));
		memmove(&t->e[i + 1], &t->e[i], (t->n - i) * sizeof(*t->e));
		t->e[i].path = strdup(path);
		t->n++;
	}
	t->e[i].type = type;
	t->e[i].size = size;
	t->e[i].hash = hash;
}

static bool at_or_below(const char *path, const char *top)
{
	size_t n = strlen(top);
	return !strncmp(path, top, n) && (path[n] == '\0' || path[n] == '/');
}

/*
 * Move the entries at or below `path` out of t, renamed to lie below `to`,
 * into *out — or free them when out is NULL.  The rest keep their order.
 */
static void tree_take(struct it_tree *t, const char *path, const char *to, struct it_tree *out)
{
	size_t keep = 0, plen = strlen(path);

	for (size_t i = 0; i < t->n; i++) {
		struct it_ent *e = &t->e[i];
		char moved[PATH_MAX * 2];
		if (!at_or_below(e->path, path)) {
			t->e[keep++] = *e;
			continue;
		}
		if (out) {
			snprintf(moved, sizeof(moved), "%s%s", to, e->path + plen);
			it_tree_put(out, moved, e->type, e->size, e->hash);
		}
		free(e->path);
	}
	t->n = keep;
}

void it_tree_del(struct it_tree *t, const char *path)
{
	tree_take(t, path, NULL, NULL);
}

void it_tree_move(struct it_tree *t, const char *path, const char *to)
{
	struct it_tree moved = { 0 };

	tree_take(t, path, to, &moved);
	it_tree_del(t, to);
	for (size_t i = 0; i < moved.n; i++)
		it_tree_put(t, moved.e[i].path, moved.e[i].type, moved.e[i].size, moved.e[i].hash);
	it_tree_free(&moved);
}

void it_tree_free(struct it_tree *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->e[i].path);
	free(t->e);
	memset(t, 0, sizeof(*t));
}

void it_tree_copy(struct it_tree *dst, const struct it_tree *src)
{
	memset(dst, 0, sizeof(*dst));
	dst->cap = src->n ? src->n : 1;
	dst->e = malloc(dst->cap * sizeof(*dst->e));
	for (size_t i = 0; i < src->n; i++) {
		dst->e[i] = src->e[i];
		dst->e[i].path = strdup(src->e[i].path);
	}
	dst->n = src->n;
	dst->temps = src->temps;
}

static void tree_walk(const char *root, const char *rel, struct it_tree *t, int *err)
{
	char dir[PATH_MAX * 2];
	DIR *d;
	struct dirent *de;

	snprintf(dir, sizeof(dir), "%s%s%s", root, *rel ? "/" : "", rel);
	if (!(d = opendir(dir))) {
		*err = -errno;
		return;
	}
	while ((de = readdir(d))) {
		char child[PATH_MAX], full[PATH_MAX * 2];
		struct stat st;
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (!*rel && !strcmp(de->d_name, ".ckptfs"))
			continue;
		if (!strncmp(de->d_name, ".ckptfs.", 8)) {
			t->temps++;
			continue;
		}
		snprintf(child, sizeof(child), "%s%s%s", rel, *rel ? "/" : "", de->d_name);
		snprintf(full, sizeof(full), "%s/%s", root, child);
		if (lstat(full, &st) < 0) {
			*err = -errno;
			continue;
		}
		if (S_ISDIR(st.st_mode)) {
			it_tree_put(t, child, 'd', 0, 0);
			tree_walk(root, child, t, err);
		} else if (S_ISREG(st.st_mode)) {
			XXH3_state_t *hs = XXH3_createState();
			uint64_t size = 0;
			int r = hash_stream(full, hs, &size);
			if (r < 0)
				*err = r;
			it_tree_put(t, child, 'f', size, XXH3_64bits_digest(hs));
			XXH3_freeState(hs);
		} else if (S_ISLNK(st.st_mode)) {
			char target[PATH_MAX];
			ssize_t n = readlink(full, target, sizeof(target));
			it_tree_put(t, child, 'l', n > 0 ? (uint64_t)n : 0,
				    n > 0 ? XXH3_64bits(target, (size_t)n) : 0);
		}
	}
	closedir(d);
}

int it_tree_scan(const char *root, struct it_tree *t)
{
	int err = 0;

	memset(t, 0, sizeof(*t));
	tree_walk(root, "", t, &err);
	if (t->n)	/* an empty tree has no array: qsort(NULL, ...) is undefined */
		qsort(t->e, t->n, sizeof(*t->e), ent_cmp);
	return err;
}

static void diff_note(char *why, size_t len, size_t *have, int n, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static void diff_note(char *why, size_t len, size_t *have, int n, const char *fmt, ...)
{
	va_list ap;

	if (!why || n > 6 || *have >= len)
		return;
	va_start(ap, fmt);
	*have += (size_t)vsnprintf(why + *have, len - *have, fmt, ap);
	va_end(ap);
}

int it_tree_diff(const struct it_tree *a, const struct it_tree *b, char *why, size_t len)
{
	size_t i = 0, j = 0, have = 0;
	int n = 0;

	if (why && len)
		why[0] = '\0';
	while (i < a->n || j < b->n) {
		int c = i == a->n ? 1 : j == b->n ? -1 : strcmp(a->e[i].path, b->e[j].path);
		if (c < 0) {
			n++;
			diff_note(why, len, &have, n, " only-first:%s", a->e[i++].path);
		} else if (c > 0) {
			n++;
			diff_note(why, len, &have, n, " only-second:%s", b->e[j++].path);
		} else {
			const struct it_ent *x = &a->e[i++], *y = &b->e[j++];
			if (x->type != y->type || x->size != y->size || x->hash != y->hash) {
				n++;
				diff_note(why, len, &have, n, " differ:%s(%c %llu %016llx vs %c %llu %016llx)",
					  x->path, x->type, (unsigned long long)x->size,
					  (unsigned long long)x->hash, y->type,
					  (unsigned long long)y->size, (unsigned long long)y->hash);
			}
		}
	}
	return n;
}
