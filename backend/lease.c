/*
 * lease.c — node identity and exclusivity (nodes.h N1, N2): one live daemon
 * per node directory BACKEND/.ckptfs/nodes/<node>/.
 *
 * Two locks, because parallel file systems differ:
 *   lock        an flock(2) on this file, held for the daemon's life.  Where
 *               the backend's flock reaches every client (local disks,
 *               GlusterFS, Lustre with -o flock, GPFS, NFS with its lock
 *               protocol) a second daemon is refused at once, and the lock
 *               goes with the dead;
 *   lease.json  who holds the node — mount id, pid, host, boot id — with a
 *               heartbeat (wall clock) renewed every ttl/4 and a ttl.  Where
 *               flock is missing or local to one client (NFS with nolock or
 *               local_lock, Lustre with localflock, types not known to share
 *               it: fs/mounts.c), a fresh lease refuses a second daemon.
 * flock succeeding proves nothing about other clients (a client-local lock
 * succeeds too), so whether it reaches them is judged from the backend's
 * type and mount options (opt.flock_local), never from the call.
 * Taking the node:
 *   1. flock LOCK_EX|LOCK_NB: held elsewhere -> refused (the holder is alive);
 *      unsupported (ENOLCK, EOPNOTSUPP, ...), or local to this client -> the
 *      lease decides across clients, and the log says so;
 *   2. read lease.json.  Released, or ours, or absent: free.  Otherwise the
 *      holder is dead, and the node taken over, when (a) it ran on this host
 *      and either its boot ended (boot id) or, flock working, we got the
 *      lock, or its pid is gone; or (b) its heartbeat is older than its ttl
 *      (by this node's clock).  Else refused: exit 2, one line naming the
 *      node and the holder;
 *   3. write our lease; without a working flock, wait a moment and read it
 *      back, so that of two daemons racing, one loses (the last rename wins).
 * The heartbeat first reads the lease: if another daemon took it (this one
 * was stopped longer than the ttl) the lease is lost (N2): publishing stops
 * (the hold hook holds everything), stats and the log say so.  A clean stop
 * marks the lease released and unlocks.
 *
 * Every call on the backend goes through bsys.  Records are flat JSON in a
 * fixed key order that only ckptfs writes; node names and hosts never need
 * escaping (nodes_name_ok allows letters, digits, '.', '-', '_'; hosts are cleaned).
 */
#include "backend/nodes.h"
#include "backend/backend.h"
#include "backend/bsys.h"
#include "cache/log.h"

#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#define LEASE_FILE "lease.json"
#define LEASE_READ_TRIES 6		/* a record that cannot be read, asked again ... */
#define LEASE_READ_GAP_US 500000	/* ... this far apart (3 s in all) */
#define LOCK_FILE "lock"
#define RACE_SETTLE_US (200 * 1000)	/* without a lock for every client: read our lease back after this */

/* ---- names and options ---------------------------------------------------- */

/* 1..max bytes of letters, digits and the characters in `extra`, the first alphanumeric or in `first`. */
static bool word_ok(const char *s, size_t max, const char *first, const char *extra)
{
	size_t n = strlen(s);

	if (n == 0 || n > max || !(isalnum((unsigned char)s[0]) || strchr(first, s[0])))
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr(extra, *s))
			return false;
	return true;
}

bool nodes_name_ok(const char *s)
{
	return word_ok(s, NODE_NAME_MAX, "_", "._-");	/* host and Slurm node names */
}

bool nodes_job_ok(const char *id)
{
	/* Slurm's: 1234, 1234_7 (arrays), 1234+1 (heterogeneous); "-" in a record: none */
	return word_ok(id, NODES_JOB_MAX, "", "._+-") && strcmp(id, "none") != 0;
}

