/*
 * cudamock.c — a stand-in for libcuda.so.1 with no GPU: enough of the
 * driver API for libckptfs (gpu/cu.h) and its tests, selected with
 * CKPTFS_LIBCUDA=/path/to/libckptfs-cudamock.so.
 *
 * Device pointers are host pointers: a "device" is this process's memory,
 * so tests capture ordinary buffers (and the Python package CPU tensors,
 * whose data_ptr() is host memory) through the whole protocol.  What is
 * emulated, and how:
 *   - streams: each created stream is a FIFO of operations run in order by
 *     its own thread: copies, event records, event waits, host functions;
 *     the NULL stream and the legacy/per-thread handles (0x1, 0x2) are
 *     synchronous: their operations run in the caller at once;
 *   - events: a record enqueues a marker whose completion advances the
 *     event's completed generation; cuEventSynchronize and cuStreamWaitEvent
 *     wait for the generation recorded when they were called, as CUDA's do;
 *   - copies: memcpy on the stream's thread, throttled to
 *     CKPTFS_MOCK_COPY_GBPS (GB/s; default unthrottled) so tests can widen
 *     the window in which copies are in flight;
 *   - pointers: cuPointerGetAttribute says DEVICE for any readable address
 *     and rejects NULL and unmapped ones (CUDA_ERROR_INVALID_VALUE), as the
 *     driver rejects a pointer it does not know; cuMemcpyDtoHAsync does too;
 *   - while CKPTFS_MOCK_FAIL_COPY=1 is set, every copy fails at enqueue
 *     (CUDA_ERROR_ILLEGAL_ADDRESS), for error paths;
 *   - CUDA's asynchronous faults, which leave the context with a sticky
 *     error: a copy issued while CKPTFS_MOCK_FAULT=async faults when its
 *     stream has run it for as long as the copy takes; one issued while CKPTFS_MOCK_FAULT=context is
 *     accepted and the context faults at once (before the caller's next
 *     call).  From then on nothing runs (copies copy nothing, host
 *     functions are never called, as cuLaunchHostFunc documents), events
 *     and streams still reach their ends, and every call that touches a
 *     stream or an event returns CUDA_ERROR_ILLEGAL_ADDRESS, as the
 *     driver does until the process exits.
 * Memory (for benchmarks' dry runs): cuMemAlloc and cuMemAllocHost are
 * malloc, cuMemsetD8 is memset.
 * One device (ordinal 0, PCI bus id 0000:00:00.0), one primary context.
 * The exported symbol ckptfs_mock_driver tells libckptfs it talks to this.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/uio.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void (*CUhostFn)(void *);

enum {
	OK = 0, ERR_INVALID_VALUE = 1, ERR_INVALID_CONTEXT = 201, ERR_INVALID_HANDLE = 400,
	ERR_NOT_READY = 600, ERR_ILLEGAL_ADDRESS = 700,
};

EXPORT int ckptfs_mock_driver = 1;

struct CUctx_st {
	int device;
};
static struct CUctx_st primary = { 0 };
static __thread struct CUctx_st *current;

struct CUevent_st {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t recorded;	/* generations handed out */
	uint64_t completed;	/* highest generation reached */
};

enum op_kind { OP_COPY, OP_RECORD, OP_WAIT, OP_HOSTFN, OP_STOP };

struct op {
	enum op_kind kind;
	struct op *next;
	void *dst;
	const void *src;
	size_t n;
	struct CUevent_st *ev;
	uint64_t gen;
	CUhostFn fn;
	void *arg;
	int fault;		/* CKPTFS_MOCK_FAULT=async when issued */
};

struct CUstream_st {
	pthread_mutex_t mu;
	pthread_cond_t cv;	/* work queued, or work done */
	struct op *head, *tail;
	uint64_t queued, done;
	pthread_t th;
};

