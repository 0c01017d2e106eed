/*
 * peers.c — markers wait for the peers (nodes.h N4, N5): the peer watcher
 * thread, the hold hook, and the report of held markers.
 *
 * The watcher reads each peer's watermark.json (and now and then its
 * lease.json) into memory: every POLL_SLOW_NS, and more often while a
 * marker is held: every POLL_FAST_NS (more with many peers) while the
 * youngest hold is young, then less often as it ages (hold_poll_ns), so a
 * marker held for hours reads each peer's record once a second.  With peers=N (a node count) the
 * peers are discovered: every directory under .ckptfs/nodes but this one.
 *
 * The hold hook (called by the publisher under be->lock, for each marker
 * ready to be applied) decides from those snapshots alone — no I/O — whether
 * every peer's watermark T for the marker's actor (N3: the record's T for
 * the actors it lists as failing there, else its T for every other actor)
 * has passed the marker's seal time Tm plus the margin for that peer:
 *
 *   margin = peer_skew                     when -o peer_skew=SEC is given;
 *          = MARGIN_FLOOR_NS               when the peer shares this clock
 *                                          (same boot id: one machine);
 *          = MARGIN_FLOOR_NS + E_here + E_peer   otherwise, where E is the
 *            clock's maxerror from adjtimex(2) (unsynchronized, the kernel
 *            reports its cap, 16 s).
 *
 * A peer passes when T >= Tm + margin, and only then: not because its
 * record says it stopped cleanly, which a caching client may show after
 * the peer's next mount.  It never passes while its record reports an
 * unclean stop whose unconfirmed window
 * [gap_from, gap_to) overlaps [Tm - margin, Tm + margin) — an open window
 * (files lost, not acknowledged) has no end — (N5), nor while
 * it reports operations an administrator skipped from a seal time before
 * Tm + margin on (N6).  With
 * peers=N, N - 1 peers must pass.  Otherwise the marker is held: the hook
 * returns HOLD_RECHECK_NS and the publisher asks again (the watcher also
 * wakes it after each fast poll).  A held marker holds back only what the
 * publisher's order puts after it.  After marker_timeout it is released
 * under marker_policy=release (logged), and reported again and again under
 * hold (the default).  Held markers are kept in nodes->held (for stats, the
 * timeout and N3) until they are applied or skipped: the keeper prunes it.
 *
 * Lock order: be->lock -> nodes->lock; the watcher takes nodes->lock only
 * to copy what it read, and be->lock (alone) to wake the publisher.
 */
#include "backend/nodes.h"
#include "backend/pub.h"
#include "backend/bsys.h"
#include "cache/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POLL_FAST_NS (20ull * 1000000)
#define POLL_SLOW_NS (1000ull * 1000000)
#define POLL_PER_PEER_NS (100ull * 1000)	/* fast polls of many peers spread out */
#define LEASE_READ_NS (1000ull * 1000000)
#define HOLD_RECHECK_NS (100ull * 1000000)
#define FAST_FOR_NS (2000ull * 1000000)	/* poll faster this long after a hold */
#define HOLD_AGE_DIV 16		/* a release comes within ~1/16 of the wait so far */
#define MARGIN_FLOOR_NS (1ull * 1000000)

static bool count_mode(const struct nodes *nd)
{
	return nd->opt.peers_count > 1 && !nd->list_mode;
}

/* nodes->lock held */
static struct peer *peer_find(struct nodes *nd, const char *name)
{
	for (unsigned i = 0; i < nd->npeers; i++)
		if (!strcmp(nd->peers[i].name, name))
			return &nd->peers[i];
	return NULL;
}

static void peer_add_locked(struct nodes *nd, const char *name)
{
	if (!strcmp(name, nd->node) || peer_find(nd, name) || nd->npeers >= NODES_PEERS_MAX)
		return;
	nd->peers = xrealloc(nd->peers, (nd->npeers + 1) * sizeof(*nd->peers));
	memset(&nd->peers[nd->npeers], 0, sizeof(nd->peers[0]));
	snprintf(nd->peers[nd->npeers].name, sizeof(nd->peers[0].name), "%s", name);
	nd->npeers++;
}

/* ---- the watcher ------------------------------------------------------------ */

