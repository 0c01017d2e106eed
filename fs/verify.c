/*
 * verify.c — `ckptfs-ctl verify PATH...`: recompute the digest of backend
 * files and compare each with the newest manifest record for its path.
 *
 * PATH is a directory (or file) on the backend — no daemon needed — or in a
 * ckptfs mount, which is drained first and then checked on its backend.
 * The manifests of every node (BACKEND/.ckptfs/nodes/<host>/manifest.log)
 * are replayed in time order into a map path -> (size, digest): versions
 * set entries, unlink/rmdir remove them, rename moves them (directories with
 * everything below), records voided by a recovery are skipped.  Then each
 * file under PATH is hashed (files in parallel, 4 MiB sequential reads of
 * its data; holes are not read — backend/digest.h) with the digest its
 * record holds: the block-run digest, or for records of a mount whose
 * "mount" record says format 1, the XXH3-128 of the whole file.
 *
 *   OK        digest and size match the newest record
 *   MISMATCH  they do not: the file is not what was published
 *   MISSING   the manifest has the file, the backend does not
 *   UNTRACKED the backend has a file the manifest does not know
 *
 * Exit 1 if anything is MISMATCH or MISSING, 2 on usage errors, else 0.
 */
#include "fs/cli.h"
#include "fs/mounts.h"
#include "backend/manifest.h"
#include "backend/digest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *prog = "ckptfs-ctl verify";

/* ---- the replayed manifest: path -> newest record ----------------------- */

struct entry {
	struct entry *next;
	char *path;
	uint64_t size;
	char xxh3[33];
	enum digest_kind kind;	/* how xxh3 was computed (by its mount's format) */
	bool seen;		/* found on the backend walk */
};

struct pmap {
	struct entry **b;
	size_t nb, n;
};

static size_t pm_slot(const struct pmap *m, const char *path)
{
	return XXH3_64bits(path, strlen(path)) & (m->nb - 1);
}

static struct entry *pm_get(struct pmap *m, const char *path)
{
	if (!m->nb)
		return NULL;
	for (struct entry *e = m->b[pm_slot(m, path)]; e; e = e->next)
		if (!strcmp(e->path, path))
			return e;
	return NULL;
}

static void pm_insert(struct pmap *m, struct entry *e)
{
	if (m->n + 1 > m->nb) {
		size_t nb = m->nb ? m->nb * 2 : 1024;
		struct entry **b = xcalloc(nb, sizeof(*b));
		for (size_t i = 0; i < m->nb; i++)
			for (struct entry *x = m->b[i], *nx; x; x = nx) {
				nx = x->next;
				size_t s = XXH3_64bits(x->path, strlen(x->path)) & (nb - 1);
				x->next = b[s];
				b[s] = x;
			}
		free(m->b);
		m->b = b;
		m->nb = nb;
	}
	size_t s = pm_slot(m, e->path);
	e->next = m->b[s];
	m->b[s] = e;
	m->n++;
}

/* Unlink an entry from its chain without freeing it. */
static void pm_detach(struct pmap *m, struct entry *e)
{
	struct entry **pp = &m->b[pm_slot(m, e->path)];
	while (*pp != e)
		pp = &(*pp)->next;
	*pp = e->next;
	m->n--;
}

static void entry_free(struct entry *e)
{
	free(e->path);
	free(e);
}

static bool under(const char *path, const char *dir)
{
	size_t n = strlen(dir);
	return !strncmp(path, dir, n) && path[n] == '/';
}

/* Entries at `path` or below it, detached from the map. */
static struct entry *pm_take(struct pmap *m, const char *path)
{
	struct entry *out = NULL;
	for (size_t i = 0; i < m->nb; i++) {
		struct entry *e = m->b[i];
		while (e) {
			struct entry *next = e->next;
			if (!strcmp(e->path, path) || under(e->path, path)) {
				pm_detach(m, e);
				e->next = out;
				out = e;
			}
			e = next;
		}
	}
	return out;
}

/* Re-insert taken entries with the prefix `from` replaced by `to`. */
static void pm_put_renamed(struct pmap *m, struct entry *list, const char *from, const char *to)
{
	while (list) {
		struct entry *next = list->next;
		struct strbuf b = { 0 };
		sb_printf(&b, "%s%s", to, list->path + strlen(from));
		free(list->path);
		list->path = b.s;
		struct entry *old = pm_get(m, list->path);
		if (old) {
			pm_detach(m, old);
			entry_free(old);
		}
		pm_insert(m, list);
		list = next;
	}
}

