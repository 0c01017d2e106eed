/*
 * unbind_stall.c — a backend call that hangs while a capture is adopted
 * does not freeze the mount (no backend I/O under fs->ns, fs/seal.c).
 * A bound file is written past the cache (the spiller moves its first
 * chunks to its stage file), then two ranges of its first chunk are
 * captured: adopting that chunk reads the gap between them back from the
 * stage file, and every backend pread is held (CKPTFS_FAULT hold=).  While the read hangs
 * and the file is unbound (ckptfs_file_close), lookups and creates of
 * other names through the mount must answer; the unbind used to consume
 * the ring under the namespace lock.  Once the read is let go, the file
 * holds the written bytes with the captured ranges over them.
 */
#include "tests/gpu/gpu_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#define WRITTEN (40 * MiB)
#define QUARTER (256 * KiB)

struct probe {
	struct tmount *m;
	atomic_bool done;
	int err;
};

/* What stat and create of names no one looked up take: a lookup each. */
static void *probe_main(void *arg)
{
	struct probe *p = arg;
	struct stat st;
	char rel[64];

	for (int i = 0; i < 5 && !p->err; i++) {
		snprintf(rel, sizeof(rel), "elsewhere/missing-%d", i);
		if (stat(tm_path(p->m, rel), &st) == 0 || errno != ENOENT)
			p->err = errno ? errno : EEXIST;
		snprintf(rel, sizeof(rel), "elsewhere/new-%d", i);
		int fd = open(tm_path(p->m, rel), O_CREAT | O_EXCL | O_WRONLY, 0644);
		if (fd < 0)
			p->err = errno;
		else
			close(fd);
	}
	atomic_store(&p->done, true);
	return NULL;
}

int main(void)
{
	struct tmount m;
	char gate[PATH_MAX];
	unsigned char *body = it_pattern(3, WRITTEN), *cap = it_pattern(4, 2 * QUARTER);

	gt_init();
	tm_init(&m, "gpu_unbind_stall");
	snprintf(gate, sizeof(gate), "%s/gate", m.root);
	const char *env[] = { cu_fault_env("op=pread,hold=%s", gate), NULL };
	tm_mount(&m, "cache_size=16M,chunk_size=1M,drain_timeout=120", env);
	CHECK_SYS(mkdir(tm_path(&m, "elsewhere"), 0755));
	ckptfs_session *s = gt_open(&m, 2 * MiB);
	gt_watchdog(100, "HANG: the test did not end");

	int fd = gt_create(&m, "u/f");
	ASSERT_EQ(ckptfs_file_bind(s, fd, 0), 0);
	for (size_t off = 0; off < WRITTEN; off += MiB)
		ASSERT_EQ(pwrite(fd, body + off, MiB, (off_t)off), (ssize_t)MiB);
	long long spilled = gt_stat(&m, "spilled_bytes");
	printf("a bound file of %d MiB through a 16 MiB cache: %lld bytes spilled\n",
	       (int)(WRITTEN / MiB), spilled);
	ASSERT_TRUE(spilled > 0);

	it_gate_set(gate, true);	/* every backend pread hangs from here */
	/* Two ranges of chunk 0: the gap between them is filled from the stage file. */
	ASSERT_EQ(ckptfs_capture(s, fd, 0, (uint64_t)(uintptr_t)cap, QUARTER, NULL), 0);
	ASSERT_EQ(ckptfs_capture(s, fd, 3 * QUARTER, (uint64_t)(uintptr_t)(cap + QUARTER),
				 QUARTER, NULL), 1);
	ASSERT_EQ(ckptfs_file_close(s, fd, NULL, 0, NULL, NULL), 0);
	usleep(500 * 1000);		/* adopting: reading the gap back, held */

	struct probe p = { .m = &m };
	pthread_t th;
	CHECK_SYS(-pthread_create(&th, NULL, probe_main, &p));
	uint64_t t0 = mono_ms();
	while (!atomic_load(&p.done) && mono_ms() - t0 < 5000)
		usleep(10 * 1000);
	bool answered = atomic_load(&p.done);
	uint64_t took = mono_ms() - t0;
	it_gate_set(gate, false);	/* let the read go, whatever happened */
	pthread_join(th, NULL);
	printf("lookups and creates while the adopt's backend read hangs: %s after %llu ms\n",
	       answered ? "answered" : "NOT answered", (unsigned long long)took);
	if (!answered)
		FAILF("the mount froze while a backend read of an unbind's adopt hung");
	ASSERT_EQ(p.err, 0);
	if (ckptfs_wait_files(s) < 0)
		FAILF("wait_files: %s", ckptfs_last_error());
	memcpy(body, cap, QUARTER);
	memcpy(body + 3 * QUARTER, cap + QUARTER, QUARTER);
	const char *rel[] = { "u/f" };
	void *buf[] = { body };
	size_t len[] = { WRITTEN };
	gt_check_backend(&m, rel, buf, len, 1);
	gt_watchdog(0, "");
	ckptfs_session_close(s);
	tm_stop(&m);
	tm_cleanup(&m);
	free(body);
	free(cap);
	return 0;
}