static int discover_one(void *arg, const char *name)
{
	struct nodes *nd = arg;

	if (nodes_name_ok(name)) {
		pthread_mutex_lock(&nd->lock);
		peer_add_locked(nd, name);
		pthread_mutex_unlock(&nd->lock);
	}
	return 0;
}

/* Read one peer's records (no lock held); the result goes into nd->peers. */
static void peer_read(struct nodes *nd, const char *name, bool with_lease)
{
	struct peer p = { 0 };
	char buf[NODES_WM_BUF];
	int dfd = bsys.openat(nd->nodes_fd, name, O_RDONLY | O_DIRECTORY, 0);

	atomic_fetch_add(&nd->peer_reads, 1);
	p.good_ns = now_ns();
	if (dfd < 0) {
		p.read_err = dfd;
	} else {
		ssize_t n = nodes_read_file(dfd, NODES_WM_FILE, buf, sizeof(buf));
		if (n < 0)
			p.read_err = (int)n;
		else if (!wm_parse(buf, (size_t)n, &p.wm))
			p.read_err = -EBADMSG;
		if (with_lease && (n = nodes_read_file(dfd, "lease.json", buf, sizeof(buf))) >= 0)
			lease_parse(buf, (size_t)n, &p.lease);
		bsys.close(dfd);
	}
	pthread_mutex_lock(&nd->lock);
	struct peer *q = peer_find(nd, name);
	if (q) {
		snprintf(p.name, sizeof(p.name), "%s", name);
		if (!p.lease.valid)
			p.lease = q->lease;
		/* N4: a record not read leaves the last good one in force; a damaged one does not. */
		if (p.read_err && p.read_err != -EBADMSG && q->wm.valid) {
			p.wm = q->wm;
			p.good_ns = q->good_ns;
		}
		*q = p;
	}
	pthread_mutex_unlock(&nd->lock);
}

/* Let the publisher look at held markers again now. */
static void publisher_kick(struct backend *be)
{
	pthread_mutex_lock(&be->lock);
	publisher_kick_locked(be);
	pthread_mutex_unlock(&be->lock);
}

/*
 * How long a held marker waits between looks (L5): most holds end within
 * tens of milliseconds, so the first looks are fast; a hold that has lasted
 * t is looked at every t/16, at most every POLL_SLOW_NS, so one held for
 * hours (a lost window waiting for `ack-lost`, a skip) costs each peer one
 * record read a second, not fifty, and a release comes within ~6 % of the
 * time it had waited.  `floor` is the fastest: the watcher's or the
 * publisher's.
 */
static uint64_t hold_wait_ns(uint64_t age, uint64_t floor)
{
	return CKPT_MIN(CKPT_MAX(age / HOLD_AGE_DIV, floor), POLL_SLOW_NS);
}

/* The watcher's wait while markers are held: by the youngest hold (nodes->lock held). */
static uint64_t hold_poll_ns(const struct nodes *nd, uint64_t now)
{
	uint64_t young = 0;
	bool any = false;

	for (unsigned i = 0; i < nd->nheld; i++) {
		const struct held_marker *h = &nd->held[i];
		uint64_t age = now > h->since_ns ? now - h->since_ns : 0;
		if (!h->released && (!any || age < young))
			young = age;
		any = any || !h->released;
	}
	return hold_wait_ns(young, POLL_FAST_NS);
}

static void *watcher_main(void *arg)
{
	struct nodes *nd = arg;
	uint64_t last_discover = 0, last_lease = 0;
	char (*names)[NODE_NAME_MAX + 1] = NULL;

	pthread_mutex_lock(&nd->lock);
	while (!nd->wstop) {
		uint64_t now = now_ns();
		bool fast = now < nd->fast_until_ns;
		pthread_mutex_unlock(&nd->lock);

		if (count_mode(nd) && now - last_discover >= POLL_SLOW_NS) {
			bsys.readdir(nd->nodes_fd, discover_one, nd);
			last_discover = now;
		}
		bool with_lease = now - last_lease >= LEASE_READ_NS;
		if (with_lease)
			last_lease = now;
		pthread_mutex_lock(&nd->lock);
		unsigned n = nd->npeers;
		names = xrealloc(names, (n ? n : 1) * sizeof(*names));
		for (unsigned i = 0; i < n; i++)
			memcpy(names[i], nd->peers[i].name, sizeof(names[i]));
		pthread_mutex_unlock(&nd->lock);
		for (unsigned i = 0; i < n; i++)
			peer_read(nd, names[i], with_lease);
		if (fast)
			publisher_kick(nd->be);

		pthread_mutex_lock(&nd->lock);
		if (nd->wstop)
			break;
		uint64_t wait = fast ? CKPT_MAX(hold_poll_ns(nd, now_ns()), n * POLL_PER_PEER_NS)
				     : POLL_SLOW_NS;
		cond_wait_ns(&nd->wcond, &nd->lock, wait);
	}
	pthread_mutex_unlock(&nd->lock);
	free(names);
	return NULL;
}

