/*
 * ctl.c — the control directory MOUNT/.ckptfs: absent from the root's
 * listing, reachable by name (like ZFS's .zfs).  Its files:
 *
 *   stats  one JSON object (flat, "version": 1): cache fill, dirty, flushing
 *          and clean bytes, pending files, rates, sequence numbers,
 *          backpressure, backend errors and state, I/O engine, uptime;
 *   files  one JSON object per line for every file not yet durable — to
 *          an unprivileged reader, only that user's files;
 *   drain  the first read answers once everything closed before the open is
 *          durable ({"ok": ...}; files still open for writing are left out
 *          and counted); writing "timeout=SECONDS" first bounds the wait;
 *          without one it fails after drain_timeout seconds in which the
 *          backend made no progress.  Root and the mount's owner wait for
 *          everyone's operations, other users for their own;
 *   ctl    commands: sync, flush PATH, retry, skip SEQ, ack-lost — writable only by
 *          root or the user who mounted; reading back returns the result.
 *          What a write to ctl or drain may say is parsed by ctl_parse.c.
 *
 * Permissions: stats is world-readable (counters and the blocked operation,
 * whose path it names); files shows a user their own files; drain answers
 * asynchronously — no FUSE worker waits — and each user may have at most
 * DRAIN_MAX_PER_USER drains waiting; ctl is the owner's (docs/security.md).
 *
 * Contents are generated when the file is opened (drain: at the first read)
 * and served from the handle, so a reader sees one consistent snapshot.
 * Everything here only reads counters or takes fs->ns briefly; the write
 * path never sees it.
 */
#include "fs/bcall.h"
#include "fs/fs.h"
#include "backend/marker.h"
#include "fs/ctl_parse.h"
#include "cache/log.h"
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
	pthread_mutex_init(&fs->drain_lock, NULL);
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

/* A file's state for the listing, or NULL once it is durable (ns held). */
static const char *node_state(struct ckptfs *fs, struct fsnode *n)
{
	const char *st = node_state_name(fs, n);
	return strcmp(st, "durable") ? st : NULL;
}

