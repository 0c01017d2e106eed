/*
 * recover.c — recovery from an unclean end of the previous mount of this
 * node (see manifest.h, docs/manifest.md).
 *
 * The scan at mount (manifest.c) feeds every record to rscan_cb, which keeps
 * only what recovery needs about the last mount in the log: its operations
 * after its last "durable" record and its intents not yet settled.  When
 * that mount left no "unmount" record:
 *  1. (manifest.c has cut a torn tail off the log);
 *  2. decide which of its operations after its last "durable" record were
 *     really applied.  Records are appended in the order operations are
 *     applied (P7; with per-user order that is not always sequence order),
 *     each group's records are fsync'd before any of them is applied, and a
 *     "durable" record settles everything recorded before it.  So the
 *     recorded operations after the last "durable" record were applied as
 *     a prefix *of the log*, and the backend holds that prefix's state.  A
 *     replay of the log (every record no "void" or older "recovered" cut
 *     voids) gives what each path held when those operations began; then
 *     rprefix.c notes each of them, in order, into the history of every
 *     path it touches and judges which prefix the backend shows, all paths
 *     together (a file rewritten unchanged, or a directory renamed away and
 *     made again, shows under a shorter prefix what a later operation would
 *     put there: no operation is evidence alone).  Each operation after
 *     the prefix gets a "void" record (its seq and attempt), so readers
 *     skip exactly those;
 *  3. report versions that were queued ("intent") but never published: the
 *     files that were in flight and were never acknowledged durable;
 *  4. remove that mount's temporary files (".ckptfs.<k>.<mount id>.<n>").
 *
 * Every backend call goes through bsys (bsys.h): paths from records are
 * walked one component at a time, never through a symlink, never above the
 * root.
 * Records are read with the strict JSON reader (cache/json.h); a record
 * that passes its hash but is not a flat object, or lacks "t" or "m", is
 * counted and ignored, never guessed at.  Memory is bounded by the
 * operations and intents of the last mount that are not yet settled and
 * the log's "void" records; the replay of step 2 (only after an unclean
 * stop) holds one digest per live path of the log, and a history per path
 * the unsettled operations touch.
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
#include <sys/stat.h>
#include <unistd.h>

/* ---- paths below the backend root ------------------------------------- */

/* ---- the scan ------------------------------------------------------------ */

/* A mount's older "recovered" record (without "explicit"): its later seqs never happened. */
struct rcut {
	char *mount;
	uint64_t seq;
};

struct rscan {
	char prev[24];		/* the last mount of this log */
	uint64_t prev_format;	/* its manifest format (1: whole-file XXH3-128 digests) */
	bool prev_clean;
	uint64_t prev_durable;
	uint64_t prev_max_seq;	/* the highest seq any of its records names */
	struct rrec *ops;	/* operations of prev after its last durable record */
	size_t nops, capops;
	struct rrec *intents;	/* its intents after its last durable record */
	size_t nintents, capintents;
	uint64_t unreadable;	/* valid frames whose payload is not a usable object */
	uint64_t compacted_records, compacted_bytes;
	struct strset voids;	/* "<mount> <seq> <try>" of every "void" record */
	struct rcut *cuts;
	size_t ncuts;
	/* The replay (step 2): */
	struct strmap hashes;	/* path -> struct hnode: the state before ops[0] */
	uint64_t replay_format;	/* the format of the mount whose records the replay reads
				   (0: not known, before any "mount" record of a compacted log) */
	size_t matched;		/* ops[0, matched) met again in the replay */
	struct rprefix prefix;	/* what ops[] do to each path */
};

struct rscan *rscan_new(void)
{
	return xcalloc(1, sizeof(struct rscan));
}

static void rrec_free(struct rrec *r)
{
	free(r->path);
	free(r->to);
	free(r->xxh3);
	free(r->target);
}

static void rscan_reset_ops(struct rscan *s)
{
	for (size_t i = 0; i < s->nops; i++)
		rrec_free(&s->ops[i]);
	for (size_t i = 0; i < s->nintents; i++)
		rrec_free(&s->intents[i]);
	s->nops = s->nintents = 0;
}

static struct hnode *hash_of(struct rscan *s, const char *path, bool create)
{
	return STRMAP_GET_OR_NEW(&s->hashes, path, create, struct hnode, n, path);
}

/* Take out what `path` and everything below it hold (a list through ->next). */
static struct hnode *hashes_take(struct rscan *s, const char *path)
{
	struct hnode *out = NULL;