void peers_start(struct nodes *nd)
{
	pthread_mutex_lock(&nd->lock);
	for (unsigned i = 0; i < nd->opt.npeer_names; i++)
		peer_add_locked(nd, nd->opt.peer_names[i]);
	pthread_mutex_unlock(&nd->lock);
	if (pthread_create(&nd->watcher, NULL, watcher_main, nd) == 0)
		nd->watcher_started = true;
	else
		log_err("node %s: cannot start the peer watcher: markers will be held", nd->node);
}

void peers_stop(struct nodes *nd)
{
	pthread_mutex_lock(&nd->lock);
	nd->wstop = true;
	pthread_cond_signal(&nd->wcond);
	pthread_mutex_unlock(&nd->lock);
	pthread_join(nd->watcher, NULL);
	nd->watcher_started = false;
}

/* ---- the verdict --------------------------------------------------------------- */

/* a + b, or UINT64_MAX: a margin must never wrap around into a small one. */
static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t margin_ns(struct nodes *nd, const struct wm_record *w)
{
	if (nd->opt.peer_skew >= 0)
		return (uint64_t)(nd->opt.peer_skew * 1e9);
	if (strcmp(w->boot_id, "-") != 0 && !strcmp(w->boot_id, nd->boot_id))
		return MARGIN_FLOOR_NS;		/* one machine, one clock */
	return sat_add(sat_add(MARGIN_FLOOR_NS, atomic_load(&nd->maxerror_ns)), w->maxerror_ns);
}

static double secs(uint64_t a, uint64_t b)
{
	return a > b ? (double)(a - b) / 1e9 : -(double)(b - a) / 1e9;
}

/*
 * Does peer p's record let a marker sealed at tm go?  If not, why, and
 * *lost: for a window of lost files still open (nodes->lock held).
 */
