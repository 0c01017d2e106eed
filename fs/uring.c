/*
 * uring.c — FUSE requests over io_uring (Linux 6.14+, CONFIG_FUSE_IO_URING,
 * the fuse module's enable_uring parameter), beside our /dev/fuse loop.
 *
 * Instead of a readv(2) (or splice(2) and read(2)) of /dev/fuse per request
 * and a write(2) per reply, each worker thread owns an io_uring and registers ring
 * entries with the kernel: a 288-byte header buffer and a payload buffer.
 * The kernel has one queue per possible CPU and hands a request to an
 * entry of the queue of the CPU the caller runs on; the thread finds it in
 * its completion queue, runs it through libfuse, writes the reply into the
 * same buffers and commits it with COMMIT_AND_FETCH, which also re-arms
 * the entry: one system call per request instead of two, and the threads
 * of a queue are pinned to its CPU so caller and daemon share its caches.
 * The cost: a write's data is copied twice (caller's pages to the entry's
 * payload, then into the cache), like splice, which on this kernel also
 * copies a direct-I/O writer's pages into fresh pipe pages; the readv loop
 * (loop.c) reads a write's data into a free cache chunk that the file may
 * take as it lies, but an entry's payload buffer is fixed when it is
 * registered.
 *
 * Life cycle (driven by loop.c and devio.c):
 *   fsu_prepare  before the mount's INIT is answered: start the threads and
 *                let each set up its ring; the kernel is offered io_uring
 *                only if every ring came up (a queue without entries would
 *                hold every request back: the kernel waits for all queues);
 *   fsu_start    once the kernel accepted INIT with FUSE_OVER_IO_URING:
 *                register the entries; if the kernel refuses one, it falls
 *                back to /dev/fuse by itself and the threads leave;
 *   fsu_cancel   INIT did not ask for it: the threads leave;
 *   fsu_stop     the session ends: wake, leave, join.
 * INIT, FORGET and INTERRUPT always come through /dev/fuse, so the loop's
 * workers keep running beside these threads.
 *
 * A limit of the kernel's design, and what is done about it: a request
 * that finds no free entry on its CPU's queue waits until an entry of that
 * queue commits (registering a new entry does not take it), and an entry
 * whose reply is deferred (fsync and drain reply once durable) commits
 * only then.  So each thread keeps ENTS_FREE entries free, registering one
 * more for every deferred reply, up to ENTS_MAX; a burst of deferred
 * requests larger than a queue's free entries still makes the later
 * requests of that CPU wait for the next reply there.  The /dev/fuse loop
 * has no such limit.
 *
 * An entry's states (E1..E3 below), with ent->state an atomic:
 *   FREE     registered, waiting in the kernel for a request;
 *   BUSY     its request is being handled by its thread;
 *   PARKED   the handler returned without replying (fsync and drain reply
 *            later, from another thread);
 *   REPLIED  the reply is in the buffers: its thread commits it.
 *   E1  Only an entry's own thread submits for it (the rings are
 *       single-issuer); a reply from another thread is handed over on the
 *       thread's commit list and its eventfd.
 *   E2  A reply is copied into the buffers before the state leaves BUSY or
 *       PARKED (release), and the thread reads them after (acquire).
 *   E3  An entry is committed exactly once per request; unique is cleared
 *       before the commit, so a late lookup cannot find it.
 * Lock order: thr->lock is a leaf (the commit list).  U.lock guards the
 * start-up phase and U.why.  CKPTFS_FUSE_URING_FAULT (tests only): "setup"
 * fails every ring's setup, "register" makes the kernel refuse every entry.
 */
#include "fs/fs.h"
#include "fs/fuse_kapi.h"
#include "cache/log.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

/*
 * Entries per thread free to take requests.  The kernel gives a request to
 * an entry when the request arrives or when an entry commits; an entry
 * registered later does not take requests already waiting.  So entries
 * must be free before a burst comes: a thread keeps ENTS_FREE entries free
 * and registers more as replies are deferred (parked), up to ENTS_MAX.
 */
