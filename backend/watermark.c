/*
 * watermark.c — this node's durable watermark (nodes.h N3, N5) and the node
 * keeper thread that writes it and renews the lease.
 *
 * BACKEND/.ckptfs/nodes/<node>/watermark.json says: every operation sealed
 * on this node before wall time `durable_before_ns` is durable, and so is
 * every sequence number up to `seq`.  Peers compare it with the seal time of
 * a marker they hold (peers.c).  It carries this clock's error bound
 * (adjtimex(2) maxerror, and whether the clock is synchronized) so peers can
 * add it to their margin, the boot id (two nodes on one machine share a
 * clock), and, after an unclean stop, the window of seal times the lost
 * incarnation never confirmed (N5) — open (no end, "gap_to_ns": 0) while
 * files it lost are not acknowledged by an administrator (ack-lost) — and
 * what an administrator skipped on this node, ever (N6).  It also says what
 * T is for markers of the actors other than those it lists, the actors
 * with an operation that failed and is still pending here: the same bound
 * over the unlisted actors' operations alone (N3), so that one user's
 * refused operation does not hold another user's markers on other nodes.
 *
 * When it is written:
 *  - after publish groups, coalesced: at most every WM_COALESCE_NS;
 *  - when idle, as a heartbeat with T = now: every WM_FAST_NS while this
 *    node sealed or published something in the last WM_RECENT_NS (the time
 *    around a checkpoint, when a peer's marker may wait for it), every
 *    WM_SLOW_NS otherwise — only with peers configured; without, a node's
 *    record is kept true but not fresh;
 *  - at mount, before the mount serves anything (so a peer that reads this
 *    node's record after one of its seals sees this incarnation), and at a
 *    clean stop, marked "stopped";
 *  - when an administrator acknowledges lost files (nodes_ack_lost): the
 *    keeper ends the open window and writes the record before answering.
 * The lease's heartbeat rides on the same thread, every ttl/4.
 *
 * Records are written whole (temp, write, fsync, rename, directory fsync)
 * through bsys (manifest_write_file).  A write that fails is retried at the next turn; the last
 * error is in stats.
 */
#include "backend/nodes.h"
#include "backend/pub.h"
#include "backend/bsys.h"
#include "cache/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/timex.h>

#define WM_TMP NODES_WM_FILE ".tmp"
#define WM_COALESCE_NS (50ull * 1000000)
#define WM_FAST_NS (250ull * 1000000)
#define WM_SLOW_NS (5ull * 1000000000)
#define WM_RECENT_NS (60ull * 1000000000)
/*
 * How long an unreadable record of an unclean previous mount is retried:
 * longer than a network file system client's entry and attribute cache
 * (GlusterFS: 1 s), whose stale handle answers ESTALE until it expires.
 */
#define WM_PREV_WINDOW_NS (3ull * 1000000000)
#define WM_PREV_RETRY_US (100 * 1000)

/*
 * Format 5: "job", the writer's job= ("-" for none): with peers=N a daemon
 * counts only peers of its own job; a daemon of format 4 rejects it
 * (markers held, never released early).  Format 4: T for markers of actors
 * other than "blocked_uids" (N3): "others_before_ns", the list ascending,
 * "-" for none; a daemon of format 3 rejects it (markers held, never released early).  Format 3: "gap_to_ns":
 * 0 with a gap_mount is an open window (N5).  Formats 2 and 3 (older
 * daemons) are still read, with one T for every actor; format 2's window
 * with lost files as open.
 */
#define WM_FORMAT 5
#define WM_FMT "{\"format\": %d, \"node\": \"%s\", \"mount_id\": \"%s\", \"boot_id\": \"%s\", "   \
	       "\"state\": \"%s\", \"seq\": %llu, \"durable_before_ns\": %llu, "              \
	       "\"written_ns\": %llu, \"maxerror_ns\": %llu, \"clock_synced\": %s, "          \
	       "\"gap_mount\": \"%s\", \"gap_from_ns\": %llu, \"gap_to_ns\": %llu, "          \
	       "\"lost_files\": %llu, \"skipped\": %llu, \"skipped_from_ns\": %llu, "         \
	       "\"blocked_uids\": \"%s\", \"others_before_ns\": %llu, \"job\": \"%s\"}\n"
/* The list: NODES_WM_UIDS_MAX uids of 10 digits and commas (wm_parse's width: 176). */
#define WM_UIDS_LEN (NODES_WM_UIDS_MAX * 11)

