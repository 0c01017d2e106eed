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
 * "mount" record says format 1, the XXH3-128 of the whole file (a record
 * whose mount record is gone, compacted away, may hold either).
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
#include "backend/bsys.h"
#include "backend/digest.h"
#include "cache/json.h"
#include "cache/strmap.h"

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
	struct strmap_node node;	/* key: path */
	char *path;
	uint64_t size;
	char xxh3[33];
	enum digest_kind kind;	/* how xxh3 was computed (by its mount's format) */
	bool either;		/* its mount's format is unknown: flat is tried too */
	bool seen;		/* found on the backend walk */
	struct entry *next;	/* in a list pm_take returns */
	struct entry *lprev, *lnext;	/* the other names of its file (hard links): a ring */
};

struct pmap {
	struct strmap map;
};

static struct entry *entry_of(struct strmap_node *n)
{
	return n ? CKPT_CONTAINER_OF(n, struct entry, node) : NULL;
}

static struct entry *pm_get(struct pmap *m, const char *path)
{
	return entry_of(strmap_get(&m->map, path));
}

static void pm_insert(struct pmap *m, struct entry *e)
{
	e->node.key = e->path;
	strmap_insert(&m->map, &e->node);
}

/* A new entry for path, the only name of its file. */
static struct entry *entry_new(const char *path)
{
	struct entry *e = xcalloc(1, sizeof(*e));

	e->path = xstrdup(path);
	e->lprev = e->lnext = e;
	return e;
}

static void entry_free(struct entry *e)
{
	e->lprev->lnext = e->lnext;	/* its other names stay */
	e->lnext->lprev = e->lprev;
	free(e->path);
	free(e);
}

/*
 * A new version of the file named by e: every name of it holds those
 * contents (the daemon relinks a rewritten file's other names to the new
 * version; its record names one of them).
 */
static void entry_set_all(struct entry *e, uint64_t size, const char *xxh3,
			  enum digest_kind kind, bool either)
{
	struct entry *x = e;

	do {
		x->size = size;
		snprintf(x->xxh3, sizeof(x->xxh3), "%s", xxh3);
		x->kind = kind;
		x->either = either;
		x = x->lnext;
	} while (x != e);
}

