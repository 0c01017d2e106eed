/*
 * cfile.c — a file's contents as chunks over layers over zeros, and the
 * versions sealed from it.  The model, its invariants (C1..C5) and the lock
 * rules are in cfile.h.
 */
#include "cache/cfile.h"
#include "cache/adopt.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

/* ---- shared file descriptors ------------------------------------------- */

struct cfd *cfd_new(int fd)
{
	struct cfd *f = xmalloc(sizeof(*f));
	f->fd = fd;
	f->tag = NULL;
	f->tag_free = NULL;
	atomic_init(&f->refs, 1);
	atomic_init(&f->lost, false);
	return f;
}

struct cfd *cfd_get(struct cfd *f)
{
	atomic_fetch_add(&f->refs, 1);
	return f;
}

void cfd_put(struct cfd *f)
{
	if (f && atomic_fetch_sub(&f->refs, 1) == 1) {
		if (f->tag_free)
			f->tag_free(f->tag);
		if (f->fd >= 0)
			close(f->fd);
		free(f);
	}
}

void cfd_bin_add(struct cfd_bin *b, struct cfd *f)
{
	if (!f)
		return;
	if (b->n == b->cap) {
		b->cap = b->cap ? 2 * b->cap : 8;
		b->f = xrealloc(b->f, b->cap * sizeof(*b->f));
	}
	b->f[b->n++] = f;
}

void cfd_bin_untag_last(struct cfd_bin *b)
{
	for (size_t i = 0; i < b->n; i++) {
		struct cfd *f = b->f[i];
		if (f->tag_free && atomic_load(&f->refs) == 1) {
			f->tag_free(f->tag);
			f->tag_free = NULL;
		}
	}
}

void cfd_bin_empty(struct cfd_bin *b)
{
	for (size_t i = 0; i < b->n; i++)
		cfd_put(b->f[i]);
	free(b->f);
	*b = (struct cfd_bin){ 0 };
}

/* ---- layers ---------------------------------------------------------- */

static struct clayer *layer_new(struct cfd *f, uint64_t ver)
{
	struct clayer *l = xcalloc(1, sizeof(*l));
	l->f = f;
	l->ver = ver;
	return l;
}

void bstamp_of(const struct stat *st, struct bstamp *b)
{
	b->ino = st->st_ino;
	b->mode = st->st_mode;
	b->size = st->st_size;
	b->mtime = st->st_mtim;
	b->ctime = st->st_ctim;
}

bool bstamp_eq(const struct bstamp *a, const struct bstamp *b)
{
	return a->ino == b->ino && a->mode == b->mode && a->size == b->size &&
	       ts_eq(a->mtime, b->mtime) && ts_eq(a->ctime, b->ctime);
}

struct cleaves *cleaves_new(void)
{
	struct cleaves *lv = xcalloc(1, sizeof(*lv));
	atomic_init(&lv->refs, 1);
	return lv;
}

struct cleaves *cleaves_get(struct cleaves *lv)
{
	if (lv)
		atomic_fetch_add(&lv->refs, 1);
	return lv;
}

void cleaves_put(struct cleaves *lv)
{
	if (lv && atomic_fetch_sub(&lv->refs, 1) == 1) {
		free(lv->run);
		free(lv->data);
		free(lv);
	}
}

static void layer_free(struct clayer *l)
{
	cfd_put(l->f);
	cleaves_put(l->leaves);
	free(l->ext);
	free(l);
}

/* Add [lo, hi) to the sorted, disjoint extent list, merging neighbours (C3). */
static void layer_add(struct clayer *l, uint64_t lo, uint64_t hi)
{
	uint32_t i = 0, j;

	if (lo >= hi)
		return;
	while (i < l->next && l->ext[i].hi < lo)
		i++;
	j = i;
	while (j < l->next && l->ext[j].lo <= hi) {
		lo = CKPT_MIN(lo, l->ext[j].lo);
		hi = CKPT_MAX(hi, l->ext[j].hi);
		j++;
	}
	/* Replace ext[i, j) by the merged extent. */
	if (i == j) {
		if (l->next == l->cap) {
			l->cap = l->cap ? l->cap * 2 : 4;
			l->ext = xrealloc(l->ext, l->cap * sizeof(*l->ext));
		}
		memmove(&l->ext[i + 1], &l->ext[i], (l->next - i) * sizeof(*l->ext));
		l->next++;
	} else if (j > i + 1) {
		memmove(&l->ext[i + 1], &l->ext[j], (l->next - j) * sizeof(*l->ext));
		l->next -= j - i - 1;
	}
	l->ext[i].lo = lo;
	l->ext[i].hi = hi;
}

static void layer_trim(struct clayer *l, uint64_t n)
{
	while (l->next && l->ext[l->next - 1].lo >= n)
		l->next--;
	if (l->next && l->ext[l->next - 1].hi > n)
		l->ext[l->next - 1].hi = n;
}

/*
 * Does l hold offset p?  If so, *hi is the end of its extent; if not, *next
 * is where its next extent starts (UINT64_MAX if none).
 */
static bool layer_lookup(const struct clayer *l, uint64_t p, uint64_t *hi, uint64_t *next)
{
	uint32_t lo = 0, n = l->next;

	while (lo < n) {		/* first extent with hi > p */
		uint32_t mid = (lo + n) / 2;
		if (l->ext[mid].hi <= p)
			lo = mid + 1;
		else
			n = mid;
	}
	if (lo < l->next && l->ext[lo].lo <= p) {
		*hi = l->ext[lo].hi;
		return true;
	}
	*next = lo < l->next ? l->ext[lo].lo : UINT64_MAX;
	return false;
}

static struct clayer *live_stage(struct cfile *cf)
{
	return cf->nlayers && cf->layers[0]->ver == 0 ? cf->layers[0] : NULL;
}

/* ---- the chunk map --------------------------------------------------- */

static uint32_t map_lower(const struct cfile *cf, uint64_t index)
{
	uint32_t lo = 0, n = cf->nmap;

	/* Sequential writers append: check the tail first. */
	if (n && cf->map[n - 1].index < index)
		return n;
	while (lo < n) {
		uint32_t mid = (lo + n) / 2;
		if (cf->map[mid].index < index)
			lo = mid + 1;
		else
			n = mid;
	}
	return lo;
}