/*
 * One number of a record: digits only (sscanf's %llu would take "-1" for
 * 2^64 - 1, and wrap on overflow), at most 20, within 64 bits.
 */
static bool wm_num(const char *digits, uint64_t *v)
{
	char *end;

	errno = 0;
	unsigned long long x = strtoull(digits, &end, 10);
	if (!*digits || *end || errno)
		return false;
	*v = x;
	return true;
}

/*
 * Is a parsed record one a daemon could have written?  Peers' records are
 * untrusted input (a bit flip, a foreign or buggy writer, a half-applied
 * restore): T is never later than the writer's clock when it wrote it,
 * nor is a window it reports, and no clock's error exceeds the kernel's cap.
 */
static bool wm_sane(const struct wm_record *r)
{
	if (r->before_ns > r->written_ns || r->maxerror_ns > NODES_MAXERROR_MAX_NS)
		return false;
	if (r->gap_mount[0] && (r->gap_from_ns > (r->gap_open ? r->written_ns : r->gap_to_ns) ||
				r->gap_to_ns > r->written_ns))
		return false;
	if (r->others_before_ns < r->before_ns || r->others_before_ns > r->written_ns ||
	    (!r->nblocked && r->others_before_ns != r->before_ns))
		return false;
	return !r->skipped || r->skipped_from_ns <= r->written_ns;
}

/* "blocked_uids" into r: "-", or up to NODES_WM_UIDS_MAX uids, ascending. */
static bool wm_uids_parse(const char *text, struct wm_record *r)
{
	char one[12];
	uint64_t uid;

	if (!strcmp(text, "-"))
		return true;
	for (const char *p = text;; p++) {
		size_t n = strspn(p, "0123456789");
		if (n == 0 || n >= sizeof(one) || r->nblocked == NODES_WM_UIDS_MAX)
			return false;
		memcpy(one, p, n);
		one[n] = '\0';
		if (!wm_num(one, &uid) || uid > UINT32_MAX ||
		    (r->nblocked && uid <= r->blocked_uids[r->nblocked - 1]))
			return false;
		r->blocked_uids[r->nblocked++] = (uint32_t)uid;
		p += n;
		if (!*p)
			return true;
		if (*p != ',')
			return false;
	}
}

/* ... and back; "-" for none. */
static void wm_uids_format(const struct wm_record *r, char *buf, size_t len)
{
	size_t at = 0;

	snprintf(buf, len, "-");
	for (unsigned i = 0; i < r->nblocked; i++)
		at += (size_t)snprintf(buf + at, len - at, "%s%u", i ? "," : "",
				       (unsigned)r->blocked_uids[i]);
}

static bool wm_listed(const struct wm_record *r, uid_t uid)
{
	for (unsigned i = 0; i < r->nblocked; i++)
		if (r->blocked_uids[i] == uid)
			return true;
	return false;
}

uint64_t wm_before_for(const struct wm_record *r, uid_t uid)
{
	return wm_listed(r, uid) ? r->before_ns : r->others_before_ns;
}

/* Add uid to r's ascending list; false when it is full. */
static bool wm_uids_add(struct wm_record *r, uint32_t uid)
{
	unsigned i = 0;

	while (i < r->nblocked && r->blocked_uids[i] < uid)
		i++;
	if (i < r->nblocked && r->blocked_uids[i] == uid)
		return true;
	if (r->nblocked == NODES_WM_UIDS_MAX)
		return false;
	memmove(&r->blocked_uids[i + 1], &r->blocked_uids[i],
		(r->nblocked - i) * sizeof(r->blocked_uids[0]));
	r->blocked_uids[i] = uid;
	r->nblocked++;
	return true;
}

