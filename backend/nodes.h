/*
 * nodes.h — one daemon among many over one backend: its node identity and
 * exclusivity (lease.c), its durable watermark (watermark.c), its peers'
 * watermarks and the markers that wait for them (peers.c), and which
 * operations are markers (marker.c).  No coordinator of our own: the
 * parallel file system is the shared medium (DESIGN "Beyond one node";
 * docs/contract.md "Beyond one node").
 *
 * Everything lives under BACKEND/.ckptfs/nodes/<node>/:
 *   lock            flock(2)ed by the live daemon (it keeps other clients
 *                   out only where the backend shares flock: opt.flock_local);
 *   lease.json      who holds the node: mount id, pid, host, boot id,
 *                   heartbeat (wall clock) and ttl — for backends whose
 *                   flock does not reach across clients;
 *   watermark.json  "every operation sealed on this node before wall time
 *                   T is durable (seq N)", with the clock's error bound and,
 *                   after an unclean stop, the window whose operations may
 *                   have been lost, and what an administrator skipped;
 *   manifest.log, state.json  the manifest (manifest.c).
 * Records are written whole: temporary name, write, fsync, rename,
 * directory fsync — all through bsys.
 *
 * Invariants (tests cite them as N1..N6):
 *  N1  at most one live daemon holds a node: a second is refused (exit 2)
 *      while the holder's flock is held, or its lease is fresh; a dead
 *      holder's lease is taken over only once it has expired beyond the
 *      clocks' margin (at once when the holder provably died: same host,
 *      and its boot ended or its pid is gone);
 *  N2  recovery and every write to the node directory happen only while
 *      the lease is held; a daemon that finds its lease taken (it was
 *      stopped past the ttl) stops publishing and says so;
 *  N3  a watermark (T, seq) is written only when every operation sealed on
 *      this node before T is durable, markers held for peers excepted: T is
 *      the seal time of the oldest other pending operation, or when none is
 *      pending a time no later seal can precede (seal times never go back:
 *      backend.h's wall floor), lowered by how far the floor put a pending
 *      seal's stamp, or the next one's, past the clock after it stepped
 *      back (peers' margins cover the clocks' error, not the floor).  (Counting its own held markers would let
 *      two nodes' markers sealed within the skew margin wait for each other
 *      forever; a held marker is a marker, not a shard another checkpoint
 *      needs.)  The record also gives a second T, for markers of every
 *      actor but those it lists: the same bound over the operations of the
 *      unlisted actors alone.  It lists the actors with an operation that
 *      failed and is still pending (at most NODES_WM_UIDS_MAX; with more,
 *      none, and the second T is T): one user's blocked operation does
 *      not hold back another user's markers on other nodes (contract item
 *      3).  Sound because a marker names only its own user's files (the
 *      contract, "Beyond one node": a job runs as one uid on every node), and
 *      an unlisted user's operations held back by a listed user's count in
 *      that second T as its own;
 *  N4  a marker is applied only after every peer's watermark T for the
 *      marker's actor (N3) has passed its seal time plus the skew margin
 *      for that peer, or after
 *      marker_timeout under marker_policy=release, which is logged; a
 *      held marker holds back only what the publisher's order puts after
 *      it (its actor's later operations and its dependants).  A peer's
 *      record that cannot be read (gone for a moment while the peer
 *      replaces it, an I/O error) leaves the last good one in force: what
 *      a record says of the seals before its T stays true (seals stamped
 *      later are stamped past it, N3, and whatever a later incarnation
 *      loses was sealed after it), so an old record only holds more.  One
 *      that no daemon writes (damaged) replaces it and holds every marker;
 *  N5  a peer that stopped uncleanly reports the window of seal times its
 *      lost incarnation had not confirmed (from 0 when its last record
 *      cannot be read; also after a clean stop, when its own record is there
 *      but damaged: what it carried on is unknown, so the window is open
 *      from 0 until ack-lost); a marker sealed inside that window is never
 *      released by a watermark, only by the policy.  The window ends at
 *      the restart when recovery found nothing lost; when files were lost
 *      (sealed, never published) it stays open — every later marker is
 *      held too, since one sealed after the restart may still name a lost
 *      file — until an administrator acknowledges the loss (ckptfs-ctl
 *      ack-lost): then it ends at the acknowledgement.  Every later mount
 *      carries the window on, open or acknowledged, whatever its stop.
 *  N6  a node on which an administrator skipped operations (they never
 *      reach the backend, and T passes them) reports how many and the
 *      earliest one's seal time, carried on by every later mount; a peer's
 *      marker sealed at or after that time less the margin is never
 *      released by a watermark, only by the policy.
 *
 * Threads: the node keeper (watermark.c: watermarks and lease heartbeats)
 * and, with peers, the peer watcher (peers.c).  Lock order: be->lock ->
 * nodes->lock (a leaf; the hold hook takes it under be->lock).
 */
