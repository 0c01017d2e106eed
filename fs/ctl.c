/*
 * ctl.c — the control directory MOUNT/.ckptfs: absent from the root's
 * listing, reachable by name (like ZFS's .zfs).  Its files:
 *
 *   stats  one JSON object (flat, "version": 1): cache fill, dirty, flushing
 *          and clean bytes, pending files, rates, sequence numbers,
 *          backpressure, backend errors and state, I/O engine, uptime;
 *   files  one JSON object per line for every file not yet durable;
 *   drain  reading blocks until everything written before the open is
 *          durable, then returns {"ok": ...}; writing "timeout=SECONDS"
 *          first bounds the wait;
 *   ctl    commands ("sync", "flush PATH"), writable only by root or the
 *          user who mounted; reading it back returns the last result.
 *
 * Contents are generated when the file is opened (drain: at the first read)
 * and served from the handle, so a reader sees one consistent snapshot.
 * Everything here only reads counters or takes fs->ns briefly; the write
 * path never sees it.
 */
#include "fs/fs.h"
#include "fs/session.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct fsnode *ctl_node(struct ckptfs *fs, struct fsnode *dir, const char *name,
			       mode_t mode, uint8_t kind)
{
	struct fsnode *n = node_new(fs, mode, geteuid(), getegid());
	n->ctl = kind;
	n->refs = 1;		/* permanent */
	if (dir)
		dent_add(fs, dir, name, n);
	return n;
}

void ctl_init(struct ckptfs *fs)
{
	struct fsnode *d = ctl_node(fs, NULL, NULL, S_IFDIR | 0555, CTL_DIR);

	d->loaded = true;
	fs->ctl_dir = d;
	ctl_node(fs, d, "stats", S_IFREG | 0444, CTL_STATS);
	ctl_node(fs, d, "files", S_IFREG | 0444, CTL_FILES);
	ctl_node(fs, d, "drain", S_IFREG | 0666, CTL_DRAIN);
	ctl_node(fs, d, "ctl", S_IFREG | 0600, CTL_CMD);
	pthread_mutex_init(&fs->rate_lock, NULL);
}

bool node_path(struct ckptfs *fs, struct fsnode *n, char *buf, size_t len)
{
	const char *parts[256];
	size_t k = 0, pos = 0;

	while (n != fs->root) {
		struct fsdent *d = node_first_dent(n);
		if (!d || k == CKPT_ARRAY_LEN(parts))
			return false;
		parts[k++] = d->name;
		n = d->parent;
	}
	buf[0] = '\0';
	while (k--) {
		int w = snprintf(buf + pos, len - pos, "%s%s", pos ? "/" : "", parts[k]);
		if (w < 0 || (size_t)w >= len - pos)
			return false;
		pos += (size_t)w;
	}
	return true;
}

static const char *node_state(struct fsnode *n)
{
	if (n->new_file || (n->cf && cfile_dirty(n->cf)))
		return "dirty";
	if (n->cf && cfile_state(n->cf) == CF_FLUSHING)
		return "flushing";
	return NULL;
}

/* Rates over the last second or more, refreshed by whoever reads stats. */
static void rates_update(struct ckptfs *fs, uint64_t absorbed, uint64_t persisted)
{
	uint64_t now = now_ns();

	pthread_mutex_lock(&fs->rate_lock);
	if (!fs->rate_ns) {
		fs->rate_ns = fs->started_ns;
	}
	uint64_t dt = now - fs->rate_ns;
	if (dt >= 1000000000ull) {
		fs->absorb_rate = (double)(absorbed - fs->rate_absorbed) * 1e9 / (double)dt;
		fs->persist_rate = (double)(persisted - fs->rate_persisted) * 1e9 / (double)dt;
		fs->rate_ns = now;
		fs->rate_absorbed = absorbed;
		fs->rate_persisted = persisted;
	}
	pthread_mutex_unlock(&fs->rate_lock);
}