bool wm_parse(const char *text, size_t len, struct wm_record *r)
{
	char state[16], synced[8], n[10][21], uids[WM_UIDS_LEN + 1];
	int fmt, end = -1;

	memset(r, 0, sizeof(*r));
	if (!len || text[len] != '\0')
		return false;
	if (sscanf(text, "{\"format\": %d, \"node\": \"%255[^\"]\", \"mount_id\": \"%23[^\"]\", "
		   "\"boot_id\": \"%39[^\"]\", \"state\": \"%15[a-z]\", \"seq\": %20[0-9], "
		   "\"durable_before_ns\": %20[0-9], \"written_ns\": %20[0-9], "
		   "\"maxerror_ns\": %20[0-9], \"clock_synced\": %7[a-z], "
		   "\"gap_mount\": \"%23[^\"]\", \"gap_from_ns\": %20[0-9], \"gap_to_ns\": %20[0-9], "
		   "\"lost_files\": %20[0-9], \"skipped\": %20[0-9], \"skipped_from_ns\": %20[0-9]%n",
		   &fmt, r->node, r->mount_id, r->boot_id, state, n[0], n[1], n[2], n[3], synced,
		   r->gap_mount, n[4], n[5], n[6], n[7], n[8], &end) != 16 || end < 0 || fmt < 2 ||
	    fmt > WM_FORMAT)
		return false;
	const char *tail = text + end;
	if (fmt < 4) {
		if (*tail != '}')
			return false;
		snprintf(n[9], sizeof(n[9]), "%s", n[1]);	/* one T for every actor */
	} else {
		end = -1;
		if (sscanf(tail, ", \"blocked_uids\": \"%176[0-9,-]\", \"others_before_ns\": "
			   "%20[0-9]%n", uids, n[9], &end) != 2 || end < 0 || !wm_uids_parse(uids, r))
			return false;
		tail += end;
		end = -1;
		if (fmt >= 5 && (sscanf(tail, ", \"job\": \"%63[^\"]\"}%n", r->job, &end) != 1 ||
				 end < 0 || (strcmp(r->job, "-") && !nodes_job_ok(r->job))))
			return false;
		if (fmt >= 5 ? tail[end] != '\0' && tail[end] != '\n' : *tail != '}')
			return false;
		if (!strcmp(r->job, "-"))
			r->job[0] = '\0';
	}
	uint64_t *const to[10] = { &r->seq, &r->before_ns, &r->written_ns, &r->maxerror_ns,
				   &r->gap_from_ns, &r->gap_to_ns, &r->lost_files, &r->skipped,
				   &r->skipped_from_ns, &r->others_before_ns };
	for (unsigned i = 0; i < 10; i++)
		if (!wm_num(n[i], to[i]))
			return false;
	r->synced = !strcmp(synced, "true");
	r->stopped = !strcmp(state, "stopped");
	if (!r->skipped)
		r->skipped_from_ns = 0;
	if (!strcmp(r->gap_mount, "-"))
		r->gap_mount[0] = '\0';
	/* Format 2 ended a window at the restart even when files were lost: held, not trusted. */
	r->gap_open = r->gap_mount[0] && (fmt == 2 ? r->lost_files > 0 : r->gap_to_ns == 0);
	r->valid = wm_sane(r);
	return r->valid;
}

void nodes_clock_sample(struct nodes *nd)
{
	struct timex tx = { 0 };
	int st = adjtimex(&tx);

	/* maxerror is in microseconds; unsynchronized, the kernel reports its cap (16 s). */
	uint64_t e = (uint64_t)(tx.maxerror < 0 ? 0 : tx.maxerror) * 1000;
	atomic_store(&nd->maxerror_ns, st < 0 ? NODES_MAXERROR_MAX_NS : CKPT_MIN(e, NODES_MAXERROR_MAX_NS));
	atomic_store(&nd->synced, st >= 0 && st != TIME_ERROR && !(tx.status & STA_UNSYNC));
}

/* a - b, or 0. */
static uint64_t sat_sub(uint64_t a, uint64_t b)
{
	return a > b ? a - b : 0;
}

/*
 * N3: T for this node's record into w (before_ns, and others_before_ns for
 * the actors other than those listed: each with an operation that failed
 * and is still pending), and the durable seq (be->lock held).  True when
 * there are more such actors than a record lists (it then lists none).
 */
