/*
 * wait.c — what waiting means, with the mock driver's streams standing in
 * for the GPU's (their host functions play the kernels):
 *   1. a capture starts after the work already queued on its producer
 *      stream: a "kernel" that sleeps and then writes the tensor comes
 *      first, so the file holds what the kernel wrote;
 *   2. ckptfs_wait_captured blocks while a copy is pending (its producer is
 *      held at a gate; a thread in wait must still be waiting) and returns
 *      once it is done; changing the source after it does not change the file;
 *   3. ckptfs_stream_wait does not block the CPU (it returns while the copy
 *      cannot even start: the gate opens only afterwards), and a "kernel"
 *      queued on the compute stream after it runs only once the copy is done:
 *      it overwrites the source, yet the file holds the bytes from before.
 * Copies are throttled (CKPTFS_MOCK_COPY_GBPS) so they take a while.
 */
#include "tests/gpu/gpu_util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

typedef int (*stream_create_fn)(void **s, unsigned flags);
typedef int (*host_fn_fn)(void *s, void (*fn)(void *), void *arg);
typedef int (*stream_sync_fn)(void *s);
static stream_create_fn stream_create;
static host_fn_fn launch_host;
static stream_sync_fn stream_sync;

#define LEN (16 * MiB)

struct kernel {
	unsigned char *buf;
	uint64_t seed;
	unsigned sleep_ms;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool open;
	atomic_bool ran;
};

static void kernel_fill(void *arg)	/* sleeps, then writes the "tensor" */
{
	struct kernel *k = arg;
	usleep(k->sleep_ms * 1000);
	fill_pattern(k->buf, LEN, k->seed, 0);
	atomic_store(&k->ran, true);
}

static void kernel_gate(void *arg)	/* holds its stream until opened */
{
	struct kernel *k = arg;
	pthread_mutex_lock(&k->mu);
	while (!k->open)
		pthread_cond_wait(&k->cv, &k->mu);
	pthread_mutex_unlock(&k->mu);
}

static void gate_open(struct kernel *k)
{
	pthread_mutex_lock(&k->mu);
	k->open = true;
	pthread_cond_broadcast(&k->cv);
	pthread_mutex_unlock(&k->mu);
}

struct waiter {
	ckptfs_session *s;
	atomic_bool done;
	int r;
};

static void *wait_main(void *arg)
{
	struct waiter *w = arg;
	w->r = ckptfs_wait_captured(w->s);
	atomic_store(&w->done, true);
	return NULL;
}

int main(void)
{
	struct tmount m;
	void *producer, *gated, *compute;

	gt_init();
	setenv("CKPTFS_MOCK_COPY_GBPS", "0.25", 1);
	void *dl = dlopen(gt_mock_path(), RTLD_NOW);
	ASSERT_TRUE(dl != NULL);
	stream_create = (stream_create_fn)dlsym(dl, "cuStreamCreate");
	launch_host = (host_fn_fn)dlsym(dl, "cuLaunchHostFunc");
	stream_sync = (stream_sync_fn)dlsym(dl, "cuStreamSynchronize");
	ASSERT_TRUE(stream_create && launch_host && stream_sync);
	tm_start(&m, "gpu_wait", "cache_size=256M", NULL);
	ckptfs_session *s = gt_open(&m, 64 * MiB);
	ASSERT_EQ(ckptfs_wait_captured(s), 0);	/* nothing captured yet: at once */
	ASSERT_EQ(stream_create(&producer, 1), 0);
	ASSERT_EQ(stream_create(&gated, 1), 0);
	ASSERT_EQ(stream_create(&compute, 1), 0);
	gt_watchdog(60, "wait: stuck (stream_wait blocked the CPU?)");

	/* 1. ordered after the producer's queued work */
	unsigned char *t1 = it_pattern(10, LEN);
	struct kernel k1 = { .buf = t1, .seed = 11, .sleep_ms = 150 };
	int fd1 = gt_create(&m, "wait/producer");
	ASSERT_EQ(launch_host(producer, kernel_fill, &k1), 0);
	ASSERT_TRUE(ckptfs_capture(s, fd1, 0, (uint64_t)(uintptr_t)t1, LEN, producer) >= 0);
	ASSERT_EQ(ckptfs_wait_captured(s), 0);
	ASSERT_TRUE(atomic_load(&k1.ran));
	void *exp1 = it_pattern(11, LEN);

	/* 2. the CPU wait blocks until the copy is done; later changes do not count */
	unsigned char *t2 = it_pattern(20, LEN);
	void *exp2 = it_pattern(20, LEN);
	struct kernel g2 = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	int fd2 = gt_create(&m, "wait/cpu");
	ASSERT_EQ(launch_host(gated, kernel_gate, &g2), 0);
	ASSERT_TRUE(ckptfs_capture(s, fd2, 0, (uint64_t)(uintptr_t)t2, LEN, gated) >= 0);
	struct waiter w = { .s = s };
	pthread_t th;
	CHECK_SYS(-pthread_create(&th, NULL, wait_main, &w));
	usleep(200000);
	ASSERT_TRUE(!atomic_load(&w.done));	/* the copy cannot have run: wait must block */
	gate_open(&g2);
	pthread_join(th, NULL);
	ASSERT_EQ(w.r, 0);
	fill_pattern(t2, LEN, 21, 0);		/* after the wait: the file must not see this */

	/* 3. the compute stream waits; the CPU does not */
	unsigned char *t3 = it_pattern(30, LEN);
	void *exp3 = it_pattern(30, LEN);
	struct kernel g3 = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	struct kernel k3 = { .buf = t3, .seed = 31 };
	int fd3 = gt_create(&m, "wait/stream");
	ASSERT_EQ(launch_host(gated, kernel_gate, &g3), 0);
	ASSERT_TRUE(ckptfs_capture(s, fd3, 0, (uint64_t)(uintptr_t)t3, LEN, gated) >= 0);
	ASSERT_EQ(ckptfs_stream_wait(s, compute), 0);	/* returns with the copy held back */
	ASSERT_EQ(launch_host(compute, kernel_fill, &k3), 0);	/* "optimizer step" */
	usleep(100000);
	ASSERT_TRUE(!atomic_load(&k3.ran));		/* the compute stream waits for the copy */
	gate_open(&g3);
	ASSERT_EQ(stream_sync(compute), 0);
	ASSERT_TRUE(atomic_load(&k3.ran));
	gt_watchdog(0, "");

	for (int fd = fd1; fd <= fd3; fd++)
		ASSERT_EQ(ckptfs_file_close(s, fd, NULL, 0, NULL, NULL), 0);
	if (ckptfs_wait_files(s) < 0)
		FAILF("wait_files: %s", ckptfs_last_error());
	ASSERT_EQ(ckptfs_session_close(s), 0);
	const char *rel[] = { "wait/producer", "wait/cpu", "wait/stream" };
	void *buf[] = { exp1, exp2, exp3 };
	size_t len[] = { LEN, LEN, LEN };
	gt_check_backend(&m, rel, buf, len, 3);
	tm_stop(&m);
	tm_cleanup(&m);
	for (int i = 0; i < 3; i++)
		free(buf[i]);
	free(t1);
	free(t2);
	free(t3);
	return 0;
}
