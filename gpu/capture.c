/*
 * capture.c — captures (device memory copied into the arena on the
 * session's own stream, in batches closed by a host function), their
 * completion (ranges recorded in their chunks, CRC-32s summed by a few
 * threads, chunks posted), the waits, and the files' deferred close by the
 * finisher thread, in the order ckptfs_file_close was called.  The model
 * and the locks are in client.h.
 */
#include "gpu/client.h"
#include "gpu/crc32.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Pieces (chunks) per host function: at most a quarter of the arena. */
#define BATCH_MAX(s) ((s)->nchunks >= 64 ? 16u : (s)->nchunks >= 8 ? (s)->nchunks / 4 : 1u)
/* How often the finisher looks at the copy stream while host functions are due. */
#define COPY_POLL_MS 100

/*
 * A batch is on s->batches from when its copies are issued until its host
 * function runs.  After a fault in the context CUDA never calls the
 * host function: the batch is then lost (moved to s->lost, freed when the
 * stream is destroyed, since a host function already running may still
 * look at it) and its pieces fail.
 */
struct ck_batch {
	struct ckptfs_session *s;
	struct ck_capture *cap;
	uint32_t first, count;
	bool lost;
	struct ck_batch *next;
};

/* ---- completion (mu held) ------------------------------------------------ */

static void range_add(struct ck_chunk *ch, uint32_t lo, uint32_t hi)
{
	uint32_t i = 0;

	while (i < ch->n && ch->r[i].hi < lo)
		i++;
	if (i < ch->n && ch->r[i].lo <= hi) {	/* touches r[i]: merge forward */
		ch->r[i].lo = lo < ch->r[i].lo ? lo : ch->r[i].lo;
		ch->r[i].hi = hi > ch->r[i].hi ? hi : ch->r[i].hi;
		while (i + 1 < ch->n && ch->r[i + 1].lo <= ch->r[i].hi) {
			if (ch->r[i + 1].hi > ch->r[i].hi)
				ch->r[i].hi = ch->r[i + 1].hi;
			memmove(&ch->r[i + 1], &ch->r[i + 2], (ch->n - i - 2) * sizeof(*ch->r));
			ch->n--;
		}
		return;
	}
	if (ch->n == ch->cap) {
		ch->cap = ch->cap ? 2 * ch->cap : 4;
		ch->r = realloc(ch->r, ch->cap * sizeof(*ch->r));
		if (!ch->r)
			abort();
	}
	memmove(&ch->r[i + 1], &ch->r[i], (ch->n - i) * sizeof(*ch->r));
	ch->r[i].lo = lo;
	ch->r[i].hi = hi;
	ch->n++;
}

static void capture_complete(struct ckptfs_session *s, struct ck_capture *cap)
{
	if (cap->want_crc && cap->npieces) {
		uint32_t crc = cap->pieces[0].crc;
		for (uint32_t k = 1; k < cap->npieces; k++)
			crc = ck_crc32_combine(crc, cap->pieces[k].crc,
					       cap->pieces[k].hi - cap->pieces[k].lo);
		cap->crc = crc;
	}
	cap->f->inflight--;
	pthread_cond_broadcast(&s->cv);
}

/*
 * A piece is over: its copy (and CRC) done, or, if !landed, lost to a fault.
 * Record what landed, post its chunk if that was the last piece in it.
 */
static void piece_done(struct ckptfs_session *s, struct ck_piece *p, uint64_t t_ns, bool landed)
{
	struct ck_chunk *ch = &s->chunks[p->chunk];
	struct ck_capture *cap = p->cap;

	if (landed)
		range_add(ch, p->lo, p->hi);
	/* Post before the capture counts as complete: the finisher unbinds after. */
	if (--ch->pending == 0 && ch->closing)
		ck_chunk_post(s, p->chunk, t_ns);
	if (++cap->done == cap->npieces && cap->issued == cap->npieces)
		capture_complete(s, cap);
}

static void batch_unlink(struct ckptfs_session *s, struct ck_batch *b)
{
	for (struct ck_batch **pp = &s->batches; *pp; pp = &(*pp)->next) {
		if (*pp == b) {
			*pp = b->next;
			break;
		}
	}
}