static bool durable_wall_locked(struct nodes *nd, struct wm_record *w, uint64_t *seq)
{
	struct backend *be = nd->be;
	uint64_t wall = UINT64_MAX, others = UINT64_MAX, ahead = 0;
	bool full = false;

	w->nblocked = 0;
	for (struct list *e = be->ops.next; e != &be->ops && !full; e = e->next) {
		const struct op *op = list_entry(e, struct op, link);
		if (op->attempts)
			full = !wm_uids_add(w, (uint32_t)op->actor);
	}
	if (full)
		w->nblocked = 0;	/* too many to list: one T for every actor */
	pthread_mutex_lock(&nd->lock);
	nodes_held_prune_locked(nd);	/* released markers applied since: their entries go */
	for (struct list *e = be->ops.next; e != &be->ops; e = e->next) {
		const struct op *op = list_entry(e, struct op, link);
		if (nd->nheld && nodes_held_locked(nd, op->seq))
			continue;
		ahead = CKPT_MAX(ahead, op->sealed_ahead_ns);
		wall = CKPT_MIN(wall, op->sealed_wall_ns);
		if (!wm_listed(w, op->actor))
			others = CKPT_MIN(others, op->sealed_wall_ns);
	}
	pthread_mutex_unlock(&nd->lock);
	*seq = backend_durable_upto_locked(be);
	/* Nothing (of theirs) pending: a time no later seal can precede. */
	uint64_t stamp_ahead, stamp = backend_wall_stamp_locked(be, &stamp_ahead);
	/*
	 * L1: after the clock stepped back, seal stamps are floored past it: a
	 * pending shard stamped `ahead` past the clock may have been sealed
	 * that long before a peer's marker that its stamp follows, and a seal
	 * made after this record may be stamped that far past its time.  The
	 * peers' margin covers the clocks' error, not the floor: take it off
	 * here, so every T below claims only seals made, by this clock, before it.
	 */
	ahead = CKPT_MAX(ahead, stamp_ahead);
	w->before_ns = sat_sub(CKPT_MIN(wall, stamp), ahead);
	w->others_before_ns = w->nblocked ? sat_sub(CKPT_MIN(others, stamp), ahead) : w->before_ns;
	return full;
}

/*
 * N6: what was skipped on this node, by earlier mounts (carried on in
 * nd->gap) and by this one (be->lock held).
 */
static void skipped_locked(struct nodes *nd, uint64_t *count, uint64_t *from)
{
	const struct backend *be = nd->be;

	*count = nd->gap.skipped + be->skipped_ops;
	*from = nd->gap.skipped ? nd->gap.skipped_from_ns : UINT64_MAX;
	if (be->skipped_ops)
		*from = CKPT_MIN(*from, be->skipped_from_wall);
	if (!*count)
		*from = 0;
}

/* Write this node's record; `stopped` at a clean stop.  0 or -errno. */
static int wm_write(struct nodes *nd, bool stopped)
{
	struct backend *be = nd->be;
	char buf[NODES_WM_BUF], uids[WM_UIDS_LEN + 1];
	struct wm_record t;
	uint64_t seq, before, skipped, skipped_from;
	int r, n;

	/* N2: not ours to write any more.  Without flock, a stopped daemon may have lost it. */
	if (atomic_load(&nd->lease_lost) || (!nd->flock_ok && lease_check(nd) < 0))
		return -EADDRINUSE;
	nodes_clock_sample(nd);
	pthread_mutex_lock(&be->lock);
	bool all = durable_wall_locked(nd, &t, &seq);
	skipped_locked(nd, &skipped, &skipped_from);
	pthread_mutex_unlock(&be->lock);
	before = t.before_ns;
	/*
	 * Seal times are floored (they never go back when the clock does), and
	 * peers reject a record whose times are later than its writing (wm_sane).
	 */
	const struct wm_record *g = &nd->gap;	/* only the keeper changes it, or none runs */
	uint64_t written = CKPT_MAX(CKPT_MAX(wall_ns(), t.others_before_ns),
				    CKPT_MAX(CKPT_MAX(g->gap_from_ns, g->gap_to_ns), skipped_from));
	for (;;) {
		wm_uids_format(&t, uids, sizeof(uids));
		n = snprintf(buf, sizeof(buf), WM_FMT, WM_FORMAT, nd->node, be->mount_id,
			     nd->boot_id, stopped ? "stopped" : "running", (unsigned long long)seq,
			     (unsigned long long)before, (unsigned long long)written,
			     (unsigned long long)atomic_load(&nd->maxerror_ns),
			     atomic_load(&nd->synced) ? "true" : "false",
			     g->valid ? g->gap_mount : "-", (unsigned long long)g->gap_from_ns,
			     (unsigned long long)(g->gap_open ? 0 : g->gap_to_ns),
			     (unsigned long long)g->lost_files, (unsigned long long)skipped,
			     (unsigned long long)skipped_from, uids,
			     (unsigned long long)t.others_before_ns, nd->opt.job[0] ? nd->opt.job : "-");
		/* Peers read at most sizeof(buf) - 1 bytes: past that, one T for every actor. */
		if (n < (int)sizeof(buf) || !t.nblocked)
			break;
		all = true;
		t.nblocked = 0;
		t.others_before_ns = before;
	}
	r = n < (int)sizeof(buf) ? manifest_write_file(nd->dirfd, NODES_WM_FILE, WM_TMP, buf, (size_t)n)
	    : -ENAMETOOLONG;
	int was = atomic_exchange(&nd->wm_err, r);
	if (r < 0 && was != r)
		log_warn("node %s: cannot write its watermark: %s; peers' markers wait until it "
			 "can", nd->node, strerror(-r));
	else if (r == 0 && was)
		log_info("node %s: its watermark is written again", nd->node);
	if (r == 0) {
		atomic_store(&nd->wm_before_ns, before);
		atomic_store(&nd->wm_seq, seq);
		atomic_fetch_add(&nd->wm_writes, 1);
		pthread_mutex_lock(&nd->lock);
		memcpy(nd->wm_blocked_uids, t.blocked_uids, t.nblocked * sizeof(t.blocked_uids[0]));
		nd->wm_nblocked = t.nblocked;
		nd->wm_blocked_all = all;
		pthread_mutex_unlock(&nd->lock);
	}
	return r;
}

