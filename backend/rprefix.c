/*
 * rprefix.c — recovery's judgement of how many of the previous mount's
 * unsettled operations the backend shows (recover.c, step 2).
 *
 * Applied operations form a prefix of the log (P7), and the backend holds
 * that prefix's state.  recover.c replays the settled records into what
 * each path held when those operations began (struct hnode); each
 * unsettled operation, in log order, is then noted here into the history
 * of every path it touches: a version, a directory, symlink, node or link
 * made (with every directory above it), a name removed, a rename (with
 * everything below a renamed directory; an exchange both ways).  A path's
 * history is what it holds after each prefix: not known (the settled state
 * had nothing there: a directory, or what another tool made), nothing,
 * something, a directory, a symlink and its target, a node's type, or a
 * file version (size and digest).  A version carried by a rename or link
 * is judged by type and size, its bytes having been judged where they were
 * written, unless the bytes must tell: at a rename's or link's target where
 * nothing was known (another node's file of that size), or where another
 * version of the path has its size (an atomic replace of a same-size file).
 *
 * The judgement: no operation is judged alone.  A path may hold under a
 * shorter prefix what a later operation puts there (a file rewritten
 * unchanged; a directory renamed away and made again with the same file
 * in it), and only the paths together tell the prefixes apart.  A path
 * whose backend state none of its values explains (removed or rewritten
 * behind the mount; a hard link's other name, which the daemon relinks to a
 * new version the replay does not carry) is set aside; the rest must all
 * show the prefix taken.  Among the prefixes they all show: those at or
 * past the last new file found by its digest where nothing was known
 * before, if any such prefix is among them (otherwise those bytes were
 * there before: another node wrote the same file); then the one claiming
 * fewest things made that are not there (what the set-aside paths would
 * hold); then the longest (where prefixes leave every path the same, every
 * file the longer names holds what it says).  Where no prefix explains
 * every path (the model is wrong somewhere), the prefix most paths show
 * (set-aside ones for their state before the batch), then fewest claims,
 * then the longest.  Finally a shorter prefix as good is taken while the
 * operations it drops left no trace the backend shows (attributes, a
 * rewrite that changes nothing, a directory implied by what was made in
 * it, a name removed that had not been there, something of no known kind).
 * A lookup or read that fails other than "no such name" (EACCES, EIO) is
 * no evidence either way.
 *
 * Costs: one lstat per path touched, and one read of each file whose size
 * matches a version written in its history (two kinds of digest where its
 * mount's format is not known); files a rename carries are read only where
 * their size does not tell them apart.  The operations are one batch's (a
 * "durable" record follows every batch).  A rename of a directory walks
 * both path maps, as the replay's does.
 */
#include "backend/manifest_priv.h"
#include "backend/bsys.h"
#include "backend/digest.h"
#include "cache/log.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/*
 * What a path holds: not known, nothing, something (of a kind not known),
 * a directory, a symlink (its target), a device node or FIFO (its type), a
 * file version.
 */
enum pv_kind { PV_UNKNOWN, PV_ABSENT, PV_PRESENT, PV_DIR, PV_SYMLINK, PV_NODE, PV_FILE };

struct pval {
	size_t from;		/* the shortest prefix (operations applied) that leaves it */
	enum pv_kind kind;
	bool moved;		/* carried by a rename or link: its bytes are those judged where
				   they were written, so type and size suffice (needs_digest) */
	bool inner;		/* carried below a renamed directory (not the rename's target) */
	bool implied;		/* a directory above something made: no trace of its own */
	uint64_t size;		/* FILE: bytes; SYMLINK: the target's length; NODE: S_IFMT bits */
	uint64_t format;	/* FILE: its mount's manifest format (0: not known) */
	char xxh3[33];		/* FILE: its digest; SYMLINK: XXH3-64 of the target, in hex */
};

/*
 * A path one of the unsettled operations touches: what it holds after
 * each prefix of them (values by `from`, ascending; the first from 0), and
 * what the backend holds there, looked up once.
 */
struct phist {
	struct strmap_node n;
	char *path;
	struct pval *v;
	size_t nv, capv;
	bool looked, exists, unknown;	/* unknown: the lookup failed, not with "no such name" */
	bool unreadable;		/* a digest could not be read (EIO) */
	mode_t mode;
	uint64_t size;
	char link[17];			/* a symlink's target, XXH3-64 in hex */
	int digested;		/* bit k: digest k (backend_digest) taken in hex[k]; bit k+2: failed */
	char hex[2][33];
};