/* Host function at the end of a batch: its copies have completed. */
static void batch_done(void *arg)
{
	struct ck_batch *b = arg;
	struct ckptfs_session *s = b->s;
	uint64_t t = ck_now_ns();

	pthread_mutex_lock(&s->mu);
	if (b->lost) {		/* failed already: not ours to touch */
		pthread_mutex_unlock(&s->mu);
		return;
	}
	batch_unlink(s, b);
	for (uint32_t k = b->first; k < b->first + b->count; k++) {
		struct ck_piece *p = &b->cap->pieces[k];
		if (b->cap->want_crc) {		/* to the CRC threads, in order */
			p->qnext = NULL;
			if (s->crc_tail)
				s->crc_tail->qnext = p;
			else
				s->crc_head = p;
			s->crc_tail = p;
		} else {
			piece_done(s, p, t, true);
		}
	}
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	free(b);
}

/*
 * The context holds an error (err, ckptfs_last_error() says which): no host
 * function runs again, so every batch still waiting for one is lost, and
 * its captures and files fail.  Returns err.
 */
static int copies_fail(struct ckptfs_session *s, int err)
{
	uint64_t now = ck_now_ns();

	pthread_mutex_lock(&s->mu);
	while (s->batches) {
		struct ck_batch *b = s->batches;
		s->batches = b->next;
		b->lost = true;
		b->next = s->lost;
		s->lost = b;
		ck_file_fail(b->cap->f, err);
		for (uint32_t k = b->first; k < b->first + b->count; k++)
			piece_done(s, &b->cap->pieces[k], now, false);
	}
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return err;
}

static void *crc_main(void *arg)
{
	struct ckptfs_session *s = arg;

	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!s->crc_head && !s->stopping)
			pthread_cond_wait(&s->cv, &s->mu);
		if (!s->crc_head)
			break;
		struct ck_piece *p = s->crc_head;
		if (!(s->crc_head = p->qnext))
			s->crc_tail = NULL;
		pthread_mutex_unlock(&s->mu);
		p->crc = ck_crc32(0, s->arena + (uint64_t)p->chunk * s->cs + p->lo, p->hi - p->lo);
		uint64_t t = ck_now_ns();
		pthread_mutex_lock(&s->mu);
		piece_done(s, p, t, true);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* ---- the device side -------------------------------------------------- */

/* Make s's context current on this thread (first time: set everything up).  cuda_mu held. */
static int cuda_enter(struct ckptfs_session *s, ckcu_deviceptr p, ckcu_context *saved)
{
	const struct ckcu *cu = s->cu;
	ckcu_result r;

	*saved = NULL;
	cu->CtxGetCurrent(saved);
	if (s->cuda_ready) {
		if (*saved != s->ctx)
			cu->CtxSetCurrent(s->ctx);
		return 0;
	}
	s->ctx = *saved;
	if (!s->ctx && ((r = cu->PointerGetAttribute(&s->ctx, CKCU_POINTER_ATTRIBUTE_CONTEXT, p)) ||
			(r = cu->CtxSetCurrent(s->ctx))))
		return ck_fail(-EFAULT, "ckptfs: no CUDA context for pointer %#llx: %s",
			       (unsigned long long)p, ckcu_strerror(cu, r));
	if ((r = cu->StreamCreate(&s->copy, CKCU_STREAM_NON_BLOCKING)) ||
	    (r = cu->EventCreate(&s->ev_prod, CKCU_EVENT_DISABLE_TIMING)) ||
	    (r = cu->EventCreate(&s->ev_copy, CKCU_EVENT_DISABLE_TIMING)))
		return ck_fail(-EIO, "ckptfs: cannot create the copy stream: %s", ckcu_strerror(cu, r));
	/* Pinned, so copies into it run at full speed and stay asynchronous. */
	if ((r = cu->MemHostRegister(s->arena, s->arena_bytes, CKCU_MEMHOSTREGISTER_PORTABLE)))
		fprintf(stderr, "ckptfs: cannot pin the capture arena (%s); copies will be slower\n",
			ckcu_strerror(cu, r));
	s->pinned = r == CKCU_SUCCESS;
	s->cuda_ready = true;
	return 0;
}

static void cuda_leave(struct ckptfs_session *s, ckcu_context saved)
{
	if (saved && saved != s->ctx)
		s->cu->CtxSetCurrent(saved);
}

void ck_cuda_release(struct ckptfs_session *s)
{
	ckcu_context saved;

	if (!s->cuda_ready)
		return;
	pthread_mutex_lock(&s->cuda_mu);
	s->cu->CtxGetCurrent(&saved);
	s->cu->CtxSetCurrent(s->ctx);
	s->cu->StreamSynchronize(s->copy);
	if (s->pinned)
		s->cu->MemHostUnregister(s->arena);
	s->cu->EventDestroy(s->ev_prod);
	s->cu->EventDestroy(s->ev_copy);
	s->cu->StreamDestroy(s->copy);
	s->cu->CtxSetCurrent(saved);
	while (s->lost) {	/* no host function can look at them now */
		struct ck_batch *b = s->lost;
		s->lost = b->next;
		free(b);
	}
	s->cuda_ready = false;
	pthread_mutex_unlock(&s->cuda_mu);
}