#define ENTS_FREE 4
#define ENTS_MAX 32		/* at most, counting those parked on a later reply */
#define PREFIX 4096		/* room for the in header and the op header before the payload */
#define EFD_TAG 1ull		/* user_data of the eventfd read */

enum { ENT_FREE, ENT_BUSY, ENT_PARKED, ENT_REPLIED, ENT_DEAD };
enum { PH_PREPARING, PH_READY, PH_GO, PH_CANCELLED };

struct fsu_thr;

struct fsu_ent {
	struct fsu_thr *t;
	uint16_t qid;
	_Atomic int state;
	_Atomic uint64_t unique;
	struct kapi_uring_req_header *hdr;
	char *area;		/* PREFIX + payload, mmap'ed */
	char *payload;
	struct iovec iov[2];
	struct fsu_ent *next;	/* on t->commits */
};

struct fsu_thr {
	struct io_uring ring;
	pthread_t th;
	bool started;
	int efd;
	uint64_t efd_buf;
	pthread_mutex_t lock;
	struct fsu_ent *commits;	/* replied by other threads (lock) */
	struct fsu_ent ents[ENTS_MAX];
	atomic_uint nents;	/* entries made (only the thread adds; others read) */
	unsigned parked;	/* of which waiting for a reply from another thread */
	uint16_t qid;		/* the queue (CPU) its entries serve */
	unsigned live;		/* entries not dead */
	atomic_bool done;	/* left its loop */
};

static struct {
	struct ckptfs *fs;
	struct fuse_session *se;
	int devfd;
	unsigned nthr, nqueues;
	struct fsu_thr *thr;
	size_t payload;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int phase;
	bool pin;		/* threads pinned to their queue's CPU (pin_to_queue) */
	unsigned up, failed;	/* threads whose ring came up / failed */
	atomic_bool stop;
	atomic_uint serving;	/* threads with registered entries */
	atomic_uint_least64_t requests, async_replies;
	char why[160];		/* why it is not in use, for the stats */
} U = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

/* The entry whose request this thread is handling (fast path for replies). */
static __thread struct fsu_ent *cur;

/* Queues the kernel makes: one per possible CPU (ids up to the highest). */
static unsigned possible_cpus(void)
{
	unsigned hi = 0;
	FILE *f = fopen("/sys/devices/system/cpu/possible", "re");
	char line[256];

	if (f && fgets(line, sizeof(line), f)) {
		/* "0-63" or "0-3,8-11": the last number is the highest id. */
		for (char *p = line; *p; p++)
			if (*p >= '0' && *p <= '9') {
				hi = (unsigned)strtoul(p, &p, 10);
				p--;
			}
	}
	if (f)
		fclose(f);
	return hi + 1;
}

bool fsu_kernel_enabled(void)
{
	char c = 'N';
	int fd = open("/sys/module/fuse/parameters/enable_uring", O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		if (read(fd, &c, 1) != 1)
			c = 'N';
		close(fd);
	}
	return c == 'Y' || c == '1';
}