	for (struct strmap_node *e = strmap_take_tree(&s->hashes, path), *next; e; e = next) {
		struct hnode *h = CKPT_CONTAINER_OF(e, struct hnode, n);
		next = e->next;
		h->next = out;
		out = h;
	}
	return out;
}

static void hashes_free(struct hnode *h)
{
	for (struct hnode *next; h; h = next) {
		next = h->next;
		free(h->path);
		free(h);
	}
}

/* Put taken entries back with the prefix `from` of their paths replaced by `to`. */
static void hashes_put_moved(struct rscan *s, struct hnode *list, const char *from, const char *to)
{
	for (struct hnode *next; list; list = next) {
		struct strbuf b = { 0 };
		next = list->next;
		sb_printf(&b, "%s%s", to, list->path + strlen(from));
		free(list->path);
		list->path = b.s;
		list->n.key = list->path;
		hashes_free(hashes_take(s, list->path));
		strmap_insert(&s->hashes, &list->n);
	}
}

/* Replay one settled record (one that happened) into what each path holds. */
static void hashes_note(struct rscan *s, const char *t, const char *path, const char *to,
			const char *xxh3, uint64_t size, bool exchange)
{
	if (!path)
		return;
	if (!strcmp(t, "file") && xxh3 && strlen(xxh3) < 33) {
		struct hnode *h = hash_of(s, path, true);
		snprintf(h->xxh3, sizeof(h->xxh3), "%s", xxh3);
		h->size = size;
		h->format = s->replay_format;
	} else if (!strcmp(t, "unlink") || !strcmp(t, "rmdir")) {
		hashes_free(hashes_take(s, path));
	} else if (!strcmp(t, "rename") && to && strcmp(path, to)) {
		struct hnode *a = hashes_take(s, path), *b = hashes_take(s, to);
		if (!exchange) {
			hashes_free(b);
			b = NULL;
		}
		hashes_put_moved(s, a, path, to);
		hashes_put_moved(s, b, to, path);
	} else if (!strcmp(t, "link") && to) {
		struct hnode *from = hash_of(s, path, false), held = { 0 };
		if (from)
			held = *from;
		hashes_free(hashes_take(s, to));
		if (from) {
			struct hnode *h = hash_of(s, to, true);
			memcpy(h->xxh3, held.xxh3, sizeof(h->xxh3));
			h->size = held.size;
			h->format = held.format;
		}
	}
}

static void void_key(char *out, size_t len, const char *mount, uint64_t seq, uint64_t try)
{
	snprintf(out, len, "%s %llu %llu", mount, (unsigned long long)seq, (unsigned long long)try);
}

/* Did this record's operation never happen (a "void" names it, or a cut lies before it)? */
static bool rec_voided(const struct rscan *s, const char *mount, uint64_t seq, uint64_t try)
{
	char key[80];

	for (size_t i = 0; i < s->ncuts; i++)
		if (seq > s->cuts[i].seq && !strcmp(s->cuts[i].mount, mount))
			return true;
	void_key(key, sizeof(key), mount, seq, try);
	return strset_has(&s->voids, key);
}

void rscan_free(struct rscan *s)
{
	for (size_t i = 0; i < s->hashes.nb; i++)
		for (struct strmap_node *e = s->hashes.b[i], *next; e; e = next) {
			struct hnode *h = CKPT_CONTAINER_OF(e, struct hnode, n);
			next = e->next;
			free(h->path);
			free(h);
		}
	strmap_destroy(&s->hashes);
	rprefix_free(&s->prefix);
	strset_clear(&s->voids);
	for (size_t i = 0; i < s->ncuts; i++)
		free(s->cuts[i].mount);
	free(s->cuts);
	rscan_reset_ops(s);
	free(s->ops);
	free(s->intents);
	if (s->unreadable)
		ckpt_log(LOG_WARNING, "manifest: %llu records are not flat JSON objects with \"t\" "
			 "and \"m\"; ignored", (unsigned long long)s->unreadable);
	free(s);
}

bool rscan_previous(const struct rscan *s, bool *clean, char *id, size_t len)
{
	*clean = s->prev_clean;
	snprintf(id, len, "%s", s->prev);
	return s->prev[0] != '\0';
}

void rscan_compacted(const struct rscan *s, uint64_t *records, uint64_t *bytes)
{
	*records = s->compacted_records;
	*bytes = s->compacted_bytes;
}

