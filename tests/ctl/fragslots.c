/*
 * fragslots.c — small files share chunks as slots; a chunk is whole again
 * only once every slot in it is free.  With one small file still open
 * (dirty) in each of several split chunks, a large write that needs whole
 * chunks must have those slots spilled: the spiller goes on while a write
 * waits, not only below its watermark, whose estimate counts the split
 * chunks' free slots as room (before: the spiller stayed idle, and the
 * write waited drain_timeout and came back short).
 *
 * An 8-chunk cache; 64 small files of 1000 bytes (four chunks of slots),
 * every 16th kept open; then one write of 7 MiB.  Checked: the write goes
 * in whole, well within drain_timeout; the open files' slots were spilled;
 * everything reaches the backend as written.
 */
#include "tests/ctl/ctl_util.h"

#include <fcntl.h>
#include <unistd.h>

#define NSMALL 64
#define BIG (7 * MiB)

int main(void)
{
	struct tmount m;
	char rel[32], small[1000];
	int open_fd[NSMALL / 16], nopen = 0;

	tm_require_fuse();
	tm_start(&m, "ctl-fragslots", "cache_size=8M,chunk_size=1M,drain_timeout=5", NULL);
	memset(small, 's', sizeof(small));
	for (int i = 0; i < NSMALL; i++) {
		snprintf(rel, sizeof(rel), "s%02d", i);
		int fd = CHECK_SYS(open(tm_path(&m, rel), O_WRONLY | O_CREAT | O_TRUNC, 0644));
		ASSERT_EQ(write(fd, small, sizeof(small)), (ssize_t)sizeof(small));
		if (i % 16 == 0)
			open_fd[nopen++] = fd;
		else
			CHECK_SYS(close(fd));
	}
	tm_sync(&m);	/* the closed ones durable: their slots clean, evictable */
	ASSERT_EQ(ct_stat(&m, "spilled_bytes"), 0);

	char *buf = malloc(BIG);
	ASSERT_TRUE(buf != NULL);
	fill_pattern(buf, BIG, 5, 0);
	int fd = CHECK_SYS(open(tm_path(&m, "big"), O_WRONLY | O_CREAT | O_TRUNC, 0644));
	uint64_t t0 = mono_ms();
	ssize_t n = write(fd, buf, BIG);
	uint64_t ms = mono_ms() - t0;
	fprintf(stderr, "a %d MiB write beside %d open small files: %zd bytes in %llu ms, %.0f "
		"bytes spilled\n", (int)(BIG / MiB), nopen, n, (unsigned long long)ms,
		ct_stat(&m, "spilled_bytes"));
	if (n != BIG)
		FAILF("the write went in short (%zd of %d bytes, %llu ms): its chunks waited for "
		      "slots nobody spilled", n, (int)BIG, (unsigned long long)ms);
	ASSERT_GE(ct_stat(&m, "spilled_bytes"), sizeof(small));
	CHECK_SYS(close(fd));
	for (int i = 0; i < nopen; i++)
		CHECK_SYS(close(open_fd[i]));
	tm_sync(&m);
	size_t len;
	char *got = read_file(tm_bpath(&m, "big"), &len);
	ASSERT_TRUE(got && len == BIG && !memcmp(got, buf, BIG));
	free(got);
	for (int i = 0; i < NSMALL; i++) {
		snprintf(rel, sizeof(rel), "s%02d", i);
		got = read_file(tm_bpath(&m, rel), &len);
		ASSERT_TRUE(got && len == sizeof(small) && !memcmp(got, small, len));
		free(got);
	}
	free(buf);
	tm_stop(&m);
	tm_cleanup(&m);
	printf("ok: slots of open small files spilled for a write that needed whole chunks\n");
	return 0;
}