#ifndef CKPTFS_NODES_H
#define CKPTFS_NODES_H

#include "cache/util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct backend;
struct op;

#define NODE_NAME_MAX 255
#define NODES_PEERS_MAX 4096
#define NODES_JOB_MAX 63

enum marker_policy { MARKER_HOLD, MARKER_RELEASE };

/* What the command line chose (fs/opts.c fills it). */
struct nodes_opts {
	char node[NODE_NAME_MAX + 1];	/* "" : the default (short hostname) */
	/*
	 * job=ID (default $SLURM_JOB_ID; "": none): written in the watermark
	 * record; with peers=N only peers whose record names it are counted.
	 */
	char job[NODES_JOB_MAX + 1];
	unsigned peers_count;		/* peers=N: the job has N nodes, this one included */
	char **peer_names;		/* peers=a:b:c (this node left out) */
	unsigned npeer_names;
	double peer_skew;		/* seconds; < 0: derived from the clocks */
	double marker_timeout;		/* seconds; 0: never */
	enum marker_policy marker_policy;
	double lease_ttl;		/* seconds */
	char flock_local[256];		/* "": the backend's flock reaches every client;
					 * else why it may not (fs/opts.c finds out) */
};

static inline bool nodes_opts_have_peers(const struct nodes_opts *o)
{
	return o->peers_count > 1 || o->npeer_names > 0;
}

/* Is name usable as a node name (one path component, not hidden)? */
bool nodes_name_ok(const char *name);
/*
 * Is id usable as a job id (1-63 letters, digits, '.', '-', '_', '+',
 * starting with a letter or digit; not "none", which job= takes for none)?
 */
bool nodes_job_ok(const char *id);
/* peers=N or peers=a:b:c into o: 0, or -EINVAL with one line in why. */
int nodes_parse_peers(struct nodes_opts *o, const char *val, char *why, size_t len);
void nodes_opts_free(struct nodes_opts *o);

/* ---- a peer's watermark record, as read from the backend ---------------- */

#define NODES_WM_FILE "watermark.json"
/* A watermark record's most bytes (a 255-byte node name, 16 uids, a job id). */
#define NODES_WM_BUF 1536
/* The kernel's cap on a clock's maxerror (NTP_PHASE_LIMIT, 16 s): an unsynchronized clock's. */
#define NODES_MAXERROR_MAX_NS (16ull * 1000000000)
/* Failing actors a record lists (N3); with more, it lists none: one T for all. */
#define NODES_WM_UIDS_MAX 16

struct wm_record {
	bool valid;
	char node[NODE_NAME_MAX + 1];
	char mount_id[24];
	char boot_id[40];
	uint64_t seq;
	uint64_t before_ns;	/* T: everything sealed before it is durable */
	uint64_t written_ns;	/* its own clock when written */
	uint64_t maxerror_ns;	/* its clock's error bound */
	bool synced;
	bool stopped;		/* the daemon stopped cleanly after writing it */
	uint64_t gap_from_ns, gap_to_ns;	/* N5: seal times possibly lost (0, 0: none) */
	char gap_mount[24];
	/*
	 * N5: the window has no end: files were lost and no administrator has
	 * acknowledged it (format 3: gap_to_ns 0; a format-2 record reporting
	 * lost files is read as open: those daemons ended it at the restart).
	 */
	bool gap_open;
	uint64_t lost_files;	/* lost in the window's unclean stops, summed */
	uint64_t skipped;	/* N6: operations skipped by the administrator (0: none) */
	uint64_t skipped_from_ns;	/* the earliest one's seal time */
	/*
	 * N3 per actor (format 4): T for markers of every uid but the listed
	 * ones — the actors with an operation that failed and is still pending
	 * there, ascending, at most NODES_WM_UIDS_MAX (none listed:
	 * others_before_ns is before_ns).  Older formats: none, before_ns.
	 */
	uint64_t others_before_ns;
	char job[NODES_JOB_MAX + 1];	/* format 5: the writer's job= ("": none, or older) */
	unsigned nblocked;
	uint32_t blocked_uids[NODES_WM_UIDS_MAX];
};
/* Parse a watermark record (a flat JSON object): true if it is one. */
bool wm_parse(const char *text, size_t len, struct wm_record *r);
/* T for a marker of `uid` (N3): others_before_ns unless the record lists uid. */
uint64_t wm_before_for(const struct wm_record *r, uid_t uid);

