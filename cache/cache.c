/*
 * cache.c — the arena, its free stack, the clean LRU and the spill list.
 * See cache.h for the ownership rules and lock order.
 */
#include "cache/cache.h"
#include "cache/adopt.h"
#include "cache/cfile.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int cache_init(struct cache *c, uint64_t size, uint32_t chunk_size)
{
	memset(c, 0, sizeof(*c));
	if (chunk_size == 0 || size < chunk_size)
		return -EINVAL;
	c->chunk_size = chunk_size;
	c->nchunks = (uint32_t)(size / chunk_size);
	c->size = (uint64_t)c->nchunks * chunk_size;
	c->slot_size = CKPT_MAX(SLOT_SIZE, chunk_size / 64);
	c->nslots = chunk_size / c->slot_size >= 4 ? chunk_size / c->slot_size : 0;
	c->base = mmap(NULL, c->size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (c->base == MAP_FAILED) {
		c->base = NULL;
		return -ENOMEM;
	}
	c->hugepages = madvise(c->base, c->size, MADV_HUGEPAGE) == 0;
	/* The daemon forks nothing after this, but keep children off it anyway. */
	madvise(c->base, c->size, MADV_DONTFORK);

	c->chunks = xcalloc(c->nchunks, sizeof(*c->chunks));
	c->free_ids = xmalloc(sizeof(uint32_t) * c->nchunks);
	for (uint32_t i = 0; i < c->nchunks; i++) {
		c->chunks[i].id = i;
		c->chunks[i].mem = c->base + (uint64_t)i * chunk_size;
		c->chunks[i].cap = chunk_size;
		list_init(&c->chunks[i].link);
		c->free_ids[i] = c->nchunks - 1 - i;	/* pop low ids first */
	}
	c->nfree = c->nchunks;
	list_init(&c->clean);
	list_init(&c->spill);
	list_init(&c->partial);
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->freed, NULL);
	cache_prefault_start(c, true);	/* pages are mapped in the background */
	return 0;
}

void cache_destroy(struct cache *c)
{
	cache_prefault_stop(c);
	if (c->base)
		munmap(c->base, c->size);
	for (uint32_t i = 0; c->chunks && i < c->nchunks; i++)
		free(c->chunks[i].slots);
	free(c->chunks);
	free(c->free_ids);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->freed);
	memset(c, 0, sizeof(*c));
}

static void chunk_unlist(struct cache *c, struct chunk *ch)
{
	if (ch->list != CL_NONE) {
		list_del(&ch->link);
		ch->list = CL_NONE;
	}
}

static void state_bytes(struct cache *c, const struct chunk *ch, int sign)
{
	if (ch->state == CH_DIRTY)
		atomic_fetch_add(&c->st.dirty_bytes, (uint64_t)(int64_t)sign * ch->cap);
	else if (ch->state == CH_CLEAN)
		atomic_fetch_add(&c->st.clean_bytes, (uint64_t)(int64_t)sign * ch->cap);
}

/* A chunk or slot goes back: to the free stack, or into its split chunk. */
static void release_locked(struct cache *c, struct chunk *ch)
{
	chunk_unlist(c, ch);
	state_bytes(c, ch, -1);
	ch->state = CH_FREE;
	if (ch->pool) {		/* a GPU session's chunk goes back to its pool */
		cpool_chunk_released(c, ch);
		return;
	}
	atomic_fetch_sub(&c->st.used_bytes, ch->cap);
	ch->owner = NULL;
	if (ch->parent) {
		struct chunk *p = ch->parent;
		uint64_t all = c->nslots == 64 ? ~0ull : (1ull << c->nslots) - 1;
		if (!p->free_slots)
			list_add_tail(&c->partial, &p->link);
		p->free_slots |= 1ull << (ch - p->slots);
		c->free_slots++;
		if (p->free_slots == all) {	/* every slot free: whole again */
			list_del(&p->link);
			p->state = CH_FREE;
			c->free_ids[c->nfree++] = p->id;
			c->free_slots -= c->nslots;
		}
	} else {
		c->free_ids[c->nfree++] = ch->id;
	}
	if (c->waiters)
		pthread_cond_broadcast(&c->freed);
}

