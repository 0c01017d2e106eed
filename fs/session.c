/*
 * session.c — GPU capture sessions: the daemon's side of the protocol in
 * gpu/include/ckptfs_ring.h (read that first).  A trainer's process copies
 * device memory into an arena this file shares with it; this file checks
 * what the trainer says landed where and adopts those arena chunks as the
 * file's cache chunks (cache/adopt.h), without a copy and without CUDA.
 *
 * What it owns:
 *   - the endpoint: an abstract Unix socket "@ckptfs-session-<mount id>",
 *     named by the CKPTFS_IOC_INFO ioctl, served by one acceptor thread;
 *   - one thread per session: the handshake (arena, ring, doorbells; the
 *     acceptor read the credentials), then the consumer loop — adopt what
 *     the ring says, make room in the arena when the client waits for it,
 *     and notice the end of the session (the socket closes when the
 *     process exits, however);
 *   - bindings (file token -> node and cfile, with references) and the set
 *     of bound nodes, which ops.c asks before it seals a file;
 *   - arenas, which outlive their session until every chunk a file adopted
 *     has come back (cpool `empty` callback), then return their reservation
 *     to the cache (the acceptor thread reaps them).
 *
 * Invariants:
 *  S1  only ranges the client posted after their copy completed are adopted,
 *      each into the file its token names, within the limit it was bound
 *      with; anything else is refused and counted, never guessed at;
 *  S2  a bound file is never sealed, nor reported durable (ops.c and seal.c
 *      ask session_node_bound: close, truncate and drain seal nothing, fsync
 *      fails with EBUSY): its first version comes from the close after
 *      CKPTFS_IOC_UNBIND, which consumes every entry posted before it;
 *  S3  a session that ends with files bound abandons them: files never
 *      sealed lose their names, so no part of them reaches the backend;
 *  S4  arena bytes count in cache_used_bytes from the handshake until the
 *      arena is freed, and never twice (cache/adopt.h);
 *  S5  the daemon reads nothing from shared memory twice: entries are copied
 *      before they are checked, and its consumer index is its own;
 *  S6  only a file's owner (or root) binds it, so only they can have it
 *      dropped (S3);
 *  S7  what a client sends costs the daemon bounded resources: at most
 *      pend_ranges_max ranges per arena chunk, file offsets within off_t,
 *      a quarter of the cache for one user's arenas and half for all, and
 *      threads: at most HANDSHAKES_PER_UID connections of one user and
 *      HANDSHAKES_MAX of all in the handshake (the acceptor closes the
 *      others at once), SESSIONS_PER_UID sessions per user after it.
 *
 * Lock order: fs->ns -> session->lock -> cfile->lock -> cache->lock ->
 * ss->lock, ss->reap_lock (leaves); node->alock, a leaf, under s->lock.
 * Adopting may call the backend (it opens or reads the file's backend
 * version), so the ring is consumed under session->lock alone, never under
 * fs->ns: by the session thread, and by unbind before it takes fs->ns to end
 * the binding.  The bind ioctl takes fs->ns first, as every handler does.
 * cpool callbacks run under cache->lock and only set bits, write eventfds
 * and queue arenas for the reaper.
 */
#include "fs/session.h"
#include "cache/adopt.h"
#include "cache/log.h"
#include "gpu/include/ckptfs_ring.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/mempolicy.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define SESSIONS_PER_UID 64
#define HANDSHAKES_PER_UID 16		/* connections not through the handshake yet */
#define HANDSHAKES_MAX 64
#define BINDINGS_MAX 65535		/* token = generation << 16 | slot */
#define BSET_BUCKETS 256
#define POLL_MS 100

struct binding {
	struct fsnode *node;	/* reference (ns) */
	struct cfile *cf;	/* reference */
	uint64_t limit;		/* 0: none */
	uint64_t adopted;	/* captured bytes adopted */
	uint16_t gen;
	bool live;
	int err;		/* first error of its entries */
};

/*
 * Ranges posted for an arena chunk whose ADOPT entry has not come yet.  At
 * most pend_ranges_max() of them: the daemon's memory for them is bounded
 * by the arena (1/256 of it), whatever the client posts.
 */
struct pend {
	uint32_t token;
	uint64_t index;
	uint32_t n, cap;
	int err;		/* an entry was refused: drop the chunk at ADOPT */
	struct cext *r;
};

/* An arena: lives until its pool is empty, possibly after its session. */
struct arena {
	struct sessions *ss;
	struct cpool *pool;
	char *base;
	uint64_t bytes;
	int fd;
	struct ckptfs_ring_hdr *ring;	/* for `freed`: valid until cpool_close */
	_Atomic uint64_t *bitmap;
	int cq_efd;
	struct arena *next;		/* ss->arenas */
	bool dead;			/* empty and closed: the reaper frees it */
};

struct session {
	struct list link;	/* ss->all */
	struct sessions *ss;
	unsigned refs;		/* ss->lock */
	bool greeting;		/* ss->lock: in the handshake (HANDSHAKES_*) */
	bool counted;		/* ss->lock: one of its user's SESSIONS_PER_UID */
	uint64_t id, key[2];
	uid_t uid;		/* the peer's credentials, read at accept */
	gid_t gid;
	pid_t pid;
	int sock, sq_efd, cq_efd, ring_fd;
	struct arena *arena;
	uint32_t arena_held;	/* ss->lock: chunks reserved for its arena */
	struct ckptfs_ring_hdr *ring;
	size_t ring_bytes;
	struct ckptfs_sqe *sqe;
	uint32_t sq_mask;
	uint64_t wait_since;
	bool told_ranges;	/* logged pend_overflow once */

	pthread_mutex_t lock;	/* everything below */
	bool dead;
	uint32_t head;		/* consumer index (S5) */
	struct binding *b;	/* by slot (token & 0xffff), slot 0 unused */
	uint32_t nb;
	struct pend *pend;	/* by arena chunk */
	uint32_t npend;
};

struct bnd {
	struct fsnode *n;
	struct bnd *next;
};

struct sessions {
	struct ckptfs *fs;
	int lfd, wake_efd;
	char addr[CKPTFS_ADDR_MAX];
	bool up;
	pthread_t acceptor;
	atomic_bool stopping;

	struct ckpt_ratelimit told_busy;	/* acceptor: handshakes refused */

	pthread_mutex_t lock;	/* all, next_id, bset, arena_chunks */
	pthread_cond_t gone;	/* a session left `all` */
	struct list all;
	uint64_t next_id;
	struct bnd *bset[BSET_BUCKETS];
	atomic_uint nbound;
	uint32_t arena_chunks;	/* reserved by arenas not yet freed */

	pthread_mutex_t reap_lock;	/* arenas (leaf) */
	struct arena *arenas;

