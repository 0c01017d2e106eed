/*
 * fds.c — the daemon's open descriptors grow with what is open, not with
 * what it ever published.  3,000 small files are written and closed; once
 * they are durable the daemon holds a few dozen descriptors, not 3,000 (a
 * mount that publishes 100,000 files must not hit the fd limit).  Every file
 * still reads back whole through the mount (its backend file is reopened
 * when needed), and while 100 of them are held open, reads of ranges that
 * left the cache still work after they are unlinked.
 *
 * Directories the same: a checkpoint of one directory per array (as
 * tensorstore writes them) over a daemon whose fd limit is 256, soft and
 * hard, must publish whole — 640 directories, a chain 120 deep, renames and
 * removals of directories whose fds were closed for room — with the
 * daemon's descriptors under the limit.  With one fd kept per directory
 * the flushers would get EMFILE and the stream would block.  A daemon
 * started with a low soft limit raises it to the hard one.
 *
 * And pending versions: with a mkdir refused (EACCES) and 1,000 files
 * written behind it, under the same limit, the daemon must not write them
 * all to temporary files, each holding a descriptor until it can be
 * published: it stops at its cap (a quarter of the limit), every close reports the
 * refusal and none EMFILE, and once the cause is gone all are published.
 */
#include "tests/core/core_util.h"

#include <dirent.h>
#include <sys/resource.h>

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

/* The daemon's soft and hard RLIMIT_NOFILE, from /proc. */
static void daemon_nofile(pid_t pid, unsigned long *soft, unsigned long *hard)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/limits", (int)pid);
	FILE *f = fopen(path, "r");
	ASSERT_TRUE(f != NULL);
	*soft = *hard = 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Max open files %lu %lu", soft, hard) == 2)
			break;
	fclose(f);
	ASSERT_TRUE(*soft > 0);
}

#define TOPS 16
#define SUBS 40
#define DEPTH 120

static void dir_file(struct tmount *m, const char *dir, uint64_t seed)
{
	char p[2100];
	snprintf(p, sizeof(p), "%s/0.0", dir);
	cu_write_pattern(tm_path(m, p), 3000 + seed % 977, seed);
}

/* Many directories under a daemon limited to 256 descriptors. */
static void many_dirs(void)
{
	struct tmount m;
	struct rlimit rl;
	char p[2048];
	unsigned long soft, hard;

	/* A low soft limit alone is raised by the daemon. */
	ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
	struct rlimit low = { .rlim_cur = 256, .rlim_max = rl.rlim_max };
	ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
	tm_start(&m, "fds-raise", "cache_size=64M", NULL);
	daemon_nofile(m.pid, &soft, &hard);
	ASSERT_EQ(soft, hard);
	ASSERT_EQ(hard, (unsigned long)rl.rlim_max);
	tm_stop(&m);
	tm_cleanup(&m);

	/* Both at 256: the daemon must live within it (not undone: this runs last). */
	low.rlim_max = 256;
	ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
	tm_start(&m, "fds-dirs", "cache_size=64M", NULL);
	ASSERT_EQ(cu_stat(&m, "dir_fds_cap"), 32);
	for (int t = 0; t < TOPS; t++) {
		snprintf(p, sizeof(p), "arr%02d", t);
		CHECK_SYS(mkdir(tm_path(&m, p), 0755));
		for (int s = 0; s < SUBS; s++) {
			snprintf(p, sizeof(p), "arr%02d/c%02d", t, s);
			CHECK_SYS(mkdir(tm_path(&m, p), 0755));
			dir_file(&m, p, (uint64_t)(t * SUBS + s + 1));
		}
	}
	size_t len = 0;
	p[0] = '\0';
	for (int d = 0; d < DEPTH; d++) {
		len += (size_t)snprintf(p + len, sizeof(p) - len, "%sd%d", d ? "/" : "", d);
		CHECK_SYS(mkdir(tm_path(&m, p), 0755));
	}
	dir_file(&m, p, 9999);
	tm_sync(&m);
	ASSERT_GE(cu_stat(&m, "dir_fd_closes"), 1);

	/* Move and remove directories whose fds were closed, then write below them. */
	char from[64], to[64];
	for (int t = 0; t < TOPS; t += 2) {
		snprintf(from, sizeof(from), "arr%02d", t);
		snprintf(to, sizeof(to), "moved%02d", t);
		CHECK_SYS(rename(tm_path(&m, from), tm_path(&m, to)));
		snprintf(p, sizeof(p), "moved%02d/c%02d", t, SUBS - 1);
		dir_file(&m, p, (uint64_t)(50000 + t));
		snprintf(p, sizeof(p), "moved%02d/c00/0.0", t);
		CHECK_SYS(unlink(tm_path(&m, p)));
		snprintf(p, sizeof(p), "moved%02d/c00", t);
		CHECK_SYS(rmdir(tm_path(&m, p)));
	}
	CHECK_SYS(rename(tm_path(&m, "d0"), tm_path(&m, "deep")));
	strcpy(p, "deep");
	for (int d = 1; d < DEPTH; d++)
		snprintf(p + strlen(p), sizeof(p) - strlen(p), "/d%d", d);
	dir_file(&m, p, 12345);
	tm_sync(&m);

	int fds = daemon_fds(m.pid);
	fprintf(stderr, "directories: %d daemon descriptors, %llu directory fds closed for room\n",
		fds, (unsigned long long)cu_stat(&m, "dir_fd_closes"));
	ASSERT_LT(fds, 256);
	ASSERT_LE(cu_stat(&m, "dir_fds_open"), 32);
	cu_assert_backend_is_mount(&m);
	tm_stop(&m);
	tm_cleanup(&m);
}

