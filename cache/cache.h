/*
 * cache.h — the write-back cache arena: one mapping of cache_size bytes
 * cut into fixed-size chunks, its pages populated in the background from
 * the mount on, ahead of the allocator (prefault.c).
 *
 * A chunk is either free (on the free stack), owned by exactly one cfile
 * (cfile.h), which holds it in its chunk map, in pending versions, or both,
 * or split: cut into SLOT_SIZE slots, each a chunk of its own with a smaller
 * capacity.  A file's first bytes go to a slot while they fit in one, so a
 * checkpoint of many small files does not pad each to a whole chunk; a file
 * that grows past its slot moves to a full chunk (cfile.c).  A split chunk
 * returns to the free stack when its last slot is freed.  Chunk fields
 * other than the list links are guarded by the owner's lock; the list
 * links, the free stack, the split chunks' slot maps and the counters below
 * by cache->lock.
 *
 * Two lists order owned chunks for reclaim:
 *   clean — equal to the published backend file; evicted LRU when a writer
 *           needs space (cache_chunk_alloc);
 *   spill — dirty chunks of files not yet sealed (still open, or larger than
 *           the cache): the spiller writes them to the file's stage file so a
 *           single file larger than the cache cannot wedge the writers.
 *
 * Lock order: cfile->lock -> cache->lock.  The allocator's eviction goes the
 * other way only with trylock.  cache_chunk_alloc(wait=true) must be called
 * with no cfile lock held: it may sleep until the flushers free space.
 *
 * Every wait is bounded: a waiting writer asks wait_check (the upper layer's
 * policy: a backend that stopped making progress, an interrupted request, a
 * daemon shutting down) every slice and gives up with its -errno.  The cache
 * itself knows nothing of the backend or of FUSE; cache_wake_waiters() lets
 * that policy cut a slice short.
 *
 * A chunk on a list always has a live owner: the owner's last cfile_put
 * takes its chunks off the lists (under cache->lock) before it frees the
 * file, so cache->lock makes ch->owner safe to look at; a reference may be
 * taken on it only while its count is not zero (cfile_tryget).
 */
#ifndef CKPTFS_CACHE_H
#define CKPTFS_CACHE_H

#include "cache/util.h"

#include <pthread.h>
#include <stdatomic.h>

struct cfd;
struct cfile;
struct cpool;

enum chunk_state { CH_FREE = 0, CH_DIRTY, CH_CLEAN, CH_SPLIT };
enum chunk_list { CL_NONE = 0, CL_CLEAN, CL_SPILL };

#define SLOT_SIZE (64u << 10)	/* smallest slot of a split chunk */

struct chunk {
	struct list link;	/* clean LRU, spill list, or the partial list (cache->lock) */
	struct cfile *owner;	/* set while owned */
	char *mem;		/* its memory in the arena */
	uint64_t index;		/* chunk index within the owner's file */
	uint32_t id;		/* position in the arena (slots: their parent's) */
	uint32_t cap;		/* bytes it holds: chunk_size, or slot_size for a slot */
	uint32_t lo, hi;	/* valid bytes [lo, hi) within the chunk */
	uint32_t vrefs;		/* versions or spills reading it: writers copy on write */
	uint32_t pins;		/* readers replying from it */
	uint8_t state;		/* enum chunk_state */
	uint8_t in_map;		/* in the owner's chunk map */
	uint8_t list;		/* enum chunk_list (cache->lock) */
	/* a slot: the split chunk it is cut from; a split chunk: its slots */
	struct chunk *parent;
	struct cpool *pool;	/* memory lent by a GPU session, not the arena (adopt.h) */
	struct chunk *slots;	/* nslots descriptors, made at its first split */
	uint64_t free_slots;	/* split chunk: bitmap of free slots */
};

/* Counters read lock-free by the stats view. */
struct cache_stats {
	atomic_uint_least64_t absorbed_bytes;	/* bytes written into the cache */
	/* Of those, written into versions now durable, or dropped unpublished
	 * (the file was deleted before a close sealed them, or they were rescued). */
	atomic_uint_least64_t absorbed_durable_bytes;
	atomic_uint_least64_t absorbed_dropped_bytes;
	atomic_uint_least64_t backpressure_waits;
	atomic_uint_least64_t backpressure_ns;
	atomic_uint_least64_t evictions;
	atomic_uint_least64_t spilled_bytes;
	atomic_uint_least64_t used_bytes;	/* capacity of owned chunks and slots */
	atomic_uint_least64_t dirty_bytes;
	atomic_uint_least64_t clean_bytes;
};

/* Background population of the arena's pages (prefault.c). */
struct cache_prefault {
	atomic_uchar *done;		/* per chunk: its pages are mapped */
	atomic_uint_least64_t ready_bytes;	/* bytes of chunks with done set */
	atomic_uint_least64_t ready_ns;	/* when the last chunk was done (0: not yet) */
	atomic_uint_least64_t inline_chunks;	/* populated by the allocator, not the thread */
	atomic_uint frontier;		/* 1 + the highest chunk id handed out */
	atomic_int readers;		/* files open for reading (cache_prefault_readers) */
	atomic_bool stop;
	bool background;		/* populated by the thread (else at the start) */
	bool running;
	uint64_t start_ns;
	pthread_t th;
};