/* May this caller see and act on everything (root, or the mount's owner)? */
static bool ctl_privileged(fuse_req_t req)
{
	uid_t uid = fuse_req_ctx(req)->uid;
	return uid == 0 || uid == geteuid();
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

static void nodes_json(struct ckptfs *fs, struct strbuf *b);

static void stats_json(struct ckptfs *fs, struct strbuf *b)
{
	struct cache *c = &fs->cache;
	struct backend *be = &fs->be;
	const uint64_t cs = c->chunk_size, now = now_ns();
	uint64_t dirty = atomic_load(&c->st.dirty_bytes);
	uint64_t clean = atomic_load(&c->st.clean_bytes);
	/* the request loop's spares are free memory set aside, not held for a file */
	uint64_t spare = fs_loop_spare_bytes();
	uint64_t used = atomic_load(&c->st.used_bytes);

	used -= CKPT_MIN(used, spare);
	uint64_t flushing = CKPT_MIN(atomic_load(&be->st.flushing_bytes), dirty);
	uint64_t absorbed = atomic_load(&c->st.absorbed_bytes);
	uint64_t persisted = atomic_load(&be->st.persisted_bytes);
	uint64_t files = 0, oldest = 0, ops_pending, seq;
	int last_err = atomic_load(&be->st.last_error);

	uint64_t open_writing = 0;
	struct backend_blocked bl;
	char blocked[700] = "";

	/* Files not yet durable (ns held by the caller). */
	for (struct list *e = fs->all_nodes.next; e != &fs->all_nodes; e = e->next) {
		struct fsnode *n = list_entry(e, struct fsnode, all);
		if (S_ISREG(n->mode) && !n->ctl && node_state(fs, n)) {
			files++;
			open_writing += node_open_for_writing(n);
		}
	}
	unsigned nblocked = backend_blocked(be, &bl, 1);
	if (nblocked)
		backend_blocked_describe(&bl, blocked, sizeof(blocked));
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
	uint64_t ready_ns = atomic_load(&c->pf.ready_ns);
	sb_printf(b, ", \"cache_ready_bytes\": %llu, \"cache_ready_s\": %.3f"
		  ", \"cache_prefault_inline_chunks\": %llu",
		  (unsigned long long)cache_ready_bytes(c),
		  ready_ns ? (double)(ready_ns - c->pf.start_ns) / 1e9 : -1.0,
		  (unsigned long long)atomic_load(&c->pf.inline_chunks));
	sb_printf(b, ", \"cache_used_bytes\": %llu, \"cache_dirty_bytes\": %llu"
		  ", \"cache_flushing_bytes\": %llu, \"cache_clean_bytes\": %llu"
		  ", \"cache_free_bytes\": %llu, \"cache_spare_bytes\": %llu",
		  (unsigned long long)used, (unsigned long long)(dirty - flushing),
		  (unsigned long long)flushing, (unsigned long long)clean,
		  (unsigned long long)(c->size - CKPT_MIN(used, c->size)), (unsigned long long)spare);
	sb_printf(b, ", \"files_pending\": %llu, \"versions_pending\": %llu"
		  ", \"ops_pending\": %llu, \"oldest_pending_age_s\": %.3f",
		  (unsigned long long)files, (unsigned long long)atomic_load(&be->st.pending_versions),
		  (unsigned long long)ops_pending, (double)oldest / 1e9);
	uint64_t ab_durable = atomic_load(&c->st.absorbed_durable_bytes);
	uint64_t ab_dropped = atomic_load(&c->st.absorbed_dropped_bytes);
	sb_printf(b, ", \"absorbed_durable_bytes\": %llu, \"absorbed_dropped_bytes\": %llu"
		  ", \"absorbed_pending_bytes\": %llu",
		  (unsigned long long)ab_durable, (unsigned long long)ab_dropped,
		  (unsigned long long)(absorbed - CKPT_MIN(absorbed, ab_durable + ab_dropped)));
	sb_printf(b, ", \"absorbed_bytes\": %llu, \"persisted_bytes\": %llu"
		  ", \"backend_written_bytes\": %llu, \"backend_copied_bytes\": %llu"
		  ", \"backend_hashed_bytes\": %llu, \"backend_extent_walks\": %llu"
		  ", \"backend_base_changed\": %llu, \"base_copy\": %s, \"read_bytes\": %llu"
		  ", \"backend_max_file_bytes\": %llu",
		  (unsigned long long)absorbed, (unsigned long long)persisted,
		  (unsigned long long)atomic_load(&be->st.written_bytes),
		  (unsigned long long)atomic_load(&be->st.copied_bytes),
		  (unsigned long long)atomic_load(&be->st.hashed_bytes),
		  (unsigned long long)atomic_load(&be->st.extent_walks),
		  (unsigned long long)atomic_load(&be->st.base_changed),
		  be->base_copy ? "true" : "false",
		  (unsigned long long)atomic_load(&fs->read_bytes),
		  (unsigned long long)fs->max_file_size);
	pthread_mutex_lock(&fs->rate_lock);
	sb_printf(b, ", \"absorb_rate_bps\": %.0f, \"persist_rate_bps\": %.0f",
		  fs->absorb_rate, fs->persist_rate);
	pthread_mutex_unlock(&fs->rate_lock);
	static const char *const loops[] = { "readv", "splice", "libfuse" };
	sb_printf(b, ", \"fuse_requests\": %llu, \"fuse_max_write\": %u, \"fuse_loop\": \"%s\""
		  ", \"fuse_adopted_bytes\": %llu",
		  (unsigned long long)fs_loop_requests(), fs->max_write,
		  loops[fs->own_loop ? fs->opt.loop : LOOP_LIBFUSE],
		  (unsigned long long)fs_loop_adopted_bytes());
	fsu_describe(b);
	sb_printf(b, ", \"passthrough\": %s, \"passthrough_opens\": %llu"
		  ", \"passthrough_direct_opens\": %llu, \"passthrough_failures\": %llu"
		  ", \"passthrough_from_cache\": %llu, \"passthrough_renewed\": %llu"
		  ", \"read_direct\": %s, \"read_direct_opens\": %llu",
		  devio_passthrough() ? "true" : "false",
		  (unsigned long long)atomic_load(&fs->pt_opens),
		  (unsigned long long)atomic_load(&fs->pt_direct_opens),
		  (unsigned long long)atomic_load(&fs->pt_failures),
		  (unsigned long long)atomic_load(&fs->pt_from_cache),
		  (unsigned long long)atomic_load(&fs->pt_renewed),
		  fs_read_direct(fs) ? "true" : "false",
		  (unsigned long long)atomic_load(&fs->rd_opens));
	sb_printf(b, ", \"seq_current\": %llu, \"seq_durable\": %llu", (unsigned long long)seq,
		  (unsigned long long)atomic_load(&be->durable_seq));
	sb_printf(b, ", \"versions_published\": %llu, \"ops_applied\": %llu, \"dir_fsyncs\": %llu",
		  (unsigned long long)atomic_load(&be->st.versions_published),
		  (unsigned long long)atomic_load(&be->st.ops_applied),
		  (unsigned long long)atomic_load(&be->st.dir_fsyncs));
	sb_printf(b, ", \"xattr_fsyncs\": %llu, \"xattrs_dropped\": %llu",
		  (unsigned long long)atomic_load(&be->st.xattr_fsyncs),
		  (unsigned long long)atomic_load(&be->st.xattrs_dropped));
	sb_printf(b, ", \"manifest_syncs\": %llu", (unsigned long long)manifest_syncs(&be->man));
	sb_printf(b, ", \"manifest_rewrites\": %llu",
		  (unsigned long long)manifest_rewrites(&be->man));
	sb_printf(b, ", \"publisher_passes\": %llu", (unsigned long long)atomic_load(&be->st.passes));
	uint64_t calls, calls_timed_out;
	unsigned calls_stuck;
	bcall_stats(fs, &calls, &calls_timed_out, &calls_stuck);
	sb_printf(b, ", \"backend_calls\": %llu, \"backend_calls_timed_out\": %llu, "
		  "\"backend_calls_stuck\": %u", (unsigned long long)calls,
		  (unsigned long long)calls_timed_out, calls_stuck);
	pthread_mutex_lock(&be->dfd_lock);
	unsigned dfds = be->dfd_open;
	pthread_mutex_unlock(&be->dfd_lock);
	sb_printf(b, ", \"dir_fds_open\": %u, \"dir_fds_cap\": %u, \"dir_fd_closes\": %llu, "
		  "\"dirs_staged\": %llu", dfds, be->dfd_cap,
		  (unsigned long long)atomic_load(&be->st.dir_fd_closes),
		  (unsigned long long)atomic_load(&be->st.dirs_staged));
	sb_printf(b, ", \"temp_fds_open\": %u, \"temp_fds_cap\": %u", atomic_load(&be->temp_open),
		  be->temp_cap);
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
		  atomic_load(&be->st.degraded) || nblocked ? "true" : "false");
	sb_json_str(b, nblocked ? strerror(-bl.err) : last_err ? strerror(last_err) : "");
	sb_printf(b, ", \"backend_state\": \"%s\", \"blocked_ops\": %u, \"blocked\": ",
		  nblocked ? "blocked" : atomic_load(&be->st.degraded) ? "degraded" : "ok", nblocked);
	sb_json_str(b, blocked);
	sb_printf(b, ", \"blocked_attempts\": %u", nblocked ? bl.attempts : 0u);
	sb_printf(b, ", \"blocked_seq\": %llu, \"blocked_uid\": %ld, \"blocked_for_s\": %.3f"
		  ", \"blocked_behind\": %u, \"files_open_for_writing\": %llu",
		  nblocked ? (unsigned long long)bl.seq : 0ull, nblocked ? (long)bl.actor : -1l,
		  nblocked ? (double)(now - bl.since_ns) / 1e9 : 0.0, nblocked ? bl.behind : 0u,
		  (unsigned long long)open_writing);
	const struct recovery_report *rr = &be->recovery;
	sb_printf(b, ", \"manifest\": %s, \"recovered_unclean\": %s, \"recovered_inflight_files\": %llu"
		  ", \"recovered_orphans_removed\": %llu, \"recovered_torn_bytes\": %llu"
		  ", \"recovered_corrupt_records\": %llu",
		  fs->opt.manifest ? "true" : "false", rr->unclean ? "true" : "false",
		  (unsigned long long)rr->inflight_files, (unsigned long long)rr->orphans_removed,
		  (unsigned long long)rr->torn_bytes, (unsigned long long)rr->corrupt_records);
	session_stats_json(fs, b);
	nodes_json(fs, b);
	sb_printf(b, "}\n");
}