static struct chunk *map_get(const struct cfile *cf, uint64_t index, uint32_t *pos)
{
	uint32_t i = map_lower(cf, index);
	if (pos)
		*pos = i;
	return i < cf->nmap && cf->map[i].index == index ? cf->map[i].ch : NULL;
}

static void map_insert(struct cfile *cf, uint32_t pos, struct chunk *ch)
{
	if (cf->nmap == cf->capmap) {
		cf->capmap = cf->capmap ? cf->capmap * 2 : 16;
		cf->map = xrealloc(cf->map, cf->capmap * sizeof(*cf->map));
	}
	memmove(&cf->map[pos + 1], &cf->map[pos], (cf->nmap - pos) * sizeof(*cf->map));
	cf->map[pos].index = ch->index;
	cf->map[pos].ch = ch;
	cf->nmap++;
	ch->in_map = 1;
}

static void map_remove(struct cfile *cf, uint32_t pos)
{
	cf->map[pos].ch->in_map = 0;
	memmove(&cf->map[pos], &cf->map[pos + 1], (cf->nmap - pos - 1) * sizeof(*cf->map));
	cf->nmap--;
}

/* Drop a chunk that left the map, a version or a reply, if nothing holds it (C5). */
static void chunk_maybe_free(struct cfile *cf, struct chunk *ch)
{
	if (!ch->in_map && !ch->vrefs && !ch->pins)
		cache_chunk_free(cf->cache, ch);
	else
		cache_chunk_relist(cf->cache, ch);
}

void cfile_evict_locked(struct cfile *cf, struct chunk *ch)
{
	uint32_t pos;
	if (map_get(cf, ch->index, &pos) == ch)
		map_remove(cf, pos);
}

/* ---- life cycle -------------------------------------------------------- */

struct cfile *cfile_new(struct cache *c, void *owner)
{
	struct cfile *cf = xcalloc(1, sizeof(*cf));
	pthread_mutex_init(&cf->lock, NULL);
	atomic_init(&cf->refs, 1);
	cf->cache = c;
	cf->owner = owner;
	list_init(&cf->versions);
	return cf;
}

struct cfile *cfile_get(struct cfile *cf)
{
	atomic_fetch_add(&cf->refs, 1);
	return cf;
}

struct cfile *cfile_tryget(struct cfile *cf)
{
	unsigned n = atomic_load(&cf->refs);

	do {
		if (n == 0)
			return NULL;	/* its last put is freeing it */
	} while (!atomic_compare_exchange_weak(&cf->refs, &n, n + 1));
	return cf;
}

void cfile_put(struct cfile *cf)
{
	if (!cf || atomic_fetch_sub(&cf->refs, 1) != 1)
		return;
	/* Versions hold references, so none is pending here. */
	pthread_mutex_lock(&cf->lock);
	/* Written since its last seal and never sealed again: it goes with the file. */
	atomic_fetch_add(&cf->cache->st.absorbed_dropped_bytes, cf->absorbed);
	for (uint32_t i = cf->nmap; i-- > 0;) {
		struct chunk *ch = cf->map[i].ch;
		map_remove(cf, i);
		chunk_maybe_free(cf, ch);
	}
	pthread_mutex_unlock(&cf->lock);
	for (uint32_t i = 0; i < cf->nlayers; i++)
		layer_free(cf->layers[i]);
	free(cf->layers);
	free(cf->map);
	pthread_mutex_destroy(&cf->lock);
	free(cf);
}

/* Is f the file of a stage layer (spilled bytes), not of a published version (cf->lock)? */
static bool layer_is_stage(const struct cfile *cf, const struct cfd *f)
{
	for (uint32_t i = 0; i < cf->nlayers; i++)
		if (cf->layers[i]->f == f)
			return !cf->layers[i]->base;
	return false;
}

static void layers_append(struct cfile *cf, struct clayer *l)
{
	cf->layers = xrealloc(cf->layers, (cf->nlayers + 1) * sizeof(*cf->layers));
	cf->layers[cf->nlayers++] = l;
}

void cfile_set_base_lazy(struct cfile *cf, uint64_t len, uint64_t ver, uint64_t ino)
{
	pthread_mutex_lock(&cf->lock);
	if (len) {
		struct clayer *l = layer_new(NULL, ver ? ver : 1);
		l->base = true;
		l->listed_ino = ino;
		layer_add(l, 0, len);
		layers_append(cf, l);
		cf->base_lazy = true;
	}
	cf->size = len;
	pthread_mutex_unlock(&cf->lock);
}

int cfile_set_base_fd(struct cfile *cf, int fd, uint64_t ino, uint64_t renamed_ino)
{
	int r = 0;

	pthread_mutex_lock(&cf->lock);
	if (cf->base_lazy && cf->nlayers && !cf->layers[cf->nlayers - 1]->f) {
		struct clayer *l = cf->layers[cf->nlayers - 1];
		uint64_t want = l->ino ? l->ino : l->listed_ino;
		if (want && ino && ino != want && ino != renamed_ino) {
			r = -ESTALE;	/* stays lazy: the name is looked at again */
		} else {
			l->f = cfd_new(fd);
			fd = -1;
		}
	}
	if (!r)
		cf->base_lazy = false;
	pthread_mutex_unlock(&cf->lock);
	if (fd >= 0)
		close(fd);
	return r;
}

int cfile_base_peek(struct cfile *cf, struct cfd **ref, uint64_t *ino)
{
	*ref = NULL;
	*ino = 0;
	if (pthread_mutex_trylock(&cf->lock) != 0)
		return -EBUSY;	/* see cfile.h */
	if (cf->nlayers && !cf->dirty && list_empty(&cf->versions)) {
		struct clayer *l = cf->layers[cf->nlayers - 1];
		if (l->ver && l->f)
			*ref = cfd_get(l->f);
		if (l->ver && l->base)
			*ino = l->ino;
	}
	pthread_mutex_unlock(&cf->lock);
	return 0;
}

uint64_t cfile_size(struct cfile *cf)
{
	return atomic_load(&cf->size);	/* no lock: see struct cfile */
}

bool cfile_dirty(struct cfile *cf)
{
	return atomic_load(&cf->dirty);
}

bool cfile_base_lazy(struct cfile *cf)
{
	return atomic_load(&cf->base_lazy);	/* no lock: see struct cfile */
}