/*
 * The mount before this one, if it did not stop cleanly: the lease it
 * never released, or what recovery found in the manifest ("" : none).
 */
static const char *unclean_previous(const struct nodes *nd)
{
	const struct recovery_report *rep = &nd->be->recovery;

	if (nd->took_over[0])
		return nd->took_over;
	return rep->previous && rep->unclean && rep->prev_mount_id[0] ? rep->prev_mount_id : "";
}

/*
 * The previous mount's record into p: 0, or -errno (-ENOENT: there is none;
 * -EBADMSG: not a record).  When a previous mount is known to have stopped
 * uncleanly its record should be there, and a record that is there but
 * cannot be read or parsed may be a stale view too, so such a failure is
 * retried for WM_PREV_WINDOW_NS (a network file system's client may answer
 * from a stale view for a moment).
 */
static int prev_read(struct nodes *nd, struct wm_record *p, bool expected)
{
	uint64_t t0 = now_ns();
	char buf[NODES_WM_BUF];
	int r;

	for (;;) {
		ssize_t n = nodes_read_file(nd->dirfd, NODES_WM_FILE, buf, sizeof(buf));
		r = n < 0 ? (int)n : wm_parse(buf, (size_t)n, p) ? 0 : -EBADMSG;
		if (r == 0)
			return 0;
		if ((!expected && r == -ENOENT) || now_ns() - t0 >= WM_PREV_WINDOW_NS)
			break;
		usleep(WM_PREV_RETRY_US);
	}
	memset(p, 0, sizeof(*p));
	return r;
}

/*
 * End the window of an unclean stop that lost `lost` files (N5): at this
 * mount's start when nothing was lost (and no window carried on is open);
 * otherwise it stays open, since a marker a peer seals after this restart
 * may still name a lost file, until an administrator acknowledges it.
 */
static void gap_end(struct nodes *nd, uint64_t lost)
{
	struct wm_record *g = &nd->gap;

	g->lost_files = g->lost_files > UINT64_MAX - lost ? UINT64_MAX : g->lost_files + lost;
	g->gap_open = g->gap_open || lost > 0;
	g->gap_to_ns = g->gap_open ? 0 : nd->started_wall_ns;
}

/* The log's last words on an unclean stop: what peers' markers do now. */
static const char *gap_tail(const struct wm_record *g, char *buf, size_t len)
{
	if (!g->gap_open)
		return "so markers they sealed from then until this mount are not released by "
		       "watermarks (later ones wait for this mount's)";
	snprintf(buf, len, "and %llu file%s sealed in it never reached the backend, so markers "
		 "they sealed from then on — after this mount too: one may name a lost file — are "
		 "not released by watermarks until an administrator who has dealt with the loss "
		 "runs `ckptfs-ctl ack-lost MOUNT` on this node (the window stays open until then, "
		 "across restarts)", (unsigned long long)g->lost_files, g->lost_files == 1 ? "" : "s");
	return buf;
}