/* ---- the lease ----------------------------------------------------------- */

struct lease_record {
	bool valid;
	char mount_id[24];
	char host[256];
	char boot_id[40];
	long pid;
	uint64_t heartbeat_ns;
	uint64_t ttl_ns;
	bool released;
};
bool lease_parse(const char *text, size_t len, struct lease_record *r);

/* ---- the whole ----------------------------------------------------------- */

/* A marker the hold hook is holding now (nodes->lock). */
struct held_marker {
	uint64_t seq;
	char path[512];
	char waiting[NODE_NAME_MAX + 1];	/* the first peer it waits for */
	char reason[512];
	uint64_t since_ns;	/* monotonic */
	uint64_t since_wall_ns;
	uint64_t sealed_wall_ns;
	bool released;		/* released by the timeout policy */
	bool lost_logged;	/* held now for a peer's open window of lost files, logged */
	unsigned warned;	/* times the timeout was logged */
};

struct peer {
	char name[NODE_NAME_MAX + 1];
	struct wm_record wm;	/* the last good record read (nodes->lock); see N4 */
	struct lease_record lease;
	uint64_t good_ns;	/* monotonic: when wm was read */
	int read_err;		/* -errno of the last read, 0 */
};

struct nodes {
	struct backend *be;
	struct nodes_opts opt;	/* peer_names: without this node */
	bool list_mode;		/* peers named (even if only this node): no discovery */
	char node[NODE_NAME_MAX + 1];
	char host[256];
	char boot_id[40];
	int dirfd;		/* BACKEND/.ckptfs/nodes/<node> */
	int nodes_fd;		/* BACKEND/.ckptfs/nodes */
	int lock_fd;
	bool flock_held;	/* the lock is ours: no other daemon on this host has it */
	bool flock_ok;		/* ... and none on any other client (opt.flock_local "") */
	bool taken;		/* the lease was taken: only then is anything written */
	atomic_bool lease_lost;
	uint64_t started_wall_ns;
	char took_over[24];	/* the unreleased lease's mount taken over ("" : none) */
	struct wm_record prev;	/* this node's record left by the previous mount */
	struct wm_record gap;	/* what this incarnation reports about the last (N5);
				 * changed later only by the keeper (ack-lost), under
				 * nodes->lock */

	/* the node keeper (watermark.c) */
	pthread_t keeper;
	bool keeper_started;
	pthread_mutex_t klock;
	pthread_cond_t kcond;
	bool kstop, kdirty;
	uint64_t last_lease_ns;	/* monotonic: last heartbeat attempted (the keeper's) */
	atomic_uint_least64_t lease_ok_ns;	/* monotonic: start of the last heartbeat written */
	atomic_int lease_err;	/* -errno of the last heartbeat's write, 0 */
	uint64_t last_activity_ns;
	uint64_t last_seen_seq;
	/* ack-lost requests, answered by the keeper once the record is written */
	uint64_t ack_asked, ack_done;
	int ack_err;		/* of the last one answered: 0, -ENOENT, -errno */
	atomic_uint_least64_t wm_before_ns;	/* the last watermark written */
	atomic_uint_least64_t wm_seq;
	atomic_uint_least64_t wm_writes;
	atomic_int wm_err;
	atomic_uint_least64_t maxerror_ns;
	atomic_bool synced;