/*
 * Does every cached chunk of cf hold what its base holds (lock held)?  A
 * skipped version's chunks go back to the map dirty with the file not
 * dirty (cver_discard): the file reads them, so the base file alone does
 * not show what the file reads.
 */
static bool map_clean_locked(const struct cfile *cf)
{
	for (uint32_t i = 0; i < cf->nmap; i++)
		if (cf->map[i].ch->state != CH_CLEAN)
			return false;
	return true;
}

struct cfd *cfile_clean_base(struct cfile *cf)
{
	struct cfd *f = NULL;

	pthread_mutex_lock(&cf->lock);
	if (!cf->dirty && list_empty(&cf->versions) && !cf->base_lazy && cf->nlayers == 1 &&
	    cf->size && map_clean_locked(cf)) {
		struct clayer *l = cf->layers[0];
		if (l->f && l->next == 1 && l->ext[0].lo == 0 && l->ext[0].hi == cf->size)
			f = cfd_get(l->f);
	}
	pthread_mutex_unlock(&cf->lock);
	return f;
}

enum cfile_state cfile_state(struct cfile *cf)
{
	/*
	 * No lock (struct cfile).  A seal counts its version before it clears
	 * dirty; between two reads of sgen no seal or publication completed,
	 * so what is read together held at one moment (writes only set dirty).
	 */
	enum cfile_state st = CF_DURABLE;
	for (int tries = 0; tries < 8; tries++) {
		unsigned g = atomic_load(&cf->sgen);
		bool d = atomic_load(&cf->dirty);
		unsigned v = atomic_load(&cf->nversions);
		d = d || atomic_load(&cf->dirty);
		st = d ? CF_DIRTY : v ? CF_FLUSHING : CF_DURABLE;
		if (atomic_load(&cf->sgen) == g)
			break;
	}
	return st;
}

bool cfile_in_memory(struct cfile *cf)
{
	const uint64_t cs = cf->cache->chunk_size;
	uint64_t p = 0;

	pthread_mutex_lock(&cf->lock);
	uint64_t size = cf->size;
	for (uint32_t i = 0; i < cf->nmap && p < size; i++) {
		struct chunk *ch = cf->map[i].ch;
		uint64_t lo = cf->map[i].index * cs + ch->lo, hi = cf->map[i].index * cs + ch->hi;
		if (lo > p)
			break;	/* a gap: those bytes are on the backend, or zeros */
		p = CKPT_MAX(p, hi);
	}
	pthread_mutex_unlock(&cf->lock);
	return size > 0 && p >= size;
}

/* ---- mapping ------------------------------------------------------------ */

struct segbuf {
	struct cseg *v;
	uint32_t n, cap;
};

static void seg_push(struct segbuf *b, const struct cseg *s)
{
	if (b->n) {
		struct cseg *t = &b->v[b->n - 1];
		if (t->kind == s->kind && t->off + t->len == s->off &&
		    ((s->kind == CSEG_ZERO) ||
		     (s->kind == CSEG_FD && t->f == s->f && t->foff + t->len == s->foff))) {
			t->len += s->len;
			return;
		}
	}
	if (b->n == b->cap) {
		b->cap = b->cap ? b->cap * 2 : 8;
		b->v = xrealloc(b->v, b->cap * sizeof(*b->v));
	}
	b->v[b->n++] = *s;
}

/* Segments for [p, q) from the layers and zeros, ignoring the chunk map. */
static int map_under(struct cfile *cf, uint64_t p, uint64_t q, struct segbuf *b)
{
	while (p < q) {
		uint64_t lim = q, hi, next;
		struct cseg s = { .off = p };
		uint32_t i;

		for (i = 0; i < cf->nlayers; i++) {
			struct clayer *l = cf->layers[i];
			if (layer_lookup(l, p, &hi, &next)) {
				if (!l->f)
					return -EAGAIN;	/* base not opened yet */
				s.kind = CSEG_FD;
				s.f = l->f;
				s.foff = p;
				lim = CKPT_MIN(lim, hi);
				break;
			}
			lim = CKPT_MIN(lim, next);
		}
		if (i == cf->nlayers)
			s.kind = CSEG_ZERO;
		s.len = lim - p;
		seg_push(b, &s);
		p = lim;
	}
	return 0;
}

/*
 * Segments for [p, end) of the whole file (C4).  With from_base, the ranges
 * of clean chunks come from the base file, which holds the same bytes (C2).
 */
static int map_range(struct cfile *cf, uint64_t p, uint64_t end, struct segbuf *b, bool from_base)
{
	const uint64_t cs = cf->cache->chunk_size;
	uint32_t pos = map_lower(cf, p / cs);

	while (p < end) {
		uint64_t i = p / cs, cbase = i * cs, q;
		struct chunk *ch = NULL;
		int r;

		while (pos < cf->nmap && cf->map[pos].index < i)
			pos++;
		if (pos < cf->nmap && cf->map[pos].index == i)
			ch = cf->map[pos].ch;
		if (ch && p >= cbase + ch->lo && p < cbase + ch->hi && from_base &&
		    ch->state == CH_CLEAN) {
			q = CKPT_MIN(end, cbase + ch->hi);
			if ((r = map_under(cf, p, q, b)) < 0)
				return r;
			p = q;
			continue;
		}
		if (ch && p >= cbase + ch->lo && p < cbase + ch->hi) {
			struct cseg s = { .kind = CSEG_MEM, .off = p, .ch = ch,
					  .mem = cache_chunk_mem(cf->cache, ch) + (p - cbase) };
			q = CKPT_MIN(end, cbase + ch->hi);
			s.len = q - p;
			seg_push(b, &s);
			p = q;
			continue;
		}
		q = end;
		if (ch && p < cbase + ch->lo) {
			q = CKPT_MIN(q, cbase + ch->lo);
		} else {
			uint32_t nx = ch ? pos + 1 : pos;
			if (nx < cf->nmap)
				q = CKPT_MIN(q, cf->map[nx].index * cs + cf->map[nx].ch->lo);
		}
		if ((r = map_under(cf, p, q, b)) < 0)
			return r;
		p = q;
	}
	return 0;
}