	struct {
		atomic_uint_least64_t active, opened, refused, captured_bytes, adopted_chunks,
			entries, rejected, abandoned_files, moved_chunks, lat_ns_sum, lat_ns_max;
	} st;
};

static void efd_kick(int fd)
{
	uint64_t one = 1;
	if (fd >= 0 && write(fd, &one, sizeof(one)) < 0) {
		/* a full counter still wakes the reader */
	}
}

static void efd_drain(int fd)
{
	uint64_t v;
	if (read(fd, &v, sizeof(v)) < 0) {
		/* EAGAIN: nothing pending */
	}
}

/* ---- the bound-node set (ss->lock) ------------------------------------ */

static unsigned bset_hash(const struct fsnode *n)
{
	return (unsigned)(((uintptr_t)n >> 4) * 0x9E3779B1u) % BSET_BUCKETS;
}

static bool bset_has_locked(struct sessions *ss, const struct fsnode *n)
{
	for (struct bnd *e = ss->bset[bset_hash(n)]; e; e = e->next)
		if (e->n == n)
			return true;
	return false;
}

static void bset_add_locked(struct sessions *ss, struct fsnode *n)
{
	struct bnd *e = xmalloc(sizeof(*e));
	e->n = n;
	e->next = ss->bset[bset_hash(n)];
	ss->bset[bset_hash(n)] = e;
	atomic_fetch_add(&ss->nbound, 1);
}

static void bset_del_locked(struct sessions *ss, const struct fsnode *n)
{
	for (struct bnd **pp = &ss->bset[bset_hash(n)]; *pp; pp = &(*pp)->next) {
		if ((*pp)->n == n) {
			struct bnd *e = *pp;
			*pp = e->next;
			free(e);
			atomic_fetch_sub(&ss->nbound, 1);
			return;
		}
	}
}

/* The daemon serves one mount: its sessions, for the seal gate (set once at start). */
static struct sessions *the_sessions;

bool session_node_bound(struct fsnode *n)
{
	struct sessions *ss = the_sessions;
	bool b;

	if (!ss || atomic_load(&ss->nbound) == 0)
		return false;
	pthread_mutex_lock(&ss->lock);
	b = bset_has_locked(ss, n);
	pthread_mutex_unlock(&ss->lock);
	return b;
}

/* ---- arenas ------------------------------------------------------------ */

/* cache->lock held: chunk idx came back to the pool. */
static void arena_freed(struct cpool *p, uint32_t idx, void *arg)
{
	struct arena *a = arg;

	(void)p;
	atomic_fetch_or(&a->bitmap[idx / 64], 1ull << (idx % 64));
	if (atomic_load(&a->ring->client_waiting))
		efd_kick(a->cq_efd);
}

/* cache->lock held: the pool is closed and empty: hand it to the reaper. */
static void arena_empty(struct cpool *p, void *arg)
{
	struct arena *a = arg;

	(void)p;
	pthread_mutex_lock(&a->ss->reap_lock);
	a->dead = true;
	pthread_mutex_unlock(&a->ss->reap_lock);
	efd_kick(a->ss->wake_efd);
}

static void arena_release(struct sessions *ss, struct arena *a)
{
	uint32_t n = a->pool ? a->pool->nchunks : 0;

	cpool_free(a->pool);
	if (a->base)
		munmap(a->base, a->bytes);
	if (a->fd >= 0)
		close(a->fd);
	pthread_mutex_lock(&ss->lock);
	ss->arena_chunks -= n;
	pthread_mutex_unlock(&ss->lock);
	free(a);
}

/* Free the arenas that are closed and empty (or all of them, at the end). */
static void arenas_reap(struct sessions *ss, bool all)
{
	struct arena *done = NULL;

	pthread_mutex_lock(&ss->reap_lock);
	for (struct arena **pp = &ss->arenas; *pp;) {
		struct arena *a = *pp;
		if (a->dead || all) {
			*pp = a->next;
			a->next = done;
			done = a;
		} else {
			pp = &a->next;
		}
	}
	pthread_mutex_unlock(&ss->reap_lock);
	while (done) {
		struct arena *a = done;
		done = a->next;
		arena_release(ss, a);
	}
}

/* The NUMA node of a GPU from its PCI bus id, -1 if the machine does not say. */
static int numa_node_of(const char *bus_id)
{
	char path[128], id[32], buf[16];
	size_t i;
	int fd, node = -1;

	for (i = 0; bus_id[i] && i < sizeof(id) - 1; i++) {
		char ch = (char)tolower((unsigned char)bus_id[i]);
		if (!isxdigit((unsigned char)ch) && ch != ':' && ch != '.')
			return -1;
		id[i] = ch;
	}
	id[i] = '\0';
	if (!i)
		return -1;
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", id);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n > 0) {
		buf[n] = '\0';
		node = atoi(buf);
	}
	return node;
}

/* Prefer node `node` for [p, p+len) before it is faulted in: true if it took. */
static bool numa_prefer(void *p, size_t len, int node)
{
	unsigned long mask[1024 / (8 * sizeof(unsigned long))] = { 0 };
	char path[64];

	if (node < 0 || node >= 1024)
		return false;
	snprintf(path, sizeof(path), "/sys/devices/system/node/node%d", node);
	if (access(path, F_OK) < 0)
		return false;
	mask[node / (8 * sizeof(unsigned long))] |= 1ul << (node % (8 * sizeof(unsigned long)));
	return syscall(SYS_mbind, p, len, MPOL_PREFERRED, mask, 1024ul, 0u) == 0;
}

/* A sealed memfd of `len` bytes mapped shared: the fd, or -errno. */
static int shared_map(const char *name, size_t len, char **map)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING), r;

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)len) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	*map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (*map == MAP_FAILED) {
		r = -errno;
		close(fd);
		*map = NULL;
		return r;
	}
	madvise(*map, len, MADV_DONTFORK);
	return fd;
}

static void prefault(char *p, size_t len)
{
	if (madvise(p, len, MADV_POPULATE_WRITE) == 0)
		return;
	for (size_t off = 0; off < len; off += 4096)
		((volatile char *)p)[off] = 0;
}

/* ---- sessions ------------------------------------------------------------ */

