/*
 * compact.c — rewriting a node's manifest log to what is still needed
 * (manifest_compact, see manifest.h and docs/manifest.md "Compaction").
 *
 * Two passes over the log, each a linear scan:
 *  1. per mount id: is the mount settled (an "unmount" or "recovered"
 *     record), the lowest seq a "recovered" record kept for it, the seqs its
 *     "void" records name, and this mount's last "durable" seq;
 *  2. every record in order, sorted into
 *     - U: this mount's records after durable_seq D (operations and intents
 *       recovery may still need), kept as they are, in order;
 *     - OLD: records of mounts that are not settled, and objects without
 *       "t" or "m", kept as they are (records that are not JSON objects
 *       are dropped: every reader skips them);
 *     - the snapshot of settled records (this mount's up to D, every settled
 *       mount's), voided records dropped, replayed into
 *         L  path -> the newest "file" record of a live file of this node,
 *            moved along with this node's renames (its "path" and "time"
 *            rewritten to the rename's), and
 *         K  the records whose effect may reach other nodes' files or the
 *            other names of a link group: unlinks of names this node never
 *            wrote, rmdirs, renames of directories, of other nodes' files
 *            or of or over linked names, every link (after both its names'
 *            entries, frozen out of L), every version of a linked name
 *            (verify gives it to the whole group: L's one-name entries
 *            would not);
 *       an unlink of a file in L just drops it, a rename of a file in L
 *       just moves it.  Then K is thinned from the end: a removal
 *       (unlink/rmdir) is dropped when a later removal of the same name or
 *       of a directory above it follows with no rename, link or version in
 *       between.
 * `ckptfs-ctl verify` replays every node's records by time, so the
 * snapshot gives it the same map as the full history wherever no two nodes
 * write or move the same name; recovery reads only this mount's records
 * after its last "durable" record, which are kept as they were.
 *
 * The new log is: OLD, a "compacted" header, K and L merged by time (K
 * first on a tie), this mount's "mount" record, a "durable" record for D,
 * U.  The records between the header and the next "mount" record are the
 * snapshot: the next compaction takes them as settled (their mounts'
 * "unmount" and "recovered" records are gone).  Keeping the snapshot in
 * time order matters too: the next compaction reads the log in file order,
 * and must meet a removal after the file it removes, as verify (which sorts
 * by time) does.  It is written to
 * manifest.log.tmp in the node directory, fdatasync'd, renamed over
 * manifest.log, and the directory fsync'd (manifest_replace_locked, which
 * also writes the log anew after a failed sync); the temp fd (O_APPEND)
 * becomes the log.  Not while such a rewrite is due.  A crash before the
 * rename leaves the old log (and a temp file the next mount removes);
 * after it, the new one.  Every call goes through
 * bsys, so tests inject a failure or a crash at each step.
 *
 * m->lock is held throughout: appends wait for the rewrite.
 */
#include "backend/manifest_priv.h"
#include "backend/bsys.h"
#include "cache/json.h"
#include "cache/log.h"
#include "cache/strmap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- entries of the compactor's maps (cache/strmap.h) --------------------- */

/* A key and what it maps to; `next` links a list smap_take returns. */
struct sent {
	struct strmap_node node;
	struct sent *next;
	char *key;
	void *val;
};

struct smap {
	struct strmap map;
};

static struct sent *sent_of(struct strmap_node *n)
{
	return n ? CKPT_CONTAINER_OF(n, struct sent, node) : NULL;
}

static struct sent *smap_find(const struct smap *m, const char *key)
{
	return sent_of(strmap_get(&m->map, key));
}

static void smap_link(struct smap *m, struct sent *e)
{
	e->node.key = e->key;
	strmap_insert(&m->map, &e->node);
}

/* The entry for key, created (val NULL) if absent. */
static struct sent *smap_get(struct smap *m, const char *key)
{
	return STRMAP_GET_OR_NEW(&m->map, key, true, struct sent, node, key);
}

static void smap_unlink(struct smap *m, struct sent *e)
{
	strmap_remove(&m->map, &e->node);
}