int cfile_map(struct cfile *cf, uint64_t off, uint64_t len, struct cseg **segs, uint32_t *nseg)
{
	struct segbuf b = { 0 };
	int r;

	pthread_mutex_lock(&cf->lock);
	uint64_t end = off + len > cf->size || off + len < off ? cf->size : off + len;
	r = off < end ? map_range(cf, off, end, &b, false) : 0;
	if (r == 0) {
		for (uint32_t i = 0; i < b.n; i++) {
			if (b.v[i].kind == CSEG_MEM)
				b.v[i].ch->pins++;
			else if (b.v[i].kind == CSEG_FD)
				cfd_get(b.v[i].f);
		}
	}
	pthread_mutex_unlock(&cf->lock);
	if (r < 0) {
		free(b.v);
		return r;
	}
	*segs = b.v;
	*nseg = b.n;
	return 0;
}

void cfile_unmap(struct cfile *cf, struct cseg *segs, uint32_t nseg)
{
	pthread_mutex_lock(&cf->lock);
	for (uint32_t i = 0; i < nseg; i++) {
		if (segs[i].kind == CSEG_MEM) {
			struct chunk *ch = segs[i].ch;
			if (--ch->pins == 0 && !ch->in_map && !ch->vrefs)
				cache_chunk_free(cf->cache, ch);
		} else if (segs[i].kind == CSEG_FD) {
			cfd_put(segs[i].f);
		}
	}
	pthread_mutex_unlock(&cf->lock);
	free(segs);
}

/* ---- writing ------------------------------------------------------------ */

static ssize_t libc_pread(int fd, void *buf, size_t n, off_t off)
{
	ssize_t r = pread(fd, buf, n, off);
	return r < 0 ? -errno : r;
}

int cfd_read_full(struct cfd *f, void *buf, size_t len, uint64_t off,
		  ssize_t (*pr)(int fd, void *buf, size_t n, off_t off))
{
	char *p = buf;

	for (size_t done = 0; done < len;) {
		ssize_t n = (pr ? pr : libc_pread)(f->fd, p + done, len - done, (off_t)(off + done));
		if (n == -EINTR)
			continue;
		if (n < 0)
			return (int)n;
		if (n == 0) {		/* shorter than recorded: reads as zeros */
			memset(p + done, 0, len - done);
			break;
		}
		done += (size_t)n;
	}
	return 0;
}

/*
 * Fill [lo, hi) of a chunk (file offsets) from what lies under the map.
 * Backend files are read through the cache's read_fd hook where set (the
 * daemon bounds how long it waits: fs/bread.c), else here.
 */
static int chunk_fill_under(struct cfile *cf, struct chunk *ch, uint64_t lo, uint64_t hi)
{
	const uint64_t cbase = ch->index * cf->cache->chunk_size;
	char *mem = cache_chunk_mem(cf->cache, ch);
	struct cache *c = cf->cache;
	struct segbuf b = { 0 };
	int r = map_under(cf, lo, hi, &b);

	for (uint32_t i = 0; r == 0 && i < b.n; i++) {
		struct cseg *s = &b.v[i];
		char *dst = mem + (s->off - cbase);
		if (s->kind == CSEG_ZERO)
			memset(dst, 0, s->len);
		else if (c->read_fd)
			r = c->read_fd(c->read_arg, s->f, dst, s->len, s->foff);
		else
			r = cfd_read_full(s->f, dst, s->len, s->foff, NULL);
	}
	free(b.v);
	return r;
}

enum chunk_need { NEED_NONE, NEED_SLOT, NEED_FULL };

/*
 * What writing bytes up to z of chunk index i (now ch, or none) needs from
 * the allocator: nothing; a slot (the first bytes of a file, while they fit
 * one); or a full chunk.  A chunk a version holds is replaced (C1), and so
 * is a slot the write outgrows.
 */
static enum chunk_need chunk_need(const struct cfile *cf, uint64_t i, uint32_t z,
				  const struct chunk *ch)
{
	const struct cache *c = cf->cache;

	if (ch && !ch->vrefs && z <= ch->cap)
		return NEED_NONE;
	if (i == 0 && c->nslots && z <= c->slot_size && (!ch || ch->hi <= c->slot_size))
		return NEED_SLOT;
	return NEED_FULL;
}

/* Allocations a write of [off, end) needs that the map cannot give. */
static void chunks_needed(struct cfile *cf, uint64_t off, uint64_t end, uint32_t need[3])
{
	const uint64_t cs = cf->cache->chunk_size;

	need[NEED_NONE] = need[NEED_SLOT] = need[NEED_FULL] = 0;
	for (uint64_t i = off / cs; i * cs < end; i++) {
		uint32_t z = (uint32_t)(CKPT_MIN(end, (i + 1) * cs) - i * cs);
		need[chunk_need(cf, i, z, map_get(cf, i, NULL))]++;
	}
}

struct spares {
	struct chunk *buf[8], **v;
	uint32_t n, cap;
	struct chunk *slot;
};

static void spares_add(struct spares *sp, struct chunk *ch)
{
	if (sp->n == sp->cap) {
		struct chunk **v = xmalloc(2 * sp->cap * sizeof(*v));
		memcpy(v, sp->v, sp->n * sizeof(*v));
		if (sp->v != sp->buf)
			free(sp->v);
		sp->v = v;
		sp->cap *= 2;
	}
	sp->v[sp->n++] = ch;
}

/* A write gathering chunks for [off, end) of cf into sp, as spares_wanted sees it. */
struct gather {
	struct cfile *cf;
	const struct spares *sp;
	uint64_t off, end;
	bool slot;		/* waiting for the slot, not a full chunk */
};

/*
 * Is the chunk a waiting write asks for still needed?  Another request of
 * the same file may have put one where this write goes meanwhile (the
 * kernel sends the pieces of one unaligned direct write at once): then the
 * wait is for nothing, and over a hung backend it would fail the write.
 */
static bool spares_wanted(void *arg)
{
	const struct gather *g = arg;
	uint32_t need[3];

	pthread_mutex_lock(&g->cf->lock);
	chunks_needed(g->cf, g->off, g->end, need);
	pthread_mutex_unlock(&g->cf->lock);
	return g->slot ? need[NEED_SLOT] && !g->sp->slot : need[NEED_FULL] > g->sp->n;
}

/*
 * Allocate until sp holds what need asks for: 0; -EAGAIN when a wait gave
 * up because the chunk is no longer needed (the caller counts again); or
 * the allocator's -errno.
 */