/* Buffers for entry k of t; false if memory is short. */
static bool ent_init(struct fsu_thr *t, unsigned k, uint16_t qid)
{
	struct fsu_ent *e = &t->ents[k];

	e->t = t;
	e->qid = qid;
	void *hdr = NULL;
	e->hdr = posix_memalign(&hdr, 64, sizeof(*e->hdr)) == 0 ? hdr : NULL;
	e->area = mmap(NULL, PREFIX + U.payload, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (!e->hdr || e->area == MAP_FAILED) {
		free(e->hdr);
		if (e->area != MAP_FAILED)
			munmap(e->area, PREFIX + U.payload);
		e->hdr = NULL;
		e->area = NULL;
		return false;
	}
	memset(e->hdr, 0, sizeof(*e->hdr));
	e->payload = e->area + PREFIX;
	e->iov[0] = (struct iovec){ e->hdr, sizeof(*e->hdr) };
	e->iov[1] = (struct iovec){ e->payload, U.payload };
	return true;
}

static void prep_cmd(struct io_uring_sqe *sqe, struct fsu_ent *e, uint32_t op, uint64_t commit_id)
{
	struct kapi_uring_cmd_req req = { .commit_id = commit_id, .qid = e->qid };

	memset(sqe, 0, 2 * sizeof(*sqe));	/* a 128-byte SQE */
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = U.devfd;
	sqe->cmd_op = op;
	if (op == KAPI_URING_CMD_REGISTER) {
		sqe->addr = (uint64_t)(uintptr_t)e->iov;
		sqe->len = 2;
	}
	memcpy(sqe->cmd, &req, sizeof(req));
	io_uring_sqe_set_data(sqe, e);
}

static bool push_cmd(struct fsu_thr *t, struct fsu_ent *e, uint32_t op, uint64_t commit_id)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);

	if (!sqe) {
		io_uring_submit(&t->ring);
		sqe = io_uring_get_sqe(&t->ring);
	}
	if (!sqe)
		return false;
	prep_cmd(sqe, e, op, commit_id);
	return true;
}

static void arm_efd(struct fsu_thr *t)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);

	if (!sqe) {
		io_uring_submit(&t->ring);
		sqe = io_uring_get_sqe(&t->ring);
	}
	if (!sqe)
		return;
	memset(sqe, 0, 2 * sizeof(*sqe));
	io_uring_prep_read(sqe, t->efd, &t->efd_buf, sizeof(t->efd_buf), 0);
	io_uring_sqe_set_data64(sqe, EFD_TAG);
}

/*
 * Where a ring thread runs.  A request is queued on the CPU its caller runs
 * on, and the caller sleeps until the reply.  By default each thread is
 * pinned to its queue's CPU (as libfuse does): a large write is then served
 * on the CPU whose caches hold the caller's data — measured here, 1 MiB
 * writes ~1.0-1.15x a tmpfs copy pinned, ~1.15-1.45x floating.  A stream of
 * small synchronous requests pays for it, each one switching that CPU
 * between the caller's and the daemon's address space: 8 KiB writes ~2.5-5x
 * tmpfs pinned, ~2.4x floating.  CKPTFS_FUSE_URING_PIN=0 lets the threads
 * float.  (Following each thread's recent request sizes with
 * sched_setaffinity was tried: it was worse than either.)
 */
static void pin_to_queue(struct fsu_thr *t)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(t->qid, &set);
	if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0)
		log_debug("io_uring: cannot pin a ring thread to CPU %u (cpuset?)", t->qid);
}

/* Commit the reply in e's buffers and fetch the next request (E3). */
static void commit(struct fsu_thr *t, struct fsu_ent *e)
{
	uint64_t u = atomic_load(&e->unique);

	atomic_store(&e->unique, 0);
	atomic_store(&e->state, ENT_FREE);
	if (!push_cmd(t, e, KAPI_URING_CMD_COMMIT_AND_FETCH, u)) {
		log_err("io_uring: no submission slot to commit a reply; entry lost");
		atomic_store(&e->state, ENT_DEAD);
		t->live--;
	}
}