/* Detach the entries at `path` or below it (a list through ->next). */
static struct sent *smap_take(struct smap *m, const char *path)
{
	struct sent *out = NULL;
	for (struct strmap_node *n = strmap_take_tree(&m->map, path), *next; n; n = next) {
		struct sent *e = sent_of(n);
		next = n->next;
		e->next = out;
		out = e;
	}
	return out;
}

/* Call fn on every entry (which may free it). */
static void smap_each(struct smap *m, void (*fn)(struct sent *, void *), void *arg)
{
	for (size_t i = 0; i < m->map.nb; i++)
		for (struct strmap_node *n = m->map.b[i], *next; n; n = next) {
			next = n->next;
			fn(sent_of(n), arg);
		}
}

static void sent_free(struct sent *e, void *free_val)
{
	if (free_val)
		((void (*)(void *))free_val)(e->val);
	free(e->key);
	free(e);
}

/* Free every entry (and its value, with free_val) and the table. */
static void smap_free(struct smap *m, void (*free_val)(void *))
{
	smap_each(m, sent_free, (void *)free_val);
	strmap_destroy(&m->map);
}

/* ---- pass 1: mounts ------------------------------------------------------ */

struct mnt {
	bool settled;		/* "unmount" or "recovered" seen */
	bool has_cut;
	uint64_t cut;		/* lowest "recovered" seq: later operations void */
	struct vd { uint64_t seq, try; } *voids;	/* "void" records: one attempt each (sorted) */
	size_t nvoids, capvoids;
	uint64_t last_durable;
};

struct compactor {
	struct manifest *m;
	uint64_t D;		/* this mount's settled prefix */
	struct smap mounts;	/* mount id -> struct mnt */
	struct mnt *cur;
	/* pass 2 */
	struct smap live;	/* L: path -> struct lent */
	struct smap linked;	/* names a kept "link" record made (moved with renames) */
	struct krec *k;		/* K */
	size_t nk, capk;
	char **old, **u;	/* OLD and U payloads */
	size_t nold, capold, nu, capu;
	char *cur_mount;	/* this mount's "mount" record */
	bool in_snapshot;	/* between a "compacted" header and the next "mount" */
	uint64_t in_records;
};

static struct mnt *mnt_of(struct compactor *c, const char *id)
{
	struct sent *e = smap_get(&c->mounts, id);
	if (!e->val)
		e->val = xcalloc(1, sizeof(struct mnt));
	return e->val;
}

static int pass1_cb(void *arg, const char *p, size_t len, uint64_t off)
{
	struct compactor *c = arg;
	struct json_obj o;
	const char *t, *id;
	uint64_t seq = 0;

	if (json_parse(p, len, &o, NULL, 0) < 0)
		return 0;
	t = json_str(&o, "t");
	id = json_str(&o, "m");
	json_u64(&o, "seq", &seq);
	if (t && id) {
		struct mnt *mt = mnt_of(c, id);
		if (!strcmp(t, "unmount")) {
			mt->settled = true;
		} else if (!strcmp(t, "recovered")) {
			bool exp = false;
			mt->settled = true;
			/* One that voids each attempt explicitly cuts nothing (recover.c, verify). */
			if (!(json_bool(&o, "explicit", &exp) && exp) && (!mt->has_cut || seq < mt->cut)) {
				mt->cut = seq;
				mt->has_cut = true;
			}
		} else if (!strcmp(t, "void")) {
			uint64_t try = 0;
			json_u64(&o, "try", &try);
			if (mt->nvoids == mt->capvoids) {
				mt->capvoids = mt->capvoids ? mt->capvoids * 2 : 16;
				mt->voids = xrealloc(mt->voids, mt->capvoids * sizeof(*mt->voids));
			}
			mt->voids[mt->nvoids++] = (struct vd){ seq, try };
		} else if (!strcmp(t, "durable") && seq > mt->last_durable) {
			mt->last_durable = seq;
		}
	}
	json_free(&o);
	(void)off;
	return 0;
}