/* Is p device memory the driver knows?  Otherwise it is taken as host memory. */
static bool on_device(struct ckptfs_session *s, uint64_t p)
{
	unsigned int type = 0;

	if (!s->cu)
		return false;
	if (s->cu->PointerGetAttribute(&type, CKCU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) != CKCU_SUCCESS)
		return false;
	return type != CKCU_MEMORYTYPE_HOST;
}

/* The chunk held for (f, index), or a new one.  mu held; may drop it to wait. */
static int chunk_for(struct ckptfs_session *s, struct ck_file *f, uint64_t index, bool may_wait,
		     uint32_t *out)
{
	uint32_t c;
	int r;

	for (struct ck_chunk *ch = f->open; ch; ch = ch->next) {
		if (ch->index == index && !ch->closing) {
			*out = (uint32_t)(ch - s->chunks);
			return 0;
		}
	}
	if ((r = ck_chunk_alloc(s, &c, may_wait)) < 0)
		return r;
	for (struct ck_chunk *ch = f->open; ch; ch = ch->next) {	/* opened while we waited? */
		if (ch->index == index && !ch->closing) {
			s->freelist[s->nfree++] = c;
			*out = (uint32_t)(ch - s->chunks);
			return 0;
		}
	}
	struct ck_chunk *ch = &s->chunks[c];
	ch->f = f;
	ch->index = index;
	ch->pending = 0;
	ch->n = 0;
	ch->closing = false;
	ch->next = f->open;
	f->open = ch;
	*out = c;
	return 0;
}

static int capture_register(struct ck_file *f, struct ck_capture *cap)
{
	if (f->ncaps == f->capcap) {
		uint32_t n = f->capcap ? 2 * f->capcap : 16;
		struct ck_capture **v = realloc(f->caps, n * sizeof(*v));
		if (!v)
			return -ENOMEM;
		f->caps = v;
		f->capcap = n;
	}
	f->caps[f->ncaps] = cap;
	return (int)f->ncaps++;
}

/* Pieces issued so far are all there will be; complete the capture if they are done. */
static void capture_seal(struct ckptfs_session *s, struct ck_capture *cap, uint32_t issued)
{
	pthread_mutex_lock(&s->mu);
	cap->npieces = issued;
	cap->issued = issued;
	if (cap->done == cap->npieces)
		capture_complete(s, cap);
	pthread_mutex_unlock(&s->mu);
}

/* Undo the chunk reservations of pieces [from, to) that were never issued.  mu held. */
static void pieces_unreserve(struct ckptfs_session *s, struct ck_capture *cap, uint32_t from,
			     uint32_t to)
{
	for (uint32_t k = from; k < to; k++) {
		struct ck_chunk *ch = &s->chunks[cap->pieces[k].chunk];
		if (--ch->pending == 0 && ch->closing)
			ck_chunk_post(s, cap->pieces[k].chunk, ck_now_ns());
	}
}

/*
 * Issue b's copies and the host function after them.  *issued: the end of
 * the pieces whose copies were issued; those end through batch_done (which
 * frees b) or copies_fail (b is lost); the rest of b's pieces must be
 * unreserved, and b freed if nothing was issued.  0 or the error.
 * cuda_mu taken, mu not held.
 */