int nodes_parse_peers(struct nodes_opts *o, const char *val, char *why, size_t len)
{
	char *end;
	unsigned long n;

	for (unsigned i = 0; i < o->npeer_names; i++)
		free(o->peer_names[i]);
	free(o->peer_names);
	o->peer_names = NULL;
	o->npeer_names = o->peers_count = 0;
	if (!val || !*val) {
		snprintf(why, len, "option 'peers' needs a number of nodes or a list of node names "
			 "separated by ':'");
		return -EINVAL;
	}
	n = strtoul(val, &end, 10);
	if (*val >= '0' && *val <= '9' && !*end) {
		if (n < 1 || n > NODES_PEERS_MAX) {
			snprintf(why, len, "option 'peers=%s': the job's node count must be from 1 to %d",
				 val, NODES_PEERS_MAX);
			return -EINVAL;
		}
		o->peers_count = (unsigned)n;
		return 0;
	}
	char *dup = xstrdup(val), *save = NULL;
	for (char *t = strtok_r(dup, ":", &save); t; t = strtok_r(NULL, ":", &save)) {
		if (o->npeer_names == NODES_PEERS_MAX) {
			snprintf(why, len, "option 'peers': at most %d node names", NODES_PEERS_MAX);
			free(dup);
			return -EINVAL;
		}
		if (!nodes_name_ok(t)) {
			snprintf(why, len, "option 'peers': '%.64s' is not a node name (letters, "
				 "digits, '.', '-' and '_', not starting with '.' or '-')", t);
			free(dup);
			return -EINVAL;
		}
		bool dup_name = false;
		for (unsigned i = 0; i < o->npeer_names; i++)
			dup_name |= !strcmp(o->peer_names[i], t);
		if (dup_name)
			continue;
		o->peer_names = xrealloc(o->peer_names, (o->npeer_names + 1) * sizeof(char *));
		o->peer_names[o->npeer_names++] = xstrdup(t);
	}
	free(dup);
	if (!o->npeer_names) {
		snprintf(why, len, "option 'peers=%s' names no node", val);
		return -EINVAL;
	}
	return 0;
}

void nodes_opts_free(struct nodes_opts *o)
{
	for (unsigned i = 0; i < o->npeer_names; i++)
		free(o->peer_names[i]);
	free(o->peer_names);
	o->peer_names = NULL;
	o->npeer_names = 0;
}

/* ---- small files in the node directory ------------------------------------ */

ssize_t nodes_read_file(int dirfd, const char *name, char *buf, size_t len)
{
	int fd = bsys.openat(dirfd, name, O_RDONLY, 0);
	size_t got = 0;

	if (fd < 0)
		return fd;
	while (got + 1 < len) {
		ssize_t n = bsys.pread(fd, buf + got, len - 1 - got, (off_t)got);
		if (n < 0 && n != -EINTR) {
			bsys.close(fd);
			return n;
		}
		if (n == 0)
			break;
		if (n > 0)
			got += (size_t)n;
	}
	bsys.close(fd);
	buf[got] = '\0';
	return (ssize_t)got;
}

/* ---- the lease record ------------------------------------------------------- */

#define LEASE_FMT "{\"format\": 1, \"node\": \"%s\", \"mount_id\": \"%s\", \"pid\": %ld, " \
		  "\"host\": \"%s\", \"boot_id\": \"%s\", \"heartbeat_ns\": %llu, "     \
		  "\"ttl_ns\": %llu, \"state\": \"%s\"}\n"

bool lease_parse(const char *text, size_t len, struct lease_record *r)
{
	char node[NODE_NAME_MAX + 1], state[16];
	unsigned long long hb, ttl;
	int fmt;

	memset(r, 0, sizeof(*r));
	if (!len || text[len] != '\0')
		return false;
	if (sscanf(text, "{\"format\": %d, \"node\": \"%255[^\"]\", \"mount_id\": \"%23[^\"]\", "
		   "\"pid\": %ld, \"host\": \"%255[^\"]\", \"boot_id\": \"%39[^\"]\", "
		   "\"heartbeat_ns\": %llu, \"ttl_ns\": %llu, \"state\": \"%15[a-z]\"}",
		   &fmt, node, r->mount_id, &r->pid, r->host, r->boot_id, &hb, &ttl, state) != 9 ||
	    fmt != 1)
		return false;
	r->heartbeat_ns = hb;
	r->ttl_ns = ttl;
	r->released = !strcmp(state, "released");
	r->valid = true;
	return true;
}

