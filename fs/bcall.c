/*
 * bcall.c — backend calls of request handlers on helper threads, waited
 * for at most drain_timeout (see bcall.h).
 *
 * Helpers start on demand, while calls are queued that no idle helper will
 * take, up to max_threads (one per FUSE worker, so a worker never waits for
 * a helper another worker's hung call holds unless all of them hang: then
 * a new call fails at once); an idle helper leaves after HELPER_IDLE_NS,
 * but HELPER_KEEP of them stay.
 * A waiting handler tells the request loop it is blocking once the call
 * takes longer than BLOCKING_NS, so another worker reads /dev/fuse.
 *
 * The hand-off costs two thread wake-ups, which on a 2-vCPU VM were 40 us
 * of a ~100 us warm open.  So a handler first polls for its answer for
 * WAIT_SPIN_NS, and a helper that finished a call polls for the next for
 * HELPER_SPIN_NS before sleeping: a stream of opens then finds its helper
 * awake (+5-10 us a warm open).  Cold opens, which wait for the disk, still
 * pay ~50 us (bench/cold_opens.py; longer polls did not help there).
 *
 * Watched calls (bcall.h) cost no hand-off: the handler registers itself,
 * makes the call, and takes itself off the list; the request loop's tick
 * answers those past drain_timeout, and from then the handler leaves the
 * request alone.  Reads of file data go this way (bench/daemon_reads.py:
 * a hand-off per 1 MiB read cost up to a quarter of the throughput).
 */
#include "fs/bcall.h"
#include "fs/fs.h"
#include "cache/log.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>

#define HELPER_IDLE_NS (10ull * 1000000000)
#define HELPER_KEEP 2
#define BLOCKING_NS (2ull * 1000000)
#define SLICE_NS (100ull * 1000000)
#define WARN_EVERY_NS (10ull * 1000000000)
#define WAIT_SPIN_NS (50ull * 1000)
#define HELPER_SPIN_NS (200ull * 1000)

struct bcall_pool {
	pthread_mutex_t lock;
	pthread_cond_t work;	/* a call queued, or the pool stops */
	pthread_cond_t done;	/* a call returned, or a helper left */
	struct list queue;	/* calls no helper took yet */
	struct list running;	/* calls inside a helper */
	struct list watched;	/* watches begun and not ended nor answered */
	bool watch_stopped;
	unsigned helpers, idle, max;
	atomic_uint queued;	/* calls in queue: polled by spinning helpers */
	bool serving;
	uint64_t timeout_ns;	/* 0: as long as it takes */
	uint64_t warned_ns;
	unsigned nwatch;	/* watches running, not answered */
	unsigned watch_stuck;	/* watches answered whose call has not returned */
	atomic_uint_least64_t timed_out, calls;
};