static void session_put(struct session *s)
{
	struct sessions *ss = s->ss;
	bool last;

	pthread_mutex_lock(&ss->lock);
	last = --s->refs == 0;
	pthread_mutex_unlock(&ss->lock);
	if (!last)
		return;
	for (uint32_t i = 0; i < s->npend; i++)
		free(s->pend[i].r);
	free(s->pend);
	free(s->b);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static struct session *session_find(struct sessions *ss, uint64_t id)
{
	struct session *s = NULL;

	pthread_mutex_lock(&ss->lock);
	for (struct list *e = ss->all.next; e != &ss->all; e = e->next) {
		struct session *t = list_entry(e, struct session, link);
		if (t->id == id && t->ring) {
			s = t;
			s->refs++;
			break;
		}
	}
	pthread_mutex_unlock(&ss->lock);
	return s;
}

/* The caller may act on s: its key and uid.  s->lock held. */
static int session_check(struct session *s, const uint64_t key[2], uid_t uid)
{
	if (s->dead)
		return -ENOTCONN;
	if (key[0] != s->key[0] || key[1] != s->key[1] || uid != s->uid)
		return -EPERM;
	return 0;
}

static struct binding *binding_get(struct session *s, uint32_t token)
{
	uint32_t slot = token & 0xffff;

	if (slot == 0 || slot >= s->nb || !s->b[slot].live || s->b[slot].gen != (token >> 16))
		return NULL;
	return &s->b[slot];
}

static void pend_reset(struct pend *p)
{
	p->n = 0;
	p->err = 0;
}

/* Give chunk c back to the client untouched, unless a file holds it. */
static void chunk_return(struct session *s, uint32_t c)
{
	if (atomic_load(&s->arena->pool->state[c]) == CPOOL_LENT)
		atomic_fetch_or(&s->arena->bitmap[c / 64], 1ull << (c % 64));
}

static void entry_refused(struct session *s, struct binding *b, int err)
{
	atomic_fetch_add(&s->ring->rejected, 1);
	atomic_fetch_add(&s->ss->st.rejected, 1);
	if (b && !b->err)
		b->err = err;
}

/*
 * Separate ranges one arena chunk may gather: a range and its gap average
 * at least 4 KiB (1024 in a 4 MiB chunk; ckptfs.torch's zip entries are
 * bigger), and 64 whatever the chunk size.
 */
static uint32_t pend_ranges_max(uint32_t chunk_size)
{
	return CKPT_MAX(64u, chunk_size / 4096);
}

/* A chunk's ranges would pass pend_ranges_max: refuse the file's entry (S1).  s->lock held. */
static int pend_overflow(struct session *s, struct binding *b, uint32_t max)
{
	if (!s->told_ranges) {
		s->told_ranges = true;
		log_warn("GPU session %llu (uid %u, pid %d) posted more than %u ranges for one "
			 "arena chunk: refused, the file is dropped", (unsigned long long)s->id,
			 (unsigned)s->uid, (int)s->pid, max);
	}
	entry_refused(s, b, -E2BIG);
	return -E2BIG;
}

/* Adopt arena chunk c with the ranges in p into b's file (S1).  s->lock held. */
static void chunk_adopt(struct session *s, struct binding *b, uint32_t c, struct pend *p,
			uint64_t t_ns)
{
	struct cpool *pool = s->arena->pool;
	uint64_t merged = 0, captured = 0;
	int r;

	if ((r = cpool_take(pool, c)) < 0) {
		entry_refused(s, b, r);
		return;
	}
	atomic_fetch_and(&s->arena->bitmap[c / 64], ~(1ull << (c % 64)));
	r = cfile_adopt(b->cf, p->index, &pool->chunks[c], p->r, p->n, &merged);
	if (r == -EAGAIN && node_open_base(s->ss->fs, b->node) == 0)
		r = cfile_adopt(b->cf, p->index, &pool->chunks[c], p->r, p->n, &merged);
	if (r < 0) {
		cpool_untake(pool, c);
		chunk_return(s, c);
		entry_refused(s, b, r);
		return;
	}
	for (uint32_t i = 0; i < p->n; i++)
		captured += p->r[i].hi - p->r[i].lo;
	b->adopted += captured;
	atomic_fetch_add(&s->ring->adopted_chunks, 1);
	atomic_fetch_add(&s->ring->adopted_bytes, captured);
	atomic_fetch_add(&s->ring->merged_bytes, merged);
	atomic_fetch_add(&s->ss->st.adopted_chunks, 1);
	atomic_fetch_add(&s->ss->st.captured_bytes, captured);
	uint64_t now = now_ns();
	if (t_ns && t_ns <= now && now - t_ns < 3600ull * 1000000000ull) {
		uint64_t lat = now - t_ns, max = atomic_load(&s->ring->lat_ns_max);
		atomic_fetch_add(&s->ring->lat_ns_sum, lat);
		atomic_fetch_add(&s->ss->st.lat_ns_sum, lat);
		while (lat > max && !atomic_compare_exchange_weak(&s->ring->lat_ns_max, &max, lat))
			;
		max = atomic_load(&s->ss->st.lat_ns_max);
		while (lat > max && !atomic_compare_exchange_weak(&s->ss->st.lat_ns_max, &max, lat))
			;
	}
}

/* One entry, copied out of shared memory (S5).  s->lock held. */
static void entry_process(struct session *s, const struct ckptfs_sqe *e)
{
	const uint32_t cs = s->arena->pool->cache->chunk_size, nchunks = s->arena->pool->nchunks;
	struct binding *b = e->op == CKPTFS_SQE_DATA ? binding_get(s, e->token) : NULL;
	struct pend *p;

	atomic_fetch_add(&s->ring->entries, 1);
	atomic_fetch_add(&s->ss->st.entries, 1);
	if (!b || e->chunk >= nchunks) {
		entry_refused(s, b, b ? -EINVAL : 0);
		if (e->chunk < nchunks && (e->flags & CKPTFS_SQE_ADOPT)) {
			pend_reset(&s->pend[e->chunk]);
			chunk_return(s, e->chunk);
		}
		return;
	}
	p = &s->pend[e->chunk];
	if (p->n && (p->token != e->token || p->index != e->index))
		p->err = -EINVAL;	/* one chunk, one file chunk */
	else if (e->lo >= e->hi || e->hi > cs)
		p->err = -EINVAL;
	else if (e->index > ((uint64_t)INT64_MAX - e->hi) / cs)
		p->err = -EFBIG;	/* past any file offset (off_t): no backend takes it */
	else if (b->limit && e->index * cs + e->hi > b->limit)
		p->err = -EFBIG;	/* beyond the size declared at bind */
	else if (atomic_load(&s->arena->pool->state[e->chunk]) != CPOOL_LENT)
		p->err = -EBUSY;	/* the file holds it: not the client's to post */
	else if (p->n && e->lo < p->r[p->n - 1].hi)
		p->err = -EINVAL;	/* ranges come sorted and disjoint */
	else if (p->n == pend_ranges_max(cs) && e->lo != p->r[p->n - 1].hi)
		p->err = pend_overflow(s, b, p->n);
	if (!p->err) {
		if (p->n == 0) {
			p->token = e->token;
			p->index = e->index;
		}
		if (p->n && p->r[p->n - 1].hi == e->lo) {
			p->r[p->n - 1].hi = e->hi;
		} else {
			if (p->n == p->cap) {
				p->cap = p->cap ? 2 * p->cap : 4;
				p->r = xrealloc(p->r, p->cap * sizeof(*p->r));
			}
			p->r[p->n].lo = e->lo;
			p->r[p->n++].hi = e->hi;
		}
	}
	if (!(e->flags & CKPTFS_SQE_ADOPT))
		return;
	if (p->err) {
		entry_refused(s, binding_get(s, p->n ? p->token : e->token), p->err);
		chunk_return(s, e->chunk);
	} else {
		chunk_adopt(s, b, e->chunk, p, e->t_ns);
	}
	pend_reset(p);
}

/* Consume everything posted so far.  s->lock held.  -EPROTO if the ring lies. */
static int consume_locked(struct session *s)
{
	uint32_t tail = atomic_load_explicit(&s->ring->sq_tail, memory_order_acquire);
	uint32_t n = tail - s->head;

	if (s->dead)
		return -ENOTCONN;
	if (n > s->sq_mask + 1)
		return -EPROTO;
	while (s->head != tail) {
		struct ckptfs_sqe e;
		memcpy(&e, &s->sqe[s->head & s->sq_mask], sizeof(e));
		s->head++;
		entry_process(s, &e);
	}
	atomic_store_explicit(&s->ring->sq_head, s->head, memory_order_release);
	if (n && atomic_load(&s->ring->client_waiting))
		efd_kick(s->cq_efd);
	return 0;
}

/* ---- the handshake ------------------------------------------------------- */

static int send_welcome(int sock, const struct ckptfs_welcome *w, const int *fds, int nfds)
{
	char cbuf[CMSG_SPACE(4 * sizeof(int))];
	struct iovec iov = { (void *)w, sizeof(*w) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (nfds) {
		memset(cbuf, 0, sizeof(cbuf));
		mh.msg_control = cbuf;
		mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
	}
	return sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t)sizeof(*w) ? 0 : -errno;
}

static int refuse(struct session *s, struct ckptfs_welcome *w, int err, const char *why)
{
	w->error = err;
	snprintf(w->message, sizeof(w->message), "%s", why);
	atomic_fetch_add(&s->ss->st.refused, 1);
	log_info("GPU session from uid %u (pid %d) refused: %s", (unsigned)s->uid, (int)s->pid, why);
	send_welcome(s->sock, w, NULL, 0);
	return err;
}

/*
 * Arena chunks a new session of uid may reserve: all arenas together hold
 * at most half of the cache, and one user's sessions at most half of that,
 * so one user's sessions can never refuse another user's.  *why says which
 * bound is spent.  ss->lock held.
 */
static uint32_t arena_budget_locked(struct sessions *ss, uid_t uid, const char **why)
{
	uint32_t all = ss->fs->cache.nchunks / 2, mine = 0;

	for (struct list *e = ss->all.next; e != &ss->all; e = e->next) {
		struct session *t = list_entry(e, struct session, link);
		mine += t->uid == uid ? t->arena_held : 0;
	}
	uint32_t left = all > ss->arena_chunks ? all - ss->arena_chunks : 0;
	uint32_t cap = CKPT_MAX(2u, all / 2);	/* a tiny cache: one arena */
	uint32_t share = cap > mine ? cap - mine : 0;
	*why = share < left ? "this user's GPU arenas already use a quarter of cache_size"
			    : "GPU arenas already use half of cache_size";
	return CKPT_MIN(left, share);
}

/* Credentials, arena, ring, doorbells; registers s.  0 or -errno (refused). */
static int handshake(struct session *s)
{
	struct sessions *ss = s->ss;
	struct ckptfs *fs = ss->fs;
	struct cache *c = &fs->cache;
	struct ckptfs_welcome w = { .magic = CKPTFS_HELLO_MAGIC, .version = CKPTFS_PROTO_VERSION,
				    .numa_node = -1 };
	struct ckptfs_hello h;
	struct timeval tv = { .tv_sec = 5 };
	struct chunk **reserved = NULL;
	struct arena *a;
	unsigned same_uid = 0;
	const char *why;
	int r;

	setsockopt(s->sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (recv(s->sock, &h, sizeof(h), MSG_WAITALL) != (ssize_t)sizeof(h) ||
	    h.magic != CKPTFS_HELLO_MAGIC)
		return refuse(s, &w, -EPROTO, "not a ckptfs session hello");
	if (h.version != CKPTFS_PROTO_VERSION)
		return refuse(s, &w, -EPROTONOSUPPORT, "protocol version mismatch: update libckptfs");
	/* Without allow_other, the mount is its owner's (and root's) alone. */
	if (!fs->opt.allow_other && s->uid != 0 && s->uid != geteuid())
		return refuse(s, &w, -EACCES, "the mount is not shared with other users");
	/* Before anything is made that only session_end undoes (the ring: s->ring). */
	if (getrandom(s->key, sizeof(s->key), 0) != (ssize_t)sizeof(s->key))
		return refuse(s, &w, -EAGAIN, "no random bytes for the session key");
	pthread_mutex_lock(&ss->lock);
	for (struct list *e = ss->all.next; e != &ss->all; e = e->next) {
		struct session *t = list_entry(e, struct session, link);
		same_uid += t->counted && t->uid == s->uid;
	}
	uint32_t budget = arena_budget_locked(ss, s->uid, &why);
	uint64_t want = h.arena_bytes ? h.arena_bytes / c->chunk_size : 0;
	want = CKPT_MAX(2, CKPT_MIN(want, budget));
	if (same_uid < SESSIONS_PER_UID && budget >= 2) {
		ss->arena_chunks += (uint32_t)want;	/* held while we reserve */
		s->arena_held = (uint32_t)want;
		s->counted = true;
	}
	pthread_mutex_unlock(&ss->lock);
	if (same_uid >= SESSIONS_PER_UID)
		return refuse(s, &w, -EMFILE, "too many sessions for this user");
	if (budget < 2)
		return refuse(s, &w, -ENOSPC, why);

	a = xcalloc(1, sizeof(*a));
	a->ss = ss;
	a->fd = -1;
	a->cq_efd = -1;
	r = cpool_reserve(c, (uint32_t)want, 2, &reserved);
	if (r < 0) {
		pthread_mutex_lock(&ss->lock);
		ss->arena_chunks -= (uint32_t)want;
		s->arena_held = 0;
		pthread_mutex_unlock(&ss->lock);
		free(a);
		return refuse(s, &w, -ENOSPC, "the cache is full of unsaved data; try again later");
	}
	pthread_mutex_lock(&ss->lock);
	ss->arena_chunks -= (uint32_t)want - (uint32_t)r;
	s->arena_held = (uint32_t)r;
	pthread_mutex_unlock(&ss->lock);
	w.nchunks = (uint32_t)r;
	w.chunk_size = c->chunk_size;
	a->bytes = (uint64_t)w.nchunks * c->chunk_size;
	if ((a->fd = shared_map("ckptfs-arena", a->bytes, &a->base)) < 0) {
		r = a->fd;
		a->fd = -1;
		a->pool = cpool_new(c, NULL, reserved, w.nchunks);
		arena_release(ss, a);
		return refuse(s, &w, r, "cannot make the arena memfd");
	}
	a->pool = cpool_new(c, a->base, reserved, w.nchunks);
	a->pool->freed = arena_freed;
	a->pool->empty = arena_empty;
	a->pool->arg = a;
	s->arena = a;
	pthread_mutex_lock(&ss->reap_lock);
	a->next = ss->arenas;
	ss->arenas = a;
	pthread_mutex_unlock(&ss->reap_lock);
	if (madvise(a->base, a->bytes, MADV_HUGEPAGE) == 0)
		w.flags |= CKPTFS_WELCOME_HUGEPAGES;
	h.pci_bus_id[sizeof(h.pci_bus_id) - 1] = '\0';
	int node = h.numa_node >= 0 ? h.numa_node : numa_node_of(h.pci_bus_id);
	if (numa_prefer(a->base, a->bytes, node))
		w.numa_node = node;
	prefault(a->base, a->bytes);

	/* The ring: header, entries, free bitmap. */
	uint32_t entries = 1024;
	while (entries < 8 * w.nchunks && entries < (1u << 20))
		entries *= 2;
	size_t sq_off = 4096, bm_off = sq_off + (size_t)entries * sizeof(struct ckptfs_sqe);
	s->ring_bytes = (bm_off + (size_t)(w.nchunks + 63) / 64 * 8 + 4095) & ~(size_t)4095;
	char *ring;
	if ((s->ring_fd = shared_map("ckptfs-ring", s->ring_bytes, &ring)) < 0)
		return refuse(s, &w, s->ring_fd, "cannot make the ring memfd");
	s->sq_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->cq_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->sq_efd < 0 || s->cq_efd < 0) {
		munmap(ring, s->ring_bytes);
		return refuse(s, &w, -errno, "cannot make the doorbells");
	}
	struct ckptfs_ring_hdr *hdr = (struct ckptfs_ring_hdr *)ring;
	hdr->magic = CKPTFS_RING_MAGIC;
	hdr->version = CKPTFS_PROTO_VERSION;
	hdr->sq_entries = entries;
	hdr->sq_off = (uint32_t)sq_off;
	hdr->bitmap_off = (uint32_t)bm_off;
	hdr->nchunks = w.nchunks;
	hdr->chunk_size = c->chunk_size;
	a->bitmap = (_Atomic uint64_t *)(ring + bm_off);
	for (uint32_t i = 0; i < w.nchunks; i++)
		atomic_fetch_or(&a->bitmap[i / 64], 1ull << (i % 64));
	a->ring = hdr;
	a->cq_efd = s->cq_efd;
	s->sqe = (struct ckptfs_sqe *)(ring + sq_off);
	s->sq_mask = entries - 1;
	s->pend = xcalloc(w.nchunks, sizeof(*s->pend));
	s->npend = w.nchunks;
	s->nb = 1;
	s->b = xcalloc(1, sizeof(*s->b));
	w.ring_bytes = s->ring_bytes;
	w.key[0] = s->key[0];
	w.key[1] = s->key[1];
	pthread_mutex_lock(&ss->lock);
	s->id = ++ss->next_id;
	w.session = s->id;
	s->ring = hdr;		/* visible to session_find from here */
	pthread_mutex_unlock(&ss->lock);

	int fds[4] = { a->fd, s->ring_fd, s->sq_efd, s->cq_efd };
	if ((r = send_welcome(s->sock, &w, fds, 4)) < 0)
		return r;
	atomic_fetch_add(&ss->st.opened, 1);
	atomic_fetch_add(&ss->st.active, 1);
	log_info("GPU session %llu for uid %u (pid %d): arena %llu MiB%s%s", (unsigned long long)s->id,
		 (unsigned)s->uid, (int)s->pid, (unsigned long long)(a->bytes >> 20),
		 w.numa_node >= 0 ? " on the GPU's NUMA node" : "",
		 w.flags & CKPTFS_WELCOME_HUGEPAGES ? ", huge pages" : "");
	return 0;
}

/* ---- ending bindings (S2, S3) ------------------------------------------ */

/* What ending bindings leaves to do once the locks are dropped. */
struct unbound {
	struct {
		fuse_ino_t parent;
		char *name;
	} *inval;		/* names the kernel may still cache */
	uint32_t ninval;
	struct cfile **puts;
	uint32_t nputs;
};

/*
 * End binding b.  drop: the file is incomplete — if it was never sealed,
 * nothing of it is on the backend: take its names away (S3).  ns and
 * s->lock held; finish with unbound_done() after unlocking.
 */
static void binding_end(struct ckptfs *fs, struct session *s, struct binding *b, bool drop,
			struct unbound *u)
{
	struct fsnode *n = b->node;

	b->live = false;
	pthread_mutex_lock(&s->ss->lock);
	bset_del_locked(s->ss, n);
	pthread_mutex_unlock(&s->ss->lock);
	for (struct fsdent *d; drop && !n->ever_sealed && (d = node_first_dent(n));) {
		u->inval = xrealloc(u->inval, (u->ninval + 1) * sizeof(*u->inval));
		u->inval[u->ninval].parent = fs_ino(fs, d->parent);
		u->inval[u->ninval++].name = xstrdup(d->name);
		dent_remove(fs, d);
	}
	if (drop)
		n->new_file = false;
	if (!drop && b->adopted) {	/* the captures were writes to it */
		pthread_mutex_lock(&n->alock);
		clock_gettime(CLOCK_REALTIME, &n->mtime);
		n->ctime = n->mtime;
		if (!n->dirty_ns)
			n->dirty_ns = now_ns();
		pthread_mutex_unlock(&n->alock);
	}
	u->puts = xrealloc(u->puts, (u->nputs + 1) * sizeof(*u->puts));
	u->puts[u->nputs++] = b->cf;
	node_unref(fs, n);
}

static void unbound_done(struct ckptfs *fs, struct unbound *u)
{
	for (uint32_t i = 0; i < u->nputs; i++)
		cfile_put(u->puts[i]);
	free(u->puts);
	for (uint32_t i = 0; i < u->ninval; i++) {
		fuse_lowlevel_notify_inval_entry(fs->se, u->inval[i].parent, u->inval[i].name,
						 strlen(u->inval[i].name));
		free(u->inval[i].name);
	}
	free(u->inval);
}

/* ---- the end of a session (S3) ---------------------------------------- */

static void session_end(struct session *s)
{
	struct sessions *ss = s->ss;
	struct ckptfs *fs = ss->fs;
	struct unbound u = { 0 };
	uint32_t abandoned = 0;

	pthread_mutex_lock(&fs->ns);
	pthread_mutex_lock(&s->lock);
	s->dead = true;
	for (uint32_t i = 1; i < s->nb; i++) {
		if (s->b[i].live) {
			binding_end(fs, s, &s->b[i], true, &u);
			abandoned++;
		}
	}
	pthread_mutex_unlock(&s->lock);
	pthread_mutex_unlock(&fs->ns);
	unbound_done(fs, &u);
	if (abandoned) {
		atomic_fetch_add(&ss->st.abandoned_files, abandoned);
		log_warn("GPU session %llu (uid %u, pid %d) ended with %u file(s) still being "
			 "captured: they were dropped, nothing of them is published",
			 (unsigned long long)s->id, (unsigned)s->uid, (int)s->pid, abandoned);
	}
	if (s->wait_since) {
		atomic_fetch_add(&fs->cache.st.backpressure_ns, now_ns() - s->wait_since);
		s->wait_since = 0;
	}
	/*
	 * No `freed` callback runs after cpool_close: the ring and doorbells may
	 * go.  The arena may be reaped as soon as it returns: not touched after.
	 */
	if (s->arena && cpool_close(s->arena->pool)) {
		pthread_mutex_lock(&ss->reap_lock);
		s->arena->dead = true;
		pthread_mutex_unlock(&ss->reap_lock);
		efd_kick(ss->wake_efd);
	}
	if (s->ring) {
		munmap(s->ring, s->ring_bytes);
		atomic_fetch_sub(&ss->st.active, 1);
	}
	if (s->ring_fd >= 0)
		close(s->ring_fd);
	if (s->sq_efd >= 0)
		close(s->sq_efd);
	if (s->cq_efd >= 0)
		close(s->cq_efd);
	close(s->sock);
	pthread_mutex_lock(&ss->lock);
	list_del(&s->link);
	s->ring = NULL;
	pthread_cond_broadcast(&ss->gone);
	pthread_mutex_unlock(&ss->lock);
	session_put(s);
}

/* ---- the session thread ----------------------------------------------- */

/* The client waits for a chunk: count it as backpressure, and make room. */
static void serve_waiting(struct session *s)
{
	struct cache *c = &s->ss->fs->cache;
	bool waiting = atomic_load(&s->ring->client_waiting) != 0;
	struct arena *a = s->arena;

	if (waiting && !s->wait_since) {
		s->wait_since = now_ns();
		atomic_fetch_add(&c->st.backpressure_waits, 1);
		atomic_fetch_add(&s->ring->full_waits, 1);
	} else if (!waiting && s->wait_since) {
		uint64_t d = now_ns() - s->wait_since;
		atomic_fetch_add(&c->st.backpressure_ns, d);
		atomic_fetch_add(&s->ring->full_wait_ns, d);
		s->wait_since = 0;
	}
	if (!waiting)
		return;
	/* Nothing free in the bitmap: move some adopted chunks out of the arena. */
	for (uint32_t i = 0; i < (a->pool->nchunks + 63) / 64; i++)
		if (atomic_load(&a->bitmap[i]))
			return;
	uint32_t moved = cpool_move_out(a->pool, CKPT_MAX(1u, a->pool->nchunks / 8));
	if (moved) {
		atomic_fetch_add(&s->ring->moved_chunks, moved);
		atomic_fetch_add(&s->ss->st.moved_chunks, moved);
	} else if (c->spill_wanted) {
		c->spill_wanted(c->spill_arg);	/* dirty pool chunks may be spilled */
	}
	efd_kick(s->cq_efd);
}

static void *session_main(void *arg)
{
	struct session *s = arg;
	struct sessions *ss = s->ss;
	int r = handshake(s);

	pthread_mutex_lock(&ss->lock);
	s->greeting = false;
	pthread_mutex_unlock(&ss->lock);
	if (r == 0) {
		struct pollfd pf[2] = { { .fd = s->sock, .events = POLLIN },
					{ .fd = s->sq_efd, .events = POLLIN } };
		while (!atomic_load(&ss->stopping)) {
			int k = poll(pf, 2, POLL_MS);
			if (k < 0 && errno != EINTR)
				break;
			if (pf[0].revents) {
				char b;
				if (recv(s->sock, &b, 1, MSG_DONTWAIT) != -1 || errno != EAGAIN)
					break;	/* closed, or it talked out of turn */
			}
			if (pf[1].revents)
				efd_drain(s->sq_efd);
			pthread_mutex_lock(&s->lock);
			r = consume_locked(s);
			pthread_mutex_unlock(&s->lock);
			if (r < 0) {
				log_warn("GPU session %llu (pid %d): the ring is inconsistent; ending it",
					 (unsigned long long)s->id, (int)s->pid);
				atomic_store(&s->ring->dead, r);
				break;
			}
			serve_waiting(s);
		}
	}
	session_end(s);
	return NULL;
}

/*
 * A session for connection fd, in the handshake, listed; NULL (refused, fd
 * closed) if its user, or all users, have too many connections in the
 * handshake already (S7): a thread each, waiting up to 5 s for a hello.
 * The refusal is queued on the new socket (its buffer is empty: no wait),
 * for a client that sends its hello and reads the welcome.
 */
static struct session *session_accepted(struct sessions *ss, int fd)
{
	struct ucred cr;
	socklen_t crlen = sizeof(cr);
	unsigned mine = 0, all = 0;
	struct session *s;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) < 0) {
		close(fd);
		return NULL;
	}
	pthread_mutex_lock(&ss->lock);
	for (struct list *e = ss->all.next; e != &ss->all; e = e->next) {
		struct session *t = list_entry(e, struct session, link);
		all += t->greeting;
		mine += t->greeting && t->uid == cr.uid;
	}
	if (mine >= HANDSHAKES_PER_UID || all >= HANDSHAKES_MAX) {
		struct ckptfs_welcome w = { .magic = CKPTFS_HELLO_MAGIC,
					    .version = CKPTFS_PROTO_VERSION, .error = -EAGAIN };
		pthread_mutex_unlock(&ss->lock);
		snprintf(w.message, sizeof(w.message), "too many connections are in the handshake; "
			 "try again");
		send_welcome(fd, &w, NULL, 0);
		close(fd);
		atomic_fetch_add(&ss->st.refused, 1);
		ckpt_log_limited(&ss->told_busy, 10ull * 1000000000ull, LOG_WARNING,
				 "GPU session from uid %u (pid %d) refused: %s connections are "
				 "already in the handshake", (unsigned)cr.uid, (int)cr.pid,
				 mine >= HANDSHAKES_PER_UID ? "this user's" : "too many");
		return NULL;
	}
	s = xcalloc(1, sizeof(*s));
	s->ss = ss;
	s->sock = fd;
	s->sq_efd = s->cq_efd = s->ring_fd = -1;
	s->refs = 1;
	s->uid = cr.uid;
	s->gid = cr.gid;
	s->pid = cr.pid;
	s->greeting = true;
	pthread_mutex_init(&s->lock, NULL);
	list_add_tail(&ss->all, &s->link);
	pthread_mutex_unlock(&ss->lock);
	return s;
}