/* Run the request that arrived in e through libfuse. */
static void handle(struct fsu_thr *t, struct fsu_ent *e)
{
	const struct fuse_in_header *ih = (const void *)e->hdr->in_out;
	uint32_t psz = e->hdr->ring_ent_in_out.payload_sz;
	uint64_t opsz = (uint64_t)ih->len - sizeof(*ih) - psz;

	atomic_fetch_add_explicit(&U.requests, 1, memory_order_relaxed);
	atomic_store(&e->unique, ih->unique);
	atomic_store(&e->state, ENT_BUSY);
	if (ih->len < sizeof(*ih) + psz || opsz > KAPI_URING_OP_IN_OUT_SZ || psz > U.payload) {
		/* Malformed: answer EIO so the caller is not left waiting. */
		struct fuse_out_header oh = { .len = sizeof(oh), .error = -EIO, .unique = ih->unique };
		struct iovec iov = { &oh, sizeof(oh) };
		log_err("io_uring: malformed request (opcode %u, len %u, payload %u)", ih->opcode,
			ih->len, psz);
		fsu_reply(&iov, 1);
	} else {
		/* libfuse wants one buffer: headers just before the payload. */
		char *start = e->payload - opsz - sizeof(*ih);
		memcpy(start, ih, sizeof(*ih));
		memcpy(start + sizeof(*ih), e->hdr->op_in, opsz);
		struct fuse_buf buf = { .size = ih->len, .mem = start };
		cur = e;
		fuse_session_process_buf(U.se, &buf);
		cur = NULL;
	}
	int s = ENT_BUSY;
	if (!atomic_compare_exchange_strong(&e->state, &s, ENT_PARKED)) {
		commit(t, e);	/* REPLIED */
		return;
	}
	/*
	 * The reply comes later, from another thread (fsync, drain): keep
	 * ENTS_FREE entries free for new requests meanwhile, so waiting
	 * requests do not hold everyone else back.
	 */
	t->parked++;
	for (unsigned n; (n = atomic_load(&t->nents)) - t->parked < ENTS_FREE && n < ENTS_MAX;) {
		if (!ent_init(t, n, e->qid))
			break;
		atomic_store(&t->nents, n + 1);
		if (push_cmd(t, &t->ents[n], KAPI_URING_CMD_REGISTER, 0))
			t->live++;
	}
}

/* Commit what other threads replied (E1). */
static void take_commits(struct fsu_thr *t)
{
	pthread_mutex_lock(&t->lock);
	struct fsu_ent *e = t->commits;
	t->commits = NULL;
	pthread_mutex_unlock(&t->lock);
	for (struct fsu_ent *next; e; e = next) {
		next = e->next;
		t->parked--;
		commit(t, e);
	}
}

static int ring_setup(struct fsu_thr *t)
{
	struct io_uring_params p;
	unsigned depth = 2 * ENTS_MAX + 4;
	static const unsigned tries[] = {
		IORING_SETUP_SQE128 | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
		IORING_SETUP_SQE128 | IORING_SETUP_COOP_TASKRUN,
		IORING_SETUP_SQE128,
	};
	int r = -EINVAL;
	const char *fault = getenv("CKPTFS_FUSE_URING_FAULT");

	if (fault && !strcmp(fault, "setup"))
		return -EPERM;	/* tests: as where io_uring is disabled */
	for (size_t i = 0; i < CKPT_ARRAY_LEN(tries); i++) {
		memset(&p, 0, sizeof(p));
		p.flags = tries[i];
		if ((r = io_uring_queue_init_params(depth, &t->ring, &p)) == 0)
			return 0;
	}
	return r;
}