/*
 * What this incarnation says about the last one (N5): if it did not stop
 * cleanly, the seal times from its last watermark on are unconfirmed, to
 * now or, when it lost files, until an acknowledgement (gap_end); a window
 * reported before is carried on (merged), never forgotten, open or not.
 * When that watermark cannot be read, nothing it sealed is taken as
 * confirmed: the window starts at 0.  The same when a record is there but
 * damaged after a clean stop: the window it may have carried on is unknown,
 * so it is taken as open from 0 (no record at all: a first mount, nothing
 * to report).  A record left by an older mount than
 * the one that stopped uncleanly bounds the window the same way: the
 * unclean one started after that record's T.
 */
static void gap_init(struct nodes *nd)
{
	struct wm_record *p = &nd->prev;
	const char *unclean = unclean_previous(nd);
	uint64_t lost = nd->be->recovery.inflight_files + nd->be->recovery.unrecorded_ops;
	int r = prev_read(nd, p, unclean[0] != '\0');
	char tail[512];

	memset(&nd->gap, 0, sizeof(nd->gap));
	if (r < 0 && !unclean[0]) {
		if (r == -ENOENT)
			return;		/* no record: the node's first mount, nothing to report */
		/*
		 * N5, N6: a record is there but cannot be read: the previous
		 * mount stopped cleanly, but what it carried on — an open window
		 * of lost files, operations an administrator skipped — is gone
		 * with it.  Nothing is taken as confirmed: a window open from 0,
		 * until an administrator who has checked the checkpoints
		 * acknowledges it (ack-lost).
		 */
		const struct recovery_report *rep = &nd->be->recovery;
		nd->gap.valid = true;
		nd->gap.gap_open = true;
		nd->gap.gap_from_ns = 0;
		nd->gap.gap_to_ns = 0;
		snprintf(nd->gap.gap_mount, sizeof(nd->gap.gap_mount), "%s",
			 rep->previous && rep->prev_mount_id[0] ? rep->prev_mount_id : "unknown");
		log_warn("node %s: its own watermark record BACKEND/.ckptfs/nodes/%s/%s, left "
			 "by mount %s, is damaged (%s): any window of lost files or skipped "
			 "operations it carried is unknown, so this node reports an open window from 0: peers' markers are "
			 "not released by its watermarks until an administrator who has checked the "
			 "checkpoints runs `ckptfs-ctl ack-lost MOUNT` on this node", nd->node,
			 nd->node, NODES_WM_FILE, nd->gap.gap_mount, strerror(-r));
		return;
	}
	if (r < 0) {
		nd->gap.valid = true;
		nd->gap.gap_from_ns = 0;
		gap_end(nd, lost);
		snprintf(nd->gap.gap_mount, sizeof(nd->gap.gap_mount), "%s", unclean);
		log_warn("node %s: mount %s stopped uncleanly and its last watermark cannot be read "
			 "(%s): nothing it sealed is reported to peers as confirmed, %s", nd->node,
			 unclean, strerror(-r), nd->gap.gap_open ? gap_tail(&nd->gap, tail, sizeof(tail))
			 : "so markers they sealed before this mount are not released by watermarks");
		return;
	}
	if (p->gap_mount[0]) {		/* carried on */
		nd->gap = *p;
		nd->gap.valid = true;
	}
	nd->gap.skipped = p->skipped;	/* N6: carried on, whatever the stop */
	nd->gap.skipped_from_ns = p->skipped_from_ns;
	bool older = unclean[0] && strcmp(p->mount_id, unclean) != 0;
	if (!p->stopped || older) {
		uint64_t from = p->before_ns;
		if (nd->gap.valid)
			from = CKPT_MIN(from, nd->gap.gap_from_ns);
		nd->gap.valid = true;
		nd->gap.gap_from_ns = from;
		gap_end(nd, lost);
		snprintf(nd->gap.gap_mount, sizeof(nd->gap.gap_mount), "%s", older ? unclean : p->mount_id);
		log_warn("node %s: mount %s stopped uncleanly; operations it sealed after %s "
			 "watermark (%.3f s before this mount) are reported to peers as unconfirmed, "
			 "%s", nd->node, nd->gap.gap_mount, older ? "the last readable" : "its last",
			 (double)(nd->started_wall_ns - CKPT_MIN(from, nd->started_wall_ns)) / 1e9,
			 gap_tail(&nd->gap, tail, sizeof(tail)));
	} else if (nd->gap.gap_open) {
		log_warn("node %s: the window of unconfirmed seals of mount %s, which lost %llu "
			 "file%s, is still open: peers' markers sealed since are not released by "
			 "watermarks until an administrator runs `ckptfs-ctl ack-lost MOUNT` on this "
			 "node", nd->node, nd->gap.gap_mount, (unsigned long long)nd->gap.lost_files,
			 nd->gap.lost_files == 1 ? "" : "s");
	}
}