static int batch_issue(struct ckptfs_session *s, struct ck_batch *b, uint64_t off,
		       uint64_t dptr, size_t len, uint32_t *issued)
{
	const struct ckcu *cu = s->cu;
	uint32_t first = b->first, end = b->first + b->count, k;
	ckcu_context saved;
	ckcu_result cr = 0;
	int r = 0;

	pthread_mutex_lock(&s->cuda_mu);
	cuda_enter(s, dptr, &saved);
	for (k = first; k < end; k++) {
		struct ck_piece *p = &b->cap->pieces[k];
		uint64_t foff = (off / s->cs + k) * s->cs + p->lo;	/* where it goes */
		cr = cu->MemcpyDtoHAsync(s->arena + (uint64_t)p->chunk * s->cs + p->lo,
					 dptr + (foff - off), p->hi - p->lo, s->copy);
		if (cr) {
			r = ck_fail(-EFAULT, "ckptfs_capture: the driver rejected the copy of %zu "
				    "bytes from %#llx: %s", len, (unsigned long long)dptr,
				    ckcu_strerror(cu, cr));
			break;
		}
	}
	*issued = k;
	b->count = k - first;
	if (k > first) {	/* due from now on: a fault fails it */
		pthread_mutex_lock(&s->mu);
		if (!s->batches)	/* the finisher starts looking at the stream */
			pthread_cond_broadcast(&s->cv);
		b->next = s->batches;
		s->batches = b;
		pthread_mutex_unlock(&s->mu);
	}
	if (k > first && (cr = cu->LaunchHostFunc(s->copy, batch_done, b))) {
		/*
		 * No callback: wait for the copies here.  If that fails too (the
		 * context holds an error, CUDA's usual reason to refuse the
		 * launch), nothing says they landed, and nothing queued will.
		 */
		ckcu_result sr = cu->StreamSynchronize(s->copy);
		if (sr == CKCU_SUCCESS) {
			batch_done(b);
		} else {
			r = copies_fail(s, ck_fail(-EIO, "ckptfs_capture: the copy of %zu bytes from "
						     "%#llx did not complete: %s", len,
						     (unsigned long long)dptr, ckcu_strerror(cu, sr)));
		}
	}
	cuda_leave(s, saved);
	pthread_mutex_unlock(&s->cuda_mu);
	return r;
}

static int capture_device(struct ckptfs_session *s, struct ck_file *f, uint64_t off,
			  uint64_t dptr, size_t len, void *stream, int id, struct ck_capture *cap)
{
	const struct ckcu *cu = s->cu;
	ckcu_context saved;
	uint32_t i = 0, npieces = cap->npieces;
	ckcu_result cr;
	int r = 0;

	pthread_mutex_lock(&s->cuda_mu);
	if ((r = cuda_enter(s, dptr, &saved)) < 0) {
		pthread_mutex_unlock(&s->cuda_mu);
		capture_seal(s, cap, 0);
		return r;
	}
	/* The copies start after what the producer stream has queued so far. */
	if ((cr = cu->EventRecord(s->ev_prod, (ckcu_stream)stream)) ||
	    (cr = cu->StreamWaitEvent(s->copy, s->ev_prod, 0))) {
		cuda_leave(s, saved);
		pthread_mutex_unlock(&s->cuda_mu);
		capture_seal(s, cap, 0);
		return ck_fail(-EINVAL, "ckptfs_capture: cannot order the copy after stream %p: %s",
			       stream, ckcu_strerror(cu, cr));
	}
	cuda_leave(s, saved);
	pthread_mutex_unlock(&s->cuda_mu);

	while (i < npieces && r == 0) {
		uint32_t first = i, issued;
		/* Before any copy: a batch with no host function would never complete. */
		struct ck_batch *b = malloc(sizeof(*b));
		if (!b) {
			r = ck_fail(-ENOMEM, "ckptfs_capture: out of memory");
			break;
		}
		pthread_mutex_lock(&s->mu);
		while (i < npieces && i - first < BATCH_MAX(s)) {
			struct ck_piece *p = &cap->pieces[i];
			uint64_t index = off / s->cs + i;
			uint32_t c;
			/* Wait for a chunk only with nothing of this batch held. */
			r = chunk_for(s, f, index, i == first, &c);
			if (r == -EAGAIN) {
				r = 0;
				break;
			}
			if (r < 0)
				break;
			p->chunk = c;
			s->chunks[c].pending++;
			if (p->hi == s->cs)
				s->chunks[c].closing = true;	/* full: nothing more comes */
			i++;
		}
		pthread_mutex_unlock(&s->mu);
		if (i == first) {
			free(b);
			break;
		}
		*b = (struct ck_batch){ .s = s, .cap = cap, .first = first, .count = i - first };
		int e = batch_issue(s, b, off, dptr, len, &issued);
		if (e < 0)
			r = e;
		if (issued == first)
			free(b);
		if (issued < i) {	/* pieces reserved but never issued */
			pthread_mutex_lock(&s->mu);
			pieces_unreserve(s, cap, issued, i);
			pthread_mutex_unlock(&s->mu);
			i = issued;
		}
	}
	capture_seal(s, cap, i);
	if (r == 0 && i < npieces)
		r = ck_fail(-EIO, "ckptfs_capture: %u of %u pieces could be issued", i, npieces);
	return r < 0 ? r : id;
}

