/*
 * blockw.c — a writer blocked on a full cache (see blockw.h).
 */
#include "tests/integrity/blockw.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

static const char *fill_name(unsigned i)
{
	static char name[32];
	snprintf(name, sizeof(name), "fill%u", i);
	return name;
}

void bw_fill(struct tmount *m, int may_fail)
{
	for (unsigned i = 0; i < BW_NFILL; i++) {
		int r = it_write_pattern(tm_path(m, fill_name(i)), 100 + i, BW_FILL_SIZE);
		if (r < 0 && (!may_fail || r != -may_fail))
			FAILF("close of %s failed: %s", fill_name(i), strerror(-r));
	}
}

void bw_check_fill(const char *root)
{
	char path[PATH_MAX * 2];

	for (unsigned i = 0; i < BW_NFILL; i++) {
		snprintf(path, sizeof(path), "%s/%s", root, fill_name(i));
		if (!it_has_pattern(path, 100 + i, BW_FILL_SIZE))
			FAILF("%s does not hold what was written", path);
	}
}

void bw_recover(struct tmount *m, const char *gate)
{
	it_gate_set(gate, false);
	cu_sync_retry(m, 30000);
	bw_check_fill(m->backend);
}

static void on_signal(int sig) { (void)sig; }

struct bw_msg {
	int err;
	uint64_t written;
};

static void writer_main(int wfd, const char *path, uint64_t total, int restart_sig)
{
	struct bw_msg msg = { 0, 0 };
	char *buf = malloc(MiB);
	int fd;

	if (restart_sig) {
		struct sigaction sa = { .sa_handler = on_signal, .sa_flags = SA_RESTART };
		sigemptyset(&sa.sa_mask);
		sigaction(restart_sig, &sa, NULL);
	}
	if ((fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644)) < 0)
		msg.err = errno;
	while (fd >= 0 && msg.written < total) {
		size_t k = (size_t)(total - msg.written < MiB ? total - msg.written : MiB);
		fill_pattern(buf, k, BW_WRITER_SEED, msg.written);
		ssize_t n = pwrite(fd, buf, k, (off_t)msg.written);
		if (n <= 0) {
			msg.err = n < 0 ? errno : EIO;
			break;
		}
		msg.written += (uint64_t)n;
	}
	if (write(wfd, &msg, sizeof(msg)) != (ssize_t)sizeof(msg))
		_exit(3);
	if (fd >= 0)
		close(fd);
	_exit(0);
}

/* Fork a child running fn(report fd, ...) and keep the read end of its report pipe. */
static void spawn(struct bw_child *c, void (*fn)(int wfd, const char *path, uint64_t n, int sig),
		  const char *path, uint64_t n, int sig)
{
	int p[2];

	CHECK_SYS(pipe(p));
	c->t_start = mono_ms();
	c->m = NULL;
	if ((c->pid = fork()) == 0) {
		close(p[0]);
		fn(p[1], path, n, sig);
	}
	CHECK_SYS(c->pid);
	close(p[1]);
	c->rfd = p[0];
}

void bw_spawn(struct bw_child *c, struct tmount *m, const char *name, uint64_t total,
	      int restart_sig)
{
	uint64_t waits0 = cu_stat(m, "backpressure_waits");

	spawn(c, writer_main, tm_path(m, name), total, restart_sig);
	c->m = m;
	c->waits0 = waits0;
}

static void reader_main(int wfd, const char *path, uint64_t cap, int sig)
{
	struct bw_msg msg = { 0, 0 };
	char *buf = calloc(1, cap);
	int fd = open(path, O_RDONLY);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, cap - 1);

	(void)sig;
	if (n < 0)
		msg.err = errno;
	else
		msg.written = (uint64_t)n;
	if (write(wfd, &msg, sizeof(msg)) != (ssize_t)sizeof(msg) ||
	    write(wfd, buf, msg.written) != (ssize_t)msg.written)
		_exit(3);
	_exit(0);
}

void bw_spawn_reader(struct bw_child *c, const char *path)
{
	spawn(c, reader_main, path, 4096, 0);
}

void bw_spawn_drain(struct bw_child *c, struct tmount *m)
{
	bw_spawn_reader(c, tm_path(m, ".ckptfs/drain"));
}

const char *bw_text(struct bw_child *c)
{
	static char text[4096];
	size_t have = 0;
	ssize_t n;

	/* Until the child exits (end of file): it writes the text right after its report. */
	while (have < sizeof(text) - 1 && (n = read(c->rfd, text + have, sizeof(text) - 1 - have)) > 0)
		have += (size_t)n;
	text[have] = '\0';
	return text;
}

bool bw_report(struct bw_child *c, unsigned timeout_ms, int *err, uint64_t *written)
{
	struct pollfd pf = { .fd = c->rfd, .events = POLLIN };
	struct bw_msg msg;

	if (poll(&pf, 1, (int)timeout_ms) <= 0)
		return false;
	if (read(c->rfd, &msg, sizeof(msg)) != (ssize_t)sizeof(msg))
		FAILF("the writer (pid %d) died without reporting", (int)c->pid);
	*err = msg.err;
	*written = msg.written;
	return true;
}

/* Is pid asleep waiting for the answer to a FUSE request? */
static bool in_fuse_request(pid_t pid)
{
	char path[64], wchan[128] = "";
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/wchan", (int)pid);
	if ((f = fopen(path, "r")) == NULL)
		return false;
	if (!fgets(wchan, sizeof(wchan), f))
		wchan[0] = '\0';
	fclose(f);
	return strstr(wchan, "request_wait_answer") != NULL;
}

void bw_assert_blocked(struct bw_child *c, unsigned ms)
{
	struct pollfd pf = { .fd = c->rfd, .events = POLLIN };
	uint64_t t0 = mono_ms();

	while (c->m ? cu_stat(c->m, "backpressure_waits") <= c->waits0 : !in_fuse_request(c->pid)) {
		if (poll(&pf, 1, 0) != 0)
			FAILF("the child was expected to block, but it returned");
		if (mono_ms() - t0 > 30000)
			FAILF("the child did not come to wait %s within 30 s",
			      c->m ? "for cache space" : "in a FUSE request");
		usleep(20000);
	}
	if (poll(&pf, 1, (int)ms) != 0)
		FAILF("the child was expected to block on the full cache, but it returned");
}

/* waitpid within timeout_ms: true with *status, false if it is still running. */
static bool reap_within(pid_t pid, unsigned timeout_ms, int *status)
{
	for (uint64_t t0 = mono_ms(); waitpid(pid, status, WNOHANG) != pid;) {
		if (mono_ms() - t0 > timeout_ms)
			return false;
		usleep(10000);
	}
	return true;
}

bool bw_reap(struct bw_child *c, unsigned timeout_ms, int *status)
{
	if (!reap_within(c->pid, timeout_ms, status))
		return false;
	close(c->rfd);
	c->pid = 0;
	return true;
}

int bw_wait_daemon(struct tmount *m, unsigned timeout_ms)
{
	int st;

	if (!reap_within(m->pid, timeout_ms, &st))
		return -1;
	m->pid = 0;
	m->exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	return m->exit_status;
}