/*
 * The administrator's acknowledgement (the keeper's, nodes_ack_lost): the
 * open window ends now; *was keeps it for a write that fails.  -ENOENT:
 * none is open.
 */
static int gap_ack(struct nodes *nd, struct wm_record *was)
{
	struct wm_record *g = &nd->gap;

	if (!g->valid || !g->gap_open)
		return -ENOENT;
	*was = *g;
	pthread_mutex_lock(&nd->lock);
	g->gap_open = false;
	g->gap_to_ns = CKPT_MAX(wall_ns(), g->gap_from_ns);
	pthread_mutex_unlock(&nd->lock);
	return 0;
}

/* Answer the ack-lost requests up to `asked` (the keeper; no lock held). */
static void keeper_ack(struct nodes *nd, uint64_t asked)
{
	struct wm_record was;
	int r = gap_ack(nd, &was);

	if (r == 0 && (r = wm_write(nd, false)) < 0) {
		pthread_mutex_lock(&nd->lock);
		nd->gap = was;		/* not written: peers still see it open, and so do we */
		pthread_mutex_unlock(&nd->lock);
	}
	if (r == 0 && !was.lost_files)
		log_warn("node %s: an administrator acknowledged the window of unconfirmed seals "
			 "of mount %s (no file known lost): peers' markers sealed from now on are "
			 "released by this node's watermarks again; those sealed before stay held "
			 "(only marker_policy=release lets them go)", nd->node, was.gap_mount);
	else if (r == 0)
		log_warn("node %s: an administrator acknowledged the %llu file%s lost by mount %s: "
			 "peers' markers sealed from now on are released by this node's watermarks "
			 "again; those sealed from %.3f s before until now stay held (only "
			 "marker_policy=release lets them go)", nd->node,
			 (unsigned long long)was.lost_files, was.lost_files == 1 ? "" : "s",
			 was.gap_mount, (double)(nd->gap.gap_to_ns - was.gap_from_ns) / 1e9);
	pthread_mutex_lock(&nd->klock);
	nd->ack_done = asked;
	nd->ack_err = r;
	pthread_cond_broadcast(&nd->kcond);
	pthread_mutex_unlock(&nd->klock);
}

int nodes_ack_lost(struct nodes *nd, struct wm_record *out)
{
	int r = -ESHUTDOWN;

	pthread_mutex_lock(&nd->klock);
	if (nd->keeper_started && !nd->kstop) {
		uint64_t ticket = ++nd->ack_asked;
		pthread_cond_broadcast(&nd->kcond);
		while (nd->ack_done < ticket && !nd->kstop)
			cond_wait_ns(&nd->kcond, &nd->klock, WM_FAST_NS);
		if (nd->ack_done >= ticket)
			r = nd->ack_err;
	}
	pthread_mutex_unlock(&nd->klock);
	nodes_gap_report(nd, out);
	return r;
}

unsigned nodes_blocked_report(struct nodes *nd, uint32_t *uids, bool *all)
{
	pthread_mutex_lock(&nd->lock);
	unsigned n = nd->wm_nblocked;
	memcpy(uids, nd->wm_blocked_uids, n * sizeof(uids[0]));
	*all = nd->wm_blocked_all;
	pthread_mutex_unlock(&nd->lock);
	return n;
}

void nodes_gap_report(struct nodes *nd, struct wm_record *out)
{
	pthread_mutex_lock(&nd->lock);
	*out = nd->gap;
	pthread_mutex_unlock(&nd->lock);
	if (!out->valid)
		out->gap_mount[0] = '\0';
}

/* ---- the keeper ---------------------------------------------------------- */