/* XXH3-64 of a symlink's target, in hex: what a history and a lookup compare. */
static void link_hex(const char *target, size_t len, char out[17])
{
	snprintf(out, 17, "%016llx", (unsigned long long)XXH3_64bits(target, len));
}

/*
 * What the backend holds at h->path (lstat, and a symlink's target), through
 * bsys, once.  A name that is not there, or whose way passes something that
 * is not a directory, is absent; any other failure (EACCES, EIO, ESTALE)
 * leaves it unknown: no evidence either way.
 */
static void backend_look(int root_fd, struct phist *h)
{
	char *dup = xstrdup(h->path), *slash = strrchr(dup, '/');
	const char *name = slash ? slash + 1 : dup;
	struct stat st;
	int dir = root_fd, r = -ENOENT;

	h->looked = true;
	if (slash) {
		*slash = '\0';
		dir = bsys_open_beneath(root_fd, dup, O_RDONLY | O_DIRECTORY);
	}
	if (dir < 0)
		r = dir;
	else if (*name && strcmp(name, "..") && strcmp(name, "."))
		r = bsys.fstatat(dir, name, &st);
	if (r == 0) {
		h->exists = true;
		h->mode = st.st_mode;
		h->size = (uint64_t)st.st_size;
		if (S_ISLNK(st.st_mode)) {
			char target[PATH_MAX];
			ssize_t n = bsys.readlinkat(dir, name, target, sizeof(target));
			if (n >= 0)
				link_hex(target, (size_t)n, h->link);
			else
				h->unknown = true;	/* its target unread: no evidence */
			h->size = n >= 0 ? (uint64_t)n : UINT64_MAX;
		}
	} else if (r != -ENOENT && r != -ENOTDIR && r != -ELOOP) {
		h->unknown = true;
	}
	if (slash && dir >= 0)
		bsys.close(dir);
	free(dup);
}

/* ---- the histories ------------------------------------------------------------ */

/* The path's history, made (empty) if `create`. */
static struct phist *phist_of(struct rprefix *x, const char *path, bool create)
{
	return STRMAP_GET_OR_NEW(&x->paths, path, create, struct phist, n, path);
}

/* What `path` holds after the operations replayed so far. */
static struct pval pval_now(struct rprefix *x, const char *path)
{
	struct phist *h = phist_of(x, path, false);
	struct strmap_node *e;
	struct pval v = { .kind = PV_UNKNOWN };

	if (h && h->nv)
		return h->v[h->nv - 1];
	if ((e = strmap_get(x->settled, path))) {
		const struct hnode *f = CKPT_CONTAINER_OF(e, struct hnode, n);
		v.kind = PV_FILE;
		v.size = f->size;
		v.format = f->format;
		memcpy(v.xxh3, f->xxh3, sizeof(v.xxh3));
	}
	return v;
}

static bool pval_eq(const struct pval *a, const struct pval *b)
{
	if (a->kind != b->kind)
		return false;
	if (a->kind == PV_FILE || a->kind == PV_SYMLINK)
		return a->size == b->size && !strcmp(a->xxh3, b->xxh3);
	return a->kind != PV_NODE || a->size == b->size;
}

static void phist_push(struct phist *h, const struct pval *v)
{
	if (h->nv == h->capv) {
		h->capv = h->capv ? h->capv * 2 : 4;
		h->v = xrealloc(h->v, h->capv * sizeof(*h->v));
	}
	h->v[h->nv++] = *v;
}

/* The changes of one operation: every path it touches and what it holds after it. */
struct pchange {
	char *path;
	struct pval v;
};

struct pchanges {
	struct pchange *c;
	size_t n, cap;
};

static void pchange_add(struct pchanges *pc, const char *path, struct pval v)
{
	if (pc->n == pc->cap) {
		pc->cap = pc->cap ? pc->cap * 2 : 16;
		pc->c = xrealloc(pc->c, pc->cap * sizeof(*pc->c));
	}
	pc->c[pc->n++] = (struct pchange){ xstrdup(path), v };
}

static void pchange_kind(struct pchanges *pc, const char *path, enum pv_kind kind)
{
	pchange_add(pc, path, (struct pval){ .kind = kind });
}

/*
 * `path` and every path below it that the state names (files, or paths
 * with a history), with what each holds.  Only a directory renamed has
 * anything below it to move (one unlinked or removed is a file or empty);
 * a file has nothing below it, so only a directory costs a walk.
 */