static void pm_remove(struct pmap *m, const char *path)
{
	for (struct entry *e = pm_take(m, path), *next; e; e = next) {
		next = e->next;
		entry_free(e);
	}
}

/* ---- reading the manifests -------------------------------------------- */

struct rec {
	double time;
	int node;
	uint64_t order;
	struct jobj o;
};

struct recs {
	struct rec *v;
	size_t n;
	int node;
	uint64_t order;
};

static int collect(void *arg, const char *payload, size_t len, uint64_t off)
{
	struct recs *r = arg;
	char *text = xmalloc(len + 1);
	struct rec x = { .node = r->node, .order = r->order++ };

	memcpy(text, payload, len);
	text[len] = '\0';
	if (jobj_parse(text, &x.o)) {
		x.time = jobj_num(&x.o, "time");
		r->v = xrealloc(r->v, (r->n + 1) * sizeof(*r->v));
		r->v[r->n++] = x;
	}
	free(text);
	return 0;
}

static int rec_cmp(const void *a, const void *b)
{
	const struct rec *x = a, *y = b;
	if (x->time != y->time)
		return x->time < y->time ? -1 : 1;
	if (x->node != y->node)
		return x->node - y->node;
	return x->order < y->order ? -1 : x->order > y->order;
}

/*
 * Records that describe operations which never happened: those a recovery
 * voided (after the seq it found applied for their mount) and those marked
 * "void" (skipped after a permanent failure).
 */
struct voids {
	struct { const char *mount; double seq; } *cut;	/* "recovered" */
	size_t ncut;
	struct { const char *mount; double seq, try; } *one;	/* "void": one attempt */
	size_t none;
};

static void voids_collect(const struct recs *r, struct voids *v)
{
	memset(v, 0, sizeof(*v));
	for (size_t i = 0; i < r->n; i++) {
		const char *t = jobj_get(&r->v[i].o, "t"), *m = jobj_get(&r->v[i].o, "m");
		if (!t || !m)
			continue;
		if (!strcmp(t, "recovered")) {
			v->cut = xrealloc(v->cut, (v->ncut + 1) * sizeof(*v->cut));
			v->cut[v->ncut].mount = m;
			v->cut[v->ncut++].seq = jobj_num(&r->v[i].o, "seq");
		} else if (!strcmp(t, "void")) {
			v->one = xrealloc(v->one, (v->none + 1) * sizeof(*v->one));
			v->one[v->none].mount = m;
			v->one[v->none].try = jobj_num(&r->v[i].o, "try");
			v->one[v->none++].seq = jobj_num(&r->v[i].o, "seq");
		}
	}
}

static bool voided(const struct voids *v, const struct jobj *o)
{
	const char *mid = jobj_get(o, "m");
	double seq = jobj_num(o, "seq"), try = jobj_num(o, "try");

	if (!mid)
		return false;
	for (size_t i = 0; i < v->ncut; i++)
		if (seq > v->cut[i].seq && !strcmp(v->cut[i].mount, mid))
			return true;
	/* A void names one attempt: an operation retried after it is recorded anew. */
	for (size_t i = 0; i < v->none; i++)
		if (seq == v->one[i].seq && try == v->one[i].try && !strcmp(v->one[i].mount, mid))
			return true;
	return false;
}

/* The manifest format of each mount, from its "mount" record, sorted by id. */
struct mformat {
	const char *mount;
	int format;
};

static int mformat_cmp(const void *a, const void *b)
{
	return strcmp(((const struct mformat *)a)->mount, ((const struct mformat *)b)->mount);
}

static struct mformat *mformats_collect(const struct recs *r, size_t *n)
{
	struct mformat *v = NULL;

	*n = 0;
	for (size_t i = 0; i < r->n; i++) {
		const char *t = jobj_get(&r->v[i].o, "t"), *m = jobj_get(&r->v[i].o, "m");
		if (!t || !m || strcmp(t, "mount"))
			continue;
		v = xrealloc(v, (*n + 1) * sizeof(*v));
		v[*n].mount = m;
		v[(*n)++].format = jobj_get(&r->v[i].o, "format") ? (int)jobj_num(&r->v[i].o, "format") : 1;
	}
	if (*n)
		qsort(v, *n, sizeof(*v), mformat_cmp);
	return v;
}

/* The digest a record of mount `mid` holds: format 1 hashed whole files. */
static enum digest_kind record_kind(const struct mformat *v, size_t n, const char *mid)
{
	struct mformat key = { .mount = mid };
	const struct mformat *f = mid && n ? bsearch(&key, v, n, sizeof(*v), mformat_cmp) : NULL;