static int vd_cmp(const void *a, const void *b)
{
	const struct vd *x = a, *y = b;
	if (x->seq != y->seq)
		return x->seq < y->seq ? -1 : 1;
	return x->try < y->try ? -1 : x->try > y->try;
}

/*
 * Does `ckptfs-ctl verify` skip this record as never having happened?  A
 * "recovered" cut voids what came after it; a "void" names one attempt
 * (seq and try) of one operation.
 */
static bool voided(const struct mnt *mt, const struct json_obj *o)
{
	struct vd k = { 0, 0 };

	json_u64(o, "seq", &k.seq);
	json_u64(o, "try", &k.try);
	if (mt->has_cut && k.seq > mt->cut)
		return true;
	return mt->nvoids && bsearch(&k, mt->voids, mt->nvoids, sizeof(k), vd_cmp);
}

/* ---- pass 2: the snapshot ------------------------------------------------ */

/* A live file of this node: its "file" record, with path and time as now. */
struct lent {
	struct json_obj o;
	char *time;		/* the literal of the event that put it here */
};

enum kkind { K_FILE, K_UNLINK, K_RMDIR, K_RENAME, K_LINK };

struct krec {
	enum kkind kind;
	char *payload;
	char *path;
	double time;		/* as verify orders it */
	bool dropped;
};

static void push_str(char ***v, size_t *n, size_t *cap, const char *p, size_t len)
{
	if (*n == *cap) {
		*cap = *cap ? *cap * 2 : 64;
		*v = xrealloc(*v, *cap * sizeof(**v));
	}
	char *s = xmalloc(len + 1);
	memcpy(s, p, len);
	s[len] = '\0';
	(*v)[(*n)++] = s;
}

static void k_push(struct compactor *c, enum kkind kind, char *payload, const char *path,
		   const char *time)
{
	if (c->nk == c->capk) {
		c->capk = c->capk ? c->capk * 2 : 64;
		c->k = xrealloc(c->k, c->capk * sizeof(*c->k));
	}
	c->k[c->nk++] = (struct krec){ .kind = kind, .payload = payload, .path = xstrdup(path),
				       .time = strtod(time, NULL) };
}

/* A flat object back to text, with "path" and "time" replaced when given. */
static char *obj_text(const struct json_obj *o, const char *path, const char *time)
{
	struct strbuf b = { 0 };

	sb_printf(&b, "{");
	for (size_t i = 0; i < o->n; i++) {
		const struct json_member *x = &o->m[i];
		sb_printf(&b, "%s", i ? ", " : "");
		sb_json_strn(&b, x->key, x->key_len);
		sb_printf(&b, ": ");
		if (path && !strcmp(x->key, "path"))
			sb_json_str(&b, path);
		else if (time && !strcmp(x->key, "time"))
			sb_printf(&b, "%s", time);
		else if (x->type == JSON_STR)
			sb_json_strn(&b, x->str, x->len);
		else if (x->type == JSON_NUM)
			sb_printf(&b, "%s", x->str);
		else if (x->type == JSON_BOOL)
			sb_printf(&b, "%s", x->b ? "true" : "false");
		else
			sb_printf(&b, "null");
	}
	sb_printf(&b, "}");
	return b.s;
}

static void lent_free(struct sent *e)
{
	struct lent *l = e->val;
	json_free(&l->o);
	free(l->time);
	free(l);
	free(e->key);
	free(e);
}

static void lent_free_each(struct sent *e, void *arg)
{
	lent_free(e);
}

static void live_drop(struct compactor *c, const char *path)
{
	for (struct sent *e = smap_take(&c->live, path), *n; e; e = n) {
		n = e->next;
		lent_free(e);
	}
}

/* Put the taken entries back with the prefix from -> to, as of time t. */
static void live_move(struct compactor *c, struct sent *list, const char *from, const char *to,
		      const char *t)
{
	size_t fl = strlen(from);

	for (struct sent *e = list, *n; e; e = n) {
		struct lent *l = e->val;
		struct strbuf k = { 0 };
		n = e->next;
		sb_printf(&k, "%s%s", to, e->key + fl);
		free(e->key);
		e->key = k.s;
		free(l->time);
		l->time = xstrdup(t);
		live_drop(c, e->key);
		smap_link(&c->live, e);
	}
}