static void stats_json(struct ckptfs *fs, struct strbuf *b)
{
	struct cache *c = &fs->cache;
	struct backend *be = &fs->be;
	const uint64_t cs = c->chunk_size, now = now_ns();
	uint64_t dirty = atomic_load(&c->st.dirty_bytes);
	uint64_t clean = atomic_load(&c->st.clean_bytes);
	uint64_t used = atomic_load(&c->st.used_bytes);
	uint64_t flushing = CKPT_MIN(atomic_load(&be->st.flushing_bytes), dirty);
	uint64_t absorbed = atomic_load(&c->st.absorbed_bytes);
	uint64_t persisted = atomic_load(&be->st.persisted_bytes);
	uint64_t files = 0, oldest = 0, ops_pending, seq;
	int last_err = atomic_load(&be->st.last_error);

	/* Files not yet durable (ns held by the caller). */
	for (struct list *e = fs->all_nodes.next; e != &fs->all_nodes; e = e->next) {
		struct fsnode *n = list_entry(e, struct fsnode, all);
		if (S_ISREG(n->mode) && !n->ctl && node_state(n))
			files++;
	}
	pthread_mutex_lock(&be->lock);
	seq = be->last_seq;
	ops_pending = seq - atomic_load(&be->durable_seq);
	if (!list_empty(&be->ops))
		oldest = now - list_entry(be->ops.next, struct op, link)->enqueued_ns;
	pthread_mutex_unlock(&be->lock);
	rates_update(fs, absorbed, persisted);

	sb_printf(b, "{\"version\": 1");
	sb_printf(b, ", \"mount\": ");
	sb_json_str(b, fs->opt.mountpoint_real);
	sb_printf(b, ", \"backend\": ");
	sb_json_str(b, fs->opt.backend_real);
	sb_printf(b, ", \"mount_id\": \"%s\", \"pid\": %d", be->mount_id, (int)getpid());
	sb_printf(b, ", \"uptime_s\": %.3f", (double)(now - fs->started_ns) / 1e9);
	sb_printf(b, ", \"io_engine\": \"%s\", \"io_fallback_reason\": ", bio_kind_name(be->io_in_use));
	sb_json_str(b, be->io_fallback_reason ? be->io_fallback_reason : "");
	sb_printf(b, ", \"fsync\": \"%s\"", fs->opt.fsync_lazy ? "lazy" : "durable");
	sb_printf(b, ", \"cache_capacity_bytes\": %llu, \"cache_chunk_bytes\": %llu",
		  (unsigned long long)c->size, (unsigned long long)cs);
	sb_printf(b, ", \"cache_used_bytes\": %llu, \"cache_dirty_bytes\": %llu"
		  ", \"cache_flushing_bytes\": %llu, \"cache_clean_bytes\": %llu"
		  ", \"cache_free_bytes\": %llu",
		  (unsigned long long)used, (unsigned long long)(dirty - flushing),
		  (unsigned long long)flushing, (unsigned long long)clean,
		  (unsigned long long)(c->size - CKPT_MIN(used, c->size)));
	sb_printf(b, ", \"files_pending\": %llu, \"versions_pending\": %llu"
		  ", \"ops_pending\": %llu, \"oldest_pending_age_s\": %.3f",
		  (unsigned long long)files, (unsigned long long)atomic_load(&be->st.pending_versions),
		  (unsigned long long)ops_pending, (double)oldest / 1e9);
	sb_printf(b, ", \"absorbed_bytes\": %llu, \"persisted_bytes\": %llu"
		  ", \"backend_written_bytes\": %llu, \"read_bytes\": %llu",
		  (unsigned long long)absorbed, (unsigned long long)persisted,
		  (unsigned long long)atomic_load(&be->st.written_bytes),
		  (unsigned long long)atomic_load(&fs->read_bytes));
	pthread_mutex_lock(&fs->rate_lock);
	sb_printf(b, ", \"absorb_rate_bps\": %.0f, \"persist_rate_bps\": %.0f",
		  fs->absorb_rate, fs->persist_rate);
	pthread_mutex_unlock(&fs->rate_lock);
	sb_printf(b, ", \"seq_current\": %llu, \"seq_durable\": %llu", (unsigned long long)seq,
		  (unsigned long long)atomic_load(&be->durable_seq));
	sb_printf(b, ", \"versions_published\": %llu, \"ops_applied\": %llu, \"dir_fsyncs\": %llu",
		  (unsigned long long)atomic_load(&be->st.versions_published),
		  (unsigned long long)atomic_load(&be->st.ops_applied),
		  (unsigned long long)atomic_load(&be->st.dir_fsyncs));
	sb_printf(b, ", \"backpressure_waits\": %llu, \"backpressure_wait_s\": %.3f",
		  (unsigned long long)atomic_load(&c->st.backpressure_waits),
		  (double)atomic_load(&c->st.backpressure_ns) / 1e9);
	sb_printf(b, ", \"spilled_bytes\": %llu, \"evictions\": %llu",
		  (unsigned long long)atomic_load(&c->st.spilled_bytes),
		  (unsigned long long)atomic_load(&c->st.evictions));
	sb_printf(b, ", \"backend_errors\": %llu, \"backend_retries\": %llu, \"degraded\": %s"
		  ", \"last_error\": ",
		  (unsigned long long)atomic_load(&be->st.errors),
		  (unsigned long long)atomic_load(&be->st.retries),
		  atomic_load(&be->st.degraded) ? "true" : "false");
	sb_json_str(b, last_err ? strerror(last_err) : "");
	const struct recovery_report *rr = &be->recovery;
	sb_printf(b, ", \"manifest\": %s, \"recovered_unclean\": %s, \"recovered_inflight_files\": %llu"
		  ", \"recovered_orphans_removed\": %llu, \"recovered_torn_bytes\": %llu"
		  ", \"recovered_corrupt_records\": %llu",
		  fs->opt.manifest ? "true" : "false", rr->unclean ? "true" : "false",
		  (unsigned long long)rr->inflight_files, (unsigned long long)rr->orphans_removed,
		  (unsigned long long)rr->torn_bytes, (unsigned long long)rr->corrupt_records);
	session_stats_json(fs, b);
	sb_printf(b, "}\n");
}

