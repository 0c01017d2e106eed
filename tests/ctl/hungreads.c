/*
 * hungreads.c — requests that must read a hung backend end (P4: no wait is
 * unbounded), and they do not take the mount down with them.
 *
 * The backend holds directories d0..d7 (one file each) and a file `top`
 * with an xattr, published before the mount.  Once the root is listed,
 * every backend call hangs (CKPTFS_FAULT op=any,hold=: a call waits while
 * a flag exists, as on a hung NFS or Lustre server), with drain_timeout=2
 * and max_threads=4 (fewer FUSE workers than waiting requests):
 *
 *   - nine requests that need the backend — the first listing of six
 *     directories, the first open of `top`, the first read of its xattrs,
 *     a statfs (df) of the mount — each fail with EIO within a few
 *     drain_timeouts (they used to wait for
 *     as long as the backend hung, and four of them held every worker);
 *   - so do the four that need a backend file's data, through a descriptor
 *     of `data` (2 MiB) opened for writing before the hang (so no
 *     passthrough): three reads of a range the cache does not hold (with
 *     four workers, at most two such reads wait in their workers; the
 *     third is handed to a helper, fs/bread.c), and a write
 *     whose chunk must first be filled from the backend (the gap between
 *     it and a byte written before the hang) — these used to wait in
 *     their worker, the write holding the file's lock, for as long as the
 *     backend hung;
 *   - meanwhile requests that need no backend (creating, writing and closing
 *     a file, stat, the stats) are answered, at the latest once those
 *     workers are free;
 *   - the stats count the calls given up on and the ones still hanging, and
 *     ckptfs-stat says HUNG;
 *   - when the backend answers again, the same requests succeed, with the
 *     backend's contents, and `data` reaches the backend with both writes
 *     and nothing else changed;
 *   - a request waiting for a hung call at SIGTERM does not keep the daemon,
 *     nor does a read of file data in its worker (known hung once answered:
 *     the exit does not wait the 5 s stop bound for it): it exits, saying a
 *     backend call was left behind;
 *   - nor does a clean unmount whose last steps (the manifest's clean
 *     record) meet a hung backend: it exits 0 after drain_timeout, and the
 *     next mount recovers with nothing lost.
 */
#include "tests/ctl/ctl_util.h"
#include "cache/json.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#define DIRS 6			/* listed while hung: with open and getxattr, 8 requests */
#define BOUND_MS 20000		/* a hang, not a speed: EIO comes after ~2-4 s */

#define DATA (2 * MiB)

enum kind { LIST, OPEN, XATTR, READ, FILL, STATFS };

struct req {
	enum kind kind;
	char path[PATH_MAX];
	int fd;			/* READ, FILL: a descriptor of `data` opened before the hang */
	int err;		/* 0 or the errno it ended with */
	atomic_bool done;
	uint64_t ms;
	pthread_t th;
};

static void *req_main(void *arg)
{
	struct req *q = arg;
	uint64_t t0 = mono_ms();
	char v[64];

	errno = 0;
	if (q->kind == LIST) {
		DIR *d = opendir(q->path);
		if (d) {
			errno = 0;
			while (readdir(d))
				;
			closedir(d);
		}
	} else if (q->kind == OPEN) {
		int fd = open(q->path, O_RDONLY);
		if (fd >= 0) {
			errno = 0;
			if (read(fd, v, sizeof(v)) < 0)
				q->err = errno;
			close(fd);
		}
	} else if (q->kind == XATTR) {
		getxattr(q->path, "user.k", v, sizeof(v));
	} else if (q->kind == STATFS) {
		struct statvfs sv;
		statvfs(q->path, &sv);
	} else if (q->kind == READ) {
		char *buf = malloc(64 * 1024);
		pread(q->fd, buf, 64 * 1024, 1 * MiB + 4096);
		free(buf);
	} else {
		pwrite(q->fd, "y", 1, 200);
	}
	if (!q->err)
		q->err = errno;
	q->ms = mono_ms() - t0;
	atomic_store(&q->done, true);
	return NULL;
}

