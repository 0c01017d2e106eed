/*
 * ctl_util.c — helpers of the control-interface tests (see ctl_util.h).
 */
#include "tests/ctl/ctl_util.h"
#include "tests/digest_ref.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <xxhash.h>

/* ---- running programs ------------------------------------------------------ */

const char *ct_tool(const char *name)
{
	static char bufs[4][PATH_MAX];
	static int next;
	char *b = bufs[next++ % 4];
	const char *daemon = tm_daemon_bin(), *slash = strrchr(daemon, '/');
	int dir = slash ? (int)(slash - daemon) : 1;

	snprintf(b, PATH_MAX, "%.*s/%s", dir, slash ? daemon : ".", name);
	return b;
}

/* Read whatever is ready on fd into *buf; false once it is at end of file. */
static bool drain_pipe(int fd, char **buf, size_t *len)
{
	char chunk[8192];
	ssize_t n = read(fd, chunk, sizeof(chunk));

	if (n < 0 && errno == EINTR)
		return true;
	if (n <= 0)
		return false;
	*buf = realloc(*buf, *len + (size_t)n + 1);
	memcpy(*buf + *len, chunk, (size_t)n);
	*len += (size_t)n;
	(*buf)[*len] = '\0';
	return true;
}

void ct_run(struct ct_result *r, const char *const *argv)
{
	int po[2], pe[2], st;
	size_t lo = 0, le = 0;
	uint64_t t0 = mono_ms();
	pid_t pid;

	memset(r, 0, sizeof(*r));
	r->out = calloc(1, 1);
	r->err = calloc(1, 1);
	CHECK_SYS(pipe(po));
	CHECK_SYS(pipe(pe));
	if ((pid = CHECK_SYS(fork())) == 0) {
		dup2(po[1], 1);
		dup2(pe[1], 2);
		close(po[0]);
		close(pe[0]);
		execvp(argv[0], (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(po[1]);
	close(pe[1]);
	struct pollfd fds[2] = { { .fd = po[0], .events = POLLIN }, { .fd = pe[0], .events = POLLIN } };
	while (fds[0].fd >= 0 || fds[1].fd >= 0) {
		if (poll(fds, 2, -1) < 0 && errno != EINTR)
			FAILF("poll: %s", strerror(errno));
		for (int i = 0; i < 2; i++) {
			if (fds[i].fd < 0 || !fds[i].revents)
				continue;
			if (!drain_pipe(fds[i].fd, i ? &r->err : &r->out, i ? &le : &lo)) {
				close(fds[i].fd);
				fds[i].fd = -1;
			}
		}
	}
	CHECK_SYS(waitpid(pid, &st, 0));
	r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	r->ms = mono_ms() - t0;
}

void ct_result_free(struct ct_result *r)
{
	free(r->out);
	free(r->err);
	memset(r, 0, sizeof(*r));
}

void ct_expect_status(const struct ct_result *r, int status, const char *what)
{
	if (r->status != status)
		FAILF("%s: exit status %d, expected %d\n--- stdout ---\n%s--- stderr ---\n%s", what,
		      r->status, status, r->out, r->err);
}

void ct_expect_in(const char *text, const char *needle, const char *what)
{
	if (!strstr(text, needle))
		FAILF("%s lacks \"%s\":\n%s", what, needle, text);
}

/* ---- the control directory and JSON ----------------------------------------- */

char *ct_read_ctl(struct tmount *m, const char *name)
{
	char rel[64];
	size_t len;
	char *text;

	snprintf(rel, sizeof(rel), ".ckptfs/%s", name);
	if (!(text = read_file(tm_path(m, rel), &len)))
		FAILF("read %s: %s", tm_path(m, rel), strerror(errno));
	text = realloc(text, len + 1);
	text[len] = '\0';
	return text;
}

void ct_exchange(struct tmount *m, const char *name, const char *msg, struct json_obj *answer)
{
	char rel[64], buf[4096];
	int fd;
	ssize_t n;

	snprintf(rel, sizeof(rel), ".ckptfs/%s", name);
	fd = (int)CHECK_SYS(open(tm_path(m, rel), msg ? O_RDWR : O_RDONLY));
	if (msg && write(fd, msg, strlen(msg)) != (ssize_t)strlen(msg))
		FAILF("writing \"%s\" to %s: %s", msg, rel, strerror(errno));
	n = CHECK_SYS(pread(fd, buf, sizeof(buf) - 1, 0));
	close(fd);
	buf[n] = '\0';
	ct_parse_object(buf, (size_t)n, answer, rel);
}

void ct_parse_object(const char *text, size_t len, struct json_obj *out, const char *what)
{
	char err[128];

	if (json_parse(text, len, out, err, sizeof(err)) < 0)
		FAILF("%s is not one flat JSON object (%s): %.*s", what, err, (int)len, text);
}

void ct_stats(struct tmount *m, struct json_obj *out)
{
	char *text = ct_read_ctl(m, "stats");
	size_t len = strlen(text);

	if (!len || text[len - 1] != '\n')
		FAILF("stats does not end with a newline: %s", text);
	ct_parse_object(text, len, out, "stats");
	free(text);
}

double ct_stat(struct tmount *m, const char *key)
{
	struct json_obj s;

	ct_stats(m, &s);
	double v = ct_num(&s, key);
	json_free(&s);
	return v;
}

void ct_blocked_seq(struct tmount *m, char seq[32])
{
	struct json_obj s;

	ct_stats(m, &s);
	snprintf(seq, 32, "%.0f", ct_num(&s, "blocked_seq"));
	json_free(&s);
}

size_t ct_parse_lines(const char *text, struct json_obj **out, const char *what)
{
	size_t n = 0;

	*out = NULL;
	for (const char *p = text; *p;) {
		const char *nl = strchr(p, '\n');
		if (!nl)
			FAILF("%s: last line has no newline: %s", what, p);
		*out = realloc(*out, (n + 1) * sizeof(**out));
		ct_parse_object(p, (size_t)(nl - p), &(*out)[n++], what);
		p = nl + 1;
	}
	return n;
}

void ct_lines_free(struct json_obj *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		json_free(&v[i]);
	free(v);
}

static const struct json_member *member(const struct json_obj *o, const char *key,
					enum json_type type)
{
	const struct json_member *v = json_get(o, key);
	if (!v)
		FAILF("JSON object has no \"%s\"", key);
	if (v->type != type)
		FAILF("\"%s\" is a %s, expected a %s", key, json_type_name(v->type), json_type_name(type));
	return v;
}

double ct_num(const struct json_obj *o, const char *key) { return member(o, key, JSON_NUM)->num; }
const char *ct_str(const struct json_obj *o, const char *key) { return member(o, key, JSON_STR)->str; }
bool ct_bool(const struct json_obj *o, const char *key) { return member(o, key, JSON_BOOL)->b; }

/* ---- files ------------------------------------------------------------------ */

static char *seeded(size_t size, uint64_t seed)
{
	char *buf = malloc(size ? size : 1);
	if (!buf)
		FAILF("out of memory for %zu bytes", size);
	fill_pattern(buf, size, seed, 0);
	return buf;
}

void ct_write_seeded(const char *path, size_t size, uint64_t seed)
{
	char *buf = seeded(size, seed);
	write_file(path, buf, size);
	free(buf);
}

/* NULL if path holds `size` bytes of `seed`, else why not (static). */
static const char *seeded_mismatch(const char *path, size_t size, uint64_t seed)
{
	static char why[PATH_MAX + 128];
	size_t have, i;
	char *got = read_file(path, &have), *want;

	if (!got) {
		snprintf(why, sizeof(why), "%s: %s", path, strerror(errno));
		return why;
	}
	want = seeded(size, seed);
	for (i = 0; i < size && i < have && got[i] == want[i]; i++)
		;
	if (have != size)
		snprintf(why, sizeof(why), "%s has %zu bytes, expected %zu", path, have, size);
	else if (i < size)
		snprintf(why, sizeof(why), "%s differs from pattern %" PRIu64 " at byte %zu", path,
			 seed, i);
	free(got);
	free(want);
	return have == size && i == size ? NULL : why;
}

void ct_check_seeded(const char *path, size_t size, uint64_t seed)
{
	const char *why = seeded_mismatch(path, size, seed);
	if (why)
		FAILF("%s", why);
}

void ct_touch(const char *path)
{
	close((int)CHECK_SYS(open(path, O_CREAT | O_WRONLY, 0644)));
}

/* ---- xattrs and digests ------------------------------------------------------ */

int ct_getxattr(const char *path, const char *key, char *buf, size_t len)
{
	ssize_t n = getxattr(path, key, buf, len - 1);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return (int)n;
}

bool ct_wait_state(const char *path, const char *state, unsigned timeout_ms)
{
	char v[64];

	for (uint64_t t0 = mono_ms(); mono_ms() - t0 <= timeout_ms; usleep(20000))
		if (ct_getxattr(path, "user.ckptfs.state", v, sizeof(v)) >= 0 && !strcmp(v, state))
			return true;
	return false;
}

void ct_digest_hex(const char *path, char hex[33])
{
	int r = td_digest_file(path, hex);

	if (r < 0)
		FAILF("read %s: %s", path, strerror(-r));
}

/* ---- the daemon ------------------------------------------------------------- */

void ct_mount_shared(struct tmount *m, const char *opts, const char *const *env, mode_t mnt_mode)
{
	char o[512];

	snprintf(o, sizeof(o), "allow_other%s%s", opts ? "," : "", opts ? opts : "");
	CHECK_SYS(chmod(m->root, 0755));	/* other users must reach the mount */
	tm_mount(m, o, env);
	CHECK_SYS(chmod(m->mnt, mnt_mode));
}

static void mount_with_flag(struct tmount *m, const char *name, const char *rule, const char *key,
			    char flag[PATH_MAX], bool shared)
{
	char env[PATH_MAX + 256];

	tm_init(m, name);
	snprintf(flag, PATH_MAX, "%s/fault-flag", m->root);
	snprintf(env, sizeof(env), "CKPTFS_FAULT=%s,%s=%s", rule, key, flag);
	if (shared)
		ct_mount_shared(m, NULL, (const char *const[]){ env, NULL }, 0755);
	else
		tm_mount(m, NULL, (const char *const[]){ env, NULL });
}

void ct_mount_flagged(struct tmount *m, const char *name, const char *rule, char flag[PATH_MAX])
{
	mount_with_flag(m, name, rule, "while", flag, false);
}

void ct_mount_flagged_shared(struct tmount *m, const char *name, const char *rule,
			     char flag[PATH_MAX])
{
	mount_with_flag(m, name, rule, "while", flag, true);
}

void ct_mount_held(struct tmount *m, const char *name, const char *rule, char flag[PATH_MAX])
{
	mount_with_flag(m, name, rule, "hold", flag, false);
}