static void *helper_main(void *arg)
{
	struct bcall_pool *p = arg;

	pthread_mutex_lock(&p->lock);
	for (bool spin = false;; spin = true) {
		uint64_t idle_since = now_ns();
		if (spin && list_empty(&p->queue) && p->serving) {	/* the next may come at once */
			p->idle++;
			pthread_mutex_unlock(&p->lock);
			while (!atomic_load(&p->queued) && now_ns() - idle_since < HELPER_SPIN_NS)
				sched_yield();
			pthread_mutex_lock(&p->lock);
			p->idle--;
		}
		while (list_empty(&p->queue) && p->serving &&
		       (p->helpers <= HELPER_KEEP || now_ns() - idle_since < HELPER_IDLE_NS)) {
			p->idle++;
			cond_wait_ns(&p->work, &p->lock, HELPER_IDLE_NS);
			p->idle--;
		}
		if (list_empty(&p->queue))
			break;		/* stopping, or idle long enough */
		struct bcall *c = list_entry(p->queue.next, struct bcall, link);
		list_del(&c->link);
		p->queued--;
		list_add_tail(&p->running, &c->link);
		c->started_ns = now_ns();
		pthread_mutex_unlock(&p->lock);
		int r = c->run(c);
		pthread_mutex_lock(&p->lock);
		list_del(&c->link);
		c->result = r;
		atomic_store(&c->done, true);
		if (c->gone) {		/* nobody waits: undo it */
			pthread_mutex_unlock(&p->lock);
			c->drop(c);
			pthread_mutex_lock(&p->lock);
		} else {
			pthread_cond_broadcast(&p->done);
		}
	}
	p->helpers--;
	pthread_cond_broadcast(&p->done);
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* Start a helper if the queue holds more than the idle ones will take (p->lock held). */
static bool helper_spawn_locked(struct bcall_pool *p)
{
	pthread_attr_t a;
	pthread_t th;
	bool ok;

	if (p->queued <= p->idle || p->helpers >= p->max)
		return true;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	ok = pthread_create(&th, &a, helper_main, p) == 0;
	pthread_attr_destroy(&a);
	if (ok)
		p->helpers++;
	return ok || p->helpers > 0;
}

/*
 * Can a queued call not start before its deadline?  When every helper
 * there may be is inside a call that has hung past drain_timeout (p->lock
 * held): the backend does not answer, and waiting would only hold a
 * worker.
 */
static bool hopeless_locked(const struct bcall_pool *p, const struct bcall *c, uint64_t now)
{
	if (c->started_ns || !p->timeout_ns || p->helpers < p->max || p->idle)
		return false;
	for (const struct list *e = p->running.next; e != &p->running; e = e->next) {
		const struct bcall *r = list_entry(e, struct bcall, link);
		if (now - r->started_ns < p->timeout_ns)
			return false;
	}
	return true;
}

/* Is it time to log a hung call again (p->lock held)?  At most every WARN_EVERY_NS. */
static bool warn_due_locked(struct bcall_pool *p)
{
	uint64_t now = now_ns();

	if (p->warned_ns && now - p->warned_ns < WARN_EVERY_NS)
		return false;
	p->warned_ns = now;
	return true;
}

/* The wait ended before the call (p->lock held, released). */
static int give_up_locked(struct bcall_pool *p, struct bcall *c, int why, uint64_t waited_ns,
			  int *err)
{
	*err = why;
	if (why == -EIO)
		atomic_fetch_add(&p->timed_out, 1);
	if (!c->started_ns) {		/* still queued: never made */
		list_del(&c->link);
		p->queued--;
		pthread_mutex_unlock(&p->lock);
		c->drop(c);
		return BCALL_GONE;
	}
	c->gone = true;
	bool warn = why == -EIO && warn_due_locked(p);
	pthread_mutex_unlock(&p->lock);
	if (warn)
		log_warn("a backend call (%s) has not returned for %.0f s: the request gets EIO; "
			 "the backend looks hung (drain_timeout)", c->what, (double)waited_ns / 1e9);
	return BCALL_GONE;
}

int bcall_run(struct ckptfs *fs, struct bcall *c, int *err)
{
	struct bcall_pool *p = fs->calls;
	bool told = false;

	if (p)
		pthread_mutex_lock(&p->lock);
	if (!p || !p->serving) {
		if (p)
			pthread_mutex_unlock(&p->lock);
		return c->run(c);
	}
	atomic_fetch_add(&p->calls, 1);
	atomic_init(&c->done, false);
	c->gone = false;
	c->started_ns = 0;
	list_add_tail(&p->queue, &c->link);
	p->queued++;
	if (!helper_spawn_locked(p)) {	/* no thread at all: make it here */
		list_del(&c->link);
		p->queued--;
		pthread_mutex_unlock(&p->lock);
		return c->run(c);
	}
	pthread_cond_signal(&p->work);
	pthread_mutex_unlock(&p->lock);
	uint64_t t0 = now_ns();
	uint64_t spin = c->spin_ns ? c->spin_ns : WAIT_SPIN_NS;
	while (!atomic_load(&c->done) && now_ns() - t0 < spin)
		sched_yield();
	pthread_mutex_lock(&p->lock);	/* also: the helper is done with c */
	while (!atomic_load(&c->done)) {
		uint64_t waited = now_ns() - t0;
		if (fs_stopping(fs))
			return give_up_locked(p, c, -ESHUTDOWN, waited, err);
		if ((p->timeout_ns && waited >= p->timeout_ns) || hopeless_locked(p, c, now_ns()))
			return give_up_locked(p, c, -EIO, waited, err);
		if (!told && waited >= BLOCKING_NS) {
			told = true;
			pthread_mutex_unlock(&p->lock);
			fs_loop_blocking();	/* others must read /dev/fuse meanwhile */
			pthread_mutex_lock(&p->lock);
			continue;
		}
		cond_wait_ns(&p->done, &p->lock, told ? SLICE_NS : BLOCKING_NS);
	}
	pthread_mutex_unlock(&p->lock);
	return c->result;
}

void bcall_post(struct ckptfs *fs, struct bcall *c)
{
	struct bcall_pool *p = fs->calls;

	if (p)
		pthread_mutex_lock(&p->lock);
	if (!p || !p->serving) {
		if (p)
			pthread_mutex_unlock(&p->lock);
		c->drop(c);
		return;
	}
	atomic_fetch_add(&p->calls, 1);
	atomic_init(&c->done, false);
	c->gone = true;		/* nobody waits: the helper drops it after the run */
	c->started_ns = 0;
	list_add_tail(&p->queue, &c->link);
	p->queued++;
	if (!helper_spawn_locked(p)) {
		list_del(&c->link);
		p->queued--;
		pthread_mutex_unlock(&p->lock);
		c->drop(c);
		return;
	}
	pthread_cond_signal(&p->work);
	pthread_mutex_unlock(&p->lock);
}

void bcall_start(struct ckptfs *fs)
{
	struct bcall_pool *p = xcalloc(1, sizeof(*p));

	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_cond_init(&p->done, NULL);
	list_init(&p->queue);
	list_init(&p->running);
	list_init(&p->watched);
	p->max = fs->opt.max_threads;
	p->timeout_ns = fs->opt.drain_timeout > 0 ? (uint64_t)(fs->opt.drain_timeout * 1e9) : 0;
	p->serving = true;
	atomic_init(&p->timed_out, 0);
	atomic_init(&p->calls, 0);
	fs->calls = p;
}

unsigned bcall_stop(struct ckptfs *fs, uint64_t bound_ns)
{
	struct bcall_pool *p = fs->calls;
	uint64_t deadline = now_ns() + bound_ns;

	if (!p)
		return 0;
	pthread_mutex_lock(&p->lock);
	p->serving = false;
	pthread_cond_broadcast(&p->work);
	while (p->helpers && now_ns() < deadline)
		cond_wait_ns(&p->done, &p->lock, SLICE_NS);
	/* Handlers still in a watched call will end their watch: they count too. */
	unsigned left = p->helpers + p->watch_stuck;
	pthread_mutex_unlock(&p->lock);
	if (left)
		return left;	/* they use the pool: it stays */
	fs->calls = NULL;
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->done);
	pthread_mutex_destroy(&p->lock);
	free(p);
	return 0;
}