static void start(struct req *q, enum kind kind, const char *path, int fd)
{
	q->kind = kind;
	q->fd = fd;
	snprintf(q->path, sizeof(q->path), "%s", path);
	q->err = 0;
	atomic_init(&q->done, false);
	pthread_create(&q->th, NULL, req_main, q);
}

/* Wait for q; fail (letting the backend go first, so the test can end) if it hangs. */
static void finish(struct req *q, const char *flag, const char *what)
{
	for (uint64_t t0 = mono_ms(); !atomic_load(&q->done) && mono_ms() - t0 < BOUND_MS;)
		usleep(20000);
	if (!atomic_load(&q->done)) {
		unlink(flag);
		FAILF("%s of %s still waits for the hung backend after %d ms", what, q->path,
		      BOUND_MS);
	}
	pthread_join(q->th, NULL);
}

/* The daemon's wait status once it exits, or -1 if it still runs BOUND_MS after t0. */
static int wait_exit(pid_t pid, uint64_t t0)
{
	int status = -1;

	for (; mono_ms() - t0 < BOUND_MS; usleep(50000))
		if (waitpid(pid, &status, WNOHANG) == pid)
			return status;
	return -1;
}

static void populate(struct tmount *m)
{
	char rel[64];

	for (int i = 0; i < DIRS + 2; i++) {
		snprintf(rel, sizeof(rel), "d%d", i);
		CHECK_SYS(mkdir(tm_bpath(m, rel), 0755));
		snprintf(rel, sizeof(rel), "d%d/f", i);
		write_file(tm_bpath(m, rel), "in a directory\n", 15);
	}
	write_file(tm_bpath(m, "top"), "top of the backend\n", 19);
	ct_write_seeded(tm_bpath(m, "data"), DATA, 11);
	ct_write_seeded(tm_bpath(m, "data2"), DATA, 12);
	CHECK_SYS(setxattr(tm_bpath(m, "top"), "user.k", "v1", 2, 0));
}

/* Lists the root (loads it) without touching anything below it. */
static void list_root(struct tmount *m)
{
	DIR *d = opendir(m->mnt);
	int n = 0;

	ASSERT_TRUE(d != NULL);
	while (readdir(d))
		n++;
	closedir(d);
	ASSERT_GE(n, DIRS + 3);
}

static uint64_t stat_num(struct tmount *m, const char *key)
{
	struct json_obj s;
	ct_stats(m, &s);
	uint64_t v = (uint64_t)ct_num(&s, key);
	json_free(&s);
	return v;
}