static void paths_under(struct rprefix *x, const char *path, struct pchanges *out)
{
	size_t len = strlen(path);
	const struct strmap *maps[2] = { x->settled, &x->paths };

	pchange_add(out, path, pval_now(x, path));
	if (out->c[0].v.kind == PV_FILE)
		return;
	for (int m = 0; m < 2; m++)
		for (size_t i = 0; i < maps[m]->nb; i++)
			for (struct strmap_node *e = maps[m]->b[i]; e; e = e->next)
				if (!strncmp(e->key, path, len) && e->key[len] == '/')
					pchange_add(out, e->key, pval_now(x, e->key));
}

/* Every directory above `path` exists after an operation that makes something there. */
static void ancestors_exist(struct pchanges *pc, const char *path)
{
	char *dup = xstrdup(path);

	for (char *slash = strrchr(dup, '/'); slash; slash = strrchr(dup, '/')) {
		*slash = '\0';
		pchange_add(pc, dup, (struct pval){ .kind = PV_DIR, .implied = true });
	}
	free(dup);
}

/* Move what `from` (a list from paths_under) holds below `to`; the source existed. */
static void moved_to(struct pchanges *pc, const struct pchanges *from, const char *src,
		     const char *to)
{
	for (size_t i = 0; i < from->n; i++) {
		struct strbuf b = { 0 };
		struct pval v = from->c[i].v;
		sb_printf(&b, "%s%s", to, from->c[i].path + strlen(src));
		if (i == 0 && v.kind == PV_UNKNOWN)
			v.kind = PV_PRESENT;
		v.moved = true;
		v.inner = i > 0;
		v.implied = false;
		pchange_add(pc, b.s, v);
		sb_free(&b);
	}
}

static void pchanges_free(struct pchanges *pc)
{
	for (size_t i = 0; i < pc->n; i++)
		free(pc->c[i].path);
	free(pc->c);
	memset(pc, 0, sizeof(*pc));
}

/* ---- names linked in the batch ----------------------------------------- */

/* The group holding `name`, or NULL. */
static struct rlgroup *group_of(struct rprefix *x, const char *name, size_t *at)
{
	for (size_t g = 0; g < x->ngroups; g++)
		for (size_t i = 0; i < x->groups[g].n; i++)
			if (!strcmp(x->groups[g].names[i], name)) {
				if (at)
					*at = i;
				return &x->groups[g];
			}
	return NULL;
}

/* `name`, and every name below it (a directory), leave their groups. */
static void group_drop(struct rprefix *x, const char *name)
{
	size_t len = strlen(name);

	for (size_t g = 0; g < x->ngroups; g++)
		for (size_t i = 0; i < x->groups[g].n;) {
			const char *m = x->groups[g].names[i];
			if (!strcmp(m, name) || (!strncmp(m, name, len) && m[len] == '/')) {
				free(x->groups[g].names[i]);
				x->groups[g].names[i] = x->groups[g].names[--x->groups[g].n];
			} else {
				i++;
			}
		}
}

static void group_add(struct rlgroup *g, const char *name)
{
	g->names = xrealloc(g->names, (g->n + 1) * sizeof(*g->names));
	g->names[g->n++] = xstrdup(name);
}

/* "link from to": to joins from's group. */
static void group_link(struct rprefix *x, const char *from, const char *to)
{
	group_drop(x, to);
	struct rlgroup *g = group_of(x, from, NULL);
	if (!g) {
		x->groups = xrealloc(x->groups, (x->ngroups + 1) * sizeof(*x->groups));
		g = &x->groups[x->ngroups++];
		*g = (struct rlgroup){ 0 };
		group_add(g, from);
	}
	group_add(g, to);
}

/* A rename: what it replaces leaves its group; the name moves (exchanges: both leave). */
static void group_rename(struct rprefix *x, const char *from, const char *to, bool exchange)
{
	size_t at;
	struct rlgroup *g;

	group_drop(x, to);
	if (exchange || !(g = group_of(x, from, &at))) {
		group_drop(x, from);	/* a directory's linked names below: judged alone */
		return;
	}
	free(g->names[at]);
	g->names[at] = xstrdup(to);
}

/*
 * New values are computed from the old before any is set (later changes
 * in the list win).
 */