	/* A mount without its record (not kept in the log): the current format. */
	return f && f->format <= 1 ? DIGEST_FLAT : DIGEST_RUNS;
}

static void replay(struct pmap *m, const struct recs *r)
{
	struct voids v;
	size_t nfmt;
	struct mformat *fmt = mformats_collect(r, &nfmt);

	voids_collect(r, &v);
	for (size_t i = 0; i < r->n; i++) {
		const struct jobj *o = &r->v[i].o;
		const char *t = jobj_get(o, "t"), *path = jobj_get(o, "path"), *to = jobj_get(o, "to");
		if (!t || !path || !r->v[i].time || voided(&v, o))
			continue;
		if (!strcmp(t, "file")) {
			struct entry *e = pm_get(m, path);
			if (!e) {
				e = xcalloc(1, sizeof(*e));
				e->path = xstrdup(path);
				pm_insert(m, e);
			}
			e->size = (uint64_t)jobj_num(o, "size");
			snprintf(e->xxh3, sizeof(e->xxh3), "%s", jobj_get(o, "xxh3") ? jobj_get(o, "xxh3") : "");
			e->kind = record_kind(fmt, nfmt, jobj_get(o, "m"));
		} else if (!strcmp(t, "unlink") || !strcmp(t, "rmdir")) {
			pm_remove(m, path);
		} else if (!strcmp(t, "rename") && to) {
			bool exch = jobj_get(o, "exchange") && !strcmp(jobj_get(o, "exchange"), "true");
			struct entry *a = pm_take(m, path);
			struct entry *b = exch ? pm_take(m, to) : NULL;
			if (!exch)
				pm_remove(m, to);
			pm_put_renamed(m, a, path, to);
			pm_put_renamed(m, b, to, path);
		} else if (!strcmp(t, "link") && to) {
			struct entry *src = pm_get(m, path);
			if (src) {
				struct entry *e = xcalloc(1, sizeof(*e));
				*e = *src;
				e->path = xstrdup(to);
				e->next = NULL;
				pm_remove(m, to);
				pm_insert(m, e);
			}
		}
	}
	free(v.cut);
	free(v.one);
	free(fmt);
}

static int load_manifests(const char *root, struct pmap *m)
{
	char dir[PATH_MAX + 32];
	struct recs r = { 0 };
	DIR *d;
	struct dirent *de;

	snprintf(dir, sizeof(dir), "%s/%s", root, MANIFEST_NODES_DIR);
	if (!(d = opendir(dir)))
		return -errno;
	while ((de = readdir(d))) {
		char path[PATH_MAX * 2];
		uint64_t good, corrupt;
		int fd;
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s/manifest.log", dir, de->d_name);
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			continue;
		manifest_scan_fd(fd, collect, &r, &good, &corrupt);
		if (corrupt)
			fprintf(stderr, "%s: %s: %llu corrupt records skipped\n", prog, path,
				(unsigned long long)corrupt);
		close(fd);
		r.node++;
	}
	closedir(d);
	qsort(r.v, r.n, sizeof(*r.v), rec_cmp);
	replay(m, &r);
	for (size_t i = 0; i < r.n; i++)
		jobj_free(&r.v[i].o);
	free(r.v);
	return 0;
}

/* ---- walking and hashing ---------------------------------------------- */

struct item {
	char *rel;		/* path below the backend root */
	struct entry *e;	/* NULL: untracked */
	int status;		/* 0 ok, 1 mismatch, 2 missing, 3 untracked */
	uint64_t bytes;
	char got[33];
};

struct work {
	const char *root;
	struct item *v;
	size_t n;
	atomic_size_t next;
	atomic_uint_least64_t bytes;
};

static void walk(const char *root, const char *rel, struct pmap *m, struct work *w)
{
	char path[PATH_MAX * 2];
	DIR *d;
	struct dirent *de;

	snprintf(path, sizeof(path), "%s%s%s", root, *rel ? "/" : "", rel);
	if (!(d = opendir(path)))
		return;
	while ((de = readdir(d))) {
		char child[PATH_MAX];
		struct stat st;
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    !strncmp(de->d_name, ".ckptfs.", 8) || (!*rel && !strcmp(de->d_name, ".ckptfs")))
			continue;
		snprintf(child, sizeof(child), "%s%s%s", rel, *rel ? "/" : "", de->d_name);
		snprintf(path, sizeof(path), "%s/%s", root, child);
		if (lstat(path, &st) < 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			walk(root, child, m, w);
		} else if (S_ISREG(st.st_mode)) {
			w->v = xrealloc(w->v, (w->n + 1) * sizeof(*w->v));
			w->v[w->n] = (struct item){ .rel = xstrdup(child), .e = pm_get(m, child) };
			if (w->v[w->n].e)
				w->v[w->n].e->seen = true;
			w->n++;
		}
	}
	closedir(d);
}

