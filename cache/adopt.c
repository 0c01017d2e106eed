/*
 * adopt.c — pools of chunks lent to GPU capture sessions: their reservation
 * of the cache's budget, their chunks' LENT/ADOPTED states, and moving
 * adopted chunks out when a pool runs full.  The model, the accounting and
 * the locking are in adopt.h; the cfile side (cfile_adopt and friends) is at
 * the end of cfile.c, beside the chunk map it changes.
 */
#include "cache/adopt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

int cpool_reserve(struct cache *c, uint32_t want, uint32_t min, struct chunk ***out)
{
	struct chunk **v = xcalloc(want ? want : 1, sizeof(*v));
	uint32_t n = 0;

	while (n < want) {
		struct chunk *ch;
		if (cache_chunk_alloc(c, NULL, false, false, &ch) < 0)
			break;
		/* Reserved: owned by no file, neither dirty nor clean, still used. */
		cache_chunk_set_state(c, ch, CH_FREE);
		/* The pool's memory replaces these pages. */
		madvise(cache_chunk_mem(c, ch), ch->cap, MADV_DONTNEED);
		v[n++] = ch;
	}
	if (n < min || n == 0) {
		cpool_unreserve(c, v, n);
		return -ENOSPC;
	}
	*out = v;
	return (int)n;
}

void cpool_unreserve(struct cache *c, struct chunk **reserved, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		char *mem = cache_chunk_mem(c, reserved[i]);
		/* Keep page faults off the write path (cache_init pre-faulted it too). */
		if (madvise(mem, reserved[i]->cap, MADV_POPULATE_WRITE) < 0)
			memset(mem, 0, reserved[i]->cap);
		cache_chunk_free(c, reserved[i]);
	}
	free(reserved);
}

struct cpool *cpool_new(struct cache *c, char *base, struct chunk **reserved, uint32_t n)
{
	struct cpool *p = xcalloc(1, sizeof(*p));

	p->cache = c;
	p->base = base;
	p->nchunks = n;
	p->reserved = reserved;
	p->chunks = xcalloc(n, sizeof(*p->chunks));
	p->state = xcalloc(n, sizeof(*p->state));
	for (uint32_t i = 0; i < n; i++) {
		struct chunk *ch = &p->chunks[i];
		list_init(&ch->link);
		ch->mem = base + (uint64_t)i * c->chunk_size;
		ch->id = i;
		ch->cap = c->chunk_size;
		ch->state = CH_FREE;
		ch->pool = p;
	}
	return p;
}

bool cpool_close(struct cpool *p)
{
	bool idle;

	pthread_mutex_lock(&p->cache->lock);
	p->closing = true;
	idle = p->held == 0;
	pthread_mutex_unlock(&p->cache->lock);
	return idle;
}

void cpool_free(struct cpool *p)
{
	if (!p)
		return;
	cpool_unreserve(p->cache, p->reserved, p->nchunks);
	free(p->chunks);
	free((void *)p->state);
	free(p);
}

int cpool_take(struct cpool *p, uint32_t idx)
{
	uint8_t lent = CPOOL_LENT;

	if (idx >= p->nchunks || !atomic_compare_exchange_strong(&p->state[idx], &lent, CPOOL_ADOPTED))
		return -EBUSY;
	pthread_mutex_lock(&p->cache->lock);
	p->held++;
	pthread_mutex_unlock(&p->cache->lock);
	return 0;
}

void cpool_untake(struct cpool *p, uint32_t idx)
{
	pthread_mutex_lock(&p->cache->lock);
	p->held--;
	atomic_store(&p->state[idx], CPOOL_LENT);
	if (p->closing && p->held == 0 && p->empty)
		p->empty(p, p->arg);
	pthread_mutex_unlock(&p->cache->lock);
}

void cpool_chunk_released(struct cache *c, struct chunk *ch)
{
	struct cpool *p = ch->pool;
	uint32_t idx = (uint32_t)(ch - p->chunks);

	(void)c;
	ch->owner = NULL;
	ch->in_map = 0;
	p->held--;
	atomic_store(&p->state[idx], CPOOL_LENT);
	if (!p->closing) {
		if (p->freed)
			p->freed(p, idx, p->arg);
	} else if (p->held == 0 && p->empty) {
		p->empty(p, p->arg);
	}
}

uint32_t cpool_move_out(struct cpool *p, uint32_t max)
{
	struct cache *c = p->cache;
	uint32_t moved = 0;

	for (uint32_t k = 0; k < p->nchunks && moved < max; k++) {
		uint32_t i = p->cursor++ % p->nchunks;
		struct chunk *ch = &p->chunks[i];
		struct cfile *cf = NULL;

		if (atomic_load(&p->state[i]) != CPOOL_ADOPTED)
			continue;
		/* The owner is stable while cache->lock is held and ch is owned. */
		pthread_mutex_lock(&c->lock);
		if (ch->owner)
			cf = cfile_tryget(ch->owner);
		pthread_mutex_unlock(&c->lock);
		if (!cf)
			continue;
		if (cfile_chunk_movable(cf, ch) && cfile_unpool_chunk(cf, ch) == 0)
			moved++;
		cfile_put(cf);
	}
	return moved;
}
