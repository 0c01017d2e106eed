/*
 * harness.c — mounting the daemon for tests, and small helpers (harness.h).
 */
#include "tests/harness.h"

#include <dirent.h>
#include <grp.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static struct tmount *current;

uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

const char *tm_daemon_bin(void)
{
	const char *b = getenv("CKPTFS_BIN");
	return b && *b ? b : CKPTFS_BIN_DEFAULT;
}

void tm_fail_hook(void)
{
	struct tmount *m = current;
	char line[1024];
	FILE *f;

	if (!m || !m->log[0] || !(f = fopen(m->log, "r")))
		return;
	fprintf(stderr, "---- daemon log (%s) ----\n", m->log);
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fclose(f);
	if (m->pid > 0) {
		kill(m->pid, SIGKILL);
		if (fork() == 0) {
			execlp("fusermount3", "fusermount3", "-uz", m->mnt, (char *)NULL);
			_exit(127);
		}
		wait(NULL);
	}
}

void tm_require_fuse(void)
{
	if (access("/dev/fuse", R_OK | W_OK) != 0) {
		fprintf(stderr, "skip: /dev/fuse is not available\n");
		exit(TEST_SKIP);
	}
	if (system("command -v fusermount3 >/dev/null 2>&1") != 0) {
		fprintf(stderr, "skip: fusermount3 is not installed\n");
		exit(TEST_SKIP);
	}
}

void tm_init(struct tmount *m, const char *name)
{
	const char *tmp = getenv("TMPDIR");
	memset(m, 0, sizeof(*m));
	snprintf(m->root, sizeof(m->root), "%s/ckptfs-%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
	if (!mkdtemp(m->root))
		FAILF("mkdtemp %s: %s", m->root, strerror(errno));
	snprintf(m->backend, sizeof(m->backend), "%s/backend", m->root);
	snprintf(m->mnt, sizeof(m->mnt), "%s/mnt", m->root);
	snprintf(m->log, sizeof(m->log), "%s/daemon.log", m->root);
	CHECK_SYS(mkdir(m->backend, 0755));
	CHECK_SYS(mkdir(m->mnt, 0755));
	current = m;
}

static bool is_mounted(const char *path)
{
	char line[4096];
	FILE *f = fopen("/proc/self/mountinfo", "r");
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		char *p = line;
		for (int i = 0; i < 4 && p; i++)
			p = strchr(p + 1, ' ');
		if (p && strncmp(p + 1, path, strlen(path)) == 0 && p[1 + strlen(path)] == ' ')
			found = strstr(line, "fuse.ckptfs") != NULL;
	}
	fclose(f);
	return found;
}