static double copy_gbps;	/* 0: unthrottled */
static _Atomic int sticky;	/* the context's error after a fault (0: none) */
static int probe[2] = { -1, -1 };
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void setup(void)
{
	const char *g = getenv("CKPTFS_MOCK_COPY_GBPS");
	if (g)
		copy_gbps = atof(g);
	if (pipe2(probe, O_CLOEXEC | O_NONBLOCK) < 0)
		probe[0] = probe[1] = -1;
}

/*
 * Is the byte at p mapped and readable?  process_vm_readv(2) of our own
 * memory says EFAULT if not.  It does not read p as the program does: a
 * kernel still filling the buffer on its stream (a copy queued after it
 * reads it only in stream order) is no race, and ThreadSanitizer, which
 * sees a write(2) of p as a read, does not see this one.  Before it could
 * be used (a kernel without it), write(2) to a pipe.
 */
static int readable(const void *p)
{
	char sink[64];
	struct iovec local = { sink, 1 }, remote = { (void *)p, 1 };

	if (!p)
		return 0;
	if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == 1)
		return 1;
	if (errno == EFAULT)
		return 0;
	if (probe[1] < 0)
		return 1;
	if (write(probe[1], p, 1) == 1) {
		while (read(probe[0], sink, sizeof(sink)) > 0)
			;
		return 1;
	}
	return errno != EFAULT;
}

static int range_readable(const void *p, size_t n)
{
	return readable(p) && (n == 0 || readable((const char *)p + n - 1));
}

static int is_sync(struct CUstream_st *s)
{
	return (uintptr_t)s <= 2;	/* NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD */
}

static void event_reach(struct CUevent_st *e, uint64_t gen)
{
	pthread_mutex_lock(&e->mu);
	if (gen > e->completed)
		e->completed = gen;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
}

static void event_wait(struct CUevent_st *e, uint64_t gen)
{
	pthread_mutex_lock(&e->mu);
	while (e->completed < gen)
		pthread_cond_wait(&e->cv, &e->mu);
	pthread_mutex_unlock(&e->mu);
}