/* Entries at `path` or below it, detached from the map (a list through ->next). */
static struct entry *pm_take(struct pmap *m, const char *path)
{
	struct entry *out = NULL;
	for (struct strmap_node *n = strmap_take_tree(&m->map, path), *next; n; n = next) {
		struct entry *e = entry_of(n);
		next = n->next;
		e->next = out;
		out = e;
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
			strmap_remove(&m->map, &old->node);
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

/* Every entry, and free the map. */
static void pm_free(struct pmap *m)
{
	for (size_t i = 0; i < m->map.nb; i++)
		for (struct strmap_node *n = m->map.b[i], *next; n; n = next) {
			next = n->next;
			entry_free(entry_of(n));
		}
	strmap_destroy(&m->map);
}

static bool under(const char *path, const char *dir)
{
	size_t n = strlen(dir);
	return !strncmp(path, dir, n) && path[n] == '/';
}

/* ---- reading the manifests -------------------------------------------- */

struct rec {
	double time;
	int node;
	uint64_t order;
	struct json_obj o;
};

struct recs {
	struct rec *v;
	size_t n, cap;
	int node;
	uint64_t order;
	uint64_t unreadable;
	double floor;		/* the latest time of this node's records so far */
};

static int collect(void *arg, const char *payload, size_t len, uint64_t off)
{
	struct recs *r = arg;
	struct rec x = { .node = r->node, .order = r->order++ };

	if (json_parse(payload, len, &x.o, NULL, 0) < 0) {
		r->unreadable++;
		return 0;
	}
	/*
	 * A node's log is in the order its operations happened, whatever its
	 * wall clock did (stepped back by NTP, a VM's migration, a reboot's
	 * RTC): its records keep that order, and only nodes are merged by time.
	 */
	x.time = r->floor = CKPT_MAX(r->floor, json_num_or0(&x.o, "time"));
	if (r->n == r->cap) {
		r->cap = r->cap ? r->cap * 2 : 1024;
		r->v = xrealloc(r->v, r->cap * sizeof(*r->v));
	}
	r->v[r->n++] = x;
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
	struct strset one;	/* "void": one attempt each, void_key's */
};

/* "<mount> <seq> <try>": one attempt of one operation. */
static void void_key(char *key, size_t len, const char *mount, double seq, double try)
{
	snprintf(key, len, "%.40s %.17g %.17g", mount, seq, try);
}

static void voids_collect(const struct recs *r, struct voids *v)
{
	memset(v, 0, sizeof(*v));
	for (size_t i = 0; i < r->n; i++) {
		const char *t = json_str(&r->v[i].o, "t"), *m = json_str(&r->v[i].o, "m");
		if (!t || !m)
			continue;
		bool exp = false;
		/* A recovery since per-user order voids each attempt explicitly: no cut. */
		if (!strcmp(t, "recovered") && !(json_bool(&r->v[i].o, "explicit", &exp) && exp)) {
			v->cut = xrealloc(v->cut, (v->ncut + 1) * sizeof(*v->cut));
			v->cut[v->ncut].mount = m;
			v->cut[v->ncut++].seq = json_num_or0(&r->v[i].o, "seq");
		} else if (!strcmp(t, "void")) {
			char key[128];
			void_key(key, sizeof(key), m, json_num_or0(&r->v[i].o, "seq"),
				 json_num_or0(&r->v[i].o, "try"));
			strset_add(&v->one, key);
		}
	}
}

static bool voided(const struct voids *v, const struct json_obj *o)
{
	const char *mid = json_str(o, "m");
	double seq = json_num_or0(o, "seq"), try = json_num_or0(o, "try");

	if (!mid)
		return false;
	for (size_t i = 0; i < v->ncut; i++)
		if (seq > v->cut[i].seq && !strcmp(v->cut[i].mount, mid))
			return true;
	/* A void names one attempt: an operation retried after it is recorded anew. */
	char key[128];
	void_key(key, sizeof(key), mid, seq, try);
	return strset_has(&v->one, key);
}

/* The manifest format of each mount, from its "mount" record. */
struct mformat {
	struct strmap_node node;	/* key: the mount id (in the record) */
	bool flat;			/* format 1: records hold whole-file XXH3-128 */
};

static struct mformat *mformats_collect(const struct recs *r, struct strmap *map)
{
	struct mformat *v = xcalloc(r->n + 1, sizeof(*v));
	size_t n = 0;
	double f;

	for (size_t i = 0; i < r->n; i++) {
		const char *t = json_str(&r->v[i].o, "t"), *m = json_str(&r->v[i].o, "m");
		if (!t || !m || strcmp(t, "mount") || strmap_get(map, m))
			continue;
		v[n].node.key = m;
		v[n].flat = !json_num(&r->v[i].o, "format", &f) || f <= 1;
		strmap_insert(map, &v[n++].node);
	}
	return v;
}

/*
 * The digest a record of mount `mid` holds: format 1 hashed whole files.
 * A mount whose "mount" record is in no log (a compacted log keeps only the
 * current mount's) may be of either format: the current one first, then
 * (on a mismatch) format 1.
 */
static void record_kind(const struct strmap *map, const char *mid, struct entry *e)
{
	struct strmap_node *n = mid ? strmap_get(map, mid) : NULL;

	e->kind = n && CKPT_CONTAINER_OF(n, struct mformat, node)->flat ? DIGEST_FLAT : DIGEST_RUNS;
	e->either = !n;
}

static void replay(struct pmap *m, const struct recs *r)
{
	struct voids v;
	struct strmap fmap = { 0 };
	struct mformat *fmt = mformats_collect(r, &fmap);

	voids_collect(r, &v);
	for (size_t i = 0; i < r->n; i++) {
		const struct json_obj *o = &r->v[i].o;
		const char *t = json_str(o, "t"), *path = json_str(o, "path"), *to = json_str(o, "to");
		if (!t || !path || !r->v[i].time || voided(&v, o))
			continue;
		if (!strcmp(t, "file")) {
			struct entry *e = pm_get(m, path);
			const char *x = json_str(o, "xxh3");
			if (!e) {
				e = entry_new(path);
				pm_insert(m, e);
			}
			record_kind(&fmap, json_str(o, "m"), e);
			entry_set_all(e, (uint64_t)json_num_or0(o, "size"), x ? x : "", e->kind,
				      e->either);
		} else if (!strcmp(t, "unlink") || !strcmp(t, "rmdir")) {
			pm_remove(m, path);
		} else if (!strcmp(t, "rename") && to) {
			bool exch = json_is_true(o, "exchange");
			struct entry *a = pm_take(m, path);
			struct entry *b = exch ? pm_take(m, to) : NULL;
			if (!exch)
				pm_remove(m, to);
			pm_put_renamed(m, a, path, to);
			pm_put_renamed(m, b, to, path);
		} else if (!strcmp(t, "link") && to) {
			struct entry *src = pm_get(m, path);
			if (src) {
				pm_remove(m, to);
				struct entry *e = entry_new(to);
				e->size = src->size;
				memcpy(e->xxh3, src->xxh3, sizeof(e->xxh3));
				e->kind = src->kind;
				e->either = src->either;
				e->lnext = src->lnext;	/* one more name of src's file */
				e->lprev = src;
				src->lnext->lprev = e;
				src->lnext = e;
				pm_insert(m, e);
			}
		}
	}
	free(v.cut);
	strset_clear(&v.one);
	strmap_destroy(&fmap);
	free(fmt);
}

/* A warning about a node's metadata, the path shown escaped. */
static void warn_path(const char *dir, const char *name, const char *what)
{
	fprintf(stderr, "%s: warning: ", prog);
	cli_put_path(stderr, dir);
	if (name) {
		fputc('/', stderr);
		cli_put_path(stderr, name);
	}
	fprintf(stderr, ": %s\n", what);
}

/*
 * Open a metadata directory or file below dirfd without following a
 * symlink, and check that `owner` (or root) owns it and that nobody else
 * can write it.  fd, or -1 with a warning (ENOENT silently, when quiet_enoent).
 */
static int open_trusted(int dirfd, const char *name, int flags, uid_t owner, const char *shown,
			bool quiet_enoent, struct stat *st)
{
	char why[160];
	int fd = openat(dirfd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0) {
		if (errno == ENOENT && quiet_enoent)
			return -1;
		snprintf(why, sizeof(why), "%s; not read",
			 errno == ELOOP || errno == ENOTDIR ? "a symlink or of the wrong type"
							    : strerror(errno));
		warn_path(shown, name, why);
		return -1;
	}
	if (fstat(fd, st) < 0 || (flags & O_DIRECTORY ? !S_ISDIR(st->st_mode) : !S_ISREG(st->st_mode)))
		snprintf(why, sizeof(why), "of the wrong type; not read");
	else if (st->st_uid != owner && st->st_uid != 0)
		snprintf(why, sizeof(why), "owned by uid %u, not by the owner of .ckptfs (uid %u) "
			 "or root; not trusted, skipped", (unsigned)st->st_uid, (unsigned)owner);
	else if (st->st_mode & 022)
		snprintf(why, sizeof(why), "writable by group or others (mode %04o); not trusted, "
			 "skipped", (unsigned)(st->st_mode & 07777));
	else
		return fd;
	warn_path(shown, name, why);
	close(fd);
	return -1;
}

/*
 * Replay every node's log.  Only metadata the owner of .ckptfs (or root)
 * owns, and nobody else can write, is read; a node directory or log that
 * another user planted is skipped with a warning, never trusted.
 */
static int load_manifests(const char *root, struct pmap *m)
{
	char dir[PATH_MAX + 32];
	struct recs r = { 0 };
	struct stat st, meta_st;
	int rootfd, meta, nodes;
	DIR *d;
	struct dirent *de;

	snprintf(dir, sizeof(dir), "%s/.ckptfs", root);
	if ((rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return -errno;
	meta = openat(rootfd, ".ckptfs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	close(rootfd);
	if (meta < 0) {
		warn_path(dir, NULL, errno == ELOOP || errno == ENOTDIR ?
			  "a symlink or not a directory; not read" : strerror(errno));
		return -1;
	}
	if (fstat(meta, &meta_st) < 0 || (meta_st.st_mode & 022)) {
		warn_path(dir, NULL, "writable by group or others; its manifests are not trusted");
		close(meta);
		return -1;
	}
	/*
	 * Made by a daemon run by root or by whoever runs verify: a user who
	 * may write the backend's root could otherwise put a directory of
	 * their own there, with a history of their choosing.
	 */
	if (meta_st.st_uid != 0 && meta_st.st_uid != geteuid()) {
		char why[160];
		snprintf(why, sizeof(why), "owned by uid %u, neither root nor you; its manifests "
			 "are not trusted (run verify as that user if its daemon ran as them)",
			 (unsigned)meta_st.st_uid);
		warn_path(dir, NULL, why);
		close(meta);
		return -1;
	}
	nodes = open_trusted(meta, "nodes", O_RDONLY | O_DIRECTORY, meta_st.st_uid, dir, false, &st);
	close(meta);
	if (nodes < 0)
		return -1;
	snprintf(dir, sizeof(dir), "%s/%s", root, MANIFEST_NODES_DIR);
	if (!(d = fdopendir(nodes))) {
		close(nodes);
		return -1;
	}
	while ((de = readdir(d))) {
		struct manifest_scan scan;
		char shown[PATH_MAX * 2];
		int nd, fd;
		if (de->d_name[0] == '.')
			continue;
		nd = open_trusted(nodes, de->d_name, O_RDONLY | O_DIRECTORY, meta_st.st_uid, dir, false, &st);
		if (nd < 0)
			continue;
		snprintf(shown, sizeof(shown), "%s/%s", dir, de->d_name);
		fd = open_trusted(nd, "manifest.log", O_RDONLY, st.st_uid, shown, true, &st);
		close(nd);
		if (fd < 0)
			continue;
		r.unreadable = 0;
		if (manifest_scan_fd(fd, collect, &r, &scan) < 0)
			warn_path(shown, "manifest.log", "read error; records after it are not used");
		if (scan.corrupt_records || r.unreadable) {
			char why[128];
			snprintf(why, sizeof(why), "%llu corrupt records skipped (%llu more not "
				 "JSON objects)", (unsigned long long)scan.corrupt_records,
				 (unsigned long long)r.unreadable);
			warn_path(shown, "manifest.log", why);
		}
		close(fd);
		r.node++;
		r.floor = 0;
	}
	closedir(d);
	if (r.n)
		qsort(r.v, r.n, sizeof(*r.v), rec_cmp);
	replay(m, &r);
	for (size_t i = 0; i < r.n; i++)
		json_free(&r.v[i].o);
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
	int rootfd;		/* the backend root */
	struct item *v;
	size_t n;
	atomic_size_t next;
	atomic_uint_least64_t bytes;
};

/*
 * The files below dfd (which is root/rel): each directory opened from its
 * parent's descriptor, never through a symlink (a user may swap one of
 * theirs for a symlink meanwhile: ckptfs-ctl verify, run by root, must not
 * read outside the backend).
 */
static void walk(int dfd, const char *rel, struct pmap *m, struct work *w)
{
	DIR *d = fdopendir(dfd);
	struct dirent *de;

	if (!d) {
		close(dfd);
		return;
	}
	while ((de = readdir(d))) {
		char child[PATH_MAX];
		struct stat st;
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    !strncmp(de->d_name, ".ckptfs.", 8) || (!*rel && !strcmp(de->d_name, ".ckptfs")))
			continue;
		if ((size_t)snprintf(child, sizeof(child), "%s%s%s", rel, *rel ? "/" : "",
				     de->d_name) >= sizeof(child)) {
			fprintf(stderr, "%s: warning: a path below '%s' is longer than %d bytes; not "
				"checked\n", prog, rel, PATH_MAX - 1);
			continue;
		}
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			int sub = openat(dirfd(d), de->d_name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0)
				walk(sub, child, m, w);
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
		XXH128_hash_t h;
		int fd;

		if (!it->e) {
			it->status = 3;
			continue;
		}
		/* Beneath the root, never through a symlink; a FIFO is refused, not opened. */
		fd = bsys_open_beneath(w->rootfd, it->rel, O_RDONLY);
		if (fd < 0 || digest_fd_kind(fd, it->e->kind, &h, &it->bytes) < 0) {
			it->status = 1;
			snprintf(it->got, sizeof(it->got), "unreadable");
		} else {
			hash_hex(h, it->got);
			it->status = it->bytes == it->e->size && !strcmp(it->got, it->e->xxh3) ? 0 : 1;
			char flat[33];
			uint64_t n;
			if (it->status && it->e->either && it->bytes == it->e->size &&
			    digest_fd_kind(fd, DIGEST_FLAT, &h, &n) == 0) {
				hash_hex(h, flat);
				it->status = n == it->e->size && !strcmp(flat, it->e->xxh3) ? 0 : 1;
			}
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
			/* As ckptfs-ctl drain waits: while the daemon answers (cli.h). */
			char *ans = cli_read_ctl(prog, m[i].target, "drain", 0);
			if (!ans || !strstr(ans, "\"ok\": true"))
				fprintf(stderr, "%s: warning: %s is not fully durable yet\n", prog, m[i].target);
			free(ans);
			size_t tl = strlen(m[i].target);
			snprintf(root, rlen, "%s", m[i].source);
			snprintf(rel, llen, "%s", real[tl] == '/' ? real + tl + 1 : (strcmp(m[i].target, "/") ? "" : real + 1));
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
	if ((w.rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		fprintf(stderr, "%s: %s: %s\n", prog, root, strerror(errno));
		pm_free(&m);
		return 1;
	}
	int at = *rel ? bsys_open_beneath(w.rootfd, rel, O_PATH) : dup(w.rootfd);
	if (at >= 0 && fstat(at, &st) == 0 && S_ISREG(st.st_mode)) {
		w.v = xcalloc(1, sizeof(*w.v));
		w.v[0] = (struct item){ .rel = xstrdup(rel), .e = pm_get(&m, rel) };
		if (w.v[0].e)
			w.v[0].e->seen = true;
		w.n = 1;
	} else if (at >= 0 && S_ISDIR(st.st_mode)) {
		walk(openat(at, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), rel, &m, &w);
	}
	if (at >= 0)
		close(at);
	/* Recorded files under the path that the walk did not find. */
	for (size_t i = 0; i < m.map.nb; i++)
		for (struct strmap_node *n = m.map.b[i]; n; n = n->next) {
			struct entry *e = entry_of(n);
			if (!e->seen && (!*rel || !strcmp(e->path, rel) || under(e->path, rel))) {
				w.v = xrealloc(w.v, (w.n + 1) * sizeof(*w.v));
				w.v[w.n++] = (struct item){ .rel = xstrdup(e->path), .e = e, .status = 2 };
			}
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
		if (it->status == 1) {
			printf("MISMATCH  ");
			cli_put_path(stdout, it->rel);
			printf(" (expected %s, %llu bytes; found %s, %llu bytes)\n",
			       it->e->xxh3, (unsigned long long)it->e->size, it->got,
			       (unsigned long long)it->bytes);
		} else if (!quiet || it->status == 2) {
			printf("%-9s ", names[it->status]);
			cli_put_path(stdout, it->rel);
			putchar('\n');
		}
		free(it->rel);
	}
	*bytes += atomic_load(&w.bytes);
	free(w.v);
	close(w.rootfd);
	pm_free(&m);
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
		} else if (!strcmp(argv[i], "--jobs") || !strcmp(argv[i], "-j") ||
			   !strncmp(argv[i], "--jobs=", 7) || !strncmp(argv[i], "-j", 2)) {
			const char *a = !strncmp(argv[i], "--jobs=", 7) ? argv[i] + 7
					: argv[i][1] == 'j' && argv[i][2] ? argv[i] + 2
					: i + 1 < argc ? argv[++i] : "";
			unsigned long long v;
			if (parse_whole(a, 1, 256, &v) < 0) {
				fprintf(stderr, "%s: --jobs needs a number from 1 to 256, not '%s'\n",
					prog, a);
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
