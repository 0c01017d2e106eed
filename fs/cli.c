/*
 * cli.c — shared pieces of the command-line tools (see cli.h).
 */
#include "fs/cli.h"
#include "fs/mounts.h"
#include "cache/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CKPTFS_FSTYPE "fuse.ckptfs"

void cli_put_path(FILE *f, const char *s)
{
	const char *p = s, *end = s + strlen(s);

	while (p < end) {
		unsigned char c = (unsigned char)*p;
		size_t k = utf8_valid_len(p, (size_t)(end - p));
		if (c == '\\')
			fputs("\\\\", f);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c == '\t')
			fputs("\\t", f);
		else if (c == '\r')
			fputs("\\r", f);
		else if (!k || c < 0x20 || c == 0x7f)
			fprintf(f, "\\x%02x", c);
		else {
			fwrite(p, 1, k, f);
			p += k;
			continue;
		}
		p++;
	}
}

/*
 * The real path of path's directory, with path's last name: never looks at
 * that name itself, so a mount whose daemon does not answer is found
 * without waiting for it.  False where the last name is not a plain name.
 */
static bool real_parent_path(const char *path, char *out, size_t len)
{
	char dir[PATH_MAX], real[PATH_MAX];
	size_t n = strlen(path);

	while (n > 1 && path[n - 1] == '/')
		n--;
	if (n == 0 || n >= sizeof(dir))
		return false;
	memcpy(dir, path, n);
	dir[n] = '\0';
	char *slash = strrchr(dir, '/');
	const char *base = slash ? slash + 1 : dir;
	if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
		return false;
	if (slash == dir)
		snprintf(real, sizeof(real), "/");
	else if (slash) {
		*slash = '\0';
		if (!realpath(dir, real))
			return false;
	} else if (!getcwd(real, sizeof(real)))
		return false;
	return snprintf(out, len, "%s%s%s", real, strcmp(real, "/") ? "/" : "", base) < (int)len;
}

int cli_mount(const char *prog, const char *path, char *mnt, size_t mlen, char *backend,
	      size_t blen)
{
	char real[PATH_MAX];
	struct mountent *m;
	int n, i = -1;

	if ((n = mounts_read(&m)) < 0) {
		fprintf(stderr, "%s: cannot read /proc/self/mountinfo: %s\n", prog, strerror(-n));
		return 1;
	}
	if (real_parent_path(path, real, sizeof(real)))
		i = mounts_find(m, n, real);
	if (i < 0 && !realpath(path, real)) {
		fprintf(stderr, "%s: '%s': %s\n", prog, path, strerror(errno));
		mounts_free(m, n);
		return CLI_USAGE;
	}
	if (i < 0)
		i = mounts_find(m, n, real);
	if (i < 0 || strcmp(m[i].fstype, CKPTFS_FSTYPE) != 0) {
		fprintf(stderr, "%s: '%s' is not a ckptfs mount\n", prog, path);
		mounts_free(m, n);
		return CLI_USAGE;
	}
	snprintf(mnt, mlen, "%s", real);
	if (backend)
		snprintf(backend, blen, "%s", m[i].source);
	mounts_free(m, n);
	return 0;
}

int cli_all_mounts(char ***out)
{
	struct mountent *m;
	int n = mounts_read(&m), k = 0;

	*out = NULL;
	for (int i = 0; i < n; i++) {
		if (strcmp(m[i].fstype, CKPTFS_FSTYPE) != 0)
			continue;
		*out = xrealloc(*out, (size_t)(k + 1) * sizeof(char *));
		(*out)[k++] = xstrdup(m[i].target);
	}
	if (n >= 0)
		mounts_free(m, n);
	return k;
}

/* The child's side: msg (if any) to path, its answer to out, messages to stderr; its exit status. */
static int read_child(const char *prog, const char *path, const char *msg, int out)
{
	char chunk[65536];
	int fd = open(path, (msg ? O_RDWR : O_RDONLY) | O_CLOEXEC);

	if (fd < 0) {
		fprintf(stderr, "%s: cannot open %s: %s\n", prog, path, strerror(errno));
		return 1;
	}
	if (msg && write(fd, msg, strlen(msg)) < 0) {
		fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(errno));
		return 1;
	}
	/* The answer from offset 0, whatever the write moved the offset to. */
	for (off_t at = 0;;) {
		ssize_t n = pread(fd, chunk, sizeof(chunk), at);
		if (n < 0 && errno == EINTR)
			continue;
		if (n > 0)
			at += n;
		if (n < 0) {
			fprintf(stderr, "%s: reading %s: %s\n", prog, path, strerror(errno));
			return 1;
		}
		if (n == 0)
			return 0;
		for (ssize_t done = 0; done < n;) {
			ssize_t w = write(out, chunk + done, (size_t)(n - done));
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0)
				return 1;
			done += w;
		}
	}
}

