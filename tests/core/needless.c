/*
 * needless.c — a write waiting for cache space stops waiting once another
 * write of the same file has put a chunk where it goes (cache/cfile.c
 * spares_wanted, cache_chunk_alloc_wanted), at the cache's API.
 *
 * The kernel sends the pieces of one unaligned direct write as separate
 * requests at once (a 1 MiB write from malloc's buffer: 1 MiB - 16 bytes
 * and 16 bytes, both in one chunk).  With one chunk free, both pieces ask
 * for it: one gets it and puts it in the file, the other waited on for a
 * chunk it no longer needed — over a hung backend until the bounded wait
 * failed it with EIO (seen once in CI: fullcache, a writer blocked 1 MiB
 * early).  Here the race is placed deterministically: the cache has two
 * chunks, one held by the test; a 16-byte write near the end of chunk 0 of
 * a file waits; from inside its wait (the cache's wait_check, called in the
 * waiting thread) the held chunk is freed and the rest of chunk 0 written,
 * which takes it.  The waiting write must then succeed at once, within
 * the first waits, with both writes' bytes in the file; a wait_check that
 * gives up after 2 s is what a hung backend's bounded wait does.
 * A second case keeps the wait itself: with nothing written meanwhile the
 * write waits, and gives up with the wait_check's error.
 */
#include "cache/cache.h"
#include "cache/cfile.h"
#include "cache/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CS (1u << 20)
#define TAIL 16

static struct cache c;
static struct chunk *held;
static struct cfile *cf;
static unsigned checks;
static bool write_meanwhile;

static int fail(int line, const char *what)
{
	fprintf(stderr, "needless.c:%d: %s\n", line, what);
	exit(1);
}
#define CHECK(x) ((x) ? 0 : fail(__LINE__, #x))

static int copy_byte(void *arg, char *dst, size_t len, size_t src_off)
{
	(void)src_off;
	memset(dst, *(const char *)arg, len);
	return 0;
}

/* In the waiting thread, every wait slice: the first time, the other piece lands. */
static int check(void *arg, uint64_t waited_ns)
{
	(void)arg;
	if (checks++ == 0 && write_meanwhile) {
		cache_chunk_free(&c, held);
		held = NULL;
		CHECK(cfile_write(cf, 0, CS - TAIL, copy_byte, "a", NULL) == 0);
	}
	return waited_ns > 2000000000ull ? -EIO : 0;
}

static void one_case(bool meanwhile)
{
	struct chunk *mine;

	checks = 0;
	write_meanwhile = meanwhile;
	CHECK(cache_init(&c, 2 * CS, CS) == 0);
	c.wait_check = check;
	cf = cfile_new(&c, NULL);
	CHECK(cfile_write(cf, 4 * CS, 8, copy_byte, "x", NULL) == 0);	/* a dirty chunk: one left */
	CHECK(cache_chunk_alloc(&c, NULL, false, false, &held) == 0);	/* none left */
	CHECK(cache_chunk_alloc(&c, NULL, false, false, &mine) == -EAGAIN);

	int r = cfile_write(cf, CS - TAIL, TAIL, copy_byte, "b", NULL);
	if (meanwhile) {
		if (r != 0)
			fprintf(stderr, "the 16-byte write failed (%s) after %u wait checks, though "
				"the other piece had put chunk 0 in place\n", strerror(-r), checks);
		CHECK(r == 0);
		CHECK(checks <= 3);	/* it stopped at the first re-check, not at the timeout */
		struct cseg *segs;
		uint32_t n;
		CHECK(cfile_map(cf, 0, CS, &segs, &n) == 0);
		CHECK(n == 1 && segs[0].kind == CSEG_MEM && segs[0].off == 0 && segs[0].len == CS);
		for (size_t i = 0; i < CS; i++)
			CHECK(segs[0].mem[i] == (i < CS - TAIL ? 'a' : 'b'));
		cfile_unmap(cf, segs, n);
		printf("ok: a wait for a chunk another piece put in place ends at once (%u checks)\n",
		       checks);
	} else {
		CHECK(r == -EIO);
		CHECK(checks >= 10);
		cache_chunk_free(&c, held);
		printf("ok: with nothing written meanwhile the write waits, then gives up (%u checks)\n",
		       checks);
	}
	cfile_put(cf);
	cache_destroy(&c);
}

int main(void)
{
	one_case(true);
	one_case(false);
	return 0;
}