static int spares_fill(struct cfile *cf, struct spares *sp, const uint32_t need[3], uint64_t off,
		       uint64_t end)
{
	struct gather g = { .cf = cf, .sp = sp, .off = off, .end = end };
	struct chunk *ch;
	int r;

	while (sp->n < need[NEED_FULL]) {
		if ((r = cache_chunk_alloc_wanted(cf->cache, cf, false, spares_wanted, &g, &ch)) < 0)
			return r;
		spares_add(sp, ch);
	}
	g.slot = true;
	if (need[NEED_SLOT] && !sp->slot)
		return cache_chunk_alloc_wanted(cf->cache, cf, true, spares_wanted, &g, &sp->slot);
	return 0;
}

int cfile_write(struct cfile *cf, uint64_t off, size_t len, cfile_copy_fn copy, void *arg,
		bool *changed_out)
{
	const uint64_t cs = cf->cache->chunk_size;
	const uint64_t end = off + len;
	struct spares sp = { .n = 0, .cap = CKPT_ARRAY_LEN(sp.buf) };
	uint32_t need[3];
	uint64_t done = off;	/* the write's bytes before this are in the file */
	bool changed = false;	/* a chunk took some of them */
	int r = 0;

	sp.v = sp.buf;
	if (len == 0)
		return 0;
	if (end < off)
		return -EFBIG;
	pthread_mutex_lock(&cf->lock);
	if (cf->base_lazy) {
		pthread_mutex_unlock(&cf->lock);
		return -EAGAIN;
	}
	for (uint64_t i = off / cs; i * cs < end && r == 0; i++) {
		const uint64_t cbase = i * cs;
		const uint32_t a = (uint32_t)(CKPT_MAX(off, cbase) - cbase);
		const uint32_t z = (uint32_t)(CKPT_MIN(end, cbase + cs) - cbase);
		/*
		 * Gather this chunk's new chunk, if it needs one, without holding
		 * the lock: allocation may wait, and fail.  One chunk at a time, so
		 * a write never holds chunks while it waits for more: writers that
		 * each held some could otherwise wait for each other until they
		 * all failed, and a write needing more chunks than the cache has
		 * could never go in.
		 */
		for (;;) {
			chunks_needed(cf, cbase + a, cbase + z, need);
			if (need[NEED_FULL] <= sp.n && (!need[NEED_SLOT] || sp.slot))
				break;
			pthread_mutex_unlock(&cf->lock);
			r = spares_fill(cf, &sp, need, cbase + a, cbase + z);
			pthread_mutex_lock(&cf->lock);
			if (r == -EAGAIN)
				r = 0;	/* needless now: count again */
			else if (r < 0)
				break;	/* this chunk unchanged: what went in before stays (changed) */
		}
		if (r < 0)
			break;
		uint32_t pos;
		struct chunk *ch = map_get(cf, i, &pos), *n = NULL;
		enum chunk_need nd = chunk_need(cf, i, z, ch);

		if (nd == NEED_SLOT) {
			n = sp.slot;
			sp.slot = NULL;
		} else if (nd == NEED_FULL) {
			n = sp.v[--sp.n];
		}
		if (!ch) {
			ch = n;
			ch->index = i;
			ch->lo = a;
			ch->hi = z;
			map_insert(cf, pos, ch);
		} else {
			/*
			 * C1 (a version reads ch), or ch is a slot too small: n takes
			 * its place, filled first, so that a fill that fails (a hung
			 * or failing backend) leaves the map as it was and n goes
			 * back to the spares.  (Swapped in first, n stayed in the map
			 * dirty on no list: never spilled, evicted or sealed.)
			 */
			struct chunk *t = n ? n : ch;
			if (n) {
				n->index = i;
				n->lo = ch->lo;
				n->hi = ch->hi;
				memcpy(n->mem + ch->lo, ch->mem + ch->lo, ch->hi - ch->lo);
			}
			if (z < t->lo)
				r = chunk_fill_under(cf, t, cbase + z, cbase + t->lo);
			if (r == 0 && a > t->hi)
				r = chunk_fill_under(cf, t, cbase + t->hi, cbase + a);
			if (r) {
				if (n && nd == NEED_SLOT)
					sp.slot = n;
				else if (n)
					sp.v[sp.n++] = n;	/* just taken from there: it fits */
				break;
			}
			if (n) {
				map_remove(cf, pos);
				chunk_maybe_free(cf, ch);
				map_insert(cf, pos, n);
				ch = n;
			}
			ch->lo = CKPT_MIN(ch->lo, a);
			ch->hi = CKPT_MAX(ch->hi, z);
		}
		r = copy(arg, ch->mem + a, z - a, (size_t)(cbase + a - off));
		changed = true;
		if (r == 0) {
			done = cbase + z;
			cf->absorbed += z - a;
			atomic_fetch_add(&cf->cache->st.absorbed_bytes, z - a);
		} else {	/* what it left there is unknown (a recycled chunk's old bytes) */
			memset(ch->mem + a, 0, z - a);
		}
		if (ch->state != CH_DIRTY || ch->list == CL_NONE)
			cache_chunk_set_state(cf->cache, ch, CH_DIRTY);
		/*
		 * This chunk's part is the file's now, before the lock is dropped
		 * for the next chunk: a seal meanwhile takes it (its version, once
		 * published, makes the chunk clean: it must hold these bytes), and
		 * a write that fails later (a chunk's allocation, its fill from
		 * the backend, the copy) has changed the file all the same: what
		 * reads show from now on is what gets published.
		 */
		if (done > cf->size)
			cf->size = done;
		cf->dirty = true;
	}
	pthread_mutex_unlock(&cf->lock);
	if (changed_out)
		*changed_out = changed;

	while (sp.n)
		cache_chunk_free(cf->cache, sp.v[--sp.n]);
	if (sp.slot)
		cache_chunk_free(cf->cache, sp.slot);
	if (sp.v != sp.buf)
		free(sp.v);
	return r;
}

