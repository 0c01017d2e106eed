/*
 * stopsig.c — the signals that stop the daemon (fs/signals.c).
 *
 *  1. Every thread of a serving daemon blocks SIGINT, SIGTERM and SIGHUP
 *     (/proc/PID/task/ * /status, SigBlk) but one, the thread that takes
 *     them with sigwaitinfo() (wchan: sigtimedwait), so none can land in
 *     a thread that exits before its handler runs (under ThreadSanitizer
 *     that lost a SIGTERM and the daemon served on).
 *  2. Each of SIGINT, SIGHUP and SIGTERM ends the session: the log names
 *     the signal, the daemon unmounts, drains and exits 0, and the file
 *     closed before it is on the backend.
 *  3. A second SIGTERM while the drain waits for a hung backend (calls on
 *     its temporary files wait while a file exists) does not cut the drain
 *     short: it is logged, and once the backend answers the daemon exits 0
 *     with the file durable.
 *  4. One while the daemon is still starting (before it mounts) ends it by
 *     the signal's default action; the next mount comes up cleanly.
 */
#include "tests/integrity/blockw.h"

#include <dirent.h>
#include <signal.h>

#define STOP_MASK ((1ull << (SIGINT - 1)) | (1ull << (SIGTERM - 1)) | (1ull << (SIGHUP - 1)))

/*
 * Threads of pid (*threads), and how many of them leave a stop signal
 * unblocked other than one waiting in sigtimedwait (*waiting: while it
 * waits, the kernel shows the set it waits for as unblocked).
 */
static unsigned threads_unblocked(pid_t pid, unsigned *threads, unsigned *waiting)
{
	char dir[64], path[PATH_MAX], wchan[64] = "", *text;
	unsigned open = 0;
	size_t len;
	DIR *d;
	struct dirent *e;

	*threads = *waiting = 0;
	snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
	ASSERT_TRUE((d = opendir(dir)) != NULL);
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s/status", dir, e->d_name);
		if (!(text = read_file(path, &len)))
			continue;	/* it exited meanwhile */
		text = realloc(text, len + 1);
		text[len] = '\0';
		char *blk = strstr(text, "SigBlk:");
		ASSERT_TRUE(blk != NULL);
		unsigned long long mask = strtoull(blk + 7, NULL, 16);
		snprintf(path, sizeof(path), "%s/%s/wchan", dir, e->d_name);
		char *w = read_file(path, &len);
		snprintf(wchan, sizeof(wchan), "%.*s", w ? (int)len : 0, w ? w : "");
		free(w);
		if ((mask & STOP_MASK) != STOP_MASK && strstr(wchan, "sigtimedwait")) {
			(*waiting)++;
		} else if ((mask & STOP_MASK) != STOP_MASK) {
			fprintf(stderr, "thread %s of %d does not block the stop signals "
				"(SigBlk %llx, in %s)\n", e->d_name, (int)pid, mask, wchan);
			open++;
		}
		(*threads)++;
		free(text);
	}
	closedir(d);
	return open;
}

static bool log_within(struct tmount *m, const char *needle, unsigned ms)
{
	for (uint64_t end = mono_ms() + ms; mono_ms() < end; usleep(20000))
		if (it_log_count(m, needle) > 0)
			return true;
	return false;
}

static void stop_by(int sig, const char *name)
{
	struct tmount m;
	char want[64];
	unsigned threads, waiting;

	tm_start(&m, "stopsig", NULL, NULL);
	ASSERT_EQ(it_write_pattern(tm_path(&m, "f"), (uint64_t)sig, 300 * KiB), 0);
	if (sig == SIGTERM) {	/* the pool of request workers, flushers, publisher...: all block them */
		ASSERT_EQ(threads_unblocked(m.pid, &threads, &waiting), 0u);
		ASSERT_EQ(waiting, 1u);		/* the signal thread */
		ASSERT_TRUE(threads > 5);
	}
	CHECK_SYS(kill(m.pid, sig));
	int rc = bw_wait_daemon(&m, 20000);
	if (rc != 0)
		FAILF("%s: the daemon exited %d (want 0 within 20 s)", name, rc);
	snprintf(want, sizeof(want), "%s: unmounting", strsignal(sig));
	if (it_log_count(&m, want) != 1)
		FAILF("%s: the log does not say \"%s\" once", name, want);
	ASSERT_TRUE(it_log_count(&m, "drained: everything is durable") == 1);
	ASSERT_TRUE(it_has_pattern(tm_bpath(&m, "f"), (uint64_t)sig, 300 * KiB));
	tm_cleanup(&m);
}