/* Drop the records of v[0, *n) for seq: attempt `try` only, or every one (any_try). */
static void rrecs_drop(struct rrec *v, size_t *n, uint64_t seq, uint64_t try, bool any_try)
{
	size_t k = 0;
	for (size_t i = 0; i < *n; i++) {
		if (v[i].seq != seq || (!any_try && v[i].try != try))
			v[k++] = v[i];
		else
			rrec_free(&v[i]);
	}
	*n = k;
}

static void rrecs_push(struct rrec **v, size_t *n, size_t *cap, const struct rrec *r)
{
	if (*n == *cap) {
		*cap = *cap ? *cap * 2 : 64;
		*v = xrealloc(*v, *cap * sizeof(**v));
	}
	(*v)[(*n)++] = *r;
}

static char *dup_or_null(const char *s)
{
	return s ? xstrdup(s) : NULL;
}

int rscan_cb(void *arg, const char *p, size_t len, uint64_t off)
{
	struct rscan *s = arg;
	struct json_obj o;
	struct rrec r = { 0 };
	const char *t, *mid;

	if (json_parse(p, len, &o, NULL, 0) < 0) {
		s->unreadable++;
		return 0;
	}
	t = json_str(&o, "t");
	mid = json_str(&o, "m");
	if (!t || !mid || strlen(t) >= sizeof(r.t) || strlen(mid) >= sizeof(s->prev)) {
		s->unreadable++;
		goto out;
	}
	if (!strcmp(t, "compacted")) {
		json_u64(&o, "records", &s->compacted_records);
		json_u64(&o, "bytes", &s->compacted_bytes);
		goto out;
	}
	if (!strcmp(t, "void") || !strcmp(t, "recovered")) {	/* of any mount: for the replay */
		uint64_t seq = 0, try = 0;
		bool exp = false;
		json_u64(&o, "seq", &seq);
		json_u64(&o, "try", &try);
		if (!strcmp(t, "void")) {
			char key[80];
			void_key(key, sizeof(key), mid, seq, try);
			strset_add(&s->voids, key);
		} else if (!(json_bool(&o, "explicit", &exp) && exp)) {
			s->cuts = xrealloc(s->cuts, (s->ncuts + 1) * sizeof(*s->cuts));
			s->cuts[s->ncuts++] = (struct rcut){ xstrdup(mid), seq };
		}
	}
	if (!strcmp(t, "mount")) {
		rscan_reset_ops(s);
		snprintf(s->prev, sizeof(s->prev), "%s", mid);
		s->prev_format = 1;	/* no "format": of format 1, as the replay and verify read it */
		json_u64(&o, "format", &s->prev_format);
		s->prev_clean = false;
		s->prev_durable = s->prev_max_seq = 0;
		goto out;
	}
	if (strcmp(mid, s->prev) != 0)
		goto out;	/* another mount's records: not ours to recover */
	json_u64(&o, "seq", &r.seq);
	json_u64(&o, "try", &r.try);
	if (r.seq > s->prev_max_seq)
		s->prev_max_seq = r.seq;
	if (!strcmp(t, "unmount")) {
		s->prev_clean = true;
	} else if (!strcmp(t, "void")) {	/* an operation that was skipped, never applied */
		rrecs_drop(s->ops, &s->nops, r.seq, r.try, false);
	} else if (!strcmp(t, "durable")) {
		/* Everything recorded before it is settled (and their intents). */
		if (r.seq > s->prev_durable)
			s->prev_durable = r.seq;
		for (size_t i = 0; i < s->nops; i++) {
			rrecs_drop(s->intents, &s->nintents, s->ops[i].seq, 0, true);
			rrec_free(&s->ops[i]);
		}
		s->nops = 0;
	} else if (!strcmp(t, "intent")) {
		snprintf(r.t, sizeof(r.t), "%s", t);
		r.path = dup_or_null(json_str(&o, "path"));
		rrecs_push(&s->intents, &s->nintents, &s->capintents, &r);
	} else if (strcmp(t, "intent") && strcmp(t, "recovered") && strcmp(t, "rescued") &&
		   strcmp(t, "skip")) {
		bool exch = false;
		snprintf(r.t, sizeof(r.t), "%s", t);
		r.path = dup_or_null(json_str(&o, "path"));
		r.to = dup_or_null(json_str(&o, "to"));
		r.xxh3 = dup_or_null(json_str(&o, "xxh3"));
		if (!strcmp(t, "symlink"))
			r.target = dup_or_null(json_str(&o, "target"));
		json_u64(&o, "size", &r.size);
		r.has_mode = json_u64(&o, "mode", &r.mode);
		r.exchange = json_bool(&o, "exchange", &exch) && exch;
		r.has_owner = json_u64(&o, "owner", &r.owner) && json_u64(&o, "group", &r.group);
		r.format = s->prev_format;
		rrecs_push(&s->ops, &s->nops, &s->capops, &r);
	}
out:
	json_free(&o);
	(void)off;
	return 0;
}