void bcall_stats(struct ckptfs *fs, uint64_t *calls, uint64_t *timed_out, unsigned *stuck)
{
	struct bcall_pool *p = fs->calls;

	*calls = *timed_out = 0;
	*stuck = 0;
	if (!p)
		return;
	*calls = atomic_load(&p->calls);
	*timed_out = atomic_load(&p->timed_out);
	pthread_mutex_lock(&p->lock);
	uint64_t now = now_ns();
	for (struct list *e = p->running.next; e != &p->running; e = e->next) {
		const struct bcall *c = list_entry(e, struct bcall, link);
		if (p->timeout_ns && now - c->started_ns >= p->timeout_ns)
			(*stuck)++;
	}
	*stuck += p->watch_stuck;
	pthread_mutex_unlock(&p->lock);
}

/* ---- calls in the handler's thread, watched --------------------------------- */

int bcall_watch_begin(struct ckptfs *fs, struct bcall_watch *w, fuse_req_t req)
{
	struct bcall_pool *p = fs->calls;

	w->req = req;
	w->listed = w->answered = false;
	if (!p)
		return 0;	/* outside a session: nothing to answer */
	if (devio_uring())
		return -EBUSY;
	pthread_mutex_lock(&p->lock);
	if (p->watch_stopped || fs_stopping(fs)) {
		pthread_mutex_unlock(&p->lock);
		return -ESHUTDOWN;
	}
	if (p->watch_stuck || 2 * (p->nwatch + 1) > p->max) {
		pthread_mutex_unlock(&p->lock);
		return -EBUSY;
	}
	atomic_fetch_add(&p->calls, 1);
	w->started_ns = now_ns();
	w->listed = true;
	p->nwatch++;
	list_add_tail(&p->watched, &w->link);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

bool bcall_watch_end(struct ckptfs *fs, struct bcall_watch *w)
{
	struct bcall_pool *p = fs->calls;
	bool owned;

	if (!w->listed)
		return true;
	pthread_mutex_lock(&p->lock);
	owned = !w->answered;
	if (owned) {
		list_del(&w->link);
		p->nwatch--;
	} else {
		p->watch_stuck--;	/* it returned at last */
	}
	pthread_mutex_unlock(&p->lock);
	return owned;
}

/* Answer the watches that match (p->lock held; dropped and retaken around the replies). */
static void watch_answer_locked(struct bcall_pool *p, uint64_t older_than_ns, int err)
{
	uint64_t now = now_ns();
	fuse_req_t reqs[32];
	unsigned n = 0;

	for (struct list *e = p->watched.next, *next; e != &p->watched && n < 32; e = next) {
		struct bcall_watch *w = list_entry(e, struct bcall_watch, link);
		next = e->next;
		if (now - w->started_ns < older_than_ns)
			continue;
		list_del(&w->link);
		p->nwatch--;
		w->answered = true;	/* from here the handler does not touch req */
		p->watch_stuck++;
		if (err == -EIO)
			atomic_fetch_add(&p->timed_out, 1);
		reqs[n++] = w->req;
	}
	bool warn = n && err == -EIO && warn_due_locked(p);
	pthread_mutex_unlock(&p->lock);
	if (warn)
		log_warn("a backend call (read file data) has not returned for %.0f s: the request "
			 "gets EIO; the backend looks hung (drain_timeout)",
			 (double)older_than_ns / 1e9);
	for (unsigned i = 0; i < n; i++)
		fuse_reply_err(reqs[i], -err);
	pthread_mutex_lock(&p->lock);
}

void bcall_tick(struct ckptfs *fs)
{
	struct bcall_pool *p = fs->calls;

	if (!p || !p->timeout_ns)
		return;
	pthread_mutex_lock(&p->lock);
	watch_answer_locked(p, p->timeout_ns, -EIO);
	pthread_mutex_unlock(&p->lock);
}

unsigned bcall_watch_stuck(struct ckptfs *fs)
{
	struct bcall_pool *p = fs->calls;
	unsigned n;

	if (!p)
		return 0;
	pthread_mutex_lock(&p->lock);
	n = p->watch_stuck;
	pthread_mutex_unlock(&p->lock);
	return n;
}

void bcall_watch_stop(struct ckptfs *fs)
{
	struct bcall_pool *p = fs->calls;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->watch_stopped = true;
	while (!list_empty(&p->watched))
		watch_answer_locked(p, 0, -ESHUTDOWN);
	pthread_mutex_unlock(&p->lock);
}