static void second_sigterm(void)
{
	struct tmount m;
	char hold[PATH_MAX], opts[64];

	tm_init(&m, "stopsig-drain");
	snprintf(hold, sizeof(hold), "%s/hold", m.root);
	const char *env[] = { cu_fault_env("op=pwrite|fdatasync|openat,name=.ckptfs.,hold=%s", hold), NULL };
	snprintf(opts, sizeof(opts), "drain_timeout=60,io=pwrite");
	tm_mount(&m, opts, env);
	write_file(hold, "", 0);	/* calls on temporary files wait from here on */
	ASSERT_EQ(it_write_pattern(tm_path(&m, "f"), 7, MiB), 0);
	CHECK_SYS(kill(m.pid, SIGTERM));
	if (!log_within(&m, "; draining ", 10000))
		FAILF("no drain began within 10 s of SIGTERM");
	CHECK_SYS(kill(m.pid, SIGTERM));
	if (!log_within(&m, "Terminated while draining: the drain goes on", 5000))
		FAILF("the second SIGTERM is not logged as ignored within 5 s");
	usleep(300 * 1000);
	ASSERT_TRUE(kill(m.pid, 0) == 0);	/* still draining: the signal did not end it */
	CHECK_SYS(unlink(hold));		/* the backend answers */
	int rc = bw_wait_daemon(&m, 20000);
	if (rc != 0)
		FAILF("the daemon exited %d after the drain (want 0)", rc);
	ASSERT_TRUE(it_has_pattern(tm_bpath(&m, "f"), 7, MiB));
	tm_cleanup(&m);
}

/*
 * A SIGTERM while the daemon is still starting (its read of the node's
 * lease held): nothing is mounted, so it ends by the signal's default
 * action at once; the next mount of that backend comes up and stops cleanly.
 */
static void startup_sigterm(void)
{
	struct tmount m;
	char hold[PATH_MAX], env_fault[PATH_MAX + 64];
	int logfd;

	tm_init(&m, "stopsig-start");
	snprintf(hold, sizeof(hold), "%s/hold", m.root);
	snprintf(env_fault, sizeof(env_fault), "%s", cu_fault_env("op=any,name=lease,hold=%s", hold));
	write_file(hold, "", 0);
	CHECK_SYS(logfd = open(m.log, O_WRONLY | O_CREAT | O_APPEND, 0644));
	CHECK_SYS(m.pid = fork());
	if (m.pid == 0) {
		dup2(logfd, 1);
		dup2(logfd, 2);
		putenv(env_fault);
		execl(tm_daemon_bin(), "ckptfs", m.backend, m.mnt, "-f", "-o", "cache_size=64M",
		      (char *)NULL);
		_exit(127);
	}
	close(logfd);
	usleep(1000 * 1000);
	ASSERT_TRUE(kill(m.pid, 0) == 0);	/* starting: held in the lease read */
	ASSERT_TRUE(it_log_count(&m, "mounted ") == 0);
	CHECK_SYS(kill(m.pid, SIGTERM));
	int rc = bw_wait_daemon(&m, 5000);
	if (rc != 128 + SIGTERM)
		FAILF("SIGTERM during the start: the daemon ended with %d (want %d, killed by it)",
		      rc, 128 + SIGTERM);
	CHECK_SYS(unlink(hold));
	tm_mount(&m, NULL, NULL);	/* the killed start left nothing that stops the next */
	ASSERT_EQ(it_write_pattern(tm_path(&m, "g"), 9, 100 * KiB), 0);
	tm_stop(&m);
	ASSERT_TRUE(it_has_pattern(tm_bpath(&m, "g"), 9, 100 * KiB));
	tm_cleanup(&m);
}

int main(void)
{
	tm_require_fuse();
	stop_by(SIGTERM, "SIGTERM");
	stop_by(SIGINT, "SIGINT");
	stop_by(SIGHUP, "SIGHUP");
	second_sigterm();
	startup_sigterm();
	return 0;
}