static void *hasher(void *arg)
{
	struct work *w = arg;
	size_t i;

	while ((i = atomic_fetch_add(&w->next, 1)) < w->n) {
		struct item *it = &w->v[i];
		char path[PATH_MAX * 2];
		XXH128_hash_t h;
		int fd;

		if (!it->e) {
			it->status = 3;
			continue;
		}
		snprintf(path, sizeof(path), "%s/%s", w->root, it->rel);
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0 || digest_fd_kind(fd, it->e->kind, &h, &it->bytes) < 0) {
			it->status = 1;
			snprintf(it->got, sizeof(it->got), "unreadable");
		} else {
			hash_hex(h, it->got);
			it->status = it->bytes == it->e->size && !strcmp(it->got, it->e->xxh3) ? 0 : 1;
		}
		if (fd >= 0)
			close(fd);
		atomic_fetch_add(&w->bytes, it->bytes);
	}
	return NULL;
}

static int item_cmp(const void *a, const void *b)
{
	return strcmp(((const struct item *)a)->rel, ((const struct item *)b)->rel);
}

/* Find the backend root and the path below it for one argument. */
static int resolve(const char *arg, char *root, size_t rlen, char *rel, size_t llen)
{
	char real[PATH_MAX], probe[PATH_MAX];
	struct mountent *m;
	int n, i;

	if (!realpath(arg, real)) {
		fprintf(stderr, "%s: '%s': %s\n", prog, arg, strerror(errno));
		return CLI_USAGE;
	}
	if ((n = mounts_read(&m)) >= 0) {
		i = mounts_containing(m, n, real);
		if (i >= 0 && !strcmp(m[i].fstype, "fuse.ckptfs")) {
			/* Through a mount: drain it, then check its backend. */
			char cmd[PATH_MAX + 64], drain[PATH_MAX + 32], buf[512];
			snprintf(drain, sizeof(drain), "%s/.ckptfs/drain", m[i].target);
			int fd = open(drain, O_RDONLY);
			ssize_t k = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
			if (fd >= 0)
				close(fd);
			if (k <= 0 || !strstr(buf, "\"ok\": true"))
				fprintf(stderr, "%s: warning: %s is not fully durable yet\n", prog, m[i].target);
			size_t tl = strlen(m[i].target);
			snprintf(root, rlen, "%s", m[i].source);
			snprintf(rel, llen, "%s", real[tl] == '/' ? real + tl + 1 : (strcmp(m[i].target, "/") ? "" : real + 1));
			(void)cmd;
			mounts_free(m, n);
			return 0;
		}
		mounts_free(m, n);
	}
	/* On the backend: the root is the nearest directory holding .ckptfs/nodes. */
	snprintf(probe, sizeof(probe), "%s", real);
	for (;;) {
		char test[PATH_MAX * 2 + 32];
		struct stat st;
		snprintf(test, sizeof(test), "%s/%s", probe, MANIFEST_NODES_DIR);
		if (stat(test, &st) == 0 && S_ISDIR(st.st_mode))
			break;
		char *slash = strrchr(probe, '/');
		if (!slash || slash == probe) {
			fprintf(stderr, "%s: no ckptfs manifest (.ckptfs/nodes) in '%s' or above it\n",
				prog, arg);
			return CLI_USAGE;
		}
		*slash = '\0';
	}
	snprintf(root, rlen, "%s", probe);
	size_t pl = strlen(probe);
	snprintf(rel, llen, "%s", real[pl] == '/' ? real + pl + 1 : "");
	return 0;
}