static void throttle(size_t n, const struct timespec *t0)
{
	struct timespec t1;
	if (copy_gbps <= 0)
		return;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double spent = (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
	double want = (double)n / (copy_gbps * 1e9);
	if (want > spent)
		usleep((useconds_t)((want - spent) * 1e6));
}

static void run(struct op *o)
{
	struct timespec t0;

	switch (o->kind) {
	case OP_COPY:
		if (sticky)
			break;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		if (!o->fault)
			memcpy(o->dst, o->src, o->n);
		throttle(o->n, &t0);
		if (o->fault)	/* as it ends: nothing landed */
			sticky = ERR_ILLEGAL_ADDRESS;
		break;
	case OP_RECORD:
		event_reach(o->ev, o->gen);
		break;
	case OP_WAIT:
		event_wait(o->ev, o->gen);
		break;
	case OP_HOSTFN:
		if (!sticky)
			o->fn(o->arg);
		break;
	case OP_STOP:
		break;
	}
}

static void *stream_main(void *arg)
{
	struct CUstream_st *s = arg;

	for (;;) {
		pthread_mutex_lock(&s->mu);
		while (!s->head)
			pthread_cond_wait(&s->cv, &s->mu);
		struct op *o = s->head;
		pthread_mutex_unlock(&s->mu);
		run(o);
		pthread_mutex_lock(&s->mu);
		s->head = o->next;
		if (!s->head)
			s->tail = NULL;
		s->done++;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
		enum op_kind k = o->kind;
		free(o);
		if (k == OP_STOP)
			return NULL;
	}
}

/* Queue o on s, or run it now on a synchronous stream. */
static void submit(struct CUstream_st *s, struct op *o)
{
	if (is_sync(s)) {
		run(o);
		free(o);
		return;
	}
	pthread_mutex_lock(&s->mu);
	o->next = NULL;
	if (s->tail)
		s->tail->next = o;
	else
		s->head = o;
	s->tail = o;
	s->queued++;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

static struct op *op_new(enum op_kind k)
{
	struct op *o = calloc(1, sizeof(*o));
	if (o)
		o->kind = k;
	return o;
}

/* ---- the API ------------------------------------------------------------- */

EXPORT CUresult cuInit(unsigned int flags)
{
	(void)flags;
	pthread_once(&once, setup);
	return OK;
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
	*v = 13000;
	return OK;
}

EXPORT CUresult cuDeviceGetCount(int *n)
{
	*n = 1;
	return OK;
}

EXPORT CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
	if (ordinal != 0)
		return ERR_INVALID_VALUE;
	*dev = 0;
	return OK;
}

EXPORT CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice dev)
{
	if (dev != 0 || len <= 0)
		return ERR_INVALID_VALUE;
	snprintf(id, (size_t)len, "0000:00:00.0");
	return OK;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(struct CUctx_st **ctx, CUdevice dev)
{
	if (dev != 0)
		return ERR_INVALID_VALUE;
	*ctx = &primary;
	return OK;
}

EXPORT CUresult cuCtxGetCurrent(struct CUctx_st **ctx)
{
	*ctx = current;
	return OK;
}

EXPORT CUresult cuCtxSetCurrent(struct CUctx_st *ctx)
{
	current = ctx;
	return OK;
}

EXPORT CUresult cuCtxGetDevice(CUdevice *dev)
{
	if (!current)
		return ERR_INVALID_CONTEXT;
	*dev = current->device;
	return OK;
}

EXPORT CUresult cuStreamCreate(struct CUstream_st **out, unsigned int flags)
{
	struct CUstream_st *s = calloc(1, sizeof(*s));

	(void)flags;
	if (!s)
		return ERR_INVALID_VALUE;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	if (pthread_create(&s->th, NULL, stream_main, s) != 0) {
		free(s);
		return ERR_INVALID_VALUE;
	}
	*out = s;
	return OK;
}

EXPORT CUresult cuStreamSynchronize(struct CUstream_st *s)
{
	if (is_sync(s))
		return OK;
	pthread_mutex_lock(&s->mu);
	uint64_t want = s->queued;
	while (s->done < want)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	return sticky;
}

EXPORT CUresult cuStreamQuery(struct CUstream_st *s)
{
	if (sticky || is_sync(s))
		return sticky;
	pthread_mutex_lock(&s->mu);
	int done = s->done == s->queued;
	pthread_mutex_unlock(&s->mu);
	return done ? OK : ERR_NOT_READY;
}

EXPORT CUresult cuStreamDestroy_v2(struct CUstream_st *s)
{
	if (is_sync(s))
		return ERR_INVALID_HANDLE;
	submit(s, op_new(OP_STOP));
	pthread_join(s->th, NULL);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s);
	return OK;
}

EXPORT CUresult cuEventCreate(struct CUevent_st **out, unsigned int flags)
{
	struct CUevent_st *e = calloc(1, sizeof(*e));

	(void)flags;
	if (!e)
		return ERR_INVALID_VALUE;
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->cv, NULL);
	*out = e;
	return OK;
}

EXPORT CUresult cuEventDestroy_v2(struct CUevent_st *e)
{
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->cv);
	free(e);
	return OK;
}

EXPORT CUresult cuEventRecord(struct CUevent_st *e, struct CUstream_st *s)
{
	struct op *o;

	if (sticky)
		return sticky;
	if (!(o = op_new(OP_RECORD)))
		return ERR_INVALID_VALUE;
	pthread_mutex_lock(&e->mu);
	o->gen = ++e->recorded;
	pthread_mutex_unlock(&e->mu);
	o->ev = e;
	submit(s, o);
	return OK;
}

EXPORT CUresult cuEventQuery(struct CUevent_st *e)
{
	pthread_mutex_lock(&e->mu);
	int done = e->completed >= e->recorded;
	pthread_mutex_unlock(&e->mu);
	return sticky ? sticky : done ? OK : ERR_NOT_READY;
}

EXPORT CUresult cuEventSynchronize(struct CUevent_st *e)
{
	pthread_mutex_lock(&e->mu);
	uint64_t gen = e->recorded;
	pthread_mutex_unlock(&e->mu);
	event_wait(e, gen);
	return sticky;
}

