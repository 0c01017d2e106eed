/*
 * cfile.h — one file's contents in the cache, and the versions sealed from it.
 *
 * A file's bytes [0, size) are found, for each offset, in the first of:
 *   1. its chunk map: arena chunks by index, each valid over [lo, hi);
 *   2. its layers, newest first: backend files holding ranges of it — the
 *      stage file that the spiller wrote dirty chunks into, the stage files
 *      of versions sealed but not yet published, and last the base: the
 *      published backend file, valid over [0, base length);
 *   3. zeros (holes, or bytes past a truncation).
 *
 * Sealing (close or fsync of a modified file) takes a version: an immutable
 * segment list of the whole file, holding a reference on every chunk and
 * layer it names.  Writers never change a chunk a version holds — they copy
 * it first (copy on write), so the version flushes exactly the bytes it was
 * sealed with while the file goes on changing.  Publishing version v makes
 * its output file the new base; chunks shared with v become clean.
 *
 * Invariants (tests cite them as C1..C5):
 *  C1  a chunk with vrefs > 0 is never written to;
 *  C2  a clean chunk's valid bytes equal the base at the same offsets;
 *  C3  layer extents are disjoint, sorted and lie below `size`;
 *  C4  a version's segments cover [0, v->size) exactly, in order;
 *  C5  a chunk is freed only when it is in no map, no version and no reply.
 *
 * Locking: cf->lock guards everything in the cfile and the chunk fields of
 * chunks it owns.  It is taken before cache->lock.  Copying user data into a
 * chunk happens under cf->lock (writes to one file are serialized).
 */
#ifndef CKPTFS_CFILE_H
#define CKPTFS_CFILE_H

#include "cache/cache.h"

#include <sys/stat.h>
#include <sys/types.h>

/* A shared file descriptor: a base or stage file on the backend. */
struct cfd {
	int fd;
	atomic_uint refs;
	void *tag;			/* owner's data (a backend temp file's name) */
	void (*tag_free)(void *tag);	/* called with tag at the last put, before close */
	atomic_bool lost;	/* a stage whose sync failed: its spilled bytes may be gone (flush.c) */
};
struct cfd *cfd_new(int fd);
struct cfd *cfd_get(struct cfd *f);
void cfd_put(struct cfd *f);
/*
 * References to put later, where closing the last one would keep someone
 * waiting: the close of a replaced file's last descriptor frees its blocks
 * (26-48 ms for a 3 GiB sparse file on ext4 here), and fsync's answer need
 * not wait for that.  cfd_bin_empty puts them all.
 */
struct cfd_bin {
	struct cfd **f;
	size_t n, cap;
};
void cfd_bin_add(struct cfd_bin *b, struct cfd *f);
/*
 * Run now the tag_free of each file whose last reference b holds (a
 * stage's unlink: its name must be gone before whatever comes next may
 * remove its directory); only the close waits for cfd_bin_empty.  Nobody
 * else can take a reference to a file whose references are all in b.
 */
void cfd_bin_untag_last(struct cfd_bin *b);
void cfd_bin_empty(struct cfd_bin *b);
/*
 * len bytes of f at off into buf (zeros past its end): 0 or -errno.  pr:
 * pread as the backend's system call table has it (bytes or -errno; NULL:
 * pread(2)).
 */
int cfd_read_full(struct cfd *f, void *buf, size_t len, uint64_t off,
		  ssize_t (*pr)(int fd, void *buf, size_t n, off_t off));

struct cext {
	uint64_t lo, hi;
};

/*
 * The block digests (backend/digest.h) of a published file's first `blocks`
 * whole blocks, as runs of equal leaves: kept by the flusher that wrote the
 * file, so that a later version of it reuses them for the ranges it takes
 * from that file unchanged instead of reading those bytes back.  The cache
 * only carries them; references are counted.
 */
struct cleaf_run {
	uint64_t hi, lo;	/* the leaf (XXH128_hash_t's halves) */
	uint64_t n;		/* blocks */
};
/*
 * What a backend object said when last looked at: a change behind the
 * mount (another node, a program on the backend) changes its ctime at
 * least, which no program can set.
 */