void tm_mount(struct tmount *m, const char *extra_opts, const char *const *env)
{
	const char *io = getenv("CKPTFS_TEST_IO");
	int logfd;

	snprintf(m->opts, sizeof(m->opts), "cache_size=256M%s%s%s%s",
		 io && *io ? ",io=" : "", io && *io ? io : "",
		 extra_opts && *extra_opts ? "," : "", extra_opts ? extra_opts : "");
	logfd = open(m->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (logfd < 0)
		FAILF("open %s: %s", m->log, strerror(errno));
	m->pid = fork();
	if (m->pid == 0) {
		dup2(logfd, 1);
		dup2(logfd, 2);
		for (const char *const *e = env; e && *e; e++)
			putenv((char *)*e);
		execl(tm_daemon_bin(), "ckptfs", m->backend, m->mnt, "-f", "-o", m->opts, (char *)NULL);
		fprintf(stderr, "exec %s: %s\n", tm_daemon_bin(), strerror(errno));
		_exit(127);
	}
	close(logfd);
	for (uint64_t t0 = mono_ms(); !is_mounted(m->mnt);) {
		int st;
		if (waitpid(m->pid, &st, WNOHANG) == m->pid) {
			m->pid = 0;
			FAILF("daemon exited before mounting (status %d)", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
		}
		if (mono_ms() - t0 > 20000)
			FAILF("daemon did not mount %s within 20 s", m->mnt);
		usleep(10000);
	}
}

void tm_start(struct tmount *m, const char *name, const char *extra_opts, const char *const *env)
{
	tm_init(m, name);
	tm_mount(m, extra_opts, env);
}

static int run_cmd(const char *const *argv)
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);
		if (fd >= 0)
			dup2(fd, 1);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	if (waitpid(pid, &st, 0) < 0)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void tm_stop(struct tmount *m)
{
	const char *argv[] = { "fusermount3", "-u", m->mnt, NULL };
	int st = 0;

	for (int tries = 0; run_cmd(argv) != 0; tries++) {
		if (tries > 100)
			FAILF("fusermount3 -u %s keeps failing", m->mnt);
		usleep(50000);	/* busy: a previous close may still be in flight */
	}
	for (uint64_t t0 = mono_ms();;) {
		pid_t r = waitpid(m->pid, &st, WNOHANG);
		if (r == m->pid)
			break;
		if (mono_ms() - t0 > 120000)
			FAILF("daemon did not exit within 120 s of unmount");
		usleep(10000);
	}
	m->pid = 0;
	m->exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	if (m->exit_status != 0)
		FAILF("daemon exited with status %d after unmount", m->exit_status);
}

void tm_kill(struct tmount *m)
{
	const char *argv[] = { "fusermount3", "-uz", m->mnt, NULL };
	int st;

	if (m->pid > 0) {
		kill(m->pid, SIGKILL);
		waitpid(m->pid, &st, 0);
		m->pid = 0;
	}
	run_cmd(argv);
}

void tm_cleanup(struct tmount *m)
{
	char cmd[PATH_MAX + 32];
	if (m->pid > 0)
		tm_kill(m);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", m->root);
	if (system(cmd) != 0)
		fprintf(stderr, "warning: could not remove %s\n", m->root);
	if (current == m)
		current = NULL;
}

void tm_sync(struct tmount *m)
{
	int fd = CHECK_SYS(open(m->mnt, O_RDONLY | O_DIRECTORY));
	CHECK_SYS(fsync(fd));
	close(fd);
}

static const char *path_join(const char *base, const char *rel)
{
	static __thread char bufs[8][PATH_MAX * 2];	/* per thread: tests call it from threads */
	static __thread int next;
	char *b = bufs[next++ % 8];
	snprintf(b, PATH_MAX * 2, "%s/%s", base, rel);
	return b;
}

const char *tm_path(struct tmount *m, const char *rel) { return path_join(m->mnt, rel); }
const char *tm_bpath(struct tmount *m, const char *rel) { return path_join(m->backend, rel); }

int tm_run(const char *const *argv, char **out)
{
	size_t cap = 1 << 16, have = 0;
	char *buf = malloc(cap);
	int p[2], st;
	pid_t pid;

	CHECK_SYS(pipe(p));
	if ((pid = fork()) == 0) {
		int sink = out ? p[1] : open("/dev/null", O_WRONLY);
		dup2(sink, 1);
		dup2(sink, 2);
		close(p[0]);
		close(p[1]);	/* a child that forks must not hold the pipe open */
		execvp(argv[0], (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(p[1]);
	for (;;) {
		if (cap - have < 4096)
			buf = realloc(buf, cap *= 2);
		ssize_t n = read(p[0], buf + have, cap - have - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		have += (size_t)n;
	}
	buf[have] = '\0';
	close(p[0]);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (out)
		*out = buf;
	else
		free(buf);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int tm_run_daemon(const char *const *argv, char *err, size_t errlen)
{
	const char *v[64];
	char *out;
	size_t n = 0;
	int st;

	v[0] = tm_daemon_bin();
	for (n = 1; argv[n] && n < CKPT_ARRAY_LEN_TM(v) - 1; n++)
		v[n] = argv[n];
	v[n] = NULL;
	st = tm_run(v, &out);
	snprintf(err, errlen, "%s", out);
	free(out);
	return st;
}

/* ---- file helpers ---- */

void fill_pattern(void *buf, size_t len, uint64_t seed, uint64_t offset)
{
	unsigned char *p = buf;
	for (size_t i = 0; i < len; i++) {
		uint64_t x = (offset + i) / 8 * 0x9E3779B97F4A7C15ull ^ seed;
		x ^= x >> 29;
		x *= 0xBF58476D1CE4E5B9ull;
		x ^= x >> 32;
		p[i] = (unsigned char)(x >> (((offset + i) % 8) * 8));
	}
}

void write_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
	const char *p = buf;
	if (fd < 0)
		FAILF("open %s: %s", path, strerror(errno));
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0)
			FAILF("write %s: %s", path, strerror(errno));
		p += n;
		len -= (size_t)n;
	}
	if (close(fd) < 0)
		FAILF("close %s: %s", path, strerror(errno));
}

void *read_file(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY);
	size_t cap = 1 << 16, have = 0;
	char *buf;

	if (fd < 0)
		return NULL;
	buf = malloc(cap);
	for (;;) {
		if (have == cap)
			buf = realloc(buf, cap *= 2);
		ssize_t n = read(fd, buf + have, cap - have);
		if (n < 0) {
			int e = errno;
			free(buf);
			close(fd);
			errno = e;
			return NULL;
		}
		if (n == 0)
			break;
		have += (size_t)n;
	}
	close(fd);
	*len = have;
	return buf;
}

bool file_exists(const char *path) { return access(path, F_OK) == 0; }

void assert_files_equal(const char *a, const char *b)
{
	size_t la, lb;
	char *pa = read_file(a, &la), *pb = read_file(b, &lb);
	if (!pa)
		FAILF("cannot read %s: %s", a, strerror(errno));
	if (!pb)
		FAILF("cannot read %s: %s", b, strerror(errno));
	if (la != lb)
		FAILF("%s has %zu bytes, %s has %zu", a, la, b, lb);
	for (size_t i = 0; i < la; i++)
		if (pa[i] != pb[i])
			FAILF("%s and %s differ at byte %zu", a, b, i);
	free(pa);
	free(pb);
}

int count_temp_files(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;
	if (!d)
		return 0;
	while ((de = readdir(d)))
		if (strstr(de->d_name, ".ckptfs."))
			n++;
	closedir(d);
	return n;
}

int tm_as_user(uid_t uid, gid_t gid, int (*fn)(void *arg), void *arg)
{
	pid_t pid = fork();
	int st;

	if (pid < 0)
		FAILF("fork: %s", strerror(errno));
	if (pid == 0) {
		if (setgroups(1, &gid) < 0 || setresgid(gid, gid, gid) < 0 ||
		    setresuid(uid, uid, uid) < 0)
			_exit(125);
		umask(0);
		_exit(fn(arg) & 0xff);
	}
	CHECK_SYS(waitpid(pid, &st, 0));
	if (WIFEXITED(st) && WEXITSTATUS(st) == 125)
		FAILF("could not become uid %u gid %u", (unsigned)uid, (unsigned)gid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