EXPORT CUresult cuStreamWaitEvent(struct CUstream_st *s, struct CUevent_st *e, unsigned int flags)
{
	struct op *o;

	(void)flags;
	if (sticky)
		return sticky;
	if (!(o = op_new(OP_WAIT)))
		return ERR_INVALID_VALUE;
	pthread_mutex_lock(&e->mu);
	o->gen = e->recorded;
	pthread_mutex_unlock(&e->mu);
	o->ev = e;
	submit(s, o);
	return OK;
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, struct CUstream_st *s)
{
	struct op *o;

	pthread_once(&once, setup);
	if (!range_readable((const void *)(uintptr_t)src, n) || !dst)
		return ERR_INVALID_VALUE;
	const char *fail = getenv("CKPTFS_MOCK_FAIL_COPY");
	const char *fault = getenv("CKPTFS_MOCK_FAULT");
	if (fail && *fail == '1')
		return ERR_ILLEGAL_ADDRESS;
	if (sticky)
		return sticky;
	if (!(o = op_new(OP_COPY)))
		return ERR_INVALID_VALUE;
	o->fault = fault && !strcmp(fault, "async");
	if (fault && !strcmp(fault, "context"))
		sticky = ERR_ILLEGAL_ADDRESS;
	o->dst = dst;
	o->src = (const void *)(uintptr_t)src;
	o->n = n;
	submit(s, o);
	return OK;
}

EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	if (!range_readable((const void *)(uintptr_t)src, n) || !dst)
		return ERR_INVALID_VALUE;
	memcpy(dst, (const void *)(uintptr_t)src, n);
	return OK;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
	void *m = malloc(n ? n : 1);
	if (!m)
		return 2;	/* CUDA_ERROR_OUT_OF_MEMORY */
	*p = (CUdeviceptr)(uintptr_t)m;
	return OK;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
	free((void *)(uintptr_t)p);
	return OK;
}

EXPORT CUresult cuMemAllocHost_v2(void **p, size_t n)
{
	return (*p = malloc(n ? n : 1)) ? OK : 2;
}

EXPORT CUresult cuMemFreeHost(void *p)
{
	free(p);
	return OK;
}

EXPORT CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n)
{
	memset((void *)(uintptr_t)p, v, n);
	return OK;
}

EXPORT CUresult cuLaunchHostFunc(struct CUstream_st *s, CUhostFn fn, void *arg)
{
	struct op *o;

	if (sticky)
		return sticky;
	if (!fn || !(o = op_new(OP_HOSTFN)))
		return ERR_INVALID_VALUE;
	o->fn = fn;
	o->arg = arg;
	submit(s, o);
	return OK;
}

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned int flags)
{
	(void)flags;
	return range_readable(p, n) ? OK : ERR_INVALID_VALUE;
}

EXPORT CUresult cuMemHostUnregister(void *p)
{
	(void)p;
	return OK;
}

EXPORT CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p)
{
	pthread_once(&once, setup);
	if (!readable((const void *)(uintptr_t)p))
		return ERR_INVALID_VALUE;
	if (attr == 1) {	/* CU_POINTER_ATTRIBUTE_CONTEXT */
		*(struct CUctx_st **)data = &primary;
		return OK;
	}
	if (attr == 2) {	/* CU_POINTER_ATTRIBUTE_MEMORY_TYPE */
		*(unsigned int *)data = 2;	/* CU_MEMORYTYPE_DEVICE */
		return OK;
	}
	return ERR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorString(CUresult r, const char **s)
{
	switch (r) {
	case OK: *s = "no error"; break;
	case ERR_INVALID_VALUE: *s = "invalid argument"; break;
	case ERR_INVALID_CONTEXT: *s = "invalid device context"; break;
	case ERR_INVALID_HANDLE: *s = "invalid resource handle"; break;
	case ERR_NOT_READY: *s = "device not ready"; break;
	case ERR_ILLEGAL_ADDRESS: *s = "an illegal memory access was encountered"; break;
	default: *s = "unknown error"; return ERR_INVALID_VALUE;
	}
	return OK;
}