static struct chunk *take_full_locked(struct cache *c)
{
	return c->nfree ? &c->chunks[c->free_ids[--c->nfree]] : NULL;
}

static struct chunk *take_slot_locked(struct cache *c)
{
	struct chunk *p;

	if (list_empty(&c->partial)) {
		if (!(p = take_full_locked(c)))
			return NULL;
		if (!p->slots) {
			p->slots = xcalloc(c->nslots, sizeof(*p->slots));
			for (uint32_t i = 0; i < c->nslots; i++) {
				p->slots[i].id = p->id;
				p->slots[i].mem = p->mem + (uint64_t)i * c->slot_size;
				p->slots[i].cap = c->slot_size;
				p->slots[i].parent = p;
				list_init(&p->slots[i].link);
			}
		}
		p->state = CH_SPLIT;
		p->free_slots = c->nslots == 64 ? ~0ull : (1ull << c->nslots) - 1;
		c->free_slots += c->nslots;
		list_add_tail(&c->partial, &p->link);
	}
	p = list_entry(c->partial.next, struct chunk, link);
	unsigned i = (unsigned)__builtin_ctzll(p->free_slots);
	p->free_slots &= ~(1ull << i);
	c->free_slots--;
	if (!p->free_slots)
		list_del(&p->link);	/* full: off the partial list */
	return &p->slots[i];
}

/* Evict the oldest evictable clean chunk or slot; false if there is none. */
static bool evict_one_locked(struct cache *c)
{
	for (struct list *e = c->clean.next; e != &c->clean; e = e->next) {
		struct chunk *ch = list_entry(e, struct chunk, link);
		struct cfile *cf = ch->owner;

		if (pthread_mutex_trylock(&cf->lock) != 0)
			continue;
		if (ch->state != CH_CLEAN || ch->vrefs || ch->pins || !ch->in_map) {
			pthread_mutex_unlock(&cf->lock);
			continue;
		}
		cfile_evict_locked(cf, ch);
		release_locked(c, ch);
		atomic_fetch_add(&c->st.evictions, 1);
		pthread_mutex_unlock(&cf->lock);
		return true;
	}
	return false;
}

/* How long a waiting allocator sleeps before it re-checks evictable chunks and wait_check. */
#define WAIT_SLICE_NS (50ull * 1000000)

static int chunk_alloc(struct cache *c, struct cfile *owner, bool small, bool wait,
		       bool (*wanted)(void *), void *arg, struct chunk **out)
{
	struct chunk *ch;
	uint64_t t0 = 0;
	int r = 0;

	small = small && c->nslots;
	pthread_mutex_lock(&c->lock);
	while (!(ch = small ? take_slot_locked(c) : take_full_locked(c))) {
		if (evict_one_locked(c))
			continue;	/* it may have freed what we need */
		if (!wait) {
			r = -EAGAIN;
			break;
		}
		if (!t0) {
			t0 = now_ns();
			atomic_fetch_add(&c->st.backpressure_waits, 1);
		}
		uint64_t wakes = c->wakes;
		c->waiters++;
		pthread_mutex_unlock(&c->lock);
		if (c->spill_wanted)
			c->spill_wanted(c->spill_arg);
		if (c->wait_check)
			r = c->wait_check(c->wait_arg, now_ns() - t0);
		if (r == 0 && wanted && !wanted(arg))
			r = -EAGAIN;	/* another write of the owner made it needless */
		pthread_mutex_lock(&c->lock);
		/* Wake now and then to re-check evictable chunks and wait_check. */
		if (r == 0 && !c->nfree && c->wakes == wakes)
			cond_wait_ns(&c->freed, &c->lock, WAIT_SLICE_NS);
		c->waiters--;
		if (r < 0)
			break;
	}
	if (ch) {
		ch->owner = owner;
		ch->index = 0;
		ch->lo = ch->hi = 0;
		ch->vrefs = ch->pins = 0;
		ch->in_map = 0;
		ch->state = CH_DIRTY;
		atomic_fetch_add(&c->st.used_bytes, ch->cap);
		atomic_fetch_add(&c->st.dirty_bytes, ch->cap);
	}
	pthread_mutex_unlock(&c->lock);
	if (t0)
		atomic_fetch_add(&c->st.backpressure_ns, now_ns() - t0);
	if (ch)
		cache_prefault_chunk(c, ch->id);	/* the pages it is about to use, if not yet */
	*out = ch;
	return r;
}

