/*
 * client.c — a libckptfs session: finding the mount's session endpoint,
 * the handshake that brings the arena, the ring and the doorbells, the
 * arena's chunk allocator, posting chunks to the ring, binding and
 * unbinding files, statistics.  The model and the locks are in client.h;
 * the protocol in include/ckptfs_ring.h.
 */
#include "gpu/client.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_ARENA (1ull << 30)
/* The daemon's default drain_timeout: how long its writers wait for a backend making no progress. */
#define DEFAULT_STALL_S 60

static __thread char last_error[512];

int ck_fail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	return err;
}

const char *ckptfs_last_error(void)
{
	return last_error;
}

int ck_usable(const struct ckptfs_session *s, const char *what)
{
	if (!s)
		return ck_fail(-EINVAL, "%s: no session", what);
	if (s->forked || s->pid != getpid())
		return ck_fail(-ECHILD, "%s: the session belongs to process %d; a forked child must "
			       "open its own", what, (int)s->pid);
	return 0;
}

uint64_t ck_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void kick(int fd)
{
	uint64_t one = 1;
	if (write(fd, &one, sizeof(one)) < 0) {
		/* a saturated counter still wakes the reader */
	}
}

bool ck_dead_locked(struct ckptfs_session *s)
{
	struct pollfd pf = { .fd = s->sock, .events = POLLIN };

	if (!s->dead && (atomic_load(&s->ring->dead) ||
			 (poll(&pf, 1, 0) > 0 && (pf.revents & (POLLIN | POLLHUP | POLLERR)))))
		s->dead = true;
	return s->dead;
}

static int dead_error(struct ckptfs_session *s)
{
	return ck_fail(-ENOTCONN, "ckptfs: the daemon of %s ended the session (unmounted, "
		       "restarted, or it found the ring inconsistent)", s->path);
}

/* ---- fork ---------------------------------------------------------------- */

/*
 * The process's sessions, for the fork handler: a child must not hold their
 * sockets, or a killed trainer's session outlives it (its files stay bound,
 * its arena reserved) as long as a fork-started helper lives.  procs_mu is
 * a leaf; the descriptors of a listed session change only under it.
 */
static pthread_mutex_t procs_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ckptfs_session *procs;
static pthread_once_t procs_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void)
{
	pthread_mutex_lock(&procs_mu);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&procs_mu);
}

/* Close s's socket and doorbells.  procs_mu held (async-signal-safe). */
static void procs_close_fds(struct ckptfs_session *s)
{
	int *fd[] = { &s->sock, &s->sq_efd, &s->cq_efd };

	for (size_t i = 0; i < sizeof(fd) / sizeof(fd[0]); i++) {
		if (*fd[i] >= 0)
			close(*fd[i]);
		*fd[i] = -1;
	}
}

/* In the child: only async-signal-safe calls. */
static void fork_child(void)
{
	for (struct ckptfs_session *s = procs; s; s = s->pnext) {
		procs_close_fds(s);
		s->forked = true;
	}
	pthread_mutex_unlock(&procs_mu);
}