/* Host memory (or no driver): written now with pwrite(2). */
static int capture_host(struct ckptfs_session *s, struct ck_file *f, uint64_t off,
			const char *p, size_t len, bool want_crc, struct ck_capture *cap, int id)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pwrite(f->fd, p + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int e = n < 0 ? errno : EIO;
			capture_seal(s, cap, 0);
			if (e == EFAULT)
				return ck_fail(-EFAULT, "ckptfs_capture: %s pointer %#llx, and it is not "
					       "readable host memory", s->cu ? "the driver does not know"
					       : "no CUDA driver to copy from", (unsigned long long)(uintptr_t)p);
			return ck_fail(-e, "ckptfs_capture: writing fd %d: %s", f->fd, strerror(e));
		}
		done += (size_t)n;
	}
	if (want_crc)
		cap->crc = ck_crc32(0, p, len);
	pthread_mutex_lock(&s->mu);
	s->host_bytes += len;
	pthread_mutex_unlock(&s->mu);
	capture_seal(s, cap, 0);
	return id;
}

int ckptfs_capture_ex(ckptfs_session *s, int fd, uint64_t off, uint64_t dptr, size_t len,
		      void *stream, unsigned int flags)
{
	struct ck_file *f;
	struct ck_capture *cap;
	uint32_t npieces = 0;
	int r, id;

	if ((r = ck_usable(s, "ckptfs_capture")) < 0)
		return r;
	if (fd < 0)
		return ck_fail(-EBADF, "ckptfs_capture: no fd");
	if (off + len < off || off + len > (1ull << 62))
		return ck_fail(-EINVAL, "ckptfs_capture: offset %llu + length %zu is out of range",
			       (unsigned long long)off, len);
	if (len)
		npieces = (uint32_t)((off + len - 1) / s->cs - off / s->cs + 1);
	if (!(cap = calloc(1, sizeof(*cap) + npieces * sizeof(cap->pieces[0]))))
		return ck_fail(-ENOMEM, "ckptfs_capture: out of memory");
	cap->want_crc = flags & CKPTFS_CAPTURE_CRC32;
	cap->npieces = npieces;
	for (uint32_t k = 0; k < npieces; k++) {
		uint64_t a = k == 0 ? off : (off / s->cs + k) * s->cs;
		uint64_t z = (off / s->cs + k + 1) * s->cs;
		if (z > off + len)
			z = off + len;
		cap->pieces[k].cap = cap;
		cap->pieces[k].lo = (uint32_t)(a % s->cs);
		cap->pieces[k].hi = (uint32_t)(a % s->cs + (z - a));
	}

	pthread_mutex_lock(&s->mu);
	if (ck_dead_locked(s)) {
		r = ck_fail(-ENOTCONN, "ckptfs: the daemon of %s ended the session", s->path);
	} else if ((r = ck_file_get(s, fd, 0, &f)) == 0 && f->limit && off + len > f->limit) {
		r = ck_fail(-EFBIG, "ckptfs_capture: bytes [%llu, %llu) lie beyond the %llu bytes "
			    "declared when fd %d was bound", (unsigned long long)off,
			    (unsigned long long)(off + len), (unsigned long long)f->limit, fd);
	}
	if (r < 0) {
		pthread_mutex_unlock(&s->mu);
		free(cap);
		return r;
	}
	cap->f = f;
	if ((id = capture_register(f, cap)) < 0) {
		pthread_mutex_unlock(&s->mu);
		free(cap);
		return ck_fail(-ENOMEM, "ckptfs_capture: out of memory");
	}
	f->inflight++;
	s->captures++;
	s->captured_bytes += len;
	if (npieces) {	/* writers go forward: chunks behind this capture are done */
		uint64_t first = off / s->cs;
		for (struct ck_chunk *ch = f->open, *next; ch; ch = next) {
			next = ch->next;
			if (ch->index < first) {
				ch->closing = true;
				if (!ch->pending)
					ck_chunk_post(s, (uint32_t)(ch - s->chunks), ck_now_ns());
			}
		}
	}
	pthread_mutex_unlock(&s->mu);

	if (!npieces) {
		capture_seal(s, cap, 0);
		return id;
	}
	if (on_device(s, dptr)) {
		r = capture_device(s, f, off, dptr, len, stream, id, cap);
	} else {
		cap->npieces = 0;
		r = capture_host(s, f, off, (const char *)(uintptr_t)dptr, len, cap->want_crc, cap,
				 id);
	}
	/* f is bound, and may hold part of it (a short pwrite, some copies): dropped at close. */
	if (r < 0) {
		pthread_mutex_lock(&s->mu);
		ck_file_fail(f, r);
		pthread_mutex_unlock(&s->mu);
	}
	return r;
}

