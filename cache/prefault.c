/*
 * prefault.c — populating the arena's pages in the background, ahead of the
 * allocation frontier, so a mount is ready at once whatever cache_size is.
 *
 * Writing into a page the process has never touched costs a page fault
 * (and, on a VM, often a fault in the hypervisor too): on this class of
 * machine a copy into fresh pages ran about 3x slower than into touched
 * ones.  Populating the whole arena before mounting kept faults off the
 * write path but made mounting take seconds per GiB (15 s for 8 GiB here).
 * Instead one thread populates chunk after chunk from the mount on, in the
 * order the allocator hands fresh chunks out (lowest ids first, cache.c),
 * and the allocator populates a chunk itself in the rare case it hands out
 * one the thread has not reached yet: a writer waits for the pages it is
 * about to use, never for the rest of the arena.
 *
 * Invariants:
 *   F1  Populating never changes a byte: MADV_POPULATE_WRITE only maps
 *       pages, and the fallback (kernels before 5.14) touches each page
 *       with an atomic add of zero, so a chunk populated while a writer
 *       already fills it keeps what the writer wrote.  That is what lets
 *       the thread and the allocator race on a chunk without a lock.
 *   F2  done[i] is set only after chunk i's pages are mapped; ready_bytes
 *       counts chunks with done set, each once (the flag's exchange
 *       decides who counts it).
 *   F3  The thread is stopped and joined before the arena is unmapped.
 *
 * Readers first.  Populating competes with reads for memory (and, on a VM,
 * with the hypervisor faulting the pages in): a restore right after the
 * mount ran at a third of the disk's speed here while the arena was being
 * populated.  So while files are open for reading through the mount
 * (cache_prefault_readers: the front end counts read-only opens, which with
 * passthrough are all the daemon sees of a restore), the thread populates
 * only up to PREFAULT_AHEAD past the allocation frontier and waits there;
 * it goes on once the readers are gone, so a checkpoint written minutes
 * after the mount still finds the whole arena populated.  And it starts
 * PREFAULT_GRACE_MS after the mount, or at the first allocation if that
 * comes sooner: a restore that begins right after the mount opens its
 * files before the thread has taken the memory the reads want (here, what
 * was populated in that first second halved a restore's speed).
 *
 * No lock: the per-chunk flags are atomics, the thread's only state is
 * its position.  CKPTFS_PREFAULT_PAUSE_MS (tests only) makes the thread
 * sleep that long before each chunk.  It runs at a lower priority (nice 10) so that on a busy
 * machine the work in front of it keeps the CPU; the allocator's own
 * populate covers whatever it has not reached.
 */
#include "cache/cache.h"
#include "cache/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Map [base, base+len) writable without changing its contents (F1). */
static void populate_range(char *base, uint64_t len)
{
	if (madvise(base, len, MADV_POPULATE_WRITE) == 0)
		return;
	long pg = sysconf(_SC_PAGESIZE);
	for (uint64_t off = 0; off < len; off += (uint64_t)pg)
		__atomic_fetch_add(base + off, 0, __ATOMIC_RELAXED);
}

/* Populate chunk id unless someone did: true if this call did it. */
static bool populate_chunk(struct cache *c, uint32_t id)
{
	struct cache_prefault *pf = &c->pf;

	if (atomic_load_explicit(&pf->done[id], memory_order_acquire))
		return false;
	populate_range(c->base + (uint64_t)id * c->chunk_size, c->chunk_size);
	if (atomic_exchange(&pf->done[id], 1))
		return false;	/* the other one counted it (F2) */
	uint64_t r = atomic_fetch_add(&pf->ready_bytes, c->chunk_size) + c->chunk_size;
	if (r == c->size)
		atomic_store(&pf->ready_ns, now_ns());
	return true;
}

/* How far ahead of the allocation frontier the thread goes while files are read. */
#define PREFAULT_AHEAD (256ull << 20)
/* How long after the start the thread waits for a first allocation or reader. */
#define PREFAULT_GRACE_MS 2000

/* Chunk i may be populated now: no reader, or within reach of the allocator. */
static bool may_populate(struct cache *c, uint32_t i)
{
	struct cache_prefault *pf = &c->pf;
	uint64_t ahead = PREFAULT_AHEAD / c->chunk_size;

	return atomic_load(&pf->readers) <= 0 || (uint64_t)i < atomic_load(&pf->frontier) + ahead;
}

/* The grace after the start: nothing allocated yet, not stopped, and running as a thread. */
static bool background_wait(struct cache *c)
{
	struct cache_prefault *pf = &c->pf;

	return pf->background && !atomic_load(&pf->stop) && atomic_load(&pf->frontier) == 0;
}

void cache_prefault_readers(struct cache *c, int delta)
{
	atomic_fetch_add(&c->pf.readers, delta);
}

static void *prefault_main(void *arg)
{
	struct cache *c = arg;
	struct cache_prefault *pf = &c->pf;

	thread_background("ckptfs-prefault", 10);
	/* Tests slow the thread down so that the allocator gets ahead of it. */
	const char *pause = getenv("CKPTFS_PREFAULT_PAUSE_MS");
	useconds_t pause_us = pause ? (useconds_t)atoi(pause) * 1000 : 0;
	for (int t = 0; t < PREFAULT_GRACE_MS / 10 && background_wait(c); t++)
		usleep(10000);
	for (uint32_t i = 0; i < c->nchunks && !atomic_load(&pf->stop); i++) {
		if (pause_us)
			usleep(pause_us);
		while (!may_populate(c, i) && !atomic_load(&pf->stop))
			usleep(10000);
		populate_chunk(c, i);
	}
	return NULL;
}

void cache_prefault_start(struct cache *c, bool background)
{
	struct cache_prefault *pf = &c->pf;

	pf->done = xcalloc(c->nchunks, sizeof(*pf->done));
	atomic_init(&pf->ready_bytes, 0);
	atomic_init(&pf->ready_ns, 0);
	atomic_init(&pf->stop, false);
	atomic_init(&pf->frontier, 0);
	atomic_init(&pf->readers, 0);
	pf->start_ns = now_ns();
	pf->background = background;
	if (background && pthread_create(&pf->th, NULL, prefault_main, c) == 0) {
		pf->running = true;
		return;
	}
	/* No thread (or asked for none): populate everything now, as before. */
	pf->background = false;
	prefault_main(c);
}

void cache_prefault_stop(struct cache *c)
{
	struct cache_prefault *pf = &c->pf;

	if (pf->running) {
		atomic_store(&pf->stop, true);
		pthread_join(pf->th, NULL);	/* F3 */
		pf->running = false;
	}
	free((void *)pf->done);
	pf->done = NULL;
}

void cache_prefault_chunk(struct cache *c, uint32_t id)
{
	unsigned f = atomic_load(&c->pf.frontier);
	while (id + 1 > f && !atomic_compare_exchange_weak(&c->pf.frontier, &f, id + 1))
		;
	if (c->pf.done && populate_chunk(c, id))
		atomic_fetch_add(&c->pf.inline_chunks, 1);
}

uint64_t cache_ready_bytes(const struct cache *c)
{
	return atomic_load(&c->pf.ready_bytes);
}