void cfile_truncate(struct cfile *cf, uint64_t n)
{
	const uint64_t cs = cf->cache->chunk_size;

	pthread_mutex_lock(&cf->lock);
	if (n < cf->size) {
		while (cf->nmap) {
			uint32_t last = cf->nmap - 1;
			struct chunk *ch = cf->map[last].ch;
			uint64_t cbase = ch->index * cs;
			if (cbase + ch->lo < n) {
				if (cbase + ch->hi > n)
					ch->hi = (uint32_t)(n - cbase);	/* data untouched: no copy */
				break;
			}
			map_remove(cf, last);
			chunk_maybe_free(cf, ch);
		}
		for (uint32_t i = 0; i < cf->nlayers; i++)
			layer_trim(cf->layers[i], n);
		/* A lazy base cut to nothing need never be opened. */
		if (cf->base_lazy && cf->layers[cf->nlayers - 1]->next == 0) {
			layer_free(cf->layers[--cf->nlayers]);
			cf->base_lazy = false;
		}
		for (struct list *e = cf->versions.next; e != &cf->versions; e = e->next) {
			struct cver *v = list_entry(e, struct cver, link);
			v->trunc_after = CKPT_MIN(v->trunc_after, n);
		}
		cf->trunc_gen++;
	}
	if (n != cf->size)
		cf->dirty = true;
	cf->size = n;
	pthread_mutex_unlock(&cf->lock);
}

/* ---- versions ----------------------------------------------------------- */

struct cver *cfile_seal(struct cfile *cf, uint64_t seq)
{
	struct segbuf b = { 0 };
	struct cver *v;
	struct clayer *stage, *base;
	struct cfd *sf = NULL;

	pthread_mutex_lock(&cf->lock);
	/* Only the base under the map, and its leaves known: clean ranges come from it. */
	bool from_base = cf->cache->seal_from_base && cf->nlayers == 1 &&
			 cf->layers[0]->base && cf->layers[0]->leaves;
	if (map_range(cf, 0, cf->size, &b, from_base) < 0) {
		pthread_mutex_unlock(&cf->lock);
		free(b.v);
		return NULL;	/* base not opened: the caller opens it and retries */
	}
	v = xcalloc(1, sizeof(*v));
	v->cf = cfile_get(cf);
	v->seq = seq;
	v->size = cf->size;
	v->trunc_after = UINT64_MAX;
	v->segs = b.v;
	v->nseg = b.n;
	base = cf->nlayers && cf->layers[cf->nlayers - 1]->base ? cf->layers[cf->nlayers - 1] : NULL;
	if ((stage = live_stage(cf))) {
		/*
		 * The stage is retired either way: later spills start a new one.
		 * It becomes the version's output only if no spill is still
		 * writing into it, which could land past the sealed size; the
		 * version does not read the range such a spill writes (its chunk
		 * is in the map, or was truncated away), so a fresh file is safe.
		 */
		stage->ver = seq;
		sf = stage->f;
		if (!cf->spills)
			v->out = cfd_get(sf);
	}
	for (uint32_t i = 0; i < b.n; i++) {
		struct cseg *s = &b.v[i];
		if (s->kind == CSEG_MEM) {
			/* Clean: the same bytes as the base, which is the version published last (C2). */
			if (s->ch->state == CH_CLEAN && base)
				s->lv = cleaves_get(base->leaves);
			if (s->ch->vrefs++ == 0)
				cache_chunk_relist(cf->cache, s->ch);	/* off the spill list */
			v->bytes_cached += s->len;
		} else if (s->kind == CSEG_FD) {
			cfd_get(s->f);
			if (s->f == sf)
				v->bytes_cached += s->len;
			if (base && base->f == s->f) {
				s->lv = cleaves_get(base->leaves);
				s->data_known = s->lv && s->lv->data_known;
			}
			s->staged = layer_is_stage(cf, s->f);
		}
	}
	for (uint32_t i = 0; i < b.n && base && base->f && !v->base_f; i++)
		if (b.v[i].lv)	/* taken on trust from the base: the flusher checks it first */
			v->base_f = cfd_get(base->f);
	v->absorbed = cf->absorbed;	/* written since the last seal: goes with this version */
	cf->absorbed = 0;
	atomic_fetch_add(&cf->nversions, 1);	/* first: never "durable" in between */
	list_add_tail(&cf->versions, &v->link);
	cf->dirty = false;
	atomic_fetch_add(&cf->sgen, 1);
	pthread_mutex_unlock(&cf->lock);
	return v;
}

static void ver_release_locked(struct cver *v, bool published)
{
	struct cfile *cf = v->cf;

	for (uint32_t i = 0; i < v->nseg; i++) {
		struct cseg *s = &v->segs[i];
		if (s->kind == CSEG_MEM) {
			struct chunk *ch = s->ch;
			ch->vrefs--;
			cleaves_put(s->lv);
			if (published && ch->in_map && ch->pool)	/* equal to v: evict to its pool */
				cfile_evict_locked(cf, ch);
			if (published && ch->in_map)	/* C1 kept it equal to v: C2 */
				cache_chunk_set_state(cf->cache, ch, CH_CLEAN);
			else
				chunk_maybe_free(cf, ch);
		} else if (s->kind == CSEG_FD) {
			cfd_put(s->f);
			cleaves_put(s->lv);
		}
	}
	v->nseg = 0;
	if (list_linked(&v->link)) {
		list_del(&v->link);
		atomic_fetch_sub(&v->cf->nversions, 1);
		atomic_fetch_add(&v->cf->sgen, 1);
	}
}

void cfile_published(struct cver *v, struct cfd *out, struct cleaves *leaves, uint64_t ino,
		     struct cfd_bin *later)
{
	struct cfile *cf = v->cf;
	uint32_t k = 0;

	pthread_mutex_lock(&cf->lock);
	ver_release_locked(v, true);
	atomic_fetch_add(&cf->cache->st.absorbed_durable_bytes, v->absorbed);
	/* Layers sealed or published at or before v are subsumed by its file. */
	for (uint32_t i = 0; i < cf->nlayers; i++) {
		struct clayer *l = cf->layers[i];
		if (l->ver != 0 && l->ver <= v->seq) {
			cfd_bin_add(later, l->f);	/* the reference moves to the bin */
			l->f = NULL;
			layer_free(l);
		} else
			cf->layers[k++] = l;
	}
	cf->nlayers = k;
	bool lazy = false;	/* stored once: it is read without the lock */
	if (out) {
		/*
		 * Nobody has it open: keep no descriptor (it is reopened when
		 * needed; an open counted since finds it lazy).  One look at the
		 * count, which changes without the lock.
		 */
		bool opened = atomic_load(&cf->opens) != 0;
		struct clayer *base = layer_new(opened ? cfd_get(out) : NULL, v->seq);
		base->base = true;
		base->leaves = leaves;
		base->ino = ino;
		leaves = NULL;
		layer_add(base, 0, CKPT_MIN(CKPT_MIN(v->size, v->trunc_after), cf->size));
		layers_append(cf, base);
		lazy = !opened && base->next;
		if (!base->next) {	/* nothing of it is used: no layer at all */
			layer_free(cf->layers[--cf->nlayers]);
		}
	}
	cf->base_lazy = lazy;
	pthread_mutex_unlock(&cf->lock);
	cleaves_put(leaves);
}