static void *acceptor_main(void *arg)
{
	struct sessions *ss = arg;
	struct pollfd pf[2] = { { .fd = ss->lfd, .events = POLLIN },
				{ .fd = ss->wake_efd, .events = POLLIN } };

	while (!atomic_load(&ss->stopping)) {
		if (poll(pf, 2, 1000) < 0 && errno != EINTR)
			break;
		if (pf[1].revents) {
			efd_drain(ss->wake_efd);
			arenas_reap(ss, false);
		}
		if (!(pf[0].revents & POLLIN))
			continue;
		int fd = accept4(ss->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		struct session *s = session_accepted(ss, fd);
		pthread_t th;
		if (!s)
			continue;
		if (pthread_create(&th, NULL, session_main, s) != 0) {
			pthread_mutex_lock(&ss->lock);
			list_del(&s->link);
			pthread_mutex_unlock(&ss->lock);
			close(fd);
			session_put(s);
			continue;
		}
		pthread_detach(th);
	}
	return NULL;
}

/* ---- life cycle ---------------------------------------------------------- */

int session_start(struct ckptfs *fs)
{
	struct sessions *ss = xcalloc(1, sizeof(*ss));
	struct sockaddr_un sa;
	int r;

	ss->fs = fs;
	ss->lfd = ss->wake_efd = -1;
	list_init(&ss->all);
	pthread_mutex_init(&ss->lock, NULL);
	pthread_mutex_init(&ss->reap_lock, NULL);
	pthread_cond_init(&ss->gone, NULL);
	fs->sessions = ss;
	the_sessions = ss;
	if (!fs->opt.sessions)
		return 0;
	snprintf(ss->addr, sizeof(ss->addr), "@ckptfs-session-%s-%d", fs->be.mount_id,
		 (int)getpid());
	socklen_t len = ckptfs_sockaddr(ss->addr, &sa);	/* abstract: no file to clean up */
	ss->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ss->wake_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ss->lfd < 0 || ss->wake_efd < 0 || bind(ss->lfd, (struct sockaddr *)&sa, len) < 0 ||
	    listen(ss->lfd, 64) < 0 || pthread_create(&ss->acceptor, NULL, acceptor_main, ss) != 0) {
		r = -errno;
		log_warn("GPU sessions are unavailable: cannot listen on %s: %s", ss->addr, strerror(-r));
		if (ss->lfd >= 0)
			close(ss->lfd);
		ss->lfd = -1;
		return r;
	}
	ss->up = true;
	return 0;
}