/* This node among its peers, and the marker it holds for them (backend/nodes.h). */
static void nodes_json(struct ckptfs *fs, struct strbuf *b)
{
	struct nodes *nd = fs->be.nodes;
	struct held_marker h;
	unsigned nheld = 0, known;
	char behind[NODE_NAME_MAX + 1], pats[1024];
	double behind_s;
	uint64_t wall = wall_ns(), wm = atomic_load(&nd->wm_before_ns);
	int wm_err = atomic_load(&nd->wm_err);

	sb_printf(b, ", \"node\": ");
	sb_json_str(b, nd->node);
	sb_printf(b, ", \"node_job\": ");	/* job=: "" none */
	sb_json_str(b, nd->opt.job);
	int lease_err = atomic_load(&nd->lease_err);
	sb_printf(b, ", \"lease\": \"%s\", \"node_flock\": %s, \"lease_error\": ",
		  atomic_load(&nd->lease_lost) ? "lost" : "held", nd->flock_ok ? "true" : "false");
	sb_json_str(b, lease_err ? strerror(-lease_err) : "");
	sb_printf(b, ", \"watermark_age_s\": %.3f, \"watermark_seq\": %llu, \"watermark_writes\": %llu"
		  ", \"watermark_error\": ", wm && wall > wm ? (double)(wall - wm) / 1e9 : 0.0,
		  (unsigned long long)atomic_load(&nd->wm_seq),
		  (unsigned long long)atomic_load(&nd->wm_writes));
	sb_json_str(b, wm_err ? strerror(-wm_err) : "");
	sb_printf(b, ", \"clock_maxerror_s\": %.6f, \"clock_synced\": %s",
		  (double)atomic_load(&nd->maxerror_ns) / 1e9, atomic_load(&nd->synced) ? "true" : "false");
	struct wm_record g;
	nodes_gap_report(nd, &g);	/* N5: open until `ckptfs-ctl ack-lost` */
	sb_printf(b, ", \"lost_window\": \"%s\", \"lost_window_mount\": ",
		  !g.gap_mount[0] ? "" : g.gap_open ? "open" : "closed");
	sb_json_str(b, g.gap_mount);
	sb_printf(b, ", \"lost_window_files\": %llu", (unsigned long long)g.lost_files);
	uint32_t uids[NODES_WM_UIDS_MAX];
	bool all;
	unsigned nuids = nodes_blocked_report(nd, uids, &all);	/* N3: as the record lists them */
	sb_printf(b, ", \"node_blocked_uids\": \"");
	for (unsigned i = 0; i < nuids; i++)
		sb_printf(b, "%s%u", i ? "," : "", (unsigned)uids[i]);
	sb_printf(b, "\", \"node_blocked_uids_all\": %s", all ? "true" : "false");
	nodes_peer_summary(nd, &known, behind, sizeof(behind), &behind_s);
	sb_printf(b, ", \"peers\": %u, \"peers_known\": %u, \"peer_behind\": ",
		  nd->opt.npeer_names ? nd->opt.npeer_names
		  : nd->opt.peers_count > 1 ? nd->opt.peers_count - 1 : 0, known);
	sb_json_str(b, behind);
	sb_printf(b, ", \"peer_behind_s\": %.3f, \"markers\": ", behind_s);
	marker_describe(pats, sizeof(pats));
	sb_json_str(b, pats);
	bool held = nodes_held_report(nd, &h, &nheld);
	sb_printf(b, ", \"markers_held\": %u, \"marker_held\": ", nheld);
	sb_json_str(b, held ? h.path : "");
	sb_printf(b, ", \"marker_held_seq\": %llu, \"marker_held_for\": ",
		  held ? (unsigned long long)h.seq : 0ull);
	sb_json_str(b, held ? h.waiting : "");
	sb_printf(b, ", \"marker_held_reason\": ");
	sb_json_str(b, held ? h.reason : "");
	sb_printf(b, ", \"marker_held_since_s\": %.3f, \"marker_held_since_wall\": %.3f"
		  ", \"markers_held_total\": %llu, \"markers_released_by_policy\": %llu"
		  ", \"marker_wait_last_s\": %.3f, \"peer_reads\": %llu",
		  held ? (double)(now_ns() - h.since_ns) / 1e9 : 0.0,
		  held ? (double)h.since_wall_ns / 1e9 : 0.0,
		  (unsigned long long)atomic_load(&nd->markers_held_total),
		  (unsigned long long)atomic_load(&nd->markers_released_by_policy),
		  (double)atomic_load(&nd->marker_wait_ns_last) / 1e9,
		  (unsigned long long)atomic_load(&nd->peer_reads));
}