void rprefix_note(struct rprefix *x, const struct rrec *r, size_t p)
{
	struct pchanges pc = { 0 }, a = { 0 }, b = { 0 };
	const char *t = r->t;

	if (!r->path)
		return;
	if (!strcmp(t, "file")) {
		pchange_add(&pc, r->path, (struct pval){ .kind = PV_FILE, .size = r->size,
							  .format = r->format });
		snprintf(pc.c[0].v.xxh3, sizeof(pc.c[0].v.xxh3), "%s", r->xxh3 ? r->xxh3 : "");
		/* The file's other names, linked earlier in the batch, show it too. */
		struct rlgroup *g = group_of(x, r->path, NULL);
		for (size_t i = 0; g && i < g->n; i++)
			if (strcmp(g->names[i], r->path))
				pchange_add(&pc, g->names[i], pc.c[0].v);
		ancestors_exist(&pc, r->path);
	} else if (!strcmp(t, "mkdir")) {
		pchange_kind(&pc, r->path, PV_DIR);
		ancestors_exist(&pc, r->path);
	} else if (!strcmp(t, "symlink")) {
		struct pval v = { .kind = PV_PRESENT };
		if (r->target) {
			v.kind = PV_SYMLINK;
			v.size = strlen(r->target);
			link_hex(r->target, v.size, v.xxh3);
		}
		pchange_add(&pc, r->path, v);
		ancestors_exist(&pc, r->path);
	} else if (!strcmp(t, "mknod")) {
		struct pval v = { .kind = r->has_mode ? PV_NODE : PV_PRESENT, .size = r->mode & S_IFMT };
		pchange_add(&pc, r->path, v);
		ancestors_exist(&pc, r->path);
	} else if (!strcmp(t, "unlink") || !strcmp(t, "rmdir")) {
		pchange_kind(&pc, r->path, PV_ABSENT);	/* a file, or an empty directory */
		group_drop(x, r->path);
	} else if (!strcmp(t, "link") && r->to) {
		group_link(x, r->path, r->to);
		struct pval v = pval_now(x, r->path);
		if (v.kind == PV_UNKNOWN || v.kind == PV_ABSENT)
			v = (struct pval){ .kind = PV_PRESENT };
		v.moved = true;
		v.inner = false;	/* the link's own target */
		pchange_add(&pc, r->to, v);
		ancestors_exist(&pc, r->to);
	} else if (!strcmp(t, "rename") && r->to && strcmp(r->path, r->to)) {
		group_rename(x, r->path, r->to, r->exchange);
		paths_under(x, r->path, &a);
		if (r->exchange)
			paths_under(x, r->to, &b);
		else	/* what it replaces: a file, or an empty directory */
			pchange_kind(&b, r->to, PV_ABSENT);
		for (size_t i = 0; i < a.n; i++)
			pchange_kind(&pc, a.c[i].path, PV_ABSENT);
		for (size_t i = 0; i < b.n; i++)
			pchange_kind(&pc, b.c[i].path, PV_ABSENT);
		moved_to(&pc, &a, r->path, r->to);
		if (r->exchange)
			moved_to(&pc, &b, r->to, r->path);
		ancestors_exist(&pc, r->to);
	}
	for (size_t i = 0; i < pc.n; i++) {
		struct pval old = pval_now(x, pc.c[i].path);
		struct phist *h = phist_of(x, pc.c[i].path, true);
		pc.c[i].v.from = p + 1;
		if (!h->nv) {
			old.from = 0;
			phist_push(h, &old);
		}
		if (h->v[h->nv - 1].from == p + 1)
			h->v[h->nv - 1] = pc.c[i].v;	/* set twice by this operation */
		else if (!pval_eq(&h->v[h->nv - 1], &pc.c[i].v))
			phist_push(h, &pc.c[i].v);
	}
	pchanges_free(&pc);
	pchanges_free(&a);
	pchanges_free(&b);
}

/* ---- the judgement ----------------------------------------------------------- */

/* The digest of kind k (0: format 1's flat one, 1: runs) of the backend file at h->path. */
static bool backend_digest(int root_fd, struct phist *h, int k, const char **hex)
{
	if (!(h->digested & ((1 << k) | (4 << k)))) {
		int fd = bsys_open_beneath(root_fd, h->path, O_RDONLY);
		XXH128_hash_t d;
		uint64_t size;
		int r = fd;
		h->digested |= 4 << k;		/* failed, until it works */
		if (fd >= 0) {
			r = digest_fd_kind(fd, k ? DIGEST_RUNS : DIGEST_FLAT, &d, &size);
			if (r == 0 && size == h->size) {
				hash_hex(d, h->hex[k]);
				h->digested = (h->digested & ~(4 << k)) | 1 << k;
			}
			bsys.close(fd);
		}
		if (r < 0 && r != -ENOENT)
			h->unreadable = true;	/* EIO: its bytes are no evidence either way */
	}
	*hex = h->hex[k];
	return h->digested & (1 << k);
}

