/*
 * plimage.c — the materializer: from a power-loss shadow (the format is in
 * backend/powerloss.c's header), a directory tree that is the backend after
 * the power came back, under one of the two loss models of plimage.h.
 *
 * Both models first build an in-memory namespace, directory KEY -> entries
 * (name, object KEY, type, symlink target): PL_STRICT from the durable
 * listings in SHADOW/dirs, PL_ORDERED by replaying a prefix of
 * SHADOW/journal.  Then one walk from the root's KEY writes the image: a
 * directory met again below itself (a durable listing can be older than a
 * later move) is skipped and counted; a file met again is hard-linked to
 * its first name; a file's contents are SHADOW/data/KEY, or nothing if it
 * was never made durable.
 *
 * This reader is deliberately separate from the daemon's code: it checks
 * the layer's records from the outside, as the tests check the daemon.
 */
#include "tests/integrity/plimage.h"
#include "tests/harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEYLEN 48
#define MAX_DEPTH 256

struct pent {
	char *name;
	char key[KEYLEN];
	char type;		/* f d l o */
	char *target;		/* symlinks */
};

struct pdir {
	char key[KEYLEN];
	unsigned mode;		/* 0: unknown */
	struct pent *e;
	size_t n, cap;
};

struct pns {
	struct pdir **d;
	size_t n, cap;
};

struct jrec {
	char op, type;
	char k1[KEYLEN], k2[KEYLEN], k3[KEYLEN];
	unsigned long long flags;
	char *s1, *s2;
};

struct built {
	char key[KEYLEN];
	char *path;		/* relative to the image root */
};

struct ctx {
	const char *shadow;
	int data;		/* SHADOW/data */
	int out;		/* the image root */
	struct pns ns;
	struct built *files;
	size_t nfiles;
	const char *stack[MAX_DEPTH];
	struct pl_image_info *info;
};

/* ---- the namespace --------------------------------------------------------- */

static struct pdir *ns_dir(struct pns *ns, const char *key, bool create)
{
	for (size_t i = 0; i < ns->n; i++)
		if (!strcmp(ns->d[i]->key, key))
			return ns->d[i];
	if (!create)
		return NULL;
	if (ns->n == ns->cap) {
		ns->cap = ns->cap ? 2 * ns->cap : 64;
		ns->d = realloc(ns->d, ns->cap * sizeof(*ns->d));
	}
	struct pdir *d = calloc(1, sizeof(*d));
	snprintf(d->key, sizeof(d->key), "%s", key);
	ns->d[ns->n++] = d;
	return d;
}

static struct pent *dir_find(struct pdir *d, const char *name)
{
	for (size_t i = 0; d && i < d->n; i++)
		if (!strcmp(d->e[i].name, name))
			return &d->e[i];
	return NULL;
}

static void dir_set(struct pdir *d, const char *name, const char *key, char type,
		    const char *target)
{
	struct pent *e = dir_find(d, name);

	if (!e) {
		if (d->n == d->cap) {
			d->cap = d->cap ? 2 * d->cap : 16;
			d->e = realloc(d->e, d->cap * sizeof(*d->e));
		}
		e = &d->e[d->n++];
		e->name = strdup(name);
	} else {
		free(e->target);
	}
	snprintf(e->key, sizeof(e->key), "%s", key);
	e->type = type;
	e->target = target ? strdup(target) : NULL;
}

static void dir_del(struct pdir *d, const char *name)
{
	struct pent *e = dir_find(d, name);

	if (!e)
		return;
	free(e->name);
	free(e->target);
	*e = d->e[--d->n];
}

static void ns_free(struct pns *ns)
{
	for (size_t i = 0; i < ns->n; i++) {
		for (size_t k = 0; k < ns->d[i]->n; k++) {
			free(ns->d[i]->e[k].name);
			free(ns->d[i]->e[k].target);
		}
		free(ns->d[i]->e);
		free(ns->d[i]);
	}
	free(ns->d);
}

/* ---- reading the shadow ----------------------------------------------------- */

static char *slurp_at(const char *shadow, const char *rel, size_t *len)
{
	char path[PATH_MAX];
	char *p;

	snprintf(path, sizeof(path), "%s/%s", shadow, rel);
	if (!(p = read_file(path, len)))
		return NULL;
	p = realloc(p, *len + 1);
	p[*len] = '\0';
	return p;
}