/* Pending files; `only` >= 0: just those owned or being written by that uid. */
static void files_json(struct ckptfs *fs, struct strbuf *b, long only)
{
	const uint64_t now = now_ns();
	char path[4096];

	for (struct list *e = fs->all_nodes.next; e != &fs->all_nodes; e = e->next) {
		struct fsnode *n = list_entry(e, struct fsnode, all);
		const char *st;
		if (!S_ISREG(n->mode) || n->ctl || !(st = node_state(fs, n)))
			continue;
		if (only >= 0 && (uid_t)only != n->uid && (uid_t)only != n->writer_uid &&
		    (uid_t)only != n->seal_actor)
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
		struct fsdent *d = NULL;
		/* dir_load may drop fs->ns: n is held meanwhile, and d looked up after. */
		node_ref(n);
		if (S_ISDIR(n->mode) && dir_load(fs, n) >= 0)
			d = dent_find(fs, n, tok);
		struct fsnode *next = d ? d->node : NULL;
		node_unref(fs, n);
		n = next;
	}
	free(dup);
	return n;
}

#define DRAIN_MAX_PER_USER 8

/* Count a user's waiting drains: false if they have too many already. */
static bool drain_count(struct ckptfs *fs, uid_t uid, int delta)
{
	bool ok = true;
	unsigned i;

	pthread_mutex_lock(&fs->drain_lock);
	for (i = 0; i < fs->ndrainers && fs->drainers[i].uid != uid; i++)
		;
	if (i == fs->ndrainers) {
		if (delta < 0 || i == CKPT_ARRAY_LEN(fs->drainers)) {
			pthread_mutex_unlock(&fs->drain_lock);
			return delta < 0;
		}
		fs->drainers[fs->ndrainers++] = (struct drainer){ .uid = uid };
	}
	if (delta > 0 && fs->drainers[i].n >= DRAIN_MAX_PER_USER)
		ok = false;
	else
		fs->drainers[i].n += delta;
	if (!fs->drainers[i].n)
		fs->drainers[i] = fs->drainers[--fs->ndrainers];
	pthread_mutex_unlock(&fs->drain_lock);
	return ok;
}

