/*
 * gpu_util.c — helpers of the GPU session tests; see gpu_util.h.
 */
#include "tests/gpu/gpu_util.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

const char *gt_mock_path(void)
{
	return CKPTFS_MOCK_DRIVER;
}

void gt_init(void)
{
	tm_require_fuse();
	setenv("CKPTFS_LIBCUDA", CKPTFS_MOCK_DRIVER, 0);
}

ckptfs_session *gt_open(struct tmount *m, uint64_t arena_bytes)
{
	struct ckptfs_session_opts o = { .arena_bytes = arena_bytes, .device = -1 };
	ckptfs_session *s = ckptfs_session_open_ex(m->mnt, &o);

	if (!s)
		FAILF("ckptfs_session_open(%s): %s", m->mnt, ckptfs_last_error());
	return s;
}

static void make_parents(const char *path)
{
	char buf[PATH_MAX + 256];
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = strchr(buf + 1, '/'); p; p = strchr(p + 1, '/')) {
		*p = '\0';
		mkdir(buf, 0755);
		*p = '/';
	}
}

int gt_create(struct tmount *m, const char *rel)
{
	char path[PATH_MAX + 256];	/* not tm_path: threads create files at once */

	snprintf(path, sizeof(path), "%s/%s", m->mnt, rel);
	make_parents(path);
	return (int)CHECK_SYS(open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644));
}

void gt_close_wait(ckptfs_session *s, int fd)
{
	int r = ckptfs_file_close(s, fd, NULL, 0, NULL, NULL);
	if (r < 0)
		FAILF("ckptfs_file_close(%d): %s", fd, ckptfs_last_error());
	if ((r = ckptfs_wait_files(s)) < 0)
		FAILF("ckptfs_wait_files: %d: %s", r, ckptfs_last_error());
}

void gt_expect_err(long r, int err, const char *needle, const char *what, int line)
{
	const char *msg = ckptfs_last_error();
	if (r != -err)
		FAILF("line %d: %s: expected -%s, got %ld (%s)", line, what, strerror(err), r, msg);
	if (needle && !strstr(msg, needle))
		FAILF("line %d: %s: the message \"%s\" does not mention \"%s\"", line, what, msg, needle);
}

void gt_check_backend(struct tmount *m, const char *const *rel, void *const *buf,
		      const size_t *len, size_t n)
{
	char *out = NULL;

	tm_sync(m);
	for (size_t i = 0; i < n; i++)
		cu_check_content(tm_bpath(m, rel[i]), buf[i], len[i]);
	int r = it_verify(m->backend, 0, &out);
	for (size_t i = 0; i < n; i++)
		if (strcmp(it_verdict(out, rel[i]), "OK") != 0)
			FAILF("verify %s: \"%s\" (exit %d)\n%s", rel[i], it_verdict(out, rel[i]), r, out);
	free(out);
}

static const char *watchdog_what = "";

static void watchdog_fire(int sig)
{
	(void)sig;
	if (write(2, watchdog_what, strlen(watchdog_what)) < 0 || write(2, "\n", 1) < 0) {
		/* nothing else to do */
	}
	_exit(1);
}

void gt_watchdog(unsigned seconds, const char *what)
{
	watchdog_what = what;
	signal(SIGALRM, watchdog_fire);
	alarm(seconds);
}

long long gt_stat(struct tmount *m, const char *key)
{
	return it_json_num(it_stats(m), key);
}

pid_t gt_trainer(struct tmount *m, void (*fn)(struct tmount *m, int out), int *from)
{
	int pp[2];

	CHECK_SYS(pipe(pp));
	pid_t pid = CHECK_SYS(fork());
	if (pid == 0) {
		close(pp[0]);
		fn(m, pp[1]);
		_exit(99);
	}
	close(pp[1]);
	*from = pp[0];
	return pid;
}

void gt_trainer_report(pid_t pid, int from, void *buf, size_t len)
{
	if (read(from, buf, len) != (ssize_t)len) {
		int st;
		waitpid(pid, &st, 0);
		FAILF("the trainer failed before the kill (status %d)", WEXITSTATUS(st));
	}
}