int main(void)
{
	struct tmount m;
	char flag[PATH_MAX], env0[PATH_MAX + 64], rel[64], v[64];
	struct req q[DIRS + 7];
	struct stat st;

	tm_require_fuse();
	tm_init(&m, "ctl-hungreads");
	snprintf(flag, sizeof(flag), "%s/hold", m.root);
	snprintf(env0, sizeof(env0), "CKPTFS_FAULT=op=any,hold=%s", flag);
	/* The helpers left in a call at SIGTERM are left on purpose (no TSan thread-leak report). */
	const char *env[] = { env0, "TSAN_OPTIONS=halt_on_error=1:report_thread_leaks=0", NULL };
	populate(&m);
	tm_mount(&m, "drain_timeout=2,max_threads=4", env);
	list_root(&m);
	/* Open for writing (no passthrough); one byte written: a later write leaves a gap to fill. */
	int dfd = CHECK_SYS(open(tm_path(&m, "data"), O_RDWR));
	int dfd2 = CHECK_SYS(open(tm_path(&m, "data2"), O_RDWR));
	ASSERT_EQ(pwrite(dfd, "x", 1, 100), 1);
	ASSERT_EQ(stat_num(&m, "backend_calls_timed_out"), 0);

	ct_touch(flag);		/* the backend hangs from here on */
	for (int i = 0; i < DIRS; i++) {
		snprintf(rel, sizeof(rel), "d%d", i);
		start(&q[i], LIST, tm_path(&m, rel), -1);
	}
	start(&q[DIRS], OPEN, tm_path(&m, "top"), -1);
	start(&q[DIRS + 1], XATTR, tm_path(&m, "top"), -1);
	start(&q[DIRS + 2], READ, "data", dfd);
	start(&q[DIRS + 3], FILL, "data", dfd);
	start(&q[DIRS + 4], READ, "data", dfd);
	start(&q[DIRS + 5], READ, "data", dfd);
	start(&q[DIRS + 6], STATFS, m.mnt, -1);
	usleep(300 * 1000);

	/* Needs no backend: answered, at the latest when the workers are free again. */
	uint64_t t0 = mono_ms();
	ct_write_seeded(tm_path(&m, "new"), 100000, 7);
	CHECK_SYS(stat(tm_path(&m, "new"), &st));
	ASSERT_EQ(st.st_size, 100000);
	uint64_t stuck = stat_num(&m, "backend_calls_stuck");
	uint64_t nobackend_ms = mono_ms() - t0;
	if (nobackend_ms >= BOUND_MS)
		FAILF("create, write, close and stat waited %llu ms for the hung backend",
		      (unsigned long long)nobackend_ms);

	static const char *const what[] = { "a first listing", "a first open", "a first getxattr",
					    "a read of file data", "a write that fills its chunk", "a statfs" };
	uint64_t worst = 0;
	for (int i = 0; i < DIRS + 7; i++) {
		finish(&q[i], flag, what[q[i].kind]);
		if (q[i].err != EIO)
			FAILF("%s of %s over a hung backend: %s, expected EIO", what[q[i].kind],
			      q[i].path, strerror(q[i].err));
		worst = q[i].ms > worst ? q[i].ms : worst;
	}
	uint64_t timed_out = stat_num(&m, "backend_calls_timed_out");
	if (!stuck)
		stuck = stat_num(&m, "backend_calls_stuck");
	printf("over a hung backend (drain_timeout=2, 4 workers): 13 requests got EIO, the last "
	       "after %llu ms (the read of file data after %llu ms, the filling write after %llu "
	       "ms); create/write/close/stat meanwhile: %llu ms; calls given up on: %llu, "
	       "hanging: %llu\n", (unsigned long long)worst,
	       (unsigned long long)q[DIRS + 2].ms, (unsigned long long)q[DIRS + 3].ms,
	       (unsigned long long)nobackend_ms, (unsigned long long)timed_out,
	       (unsigned long long)stuck);
	ASSERT_GE(timed_out, DIRS + 5);
	ASSERT_GE(stuck, 1);
	struct ct_result r;
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-stat"), m.mnt, NULL });
	ct_expect_status(&r, 0, "ckptfs-stat over a hung backend");
	ct_expect_in(r.out, "HUNG: ", "ckptfs-stat over a hung backend");
	const char *hung = strstr(r.out, "HUNG: ");
	fprintf(stderr, "ckptfs-stat: %.*s\n", (int)strcspn(hung, "\n"), hung);
	ct_result_free(&r);

	/* The backend answers again: the same requests succeed, with its contents. */
	unlink(flag);
	usleep(500 * 1000);
	for (int i = 0; i < DIRS; i++) {
		snprintf(rel, sizeof(rel), "d%d/f", i);
		ASSERT_EQ(stat(tm_path(&m, rel), &st), 0);
		ASSERT_EQ(st.st_size, 15);
	}
	size_t len;
	char *text = read_file(tm_path(&m, "top"), &len);
	ASSERT_TRUE(text != NULL);
	ASSERT_EQ(len, 19);
	ASSERT_TRUE(!memcmp(text, "top of the backend\n", 19));
	free(text);
	ASSERT_EQ(ct_getxattr(tm_path(&m, "top"), "user.k", v, sizeof(v)), 2);
	struct statvfs sv;
	CHECK_SYS(statvfs(m.mnt, &sv));
	ASSERT_TRUE(sv.f_blocks > 0);
	ASSERT_STR_EQ(v, "v1");
	/* The data: the range read, the write made again; on the backend with nothing else changed. */
	char *want = malloc(DATA), *got = malloc(DATA);
	ASSERT_TRUE(want && got);
	fill_pattern(want, DATA, 11, 0);
	ASSERT_EQ(pread(dfd, got, 64 * 1024, 1 * MiB + 4096), 64 * 1024);
	ASSERT_TRUE(!memcmp(got, want + 1 * MiB + 4096, 64 * 1024));
	ASSERT_EQ(pwrite(dfd, "y", 1, 200), 1);
	CHECK_SYS(close(dfd));
	want[100] = 'x';
	want[200] = 'y';
	tm_sync(&m);
	text = read_file(tm_bpath(&m, "data"), &len);
	ASSERT_TRUE(text != NULL);
	ASSERT_EQ(len, DATA);
	if (memcmp(text, want, DATA))
		FAILF("data on the backend is not what was written before and after the hang");
	free(text);
	free(want);
	free(got);
	for (t0 = mono_ms(); stat_num(&m, "backend_calls_stuck") && mono_ms() - t0 < 5000;)
		usleep(50000);
	ASSERT_EQ(stat_num(&m, "backend_calls_stuck"), 0);

	/* SIGTERM while requests wait for a hung call: the daemon does not wait for them. */
	ct_touch(flag);
	start(&q[0], LIST, tm_path(&m, "d7"), -1);
	start(&q[1], READ, "data2", dfd2);
	usleep(500 * 1000);
	t0 = mono_ms();
	CHECK_SYS(kill(m.pid, SIGTERM));
	int status = wait_exit(m.pid, t0);
	uint64_t exit_ms = mono_ms() - t0;
	unlink(flag);
	if (status == -1)
		FAILF("the daemon still runs %d ms after SIGTERM, a request waiting for the "
		      "hung backend", BOUND_MS);
	finish(&q[0], flag, "a first listing");
	ASSERT_NE(q[0].err, 0);
	finish(&q[1], flag, "a read of file data");
	ASSERT_NE(q[1].err, 0);
	close(dfd2);
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_EQ(WEXITSTATUS(status), 0);	/* nothing was pending */
	/* The read is known hung once answered: the exit does not wait the 5 s stop bound for it. */
	if (exit_ms >= 4500)
		FAILF("SIGTERM with a read of file data hung in its worker: exit after %llu ms "
		      "(waited for a worker known to be hung)", (unsigned long long)exit_ms);
	printf("SIGTERM with requests waiting for the hung backend: exit 0 after %llu ms; the "
	       "listing got %s, the read %s\n", (unsigned long long)exit_ms, strerror(q[0].err),
	       strerror(q[1].err));
	text = read_file(m.log, &len);
	/* "a backend call of a request" (a helper) or "a request worker" (the read, in its own) */
	ASSERT_TRUE(text && strstr(text, "still blocked; the next mount runs recovery"));
	free(text);
	m.pid = 0;

	/* A clean unmount whose last steps (the manifest's clean record) meet a hung backend. */
	tm_mount(&m, "drain_timeout=2,max_threads=4", env);
	ct_write_seeded(tm_path(&m, "after"), 4096, 9);
	tm_sync(&m);		/* durable before the backend hangs */
	ct_touch(flag);
	t0 = mono_ms();
	ASSERT_EQ(tm_run((const char *const[]){ "fusermount3", "-u", m.mnt, NULL }, NULL), 0);
	status = wait_exit(m.pid, t0);
	exit_ms = mono_ms() - t0;
	unlink(flag);
	if (status == -1)
		FAILF("the daemon still runs %d ms after a clean unmount: its last steps wait for "
		      "the hung backend", BOUND_MS);
	m.pid = 0;
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_EQ(WEXITSTATUS(status), 0);	/* drained: everything was durable */
	text = read_file(m.log, &len);
	ASSERT_TRUE(text && strstr(text, "did not answer the exit's last steps"));
	free(text);
	printf("clean unmount, the backend hung after the drain: exit 0 after %llu ms\n",
	       (unsigned long long)exit_ms);
	tm_mount(&m, NULL, NULL);	/* recovery: nothing lost */
	ct_check_seeded(tm_path(&m, "after"), 4096, 9);
	tm_stop(&m);
	tm_cleanup(&m);
	return 0;
}