static int verify_one(const char *arg, unsigned jobs, bool quiet, uint64_t counts[4], uint64_t *bytes)
{
	char root[PATH_MAX], rel[PATH_MAX];
	struct pmap m = { 0 };
	struct work w = { 0 };
	struct stat st;
	int r = resolve(arg, root, sizeof(root), rel, sizeof(rel));
	static const char *const names[] = { "OK", "MISMATCH", "MISSING", "UNTRACKED" };

	if (r)
		return r;
	if (load_manifests(root, &m) < 0) {
		fprintf(stderr, "%s: cannot read the manifests under %s\n", prog, root);
		return 1;
	}
	w.root = root;
	char full[PATH_MAX * 2];
	snprintf(full, sizeof(full), "%s%s%s", root, *rel ? "/" : "", rel);
	if (lstat(full, &st) == 0 && S_ISREG(st.st_mode)) {
		w.v = xcalloc(1, sizeof(*w.v));
		w.v[0] = (struct item){ .rel = xstrdup(rel), .e = pm_get(&m, rel) };
		if (w.v[0].e)
			w.v[0].e->seen = true;
		w.n = 1;
	} else {
		walk(root, rel, &m, &w);
	}
	/* Recorded files under the path that the walk did not find. */
	for (size_t i = 0; i < m.nb; i++)
		for (struct entry *e = m.b[i]; e; e = e->next)
			if (!e->seen && (!*rel || !strcmp(e->path, rel) || under(e->path, rel))) {
				w.v = xrealloc(w.v, (w.n + 1) * sizeof(*w.v));
				w.v[w.n++] = (struct item){ .rel = xstrdup(e->path), .e = e, .status = 2 };
			}
	size_t hashable = 0;
	for (size_t i = 0; i < w.n; i++)
		if (w.v[i].status != 2) {	/* missing ones go last: hash the rest */
			struct item t = w.v[hashable];
			w.v[hashable++] = w.v[i];
			w.v[i] = t;
		}
	size_t total = w.n;
	w.n = hashable;
	pthread_t *th = xcalloc(jobs, sizeof(*th));
	for (unsigned i = 0; i < jobs; i++)
		pthread_create(&th[i], NULL, hasher, &w);
	for (unsigned i = 0; i < jobs; i++)
		pthread_join(th[i], NULL);
	free(th);
	w.n = total;
	qsort(w.v, w.n, sizeof(*w.v), item_cmp);
	for (size_t i = 0; i < w.n; i++) {
		struct item *it = &w.v[i];
		counts[it->status]++;
		if (it->status == 1)
			printf("MISMATCH  %s (expected %s, %llu bytes; found %s, %llu bytes)\n", it->rel,
			       it->e->xxh3, (unsigned long long)it->e->size, it->got,
			       (unsigned long long)it->bytes);
		else if (!quiet || it->status == 2)
			printf("%-9s %s\n", names[it->status], it->rel);
		free(it->rel);
	}
	*bytes += atomic_load(&w.bytes);
	free(w.v);
	for (size_t i = 0; i < m.nb; i++)
		for (struct entry *e = m.b[i], *n; e; e = n) {
			n = e->next;
			entry_free(e);
		}
	free(m.b);
	return 0;
}

int verify_main(int argc, char **argv)
{
	unsigned jobs = (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
	bool quiet = false;
	uint64_t counts[4] = { 0 }, bytes = 0;
	int npaths = 0, r;
	uint64_t t0 = now_ns();

	if (jobs < 1)
		jobs = 1;
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
			quiet = true;
		} else if (!strcmp(argv[i], "--jobs") || !strcmp(argv[i], "-j")) {
			char *end;
			long v = i + 1 < argc ? strtol(argv[++i], &end, 10) : 0;
			if (v < 1 || v > 256 || *end) {
				fprintf(stderr, "%s: --jobs needs a number from 1 to 256\n", prog);
				return CLI_USAGE;
			}
			jobs = (unsigned)v;
		} else if (argv[i][0] == '-') {
			fprintf(stderr, "%s: unknown option '%s'\n", prog, argv[i]);
			return CLI_USAGE;
		} else {
			npaths++;
		}
	}
	if (!npaths) {
		fprintf(stderr, "%s: give at least one PATH (a backend directory or a mount)\n", prog);
		return CLI_USAGE;
	}
	for (int i = 0; i < argc; i++) {
		if (argv[i][0] == '-') {
			if (!strcmp(argv[i], "--jobs") || !strcmp(argv[i], "-j"))
				i++;
			continue;
		}
		if ((r = verify_one(argv[i], jobs, quiet, counts, &bytes)))
			return r;
	}
	double secs = (double)(now_ns() - t0) / 1e9;
	char sz[32];
	printf("verified %llu files, %s in %.2f s (%.2f GB/s): %llu ok, %llu mismatch, "
	       "%llu missing, %llu untracked\n",
	       (unsigned long long)(counts[0] + counts[1] + counts[3]), format_size(bytes, sz, sizeof(sz)),
	       secs, secs > 0 ? (double)bytes / secs / 1e9 : 0.0, (unsigned long long)counts[0],
	       (unsigned long long)counts[1], (unsigned long long)counts[2],
	       (unsigned long long)counts[3]);
	return counts[1] || counts[2] ? 1 : 0;
}
