/*
 * gpu_bench.c — capture throughput against the device's own pinned
 * device-to-host bandwidth, in the same run, on the same buffer:
 *   pinned   cuMemcpyDtoHAsync of the whole buffer into cuMemAllocHost memory
 *            (the ceiling: one copy, pinned destination);
 *   pageable the same into malloc'd memory (what .cpu() gets, for reference);
 *   capture  ckptfs_capture of the buffer into a file of the mount, to
 *            ckptfs_wait_captured (copies done: the tensor may change), and
 *            the time the capture call itself took to return.
 * Rounds interleave the three; medians and the ratio capture/pinned print
 * as "key: value" lines.  The CUDA driver is loaded with dlopen
 * ($CKPTFS_LIBCUDA, default libcuda.so.1; the mock works for a dry run).
 * usage: gpu_bench MOUNT GIB ROUNDS   (exit 77 if the driver has no device)
 */
#include "bench.h"

#include <ckptfs.h>
#include <dlfcn.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUstream;

static struct {
	CUresult (*Init)(unsigned);
	CUresult (*DeviceGet)(int *, int);
	CUresult (*DevicePrimaryCtxRetain)(void **, int);
	CUresult (*CtxSetCurrent)(void *);
	CUresult (*MemAlloc)(CUdeviceptr *, size_t);
	CUresult (*MemAllocHost)(void **, size_t);
	CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
	CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
	CUresult (*StreamCreate)(CUstream *, unsigned);
	CUresult (*StreamSynchronize)(CUstream);
} cu;

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define CK(x)                                                                    \
	do {                                                                     \
		CUresult r_ = (x);                                               \
		if (r_) {                                                        \
			fprintf(stderr, "gpu_bench: %s: CUDA error %d\n", #x, r_); \
			exit(1);                                                 \
		}                                                                \
	} while (0)

static void load(void)
{
	const char *path = getenv("CKPTFS_LIBCUDA");
	void *dl = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW);
	if (!dl) {
		printf("skip: no CUDA driver (%s)\n", dlerror());
		exit(77);
	}
#define S(f, n) *(void **)&cu.f = dlsym(dl, n)
	S(Init, "cuInit");
	S(DeviceGet, "cuDeviceGet");
	S(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	S(CtxSetCurrent, "cuCtxSetCurrent");
	S(MemAlloc, "cuMemAlloc_v2");
	S(MemAllocHost, "cuMemAllocHost_v2");
	S(MemsetD8, "cuMemsetD8_v2");
	S(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
	S(StreamCreate, "cuStreamCreate");
	S(StreamSynchronize, "cuStreamSynchronize");
#undef S
	int dev;
	void *ctx;
	if (!cu.Init || cu.Init(0) || cu.DeviceGet(&dev, 0)) {
		printf("skip: the CUDA driver has no device\n");
		exit(77);
	}
	CK(cu.DevicePrimaryCtxRetain(&ctx, dev));
	CK(cu.CtxSetCurrent(ctx));
}

static void check(int r, const char *what)
{
	if (r < 0) {
		fprintf(stderr, "gpu_bench: %s: %s\n", what, ckptfs_last_error());
		exit(1);
	}
}

/* Capture the buffer into a new file; returns seconds to the copies' end, *issue the call's. */
static double capture(ckptfs_session *s, const char *mnt, int round, CUdeviceptr dev, size_t n,
		      CUstream st, double *issue)
{
	char name[64], path[4096];
	snprintf(name, sizeof(name), "gpu_bench_%d.bin", round);
	snprintf(path, sizeof(path), "%s/%s", mnt, name);
	int fd = bench_create(mnt, name);
	double t0 = bench_now();
	check(ckptfs_capture(s, fd, 0, dev, n, st), "capture");
	*issue = bench_now() - t0;
	check(ckptfs_wait_captured(s), "wait_captured");
	double t = bench_now() - t0;
	/* Not timed: land, close, publish, and free the arena for the next round. */
	check(ckptfs_file_close(s, fd, NULL, 0, NULL, NULL), "file_close");
	check(ckptfs_wait_files(s), "wait_files");
	unlink(path);
	int d = open(mnt, O_RDONLY | O_DIRECTORY);
	fsync(d);
	close(d);
	return t;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: gpu_bench MOUNT GIB ROUNDS\n");
		return 2;
	}
	const char *mnt = argv[1];
	size_t n = strtoull(argv[2], NULL, 10) << 30;
	int rounds = atoi(argv[3]);
	double pin[16], pag[16], cap[16], iss[16], issue;
	CUdeviceptr dev;
	CUstream st;
	void *host;

	load();
	CK(cu.MemAlloc(&dev, n));
	CK(cu.MemsetD8(dev, 0x3c, n));
	CK(cu.MemAllocHost(&host, n));
	char *pageable = malloc(n);
	memset(pageable, 1, n);		/* fault it in: measure copies, not page faults */
	memset(host, 1, n);
	CK(cu.StreamCreate(&st, 1));
	ckptfs_session *s = ckptfs_session_open(mnt);
	if (!s) {
		fprintf(stderr, "gpu_bench: %s\n", ckptfs_last_error());
		return 1;
	}
	struct ckptfs_stats stats;
	ckptfs_session_stats(s, &stats);
	if (stats.arena_bytes < n) {
		fprintf(stderr, "gpu_bench: the arena (%llu bytes) is smaller than the buffer: raise "
			"cache_size or CKPTFS_ARENA_SIZE\n", (unsigned long long)stats.arena_bytes);
		return 1;
	}
	capture(s, mnt, 99, dev, 64 << 20, st, &issue);	/* warm-up: pins the arena */
	if (rounds > 16)
		rounds = 16;
	for (int r = 0; r < rounds; r++) {
		double t0 = bench_now();
		CK(cu.MemcpyDtoHAsync(host, dev, n, st));
		CK(cu.StreamSynchronize(st));
		pin[r] = bench_now() - t0;
		t0 = bench_now();
		CK(cu.MemcpyDtoHAsync(pageable, dev, n, st));
		CK(cu.StreamSynchronize(st));
		pag[r] = bench_now() - t0;
		cap[r] = capture(s, mnt, r, dev, n, st, &iss[r]);
		fprintf(stderr, "round %d: pinned %.2f GB/s, pageable %.2f GB/s, capture %.2f GB/s "
			"(call returned in %.4f s)\n", r, (double)n / pin[r] / 1e9,
			(double)n / pag[r] / 1e9, (double)n / cap[r] / 1e9, iss[r]);
	}
	double ratios[16];
	for (int r = 0; r < rounds; r++)
		ratios[r] = pin[r] / cap[r];
	ckptfs_session_stats(s, &stats);
	printf("driver: %s\nbuffer_gib: %zu\nrounds: %d\nchunk_bytes: %llu\n", stats.driver, n >> 30,
	       rounds, (unsigned long long)stats.chunk_size);
	printf("arena_numa_node: %d\narena_hugepages: %d\narena_pinned: %d\n", stats.numa_node,
	       stats.hugepages, stats.arena_pinned);
	printf("pinned_dtoh_gbps: %.2f\n", (double)n / median(pin, rounds) / 1e9);
	printf("pageable_dtoh_gbps: %.2f\n", (double)n / median(pag, rounds) / 1e9);
	printf("capture_gbps: %.2f\n", (double)n / median(cap, rounds) / 1e9);
	printf("capture_call_s: %.4f\n", median(iss, rounds));
	printf("ratio_capture_vs_pinned: %.3f\n", median(ratios, rounds));
	printf("adopt_latency_avg_us: %.1f\n", stats.adopt_latency_avg_s * 1e6);
	check(ckptfs_session_close(s), "session_close");
	return 0;
}