void cfile_opened(struct cfile *cf)
{
	/*
	 * No lock (see struct cfile), except for the first open: a publication
	 * that saw no open (and lets the base go) is then wholly before it, so
	 * its caller's look at cfile_base_lazy sees the base gone, or wholly
	 * after, and keeps it.  No write can be filling then: a writer's
	 * handle would count.
	 */
	if (atomic_fetch_add(&cf->opens, 1) == 0) {
		pthread_mutex_lock(&cf->lock);
		pthread_mutex_unlock(&cf->lock);
	}
}

void cfile_closed(struct cfile *cf)
{
	/*
	 * The last close takes the lock to let the base go.  No write can be
	 * filling then (a writer's handle counts), so it does not wait long;
	 * an open since is seen under the lock and keeps the base.
	 */
	if (atomic_fetch_sub(&cf->opens, 1) != 1)
		return;
	pthread_mutex_lock(&cf->lock);
	if (atomic_load(&cf->opens) == 0 && cf->nlayers && !cf->base_lazy) {
		struct clayer *base = cf->layers[cf->nlayers - 1];
		if (base->base && base->f) {
			cfd_put(base->f);	/* versions hold their own references */
			base->f = NULL;
			cf->base_lazy = true;
		}
	}
	pthread_mutex_unlock(&cf->lock);
}

void cver_discard(struct cver *v)
{
	atomic_fetch_add(&v->cf->cache->st.absorbed_dropped_bytes, v->absorbed);
	pthread_mutex_lock(&v->cf->lock);
	ver_release_locked(v, false);
	pthread_mutex_unlock(&v->cf->lock);
}

void cver_free(struct cver *v)
{
	if (!v)
		return;
	if (v->nseg || list_linked(&v->link))	/* an empty file's version has no segment */
		cver_discard(v);
	cfd_put(v->out);
	cfd_put(v->base_f);
	cfile_put(v->cf);
	free(v->segs);
	free(v);
}

/* ---- spilling ----------------------------------------------------------- */

bool cfile_set_stage(struct cfile *cf, struct cfd *f)
{
	bool ok = false;

	pthread_mutex_lock(&cf->lock);
	if (!live_stage(cf)) {
		cf->layers = xrealloc(cf->layers, (cf->nlayers + 1) * sizeof(*cf->layers));
		memmove(&cf->layers[1], &cf->layers[0], cf->nlayers * sizeof(*cf->layers));
		cf->layers[0] = layer_new(cfd_get(f), 0);
		cf->nlayers++;
		ok = true;
	}
	pthread_mutex_unlock(&cf->lock);
	return ok;
}

void cfile_drop_empty_stage(struct cfile *cf, struct cfd *f)
{
	struct clayer *stage;

	pthread_mutex_lock(&cf->lock);
	if ((stage = live_stage(cf)) && stage->f == f && stage->next == 0 && !cf->spills) {
		layer_free(stage);
		memmove(&cf->layers[0], &cf->layers[1], (cf->nlayers - 1) * sizeof(*cf->layers));
		cf->nlayers--;
	}
	pthread_mutex_unlock(&cf->lock);
}

int cfile_spill_begin(struct cfile *cf, struct chunk *ch, struct spill_job *job)
{
	const uint64_t cs = cf->cache->chunk_size;
	struct clayer *stage;

	/* A writer's copy takes less than 20 ms; a backend read may not. */
	for (int tries = 0; pthread_mutex_trylock(&cf->lock) != 0; tries++) {
		if (tries == 20)
			return -EBUSY;	/* see cfile.h */
		usleep(1000);
	}
	if (ch->owner != cf || !ch->in_map || ch->state != CH_DIRTY || ch->vrefs) {
		pthread_mutex_unlock(&cf->lock);
		return -ENOENT;
	}
	if (!(stage = live_stage(cf))) {
		pthread_mutex_unlock(&cf->lock);
		return -EAGAIN;
	}
	ch->vrefs++;
	cf->spills++;
	cache_chunk_relist(cf->cache, ch);
	job->ch = ch;
	job->f = cfd_get(stage->f);
	job->mem = cache_chunk_mem(cf->cache, ch) + ch->lo;
	job->off = ch->index * cs + ch->lo;
	job->len = ch->hi - ch->lo;
	job->gen = cf->trunc_gen;
	pthread_mutex_unlock(&cf->lock);
	return 0;
}

void cfile_spill_end(struct cfile *cf, struct spill_job *job, int err)
{
	struct chunk *ch = job->ch;

	pthread_mutex_lock(&cf->lock);
	ch->vrefs--;
	cf->spills--;
	if (!err && job->gen == cf->trunc_gen) {
		struct clayer *l = NULL;
		for (uint32_t i = 0; i < cf->nlayers; i++)
			if (cf->layers[i]->f == job->f)
				l = cf->layers[i];
		if (l) {
			layer_add(l, job->off, job->off + job->len);
			if (ch->in_map && ch->state == CH_DIRTY) {
				uint32_t pos;
				if (map_get(cf, ch->index, &pos) == ch)
					map_remove(cf, pos);
			}
			atomic_fetch_add(&cf->cache->st.spilled_bytes, job->len);
		}
	}
	chunk_maybe_free(cf, ch);
	pthread_mutex_unlock(&cf->lock);
	cfd_put(job->f);
}

/* ---- chunks lent by a GPU session (adopt.h) ----------------------------- */