static volatile sig_atomic_t *cancel_flag;

void cli_cancel_on(volatile sig_atomic_t *flag)
{
	cancel_flag = flag;
}

static bool cancelled(void)
{
	return cancel_flag && *cancel_flag;
}

char *cli_read_ctl(const char *prog, const char *mnt, const char *name, double timeout_s)
{
	return cli_exchange_ctl(prog, mnt, name, NULL, timeout_s);
}

char *cli_exchange_ctl(const char *prog, const char *mnt, const char *name, const char *msg,
		       double timeout_s)
{
	char path[PATH_MAX], chunk[65536];
	struct strbuf b = { 0 };
	int p[2], status = 0;
	bool timed_out = false, interrupted = false;
	pid_t pid;

	snprintf(path, sizeof(path), "%s/.ckptfs/%s", mnt, name);
	fflush(NULL);	/* the child must not write our buffered output again */
	if (pipe2(p, O_CLOEXEC) < 0 || (pid = fork()) < 0) {
		fprintf(stderr, "%s: reading %s: %s\n", prog, path, strerror(errno));
		return NULL;
	}
	if (pid == 0) {
		close(p[0]);
		_exit(read_child(prog, path, msg, p[1]));
	}
	close(p[1]);
	/*
	 * 0: as long as it takes while the daemon is alive (not for the stats
	 * that tell it).  Polls of at most 250 ms: a signal that sets the
	 * cancel flag just before one is seen at the next (poll(2) is never
	 * restarted, but a signal between the look and the poll is missed).
	 */
	bool probe = timeout_s <= 0 && strcmp(name, "stats") != 0;
	uint64_t start = now_ns(), deadline = timeout_s > 0 ? start + (uint64_t)(timeout_s * 1e9) : 0;
	uint64_t probe_at = start + CLI_LIVE_CHECK_S * 1000000000ull;
	for (;;) {
		struct pollfd pf = { .fd = p[0], .events = POLLIN };
		uint64_t now = now_ns();
		if (!cancelled() && deadline && now >= deadline) {
			timed_out = true;
		} else if (!cancelled() && probe && now >= probe_at) {
			char *st = cli_read_ctl(prog, mnt, "stats", CLI_LIVE_ANSWER_S);
			free(st);
			if (st) {
				probe_at = now_ns() + CLI_LIVE_CHECK_S * 1000000000ull;
				continue;
			}
			timed_out = true;
		}
		if (cancelled())
			timed_out = interrupted = true;
		if (timed_out) {
			kill(pid, SIGKILL);
			break;
		}
		uint64_t until = deadline ? deadline : probe ? probe_at : now + 250000000ull;
		int ms = (int)CKPT_MIN((until - now) / 1000000 + 1, 250);
		int r = poll(&pf, 1, ms);
		if (r < 0 && errno != EINTR) {
			timed_out = true;	/* (cannot happen on a pipe: never wait on the child) */
			kill(pid, SIGKILL);
			break;
		}
		if (r <= 0)
			continue;	/* (EINTR: the flag is looked at first) */
		ssize_t n = read(p[0], chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		sb_printf(&b, "%.*s", (int)n, chunk);
	}
	close(p[0]);
	/*
	 * A killed child whose request the daemon had already taken waits for
	 * the answer all the same (the kernel cannot take it back): after a
	 * timeout, look for its exit a little, then leave it.
	 */
	for (int tries = 0; !timed_out || tries < 20; tries++) {
		pid_t w = waitpid(pid, &status, timed_out ? WNOHANG : 0);
		if (w == pid || (w < 0 && errno != EINTR))
			break;
		if (w == 0)
			usleep(50000);
	}
	if (interrupted)
		fprintf(stderr, "%s: interrupted while waiting for %s to answer .ckptfs/%s\n", prog,
			mnt, name);
	else if (timed_out && timeout_s > 0)
		fprintf(stderr, "%s: %s does not answer: no reply to .ckptfs/%s in %g s\n", prog, mnt,
			name, timeout_s);
	else if (timed_out)
		fprintf(stderr, "%s: %s does not answer: no reply to .ckptfs/%s, nor to its stats "
			"within %g s\n", prog, mnt, name, CLI_LIVE_ANSWER_S);
	if (timed_out || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		sb_free(&b);
		return NULL;
	}
	return b.s ? b.s : xstrdup("");
}