struct cache {
	char *base;
	uint64_t size;		/* chunk_size * nchunks */
	uint32_t chunk_size;
	uint32_t nchunks;
	struct chunk *chunks;

	pthread_mutex_t lock;
	pthread_cond_t freed;	/* signalled when a chunk returns to the free stack */
	uint32_t *free_ids;	/* stack of free chunk ids */
	uint32_t nfree;
	struct list partial;	/* split chunks with a free slot */
	uint32_t slot_size;	/* SLOT_SIZE, or chunk_size / 64 for chunks over 4 MiB */
	uint32_t nslots;	/* slots per split chunk; 0: chunks are too small to split */
	uint64_t free_slots;	/* free slots in split chunks */
	struct list clean;	/* oldest first */
	struct list spill;	/* oldest first */
	uint32_t waiters;
	uint64_t wakes;		/* cache_wake_waiters() calls: a waiter re-checks at once */

	/* Called (without locks) when writers wait and nothing is evictable. */
	void (*spill_wanted)(void *arg);
	void *spill_arg;
	/*
	 * Called (without locks, in the waiting thread) every wait slice, with
	 * how long this wait has lasted: 0 keeps waiting, -errno gives up.
	 * NULL: wait as long as it takes.
	 */
	int (*wait_check)(void *arg, uint64_t waited_ns);
	void *wait_arg;
	bool hugepages;
	/*
	 * Seal unchanged ranges from the published file, not from clean chunks
	 * (cfile_seal): set by the backend where copying between its files is
	 * cheap (base_copy); the flusher then copies them with copy_file_range
	 * and takes their digest from the file's leaves.
	 */
	bool seal_from_base;
	/*
	 * Reads of backend files a writer makes under a file's lock (the rest
	 * of a chunk it writes part of): 0 or -errno, as cfd_read_full().  Set
	 * by the daemon, which bounds how long they may take (fs/bread.c);
	 * NULL: read in the calling thread.
	 */
	int (*read_fd)(void *arg, struct cfd *f, void *buf, size_t len, uint64_t off);
	void *read_arg;

	struct cache_stats st;
	struct cache_prefault pf;
};

/*
 * Map an arena of `size` bytes (rounded down to whole chunks) and start
 * populating its pages in the background (prefault.c); the allocator
 * populates a chunk itself if it gets there first.  Returns 0 or -errno.
 */
int cache_init(struct cache *c, uint64_t size, uint32_t chunk_size);
void cache_destroy(struct cache *c);

static inline char *cache_chunk_mem(const struct cache *c, const struct chunk *ch)
{
	(void)c;
	return ch->mem;
}

/*
 * A free chunk (small: a slot, if slots exist) for `owner` into *out,
 * evicting clean ones if needed.  With wait, sleeps (counted as
 * backpressure) until space is freed or wait_check gives up; without,
 * returns -EAGAIN at once.  0, or -errno (nothing allocated).
 */
int cache_chunk_alloc(struct cache *c, struct cfile *owner, bool small, bool wait,
		      struct chunk **out);
/*
 * cache_chunk_alloc with wait, that also gives up (-EAGAIN, nothing
 * allocated) once wanted(arg) says the chunk is no longer needed: checked
 * without the cache's lock held, before each sleep of the wait.
 */
int cache_chunk_alloc_wanted(struct cache *c, struct cfile *owner, bool small,
			     bool (*wanted)(void *), void *arg, struct chunk **out);
/* Make every waiting allocator re-ask wait_check now (any thread, no locks held). */
void cache_wake_waiters(struct cache *c);
/* Return an owned chunk to the free stack (owner lock held or chunk private). */
void cache_chunk_free(struct cache *c, struct chunk *ch);

/* List membership, called with the owner's lock held. */
void cache_chunk_set_state(struct cache *c, struct chunk *ch, enum chunk_state st);
void cache_chunk_relist(struct cache *c, struct chunk *ch);

/*
 * The oldest spillable chunk, with a reference on its owner (cfile_put it).
 * NULL when there is none.
 */
struct chunk *cache_spill_pick(struct cache *c, struct cfile **owner);

/* Is an allocation waiting for space now? */
bool cache_has_waiters(struct cache *c);
/* Full chunks free or evictable right now (for the spiller's watermark). */
uint32_t cache_reclaimable(struct cache *c);

/*
 * Pre-faulting (prefault.c).  start: with background, a thread populates
 * chunk after chunk (lowest ids first, as the allocator hands them out);
 * without, every chunk is populated before it returns.  stop joins the
 * thread (before the arena goes away).  cache_prefault_chunk populates one
 * chunk now unless that is done.  cache_ready_bytes: bytes populated.
 */
void cache_prefault_start(struct cache *c, bool background);
void cache_prefault_stop(struct cache *c);
void cache_prefault_chunk(struct cache *c, uint32_t id);
/*
 * Files open for reading through the mount: +1 at each read-only open, -1
 * at its release.  While any are open, the thread populates no further than
 * a little ahead of the allocator (prefault.c, "Readers first").
 */
void cache_prefault_readers(struct cache *c, int delta);
uint64_t cache_ready_bytes(const struct cache *c);

#endif