/* Free a list of `linked` entries smap_take returned. */
static void linked_forget(struct sent *list)
{
	for (struct sent *e = list, *n; e; e = n) {
		n = e->next;
		sent_free(e, NULL);
	}
}

/* Rename the linked names at or below `from` to below `to` (exchange: swap). */
static void linked_move(struct compactor *c, const char *from, const char *to, bool exch)
{
	struct sent *a = smap_take(&c->linked, from), *b = smap_take(&c->linked, to);

	if (!exch) {	/* what `to` held is gone, out of its group (verify: pm_remove) */
		linked_forget(b);
		b = NULL;
	}
	struct sent *lists[2] = { a, b };
	const char *src[2] = { from, to }, *dst[2] = { to, from };

	for (unsigned i = 0; i < 2; i++)
		for (struct sent *e = lists[i], *n; e; e = n) {
			struct strbuf k = { 0 };
			n = e->next;
			sb_printf(&k, "%s%s", dst[i], e->key + strlen(src[i]));
			free(e->key);
			e->key = k.s;
			if (smap_find(&c->linked, e->key)) {
				sent_free(e, NULL);
			} else {
				smap_link(&c->linked, e);
			}
		}
}

/* Emit the live entry at path (if any) into K as it stands, and forget it. */
static void live_freeze(struct compactor *c, const char *path)
{
	struct sent *e = smap_find(&c->live, path);
	if (!e)
		return;
	struct lent *l = e->val;
	smap_unlink(&c->live, e);
	k_push(c, K_FILE, obj_text(&l->o, e->key, l->time), e->key, l->time);
	lent_free(e);
}

static void settled_record(struct compactor *c, const char *p, size_t len, struct json_obj *o,
			   const char *t)
{
	const char *path = json_str(o, "path"), *to = json_str(o, "to");
	const struct json_member *tm = json_get(o, "time");
	char *text;

	/* What verify replays: a path, a time, and for rename/link a target. */
	if (!path || !tm || tm->type != JSON_NUM || tm->num == 0)
		return;
	if (!strcmp(t, "file") && smap_find(&c->linked, path)) {
		/*
		 * A name a kept link made, or linked: its version is every name
		 * of its group's (verify), which the removal of this one name
		 * later must not take away: kept as it is, in order.
		 */
		live_drop(c, path);	/* (none: a linked name's versions are all in K) */
		text = xmalloc(len + 1);
		memcpy(text, p, len);
		text[len] = '\0';
		k_push(c, K_FILE, text, path, tm->str);
		return;
	}
	if (!strcmp(t, "file")) {
		struct sent *e = smap_get(&c->live, path);
		struct lent *l = e->val;
		if (l) {
			json_free(&l->o);
			free(l->time);
		} else {
			l = e->val = xcalloc(1, sizeof(*l));
		}
		l->o = *o;
		l->time = xstrdup(tm->str);
		memset(o, 0, sizeof(*o));	/* now owned by L */
		return;
	}
	text = xmalloc(len + 1);
	memcpy(text, p, len);
	text[len] = '\0';
	if (!strcmp(t, "unlink") || !strcmp(t, "rmdir"))	/* out of its link group */
		linked_forget(smap_take(&c->linked, path));
	if (!strcmp(t, "unlink")) {
		if (smap_find(&c->live, path)) {
			live_drop(c, path);	/* this node's file: gone, nothing to keep */
			free(text);
		} else {
			k_push(c, K_UNLINK, text, path, tm->str);
		}
	} else if (!strcmp(t, "rmdir")) {
		live_drop(c, path);
		k_push(c, K_RMDIR, text, path, tm->str);
	} else if (!strcmp(t, "rename") && to) {
		bool exch = false;
		json_bool(o, "exchange", &exch);
		/*
		 * Only this node's files moved, and none over a name a kept link
		 * made (verify takes such a name out of its link group): L says
		 * it all.
		 */
		bool local = smap_find(&c->live, path) && (!exch || smap_find(&c->live, to)) &&
			     !smap_find(&c->linked, to) && !smap_find(&c->linked, path);
		struct sent *a = smap_take(&c->live, path), *b = exch ? smap_take(&c->live, to) : NULL;
		if (!exch)
			live_drop(c, to);
		live_move(c, a, path, to, tm->str);
		live_move(c, b, to, path, tm->str);
		linked_move(c, path, to, exch);
		if (local)
			free(text);
		else
			k_push(c, K_RENAME, text, path, tm->str);
	} else if (!strcmp(t, "link") && to) {
		/*
		 * Kept as it was, after the files it joins as they stand: the
		 * names it links share every later version (apply.c
		 * relink_others; verify's link groups), which separate copies in
		 * L would not.
		 */
		live_freeze(c, path);
		live_freeze(c, to);
		smap_get(&c->linked, to);
		smap_get(&c->linked, path);
		k_push(c, K_LINK, text, path, tm->str);
	} else {
		free(text);
	}
}