struct bstamp {
	ino_t ino;
	mode_t mode;
	off_t size;
	struct timespec mtime, ctime;
};
void bstamp_of(const struct stat *st, struct bstamp *b);
bool bstamp_eq(const struct bstamp *a, const struct bstamp *b);

struct cleaves {
	atomic_uint refs;
	uint64_t blocks;
	uint32_t n, cap;
	struct cleaf_run *run;
	/*
	 * Where that file holds data, when ckptfs knows it exactly because it
	 * wrote the file whole into a new temporary file: sorted, disjoint
	 * [lo, hi) ranges, everything else a hole (data_known).  A later
	 * version copies and hashes these ranges of it instead of asking the
	 * file system where its data are (SEEK_DATA/SEEK_HOLE, a call per
	 * extent and per range).
	 */
	bool data_known;
	uint32_t ndata;
	struct cext *data;
	/*
	 * The file as it was once published (stamped): a later version takes
	 * these leaves and data ranges on trust only while the file it copies
	 * from still says the same (backend/flush.c, base_unchanged).
	 */
	bool stamped;
	struct bstamp stamp;
};
struct cleaves *cleaves_new(void);
struct cleaves *cleaves_get(struct cleaves *lv);	/* NULL stays NULL */
void cleaves_put(struct cleaves *lv);

struct clayer {
	struct cfd *f;		/* NULL: base not opened yet (cfile_set_base_fd) */
	struct cext *ext;
	uint32_t next, cap;
	uint64_t ver;		/* sequence that sealed or published it; 0 = live stage */
	bool base;		/* the published file (reopened by name when f is NULL) */
	struct cleaves *leaves;	/* base: its block digests, or NULL */
	uint64_t ino;		/* base published here: its backend inode (0: unknown) */
	uint64_t listed_ino;	/* base loaded from a listing: the inode listed (0: unknown) */
};

enum cseg_kind { CSEG_MEM, CSEG_FD, CSEG_ZERO };

struct cseg {
	uint8_t kind;
	uint64_t off;		/* file offset */
	uint64_t len;
	char *mem;		/* CSEG_MEM */
	struct chunk *ch;	/* CSEG_MEM */
	struct cfd *f;		/* CSEG_FD */
	uint64_t foff;		/* CSEG_FD: offset in f */
	/*
	 * A version's segment whose bytes are the base's at the same offsets
	 * (CSEG_FD from the base; CSEG_MEM of a chunk clean when sealed): the
	 * base's leaves (a reference), or NULL.
	 */
	struct cleaves *lv;
	bool data_known;	/* CSEG_FD: f's data are where lv->data says, if it is unchanged */
	bool staged;		/* CSEG_FD: f is a stage file (spilled bytes, written through the page cache) */
};

struct cver;

struct cfile {
	pthread_mutex_t lock;
	atomic_uint refs;
	struct cache *cache;
	/*
	 * Written under lock; atomic so that cfile_size and cfile_dirty need
	 * not wait for it — a write filling a chunk from the backend holds it,
	 * and stat(2) of the file asks the size with the namespace lock held.
	 */
	_Atomic uint64_t size;
	struct { uint64_t index; struct chunk *ch; } *map;	/* sorted by index */
	uint32_t nmap, capmap;
	struct clayer **layers;	/* newest first */
	uint32_t nlayers;
	struct list versions;	/* pending versions, oldest first */
	atomic_uint nversions;	/* how many: written under lock, read without (cfile_state) */
	atomic_uint sgen;	/* bumped after each seal and each version let go (cfile_state) */
	uint64_t trunc_gen;	/* bumped by every shrinking truncate */
	uint32_t spills;	/* spill writes in flight to the live stage */
	atomic_bool dirty;	/* modified since the last seal (written under lock, like size) */
	uint64_t absorbed;	/* bytes written since the last seal (stats) */
	/*
	 * Written under lock; atomic so that what the front end asks under its
	 * namespace lock (cfile_state, cfile_base_lazy, an open's count) never
	 * waits for the file's lock, which a write filling a chunk from a hung
	 * backend holds up to drain_timeout: else a stats read, or an open of
	 * the file, would stall every request of the mount behind it.
	 */
	atomic_bool base_lazy;	/* last layer is a base whose fd is not open yet */
	atomic_uint opens;	/* open handles on it (the front end's count; changed without lock) */
	void *owner;		/* the upper layer's object (opaque here) */
};