void session_stop(struct ckptfs *fs)
{
	struct sessions *ss = fs->sessions;

	if (!ss || !ss->up)
		return;
	atomic_store(&ss->stopping, true);
	efd_kick(ss->wake_efd);
	pthread_join(ss->acceptor, NULL);
	close(ss->lfd);
	ss->lfd = -1;
	ss->up = false;
	pthread_mutex_lock(&ss->lock);
	for (struct list *e = ss->all.next; e != &ss->all; e = e->next)
		shutdown(list_entry(e, struct session, link)->sock, SHUT_RDWR);
	while (!list_empty(&ss->all))
		pthread_cond_wait(&ss->gone, &ss->lock);
	pthread_mutex_unlock(&ss->lock);
}

void session_free(struct ckptfs *fs)
{
	struct sessions *ss = fs->sessions;

	if (!ss)
		return;
	session_stop(fs);
	arenas_reap(ss, true);
	for (unsigned i = 0; i < BSET_BUCKETS; i++)
		while (ss->bset[i])
			bset_del_locked(ss, ss->bset[i]->n);
	if (ss->wake_efd >= 0)
		close(ss->wake_efd);
	pthread_mutex_destroy(&ss->lock);
	pthread_mutex_destroy(&ss->reap_lock);
	pthread_cond_destroy(&ss->gone);
	the_sessions = NULL;
	free(ss);
	fs->sessions = NULL;
}

