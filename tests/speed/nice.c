/*
 * nice — the flushers run below the threads that answer requests
 * (flush_nice, backend/flush.c): with the default, every thread named
 * ckptfs-flush has nice 10 and the request threads (ckptfs-fuse, or the
 * ring threads) nice 0; flush_nice=0 leaves the flushers at 0; flush_nice=3
 * gives 3; flush_nice=20 and flush_nice=x are refused with exit 2, naming
 * the option.
 */
#include "tests/core/core_util.h"

#include <dirent.h>

/* Nice of each of the daemon's threads named `name` (prefix) must be want; how many there are. */
static int expect_nice(pid_t pid, const char *name, long want)
{
	char dir[64], path[PATH_MAX], buf[1024];
	int seen = 0;
	DIR *d;
	struct dirent *e;

	snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
	d = opendir(dir);
	ASSERT_TRUE(d != NULL);
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s/comm", dir, e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;	/* the thread ended */
		bool match = fgets(buf, sizeof(buf), f) && !strncmp(buf, name, strlen(name));
		fclose(f);
		if (!match)
			continue;
		snprintf(path, sizeof(path), "%s/%s/stat", dir, e->d_name);
		if (!(f = fopen(path, "r")))
			continue;
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = '\0';
		/* After the ")" closing comm: state is field 3, nice field 19. */
		char *p = strrchr(buf, ')');
		ASSERT_TRUE(p != NULL);
		long v = 0;
		p += 2;
		for (int field = 3; field < 19; field++)
			p = strchr(p, ' ') + 1;
		v = strtol(p, NULL, 10);
		if (v != want)
			FAILF("thread %s (%s) has nice %ld, expected %ld", e->d_name, name, v, want);
		seen++;
	}
	closedir(d);
	return seen;
}

static void mounted(const char *name, const char *opts, long want)
{
	struct tmount m;

	tm_start(&m, name, opts, NULL);
	cu_write_pattern(tm_path(&m, "f"), 8 * MiB, 1);	/* the flushers have run */
	tm_sync(&m);
	if (!expect_nice(m.pid, "ckptfs-flush", want))
		FAILF("no flusher thread (ckptfs-flush) in the daemon");
	/* Requests come through /dev/fuse or, where the admin enabled it, io_uring. */
	if (!expect_nice(m.pid, "ckptfs-fuse", 0) + !expect_nice(m.pid, "ckptfs-uring", 0) > 1)
		FAILF("no request thread (ckptfs-fuse or ckptfs-uring) in the daemon");
	tm_stop(&m);
	tm_cleanup(&m);
}

int main(void)
{
	tm_require_fuse();
	mounted("nice_default", NULL, 10);
	mounted("nice_0", "flush_nice=0", 0);
	mounted("nice_3", "flush_nice=3", 3);
	cu_expect_refused("flush_nice=20", "flush_nice");
	cu_expect_refused("flush_nice=x", "flush_nice");
	return 0;
}