/* ---- the replay: what each path held ---------------------------------------- */

/* manifest_cb of the replay: every record that happened, in log order. */
static int replay_cb(void *arg, const char *p, size_t len, uint64_t off)
{
	struct rscan *s = arg;
	struct json_obj o;
	const char *t, *mid;
	uint64_t seq = 0, try = 0;
	bool exch = false;

	(void)off;
	if (json_parse(p, len, &o, NULL, 0) < 0)
		return 0;
	t = json_str(&o, "t");
	mid = json_str(&o, "m");
	json_u64(&o, "seq", &seq);
	json_u64(&o, "try", &try);
	if (t && !strcmp(t, "mount")) {
		s->replay_format = 1;	/* no "format": of format 1, as verify reads it */
		json_u64(&o, "format", &s->replay_format);
	} else if (t && !strcmp(t, "compacted")) {
		s->replay_format = 0;	/* a snapshot of versions of any mount */
	}
	if (t && mid && !rec_voided(s, mid, seq, try)) {
		struct rrec *r = s->matched < s->nops ? &s->ops[s->matched] : NULL;
		uint64_t size = 0;
		if (r && !strcmp(mid, s->prev) && r->seq == seq && r->try == try && !strcmp(r->t, t)) {
			s->prefix.settled = &s->hashes;
			rprefix_note(&s->prefix, r, s->matched);	/* not settled */
			s->matched++;
		} else if (!s->matched) {
			json_u64(&o, "size", &size);
			hashes_note(s, t, json_str(&o, "path"), json_str(&o, "to"),
				    json_str(&o, "xxh3"), size,
				    json_bool(&o, "exchange", &exch) && exch);
		}
	}
	json_free(&o);
	return 0;
}

/*
 * Replay the log: what each path held when the previous mount's unsettled
 * operations began (the settled records), then what each of those
 * operations left on every path it touches, prefix by prefix.
 */
static int replay_digests(struct manifest *m, struct rscan *s)
{
	struct manifest_scan scan;
	size_t k = 0;
	int r;

	/*
	 * The replay skips a record any "void" or cut of the whole log voids,
	 * wherever it stands; the scan dropped only what a later one voided.
	 * Only a damaged log repeats a voided attempt after its void: such an
	 * operation was never applied either, so drop it here too, and the
	 * operations left are a subsequence of the records the replay meets.
	 */
	for (size_t i = 0; i < s->nops; i++) {
		if (!rec_voided(s, s->prev, s->ops[i].seq, s->ops[i].try))
			s->ops[k++] = s->ops[i];
		else
			rrec_free(&s->ops[i]);
	}
	s->nops = k;
	r = manifest_scan_fd(m->fd, replay_cb, s, &scan);

	if (r == 0 && s->matched != s->nops) {
		ckpt_log(LOG_ERR, "recovery: met %zu of the %zu operations of mount %s again in "
			 "%s/manifest.log", s->matched, s->nops, s->prev, m->where);
		r = -EIO;
	}
	return r;
}

/*
 * Is what is at (dir, name), st, what r made, as it made it: the recorded
 * kind, and a directory still empty (as mkdir_found takes one over)?  The
 * parent may be a user's, who could have put any object of the daemon's
 * there since (another root directory, full of root's files): only what
 * the record made is given away.  A directory is judged and changed by
 * descriptor (*fd), so what was judged is what is given.
 */