static void *thr_main(void *arg)
{
	struct fsu_thr *t = arg;
	char name[16];
	int r;

	snprintf(name, sizeof(name), "ckptfs-uring%u", (unsigned)(t->qid % 1000));
	pthread_setname_np(pthread_self(), name);
	if (U.pin)
		pin_to_queue(t);

	r = ring_setup(t);
	bool ring_up = r == 0;
	pthread_mutex_lock(&U.lock);
	if (r < 0) {
		U.failed++;
		snprintf(U.why, sizeof(U.why), "io_uring_setup: %s", strerror(-r));
	} else {
		U.up++;
	}
	pthread_cond_broadcast(&U.cond);
	while (U.phase < PH_GO && r == 0)
		pthread_cond_wait(&U.cond, &U.lock);
	bool go = r == 0 && U.phase == PH_GO;
	pthread_mutex_unlock(&U.lock);
	if (!go)
		goto out;

	const char *fault = getenv("CKPTFS_FUSE_URING_FAULT");
	for (unsigned i = 0; i < atomic_load(&t->nents); i++) {
		if (fault && !strcmp(fault, "register"))
			t->ents[i].qid = UINT16_MAX;	/* tests: the kernel refuses the entry */
		if (push_cmd(t, &t->ents[i], KAPI_URING_CMD_REGISTER, 0))
			t->live++;
	}
	arm_efd(t);
	io_uring_submit(&t->ring);
	atomic_fetch_add(&U.serving, 1);
	while (t->live && !atomic_load(&U.stop)) {
		struct io_uring_cqe *cqe;
		r = io_uring_submit_and_wait(&t->ring, 1);
		if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY) {
			log_err("io_uring: waiting for FUSE requests: %s", strerror(-r));
			break;
		}
		unsigned head, seen = 0;
		io_uring_for_each_cqe(&t->ring, head, cqe) {
			seen++;
			if (cqe->user_data == EFD_TAG) {
				take_commits(t);
				arm_efd(t);
				continue;
			}
			struct fsu_ent *e = io_uring_cqe_get_data(cqe);
			if (cqe->res < 0) {
				/* Unmounted (-ENOTCONN), cancelled, or refused at registration. */
				if (cqe->res != -ENOTCONN && cqe->res != -ECANCELED) {
					static atomic_bool told;
					if (!atomic_exchange(&told, true))
						log_warn("io_uring: the kernel refused a FUSE ring entry (%s); "
							 "requests it cannot place go through /dev/fuse",
							 strerror(-cqe->res));
					pthread_mutex_lock(&U.lock);
					snprintf(U.why, sizeof(U.why), "ring entry refused: %s",
						 strerror(-cqe->res));
					pthread_mutex_unlock(&U.lock);
				}
				atomic_store(&e->state, ENT_DEAD);
				t->live--;
				continue;
			}
			handle(t, e);
		}
		io_uring_cq_advance(&t->ring, seen);
	}
	/* Stopping: replies handed over already (ESHUTDOWN to waiters) still go out. */
	take_commits(t);
	io_uring_submit(&t->ring);
	atomic_fetch_sub(&U.serving, 1);
out:
	atomic_store(&t->done, true);
	if (ring_up)
		io_uring_queue_exit(&t->ring);
	return NULL;
}

int fsu_prepare(struct ckptfs *fs, struct fuse_session *se, unsigned max_threads)
{
	if (!fs->opt.fuse_uring) {
		snprintf(U.why, sizeof(U.why), "fuse_uring=off");
		return -ENOTSUP;
	}
	if (!fsu_kernel_enabled()) {
		snprintf(U.why, sizeof(U.why), "the kernel's fuse.enable_uring is off");
		return -ENOTSUP;
	}
	U.fs = fs;
	U.se = se;
	/* Threads pinned to their queue's CPU (pin_to_queue), unless CKPTFS_FUSE_URING_PIN=0. */
	const char *pin = getenv("CKPTFS_FUSE_URING_PIN");
	U.pin = !pin || strcmp(pin, "0") != 0;
	U.devfd = fuse_session_fd(se);
	U.nqueues = possible_cpus();
	/* At least two threads per queue: one may be busy in a long request. */
	U.nthr = CKPT_MAX(max_threads, 2 * U.nqueues);
	U.payload = CKPT_MAX((size_t)fs_loop_max_write(), (size_t)fs_kernel_max_pages() * 4096);
	U.payload = CKPT_MAX(U.payload, (size_t)(1u << 20));
	U.thr = xcalloc(U.nthr, sizeof(*U.thr));
	U.phase = PH_PREPARING;
	for (unsigned i = 0; i < U.nthr; i++) {
		struct fsu_thr *t = &U.thr[i];
		unsigned q = i % U.nqueues;
		t->qid = (uint16_t)q;
		t->efd = eventfd(0, EFD_CLOEXEC);
		pthread_mutex_init(&t->lock, NULL);
		unsigned k = 0;
		while (k < ENTS_FREE && t->efd >= 0 && ent_init(t, k, (uint16_t)q))
			k++;
		atomic_init(&t->nents, k);
		if (k < ENTS_FREE) {
			snprintf(U.why, sizeof(U.why), "cannot allocate ring buffers");
			U.failed++;	/* the thread is not started: counted here */
			continue;
		}
		/* It inherits the block of the stop signals (signals.c). */
		t->started = pthread_create(&t->th, NULL, thr_main, t) == 0;
		if (!t->started) {
			pthread_mutex_lock(&U.lock);
			U.failed++;
			pthread_mutex_unlock(&U.lock);
		}
	}
	/* Wait until every ring is up (or one failed). */
	pthread_mutex_lock(&U.lock);
	while (U.up + U.failed < U.nthr)
		pthread_cond_wait(&U.cond, &U.lock);
	U.phase = U.failed ? PH_CANCELLED : PH_READY;
	if (U.failed)
		pthread_cond_broadcast(&U.cond);
	pthread_mutex_unlock(&U.lock);
	if (U.failed)
		log_warn("FUSE over io_uring unavailable (%s): using /dev/fuse", U.why);
	return U.failed ? -EIO : 0;
}

