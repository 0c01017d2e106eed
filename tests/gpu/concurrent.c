/*
 * concurrent.c — many captures at once, across files and threads, through
 * one session: 8 threads, each filling 5 files of its own with 1 to 12
 * captures of random sizes (1 byte to 2 MiB) in random order, plus two
 * threads capturing the two halves of one shared file, over an arena of 12
 * one-MiB chunks (so captures also wait for chunks while others land).
 * Every file must hold exactly its bytes on the backend, with verify OK,
 * and the daemon must have refused nothing.  CKPTFS_GPU_SEED=N replays.
 */
#include "tests/gpu/gpu_util.h"

#include <pthread.h>

#define THREADS 8
#define FILES 5
#define CH MiB

struct job {
	struct tmount *m;
	ckptfs_session *s;
	unsigned id;
	uint64_t seed;
	char rel[FILES][64];
	unsigned char *buf[FILES];
	size_t len[FILES];
	const char *err;
};

static uint64_t next(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static void *worker(void *arg)
{
	struct job *j = arg;
	uint64_t x = j->seed | 1;

	for (int f = 0; f < FILES; f++) {
		unsigned n = 1 + (unsigned)(next(&x) % 12);
		size_t cuts[13], len = 0;
		cuts[0] = 0;
		for (unsigned k = 1; k <= n; k++)
			cuts[k] = cuts[k - 1] + 1 + next(&x) % (k % 3 ? 64 * KiB : 2 * MiB);
		len = cuts[n];
		snprintf(j->rel[f], sizeof(j->rel[f]), "con/t%u/f%d", j->id, f);
		j->buf[f] = it_pattern(j->seed * 31 + (uint64_t)f, len);
		j->len[f] = len;
		int fd = gt_create(j->m, j->rel[f]);
		unsigned order[12];
		for (unsigned k = 0; k < n; k++)
			order[k] = k;
		for (unsigned k = n; k > 1; k--) {	/* shuffle */
			unsigned r = (unsigned)(next(&x) % k), t = order[k - 1];
			order[k - 1] = order[r];
			order[r] = t;
		}
		for (unsigned k = 0; k < n; k++) {
			size_t a = cuts[order[k]], b = cuts[order[k] + 1];
			if (ckptfs_capture(j->s, fd, a, (uint64_t)(uintptr_t)(j->buf[f] + a), b - a, NULL) < 0) {
				j->err = strdup(ckptfs_last_error());
				return NULL;
			}
		}
		if (ckptfs_file_close(j->s, fd, NULL, 0, NULL, NULL) < 0) {
			j->err = strdup(ckptfs_last_error());
			return NULL;
		}
	}
	return NULL;
}

struct half {
	ckptfs_session *s;
	int fd;
	unsigned char *buf;
	size_t a, b;
	int r;
};

static void *half_main(void *arg)
{
	struct half *h = arg;
	for (size_t off = h->a; off < h->b && h->r >= 0; off += 300 * KiB) {
		size_t n = off + 300 * KiB > h->b ? h->b - off : 300 * KiB;
		h->r = ckptfs_capture(h->s, h->fd, off, (uint64_t)(uintptr_t)(h->buf + off), n, NULL);
	}
	return NULL;
}

int main(void)
{
	struct tmount m;
	struct job jobs[THREADS];
	pthread_t th[THREADS + 2];
	const char *env = getenv("CKPTFS_GPU_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);

	printf("seed %llu (CKPTFS_GPU_SEED replays)\n", (unsigned long long)seed);
	gt_init();
	tm_start(&m, "gpu_concurrent", "cache_size=192M,chunk_size=1M", NULL);
	ckptfs_session *s = gt_open(&m, 12 * MiB);

	/* The shared file: two threads, one half each. */
	const size_t slen = 9 * MiB + 333;
	unsigned char *sbuf = it_pattern(seed ^ 0x5a5a, slen);
	int sfd = gt_create(&m, "con/shared");
	struct half h[2] = { { s, sfd, sbuf, 0, slen / 2, 0 }, { s, sfd, sbuf, slen / 2, slen, 0 } };
	for (int i = 0; i < 2; i++)
		CHECK_SYS(-pthread_create(&th[THREADS + i], NULL, half_main, &h[i]));
	for (unsigned i = 0; i < THREADS; i++) {
		jobs[i] = (struct job){ .m = &m, .s = s, .id = i, .seed = seed * 1000003 + i };
		CHECK_SYS(-pthread_create(&th[i], NULL, worker, &jobs[i]));
	}
	for (unsigned i = 0; i < THREADS + 2; i++)
		pthread_join(th[i], NULL);
	for (unsigned i = 0; i < THREADS; i++)
		if (jobs[i].err)
			FAILF("thread %u: %s", i, jobs[i].err);
	for (int i = 0; i < 2; i++)
		if (h[i].r < 0)
			FAILF("shared half %d: %s", i, ckptfs_last_error());
	ASSERT_EQ(ckptfs_file_close(s, sfd, NULL, 0, NULL, NULL), 0);
	if (ckptfs_wait_files(s) < 0)
		FAILF("wait_files: %s", ckptfs_last_error());
	struct ckptfs_stats st;
	ckptfs_session_stats(s, &st);
	printf("captures %llu, %llu bytes, %llu chunks adopted, %llu arena waits, %llu moved\n",
	       (unsigned long long)st.captures, (unsigned long long)st.adopted_bytes,
	       (unsigned long long)st.adopted_chunks, (unsigned long long)st.arena_waits,
	       (unsigned long long)st.moved_chunks);
	ASSERT_EQ(st.rejected, 0);
	ASSERT_EQ(st.adopted_bytes, st.captured_bytes);
	ASSERT_EQ(ckptfs_session_close(s), 0);

	const char *rel[THREADS * FILES + 1];
	void *buf[THREADS * FILES + 1];
	size_t len[THREADS * FILES + 1];
	size_t n = 0;
	for (unsigned i = 0; i < THREADS; i++)
		for (int f = 0; f < FILES; f++, n++) {
			rel[n] = jobs[i].rel[f];
			buf[n] = jobs[i].buf[f];
			len[n] = jobs[i].len[f];
		}
	rel[n] = "con/shared";
	buf[n] = sbuf;
	len[n++] = slen;
	gt_check_backend(&m, rel, buf, len, n);
	tm_stop(&m);
	tm_cleanup(&m);
	for (size_t i = 0; i < n; i++)
		free(buf[i]);
	return 0;
}
