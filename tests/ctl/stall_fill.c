/*
 * stall_fill.c — a write that must fill part of a chunk from a hung
 * backend holds that file's lock; stat(2) of the file, and everything
 * else, must not wait for it (cache/cfile.c: size and dirty are read
 * without the lock, since stat asks them under the namespace lock).
 *
 * A published file is evicted from the cache; a writer puts one byte at
 * its start, then writes at 500,000 — the bytes between are the
 * published file's, read from the backend, whose reads now hang (held
 * while a flag exists).  Meanwhile stat of that file, and creating,
 * writing and closing another, each answer well within the hang (before:
 * both waited for the writer's read, up to drain_timeout, the second
 * behind the first's namespace lock).  Then the hang ends and everything
 * is published.
 *
 * Then the same with the file clean while its writer fills (its one byte
 * at 0 published first): a stats read, which asks every file's state
 * under the namespace lock, and an open and close of the file by another
 * process answer within the hang too (before: both waited for the fill,
 * and every request of the mount behind them).
 *
 * Last, the spiller: with that file's chunk first on the spill list and
 * another open file's dirty chunks behind it, a large write that needs
 * room while the fill hangs goes in within the hang (before: the one
 * spiller waited for the filling file's lock, and the write with it).
 */
#include "tests/ctl/ctl_util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BOUND_MS 3000

struct writer {
	const char *path;
	const char *flag;	/* backend reads hang while it exists */
	int fd;
	ssize_t got;
	int err;
	uint64_t ms;	/* how long the write took */
	uint64_t end;	/* when it returned (mono_ms) */
	pthread_t th;
};

static void *fill_write(void *arg)
{
	struct writer *w = arg;
	uint64_t t0 = mono_ms();
	w->got = pwrite(w->fd, "y", 1, 500000);
	w->err = w->got < 0 ? errno : 0;
	w->end = mono_ms();
	w->ms = w->end - t0;
	return NULL;
}

/* Hang the backend's reads and start the write that fills from it. */
static void fill_begin(struct writer *w)
{
	ct_touch(w->flag);
	ASSERT_EQ(pthread_create(&w->th, NULL, fill_write, w), 0);
	usleep(500 * 1000);	/* the writer is in its fill */
}

/* End the hang; the fill must have waited for it (a positive control). */
static void fill_end(struct writer *w, const char *what, const char *measured, uint64_t ms)
{
	uint64_t released = mono_ms();

	unlink(w->flag);
	pthread_join(w->th, NULL);
	fprintf(stderr, "%s: %s %llu ms; the fill: %zd (%s) in %llu ms\n", what, measured,
		(unsigned long long)ms, w->got, w->err ? strerror(w->err) : "ok",
		(unsigned long long)w->ms);
	if (w->end < released)
		FAILF("%s: the fill returned %llu ms before the backend was let go: it did not "
		      "wait for it", what, (unsigned long long)(released - w->end));
}

/* The write again if it failed while the backend hung; close. */
static void fill_close(struct writer *w)
{
	if (w->got != 1)
		ASSERT_EQ(pwrite(w->fd, "y", 1, 500000), 1);	/* EIO while it hung: again */
	CHECK_SYS(close(w->fd));
}

/* The backend's f holds want (2 MiB); got is scratch of 2 MiB + 1. */
static void check_f(struct tmount *m, const char *want, char *got)
{
	int fd = CHECK_SYS(open(tm_bpath(m, "f"), O_RDONLY));
	size_t len = 0;

	for (ssize_t n; (n = read(fd, got + len, 2 * MiB + 1 - len)) > 0;)
		len += (size_t)n;
	close(fd);
	ASSERT_EQ(len, 2 * MiB);
	ASSERT_EQ(memcmp(got, want, len), 0);
}