#define BEHIND 1000

/* Many versions behind a blocked operation, under the limit many_dirs() set. */
static void blocked_backlog(void)
{
	struct tmount m;
	char p[128], flag[sizeof(m.root) + 16];
	char buf[4096];
	unsigned refused = 0;

	tm_init(&m, "fds-backlog");
	snprintf(flag, sizeof(flag), "%s/refuse", m.root);
	cu_write_text(flag, "");
	const char *env[] = { cu_fault_env("op=mkdir,err=EACCES,name=blockme,while=%s", flag), NULL };
	tm_mount(&m, "cache_size=256M", env);
	unsigned cap = (unsigned)cu_stat(&m, "temp_fds_cap");
	ASSERT_EQ(cap, 64);
	CHECK_SYS(mkdir(tm_path(&m, "d"), 0755));
	tm_sync(&m);
	uint64_t durable = cu_stat(&m, "seq_durable");
	CHECK_SYS(mkdir(tm_path(&m, "blockme"), 0755));
	for (int i = 0; i < BEHIND; i++) {
		snprintf(p, sizeof(p), "d/f%04d", i);
		fill_pattern(buf, sizeof(buf), (uint64_t)i + 7, 0);
		int fd = cu_open(tm_path(&m, p), O_CREAT | O_WRONLY | O_TRUNC);
		cu_pwrite_all(fd, buf, sizeof(buf), 0);
		if (close(fd) < 0) {
			if (errno != EACCES)
				FAILF("close of %s: %s (the refusal, EACCES, expected)", p, strerror(errno));
			refused++;
		}
	}
	usleep(300000);		/* the flushers had time to go as far as they may */
	unsigned open_now = (unsigned)cu_stat(&m, "temp_fds_open");
	int fds = daemon_fds(m.pid);
	fprintf(stderr, "behind a refused mkdir: %u closes reported it, %u temporary files open "
		"(cap %u), %d daemon descriptors\n", refused, open_now, cap, fds);
	ASSERT_GE(refused, BEHIND / 2);
	ASSERT_LE(open_now, cap + 1);
	ASSERT_LT(fds, 256);
	ASSERT_EQ(cu_stat(&m, "seq_durable"), durable);	/* nothing overtook the mkdir */

	CHECK_SYS(unlink(flag));	/* the cause is gone: the slow retry publishes it all */
	cu_sync_retry(&m, 60000);
	ASSERT_EQ(cu_stat(&m, "temp_fds_open"), 0);	/* published: none counts any more */
	for (int i = 0; i < BEHIND; i += 97) {
		snprintf(p, sizeof(p), "d/f%04d", i);
		cu_check_pattern(tm_bpath(&m, p), sizeof(buf), (uint64_t)i + 7);
	}
	cu_assert_backend_is_mount(&m);
	tm_stop(&m);
	tm_cleanup(&m);
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
	many_dirs();
	blocked_backlog();
	return 0;
}