	/* the peers (peers.c) */
	pthread_t watcher;
	bool watcher_started;
	pthread_mutex_t lock;	/* everything below; a leaf */
	pthread_cond_t wcond;
	bool wstop;
	struct peer *peers;
	unsigned npeers;
	/*
	 * Markers held, or released by the policy and not yet applied: one
	 * entry each, however many (a marker without one would get no timeout
	 * and count in T); pruned once applied or skipped.
	 */
	struct held_marker *held;
	unsigned nheld, held_cap;
	uint64_t fast_until_ns;	/* poll fast until then (a marker is held) */
	atomic_uint_least64_t markers_held_total;
	atomic_uint_least64_t markers_released_by_policy;
	atomic_uint_least64_t marker_wait_ns_last;	/* how long the last held marker waited */
	atomic_uint_least64_t peer_reads;	/* peers' records read (the watcher's looks) */
	/*
	 * N3: the failing actors the last record written lists (the keeper
	 * writes them, stats read them); wm_blocked_all: more than it can
	 * list, so it lists none and gives one T for every actor.
	 */
	uint32_t wm_blocked_uids[NODES_WM_UIDS_MAX];
	unsigned wm_nblocked;
	bool wm_blocked_all;
};

/*
 * Take the node (N1) before anything touches its directory: 0, or
 * -EADDRINUSE (another live daemon holds it; the line naming it is printed),
 * or another -errno with a line printed.
 */
int nodes_start(struct nodes *nd, struct backend *be, int root_fd, const char *mount_id,
		const struct nodes_opts *opt);
/* After recovery: start the keeper (and the watcher with peers). */
int nodes_run(struct nodes *nd);
/*
 * Stop the threads; if the node was taken, write the final watermark (clean:
 * "stopped") and release the lease.  Also after a failed nodes_start.
 */
void nodes_stop(struct nodes *nd, bool clean);

/* The backend's hooks (backend.h), called through the front end's. */
uint64_t nodes_hold(struct nodes *nd, const struct op *op);
void nodes_published(struct nodes *nd);

/*
 * N5: an administrator acknowledges the files lost in this node's unclean
 * stop: its open window ends now, in a record written before this returns.
 * 0 (*out: the window as written), -ENOENT (no open window), or -errno (the
 * record could not be written: the window stays open).
 */
int nodes_ack_lost(struct nodes *nd, struct wm_record *out);
/* For stats: the window this node reports (N5); out->gap_mount "" : none. */
void nodes_gap_report(struct nodes *nd, struct wm_record *out);

/*
 * For stats: the actors with a failed operation pending that this node's
 * last record listed (N3), ascending, into uids (NODES_WM_UIDS_MAX room):
 * how many; *all: too many to list (one T for every actor).
 */
unsigned nodes_blocked_report(struct nodes *nd, uint32_t *uids, bool *all);
/* For stats: the held marker (lowest seq) still pending; false if none. */
bool nodes_held_report(struct nodes *nd, struct held_marker *out, unsigned *count);
/* Peers known and how many have passed now; and the one furthest behind. */
void nodes_peer_summary(struct nodes *nd, unsigned *known, char *behind, size_t len,
			double *behind_s);

/* ---- lease.c (used by watermark.c) ---- */
/*
 * Take the node: its lock, and without a working flock its lease record
 * (which then must exclude before recovery).  0 or -EADDRINUSE (refused,
 * one line printed) or -errno.
 */
int lease_acquire(struct nodes *nd, const char *mount_id);
/* After recovery: write the lease record (where the lock excluded until now). */
void lease_record(struct nodes *nd);
/* Rewrite lease.json with a new heartbeat; -EADDRINUSE if another daemon took it. */
int lease_heartbeat(struct nodes *nd);
/*
 * Is the lease still ours?  0, or -EADDRINUSE (and lease_lost set, logged).
 * Without flock a lease not renewed within its ttl is lost whatever the
 * record reads (a client cache may show our own stale record): another
 * daemon may rightly have taken the node.
 */
int lease_check(struct nodes *nd);
/* The same without reading the record (no I/O): false once lost or expired. */
bool lease_valid(struct nodes *nd);
void lease_release(struct nodes *nd);
/* Read a small file of dirfd whole into buf (NUL-terminated): its length or -errno. */
ssize_t nodes_read_file(int dirfd, const char *name, char *buf, size_t len);

/* ---- peers.c (used by watermark.c) ---- */
/* Is seq a marker held for peers now?  (nodes->lock held) */
bool nodes_held_locked(struct nodes *nd, uint64_t seq);
/* Forget markers no longer pending: applied or skipped (be->lock and nodes->lock held). */
void nodes_held_prune_locked(struct nodes *nd);

/* ---- watermark.c ---- */
/* The clock's error bound (adjtimex), sampled into nd. */
void nodes_clock_sample(struct nodes *nd);

#endif