static void files_json(struct ckptfs *fs, struct strbuf *b)
{
	const uint64_t now = now_ns();
	char path[4096];

	for (struct list *e = fs->all_nodes.next; e != &fs->all_nodes; e = e->next) {
		struct fsnode *n = list_entry(e, struct fsnode, all);
		const char *st;
		if (!S_ISREG(n->mode) || n->ctl || !(st = node_state(n)))
			continue;
		if (!node_path(fs, n, path, sizeof(path)))
			continue;	/* unlinked while open: nothing will be published */
		pthread_mutex_lock(&n->alock);
		uint64_t since = st[0] == 'd' ? n->dirty_ns : n->sealed_ns;
		pthread_mutex_unlock(&n->alock);
		sb_printf(b, "{\"path\": ");
		sb_json_str(b, path);
		sb_printf(b, ", \"size\": %llu, \"state\": \"%s\", \"age_s\": %.3f}\n",
			  (unsigned long long)(n->cf ? cfile_size(n->cf) : n->loaded_size), st,
			  since ? (double)(now - since) / 1e9 : 0.0);
	}
}

/* Find a node by a path relative to the mount root (ns held). */
static struct fsnode *lookup_path(struct ckptfs *fs, const char *path)
{
	struct fsnode *n = fs->root;
	char *dup = xstrdup(path), *save = NULL, *tok;

	for (tok = strtok_r(dup, "/", &save); tok && n; tok = strtok_r(NULL, "/", &save)) {
		struct fsdent *d;
		if (!S_ISDIR(n->mode) || dir_load(fs, n) < 0 || !(d = dent_find(fs, n, tok)))
			n = NULL;
		else
			n = d->node;
	}
	free(dup);
	return n;
}

static bool ctl_permitted(struct ckptfs *fs, fuse_req_t req)
{
	uid_t uid = fuse_req_ctx(req)->uid;
	return uid == 0 || uid == geteuid();
}

int ctl_open(struct ckptfs *fs, fuse_req_t req, struct fshandle *h)
{
	int err = 0;

	switch (h->node->ctl) {
	case CTL_STATS:
		stats_json(fs, &h->out);
		return 0;
	case CTL_FILES:
		files_json(fs, &h->out);
		return 0;
	case CTL_DRAIN:
		h->drain_seq = seal_all_locked(fs, &err);
		return err;
	case CTL_CMD:
		if (h->writable && !ctl_permitted(fs, req))
			return -EACCES;
		sb_printf(&h->out, "commands: sync | flush PATH\n");
		return 0;
	default:
		return -EISDIR;
	}
}

