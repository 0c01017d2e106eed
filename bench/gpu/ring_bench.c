/*
 * ring_bench.c — the arena and ring's own costs, through a real mount:
 *   latency   from a copy's completion to the daemon adopting its chunk
 *             (the daemon measures it per chunk: the ring carries the
 *             client's completion time), with whole-chunk captures;
 *   entries   how many ring entries per second the whole path sustains
 *             (capture call, copy, host function, post, doorbell, the
 *             daemon's checks and adoption), with 4 KiB captures every
 *             8 KiB so each chunk carries many ranges (one entry each);
 *   copy      the bytes per second of the same captures as whole chunks,
 *             the bound for the first two.
 * usage: ring_bench MOUNT [MiB]   (driver: $CKPTFS_LIBCUDA, e.g. the mock)
 * Prints "key: value" lines.
 */
#include "bench.h"

#include <ckptfs.h>
#include <string.h>

static void check(int r, const char *what)
{
	if (r < 0) {
		fprintf(stderr, "ring_bench: %s: %s\n", what, ckptfs_last_error());
		exit(1);
	}
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: ring_bench MOUNT [MiB]\n");
		return 2;
	}
	size_t mib = argc > 2 ? strtoul(argv[2], NULL, 10) : 256, n = mib << 20;
	char *src = malloc(n);
	memset(src, 0x5a, n);
	ckptfs_session *s = ckptfs_session_open(argv[1]);
	if (!s) {
		fprintf(stderr, "ring_bench: %s\n", ckptfs_last_error());
		return 1;
	}
	struct ckptfs_stats a, b;
	ckptfs_session_stats(s, &a);
	size_t cs = a.chunk_size;

	/* whole chunks: copy rate and completion -> adoption latency */
	int fd = bench_create(argv[1], "ring_full.bin");
	double t0 = bench_now();
	for (size_t off = 0; off < n; off += cs)
		check(ckptfs_capture(s, fd, off, (uint64_t)(uintptr_t)(src + off), cs, NULL), "capture");
	check(ckptfs_file_close(s, fd, NULL, 0, NULL, NULL), "close");
	check(ckptfs_wait_files(s), "wait_files");
	double t_full = bench_now() - t0;
	ckptfs_session_stats(s, &b);
	printf("driver: %s\nchunk_bytes: %zu\narena_bytes: %llu\n", b.driver, cs,
	       (unsigned long long)b.arena_bytes);
	printf("full_chunks: %llu\nfull_copy_gbps: %.2f\n",
	       (unsigned long long)(b.adopted_chunks - a.adopted_chunks), (double)n / t_full / 1e9);
	printf("adopt_latency_avg_us: %.1f\nadopt_latency_max_us: %.1f\n",
	       b.adopt_latency_avg_s * 1e6, b.adopt_latency_max_s * 1e6);

	/* 4 KiB every 8 KiB: one ring entry per capture */
	a = b;
	fd = bench_create(argv[1], "ring_gaps.bin");
	t0 = bench_now();
	size_t caps = 0;
	for (size_t off = 0; off < n / 4; off += 8192, caps++)
		check(ckptfs_capture(s, fd, off, (uint64_t)(uintptr_t)(src + off), 4096, NULL), "capture");
	double t_issue = bench_now() - t0;
	check(ckptfs_file_close(s, fd, NULL, 0, NULL, NULL), "close");
	check(ckptfs_wait_files(s), "wait_files");
	double t_gaps = bench_now() - t0;
	ckptfs_session_stats(s, &b);
	uint64_t entries = b.entries - a.entries;
	printf("gapped_captures: %zu\ngapped_entries: %llu\n", caps, (unsigned long long)entries);
	printf("capture_calls_per_s: %.0f\nentries_per_s: %.0f\nus_per_entry: %.2f\n",
	       (double)caps / t_issue, (double)entries / t_gaps, t_gaps / (double)entries * 1e6);
	printf("rejected: %llu\n", (unsigned long long)b.rejected);
	check(ckptfs_session_close(s), "close session");
	return 0;
}