static int pass2_cb(void *arg, const char *p, size_t len, uint64_t off)
{
	struct compactor *c = arg;
	struct json_obj o;
	const char *t, *id;
	uint64_t seq = 0;
	bool has_seq;

	c->in_records++;
	if (json_parse(p, len, &o, NULL, 0) < 0)
		return 0;	/* every reader skips it: so can the new log */
	if (!(t = json_str(&o, "t")) || !(id = json_str(&o, "m"))) {
		push_str(&c->old, &c->nold, &c->capold, p, len);	/* not ours to judge */
		json_free(&o);
		return 0;
	}
	has_seq = json_u64(&o, "seq", &seq);
	const struct mnt *mt = mnt_of(c, id);
	if (!strcmp(t, "mount"))
		c->in_snapshot = false;	/* a snapshot ends at the next "mount" record */
	if (!strcmp(t, "compacted")) {
		c->in_snapshot = true;	/* the previous header (replaced): a snapshot follows */
	} else if (c->in_snapshot && mt != c->cur) {
		/* A previous compaction's snapshot: settled, whatever its mount's state. */
		if (!voided(mt, &o))
			settled_record(c, p, len, &o, t);
	} else if (mt == c->cur) {
		if (!strcmp(t, "mount")) {
			free(c->cur_mount);
			c->cur_mount = xmalloc(len + 1);
			memcpy(c->cur_mount, p, len);
			c->cur_mount[len] = '\0';
		} else if (has_seq && seq <= c->D) {
			if (!voided(mt, &o))
				settled_record(c, p, len, &o, t);
		} else {
			push_str(&c->u, &c->nu, &c->capu, p, len);
		}
	} else if (mt->settled) {
		if (!voided(mt, &o))
			settled_record(c, p, len, &o, t);
	} else {
		push_str(&c->old, &c->nold, &c->capold, p, len);
	}
	json_free(&o);
	(void)off;
	return 0;
}

/* Drop removals that a later removal of the same name or a parent covers. */
static void k_thin(struct compactor *c)
{
	struct smap removed = { 0 };

	for (size_t i = c->nk; i-- > 0;) {
		struct krec *r = &c->k[i];
		if (r->kind == K_RENAME || r->kind == K_LINK || r->kind == K_FILE) {
			/* A move, a link or a kept version in between: nothing covers across it. */
			smap_free(&removed, NULL);
			continue;
		}
		/* Is this name, or a directory above it, removed later? */
		bool covered = smap_find(&removed, r->path) != NULL;
		for (char *s = strchr(r->path, '/'); s && !covered; s = strchr(s + 1, '/')) {
			*s = '\0';
			covered = smap_find(&removed, r->path) != NULL;
			*s = '/';
		}
		if (covered)
			r->dropped = true;
		else
			smap_get(&removed, r->path);
	}
	smap_free(&removed, NULL);
}