/* ---- the ioctls ---------------------------------------------------------- */

/*
 * Only the file's owner, or root, may bind it: a bound file's fate is its
 * session's (a drop removes its names, S3), and write access to a file is
 * no right to have it removed.  s->lock held.
 */
static bool session_may_bind(struct session *s, struct fsnode *n)
{
	uid_t owner;

	pthread_mutex_lock(&n->alock);
	owner = n->uid;
	pthread_mutex_unlock(&n->alock);
	return s->uid == 0 || owner == s->uid;
}

static int ioc_bind(struct ckptfs *fs, fuse_req_t req, struct fshandle *h,
		    const struct ckptfs_ioc_bind *in, struct ckptfs_ioc_bind *out)
{
	struct sessions *ss = fs->sessions;
	struct session *s;
	struct fsnode *n = h->node;
	int r = 0;

	if (!(s = session_find(ss, in->session)))
		return -ESRCH;
	pthread_mutex_lock(&fs->ns);
	if (n->ctl || !S_ISREG(n->mode))
		r = -EINVAL;
	else if (!h->writable)
		r = -EBADF;
	else if (n->ever_sealed)
		r = -EEXIST;	/* its first version is already out: bind only new files */
	else if (!node_first_dent(n))
		r = -ENOENT;
	pthread_mutex_lock(&s->lock);
	if (r == 0)
		r = session_check(s, in->key, fuse_req_ctx(req)->uid);
	if (r == 0 && !session_may_bind(s, n))
		r = -EPERM;
	if (r == 0 && session_node_bound(n))
		r = -EBUSY;
	if (r == 0) {
		uint32_t slot = 1;
		while (slot < s->nb && s->b[slot].live)
			slot++;
		if (slot > BINDINGS_MAX) {
			r = -EMFILE;
		} else {
			if (slot == s->nb) {
				s->b = xrealloc(s->b, (s->nb + 1) * sizeof(*s->b));
				memset(&s->b[s->nb++], 0, sizeof(*s->b));
			}
			struct binding *b = &s->b[slot];
			b->gen = (uint16_t)(b->gen + 1 ? b->gen + 1 : 1);
			b->node = n;
			b->cf = cfile_get(node_cfile(fs, n));
			b->limit = in->limit;
			b->adopted = 0;
			b->err = 0;
			b->live = true;
			node_ref(n);
			pthread_mutex_lock(&ss->lock);
			bset_add_locked(ss, n);
			pthread_mutex_unlock(&ss->lock);
			out->token = (uint32_t)b->gen << 16 | slot;
			out->chunk_size = fs->cache.chunk_size;
		}
	}
	pthread_mutex_unlock(&s->lock);
	pthread_mutex_unlock(&fs->ns);
	session_put(s);
	return r;
}