int ckptfs_capture(ckptfs_session *s, int fd, uint64_t off, uint64_t dptr, size_t len,
		   void *stream)
{
	return ckptfs_capture_ex(s, fd, off, dptr, len, stream, 0);
}

/* ---- waits ---------------------------------------------------------------- */

/*
 * Record ev_copy after every copy issued so far; with `waiter`, make that
 * stream wait for it too.  0 or the driver's error; *recorded says whether
 * there was anything to record (no device capture yet: nothing to wait for).
 */
static ckcu_result mark_copies(struct ckptfs_session *s, bool make_wait, ckcu_stream waiter,
			       bool *recorded)
{
	ckcu_context saved;
	ckcu_result r = 0;

	pthread_mutex_lock(&s->cuda_mu);
	*recorded = s->cuda_ready;
	if (s->cuda_ready) {
		s->cu->CtxGetCurrent(&saved);
		if (saved != s->ctx)
			s->cu->CtxSetCurrent(s->ctx);
		if (!(r = s->cu->EventRecord(s->ev_copy, s->copy)) && make_wait)
			r = s->cu->StreamWaitEvent(waiter, s->ev_copy, 0);
		if (saved != s->ctx)
			s->cu->CtxSetCurrent(saved);
	}
	pthread_mutex_unlock(&s->cuda_mu);
	return r;
}

int ckptfs_wait_captured(ckptfs_session *s)
{
	int u = ck_usable(s, "ckptfs_wait_captured");
	bool recorded;
	ckcu_result r;

	if (u < 0)
		return u;
	r = mark_copies(s, false, NULL, &recorded);
	/* Copies and their host functions: everything queued before the record. */
	if (recorded && !r)
		r = s->cu->EventSynchronize(s->ev_copy);
	/* The context holds an error: copies not landed by now never will. */
	if (r)
		return copies_fail(s, ck_fail(-EIO, "ckptfs_wait_captured: %s",
					      ckcu_strerror(s->cu, r)));
	return 0;
}

int ckptfs_stream_wait(ckptfs_session *s, void *stream)
{
	int u = ck_usable(s, "ckptfs_stream_wait");
	bool recorded;
	ckcu_result r;

	if (u < 0)
		return u;
	if ((r = mark_copies(s, true, (ckcu_stream)stream, &recorded)))
		return ck_fail(-EINVAL, "ckptfs_stream_wait: stream %p: %s", stream,
			       ckcu_strerror(s->cu, r));
	return 0;
}

/* Ask the driver, without waiting, about the copy stream (or ev_copy's last record).  No lock held. */
static ckcu_result copies_query(struct ckptfs_session *s, bool event)
{
	ckcu_context saved;
	ckcu_result r = CKCU_SUCCESS;

	pthread_mutex_lock(&s->cuda_mu);
	if (s->cuda_ready) {
		cuda_enter(s, 0, &saved);
		r = event ? s->cu->EventQuery(s->ev_copy) : s->cu->StreamQuery(s->copy);
		cuda_leave(s, saved);
	}
	pthread_mutex_unlock(&s->cuda_mu);
	return r;
}

int ckptfs_stream_wait_done(ckptfs_session *s)
{
	int u = ck_usable(s, "ckptfs_stream_wait_done");
	ckcu_result r;

	if (u < 0)
		return u;
	/* ev_copy is only recorded again later: its last record covers every earlier one. */
	r = copies_query(s, true);
	if (r == CKCU_ERROR_NOT_READY)
		return 0;
	if (r)
		return ck_fail(-EIO, "ckptfs_stream_wait_done: %s", ckcu_strerror(s->cu, r));
	return 1;
}

/*
 * After a fault CUDA never calls the host functions still due, so nothing
 * else would end their captures: ask the copy stream.  No lock held.
 */
static void copies_check(struct ckptfs_session *s)
{
	ckcu_result r = copies_query(s, false);

	if (r != CKCU_SUCCESS && r != CKCU_ERROR_NOT_READY)
		copies_fail(s, ck_fail(-EIO, "ckptfs: the copy stream failed: %s",
				       ckcu_strerror(s->cu, r)));
}

/* ---- closing files -------------------------------------------------------- */