int cache_chunk_alloc(struct cache *c, struct cfile *owner, bool small, bool wait,
		      struct chunk **out)
{
	return chunk_alloc(c, owner, small, wait, NULL, NULL, out);
}

int cache_chunk_alloc_wanted(struct cache *c, struct cfile *owner, bool small,
			     bool (*wanted)(void *), void *arg, struct chunk **out)
{
	return chunk_alloc(c, owner, small, true, wanted, arg, out);
}

void cache_wake_waiters(struct cache *c)
{
	pthread_mutex_lock(&c->lock);
	c->wakes++;
	if (c->waiters)
		pthread_cond_broadcast(&c->freed);
	pthread_mutex_unlock(&c->lock);
}

void cache_chunk_free(struct cache *c, struct chunk *ch)
{
	pthread_mutex_lock(&c->lock);
	release_locked(c, ch);
	pthread_mutex_unlock(&c->lock);
}

/* Put the chunk on the list its state calls for (owner lock held, cache lock held). */
static void chunk_relist_locked(struct cache *c, struct chunk *ch)
{
	enum chunk_list want = CL_NONE;

	if (ch->in_map && ch->state == CH_CLEAN)
		want = CL_CLEAN;
	else if (ch->in_map && ch->state == CH_DIRTY && ch->vrefs == 0)
		want = CL_SPILL;
	if (want == ch->list)
		return;
	chunk_unlist(c, ch);
	if (want == CL_CLEAN)
		list_add_tail(&c->clean, &ch->link);
	else if (want == CL_SPILL)
		list_add_tail(&c->spill, &ch->link);
	ch->list = (uint8_t)want;
	if (want == CL_CLEAN && c->waiters)
		pthread_cond_broadcast(&c->freed);
}

void cache_chunk_relist(struct cache *c, struct chunk *ch)
{
	pthread_mutex_lock(&c->lock);
	chunk_relist_locked(c, ch);
	pthread_mutex_unlock(&c->lock);
}

void cache_chunk_set_state(struct cache *c, struct chunk *ch, enum chunk_state st)
{
	pthread_mutex_lock(&c->lock);
	if (ch->state != st) {
		state_bytes(c, ch, -1);
		ch->state = (uint8_t)st;
		state_bytes(c, ch, 1);
	}
	chunk_relist_locked(c, ch);
	pthread_mutex_unlock(&c->lock);
}

struct chunk *cache_spill_pick(struct cache *c, struct cfile **owner)
{
	struct chunk *ch = NULL;

	pthread_mutex_lock(&c->lock);
	for (struct list *e = c->spill.next; e != &c->spill; e = e->next) {
		struct chunk *cand = list_entry(e, struct chunk, link);
		/*
		 * Its owner's memory is valid while the chunk is listed (cache.h),
		 * but a final put may be on its way to unlisting it: such a file
		 * is going away with its chunks, and is not ours to keep alive.
		 */
		if (!(*owner = cfile_tryget(cand->owner)))
			continue;
		/* Rotate it so a chunk that cannot be spilled yet does not block others. */
		list_del(&cand->link);
		list_add_tail(&c->spill, &cand->link);
		ch = cand;
		break;
	}
	pthread_mutex_unlock(&c->lock);
	return ch;
}

bool cache_has_waiters(struct cache *c)
{
	pthread_mutex_lock(&c->lock);
	bool w = c->waiters != 0;
	pthread_mutex_unlock(&c->lock);
	return w;
}

uint32_t cache_reclaimable(struct cache *c)
{
	uint64_t bytes;
	uint32_t n;

	/* An estimate from counters: clean bytes may include some held by a reply. */
	pthread_mutex_lock(&c->lock);
	n = c->nfree;
	bytes = c->free_slots * c->slot_size;
	pthread_mutex_unlock(&c->lock);
	bytes += atomic_load(&c->st.clean_bytes);
	return n + (uint32_t)CKPT_MIN(bytes / c->chunk_size, UINT32_MAX - n);
}