/*
 * Unbind, in two steps, so that no backend call runs under fs->ns (seal.c):
 * consuming the ring may adopt chunks, and adopting may open the file's
 * backend version or read from it (node_open_base, chunk_fill_under).  The
 * ring is consumed under s->lock alone, as the session thread consumes it;
 * then fs->ns and s->lock are retaken and the binding revalidated (the
 * session may have ended, another unbind of the token may have won) before
 * the binding ends (its names change under fs->ns).
 */
static int ioc_unbind(struct ckptfs *fs, fuse_req_t req, const struct ckptfs_ioc_unbind *in,
		      struct ckptfs_ioc_unbind *out)
{
	struct sessions *ss = fs->sessions;
	uid_t uid = fuse_req_ctx(req)->uid;
	struct unbound u = { 0 };
	struct session *s;
	struct binding *b;
	fuse_ino_t ino = 0;
	int r;

	if (!(s = session_find(ss, in->session)))
		return -ESRCH;
	pthread_mutex_lock(&s->lock);
	r = session_check(s, in->key, uid);
	if (r == 0 && !(b = binding_get(s, in->token)))
		r = -ENOENT;
	if (r == 0 && (r = consume_locked(s)) == 0) {	/* S2: what was posted before */
		for (uint32_t i = 0; i < s->npend; i++) {
			struct pend *p = &s->pend[i];
			if (p->n && p->token == in->token) {	/* posted without ADOPT */
				entry_refused(s, b, -EPROTO);
				chunk_return(s, i);
				pend_reset(p);
			}
		}
		out->error = b->err;
		out->adopted = b->adopted;
	}
	pthread_mutex_unlock(&s->lock);
	if (r < 0 || (in->flags & CKPTFS_UNBIND_FENCE)) {
		session_put(s);		/* a fence ends nothing: consumed, that is all */
		return r;
	}
	pthread_mutex_lock(&fs->ns);
	pthread_mutex_lock(&s->lock);
	r = session_check(s, in->key, uid);
	if (r == 0 && !(b = binding_get(s, in->token)))
		r = -ENOENT;
	if (r == 0) {
		bool drop = b->err || (in->flags & CKPTFS_UNBIND_DROP);
		/* The session thread may have adopted more of it meanwhile. */
		out->error = b->err;
		out->adopted = b->adopted;
		if (b->adopted && !drop)
			ino = fs_ino(fs, b->node);
		/* A file missing captured bytes is never published (S1). */
		binding_end(fs, s, b, drop, &u);
		if (drop)
			atomic_fetch_add(&ss->st.abandoned_files, 1);
	}
	pthread_mutex_unlock(&s->lock);
	pthread_mutex_unlock(&fs->ns);
	unbound_done(fs, &u);
	/* The kernel saw no write of the captured bytes: its size and pages are stale. */
	if (ino)
		fuse_lowlevel_notify_inval_inode(fs->se, ino, 0, 0);
	session_put(s);
	return r;
}