/* The finisher's wait for news: while host functions are due, at most COPY_POLL_MS.  mu held. */
static void finisher_wait(struct ckptfs_session *s)
{
	struct timespec t;

	if (!s->batches) {
		pthread_cond_wait(&s->cv, &s->mu);
		return;
	}
	clock_gettime(CLOCK_MONOTONIC, &t);
	t.tv_nsec += COPY_POLL_MS * 1000000L;
	if (t.tv_nsec >= 1000000000L) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000L;
	}
	if (pthread_cond_timedwait(&s->cv, &s->mu, &t) == ETIMEDOUT && s->batches) {
		pthread_mutex_unlock(&s->mu);
		copies_check(s);
		pthread_mutex_lock(&s->mu);
	}
}

/* Fence, patches, unbind, close, rename: the file's end.  No lock held. */
static int finish_file(struct ckptfs_session *s, struct ck_file *f, char *msg, size_t mlen)
{
	bool drop = f->err != 0;
	int r = f->err, u;

	if (drop)
		snprintf(msg, mlen, "%.200s; the file was dropped", f->msg);
	/* The daemon adopts what was posted first, so patches land in the captured chunks. */
	if (!drop && f->npatches && (u = ck_unbind(s, f, CKPTFS_UNBIND_FENCE)) < 0) {
		r = u;
		snprintf(msg, mlen, "ckptfs: the daemon refused part of fd %d's captures (%s); the "
			 "file was dropped", f->fd, strerror(-u));
		drop = true;
	}
	for (size_t i = 0; !drop && i < f->npatches; i++) {
		const struct ckptfs_patch *p = &f->patches[i];
		unsigned char le[4];
		const void *src = p->data;
		size_t len = p->len, done = 0;
		if (p->kind == CKPTFS_PATCH_CRC32_LE) {
			uint32_t crc = f->caps[p->capture]->crc;
			le[0] = crc & 0xff;
			le[1] = (crc >> 8) & 0xff;
			le[2] = (crc >> 16) & 0xff;
			le[3] = crc >> 24;
			src = le;
			len = 4;
		}
		while (done < len) {
			ssize_t n = pwrite(f->fd, (const char *)src + done, len - done,
					   (off_t)(p->file_offset + done));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				r = n < 0 ? -errno : -EIO;
				snprintf(msg, mlen, "ckptfs: fd %d: writing at %llu: %s; the file was "
					 "dropped", f->fd, (unsigned long long)(p->file_offset + done),
					 strerror(-r));
				drop = true;
				break;
			}
			done += (size_t)n;
		}
	}
	u = ck_unbind(s, f, drop ? CKPTFS_UNBIND_DROP : 0);
	if (u < 0 && !r) {
		r = u;
		if (u == -ENOTCONN || u == -ESRCH)
			snprintf(msg, mlen, "ckptfs: the session ended before fd %d was complete; the "
				 "daemon dropped the file", f->fd);
		else
			snprintf(msg, mlen, "ckptfs: the daemon refused part of fd %d's captures (%s); "
				 "the file was dropped", f->fd, strerror(-u));
		drop = true;
	}
	if (close(f->fd) < 0 && !r) {
		r = -errno;
		snprintf(msg, mlen, "ckptfs: closing fd %d: %s", f->fd, strerror(errno));
	}
	if (!drop && f->from && f->to && rename(f->from, f->to) < 0 && !r) {
		r = -errno;
		snprintf(msg, mlen, "ckptfs: renaming %s to %s: %s", f->from, f->to, strerror(errno));
	}
	return r;
}