static int lease_write(struct nodes *nd, const char *mount_id, bool released)
{
	char buf[1024], tmp[64];
	int n = snprintf(buf, sizeof(buf), LEASE_FMT, nd->node, mount_id, (long)getpid(), nd->host,
			 nd->boot_id, (unsigned long long)wall_ns(),
			 (unsigned long long)(nd->opt.lease_ttl * 1e9), released ? "released" : "held");

	snprintf(tmp, sizeof(tmp), LEASE_FILE ".%s.tmp", mount_id);
	return manifest_write_file(nd->dirfd, LEASE_FILE, tmp, buf, (size_t)n);
}

static int lease_read(struct nodes *nd, struct lease_record *r)
{
	char buf[1024];
	ssize_t n = nodes_read_file(nd->dirfd, LEASE_FILE, buf, sizeof(buf));

	memset(r, 0, sizeof(*r));
	if (n < 0)
		return (int)n;
	return lease_parse(buf, (size_t)n, r) ? 0 : -EBADMSG;
}

/* ---- taking the node ---------------------------------------------------------- */

static bool pid_alive(long pid)
{
	return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

/*
 * How far the holder's heartbeat stamp and this node's clock may disagree:
 * nothing on one host (one clock); -o peer_skew when given; else both
 * clocks' error bounds, the holder's from the watermark record its mount
 * left (the kernel's cap when it left none).  Its lease ends after ttl by
 * its own clock, where it stops publishing (lease_valid); here only after
 * ttl plus this margin by ours.
 */
static uint64_t lease_skew_ns(struct nodes *nd, const struct lease_record *r)
{
	struct wm_record w;
	char buf[1024];
	uint64_t theirs = NODES_MAXERROR_MAX_NS;

	if (!strcmp(r->host, nd->host) && !strcmp(r->boot_id, nd->boot_id))
		return 0;
	if (nd->opt.peer_skew >= 0)
		return (uint64_t)(nd->opt.peer_skew * 1e9);
	nodes_clock_sample(nd);
	ssize_t n = nodes_read_file(nd->dirfd, NODES_WM_FILE, buf, sizeof(buf));
	if (n > 0 && wm_parse(buf, (size_t)n, &w) && !strcmp(w.mount_id, r->mount_id))
		theirs = w.maxerror_ns;
	return atomic_load(&nd->maxerror_ns) + theirs;
}

/*
 * Is the holder described by r provably gone, or its lease expired?  why
 * gets how we know, for the log.
 */
static bool holder_dead(struct nodes *nd, const struct lease_record *r, char *why, size_t len)
{
	uint64_t now = wall_ns();

	if (!strcmp(r->host, nd->host)) {
		if (strcmp(r->boot_id, nd->boot_id) != 0) {
			snprintf(why, len, "its host %s has rebooted since", r->host);
			return true;
		}
		if (nd->flock_held) {	/* even a client-local lock is this host's */
			snprintf(why, len, "it no longer holds the node's lock");
			return true;
		}
		if (!pid_alive(r->pid)) {
			snprintf(why, len, "its process %ld is gone", r->pid);
			return true;
		}
	}
	uint64_t skew = lease_skew_ns(nd, r);
	if (now > r->heartbeat_ns && now - r->heartbeat_ns > r->ttl_ns &&
	    now - r->heartbeat_ns - r->ttl_ns > skew) {
		snprintf(why, len, "its lease expired %.1f s ago, beyond the clocks' margin of "
			 "%.1f s", (double)(now - r->heartbeat_ns - r->ttl_ns) / 1e9, (double)skew / 1e9);
		return true;
	}
	return false;
}

static void refuse_line(struct nodes *nd, const struct lease_record *r, const char *how)
{
	uint64_t now = wall_ns();
	double age = r->valid && now > r->heartbeat_ns ? (double)(now - r->heartbeat_ns) / 1e9 : 0;

	if (r->valid)
		fprintf(stderr, "ckptfs: node '%s' is held by a live daemon (mount %s, pid %ld on "
			"host %s, last heartbeat %.1f s ago%s); pick another -o node= or stop that "
			"daemon first\n", nd->node, r->mount_id, r->pid, r->host, age, how);
	else
		fprintf(stderr, "ckptfs: node '%s' is held by a live daemon (%s); pick another "
			"-o node= or stop that daemon first\n", nd->node, how);
}

/* Remove leftover temporary files of earlier holders (we hold the node now). */
static int tmp_sweep_one(void *arg, const char *name)
{
	struct nodes *nd = arg;
	size_t n = strlen(name);

	if (n > 4 && !strcmp(name + n - 4, ".tmp") &&
	    (!strncmp(name, LEASE_FILE ".", sizeof(LEASE_FILE)) ||
	     !strncmp(name, NODES_WM_FILE ".", sizeof(NODES_WM_FILE))))
		bsys.unlinkat(nd->dirfd, name, 0);
	return 0;
}

int lease_acquire(struct nodes *nd, const char *mount_id)
{
	struct lease_record cur;
	char why[384] = "";
	int r;

	nd->lock_fd = bsys.openat(nd->dirfd, LOCK_FILE, O_RDWR | O_CREAT, 0644);
	if (nd->lock_fd < 0) {
		fprintf(stderr, "ckptfs: cannot open the lock of node '%s' on the backend: %s\n",
			nd->node, strerror(-nd->lock_fd));
		return nd->lock_fd;
	}
	r = bsys.flock(nd->lock_fd, LOCK_EX | LOCK_NB);
	if (r == -EWOULDBLOCK) {
		lease_read(nd, &cur);
		refuse_line(nd, &cur, "; it holds the node's lock");
		return -EADDRINUSE;
	}
	nd->flock_held = r == 0;
	nd->flock_ok = nd->flock_held && !nd->opt.flock_local[0];
	int flock_err = r;
	/*
	 * Where the lock keeps other clients out, a record that cannot be read
	 * is no holder.  Where it does not, it may be a live holder's record
	 * read at a bad moment (ESTALE as its heartbeat renamed a new one in,
	 * an EIO): asked again; taken as no holder only if it is not there.
	 */
	int lr = lease_read(nd, &cur);
	for (int tries = 0; !nd->flock_ok && lr < 0 && lr != -ENOENT && tries < LEASE_READ_TRIES;
	     tries++) {
		usleep(LEASE_READ_GAP_US);
		lr = lease_read(nd, &cur);
	}
	if (!nd->flock_ok && lr < 0 && lr != -ENOENT) {
		fprintf(stderr, "ckptfs: node '%s': its lease record cannot be read (%s) and the "
			"backend's flock does not keep other clients out, so a live daemon may hold "
			"it; if none does, remove %s/%s/" LEASE_FILE " on the backend\n", nd->node,
			lr == -EBADMSG ? "damaged" : strerror(-lr), MANIFEST_NODES_DIR, nd->node);
		return -EADDRINUSE;
	}
	if (lr == 0 && !cur.released && strcmp(cur.mount_id, mount_id) != 0) {
		if (!holder_dead(nd, &cur, why, sizeof(why))) {
			refuse_line(nd, &cur, "");
			return -EADDRINUSE;
		}
		log_warn("node %s: taking over from mount %s (pid %ld on %s): %s", nd->node,
			 cur.mount_id, cur.pid, cur.host, why);
		snprintf(nd->took_over, sizeof(nd->took_over), "%s", cur.mount_id);
	}
	nd->taken = true;
	nd->last_lease_ns = now_ns();
	atomic_store(&nd->lease_ok_ns, nd->last_lease_ns);
	if (nd->flock_ok)	/* the lock keeps others out: the record waits for lease_record() */
		return 0;
	/* Without a lock that reaches every client the record itself must exclude,
	 * before recovery runs. */
	if ((r = lease_write(nd, mount_id, false)) < 0) {
		fprintf(stderr, "ckptfs: cannot write the lease of node '%s' on the backend, whose "
			"flock does not keep other clients out: %s\n", nd->node, strerror(-r));
		return r;
	}
	usleep(RACE_SETTLE_US);
	if (lease_read(nd, &cur) == 0 && strcmp(cur.mount_id, mount_id) != 0) {
		refuse_line(nd, &cur, "; it took the lease as this daemon did");
		return -EADDRINUSE;
	}
	/* Said once the node is ours: a refusal is one line. */
	if (nd->flock_held)
		log_warn("node %s: the backend's flock may not reach other clients (%s): across "
			 "clients, exclusivity rests on the lease (ttl %.0f s)", nd->node,
			 nd->opt.flock_local, nd->opt.lease_ttl);
	else
		log_warn("node %s: the backend has no working flock (%s): exclusivity rests on "
			 "the lease alone (ttl %.0f s)", nd->node, strerror(-flock_err),
			 nd->opt.lease_ttl);
	return 0;
}

void lease_record(struct nodes *nd)
{
	int r = nd->flock_ok ? lease_write(nd, nd->be->mount_id, false) : 0;

	if (r < 0)
		log_warn("node %s: cannot write its lease (%s); its lock keeps other daemons out, "
			 "the heartbeat tries again", nd->node, strerror(-r));
	bsys.readdir(nd->dirfd, tmp_sweep_one, nd);
}

/* Without a lock for every client: past the ttl since the last heartbeat that reached the backend? */
static bool lease_expired(struct nodes *nd, double *silent_s)
{
	uint64_t ok = atomic_load(&nd->lease_ok_ns), now = now_ns();

	if (nd->flock_ok || !nd->taken || now <= ok)
		return false;
	*silent_s = (double)(now - ok) / 1e9;
	return *silent_s > nd->opt.lease_ttl;
}

static void lease_lose(struct nodes *nd, const char *why)
{
	if (!atomic_exchange(&nd->lease_lost, true))
		log_err("node %s: lost this node's lease: %s.  It publishes nothing more; unmount "
			"it", nd->node, why);
}

bool lease_valid(struct nodes *nd)
{
	char why[256];
	double silent;

	if (atomic_load(&nd->lease_lost))
		return false;
	if (!lease_expired(nd, &silent))
		return true;
	snprintf(why, sizeof(why), "its last heartbeat reached the backend %.1f s ago, past the "
		 "lease's ttl (%.0f s), so another daemon may hold the node now", silent,
		 nd->opt.lease_ttl);
	lease_lose(nd, why);
	return false;
}

int lease_check(struct nodes *nd)
{
	struct lease_record cur;
	char why[512];

	if (!lease_valid(nd))
		return -EADDRINUSE;
	if (lease_read(nd, &cur) == 0 && strcmp(cur.mount_id, nd->be->mount_id) != 0) {
		snprintf(why, sizeof(why), "mount %s (pid %ld on %s) has taken it; this daemon was "
			 "stopped past the lease's ttl", cur.mount_id, cur.pid, cur.host);
		lease_lose(nd, why);
		return -EADDRINUSE;
	}
	return 0;
}

int lease_heartbeat(struct nodes *nd)
{
	int r = lease_check(nd);
	uint64_t t = now_ns();

	if (r < 0)
		return r;
	nd->last_lease_ns = t;
	r = lease_write(nd, nd->be->mount_id, false);
	if (r == 0)
		atomic_store(&nd->lease_ok_ns, t);
	int was = atomic_exchange(&nd->lease_err, r);
	if (r < 0 && was != r)
		log_warn("node %s: cannot renew its lease: %s; %s", nd->node, strerror(-r),
			 nd->flock_ok ? "its lock keeps other daemons out meanwhile"
			 : "without flock, the lease is lost once no renewal reaches the backend "
			   "within its ttl");
	else if (r == 0 && was)
		log_info("node %s: its lease is renewed again", nd->node);
	return r;
}

void lease_release(struct nodes *nd)
{
	if (nd->taken && !atomic_load(&nd->lease_lost))
		lease_write(nd, nd->be->mount_id, true);
	if (nd->lock_fd >= 0) {
		if (nd->flock_held)
			bsys.flock(nd->lock_fd, LOCK_UN);
		bsys.close(nd->lock_fd);
		nd->lock_fd = -1;
	}
}

/* ---- the node's identity ------------------------------------------------------ */

static void identity_init(struct nodes *nd, const struct nodes_opts *opt)
{
	char buf[64];

	if (opt->node[0])
		snprintf(nd->node, sizeof(nd->node), "%s", opt->node);
	else
		manifest_node_default(nd->node, sizeof(nd->node));
	if (gethostname(nd->host, sizeof(nd->host) - 1) < 0 || !nd->host[0])
		snprintf(nd->host, sizeof(nd->host), "localhost");
	for (char *c = nd->host; *c; c++)
		if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20)
			*c = '?';
	snprintf(nd->boot_id, sizeof(nd->boot_id), "-");
	/* Not on the backend: the libc table, never wrapped by faults. */
	int fd = bsys_direct.openat(AT_FDCWD, "/proc/sys/kernel/random/boot_id", O_RDONLY, 0);
	if (fd >= 0) {
		ssize_t n = bsys_direct.pread(fd, buf, sizeof(buf) - 1, 0);
		if (n > 0) {
			buf[n] = '\0';
			buf[strcspn(buf, "\n\"")] = '\0';
			if (buf[0])
				snprintf(nd->boot_id, sizeof(nd->boot_id), "%.39s", buf);
		}
		bsys_direct.close(fd);
	}
}