int main(void)
{
	struct tmount m;
	char flag[PATH_MAX], env[PATH_MAX + 256];
	struct json_obj s;

	tm_require_fuse();
	tm_init(&m, "stall-fill");
	snprintf(flag, sizeof(flag), "%s/hold", m.root);
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=pread,hold=%s", flag);
	tm_mount(&m, "cache_size=16M,chunk_size=1M,drain_timeout=10", (const char *const[]){ env, NULL });

	ct_write_seeded(tm_path(&m, "f"), 2 * MiB, 1);
	tm_sync(&m);
	ct_write_seeded(tm_path(&m, "g"), 24 * MiB, 2);	/* evicts f's clean chunks */
	tm_sync(&m);
	ct_stats(&m, &s);
	if (ct_num(&s, "evictions") < 2)
		FAILF("f was not evicted (%.0f evictions)", ct_num(&s, "evictions"));
	json_free(&s);

	struct writer w = { .path = tm_path(&m, "f"), .flag = flag };
	w.fd = CHECK_SYS(open(w.path, O_WRONLY));
	ASSERT_EQ(pwrite(w.fd, "x", 1, 0), 1);
	fill_begin(&w);

	uint64_t t0 = mono_ms();
	struct stat st;
	CHECK_SYS(stat(w.path, &st));
	uint64_t stat_ms = mono_ms() - t0;
	t0 = mono_ms();
	ct_write_seeded(tm_path(&m, "other"), 64 * KiB, 3);
	uint64_t other_ms = mono_ms() - t0;
	fill_end(&w, "a dirty file's fill", "stat, then another file written and closed in",
		 stat_ms + other_ms);
	if (stat_ms >= BOUND_MS)
		FAILF("stat of the file took %llu ms while its writer waited for the backend",
		      (unsigned long long)stat_ms);
	if (other_ms >= BOUND_MS)
		FAILF("writing and closing another file took %llu ms meanwhile",
		      (unsigned long long)other_ms);
	ASSERT_EQ(st.st_size, 2 * MiB);
	fill_close(&w);
	tm_sync(&m);

	/* f: the published bytes, with x at 0 and y at 500,000. */
	char *want = malloc(2 * MiB);
	ASSERT_TRUE(want != NULL);
	fill_pattern(want, 2 * MiB, 1, 0);
	want[0] = 'x';
	want[500000] = 'y';
	char *got = malloc(2 * MiB + 1);
	ASSERT_TRUE(got != NULL);
	check_f(&m, want, got);
	ct_check_seeded(tm_bpath(&m, "other"), 64 * KiB, 3);

	/* A clean file's fill: its byte at 0 is published, its chunk kept. */
	ct_write_seeded(tm_path(&m, "g"), 24 * MiB, 4);	/* evicts f again */
	tm_sync(&m);
	w.fd = CHECK_SYS(open(w.path, O_WRONLY));
	ASSERT_EQ(pwrite(w.fd, "z", 1, 0), 1);
	CHECK_SYS(close(w.fd));
	tm_sync(&m);
	w.fd = CHECK_SYS(open(w.path, O_WRONLY));
	fill_begin(&w);
	t0 = mono_ms();
	ct_stats(&m, &s);
	json_free(&s);
	uint64_t stats_ms = mono_ms() - t0;
	t0 = mono_ms();
	int rfd = CHECK_SYS(open(w.path, O_RDONLY));
	CHECK_SYS(close(rfd));
	uint64_t open_ms = mono_ms() - t0;
	fill_end(&w, "a clean file's fill", "stats, then an open and close in", stats_ms + open_ms);
	if (stats_ms >= BOUND_MS)
		FAILF("a stats read took %llu ms while a writer filled from the backend",
		      (unsigned long long)stats_ms);
	if (open_ms >= BOUND_MS)
		FAILF("opening the file took %llu ms while its writer filled from the backend",
		      (unsigned long long)open_ms);
	fill_close(&w);
	tm_sync(&m);
	want[0] = 'z';

	/* The spiller: f's dirty chunk first on its list, then another open file's. */
	ct_write_seeded(tm_path(&m, "g"), 24 * MiB, 5);	/* evicts f again */
	tm_sync(&m);
	w.fd = CHECK_SYS(open(w.path, O_WRONLY));
	ASSERT_EQ(pwrite(w.fd, "q", 1, 0), 1);
	int gfd = CHECK_SYS(open(tm_path(&m, "open6"), O_WRONLY | O_CREAT | O_TRUNC, 0644));
	char *six = malloc(6 * MiB);
	ASSERT_TRUE(six != NULL);
	fill_pattern(six, 6 * MiB, 6, 0);
	ASSERT_EQ(write(gfd, six, 6 * MiB), (ssize_t)(6 * MiB));
	fill_begin(&w);
	t0 = mono_ms();
	ct_write_seeded(tm_path(&m, "h"), 12 * MiB, 7);
	uint64_t room_ms = mono_ms() - t0;
	fill_end(&w, "the spiller behind a fill", "a 12 MiB write needing room in", room_ms);
	if (room_ms >= BOUND_MS)
		FAILF("a write needing room took %llu ms while another file's fill hung: the "
		      "spiller waited for that file", (unsigned long long)room_ms);
	fill_close(&w);
	CHECK_SYS(close(gfd));
	tm_sync(&m);
	want[0] = 'q';
	ct_check_seeded(tm_bpath(&m, "h"), 12 * MiB, 7);
	size_t glen;
	char *gback = read_file(tm_bpath(&m, "open6"), &glen);
	ASSERT_TRUE(gback && glen == 6 * MiB && !memcmp(gback, six, glen));
	free(gback);
	free(six);
	check_f(&m, want, got);
	free(got);
	free(want);
	tm_stop(&m);
	tm_cleanup(&m);
	printf("ok: stat and other files do not wait for a writer's fill from a hung backend\n");
	return 0;
}