static bool made_by(int dir, const char *name, const struct rrec *r, const struct stat *st,
		    int *fd)
{
	*fd = -1;
	if (!strcmp(r->t, "symlink"))
		return S_ISLNK(st->st_mode);
	if (!strcmp(r->t, "mknod"))
		return r->has_mode && (st->st_mode & S_IFMT) == (r->mode & S_IFMT) &&
		       !S_ISDIR(st->st_mode) && !S_ISREG(st->st_mode) && !S_ISLNK(st->st_mode);
	if (!S_ISDIR(st->st_mode))
		return false;
	struct stat now;
	*fd = bsys.openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
	if (*fd >= 0 && bsys.fstatat(*fd, "", &now) == 0 && now.st_ino == st->st_ino &&
	    now.st_dev == st->st_dev && now.st_uid == geteuid() && bsys_dir_empty(*fd))
		return true;
	if (*fd >= 0)
		bsys.close(*fd);
	*fd = -1;
	return false;
}

/*
 * The last operation applied may have been cut between its two steps: a
 * directory, symlink or node made by a root daemon exists, still the
 * daemon's, its chown to the user who made it not done.  Finish it, so the
 * backend holds the state after that operation, as recovery reports; only
 * while what is there is still the daemon's (bsys C5) and what the record
 * made (made_by).
 */
static void finish_creation(int root_fd, const struct rrec *r)
{
	char *dup, *slash;
	struct stat st;
	int dir = root_fd, fd = -1;

	if (!r->has_owner || !r->path ||
	    (strcmp(r->t, "mkdir") && strcmp(r->t, "symlink") && strcmp(r->t, "mknod")))
		return;
	dup = xstrdup(r->path);
	if ((slash = strrchr(dup, '/'))) {
		*slash = '\0';
		dir = bsys_open_beneath(root_fd, dup, O_RDONLY | O_DIRECTORY);
	}
	const char *name = slash ? slash + 1 : dup;
	bool unfinished = dir >= 0 && bsys.fstatat(dir, name, &st) == 0 && st.st_uid == geteuid() &&
			  (st.st_uid != r->owner || st.st_gid != r->group);
	if (unfinished && !made_by(dir, name, r, &st, &fd)) {
		ckpt_log(LOG_WARNING, "recovery: %s is not what its %s made (%s): not given to uid "
			 "%llu", r->path, r->t, S_ISDIR(st.st_mode) ? "a directory not empty, or "
			 "replaced" : "another kind of object", (unsigned long long)r->owner);
	} else if (unfinished) {
		int e;
		if (fd >= 0) {
			e = bsys.fchown(fd, (uid_t)r->owner, (gid_t)r->group);
		} else {
			bsys_owner_guard(geteuid());
			e = bsys.fchownat(dir, name, (uid_t)r->owner, (gid_t)r->group,
					  S_ISLNK(st.st_mode) ? BSYS_LINK : 0);
			bsys_owner_guard_off();
		}
		if (e < 0)
			ckpt_log(LOG_WARNING, "recovery: %s was made but not given to uid %llu, and "
				 "cannot be now: %s", r->path, (unsigned long long)r->owner,
				 strerror(-e));
		else
			ckpt_log(LOG_INFO, "recovery: %s was made but not yet given to its owner "
				 "(a stop between its %s and chown): given to uid %llu now", r->path,
				 r->t, (unsigned long long)r->owner);
	}
	if (fd >= 0)
		bsys.close(fd);
	if (slash && dir >= 0)
		bsys.close(dir);
	free(dup);
}

struct orphans {
	int dirfd;
	const char *needle;	/* ".<mount id>." */
	int depth;
	uint64_t removed;
};

static uint64_t remove_orphans(int dirfd, const char *needle, int depth);

/* One entry of a directory swept for a dead mount's temporary files. */
static int orphan_entry(void *arg, const char *name)
{
	struct orphans *o = arg;
	struct stat st;

	if (o->depth == 0 && !strcmp(name, ".ckptfs"))
		return 0;
	bool ours = !strncmp(name, ".ckptfs.", 8) && strstr(name, o->needle);
	if (ours && strncmp(name, ".ckptfs.d.", 10)) {
		if (bsys.unlinkat(o->dirfd, name, 0) == 0)
			o->removed++;
		return 0;
	}
	if (bsys.fstatat(o->dirfd, name, &st) == 0 && S_ISDIR(st.st_mode)) {
		int sub = bsys.openat(o->dirfd, name, O_RDONLY | O_DIRECTORY, 0);
		if (sub >= 0) {
			o->removed += remove_orphans(sub, o->needle, o->depth + 1);
			bsys.close(sub);
		}
		/*
		 * A staged directory (stage.c) held only the dead mount's own
		 * temporary files and staged directories, now removed; only the
		 * daemon's own is removed itself: one that is not was never a stage.
		 */
		if (ours && st.st_uid == geteuid() && bsys.unlinkat(o->dirfd, name, AT_REMOVEDIR) == 0)
			o->removed++;
	}
	return 0;
}