/* Parse the journal's complete records; the torn tail of a kill is dropped. */
static int journal_read(const char *shadow, struct jrec **out, size_t *n, size_t *committed)
{
	size_t len, pos = 0;
	char *text = slurp_at(shadow, "journal", &len);

	*out = NULL;
	*n = *committed = 0;
	if (!text)
		return -errno;
	while (pos < len) {
		struct jrec r = { 0 };
		size_t l1, l2;
		char *nl = memchr(text + pos, '\n', len - pos);
		if (!nl || sscanf(text + pos, "%c %c %47s %47s %47s %llu %zu %zu", &r.op, &r.type, r.k1,
				  r.k2, r.k3, &r.flags, &l1, &l2) != 8)
			break;
		size_t body = (size_t)(nl + 1 - text);
		if (body + l1 + l2 + 1 > len || text[body + l1 + l2] != '\n')
			break;
		r.s1 = strndup(text + body, l1);
		r.s2 = strndup(text + body + l1, l2);
		if (r.op == 'F' && r.flags > *committed)
			*committed = r.flags <= *n ? r.flags : *n;
		*out = realloc(*out, (*n + 1) * sizeof(**out));
		(*out)[(*n)++] = r;
		pos = body + l1 + l2 + 1;
	}
	free(text);
	return 0;
}

static void journal_free(struct jrec *r, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(r[i].s1);
		free(r[i].s2);
	}
	free(r);
}

int pl_image_bounds(const char *shadow, size_t *records, size_t *committed)
{
	struct jrec *r;
	int e = journal_read(shadow, &r, records, committed);

	if (e == 0)
		journal_free(r, *records);
	return e;
}

/* PL_ORDERED: the first `cut` namespace operations, in order. */
static void replay(struct pns *ns, const struct jrec *r, size_t cut)
{
	for (size_t i = 0; i < cut; i++) {
		const struct jrec *j = &r[i];
		struct pent *src, *dst, tmp;
		switch (j->op) {
		case 'C':
		case 'M':
		case 'S':
			dir_set(ns_dir(ns, j->k1, true), j->s1, j->k2, j->type, j->op == 'S' ? j->s2 : NULL);
			if (j->op == 'M')
				ns_dir(ns, j->k2, true)->mode = (unsigned)j->flags;
			break;
		case 'L':
			src = dir_find(ns_dir(ns, j->k1, false), j->s1);
			dir_set(ns_dir(ns, j->k3, true), j->s2, j->k2, j->type, src ? src->target : NULL);
			break;
		case 'R':
			src = dir_find(ns_dir(ns, j->k1, false), j->s1);
			if (j->flags & RENAME_EXCHANGE) {
				dst = dir_find(ns_dir(ns, j->k3, false), j->s2);
				if (src && dst) {	/* swap what the two names point at */
					tmp = *src;
					memcpy(src->key, dst->key, KEYLEN);
					src->type = dst->type;
					src->target = dst->target;
					memcpy(dst->key, tmp.key, KEYLEN);
					dst->type = tmp.type;
					dst->target = tmp.target;
				}
				break;
			}
			if (!strcmp(j->k1, j->k3) && !strcmp(j->s1, j->s2))
				break;	/* renamed onto itself */
			tmp = (struct pent){ .type = src ? src->type : j->type };
			memcpy(tmp.key, src ? src->key : j->k2, KEYLEN);
			tmp.target = src && src->target ? strdup(src->target) : NULL;
			dir_del(ns_dir(ns, j->k1, true), j->s1);
			dir_set(ns_dir(ns, j->k3, true), j->s2, tmp.key, tmp.type, tmp.target);
			free(tmp.target);
			break;
		case 'U':
			dir_del(ns_dir(ns, j->k1, true), j->s1);
			break;
		}
	}
}

/* PL_STRICT: every durable listing in SHADOW/dirs. */
static int load_listings(const char *shadow, struct pns *ns)
{
	char path[PATH_MAX];
	struct dirent *de;
	DIR *dd;

	snprintf(path, sizeof(path), "%s/dirs", shadow);
	if (!(dd = opendir(path)))
		return -errno;
	while ((de = readdir(dd))) {
		char rel[PATH_MAX], *text, *p, *end;
		size_t len;
		unsigned mode;
		if (de->d_name[0] == '.')
			continue;	/* ".", "..", and temporaries of a listing being written */
		snprintf(rel, sizeof(rel), "dirs/%s", de->d_name);
		if (!(text = slurp_at(shadow, rel, &len)) || sscanf(text, "D %o", &mode) != 1) {
			free(text);
			closedir(dd);
			return -EINVAL;
		}
		struct pdir *d = ns_dir(ns, de->d_name, true);
		d->mode = mode;
		end = text + len;
		for (p = strchr(text, '\n'); p && ++p < end;) {
			char type, key[KEYLEN];
			size_t nl, tl;
			char *hl = memchr(p, '\n', (size_t)(end - p));
			if (!hl || sscanf(p, "%c %47s %zu %zu", &type, key, &nl, &tl) != 4 ||
			    hl + 1 + nl + tl >= end) {
				free(text);
				closedir(dd);
				return -EINVAL;
			}
			char *name = strndup(hl + 1, nl), *target = strndup(hl + 1 + nl, tl);
			dir_set(d, name, key, type, type == 'l' ? target : NULL);
			free(name);
			free(target);
			p = hl + 1 + nl + tl;	/* at the record's closing newline */
		}
		free(text);
	}
	closedir(dd);
	return 0;
}