int ctl_open(struct ckptfs *fs, fuse_req_t req, struct fshandle *h)
{
	struct seal_report rep;

	switch (h->node->ctl) {
	case CTL_STATS:
		stats_json(fs, &h->out);
		return 0;
	case CTL_FILES:
		files_json(fs, &h->out, ctl_privileged(req) ? -1 : (long)fuse_req_ctx(req)->uid);
		return 0;
	case CTL_DRAIN:
		h->drain_seq = seal_all_locked(fs, &rep);
		h->open_files = rep.open_files;
		h->drain_all = ctl_privileged(req);
		return rep.err;
	case CTL_CMD:
		if (h->writable && !ctl_privileged(req))
			return -EACCES;
		sb_printf(&h->out, "commands: sync | flush PATH | retry | skip SEQ | ack-lost\n");
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

/* A drain read waiting for the publisher: no FUSE worker waits with it. */
struct drain_wait {
	struct pub_waiter w;
	struct ckptfs *fs;
	fuse_req_t req;
	struct fshandle *h;
	size_t size;
	off_t off;
	uint64_t t0;
	uint64_t progress;	/* the backend's progress when the deadline was set */
};

static bool drain_cancelled(struct pub_waiter *w)
{
	return fuse_req_interrupted(CKPT_CONTAINER_OF(w, struct drain_wait, w)->req);
}

static void drain_finish(struct drain_wait *dw, int r)
{
	struct ckptfs *fs = dw->fs;
	struct fshandle *h = dw->h;
	struct strbuf *o = &h->out;

	o->len = 0;
	sb_printf(o, "{\"ok\": %s, \"seq\": %llu, \"seq_durable\": %llu, \"waited_s\": %.3f"
		  ", \"open_for_writing\": %u", r == 0 ? "true" : "false",
		  (unsigned long long)h->drain_seq, (unsigned long long)backend_durable_seq(&fs->be),
		  (double)(now_ns() - dw->t0) / 1e9, h->open_files);
	if (r < 0) {
		struct backend_blocked bl[16];
		char line[700];
		unsigned n = CKPT_MIN(backend_blocked(&fs->be, bl, 16), 16u), k = 0;
		/* The operation that holds this drain back: the caller's own, if any. */
		for (unsigned i = 0; i < n && !h->drain_all; i++)
			if (bl[i].actor == h->uid) {
				k = i;
				break;
			}
		sb_printf(o, ", \"error\": ");
		if (r == -ETIMEDOUT && h->timeout_ns) {
			sb_json_str(o, "timed out");
		} else if (r == -ETIMEDOUT) {
			snprintf(line, sizeof(line), "the backend made no progress for %.0f s",
				 fs->opt.drain_timeout);
			sb_json_str(o, line);
		} else if (r == -EINTR) {
			sb_json_str(o, "interrupted");
		} else if (n && r != -ETIMEDOUT) {
			char desc[600];
			backend_blocked_describe(&bl[k], desc, sizeof(desc));
			snprintf(line, sizeof(line), "blocked at %s", desc);
			sb_json_str(o, line);
			sb_printf(o, ", \"blocked_seq\": %llu", (unsigned long long)bl[k].seq);
		} else {
			sb_json_str(o, strerror(-r));
		}
	}
	sb_printf(o, "}\n");
	h->done = true;
	h->waiting = false;
	uid_t uid = h->uid;	/* h may be released as soon as the reply is out */
	if (r == -EINTR)
		fuse_reply_err(dw->req, EINTR);
	else
		reply_slice(dw->req, o, dw->size, dw->off);
	drain_count(fs, uid, -1);
	free(dw);
}

static void drain_done(struct pub_waiter *w, int err)
{
	struct drain_wait *dw = CKPT_CONTAINER_OF(w, struct drain_wait, w);
	struct backend *be = &dw->fs->be;

	if (err == -ETIMEDOUT && !dw->h->timeout_ns &&
	    backend_wait_rearm(be, w, &dw->progress, dw->fs->opt.drain_timeout))
		return;
	drain_finish(dw, err);
}

void ctl_read(struct ckptfs *fs, fuse_req_t req, struct fshandle *h, size_t size, off_t off)
{
	if (h->node->ctl != CTL_DRAIN || h->done) {
		reply_slice(req, &h->out, size, off);
		return;
	}
	if (h->waiting || !drain_count(fs, h->uid, 1)) {
		fuse_reply_err(req, EBUSY);	/* too many drains of this user wait already */
		return;
	}
	struct drain_wait *dw = xcalloc(1, sizeof(*dw));
	h->waiting = true;
	dw->fs = fs;
	dw->req = req;
	dw->h = h;
	dw->size = size;
	dw->off = off;
	dw->t0 = now_ns();
	dw->progress = backend_progress(&fs->be);
	dw->w.seq = h->drain_seq;
	dw->w.any_actor = h->drain_all;
	dw->w.actor = h->uid;
	dw->w.done = drain_done;
	dw->w.cancelled = drain_cancelled;
	if (h->timeout_ns)
		dw->w.deadline_ns = dw->t0 + h->timeout_ns;
	else if (fs->opt.drain_timeout > 0)
		dw->w.deadline_ns = dw->t0 + (uint64_t)(fs->opt.drain_timeout * 1e9);
	backend_wait_async(&fs->be, &dw->w);
}

/*
 * ack-lost: the administrator acknowledges the files this node lost in an
 * unclean stop (backend/nodes.h N5); answered once the record says so.
 */
static void ctl_ack_lost(struct ckptfs *fs, struct fshandle *h)
{
	struct wm_record g;
	int r = nodes_ack_lost(fs->be.nodes, &g);

	if (r < 0) {
		char e[200] = "no window is open: this node lost no files in an unclean stop, or "
			      "they were acknowledged already";
		if (r != -ENOENT)
			snprintf(e, sizeof(e), "the watermark record could not be written (%s): the "
				 "window stays open", strerror(-r));
		sb_printf(&h->out, "{\"ok\": false, \"error\": ");
		sb_json_str(&h->out, e);
		sb_printf(&h->out, "}\n");
		return;
	}
	sb_printf(&h->out, "{\"ok\": true, \"node\": ");
	sb_json_str(&h->out, fs->be.nodes->node);
	sb_printf(&h->out, ", \"lost_mount\": ");
	sb_json_str(&h->out, g.gap_mount);
	sb_printf(&h->out, ", \"lost_files\": %llu, \"window_from_ns\": %llu, \"window_to_ns\": %llu}\n",
		  (unsigned long long)g.lost_files, (unsigned long long)g.gap_from_ns,
		  (unsigned long long)g.gap_to_ns);
}

/* Run one parsed command from the ctl file (NULL: perr says why not); the result replaces h->out. */
static void ctl_command(struct ckptfs *fs, struct fshandle *h, const struct ctl_cmd *cmd,
			const char *perr)
{
	struct seal_report rep;

	h->out.len = 0;
	if (!cmd || cmd->kind == CTL_CMD_TIMEOUT) {
		sb_printf(&h->out, "{\"ok\": false, \"error\": ");
		sb_json_str(&h->out, cmd ? "timeout= is for the drain file" : perr);
		sb_printf(&h->out, "}\n");
		return;
	}
	if (cmd->kind == CTL_CMD_RETRY) {
		struct backend_blocked bl;
		unsigned n = backend_blocked(&fs->be, &bl, 1);
		backend_retry(&fs->be);
		log_info("retry of %u blocked operations requested through the control file", n);
		sb_printf(&h->out, "{\"ok\": true, \"retrying\": %u, \"blocked_seq\": %llu, "
			  "\"blocked_attempts\": %u}\n", n, n ? (unsigned long long)bl.seq : 0ull,
			  n ? bl.attempts : 0u);
		return;
	}
	if (cmd->kind == CTL_CMD_SKIP) {
		unsigned long long seq = (unsigned long long)cmd->seq;
		struct strbuf report = { 0 };
		long n = backend_skip(&fs->be, cmd->seq, &report);
		if (n < 0) {
			sb_printf(&h->out, "{\"ok\": false, \"error\": ");
			sb_json_str(&h->out, n == -EINVAL ? "skip needs the sequence number of a blocked operation"
					     : n == -ENOENT ? "no pending operation has that sequence number"
					     : n == -EALREADY ? "that version is already on the backend under "
						"its own name (its other hard links are not yet): it can only be "
						"finished, with retry, not skipped"
					     : "that operation is not blocked; only a blocked operation can be skipped");
			sb_printf(&h->out, "}\n");
		} else {
			log_warn("the administrator skipped operation %llu and %ld dependants:\n%s", seq,
				 n - 1, report.s ? report.s : "");
			sb_printf(&h->out, "{\"ok\": true, \"skipped\": %ld, \"report\": ", n);
			sb_json_str(&h->out, report.s ? report.s : "");
			sb_printf(&h->out, "}\n");
		}
		sb_free(&report);
		return;
	}
	if (cmd->kind == CTL_CMD_ACK_LOST) {
		ctl_ack_lost(fs, h);
		return;
	}
	pthread_mutex_lock(&fs->ns);
	if (cmd->kind == CTL_CMD_SYNC) {
		uint64_t seq = seal_all_locked(fs, &rep);
		sb_printf(&h->out, "{\"ok\": %s, \"seq\": %llu, \"open_for_writing\": %u}\n",
			  rep.err ? "false" : "true", (unsigned long long)seq, rep.open_files);
	} else {
		struct fsnode *n = lookup_path(fs, cmd->path);
		int err = 0;
		if (!n || !S_ISREG(n->mode) || n->ctl) {
			sb_printf(&h->out, "{\"ok\": false, \"error\": \"not a regular file in the mount\"}\n");
		} else {
			uint64_t before = backend_durable_seq(&fs->be);
			if (node_needs_seal(n))
				err = seal_locked(fs, n, n->writer_uid);
			uint64_t seq = backend_last_seq(&fs->be);
			/* Order is kept: the file becomes durable after everything before it. */
			sb_printf(&h->out, "{\"ok\": %s, \"seq\": %llu, \"ahead\": %llu}\n",
				  err ? "false" : "true", (unsigned long long)seq,
				  (unsigned long long)(seq > before ? seq - before - 1 : 0));
			h->drain_seq = seq;
		}
	}
	pthread_mutex_unlock(&fs->ns);
}

void ctl_write(struct ckptfs *fs, fuse_req_t req, struct fshandle *h, const char *buf,
	       size_t len, off_t off)
{
	struct ctl_cmd *cmd = xmalloc(sizeof(*cmd));
	char err[160];
	int r = ctl_cmd_parse(buf, len, cmd, err, sizeof(err));

	if (h->node->ctl == CTL_DRAIN) {
		if (r < 0 || cmd->kind != CTL_CMD_TIMEOUT) {
			free(cmd);
			fuse_reply_err(req, EINVAL);
			return;
		}
		h->timeout_ns = cmd->timeout_ns;
		if (!h->timeout_ns)
			h->timeout_ns = 1;	/* "timeout=0": do not wait at all */
	} else if (h->node->ctl == CTL_CMD) {
		ctl_command(fs, h, r < 0 ? NULL : cmd, err);
	} else {
		free(cmd);
		fuse_reply_err(req, EBADF);
		return;
	}
	free(cmd);
	fuse_reply_write(req, len);
}