/* Remove temporary files of a mount (needle ".<id>.") below dirfd, recursively. */
static uint64_t remove_orphans(int dirfd, const char *needle, int depth)
{
	struct orphans o = { .dirfd = dirfd, .needle = needle, .depth = depth };

	if (depth <= 256)
		bsys.readdir(dirfd, orphan_entry, &o);
	return o.removed;
}

static int rrec_seq_cmp(const void *a, const void *b)
{
	const struct rrec *x = a, *y = b;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

int manifest_recover(struct manifest *m, int root_fd, struct rscan *s, struct recovery_report *rep)
{
	struct strbuf b = { 0 };
	size_t k;
	int r;

	rep->unclean = true;
	snprintf(rep->prev_mount_id, sizeof(rep->prev_mount_id), "%s", s->prev);
	rep->prev_seq_applied = s->prev_durable;
	rep->prev_seq_recorded = s->prev_max_seq;
	if ((r = replay_digests(m, s)) < 0) {
		fprintf(stderr, "ckptfs: cannot read %s/manifest.log again to recover mount %s: %s\n",
			m->where, s->prev, strerror(-r));
		return r;
	}
	k = rprefix_judge(&s->prefix, root_fd, s->nops, s->prev);
	if (k > 0)
		finish_creation(root_fd, &s->ops[k - 1]);
	for (size_t i = 0; i < k; i++) {
		if (s->ops[i].seq > rep->prev_seq_applied)
			rep->prev_seq_applied = s->ops[i].seq;
		rrecs_drop(s->intents, &s->nintents, s->ops[i].seq, 0, true);	/* it landed */
	}
	/*
	 * Void exactly the attempts that did not happen, then say so: readers
	 * (verify, compaction) take every other record at its word.
	 */
	for (size_t i = k; i < s->nops && r == 0; i++) {
		sb_printf(&b, "{\"t\": \"void\", \"m\": ");
		sb_json_str(&b, s->prev);
		sb_printf(&b, ", \"seq\": %llu, \"try\": %llu, \"why\": \"not applied when the mount "
			  "stopped\"}", (unsigned long long)s->ops[i].seq, (unsigned long long)s->ops[i].try);
		r = manifest_append(m, b.s, b.len);
		b.len = 0;
	}
	if (r == 0) {
		sb_printf(&b, "{\"t\": \"recovered\", \"m\": ");
		sb_json_str(&b, s->prev);
		sb_printf(&b, ", \"seq\": %llu, \"explicit\": true, \"applied\": %zu, \"voided\": %zu"
			  ", \"by\": ", (unsigned long long)rep->prev_seq_applied, k, s->nops - k);
		sb_json_str(&b, m->mount_id);
		sb_printf(&b, "}");
		r = manifest_append(m, b.s, b.len);
	}
	sb_free(&b);
	if (r < 0) {
		fprintf(stderr, "ckptfs: cannot record the recovery of mount %s in %s/manifest.log: %s\n",
			s->prev, m->where, strerror(-r));
		return r;
	}
	/* Each version in flight once, in sequence order. */
	if (s->nintents)
		qsort(s->intents, s->nintents, sizeof(*s->intents), rrec_seq_cmp);
	for (size_t i = 0; i < s->nintents; i++) {
		if (i && s->intents[i].seq == s->intents[i - 1].seq)
			continue;
		rep->inflight_files++;
		ckpt_log(LOG_WARNING, "in flight when the previous mount stopped, never persisted: %s "
			 "(operation %llu)", s->intents[i].path ? s->intents[i].path : "?",
			 (unsigned long long)s->intents[i].seq);
	}
	char needle[40];
	snprintf(needle, sizeof(needle), ".%s.", s->prev);
	rep->orphans_removed = remove_orphans(root_fd, needle, 0);
	ckpt_log(LOG_WARNING, "recovered from an unclean stop of mount %s: up to operation %llu "
		 "applied, %zu after them voided, %llu files in flight lost, %llu temporary files removed",
		 s->prev, (unsigned long long)rep->prev_seq_applied, s->nops - k,
		 (unsigned long long)rep->inflight_files, (unsigned long long)rep->orphans_removed);
	return 0;
}
