/*
 * dirload.c — directories are read from the backend outside the namespace
 * lock (issue 9 item 6; fs/node.c): a lookup in a directory not loaded yet,
 * while the backend is stalled, waits for the backend alone — it does not
 * block operations in other, loaded directories — and two lookups of the
 * same directory share one read.
 *
 * The backend holds cold/ with files, never looked at through the mount.
 * Once loaded/ is loaded, every backend call starts to take STALL_MS
 * (CKPTFS_FAULT op=any,delay_ms=STALL_MS while a flag exists).  Two threads
 * then look up cold/f0 and cold/f1; meanwhile the main thread creates,
 * writes, closes, stats, lists, renames and removes in loaded/, each well
 * under STALL_MS (a wait on the backend would take at least STALL_MS).
 * The two lookups end together (one read of cold/, not two in turn) and
 * find the right files.
 */
#include "tests/multinode/mn_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>

#define STALL_MS 2000
#define BOUND_MS (STALL_MS * 9 / 10)	/* a call that waited for the backend took STALL_MS */

static struct tmount m;
static double done_ms[2];
static int found[2];

static void *look(void *arg)
{
	long i = (long)arg;
	char rel[32];
	struct stat st;

	snprintf(rel, sizeof(rel), "cold/f%ld", i);
	found[i] = stat(tm_path(&m, rel), &st) == 0 && st.st_size == 1000 + i;
	done_ms[i] = mn_now_ms();
	return NULL;
}

static void took(double t0, const char *what)
{
	double ms = mn_now_ms() - t0;
	if (ms >= BOUND_MS)
		FAILF("%s took %.0f ms while a lookup of an unloaded directory waited for the "
		      "stalled backend: it waited too", what, ms);
}

int main(void)
{
	char flag[PATH_MAX], env[PATH_MAX + 64], name[64];
	pthread_t th[2];

	tm_require_fuse();
	tm_init(&m, "dirload");
	snprintf(flag, sizeof(flag), "%s/stall", m.root);
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=any,delay_ms=%d,while=%s", STALL_MS, flag);
	CHECK_SYS(mkdir(tm_bpath(&m, "cold"), 0755));
	CHECK_SYS(mkdir(tm_bpath(&m, "loaded"), 0755));
	for (int i = 0; i < 2; i++) {
		snprintf(name, sizeof(name), "cold/f%d", i);
		mn_write(tm_bpath(&m, name), 1000 + (size_t)i, 1);
	}
	tm_mount(&m, NULL, (const char *[]){ env, NULL });
	DIR *d = opendir(tm_path(&m, "loaded"));
	ASSERT_TRUE(d != NULL);
	closedir(d);
	cu_write_text(flag, "");
	usleep(100 * 1000);

	double t_start = mn_now_ms();
	for (long i = 0; i < 2; i++) {
		CHECK_SYS(pthread_create(&th[i], NULL, look, (void *)i) == 0 ? 0 : -1);
		usleep(50 * 1000);
	}
	usleep(200 * 1000);		/* both lookups are waiting for cold/ now */
	for (int i = 0; i < 5; i++) {
		snprintf(name, sizeof(name), "loaded/g%d", i);
		double t0 = mn_now_ms();
		int fd = CHECK_SYS(open(tm_path(&m, name), O_CREAT | O_WRONLY | O_TRUNC, 0644));
		CHECK_SYS(write(fd, "data", 4));
		CHECK_SYS(close(fd));
		took(t0, "create, write and close in a loaded directory");
		struct stat st;
		t0 = mn_now_ms();
		CHECK_SYS(stat(tm_path(&m, name), &st));
		d = opendir(tm_path(&m, "loaded"));
		ASSERT_TRUE(d != NULL);
		while (readdir(d))
			;
		closedir(d);
		took(t0, "stat and readdir of a loaded directory");
	}
	double t0 = mn_now_ms();
	CHECK_SYS(rename(tm_path(&m, "loaded/g0"), tm_path(&m, "loaded/moved")));
	CHECK_SYS(mkdir(tm_path(&m, "loaded/sub"), 0755));
	CHECK_SYS(unlink(tm_path(&m, "loaded/g1")));
	took(t0, "rename, mkdir and unlink in a loaded directory");
	if (done_ms[0] || done_ms[1])
		fprintf(stderr, "note: a lookup of cold/ ended early (%.0f ms)\n",
			(done_ms[0] ? done_ms[0] : done_ms[1]) - t_start);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	ASSERT_TRUE(found[0] && found[1]);
	double gap = done_ms[1] > done_ms[0] ? done_ms[1] - done_ms[0] : done_ms[0] - done_ms[1];
	fprintf(stderr, "lookups of the unloaded directory took %.0f and %.0f ms (stall %d ms per "
		"backend call), %.0f ms apart\n", done_ms[0] - t_start, done_ms[1] - t_start, STALL_MS,
		gap);
	if (gap > STALL_MS / 2)
		FAILF("the second lookup of cold/ read it again instead of waiting for the first read");
	unlink(flag);
	tm_sync(&m);
	ASSERT_TRUE(file_exists(tm_bpath(&m, "loaded/moved")));
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "loaded/g1")));
	tm_stop(&m);
	tm_cleanup(&m);
	return 0;
}