static bool record_passes(struct nodes *nd, const struct peer *p, uint64_t tm, uid_t uid,
			  char *why, size_t len, bool *lost)
{
	const struct wm_record *w = &p->wm;
	uint64_t now = wall_ns(), t = wm_before_for(w, uid);

	if (!w->valid && p->read_err == -EBADMSG) {
		snprintf(why, len, "node %s's watermark record is damaged or not one a daemon wrote "
			 "(rejected): markers wait until it writes a good one", p->name);
		return false;
	}
	if (!w->valid) {
		snprintf(why, len, "no watermark from node %s yet%s%s", p->name,
			 p->read_err ? ": " : "", p->read_err ? strerror(-p->read_err) : "");
		return false;
	}
	uint64_t m = margin_ns(nd, w), tm_m = sat_add(tm, m);
	if (w->gap_mount[0] && w->gap_open && w->gap_from_ns < tm_m && !w->lost_files) {
		/* No file known lost: its own record was damaged (N5), so what it carried is unknown. */
		snprintf(why, len, "node %s's record was damaged (mount %s; no file is known "
			 "lost): its seals from %.3f s before the marker on stay unconfirmed until "
			 "`ckptfs-ctl ack-lost` on that node, or marker_policy=release", p->name,
			 w->gap_mount, secs(tm, w->gap_from_ns));
		*lost = true;
		return false;
	}
	if (w->gap_mount[0] && w->gap_open && w->gap_from_ns < tm_m) {
		snprintf(why, len, "node %s stopped uncleanly (mount %s), %llu file%s lost; its "
			 "seals from %.3f s before the marker on stay unconfirmed (it may name a "
			 "lost file) until `ckptfs-ctl ack-lost` on that node, or marker_policy=release",
			 p->name, w->gap_mount, (unsigned long long)w->lost_files,
			 w->lost_files == 1 ? "" : "s", secs(tm, w->gap_from_ns));
		*lost = true;
		return false;
	}
	if (w->gap_mount[0] && !w->gap_open && w->gap_from_ns < tm_m &&
	    sat_add(w->gap_to_ns, m) > tm) {
		snprintf(why, len, "node %s stopped uncleanly (mount %s) without confirming what it "
			 "sealed from %.3f s before the marker on (%llu files lost): only "
			 "marker_policy=release lets it go", p->name, w->gap_mount,
			 secs(tm, w->gap_from_ns), (unsigned long long)w->lost_files);
		return false;
	}
	if (w->skipped && w->skipped_from_ns < tm_m) {
		snprintf(why, len, "an administrator skipped %llu operation%s on node %s, sealed from "
			 "%.3f s before the marker on: they never reach the backend, and the marker "
			 "may name them: only marker_policy=release lets it go",
			 (unsigned long long)w->skipped, w->skipped == 1 ? "" : "s", p->name,
			 secs(tm, w->skipped_from_ns));
		return false;
	}
	if (t >= tm_m)
		return true;
	/*
	 * A record saying the peer stopped cleanly proves nothing about seals
	 * after it: a client that caches (GlusterFS, NFS) may still show it
	 * after the peer's next mount wrote a new one.  Only T counts.
	 */
	const struct lease_record *l = &p->lease;
	char mine[96] = "";
	if (t == w->before_ns && w->others_before_ns > t)	/* uid is listed (N3) */
		snprintf(mine, sizeof(mine), "; an operation of uid %u failed there and is pending",
			 (unsigned)uid);
	if (w->stopped)
		snprintf(why, len, "node %s stopped cleanly %.3f s before the marker; it confirms "
			 "the marker once it is mounted again", p->name, secs(tm, t));
	else if (l->valid && !l->released && now > l->heartbeat_ns && now - l->heartbeat_ns > l->ttl_ns)
		snprintf(why, len, "node %s's durable watermark is %.3f s short of the marker, and "
			 "its lease expired %.1f s ago (is its daemon dead?)%s", p->name,
			 secs(tm_m, t), secs(now, l->heartbeat_ns + l->ttl_ns), mine);
	else
		snprintf(why, len, "node %s's durable watermark is %.3f s short of the marker (margin "
			 "%.3f s)%s", p->name, secs(tm_m, t), (double)m / 1e9, mine);
	return false;
}

/* record_passes, saying when the record it judged by is an earlier one (N4). */
static bool peer_passes(struct nodes *nd, const struct peer *p, uint64_t tm, uid_t uid,
			char *why, size_t len, bool *lost)
{
	if (record_passes(nd, p, tm, uid, why, len, lost))
		return true;
	size_t n = strlen(why);
	if (p->wm.valid && p->read_err && n < len)
		snprintf(why + n, len - n, " (its record could not be read at the last look: %s; "
			 "the one read %.1f s ago counts)", strerror(-p->read_err),
			 secs(now_ns(), p->good_ns));
	return false;
}

/*
 * With peers=N and a job id (job=, or $SLURM_JOB_ID), a daemon of another
 * job over the same backend directory is not one of this job's nodes: it
 * must not stand in for a node of this job that died.  A peer whose record
 * names no job (or is older than format 5) is not counted either.  One not
 * read yet is kept: it is waited for, as before.
 */
static bool peer_of_this_job(const struct nodes *nd, const struct peer *p)
{
	return !nd->opt.job[0] || !p->wm.valid || !strcmp(p->wm.job, nd->opt.job);
}

/*
 * Do the peers let a marker sealed at tm go?  waiting/why/lost: the first
 * peer it waits for (peer_passes).
 */