/* Does the backend file hold the version v (its mount's digest; either where not known)? */
static bool backend_version(int root_fd, struct phist *h, const struct pval *v)
{
	const char *hex;

	for (int k = 1; k >= 0; k--)
		if ((v->format == 0 || (v->format == 1) == (k == 0)) &&
		    backend_digest(root_fd, h, k, &hex) && !strcmp(hex, v->xxh3))
			return true;
	return false;
}

/*
 * Must v be judged by its digest?  A version written (a "file" record); one
 * a rename or link puts at its target where nothing was known there (what
 * another node or tool left may have its size); one carried anywhere where
 * another version of the path has its size (an atomic replace of a
 * same-size file: only the bytes tell).
 */
static bool needs_digest(const struct phist *h, const struct pval *v)
{
	if (!v->moved || (!v->inner && h->v[0].kind == PV_UNKNOWN))
		return true;
	for (size_t k = 0; k < h->nv; k++)
		if (h->v[k].kind == PV_FILE && h->v[k].size == v->size && strcmp(h->v[k].xxh3, v->xxh3))
			return true;
	return false;
}

/* What the backend shows of a value: not it, it, or nothing either way. */
enum held { HELD_NO, HELD_YES, HELD_MAYBE };

static enum held yes_no(bool yes)
{
	return yes ? HELD_YES : HELD_NO;
}

/* Does the backend hold v at h->path? */
static enum held backend_holds(int root_fd, struct phist *h, const struct pval *v)
{
	if (!h->looked)
		backend_look(root_fd, h);
	if (h->unknown || v->kind == PV_UNKNOWN)
		return HELD_MAYBE;
	if (v->kind == PV_ABSENT || !h->exists)
		return yes_no(v->kind == PV_ABSENT && !h->exists);
	switch (v->kind) {
	case PV_DIR:
		return yes_no(S_ISDIR(h->mode));
	case PV_SYMLINK:
		return yes_no(S_ISLNK(h->mode) && h->size == v->size && !strcmp(h->link, v->xxh3));
	case PV_NODE:
		return yes_no((h->mode & S_IFMT) == v->size);
	case PV_FILE:
		if (!S_ISREG(h->mode) || h->size != v->size)
			return HELD_NO;
		if (!needs_digest(h, v))
			return HELD_YES;
		if (backend_version(root_fd, h, v))
			return HELD_YES;
		return h->unreadable ? HELD_MAYBE : HELD_NO;
	default:
		return HELD_MAYBE;	/* PV_PRESENT: something is there */
	}
}

/* Count +1 over the prefixes where h->v[k] is what the path holds. */
static void count_value(long *diff, const struct phist *h, size_t k, size_t n)
{
	diff[h->v[k].from]++;
	diff[k + 1 < h->nv ? h->v[k + 1].from : n + 1]--;
}

/* Per prefix (counts over paths, made cumulative by judge_choose). */
struct tally {
	long *held;	/* explained paths whose value there the backend holds */
	long *claims;	/* values made there that the backend does not hold */
	long *fallback;	/* unexplained paths' state before the batch, there */
	bool *seen;	/* seen[p]: the p-th operation's effect observed */
	size_t explained, unexplained;
	size_t floor;	/* a new file found by its digest where nothing was known */
};

/* Judge one path: into t. */
static void judge_path(struct tally *t, struct phist *h, enum held *res, int root_fd, size_t n,
		       const char *mount)
{
	bool any = false;

	for (size_t k = 0; k < h->nv; k++)
		any |= (res[k] = backend_holds(root_fd, h, &h->v[k])) != HELD_NO;
	for (size_t k = 1; k < h->nv; k++) {
		const struct pval *v = &h->v[k];
		if (res[k] == HELD_NO) {
			if (v->kind != PV_ABSENT)
				count_value(t->claims, h, k, n);	/* something made, not there */
			continue;
		}
		if (res[k] != HELD_YES || v->implied || v->kind == PV_PRESENT)
			continue;
		/*
		 * A removal leaves a trace only where no earlier state of the name
		 * explains its absence; the first operation on a name the replay
		 * did not know, if it removes it, found it there.
		 */
		bool before = false;
		for (size_t j = k == 1 ? 1 : 0; j < k && v->kind == PV_ABSENT; j++)
			before |= res[j] != HELD_NO;
		if (!before)
			t->seen[v->from] = true;
		if (v->kind == PV_FILE && needs_digest(h, v) && h->v[0].kind == PV_UNKNOWN &&
		    v->from > t->floor)
			t->floor = v->from;
	}
	if (!any) {
		/*
		 * Changed behind the mount (another node, a tool): what it held
		 * before these operations is not known, but what they would put
		 * there is not there.
		 */
		count_value(t->fallback, h, 0, n);
		if (t->unexplained++ < 8)
			ckpt_log(LOG_WARNING, "recovery: %s holds what no prefix of mount %s's "
				 "operations left there (changed behind it?)", h->path, mount);
		return;
	}
	t->explained++;
	for (size_t k = 0; k < h->nv; k++)
		if (res[k] != HELD_NO)
			count_value(t->held, h, k, n);
}

