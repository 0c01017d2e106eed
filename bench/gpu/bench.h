/*
 * bench.h — what ring_bench.c and gpu_bench.c share: the monotonic clock
 * in seconds, and a fresh file in the mount (any old one removed first).
 */
#ifndef CKPTFS_BENCH_GPU_H
#define CKPTFS_BENCH_GPU_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static inline double bench_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static inline int bench_create(const char *mnt, const char *name)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", mnt, name);
	unlink(path);
	int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
	if (fd < 0) {
		perror(path);
		exit(1);
	}
	return fd;
}

#endif