static void procs_init(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static void procs_add(struct ckptfs_session *s)
{
	pthread_once(&procs_once, procs_init);
	pthread_mutex_lock(&procs_mu);
	s->pnext = procs;
	procs = s;
	pthread_mutex_unlock(&procs_mu);
}

/* Take s off the list and close its socket and doorbells, with no fork in between. */
static void procs_del(struct ckptfs_session *s)
{
	pthread_mutex_lock(&procs_mu);
	for (struct ckptfs_session **pp = &procs; *pp; pp = &(*pp)->pnext) {
		if (*pp == s) {
			*pp = s->pnext;
			break;
		}
	}
	procs_close_fds(s);
	pthread_mutex_unlock(&procs_mu);
}

/* *slot = fd, where the fork handler sees it. */
static void procs_set_fd(int *slot, int fd)
{
	pthread_mutex_lock(&procs_mu);
	*slot = fd;
	pthread_mutex_unlock(&procs_mu);
}

/* ---- opening ------------------------------------------------------------- */

/* $name as a number (with a k, m or g suffix if `sizes`); dflt if unset or not one. */
static double env_number(const char *name, double dflt, bool sizes)
{
	const char *v = getenv(name);
	char *end;
	double x;

	if (!v || !*v)
		return dflt;
	x = strtod(v, &end);
	if (end == v || x < 0)
		return dflt;
	switch (sizes ? *end : 0) {
	case 'k': case 'K': x *= 1024; break;
	case 'm': case 'M': x *= 1024 * 1024; break;
	case 'g': case 'G': x *= 1024.0 * 1024 * 1024; break;
	default: break;
	}
	return x;
}

static uint64_t env_size(const char *name, uint64_t dflt)
{
	double x = env_number(name, (double)dflt, true);
	return x > 0 ? (uint64_t)x : dflt;
}

/* The GPU's PCI bus id, for the daemon's NUMA placement ("" if unknown). */
static void gpu_bus_id(const struct ckcu *cu, int ordinal, char *id, size_t len)
{
	ckcu_context ctx = NULL;
	ckcu_device dev;

	id[0] = '\0';
	if (!cu)
		return;
	if (ordinal < 0 && cu->CtxGetCurrent(&ctx) == CKCU_SUCCESS && ctx &&
	    cu->CtxGetDevice(&dev) == CKCU_SUCCESS) {
		cu->DeviceGetPCIBusId(id, (int)len, dev);
		return;
	}
	if (cu->DeviceGet(&dev, ordinal < 0 ? 0 : ordinal) == CKCU_SUCCESS)
		cu->DeviceGetPCIBusId(id, (int)len, dev);
}

static int endpoint(const char *path, struct ckptfs_ioc_info *info)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), r = 0;

	if (fd < 0)
		return ck_fail(-errno, "ckptfs: %s: %s", path, strerror(errno));
	memset(info, 0, sizeof(*info));
	if (ioctl(fd, CKPTFS_IOC_INFO, info) < 0)
		r = -errno;
	close(fd);
	if (r == -ENOTTY || r == -ENOSYS || r == -EINVAL)
		return ck_fail(-ENOTTY, "ckptfs: %s is not on a ckptfs mount (or its daemon "
			       "predates GPU sessions)", path);
	if (r == -EOPNOTSUPP)
		return ck_fail(r, "ckptfs: the mount holding %s does not offer GPU sessions "
			       "(mounted with sessions=off)", path);
	if (r < 0)
		return ck_fail(r, "ckptfs: %s: asking for the session endpoint: %s", path,
			       strerror(-r));
	if (info->version != CKPTFS_PROTO_VERSION)
		return ck_fail(-EPROTONOSUPPORT, "ckptfs: the daemon speaks session protocol %u, "
			       "this libckptfs %u", info->version, CKPTFS_PROTO_VERSION);
	info->addr[sizeof(info->addr) - 1] = '\0';
	return 0;
}