/* A time literal as verify compares it (a double), 0 if it is not a number. */
static double time_of(const char *lit)
{
	return lit ? strtod(lit, NULL) : 0;
}

/* L entries by time, then path (deterministic). */
static int lent_cmp(const void *a, const void *b)
{
	const struct sent *x = *(struct sent *const *)a, *y = *(struct sent *const *)b;
	double tx = time_of(((struct lent *)x->val)->time), ty = time_of(((struct lent *)y->val)->time);
	if (tx != ty)
		return tx < ty ? -1 : 1;
	return strcmp(x->key, y->key);
}

/* ---- writing the new log -------------------------------------------------- */

struct out {
	int fd;
	struct strbuf buf, rec;
	uint64_t off, records;
	int err;
};

static void out_flush(struct out *w)
{
	size_t done = 0;
	int r = w->err ? 0 : manifest_write_all(w->fd, w->buf.s, w->buf.len, w->off, &done);

	if (r < 0)
		w->err = r;
	w->off += done;
	w->buf.len = 0;
}

static void out_rec(struct out *w, const char *payload)
{
	size_t len = strlen(payload);

	if (len > MANIFEST_REC_MAX)
		return;		/* cannot be: every input record fitted */
	manifest_frame(&w->rec, payload, len);
	sb_printf(&w->buf, "%s", w->rec.s);
	w->records++;
	if (w->buf.len >= (1u << 20))
		out_flush(w);
}

static void mnt_free(void *v)
{
	struct mnt *mt = v;
	free(mt->voids);
	free(mt);
}

static void compactor_free(struct compactor *c)
{
	smap_free(&c->mounts, mnt_free);
	smap_free(&c->linked, NULL);
	smap_each(&c->live, lent_free_each, NULL);
	strmap_destroy(&c->live.map);
	for (size_t i = 0; i < c->nk; i++) {
		free(c->k[i].payload);
		free(c->k[i].path);
	}
	free(c->k);
	for (size_t i = 0; i < c->nold; i++)
		free(c->old[i]);
	free(c->old);
	for (size_t i = 0; i < c->nu; i++)
		free(c->u[i]);
	free(c->u);
	free(c->cur_mount);
}

/* Write everything the compactor (arg) kept to fd; 0 or -errno. */
static int write_log(void *arg, int fd, uint64_t *size, uint64_t *records)
{
	struct compactor *c = arg;
	struct out w = { .fd = fd };
	struct strbuf hdr = { 0 }, dur = { 0 };
	struct sent **lv = xmalloc((c->live.map.n + 1) * sizeof(*lv));
	char **v;
	bool *owned;
	size_t nl = 0, n = 0, cap;
	uint64_t bytes = 0;

	for (size_t i = 0; i < c->live.map.nb; i++)
		for (struct strmap_node *e = c->live.map.b[i]; e; e = e->next)
			lv[nl++] = sent_of(e);
	qsort(lv, nl, sizeof(*lv), lent_cmp);
	/*
	 * Everything after the header, in order (borrowed, except L's texts).
	 * K and L are merged by time, K first on a tie, so the log stays in the
	 * order verify replays and the next compaction reads it in that order.
	 */
	cap = c->nk + nl + 2 + c->nu;
	v = xmalloc(cap * sizeof(*v));
	owned = xcalloc(cap, sizeof(*owned));
	for (size_t i = 0, j = 0; i < c->nk || j < nl;) {
		while (i < c->nk && c->k[i].dropped)
			i++;
		if (i >= c->nk && j >= nl)
			break;
		if (j >= nl || (i < c->nk && c->k[i].time <= time_of(((struct lent *)lv[j]->val)->time))) {
			v[n++] = c->k[i++].payload;
		} else {
			struct lent *l = lv[j]->val;
			owned[n] = true;
			v[n++] = obj_text(&l->o, lv[j]->key, l->time);
			j++;
		}
	}
	if (c->cur_mount)
		v[n++] = c->cur_mount;
	if (c->D) {
		sb_printf(&dur, "{\"t\": \"durable\", \"m\": ");
		sb_json_str(&dur, c->m->mount_id);
		sb_printf(&dur, ", \"seq\": %llu}", (unsigned long long)c->D);
		v[n++] = dur.s;
	}
	for (size_t i = 0; i < c->nu; i++)
		v[n++] = c->u[i];
	for (size_t i = 0; i < n; i++)
		bytes += REC_FRAME_LEN + strlen(v[i]);
	/* The header counts what follows it: manifest_wants_compaction's base. */
	sb_printf(&hdr, "{\"t\": \"compacted\", \"m\": ");
	sb_json_str(&hdr, c->m->mount_id);
	sb_printf(&hdr, ", \"time\": %llu, \"from_records\": %llu, \"from_bytes\": %llu, "
		  "\"records\": %zu, \"bytes\": %llu}", (unsigned long long)wall_ns(),
		  (unsigned long long)c->in_records, (unsigned long long)c->m->size, n,
		  (unsigned long long)bytes);
	/* OLD first: the header starts the snapshot, which the next compaction trusts. */
	for (size_t i = 0; i < c->nold; i++)
		out_rec(&w, c->old[i]);
	out_rec(&w, hdr.s);
	for (size_t i = 0; i < n; i++)
		out_rec(&w, v[i]);
	out_flush(&w);
	for (size_t i = 0; i < n; i++)
		if (owned[i])
			free(v[i]);
	free(owned);
	free(v);
	free(lv);
	sb_free(&dur);
	sb_free(&hdr);
	sb_free(&w.buf);
	sb_free(&w.rec);
	*size = w.off;
	*records = w.records;
	return w.err;
}

