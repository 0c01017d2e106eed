/*
 * fds.c — the daemon's open descriptors grow with what is open, not with
 * what it ever published.  3,000 small files are written and closed; once
 * they are durable the daemon holds a few dozen descriptors, not 3,000 (a
 * mount that publishes 100,000 files must not hit the fd limit).  Every file
 * still reads back whole through the mount (its backend file is reopened
 * when needed), and while 100 of them are held open, reads of ranges that
 * left the cache still work after they are unlinked.
 */
#include "tests/core/core_util.h"

#include <dirent.h>

#define NFILES 3000
#define FSIZE 5000

static int daemon_fds(pid_t pid)
{
	char path[64];
	int n = 0;
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	ASSERT_TRUE(d != NULL);
	while (readdir(d))
		n++;
	closedir(d);
	return n - 2;
}

int main(void)
{
	struct tmount m;
	char name[64];
	int held[100];

	tm_require_fuse();
	tm_start(&m, "fds", "cache_size=64M", NULL);
	CHECK_SYS(mkdir(tm_path(&m, "many"), 0755));
	int base = daemon_fds(m.pid);
	for (int i = 0; i < NFILES; i++) {
		snprintf(name, sizeof(name), "many/f%04d", i);
		cu_write_pattern(tm_path(&m, name), FSIZE, (uint64_t)i + 1);
	}
	tm_sync(&m);
	int after = daemon_fds(m.pid);
	fprintf(stderr, "daemon descriptors: %d before, %d after publishing %d files\n", base,
		after, NFILES);
	ASSERT_LT(after, base + 64);
	for (int i = 0; i < NFILES; i++) {
		snprintf(name, sizeof(name), "many/f%04d", i);
		cu_check_pattern(tm_path(&m, name), FSIZE, (uint64_t)i + 1);
	}
	ASSERT_LT(daemon_fds(m.pid), base + 64);

	/* Held open, then unlinked: still readable (their descriptors are kept). */
	for (int i = 0; i < 100; i++) {
		snprintf(name, sizeof(name), "many/f%04d", i);
		held[i] = cu_open(tm_path(&m, name), O_RDONLY);
	}
	for (int i = 0; i < 100; i++) {
		snprintf(name, sizeof(name), "many/f%04d", i);
		CHECK_SYS(unlink(tm_path(&m, name)));
	}
	tm_sync(&m);
	for (int i = 0; i < 100; i++) {
		char what[32];
		snprintf(what, sizeof(what), "unlinked f%04d", i);
		cu_check_range(held[i], what, 0, FSIZE, (uint64_t)i + 1);
		cu_close(held[i]);
	}
	tm_stop(&m);
	tm_cleanup(&m);
	return 0;
}
