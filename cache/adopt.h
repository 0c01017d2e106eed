/*
 * adopt.h — chunks whose memory lies outside the cache arena: a pool lent to
 * a GPU capture session (fs/session.c), whose client copies device memory
 * straight into it, and the cfile calls that make such a chunk a file's
 * chunk without another copy.
 *
 * Budget.  A pool of n chunks first reserves n full chunks of the cache
 * (cpool_reserve): they leave the free stack, count in used_bytes, and their
 * pages are given back to the kernel, so the pool's own memory (a memfd the
 * client maps) takes their place and cache_size still bounds the cache and
 * every pool together.  The reservation returns to the cache, re-faulted,
 * when the pool is freed.
 *
 * A pool chunk's life (cpool.state):
 *   LENT     the client's: free in the shared bitmap, or being copied into;
 *   ADOPTED  a file's: in its chunk map (dirty), and then in versions,
 *            spills and replies like any chunk (C1..C5 hold unchanged).
 * It returns to LENT when the cache frees it (cache.c calls
 * cpool_chunk_released under cache->lock), which happens when its version
 * is published (cfile.c drops published pool chunks from the map at once:
 * the arena is the session's working window, not a read cache), when the
 * file is deleted or truncated, when the spiller wrote it to the file's
 * stage, or when cfile_unpool_chunk() moved its bytes into an ordinary
 * chunk to make room in the pool.  Pool chunks are never clean, so the
 * cache's LRU never evicts them.
 *
 * Accounting: an adopted chunk counts in dirty_bytes (cache_chunk_set_state)
 * but not again in used_bytes (its reservation already does); absorbed_bytes
 * counts the captured bytes.
 *
 * Locking: state[] is atomic; `held` and `closing` change under
 * cache->lock.  The callbacks run with cache->lock held and must only
 * signal (set a bit, write an eventfd, wake a thread).
 */
#ifndef CKPTFS_ADOPT_H
#define CKPTFS_ADOPT_H

#include "cache/cfile.h"

enum cpool_state { CPOOL_LENT = 0, CPOOL_ADOPTED = 1 };

struct cpool {
	struct cache *cache;
	char *base;			/* the pool's memory, mapped by its owner */
	uint32_t nchunks;
	struct chunk *chunks;		/* descriptors: chunks[i].pool == this */
	_Atomic uint8_t *state;		/* enum cpool_state, per chunk */
	struct chunk **reserved;	/* cache chunks whose budget the pool uses */
	uint32_t held;			/* ADOPTED chunks (cache->lock) */
	bool closing;			/* owner gone: free when held drops to 0 (cache->lock) */
	uint32_t cursor;		/* cpool_move_out's next candidate */
	/* cache->lock held: chunk idx is LENT again */
	void (*freed)(struct cpool *p, uint32_t idx, void *arg);
	/* cache->lock held: closing and the last chunk came back */
	void (*empty)(struct cpool *p, void *arg);
	void *arg;
};

/*
 * Reserve up to `want` full chunks of the cache's budget, at least `min`,
 * without waiting (clean chunks may be evicted).  Returns the number
 * reserved (>= min) with *out a malloc'd array, or -ENOSPC.
 */
int cpool_reserve(struct cache *c, uint32_t want, uint32_t min, struct chunk ***out);
/* Give a reservation back (its memory is re-faulted first) and free the array. */
void cpool_unreserve(struct cache *c, struct chunk **reserved, uint32_t n);

/* A pool over `base` (n chunks of c->chunk_size), using reservation `reserved`. */
struct cpool *cpool_new(struct cache *c, char *base, struct chunk **reserved, uint32_t n);
/*
 * The owner is gone: chunks it held come back no more.  Returns true if
 * nothing is adopted (free the pool now); otherwise `empty` is called when
 * the last adopted chunk returns.
 */
bool cpool_close(struct cpool *p);
/* Free the descriptors and give the reservation back (the owner unmaps base). */
void cpool_free(struct cpool *p);

/* LENT -> ADOPTED before adopting chunk idx: 0, or -EBUSY if it is not lent. */
int cpool_take(struct cpool *p, uint32_t idx);
/* ADOPTED -> LENT for a chunk whose adoption failed (it entered no file). */
void cpool_untake(struct cpool *p, uint32_t idx);
/* Called by cache.c (cache->lock held) when an adopted chunk is freed. */
void cpool_chunk_released(struct cache *c, struct chunk *ch);

/*
 * Move up to `max` adopted chunks that no version, spill or reply holds
 * into ordinary cache chunks (waiting for cache space like a writer), so
 * their pool chunks come back.  Returns how many moved.
 */
uint32_t cpool_move_out(struct cpool *p, uint32_t max);

/* ---- the cfile side (cfile.c) ------------------------------------------ */

/*
 * Make pool chunk `nc` (taken: cpool_take) chunk `index` of cf.  r[0..n)
 * are the byte ranges within the chunk that hold captured data: sorted,
 * disjoint, non-empty.  The chunk's valid range becomes their hull joined
 * with what the file's current chunk there held; bytes of it outside r are
 * copied in from that chunk, or from the layers (zeros in holes).  The old
 * chunk leaves the map (a version holding it keeps it: C1).  Returns 0 or
 * -errno (-EAGAIN: open the file's base first); *merged gets the bytes
 * copied in.  nc is in no map on error.
 */
int cfile_adopt(struct cfile *cf, uint64_t index, struct chunk *nc, const struct cext *r,
		uint32_t n, uint64_t *merged);

/*
 * Move adopted pool chunk ch of cf into a new chunk of the cache arena, if
 * it is still in cf's map, dirty, and held by no version, spill or reply.
 * May wait for cache space (a bounded wait: its -errno if it gives up).
 * 0, or -EBUSY if it could not be moved now.
 */
int cfile_unpool_chunk(struct cfile *cf, struct chunk *ch);
/*
 * Would cfile_unpool_chunk move ch now?  Judged under cf->lock, where the
 * fields it reads are written (a check under cache->lock raced the
 * publisher's release of a version: TSan, gpu_concurrent): a cheap look
 * before it takes a chunk of cache space.
 */
bool cfile_chunk_movable(struct cfile *cf, struct chunk *ch);

#endif
