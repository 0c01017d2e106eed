/*
 * fuzz_opts.c — libFuzzer target for the daemon's command line
 * (opts_parse in fs/opts.c).  The input is split at NUL bytes into argv
 * (argv[0] is "ckptfs").  opts_parse must return (never exit), opts_free
 * must release everything (LeakSanitizer checks), and options it accepts
 * must be within the ranges --help promises.  Usage errors are printed by
 * the thousand: run it with -close_fd_mask=3 (ctest does).
 */
#include "fs/opts.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "property failed: %s\n", #c); abort(); } } while (0)

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	char *copy = malloc(size + 1), *argv[66];
	int argc = 1, r;
	struct ckptfs_opts o;

	memcpy(copy, data, size);
	copy[size] = '\0';
	argv[0] = "ckptfs";
	for (size_t i = 0; i <= size && argc < 64;) {
		argv[argc++] = copy + i;
		i += strlen(copy + i) + 1;
	}
	argv[argc] = NULL;
	r = opts_parse(argc, argv, &o);
	CHECK(r == 0 || r == -1 || r == CKPTFS_USAGE_ERROR);
	if (r == 0) {
		CHECK(o.backend && o.mountpoint && o.rescue_dir && o.rescue_dir[0] == '/');
		CHECK(o.chunk_size >= (64u << 10) && o.chunk_size <= (64u << 20) &&
		      !(o.chunk_size & (o.chunk_size - 1)));
		CHECK(o.flush_threads >= 1 && o.flush_threads <= 64);
		CHECK(o.queue_depth >= 2 && o.queue_depth <= 1024);
		CHECK(o.max_threads >= 2 && o.max_threads <= 256);
		CHECK(isfinite(o.attr_timeout) && o.attr_timeout >= 0 && o.attr_timeout <= 604800);
		CHECK(isfinite(o.drain_timeout) && o.drain_timeout >= 0 && o.drain_timeout <= 604800);
		CHECK(o.readahead <= (1ull << 30));
	}
	opts_free(&o);
	free(copy);
	return 0;
}