/* A sealed version of a file, flushed and published as one unit. */
struct cver {
	struct list link;	/* in cf->versions */
	struct cfile *cf;	/* reference */
	uint64_t seq;
	uint64_t size;
	uint64_t trunc_after;	/* smallest truncation since the seal */
	struct cseg *segs;
	uint32_t nseg;
	struct cfd *out;	/* stage file holding part of it already, or NULL */
	struct cfd *base_f;	/* the base its unchanged ranges come from, if it was opened */
	uint64_t bytes_cached;	/* bytes coming from chunks or stage (persisted count) */
	uint64_t absorbed;	/* bytes written into the file since the previous seal */
	void *owner;		/* the upper layer's per-version data */
};

struct cfile *cfile_new(struct cache *c, void *owner);
struct cfile *cfile_get(struct cfile *cf);
/* A reference if cf is still live (count not zero), else NULL: for cache.c's lists. */
struct cfile *cfile_tryget(struct cfile *cf);
void cfile_put(struct cfile *cf);

/*
 * Give a file loaded from the backend its base: `len` bytes of the file
 * listed as inode `ino` (0: not known), opened later (base_lazy).
 * cfile_set_base_fd gives a lazy base the file just opened at its name,
 * inode `ino` (ownership of fd passes): 0, or -ESTALE (fd closed) if it is
 * neither the inode the base is nor `renamed_ino` (a pending version of
 * this file, renamed in already, its publication not yet declared: it
 * holds the base's unchanged bytes), so another file has the name now.
 * A reopen by name never serves one file's cached chunks around another
 * file's bytes, nor a file someone else put at the name.
 */
void cfile_set_base_lazy(struct cfile *cf, uint64_t len, uint64_t ver, uint64_t ino);
int cfile_set_base_fd(struct cfile *cf, int fd, uint64_t ino, uint64_t renamed_ino);
/*
 * The base file of a clean file with nothing pending (the version loaded or
 * last published): *ref gets it as a reference (NULL if none is open) and
 * *ino the backend inode of the file this mount last published for cf (a
 * published file nobody has open keeps no descriptor); NULL and 0 if it is
 * dirty or flushing.  -EBUSY (and NULL, 0) if its lock is held: this does
 * not wait (the caller holds the namespace lock, and a write filling a
 * chunk from a hung backend holds the file's lock), and the caller must
 * take the file as unknown, not as changed.  For telling whether a backend
 * name still holds that file.
 */
int cfile_base_peek(struct cfile *cf, struct cfd **ref, uint64_t *ino);

/*
 * Write len bytes at off.  `copy` fills dst (len bytes of the write starting
 * at src_off) and returns 0 or -errno; it runs under cf->lock.  May sleep for
 * cache space (backpressure), a chunk at a time, holding none while it
 * waits; if that wait gives up (cache.h wait_check), returns its -errno.
 * Returns 0 or -errno; an error met after the first chunk took its part
 * (a later chunk's allocation, its fill from the backend, or the copy,
 * failed) leaves that part written, the file dirty and its size grown to
 * cover it, as reads show it.  *changed (if not NULL): whether the file
 * changed, on success or error.
 */
typedef int (*cfile_copy_fn)(void *arg, char *dst, size_t len, size_t src_off);
int cfile_write(struct cfile *cf, uint64_t off, size_t len, cfile_copy_fn copy, void *arg,
		bool *changed);

/*
 * Write len bytes at off that already lie at the start of `nc`, a full
 * chunk of the arena owned by no file (a free chunk the request loop read
 * them into), by making nc the file's chunk there: no copy.  Only when off
 * starts a chunk, the bytes are more than a file's first slot holds, and
 * the file's current chunk there (if any) holds nothing past len.  Returns
 * 0 (nc is the file's now), 1 (not such a write: nc untouched, use
 * cfile_write), or -EAGAIN (open the file's base first).  Never sleeps.
 */