static void reply_slice(fuse_req_t req, struct strbuf *b, size_t size, off_t off)
{
	if (off < 0 || (size_t)off >= b->len) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	/* Reply from a copy: the handle may be released as soon as the data is out. */
	size_t n = CKPT_MIN(size, b->len - (size_t)off);
	char *copy = xmalloc(n);
	memcpy(copy, b->s + off, n);
	fuse_reply_buf(req, copy, n);
	free(copy);
}

void ctl_read(struct ckptfs *fs, fuse_req_t req, struct fshandle *h, size_t size, off_t off)
{
	if (h->node->ctl == CTL_DRAIN && !h->done) {
		uint64_t t0 = now_ns();
		int r = backend_wait(&fs->be, h->drain_seq, h->timeout_ns);
		h->done = true;
		h->out.len = 0;
		sb_printf(&h->out, "{\"ok\": %s, \"seq\": %llu, \"seq_durable\": %llu, \"waited_s\": %.3f",
			  r == 0 ? "true" : "false", (unsigned long long)h->drain_seq,
			  (unsigned long long)backend_durable_seq(&fs->be),
			  (double)(now_ns() - t0) / 1e9);
		if (r < 0) {
			sb_printf(&h->out, ", \"error\": ");
			sb_json_str(&h->out, r == -ETIMEDOUT ? "timed out" : strerror(-r));
		}
		sb_printf(&h->out, "}\n");
	}
	reply_slice(req, &h->out, size, off);
}

/* Run one command line from the ctl file; the result replaces h->out. */
static void ctl_command(struct ckptfs *fs, struct fshandle *h, char *line)
{
	char *arg = strchr(line, ' ');
	int err = 0;

	if (arg)
		*arg++ = '\0';
	h->out.len = 0;
	pthread_mutex_lock(&fs->ns);
	if (!strcmp(line, "sync")) {
		uint64_t seq = seal_all_locked(fs, &err);
		sb_printf(&h->out, "{\"ok\": %s, \"seq\": %llu}\n", err ? "false" : "true",
			  (unsigned long long)seq);
	} else if (!strcmp(line, "flush") && arg && *arg) {
		struct fsnode *n = lookup_path(fs, arg);
		if (!n || !S_ISREG(n->mode) || n->ctl) {
			sb_printf(&h->out, "{\"ok\": false, \"error\": \"not a regular file in the mount\"}\n");
		} else {
			uint64_t before = backend_durable_seq(&fs->be);
			if (node_needs_seal(n))
				err = seal_locked(fs, n);
			uint64_t seq = backend_last_seq(&fs->be);
			/* Order is kept: the file becomes durable after everything before it. */
			sb_printf(&h->out, "{\"ok\": %s, \"seq\": %llu, \"ahead\": %llu}\n",
				  err ? "false" : "true", (unsigned long long)seq,
				  (unsigned long long)(seq > before ? seq - before - 1 : 0));
			h->drain_seq = seq;
		}
	} else {
		sb_printf(&h->out, "{\"ok\": false, \"error\": \"unknown command; try: sync | flush PATH\"}\n");
	}
	pthread_mutex_unlock(&fs->ns);
}

void ctl_write(struct ckptfs *fs, fuse_req_t req, struct fshandle *h, const char *buf,
	       size_t len, off_t off)
{
	char line[4096];
	size_t n = CKPT_MIN(len, sizeof(line) - 1);

	memcpy(line, buf, n);
	line[n] = '\0';
	line[strcspn(line, "\n")] = '\0';
	if (h->node->ctl == CTL_DRAIN) {
		char *v = strncmp(line, "timeout=", 8) == 0 ? line + 8 : line, *end;
		double t = strtod(v, &end);
		if (end == v || t < 0) {
			fuse_reply_err(req, EINVAL);
			return;
		}
		h->timeout_ns = (uint64_t)(t * 1e9);
		if (!h->timeout_ns)
			h->timeout_ns = 1;	/* "timeout=0": do not wait at all */
	} else if (h->node->ctl == CTL_CMD) {
		ctl_command(fs, h, line);
	} else {
		fuse_reply_err(req, EBADF);
		return;
	}
	fuse_reply_write(req, len);
}