bool fsu_offerable(void)
{
	pthread_mutex_lock(&U.lock);
	bool ok = U.thr && U.phase == PH_READY;
	pthread_mutex_unlock(&U.lock);
	return ok;
}

static void set_phase(int ph)
{
	pthread_mutex_lock(&U.lock);
	if (U.thr && U.phase == PH_READY)
		U.phase = ph;
	pthread_cond_broadcast(&U.cond);
	pthread_mutex_unlock(&U.lock);
}

void fsu_start(void)
{
	set_phase(PH_GO);
}

void fsu_cancel(void)
{
	set_phase(PH_CANCELLED);
	if (U.thr && !U.why[0])
		snprintf(U.why, sizeof(U.why), "not negotiated at INIT");
}

void fsu_stop(void)
{
	if (!U.thr)
		return;
	fsu_cancel();
	atomic_store(&U.stop, true);
	for (unsigned i = 0; i < U.nthr; i++) {
		uint64_t one = 1;
		if (U.thr[i].efd >= 0 && write(U.thr[i].efd, &one, sizeof(one)) < 0)
			log_debug("io_uring: cannot wake a thread: %s", strerror(errno));
	}
	/*
	 * Bounded, as loop.c's stop is: a thread still inside a handler after
	 * the bound (a backend call that does not return) is left behind with
	 * everything it uses.
	 */
	uint64_t deadline = now_ns() + 5000000000ull;
	bool stuck = false;
	for (unsigned i = 0; i < U.nthr; i++)
		while (U.thr[i].started && !atomic_load(&U.thr[i].done) && now_ns() < deadline)
			usleep(10000);
	for (unsigned i = 0; i < U.nthr; i++)
		if (U.thr[i].started && !atomic_load(&U.thr[i].done))
			stuck = true;
	if (stuck) {
		log_err("io_uring: a FUSE ring thread is still in a handler 5 s after the session "
			"ended; leaving it");
		return;
	}
	for (unsigned i = 0; i < U.nthr; i++) {
		struct fsu_thr *t = &U.thr[i];
		if (t->started)
			pthread_join(t->th, NULL);
		if (t->efd >= 0)
			close(t->efd);
		for (unsigned k = 0; k < atomic_load(&t->nents); k++) {
			free(t->ents[k].hdr);
			if (t->ents[k].area)
				munmap(t->ents[k].area, PREFIX + U.payload);
		}
		pthread_mutex_destroy(&t->lock);
	}
	free(U.thr);
	U.thr = NULL;
}

/* The entry waiting for the reply to `unique`, or NULL. */
static struct fsu_ent *ent_of(uint64_t unique)
{
	if (cur && atomic_load(&cur->unique) == unique)
		return cur;
	if (!U.thr || !atomic_load(&U.serving))
		return NULL;
	for (unsigned i = 0; i < U.nthr; i++)
		for (unsigned k = 0; k < atomic_load(&U.thr[i].nents); k++) {
			struct fsu_ent *e = &U.thr[i].ents[k];
			int s = atomic_load(&e->state);
			if ((s == ENT_BUSY || s == ENT_PARKED) && atomic_load(&e->unique) == unique)
				return e;
		}
	return NULL;
}