int session_ioctl(struct ckptfs *fs, fuse_req_t req, struct fshandle *h, unsigned int cmd,
		  const void *in, size_t in_size, void *out, size_t out_size)
{
	struct sessions *ss = fs->sessions;

	switch (cmd) {
	case CKPTFS_IOC_INFO: {
		struct ckptfs_ioc_info *info = out;
		if (out_size < sizeof(*info))
			return -EINVAL;
		if (!ss || !ss->up)
			return -EOPNOTSUPP;
		memset(info, 0, sizeof(*info));
		info->version = CKPTFS_PROTO_VERSION;
		info->chunk_size = fs->cache.chunk_size;
		snprintf(info->addr, sizeof(info->addr), "%s", ss->addr);
		return 0;
	}
	case CKPTFS_IOC_BIND:
		if (in_size < sizeof(struct ckptfs_ioc_bind) || out_size < sizeof(struct ckptfs_ioc_bind))
			return -EINVAL;
		if (!ss || !ss->up)
			return -EOPNOTSUPP;
		if (!h)
			return -EISDIR;
		memcpy(out, in, sizeof(struct ckptfs_ioc_bind));
		return ioc_bind(fs, req, h, in, out);
	case CKPTFS_IOC_UNBIND:
		if (in_size < sizeof(struct ckptfs_ioc_unbind) ||
		    out_size < sizeof(struct ckptfs_ioc_unbind))
			return -EINVAL;
		if (!ss || !ss->up)
			return -EOPNOTSUPP;
		memcpy(out, in, sizeof(struct ckptfs_ioc_unbind));
		return ioc_unbind(fs, req, in, out);
	default:
		return -ENOTTY;
	}
}

void session_stats_json(struct ckptfs *fs, struct strbuf *b)
{
	struct sessions *ss = fs->sessions;
	uint64_t arena = 0, adopted;

	if (!ss)
		return;
	pthread_mutex_lock(&ss->lock);
	arena = (uint64_t)ss->arena_chunks * fs->cache.chunk_size;
	pthread_mutex_unlock(&ss->lock);
	adopted = atomic_load(&ss->st.adopted_chunks);
	sb_printf(b, ", \"gpu_sessions\": %s, \"gpu_sessions_active\": %llu"
		  ", \"gpu_sessions_opened\": %llu, \"gpu_sessions_refused\": %llu"
		  ", \"gpu_arena_bytes\": %llu, \"gpu_captured_bytes\": %llu"
		  ", \"gpu_adopted_chunks\": %llu, \"gpu_ring_entries\": %llu"
		  ", \"gpu_rejected_entries\": %llu, \"gpu_moved_chunks\": %llu"
		  ", \"gpu_abandoned_files\": %llu, \"gpu_adopt_latency_avg_s\": %.6f"
		  ", \"gpu_adopt_latency_max_s\": %.6f",
		  ss->up ? "true" : "false", (unsigned long long)atomic_load(&ss->st.active),
		  (unsigned long long)atomic_load(&ss->st.opened),
		  (unsigned long long)atomic_load(&ss->st.refused), (unsigned long long)arena,
		  (unsigned long long)atomic_load(&ss->st.captured_bytes), (unsigned long long)adopted,
		  (unsigned long long)atomic_load(&ss->st.entries),
		  (unsigned long long)atomic_load(&ss->st.rejected),
		  (unsigned long long)atomic_load(&ss->st.moved_chunks),
		  (unsigned long long)atomic_load(&ss->st.abandoned_files),
		  adopted ? (double)atomic_load(&ss->st.lat_ns_sum) / 1e9 / (double)adopted : 0.0,
		  (double)atomic_load(&ss->st.lat_ns_max) / 1e9);
}