int manifest_compact(struct manifest *m, uint64_t durable_seq)
{
	struct compactor c = { .m = m };
	struct manifest_scan scan;
	uint64_t t0 = now_ns(), old_size, old_records;
	int r = 0;

	if (m->fd < 0)
		return 0;
	pthread_mutex_lock(&m->lock);
	old_size = m->size;
	old_records = m->records;
	/*
	 * Read back only what a sync covered: records a failed write-back lost
	 * could pass for records.  After a failure, manifest_sync first.
	 */
	if (!m->resync && m->changes != m->changes_synced && (r = bsys.fdatasync(m->fd)) < 0) {
		m->resync = true;
	} else if (!m->resync && m->changes != m->changes_synced) {
		atomic_fetch_add(&m->syncs, 1);
		m->changes_synced = m->changes;
		manifest_synced_to_locked(m, m->size);
	}
	if (m->resync) {
		r = r < 0 ? r : -EAGAIN;
		goto out;
	}
	if ((r = manifest_scan_fd(m->fd, pass1_cb, &c, &scan)) < 0)
		goto out;
	c.cur = mnt_of(&c, m->mount_id);
	/* Only what a "durable" record of this mount has settled. */
	c.D = CKPT_MIN(durable_seq, c.cur->last_durable);
	for (size_t i = 0; i < c.mounts.map.nb; i++)
		for (struct strmap_node *e = c.mounts.map.b[i]; e; e = e->next) {
			struct mnt *mt = sent_of(e)->val;
			if (mt->nvoids)
				qsort(mt->voids, mt->nvoids, sizeof(*mt->voids), vd_cmp);
		}
	if ((r = manifest_scan_fd(m->fd, pass2_cb, &c, &scan)) < 0)
		goto out;
	k_thin(&c);
	if ((r = manifest_replace_locked(m, write_log, &c)) < 0)
		goto out;
	m->base_bytes = m->size;
	m->base_records = m->records;
	m->compactions++;
	ckpt_log(LOG_INFO, "manifest: compacted %s/" MANIFEST_LOG " from %llu records (%llu bytes) "
		 "to %llu (%llu bytes) in %.3f s", m->where, (unsigned long long)old_records,
		 (unsigned long long)old_size, (unsigned long long)m->records,
		 (unsigned long long)m->size, (double)(now_ns() - t0) / 1e9);
out:
	pthread_mutex_unlock(&m->lock);
	compactor_free(&c);
	return r;
}