/* The reply is in e's buffers: hand it to its thread (E1, E2). */
static void replied(struct fsu_ent *e)
{
	int s = ENT_BUSY;

	if (atomic_compare_exchange_strong(&e->state, &s, ENT_REPLIED))
		return;		/* its thread is still in the handler: it commits */
	if (s != ENT_PARKED) {
		log_err("io_uring: a second reply to one request (state %d); dropped", s);
		return;
	}
	atomic_store(&e->state, ENT_REPLIED);
	atomic_fetch_add_explicit(&U.async_replies, 1, memory_order_relaxed);
	struct fsu_thr *t = e->t;
	pthread_mutex_lock(&t->lock);
	e->next = t->commits;
	t->commits = e;
	pthread_mutex_unlock(&t->lock);
	uint64_t one = 1;
	if (write(t->efd, &one, sizeof(one)) < 0)
		log_err("io_uring: cannot wake the thread of a reply: %s", strerror(errno));
}

ssize_t fsu_reply(struct iovec *iov, int count)
{
	struct fuse_out_header *oh = iov[0].iov_base;
	struct fsu_ent *e = ent_of(oh->unique);

	if (!e)
		return 0;
	size_t total = 0, at = 0;
	for (int i = 1; i < count; i++)
		total += iov[i].iov_len;
	struct fuse_out_header h = *oh;
	if (total > U.payload) {
		log_err("io_uring: a %zu-byte reply does not fit the %zu-byte ring buffer", total,
			U.payload);
		h.error = -EIO;
		total = 0;
	}
	for (int i = 1; i < count && h.error == oh->error; i++) {
		memcpy(e->payload + at, iov[i].iov_base, iov[i].iov_len);
		at += iov[i].iov_len;
	}
	h.len = (uint32_t)(sizeof(h) + total);
	memcpy(e->hdr->in_out, &h, sizeof(h));
	e->hdr->ring_ent_in_out.payload_sz = (uint32_t)total;
	replied(e);
	return (ssize_t)(sizeof(h) + total);
}

ssize_t fsu_reply_pipe(int pipefd, size_t len)
{
	struct fuse_out_header oh;
	struct fsu_ent *e = cur;

	if (!e || !atomic_load(&U.serving))
		return 0;	/* replies in pipes are made by the handling thread only */
	if (len < sizeof(oh) || len - sizeof(oh) > U.payload || read_full(pipefd, &oh, sizeof(oh)) < 0)
		return 0;
	if (oh.unique != atomic_load(&e->unique) ||
	    read_full(pipefd, e->payload, len - sizeof(oh)) < 0) {
		log_err("io_uring: a spliced reply for another request; answering EIO");
		oh.error = -EIO;
		oh.unique = atomic_load(&e->unique);
		len = sizeof(oh);
	}
	oh.len = (uint32_t)len;
	memcpy(e->hdr->in_out, &oh, sizeof(oh));
	e->hdr->ring_ent_in_out.payload_sz = (uint32_t)(len - sizeof(oh));
	replied(e);
	return (ssize_t)len;
}

void fsu_describe(struct strbuf *b)
{
	unsigned serving = atomic_load(&U.serving), ents = 0;

	for (unsigned i = 0; serving && i < U.nthr; i++)
		ents += atomic_load(&U.thr[i].nents);
	pthread_mutex_lock(&U.lock);

	sb_printf(b, ", \"fuse_transport\": \"%s\", \"fuse_uring_queues\": %u"
		  ", \"fuse_uring_threads\": %u, \"fuse_uring_requests\": %llu"
		  ", \"fuse_uring_entries\": %u, \"fuse_uring_async_replies\": %llu"
		  ", \"fuse_uring_why_not\": ",
		  serving ? "io_uring" : "dev_fuse", serving ? U.nqueues : 0, serving,
		  (unsigned long long)atomic_load(&U.requests), ents,
		  (unsigned long long)atomic_load(&U.async_replies));
	sb_json_str(b, serving ? "" : U.why[0] ? U.why : "not tried");
	pthread_mutex_unlock(&U.lock);
}