static bool peers_pass(struct nodes *nd, uint64_t tm, uid_t uid, char *waiting, size_t wlen,
		       char *why, size_t len, bool *lost)
{
	unsigned passed = 0, need;
	char one[512];
	bool l;

	waiting[0] = why[0] = '\0';
	*lost = false;
	if (!count_mode(nd)) {
		for (unsigned i = 0; i < nd->npeers; i++) {
			if (peer_passes(nd, &nd->peers[i], tm, uid, one, sizeof(one), lost))
				continue;
			snprintf(waiting, wlen, "%s", nd->peers[i].name);
			snprintf(why, len, "%s", one);
			return false;
		}
		return true;
	}
	need = nd->opt.peers_count - 1;
	unsigned known = 0, other_jobs = 0;
	for (unsigned i = 0; i < nd->npeers; i++) {
		if (!peer_of_this_job(nd, &nd->peers[i])) {
			other_jobs++;
			continue;
		}
		known++;
		l = false;
		if (peer_passes(nd, &nd->peers[i], tm, uid, one, sizeof(one), &l)) {
			passed++;
		} else if (!waiting[0]) {
			*lost = l;
			snprintf(waiting, wlen, "%s", nd->peers[i].name);
			snprintf(why, len, "%s", one);
		}
	}
	if (passed >= need)
		return true;
	if (!waiting[0]) {
		snprintf(waiting, wlen, "?");
		if (nd->opt.job[0])
			snprintf(why, len, "%u of the %u other nodes have confirmed it; %u of job %s "
				 "are known (%u of other jobs not counted)", passed, need, known,
				 nd->opt.job, other_jobs);
		else
			snprintf(why, len, "%u of the %u other nodes have confirmed it; %u are known",
				 passed, need, known);
	}
	return false;
}

/* ---- the hold hook ------------------------------------------------------------- */

static struct held_marker *held_find(struct nodes *nd, uint64_t seq)
{
	for (unsigned i = 0; i < nd->nheld; i++)
		if (nd->held[i].seq == seq)
			return &nd->held[i];
	return NULL;
}

static void held_remove(struct nodes *nd, struct held_marker *h)
{
	*h = nd->held[--nd->nheld];
}

/* A new entry for seq (nodes->lock held): never refused, see nodes->held. */
static struct held_marker *held_add(struct nodes *nd, uint64_t seq)
{
	if (nd->nheld == nd->held_cap) {
		nd->held_cap = nd->held_cap ? nd->held_cap * 2 : 16;
		nd->held = xrealloc(nd->held, nd->held_cap * sizeof(*nd->held));
	}
	struct held_marker *h = &nd->held[nd->nheld++];
	memset(h, 0, sizeof(*h));
	h->seq = seq;
	return h;
}

static bool op_pending_locked(struct backend *be, uint64_t seq)
{
	for (struct list *e = be->ops.next; e != &be->ops; e = e->next) {
		const struct op *op = list_entry(e, struct op, link);
		if (op->seq == seq)
			return !op->skipped;
	}
	return false;
}

void nodes_held_prune_locked(struct nodes *nd)
{
	for (unsigned i = 0; i < nd->nheld;) {
		if (op_pending_locked(nd->be, nd->held[i].seq))
			i++;
		else		/* applied after a pass or the policy let it go, or skipped */
			held_remove(nd, &nd->held[i]);
	}
}

bool nodes_held_locked(struct nodes *nd, uint64_t seq)
{
	struct held_marker *h = held_find(nd, seq);
	return h && !h->released;
}