static void *keeper_main(void *arg)
{
	struct nodes *nd = arg;
	uint64_t last_wm = now_ns(), lease_every = (uint64_t)(nd->opt.lease_ttl * 1e9) / 4;

	pthread_mutex_lock(&nd->klock);
	while (!nd->kstop) {
		uint64_t now = now_ns(), seq = backend_last_seq(nd->be), next;
		if (seq != nd->last_seen_seq) {		/* something was sealed */
			nd->last_seen_seq = seq;
			nd->last_activity_ns = now;
		}
		uint64_t idle_every = !nodes_opts_have_peers(&nd->opt) ? UINT64_MAX
				      : now - nd->last_activity_ns < WM_RECENT_NS ? WM_FAST_NS
				      : WM_SLOW_NS;
		bool wm_due = (nd->kdirty && now - last_wm >= WM_COALESCE_NS) ||
			      now - last_wm >= idle_every;
		bool lease_due = now - nd->last_lease_ns >= lease_every;
		uint64_t asked = nd->ack_asked;
		bool ack_due = asked != nd->ack_done;
		if (!wm_due && !lease_due && !ack_due) {
			next = nd->kdirty ? last_wm + WM_COALESCE_NS
			       : idle_every == UINT64_MAX ? UINT64_MAX : last_wm + idle_every;
			next = CKPT_MIN(next, nd->last_lease_ns + lease_every);
			if (nodes_opts_have_peers(&nd->opt))	/* notice seals made while idle */
				next = CKPT_MIN(next, now + WM_FAST_NS);
			cond_wait_ns(&nd->kcond, &nd->klock, next > now ? next - now : 1);
			continue;
		}
		bool dirty = nd->kdirty;
		nd->kdirty = false;
		pthread_mutex_unlock(&nd->klock);
		if (lease_due)
			lease_heartbeat(nd);
		if (ack_due)
			keeper_ack(nd, asked);
		if (wm_due && wm_write(nd, false) < 0 && dirty) {
			pthread_mutex_lock(&nd->klock);
			nd->kdirty = true;	/* try again at the next turn */
			pthread_mutex_unlock(&nd->klock);
		}
		pthread_mutex_lock(&nd->klock);
		if (wm_due)
			last_wm = now_ns();
	}
	pthread_mutex_unlock(&nd->klock);
	return NULL;
}

void nodes_published(struct nodes *nd)
{
	pthread_mutex_lock(&nd->klock);
	nd->kdirty = true;
	nd->last_activity_ns = now_ns();
	pthread_cond_broadcast(&nd->kcond);	/* ack-lost callers wait on it too */
	pthread_mutex_unlock(&nd->klock);
}

void peers_start(struct nodes *nd);
void peers_stop(struct nodes *nd);

int nodes_run(struct nodes *nd)
{
	lease_record(nd);
	gap_init(nd);
	nd->last_activity_ns = now_ns();
	/*
	 * Before the mount serves anything: peers see this incarnation first.  A
	 * backend refusing it is no reason not to mount (the data waits in the
	 * cache): the keeper tries again, and peers' markers wait meanwhile.
	 */
	if (wm_write(nd, false) < 0)
		nd->kdirty = true;
	if (pthread_create(&nd->keeper, NULL, keeper_main, nd) != 0)
		return -EAGAIN;
	nd->keeper_started = true;
	if (nodes_opts_have_peers(&nd->opt))
		peers_start(nd);
	return 0;
}

void nodes_stop(struct nodes *nd, bool clean)
{
	if (nd->watcher_started)
		peers_stop(nd);
	if (nd->keeper_started) {
		pthread_mutex_lock(&nd->klock);
		nd->kstop = true;
		pthread_cond_broadcast(&nd->kcond);
		pthread_mutex_unlock(&nd->klock);
		pthread_join(nd->keeper, NULL);
		nd->keeper_started = false;
	}
	if (nd->taken && clean)
		wm_write(nd, true);
	lease_release(nd);		/* writes only a lease it holds; closes the lock */
	if (nd->dirfd >= 0)
		bsys.close(nd->dirfd);
	nd->dirfd = -1;
	if (nd->nodes_fd >= 0)
		bsys.close(nd->nodes_fd);
	nd->nodes_fd = -1;
	free(nd->peers);
	nd->peers = NULL;
	free(nd->held);
	nd->held = NULL;
	nd->nheld = nd->held_cap = 0;
	nodes_opts_free(&nd->opt);
	pthread_mutex_destroy(&nd->lock);
	pthread_mutex_destroy(&nd->klock);
	pthread_cond_destroy(&nd->kcond);
	pthread_cond_destroy(&nd->wcond);
}