/* Connect s->sock (set where the fork handler sees it) to addr: 0 or -errno. */
static int connect_to(struct ckptfs_session *s, const char *addr)
{
	struct sockaddr_un sa;
	socklen_t len = ckptfs_sockaddr(addr, &sa);
	int r = 0;

	if (!len)
		return -EINVAL;
	pthread_mutex_lock(&procs_mu);	/* no fork between the socket and its slot */
	if ((s->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		r = -errno;
	pthread_mutex_unlock(&procs_mu);
	if (r == 0 && connect(s->sock, (struct sockaddr *)&sa, len) < 0)
		r = -errno;
	return r;
}

/* The welcome and its four descriptors. */
static int recv_welcome(int sock, struct ckptfs_welcome *w, int fds[4])
{
	char cbuf[CMSG_SPACE(4 * sizeof(int))];
	struct iovec iov = { w, sizeof(*w) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	ssize_t n = recvmsg(sock, &mh, MSG_WAITALL | MSG_CMSG_CLOEXEC);
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);

	fds[0] = fds[1] = fds[2] = fds[3] = -1;
	if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
	    cm->cmsg_len == CMSG_LEN(4 * sizeof(int)))
		memcpy(fds, CMSG_DATA(cm), 4 * sizeof(int));
	if (n != (ssize_t)sizeof(*w) || w->magic != CKPTFS_HELLO_MAGIC)
		return -EPROTO;
	if (w->error == 0 && (fds[0] < 0 || (mh.msg_flags & MSG_CTRUNC)))
		return -EPROTO;
	return 0;
}

/* Map the arena and the ring; the doorbells (fds[2], fds[3]) are the session's, whatever happens. */
static int session_map(struct ckptfs_session *s, const struct ckptfs_welcome *w, int fds[4])
{
	procs_set_fd(&s->sq_efd, fds[2]);
	procs_set_fd(&s->cq_efd, fds[3]);
	s->cs = w->chunk_size;
	s->nchunks = w->nchunks;
	s->arena_bytes = (size_t)w->nchunks * w->chunk_size;
	s->ring_bytes = w->ring_bytes;
	s->arena = mmap(NULL, s->arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
	s->ring = mmap(NULL, s->ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
	if (s->arena == MAP_FAILED || s->ring == MAP_FAILED)
		return -errno;
	madvise(s->arena, s->arena_bytes, MADV_DONTFORK);	/* children never see it */
	madvise(s->ring, s->ring_bytes, MADV_DONTFORK);
	struct ckptfs_ring_hdr *h = s->ring;
	if (h->magic != CKPTFS_RING_MAGIC || h->nchunks != s->nchunks || h->chunk_size != s->cs ||
	    !h->sq_entries || (h->sq_entries & (h->sq_entries - 1)) ||
	    h->sq_off + (uint64_t)h->sq_entries * sizeof(struct ckptfs_sqe) > s->ring_bytes ||
	    h->bitmap_off + (uint64_t)(s->nchunks + 63) / 64 * 8 > s->ring_bytes)
		return -EPROTO;
	s->sqe = (struct ckptfs_sqe *)((char *)s->ring + h->sq_off);
	s->sq_mask = h->sq_entries - 1;
	s->bitmap = (_Atomic uint64_t *)((char *)s->ring + h->bitmap_off);
	s->tail = atomic_load(&h->sq_tail);
	s->numa_node = w->numa_node;
	s->hugepages = w->flags & CKPTFS_WELCOME_HUGEPAGES;
	s->chunks = calloc(s->nchunks, sizeof(*s->chunks));
	s->freelist = calloc(s->nchunks, sizeof(*s->freelist));
	return s->chunks && s->freelist ? 0 : -ENOMEM;
}

static void session_free(struct ckptfs_session *s)
{
	procs_del(s);		/* and its descriptors */
	if (s->arena && s->arena != MAP_FAILED)
		munmap(s->arena, s->arena_bytes);
	if (s->ring && s->ring != MAP_FAILED)
		munmap(s->ring, s->ring_bytes);
	for (uint32_t i = 0; s->chunks && i < s->nchunks; i++)
		free(s->chunks[i].r);
	free(s->chunks);
	free(s->freelist);
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->ring_mu);
	pthread_mutex_destroy(&s->cuda_mu);
	pthread_cond_destroy(&s->cv);
	free(s);
}

ckptfs_session *ckptfs_session_open_ex(const char *path, const struct ckptfs_session_opts *o)
{
	struct ckptfs_session *s = calloc(1, sizeof(*s));
	struct ckptfs_ioc_info info;
	struct ckptfs_hello h = { .magic = CKPTFS_HELLO_MAGIC, .version = CKPTFS_PROTO_VERSION,
				  .numa_node = -1 };
	struct ckptfs_welcome w;
	int fds[4] = { -1, -1, -1, -1 }, r;

	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	s->sock = s->sq_efd = s->cq_efd = -1;
	s->numa_node = -1;
	s->pid = getpid();
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->ring_mu, NULL);
	pthread_mutex_init(&s->cuda_mu, NULL);
	pthread_condattr_t ca;	/* the finisher's timed waits: CLOCK_MONOTONIC */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cv, &ca);
	pthread_condattr_destroy(&ca);
	snprintf(s->path, sizeof(s->path), "%s", path ? path : "");
	procs_add(s);
	if (!path) {
		r = ck_fail(-EINVAL, "ckptfs_session_open: no path");
		goto fail;
	}
	s->cu = ckcu_get(NULL, 0);
	if ((r = endpoint(path, &info)) < 0)
		goto fail;
	if ((r = connect_to(s, info.addr)) < 0) {
		ck_fail(r, "ckptfs: cannot reach the session endpoint %s of %s: %s "
			"(another network namespace?)", info.addr, path, strerror(-r));
		goto fail;
	}
	s->stall_ns = (uint64_t)(env_number("CKPTFS_STALL_TIMEOUT", DEFAULT_STALL_S, false) * 1e9);
	h.arena_bytes = o && o->arena_bytes ? o->arena_bytes : env_size("CKPTFS_ARENA_SIZE", DEFAULT_ARENA);
	gpu_bus_id(s->cu, o ? o->device : -1, h.pci_bus_id, sizeof(h.pci_bus_id));
	if (send(s->sock, &h, sizeof(h), MSG_NOSIGNAL) != (ssize_t)sizeof(h)) {
		r = ck_fail(-errno, "ckptfs: sending the session hello: %s", strerror(errno));
		goto fail;
	}
	memset(&w, 0, sizeof(w));
	if ((r = recv_welcome(s->sock, &w, fds)) < 0) {
		ck_fail(r, "ckptfs: the daemon of %s answered the session hello with garbage", path);
		goto fail;
	}
	if (w.error) {
		w.message[sizeof(w.message) - 1] = '\0';
		r = ck_fail(w.error < 0 ? w.error : -EIO, "ckptfs: %s refused a GPU session: %s", path,
			    w.message);
		goto fail;
	}
	s->id = w.session;
	s->key[0] = w.key[0];
	s->key[1] = w.key[1];
	r = session_map(s, &w, fds);
	fds[2] = fds[3] = -1;	/* the session owns the doorbells now */
	if (r < 0) {
		ck_fail(r, "ckptfs: mapping the session's arena and ring: %s", strerror(-r));
		goto fail;
	}
	close(fds[0]);
	close(fds[1]);
	fds[0] = fds[1] = -1;
	int ncrc = o && o->crc_threads > 0 ? o->crc_threads : (int)env_size("CKPTFS_CRC_THREADS", 0);
	if ((r = ck_threads_start(s, ncrc)) < 0) {
		ck_fail(r, "ckptfs: cannot start the session's threads: %s", strerror(-r));
		goto fail;
	}
	return s;
fail:
	for (int i = 0; i < 4; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	session_free(s);
	errno = -r;
	return NULL;
}

ckptfs_session *ckptfs_session_open(const char *path)
{
	return ckptfs_session_open_ex(path, NULL);
}

int ckptfs_session_close(ckptfs_session *s)
{
	int r, w;

	if (!s)
		return 0;
	if ((r = ck_usable(s, "ckptfs_session_close")) < 0)
		return r;	/* a child: the parent's session is not its to end */
	w = ckptfs_wait_captured(s);
	r = ckptfs_wait_files(s);
	ck_threads_stop(s);
	ck_cuda_release(s);
	while (s->files) {
		struct ck_file *f = s->files;
		ck_file_free(s, f);	/* still bound: the daemon drops them with the session */
	}
	session_free(s);
	return r ? r : w;
}

/* ---- files ---------------------------------------------------------------- */

int ck_file_get(struct ckptfs_session *s, int fd, uint64_t limit, struct ck_file **out)
{
	struct ck_file *f;
	struct ckptfs_ioc_bind b = { .session = s->id, .key = { s->key[0], s->key[1] },
				     .limit = limit };

	for (f = s->files; f; f = f->next) {
		if (f->fd == fd && !f->closing) {
			*out = f;
			return 0;
		}
	}
	if (ioctl(fd, CKPTFS_IOC_BIND, &b) < 0) {
		int e = errno;
		switch (e) {
		case EPERM:
			return ck_fail(-e, "ckptfs: fd %d: not allowed: the session belongs to another "
				       "user (or its key is wrong)", fd);
		case EEXIST:
			return ck_fail(-e, "ckptfs: fd %d: the file was closed before (its first "
				       "version is published); capture into a file created since", fd);
		case EBADF:
			return ck_fail(-e, "ckptfs: fd %d is not open for writing", fd);
		case EBUSY:
			return ck_fail(-e, "ckptfs: fd %d: the file is bound to another session", fd);
		case ENOTTY: case ENOSYS:
			return ck_fail(-ENOTTY, "ckptfs: fd %d is not a file on a ckptfs mount", fd);
		case ESRCH: case ENOTCONN:
			s->dead = true;
			return dead_error(s);
		default:
			return ck_fail(-e, "ckptfs: fd %d: binding it to the session: %s", fd, strerror(e));
		}
	}
	if (!(f = calloc(1, sizeof(*f))))
		return ck_fail(-ENOMEM, "ckptfs: out of memory");
	f->fd = fd;
	f->bound = true;
	f->token = b.token;
	f->limit = limit;
	f->next = s->files;
	s->files = f;
	*out = f;
	return 0;
}

void ck_file_free(struct ckptfs_session *s, struct ck_file *f)
{
	for (struct ck_file **pp = &s->files; *pp; pp = &(*pp)->next) {
		if (*pp == f) {
			*pp = f->next;
			break;
		}
	}
	for (uint32_t i = 0; i < f->ncaps; i++)
		free(f->caps[i]);
	free(f->caps);
	free(f->patches);
	free(f->from);
	free(f->to);
	free(f);
}

void ck_file_fail(struct ck_file *f, int err)
{
	if (!f->err) {
		f->err = err;
		snprintf(f->msg, sizeof(f->msg), "%s", ckptfs_last_error());
	}
}

int ckptfs_file_bind(ckptfs_session *s, int fd, uint64_t size)
{
	struct ck_file *f;
	int r;

	int u = ck_usable(s, "ckptfs_file_bind");

	if (u < 0)
		return u;
	if (fd < 0)
		return ck_fail(-EBADF, "ckptfs_file_bind: no fd");
	pthread_mutex_lock(&s->mu);
	if (ck_dead_locked(s)) {
		r = dead_error(s);
	} else if ((r = ck_file_get(s, fd, size, &f)) == 0 && size && f->limit != size) {
		r = ck_fail(-EBUSY, "ckptfs_file_bind: fd %d is already bound (without this size)", fd);
	}
	pthread_mutex_unlock(&s->mu);
	return r;
}

int ck_unbind(struct ckptfs_session *s, struct ck_file *f, unsigned flags)
{
	struct ckptfs_ioc_unbind u = { .session = s->id, .key = { s->key[0], s->key[1] },
				       .token = f->token, .flags = flags };

	if (!f->bound)
		return 0;
	if (!(flags & CKPTFS_UNBIND_FENCE))
		f->bound = false;
	if (ioctl(f->fd, CKPTFS_IOC_UNBIND, &u) < 0)
		return -errno;
	return u.error;
}

/* ---- the arena ------------------------------------------------------------ */

/* Take every chunk the daemon returned into the free list.  mu held. */
static void harvest(struct ckptfs_session *s)
{
	for (uint32_t w = 0; w < (s->nchunks + 63) / 64; w++) {
		uint64_t bits = atomic_exchange(&s->bitmap[w], 0);
		while (bits) {
			uint32_t b = (uint32_t)__builtin_ctzll(bits);
			bits &= bits - 1;
			uint32_t c = w * 64 + b;
			if (c < s->nchunks && !s->chunks[c].f && s->nfree < s->nchunks)
				s->freelist[s->nfree++] = c;
		}
	}
}

/* Sleep until the daemon rings (or 50 ms), mu dropped; tell it we wait. */
static void wait_daemon(struct ckptfs_session *s)
{
	struct pollfd pf[2] = { { .fd = s->cq_efd, .events = POLLIN },
				{ .fd = s->sock, .events = POLLIN } };
	uint64_t v;

	atomic_store(&s->ring->client_waiting, 1);
	kick(s->sq_efd);
	pthread_mutex_unlock(&s->mu);
	if (poll(pf, 2, 50) > 0 && (pf[0].revents & POLLIN) && read(s->cq_efd, &v, sizeof(v)) < 0) {
		/* raced with another reader: fine */
	}
	pthread_mutex_lock(&s->mu);
}

/*
 * The daemon gave nothing back (`what`) for s->stall_ns since `since` (a
 * ck_now_ns, 0: not waiting yet, now starts it)?  Then the error.
 */
static int stalled(struct ckptfs_session *s, uint64_t *since, const char *what)
{
	uint64_t now = ck_now_ns();

	if (!*since)
		*since = now;
	if (!s->stall_ns || now - *since <= s->stall_ns)
		return 0;
	return ck_fail(-ETIMEDOUT, "ckptfs: the daemon of %s gave back no %s for %.0f s (its "
		       "backend makes no progress?); CKPTFS_STALL_TIMEOUT sets this limit", s->path,
		       what, (double)s->stall_ns / 1e9);
}

static void wait_done(struct ckptfs_session *s)
{
	atomic_store(&s->ring->client_waiting, 0);
	kick(s->sq_efd);
}

int ck_chunk_alloc(struct ckptfs_session *s, uint32_t *out, bool may_wait)
{
	bool waited = false;
	uint64_t since = 0;
	int r = 0;

	for (;;) {
		if (ck_dead_locked(s)) {
			r = dead_error(s);
			break;
		}
		if (!s->nfree)
			harvest(s);
		if (s->nfree) {
			*out = s->freelist[--s->nfree];
			break;
		}
		if (!may_wait) {
			r = -EAGAIN;
			break;
		}
		/* Short of chunks: hand over every chunk held (the busy ones when done). */
		for (struct ck_file *f = s->files; f; f = f->next)
			ck_file_close_chunks(s, f);
		harvest(s);
		if (s->nfree)
			continue;
		if ((r = stalled(s, &since, "arena chunk")) < 0)
			break;
		waited = true;
		wait_daemon(s);
	}
	if (waited)
		wait_done(s);
	return r;
}

void ck_file_close_chunks(struct ckptfs_session *s, struct ck_file *f)
{
	uint64_t now = 0;

	for (struct ck_chunk *c = f->open, *next; c; c = next) {
		next = c->next;
		c->closing = true;
		if (!c->pending) {
			if (!now)
				now = ck_now_ns();
			ck_chunk_post(s, (uint32_t)(c - s->chunks), now);
		}
	}
}

/*
 * Room for one more entry in the ring; waits for the daemon while it
 * consumes entries.  0, or -ETIMEDOUT.  mu and ring_mu held.
 */
static int ring_room(struct ckptfs_session *s)
{
	uint32_t head, seen = atomic_load_explicit(&s->ring->sq_head, memory_order_acquire);
	uint64_t since = 0;
	int r;

	while (s->tail - (head = atomic_load_explicit(&s->ring->sq_head, memory_order_acquire)) >
	       s->sq_mask && !ck_dead_locked(s)) {
		if (head != seen) {	/* it moves: the limit counts from here */
			seen = head;
			since = 0;
		}
		if ((r = stalled(s, &since, "ring space")) < 0)
			return r;
		atomic_store_explicit(&s->ring->sq_tail, s->tail, memory_order_release);
		pthread_mutex_unlock(&s->ring_mu);
		wait_daemon(s);
		wait_done(s);
		pthread_mutex_lock(&s->ring_mu);
	}
	return 0;
}

void ck_chunk_post(struct ckptfs_session *s, uint32_t c, uint64_t t_ns)
{
	struct ck_chunk *ch = &s->chunks[c];
	struct ck_file *f = ch->f;

	for (struct ck_chunk **pp = &f->open; *pp; pp = &(*pp)->next) {
		if (*pp == ch) {
			*pp = ch->next;
			break;
		}
	}
	ch->f = NULL;
	ch->next = NULL;
	ch->closing = false;
	if (ch->n == 0) {	/* nothing landed in it (its copies failed): keep it */
		s->freelist[s->nfree++] = c;
		return;
	}
	f->posting++;		/* the finisher unbinds f only after this */
	pthread_mutex_lock(&s->ring_mu);
	for (uint32_t i = 0; i < ch->n && !s->dead; i++) {
		int r = ring_room(s);
		if (r < 0) {
			/*
			 * The entries posted have no ADOPT: the daemon refuses them
			 * at unbind.  The chunk stays out of use (the daemon may
			 * hold some of its ranges) and the file is dropped.
			 */
			ck_file_fail(f, r);
			break;
		}
		struct ckptfs_sqe *e = &s->sqe[s->tail & s->sq_mask];
		e->op = CKPTFS_SQE_DATA;
		e->flags = i + 1 == ch->n ? CKPTFS_SQE_ADOPT : 0;
		e->token = f->token;
		e->chunk = c;
		e->lo = ch->r[i].lo;
		e->hi = ch->r[i].hi;
		e->pad = 0;
		e->index = ch->index;
		e->t_ns = t_ns;
		s->tail++;
	}
	atomic_store_explicit(&s->ring->sq_tail, s->tail, memory_order_release);
	pthread_mutex_unlock(&s->ring_mu);
	ch->n = 0;
	f->posting--;
	kick(s->sq_efd);
	pthread_cond_broadcast(&s->cv);
}

/* ---- statistics ----------------------------------------------------------- */

int ckptfs_session_stats(ckptfs_session *s, struct ckptfs_stats *st)
{
	struct ckptfs_ring_hdr *h;

	int r = ck_usable(s, "ckptfs_session_stats");

	if (r < 0)
		return r;
	if (!st)
		return ck_fail(-EINVAL, "ckptfs_session_stats: no stats to fill");
	h = s->ring;
	memset(st, 0, sizeof(*st));
	st->arena_bytes = s->arena_bytes;
	st->chunk_size = s->cs;
	pthread_mutex_lock(&s->mu);
	st->captures = s->captures;
	st->captured_bytes = s->captured_bytes;
	st->host_written_bytes = s->host_bytes;
	pthread_mutex_unlock(&s->mu);
	st->entries = atomic_load(&h->entries);
	st->adopted_chunks = atomic_load(&h->adopted_chunks);
	st->adopted_bytes = atomic_load(&h->adopted_bytes);
	st->merged_bytes = atomic_load(&h->merged_bytes);
	st->moved_chunks = atomic_load(&h->moved_chunks);
	st->rejected = atomic_load(&h->rejected);
	st->arena_waits = atomic_load(&h->full_waits);
	st->arena_wait_ns = atomic_load(&h->full_wait_ns);
	if (st->adopted_chunks)
		st->adopt_latency_avg_s = (double)atomic_load(&h->lat_ns_sum) / 1e9 /
					  (double)st->adopted_chunks;
	st->adopt_latency_max_s = (double)atomic_load(&h->lat_ns_max) / 1e9;
	st->numa_node = s->numa_node;
	st->hugepages = s->hugepages;
	st->arena_pinned = s->pinned;
	st->driver = !s->cu ? "none" : s->cu->mock ? "mock" : "cuda";
	return 0;
}