/* Fill [a, b) of nc (offsets within the chunk) from old where it holds them, else from below. */
static int adopt_fill(struct cfile *cf, struct chunk *nc, const struct chunk *old,
		      uint32_t a, uint32_t b, uint64_t *merged)
{
	const uint64_t cbase = nc->index * cf->cache->chunk_size;
	uint32_t olo = old ? old->lo : b, ohi = old ? old->hi : b;
	int r = 0;

	if (a >= b)
		return 0;
	if (a < CKPT_MIN(b, olo))
		r = chunk_fill_under(cf, nc, cbase + a, cbase + CKPT_MIN(b, olo));
	if (r == 0 && CKPT_MAX(a, olo) < CKPT_MIN(b, ohi)) {
		uint32_t x = CKPT_MAX(a, olo), y = CKPT_MIN(b, ohi);
		memcpy(nc->mem + x, old->mem + x, y - x);
	}
	if (r == 0 && CKPT_MAX(a, ohi) < b)
		r = chunk_fill_under(cf, nc, cbase + CKPT_MAX(a, ohi), cbase + b);
	*merged += b - a;
	return r;
}

/*
 * Make nc (its index set, valid [lo, hi) filled) the file's chunk at map
 * position pos in place of old: the tail of cfile_adopt and
 * cfile_write_chunk.  cf->lock held.
 */
static void adopt_install(struct cfile *cf, uint32_t pos, struct chunk *old, struct chunk *nc,
			  uint32_t lo, uint32_t hi, uint64_t captured)
{
	const uint64_t end = nc->index * cf->cache->chunk_size + hi;

	nc->owner = cf;
	nc->lo = lo;
	nc->hi = hi;
	nc->vrefs = nc->pins = 0;
	if (old) {
		map_remove(cf, pos);
		chunk_maybe_free(cf, old);	/* a version reading it keeps it (C1, C5) */
	}
	map_insert(cf, pos, nc);
	cache_chunk_set_state(cf->cache, nc, CH_DIRTY);
	if (end > cf->size)
		cf->size = end;
	cf->dirty = true;
	cf->absorbed += captured;
	atomic_fetch_add(&cf->cache->st.absorbed_bytes, captured);
}

int cfile_adopt(struct cfile *cf, uint64_t index, struct chunk *nc, const struct cext *rg,
		uint32_t n, uint64_t *merged)
{
	const uint64_t cs = cf->cache->chunk_size;
	uint64_t captured = 0;
	uint32_t pos, lo, hi, p;
	struct chunk *old;
	int r = 0;

	*merged = 0;
	if (n == 0 || nc->cap != cs || rg[n - 1].hi > cs || index > UINT64_MAX / cs - 1)
		return -EINVAL;
	pthread_mutex_lock(&cf->lock);
	if (cf->base_lazy) {
		pthread_mutex_unlock(&cf->lock);
		return -EAGAIN;
	}
	old = map_get(cf, index, &pos);
	lo = (uint32_t)rg[0].lo;
	hi = (uint32_t)rg[n - 1].hi;
	if (old) {
		lo = CKPT_MIN(lo, old->lo);
		hi = CKPT_MAX(hi, old->hi);
	}
	nc->index = index;
	/* The gaps between captured ranges, and what lies beyond them in old. */
	p = lo;
	for (uint32_t k = 0; k <= n && r == 0; k++) {
		uint32_t end = k < n ? (uint32_t)rg[k].lo : hi;
		r = adopt_fill(cf, nc, old, p, end, merged);
		if (k < n) {
			captured += rg[k].hi - rg[k].lo;
			p = (uint32_t)rg[k].hi;
		}
	}
	if (r == 0)
		adopt_install(cf, pos, old, nc, lo, hi, captured);
	pthread_mutex_unlock(&cf->lock);
	return r;
}

int cfile_write_chunk(struct cfile *cf, uint64_t off, size_t len, struct chunk *nc)
{
	const struct cache *c = cf->cache;
	const uint64_t cs = c->chunk_size;
	struct chunk *old;
	uint32_t pos;

	if (off % cs || len == 0 || len > cs || nc->cap != cs || nc->pool || nc->owner ||
	    off > UINT64_MAX - cs)
		return 1;
	if (off == 0 && c->nslots && len <= c->slot_size)
		return 1;	/* a small file's first bytes go to a slot */
	pthread_mutex_lock(&cf->lock);
	if (cf->base_lazy) {
		pthread_mutex_unlock(&cf->lock);
		return -EAGAIN;
	}
	old = map_get(cf, off / cs, &pos);
	if (old && old->hi > len) {
		pthread_mutex_unlock(&cf->lock);
		return 1;	/* it holds bytes this write leaves: cfile_write keeps them */
	}
	nc->index = off / cs;
	adopt_install(cf, pos, old, nc, 0, (uint32_t)len, len);
	pthread_mutex_unlock(&cf->lock);
	return 0;
}

/* May ch, a chunk of cf's map, be moved out now?  Under cf->lock: its writers hold it. */
static bool chunk_movable_locked(struct cfile *cf, struct chunk *ch)
{
	return ch->owner == cf && ch->in_map && ch->state == CH_DIRTY && !ch->vrefs && !ch->pins;
}

bool cfile_chunk_movable(struct cfile *cf, struct chunk *ch)
{
	pthread_mutex_lock(&cf->lock);
	bool ok = chunk_movable_locked(cf, ch);
	pthread_mutex_unlock(&cf->lock);
	return ok;
}

int cfile_unpool_chunk(struct cfile *cf, struct chunk *ch)
{
	struct chunk *n;
	uint32_t pos;
	int r = cache_chunk_alloc(cf->cache, cf, false, true, &n);

	if (r < 0)
		return r;	/* a bounded wait gave up (shutdown, stalled backend) */
	r = -EBUSY;
	pthread_mutex_lock(&cf->lock);
	if (chunk_movable_locked(cf, ch) && map_get(cf, ch->index, &pos) == ch) {
		n->index = ch->index;
		n->lo = ch->lo;
		n->hi = ch->hi;
		memcpy(n->mem + ch->lo, ch->mem + ch->lo, ch->hi - ch->lo);
		map_remove(cf, pos);
		map_insert(cf, pos, n);
		cache_chunk_set_state(cf->cache, n, CH_DIRTY);
		chunk_maybe_free(cf, ch);
		n = NULL;
		r = 0;
	}
	pthread_mutex_unlock(&cf->lock);
	if (n)
		cache_chunk_free(cf->cache, n);
	return r;
}