/* ---- writing the image ------------------------------------------------------- */

static int copy_fd(int src, int dst)
{
	char buf[1 << 16];
	ssize_t n;

	while ((n = read(src, buf, sizeof(buf))) > 0)
		if (write(dst, buf, (size_t)n) != n)
			return -EIO;
	return n < 0 ? -errno : 0;
}

static int build_file(struct ctx *x, int dfd, const char *rel, const struct pent *e)
{
	struct stat st;
	int src, dst, r = 0;

	for (size_t i = 0; i < x->nfiles; i++)
		if (!strcmp(x->files[i].key, e->key)) {
			x->info->links++;
			return linkat(x->out, x->files[i].path, dfd, e->name, 0) < 0 ? -errno : 0;
		}
	src = openat(x->data, e->key, O_RDONLY | O_CLOEXEC);
	if ((dst = openat(dfd, e->name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0) {
		r = -errno;
	} else if (src >= 0) {
		r = copy_fd(src, dst);
		if (r == 0 && fstat(src, &st) == 0 && fchmod(dst, st.st_mode & 07777) < 0)
			r = -errno;
	} else {
		x->info->empty_files++;
	}
	if (dst >= 0)
		close(dst);
	if (src >= 0)
		close(src);
	x->files = realloc(x->files, (x->nfiles + 1) * sizeof(*x->files));
	snprintf(x->files[x->nfiles].key, KEYLEN, "%s", e->key);
	x->files[x->nfiles++].path = strdup(rel);
	x->info->files++;
	return r;
}

static int build_dir(struct ctx *x, const char *key, int dfd, const char *rel, int depth)
{
	struct pdir *d = ns_dir(&x->ns, key, false);	/* none: never made durable, empty */
	int r = 0;

	x->stack[depth] = key;
	for (size_t i = 0; d && i < d->n && r == 0; i++) {
		const struct pent *e = &d->e[i];
		char sub[PATH_MAX];
		snprintf(sub, sizeof(sub), "%s%s%s", rel, rel[0] ? "/" : "", e->name);
		if (e->type == 'f') {
			r = build_file(x, dfd, sub, e);
		} else if (e->type == 'l') {
			x->info->symlinks++;
			r = symlinkat(e->target ? e->target : "", dfd, e->name) < 0 ? -errno : 0;
		} else if (e->type == 'd') {
			bool cycle = depth + 1 >= MAX_DEPTH;
			for (int k = 0; k <= depth && !cycle; k++)
				cycle = !strcmp(x->stack[k], e->key);
			if (cycle) {
				x->info->anomalies++;
				continue;
			}
			struct pdir *sd = ns_dir(&x->ns, e->key, false);
			int fd;
			if (mkdirat(dfd, e->name, 0700) < 0 ||
			    (fd = openat(dfd, e->name, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
				return -errno;
			x->info->dirs++;
			r = build_dir(x, e->key, fd, sub, depth + 1);
			if (r == 0 && fchmod(fd, sd && sd->mode ? sd->mode : 0755) < 0)
				r = -errno;
			close(fd);
		}
	}
	return r;
}

int pl_image_build(const char *shadow, const char *out, enum pl_model model, size_t cut,
		   struct pl_image_info *info)
{
	struct ctx x = { .shadow = shadow, .info = info };
	char root[KEYLEN + 2] = "", path[PATH_MAX];
	struct jrec *j = NULL;
	size_t n = 0, len;
	char *text;
	int r;

	memset(info, 0, sizeof(*info));
	if ((r = journal_read(shadow, &j, &n, &info->committed)) < 0)
		return r;
	info->records = n;
	if (!(text = slurp_at(shadow, "root", &len)) || sscanf(text, "%47s", root) != 1) {
		free(text);
		journal_free(j, n);
		return -EINVAL;
	}
	free(text);
	if (model == PL_ORDERED) {
		info->cut = cut < info->committed ? info->committed : cut > n ? n : cut;
		replay(&x.ns, j, info->cut);
		r = 0;
	} else {
		r = load_listings(shadow, &x.ns);
	}
	snprintf(path, sizeof(path), "%s/data", shadow);
	x.data = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	x.out = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (r == 0 && (x.data < 0 || x.out < 0))
		r = -errno;
	if (r == 0)
		r = build_dir(&x, root, x.out, "", 0);
	if (x.data >= 0)
		close(x.data);
	if (x.out >= 0)
		close(x.out);
	for (size_t i = 0; i < x.nfiles; i++)
		free(x.files[i].path);
	free(x.files);
	ns_free(&x.ns);
	journal_free(j, n);
	return r;
}