/*
 * The prefix: among those every explained path shows, the ones at or past
 * the floor (unless none is: the bytes found were there before), then the
 * one claiming fewest things made that are not there, then the longest.
 * Where no prefix explains every path (the model is wrong somewhere), the
 * one most paths show, then fewest claims, then the longest.  Then a
 * shorter prefix as good, if every operation between left no trace the
 * backend shows.
 */
static size_t judge_choose(struct tally *t, size_t n)
{
	long *score = xcalloc(n + 1, sizeof(*score)), held = 0, claims = 0, fb = 0;
	bool all = false, floor_ok = false, *fit = xcalloc(n + 1, sizeof(*fit));
	size_t best = 0;

	for (size_t p = 0; p <= n; p++) {
		held += t->held[p];
		claims += t->claims[p];
		fb += t->fallback[p];
		t->claims[p] = claims;
		all |= (size_t)held == t->explained;
		floor_ok |= (size_t)held == t->explained && p >= t->floor;
		score[p] = (size_t)held == t->explained ? LONG_MAX : held + fb;
	}
	long top = -1;
	for (size_t p = 0; p <= n; p++) {
		if (all && (score[p] != LONG_MAX || (floor_ok && p < t->floor)))
			continue;
		if (score[p] > top || (score[p] == top && t->claims[p] <= t->claims[best])) {
			top = score[p];
			best = p;
		}
	}
	for (size_t p = 0; p <= n; p++)
		fit[p] = score[p] == top && !(all && floor_ok && p < t->floor) &&
			 t->claims[p] == t->claims[best];
	for (size_t q = best; q > 0 && !t->seen[q];) {	/* op q left no trace: may go */
		if (fit[--q])
			best = q;
	}
	free(score);
	free(fit);
	return best;
}

size_t rprefix_judge(struct rprefix *x, int root_fd, size_t n, const char *mount)
{
	struct tally t = {
		.held = xcalloc(n + 2, sizeof(long)), .claims = xcalloc(n + 2, sizeof(long)),
		.fallback = xcalloc(n + 2, sizeof(long)), .seen = xcalloc(n + 1, sizeof(bool)),
	};
	enum held *res = NULL;
	size_t cap = 0, best;

	for (size_t i = 0; i < x->paths.nb; i++)
		for (struct strmap_node *e = x->paths.b[i]; e; e = e->next) {
			struct phist *h = CKPT_CONTAINER_OF(e, struct phist, n);
			if (h->nv > cap) {
				cap = h->nv;
				res = xrealloc(res, cap * sizeof(*res));
			}
			judge_path(&t, h, res, root_fd, n, mount);
		}
	best = judge_choose(&t, n);
	if (t.unexplained)
		ckpt_log(LOG_WARNING, "recovery: %zu of the %zu paths mount %s's operations touch "
			 "hold what none of them left there; judged by the rest",
			 t.unexplained, t.unexplained + t.explained, mount);
	free(t.held);
	free(t.claims);
	free(t.fallback);
	free(t.seen);
	free(res);
	return best;
}

void rprefix_free(struct rprefix *x)
{
	for (size_t i = 0; i < x->paths.nb; i++)
		for (struct strmap_node *e = x->paths.b[i], *next; e; e = next) {
			struct phist *h = CKPT_CONTAINER_OF(e, struct phist, n);
			next = e->next;
			free(h->path);
			free(h->v);
			free(h);
		}
	strmap_destroy(&x->paths);
	for (size_t g = 0; g < x->ngroups; g++) {
		for (size_t i = 0; i < x->groups[g].n; i++)
			free(x->groups[g].names[i]);
		free(x->groups[g].names);
	}
	free(x->groups);
	x->groups = NULL;
	x->ngroups = 0;
}