int cfile_write_chunk(struct cfile *cf, uint64_t off, size_t len, struct chunk *nc);

/* Set the size (truncate or extend with zeros). */
void cfile_truncate(struct cfile *cf, uint64_t size);

/*
 * Map [off, off+len) ∩ [0, size) for a reply: MEM segments are pinned, FD
 * segments referenced.  Release with cfile_unmap().  Returns 0 or -errno.
 */
int cfile_map(struct cfile *cf, uint64_t off, uint64_t len, struct cseg **segs, uint32_t *nseg);
void cfile_unmap(struct cfile *cf, struct cseg *segs, uint32_t nseg);

/*
 * The front end counts its open handles: a published file nobody has open
 * keeps no backend descriptor (a mount that published 100,000 files must not
 * hold 100,000 fds); its base is reopened lazily (cfile_set_base_fd) when a
 * read or write needs it.
 */
void cfile_opened(struct cfile *cf);
void cfile_closed(struct cfile *cf);

/*
 * Seal the current contents as version `seq`; the file becomes clean.
 * Never waits: with a spill still writing into the live stage, the version
 * goes to a fresh file instead of that stage (a late spill write could land
 * past the sealed size).
 */
struct cver *cfile_seal(struct cfile *cf, uint64_t seq);
/*
 * The version's output is durable under the final name: `out` is the file,
 * `leaves` its block digests or NULL (the reference passes to the file),
 * `ino` its inode on the backend (0 if unknown).  The descriptors of the
 * layers it makes obsolete go into `later`.
 */
void cfile_published(struct cver *v, struct cfd *out, struct cleaves *leaves, uint64_t ino,
		     struct cfd_bin *later);
/* Drop a version that will never be published (its file was deleted). */
void cver_discard(struct cver *v);
/* Free a version after cfile_published/cver_discard. */
void cver_free(struct cver *v);

/*
 * Spilling.  cfile_spill_begin() checks that ch is still a spillable chunk
 * of cf and, if a live stage exists, pins ch and returns the stage fd
 * (ref'd) and the range to write; -ENOENT if there is nothing to do,
 * -EAGAIN if a stage file must first be installed (cfile_set_stage),
 * -EBUSY if the file's lock stays held for more than a moment (a write
 * filling a chunk from a slow backend holds it: the one spiller must not
 * wait behind it while writers wait for the space it makes; it spills
 * another file's chunk, or this one later).
 * cfile_spill_end() records the written extent and frees the chunk.
 */
struct spill_job {
	struct chunk *ch;
	struct cfd *f;
	char *mem;
	uint64_t off;
	uint64_t len;
	uint64_t gen;
};
int cfile_spill_begin(struct cfile *cf, struct chunk *ch, struct spill_job *job);
void cfile_spill_end(struct cfile *cf, struct spill_job *job, int err);
/* Install fd as the live stage; returns false (and closes nothing) if one exists. */
bool cfile_set_stage(struct cfile *cf, struct cfd *f);
/* Remove the live stage f if nothing was spilled into it (it goes when f does). */
void cfile_drop_empty_stage(struct cfile *cf, struct cfd *f);

/* Called by cache.c with both locks held: drop a clean chunk from the map. */
void cfile_evict_locked(struct cfile *cf, struct chunk *ch);

/*
 * Is every byte of [0, size) in cache memory (chunks in the map), none on
 * the backend only?  Reads of such a file need no disk.
 */
bool cfile_in_memory(struct cfile *cf);

/* Cheap state for xattrs and the files list. */
enum cfile_state { CF_DURABLE, CF_DIRTY, CF_FLUSHING };
enum cfile_state cfile_state(struct cfile *cf);
uint64_t cfile_size(struct cfile *cf);
bool cfile_dirty(struct cfile *cf);
bool cfile_base_lazy(struct cfile *cf);
/*
 * The backend file that holds exactly this file's contents, referenced:
 * nothing dirty, no version pending, every cached chunk clean (a skipped
 * version's are not), one layer (the published base) over [0, size).
 * NULL otherwise (and for a base not opened yet, or size 0).
 */
struct cfd *cfile_clean_base(struct cfile *cf);

#endif