int nodes_start(struct nodes *nd, struct backend *be, int root_fd, const char *mount_id,
		const struct nodes_opts *opt)
{
	int r;

	memset(nd, 0, sizeof(*nd));
	nd->be = be;
	nd->opt = *opt;
	identity_init(nd, opt);
	/* A copy of its own (nodes_stop frees it), without this node: Slurm lists them all. */
	nd->opt.peer_names = NULL;
	nd->opt.npeer_names = 0;
	for (unsigned i = 0; i < opt->npeer_names; i++) {
		if (!strcmp(opt->peer_names[i], nd->node))
			continue;
		nd->opt.peer_names = xrealloc(nd->opt.peer_names,
					      (nd->opt.npeer_names + 1) * sizeof(char *));
		nd->opt.peer_names[nd->opt.npeer_names++] = xstrdup(opt->peer_names[i]);
	}
	nd->list_mode = opt->npeer_names > 0;
	nd->dirfd = nd->nodes_fd = nd->lock_fd = -1;
	pthread_mutex_init(&nd->lock, NULL);
	pthread_mutex_init(&nd->klock, NULL);
	pthread_cond_init(&nd->kcond, NULL);
	pthread_cond_init(&nd->wcond, NULL);
	nd->started_wall_ns = wall_ns();
	if (!nodes_name_ok(nd->node)) {
		fprintf(stderr, "ckptfs: node name '%s' cannot name a directory under %s (the "
			"default is the short hostname); give one with -o node=NAME\n", nd->node,
			MANIFEST_NODES_DIR);
		return -EADDRINUSE;
	}
	/* The manifest's checks: ours, not a symlink, not writable by others (one line if not). */
	if ((r = manifest_node_dirs(root_fd, nd->node, &nd->nodes_fd, &nd->dirfd)) < 0)
		return r;
	return lease_acquire(nd, mount_id);
}