static void *finisher_main(void *arg)
{
	struct ckptfs_session *s = arg;
	char msg[256];

	pthread_mutex_lock(&s->mu);
	for (;;) {
		struct ck_file *f = s->fin_head;
		if (!f && s->stopping)
			break;
		if (!f || f->inflight) {
			finisher_wait(s);
			continue;
		}
		ck_file_close_chunks(s, f);
		if (f->open || f->posting) {
			finisher_wait(s);
			continue;
		}
		pthread_mutex_unlock(&s->mu);
		msg[0] = '\0';
		int r = finish_file(s, f, msg, sizeof(msg));
		pthread_mutex_lock(&s->mu);
		if (!(s->fin_head = f->fnext))
			s->fin_tail = NULL;
		if (r < 0 && !s->fin_err) {
			s->fin_err = r;
			snprintf(s->fin_msg, sizeof(s->fin_msg), "%s", msg);
		}
		ck_file_free(s, f);
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* Keep the patches, with their bytes, in one allocation. */
static int patches_copy(struct ck_file *f, const struct ckptfs_patch *p, size_t n)
{
	size_t bytes = n * sizeof(*p);
	char *blob;

	for (size_t i = 0; i < n; i++)
		if (p[i].kind == CKPTFS_PATCH_BYTES)
			bytes += p[i].len;
	if (!(f->patches = malloc(bytes)))
		return -ENOMEM;
	memcpy(f->patches, p, n * sizeof(*p));
	blob = (char *)(f->patches + n);
	for (size_t i = 0; i < n; i++) {
		if (p[i].kind == CKPTFS_PATCH_BYTES && p[i].len) {
			memcpy(blob, p[i].data, p[i].len);
			f->patches[i].data = blob;
			blob += p[i].len;
		}
	}
	f->npatches = n;
	return 0;
}

int ckptfs_file_close(ckptfs_session *s, int fd, const struct ckptfs_patch *patches,
		      size_t npatches, const char *rename_from, const char *rename_to)
{
	struct ck_file *f = NULL;
	int r = 0;

	if ((r = ck_usable(s, "ckptfs_file_close")) < 0)
		return r;
	if (fd < 0)
		return ck_fail(-EBADF, "ckptfs_file_close: no fd");
	pthread_mutex_lock(&s->mu);
	for (struct ck_file *g = s->files; g; g = g->next)
		if (g->fd == fd && !g->closing)
			f = g;
	if (!f) {		/* nothing captured: closed in order all the same */
		if (!(f = calloc(1, sizeof(*f)))) {
			pthread_mutex_unlock(&s->mu);
			close(fd);
			return ck_fail(-ENOMEM, "ckptfs_file_close: out of memory");
		}
		f->fd = fd;
		f->next = s->files;
		s->files = f;
	}
	for (size_t i = 0; i < npatches && r == 0; i++) {
		int32_t c = patches[i].capture;
		if (patches[i].kind == CKPTFS_PATCH_BYTES) {
			if (patches[i].len && !patches[i].data)
				r = ck_fail(-EINVAL, "ckptfs_file_close: patch %zu has no data", i);
		} else if (patches[i].kind != CKPTFS_PATCH_CRC32_LE || c < 0 ||
			   (uint32_t)c >= f->ncaps || !f->caps[c]->want_crc) {
			r = ck_fail(-EINVAL, "ckptfs_file_close: patch %zu names capture %d, which is "
				    "not a CRC-32 capture of fd %d", i, (int)c, fd);
		}
	}
	if (r == 0 && npatches && (r = patches_copy(f, patches, npatches)) < 0)
		ck_fail(r, "ckptfs_file_close: out of memory");
	if (r < 0)
		ck_file_fail(f, r);
	f->from = rename_from ? strdup(rename_from) : NULL;
	f->to = rename_to ? strdup(rename_to) : NULL;
	f->closing = true;
	f->fnext = NULL;
	if (s->fin_tail)
		s->fin_tail->fnext = f;
	else
		s->fin_head = f;
	s->fin_tail = f;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return r;
}

int ckptfs_wait_files(ckptfs_session *s)
{
	int r;

	if ((r = ck_usable(s, "ckptfs_wait_files")) < 0)
		return r;
	pthread_mutex_lock(&s->mu);
	while (s->fin_head)
		pthread_cond_wait(&s->cv, &s->mu);
	if ((r = s->fin_err)) {
		ck_fail(r, "%s", s->fin_msg);
		s->fin_err = 0;
	}
	pthread_mutex_unlock(&s->mu);
	return r;
}

/* ---- threads -------------------------------------------------------------- */

int ck_threads_start(struct ckptfs_session *s, int ncrc)
{
	if (ncrc <= 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN) / 4;
		ncrc = n < 1 ? 1 : n > 8 ? 8 : (int)n;
	}
	s->crc_threads = calloc((size_t)ncrc, sizeof(pthread_t));
	if (!s->crc_threads || pthread_create(&s->finisher, NULL, finisher_main, s) != 0)
		return -ENOMEM;
	for (s->ncrc = 0; s->ncrc < ncrc; s->ncrc++)
		if (pthread_create(&s->crc_threads[s->ncrc], NULL, crc_main, s) != 0)
			break;
	return s->ncrc ? 0 : -EAGAIN;
}

void ck_threads_stop(struct ckptfs_session *s)
{
	pthread_mutex_lock(&s->mu);
	s->stopping = true;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->finisher, NULL);
	for (int i = 0; i < s->ncrc; i++)
		pthread_join(s->crc_threads[i], NULL);
	free(s->crc_threads);
	s->crc_threads = NULL;
	s->ncrc = 0;
}