uint64_t nodes_hold(struct nodes *nd, const struct op *op)
{
	char waiting[NODE_NAME_MAX + 1], why[512];
	uint64_t now = now_ns();

	if (!lease_valid(nd))
		return 1000ull * 1000000;	/* N2: nothing more from this daemon */
	if (!nodes_opts_have_peers(&nd->opt) || !op_is_marker(op))
		return 0;
	pthread_mutex_lock(&nd->lock);
	bool lost;
	bool pass = peers_pass(nd, op->sealed_wall_ns, op->actor, waiting, sizeof(waiting), why,
			       sizeof(why), &lost);
	struct held_marker *h = held_find(nd, op->seq);
	if (pass) {
		if (h) {
			uint64_t waited = now - h->since_ns;
			atomic_store(&nd->marker_wait_ns_last, waited);
			log_info("marker %s (operation %llu) released after %.3f s: every peer has "
				 "confirmed what it sealed before it", h->path, (unsigned long long)op->seq,
				 (double)waited / 1e9);
			held_remove(nd, h);
		}
		pthread_mutex_unlock(&nd->lock);
		return 0;
	}
	if (h && h->released) {		/* released by the policy */
		pthread_mutex_unlock(&nd->lock);
		return 0;
	}
	if (!h) {
		struct backend_blocked b;
		pthread_mutex_unlock(&nd->lock);
		blocked_fill(nd->be, op, &b);	/* takes bt_lock: not under nodes->lock */
		pthread_mutex_lock(&nd->lock);
		if ((h = held_find(nd, op->seq)) == NULL) {
			h = held_add(nd, op->seq);
			h->since_ns = now;
			h->since_wall_ns = wall_ns();
			h->sealed_wall_ns = op->sealed_wall_ns;
			snprintf(h->path, sizeof(h->path), "%s", b.path[0] ? b.path : "/");
			atomic_fetch_add(&nd->markers_held_total, 1);
			log_info("marker %s (operation %llu) held: %s", h->path,
				 (unsigned long long)op->seq, why);
			h->lost_logged = lost;
		}
	}
	if (lost && !h->lost_logged)	/* the first reason may have been another */
		log_warn("marker %s (operation %llu) held for node %s: %s", h->path,
			 (unsigned long long)op->seq, waiting, why);
	h->lost_logged = lost;
	snprintf(h->waiting, sizeof(h->waiting), "%s", waiting);
	snprintf(h->reason, sizeof(h->reason), "%s", why);
	bool wake = now >= nd->fast_until_ns;
	nd->fast_until_ns = now + FAST_FOR_NS;
	if (wake)
		pthread_cond_signal(&nd->wcond);
	double timeout = nd->opt.marker_timeout;
	if (timeout > 0 && (double)(now - h->since_ns) / 1e9 >= timeout) {
		if (nd->opt.marker_policy == MARKER_RELEASE) {
			log_warn("marker %s (operation %llu) released after %g s although node %s has "
				 "not confirmed it (marker_policy=release): %s", h->path,
				 (unsigned long long)op->seq, timeout, waiting, why);
			atomic_fetch_add(&nd->markers_released_by_policy, 1);
			h->released = true;
			pthread_mutex_unlock(&nd->lock);
			return 0;
		}
		if (now - h->since_ns >= (uint64_t)(timeout * 1e9) * ((uint64_t)h->warned + 1)) {
			log_warn("marker %s (operation %llu) still held for node %s after %.1f s "
				 "(marker_policy=hold): %s", h->path, (unsigned long long)op->seq, waiting,
				 (double)(now - h->since_ns) / 1e9, why);
			h->warned++;
		}
	}
	uint64_t again = hold_wait_ns(now - h->since_ns, HOLD_RECHECK_NS);
	pthread_mutex_unlock(&nd->lock);
	return again;
}

/* ---- reports ------------------------------------------------------------------- */

bool nodes_held_report(struct nodes *nd, struct held_marker *out, unsigned *count)
{
	struct backend *be = nd->be;
	bool any = false;

	*count = 0;
	pthread_mutex_lock(&be->lock);
	pthread_mutex_lock(&nd->lock);
	nodes_held_prune_locked(nd);
	for (unsigned i = 0; i < nd->nheld; i++) {
		const struct held_marker *h = &nd->held[i];
		if (h->released)
			continue;
		(*count)++;
		if (!any || h->seq < out->seq)
			*out = *h;
		any = true;
	}
	pthread_mutex_unlock(&nd->lock);
	pthread_mutex_unlock(&be->lock);
	return any;
}

void nodes_peer_summary(struct nodes *nd, unsigned *known, char *behind, size_t len,
			double *behind_s)
{
	uint64_t now = wall_ns(), worst = UINT64_MAX;

	behind[0] = '\0';
	*behind_s = 0;
	pthread_mutex_lock(&nd->lock);
	*known = 0;
	for (unsigned i = 0; i < nd->npeers; i++) {
		const struct peer *p = &nd->peers[i];
		if (!p->wm.valid || (count_mode(nd) && !peer_of_this_job(nd, p)))
			continue;	/* another job's daemon is not one of ours */
		(*known)++;
		if (p->wm.before_ns < worst) {
			worst = p->wm.before_ns;
			snprintf(behind, len, "%s", p->name);
			*behind_s = secs(now, worst);
		}
	}
	pthread_mutex_unlock(&nd->lock);
}
