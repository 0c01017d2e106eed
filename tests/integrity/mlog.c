/*
 * mlog.c — a history of manifest records written through the manifest's
 * API, for the manifest tests (see mlog.h).
 */
#include "tests/integrity/mlog.h"

#include <fcntl.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static uint64_t clock_last;

/* Wall-clock nanoseconds, strictly increasing (children share the clock). */
uint64_t ml_time(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	clock_last = t > clock_last ? t : clock_last + 1;
	return clock_last;
}

void ml_open(struct mlog *l, const char *root, const char *node, const char *id)
{
	memset(l, 0, sizeof(*l));
	l->root = root;
	l->root_fd = (int)CHECK_SYS(open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
	snprintf(l->id, sizeof(l->id), "%s", id);
	int r = manifest_open(&l->m, l->root_fd, node, id, &l->rep);
	if (r < 0)
		FAILF("manifest_open(%s, %s): %s", root, node, strerror(-r));
}

void ml_rec(struct mlog *l, const char *fmt, ...)
{
	char buf[8192];
	va_list ap;
	int n, r;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	ASSERT_TRUE(n > 0 && (size_t)n < sizeof(buf));
	if ((r = manifest_append(&l->m, buf, (size_t)n)) < 0)
		FAILF("manifest_append(%s): %s", buf, strerror(-r));
}

void ml_put(const char *root, const char *path, const char *content)
{
	char full[PATH_MAX];

	snprintf(full, sizeof(full), "%s/%s", root, path);
	for (char *p = strchr(full + strlen(root) + 1, '/'); p; p = strchr(p + 1, '/')) {
		*p = '\0';
		if (mkdir(full, 0755) < 0 && errno != EEXIST)
			FAILF("mkdir %s: %s", full, strerror(errno));
		*p = '/';
	}
	write_file(full, content, strlen(content));
}

uint64_t ml_file(struct mlog *l, const char *path, const char *content, bool apply)
{
	char hex[33];

	td_digest_buf(content, strlen(content), hex);	/* the manifest's digest (format 2) */
	l->seq++;
	ml_rec(l, "{\"t\": \"file\", \"m\": \"%s\", \"seq\": %llu, \"time\": %llu, \"path\": \"%s\", "
	       "\"size\": %zu, \"mode\": 420, \"mtime\": 1.000000000, \"xxh3\": \"%s\"}", l->id,
	       (unsigned long long)l->seq, (unsigned long long)ml_time(), path, strlen(content), hex);
	if (apply)
		ml_put(l->root, path, content);
	return l->seq;
}

uint64_t ml_intent(struct mlog *l, const char *path)
{
	l->seq++;
	ml_rec(l, "{\"t\": \"intent\", \"m\": \"%s\", \"seq\": %llu, \"path\": \"%s\", \"size\": 1}",
	       l->id, (unsigned long long)l->seq, path);
	return l->seq;
}

static const char *at(struct mlog *l, const char *path)
{
	static char buf[4][PATH_MAX];
	static int k;
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof(buf[k]), "%s/%s", l->root, path);
	return buf[k];
}

/* An unlink or rmdir record (next seq), applied on disk when `apply`. */
static uint64_t ml_remove(struct mlog *l, const char *type, const char *path, bool apply)
{
	l->seq++;
	ml_rec(l, "{\"t\": \"%s\", \"m\": \"%s\", \"seq\": %llu, \"time\": %llu, \"path\": \"%s\"}",
	       type, l->id, (unsigned long long)l->seq, (unsigned long long)ml_time(), path);
	if (apply)
		CHECK_SYS(type[0] == 'u' ? unlink(at(l, path)) : rmdir(at(l, path)));
	return l->seq;
}

uint64_t ml_unlink(struct mlog *l, const char *path, bool apply)
{
	return ml_remove(l, "unlink", path, apply);
}

uint64_t ml_rmdir(struct mlog *l, const char *path, bool apply)
{
	return ml_remove(l, "rmdir", path, apply);
}

uint64_t ml_rename(struct mlog *l, const char *from, const char *to, bool exchange, bool apply)
{
	l->seq++;
	ml_rec(l, "{\"t\": \"rename\", \"m\": \"%s\", \"seq\": %llu, \"time\": %llu, \"path\": \"%s\", "
	       "\"to\": \"%s\", \"exchange\": %s}", l->id, (unsigned long long)l->seq,
	       (unsigned long long)ml_time(), from, to, exchange ? "true" : "false");
	if (apply)
		CHECK_SYS(renameat2(AT_FDCWD, at(l, from), AT_FDCWD, at(l, to),
				    exchange ? RENAME_EXCHANGE : 0));
	return l->seq;
}

uint64_t ml_mkdir(struct mlog *l, const char *path, bool apply)
{
	l->seq++;
	ml_rec(l, "{\"t\": \"mkdir\", \"m\": \"%s\", \"seq\": %llu, \"time\": %llu, \"path\": \"%s\", "
	       "\"mode\": 493}", l->id, (unsigned long long)l->seq, (unsigned long long)ml_time(), path);
	if (apply)
		CHECK_SYS(mkdir(at(l, path), 0755));
	return l->seq;
}

/* A record naming two things (next seq): "path" and key2. */
static uint64_t ml_rec2(struct mlog *l, const char *type, const char *path, const char *key2,
			const char *v2)
{
	l->seq++;
	ml_rec(l, "{\"t\": \"%s\", \"m\": \"%s\", \"seq\": %llu, \"time\": %llu, \"path\": \"%s\", "
	       "\"%s\": \"%s\"}", type, l->id, (unsigned long long)l->seq,
	       (unsigned long long)ml_time(), path, key2, v2);
	return l->seq;
}

uint64_t ml_symlink(struct mlog *l, const char *target, const char *path, bool apply)
{
	ml_rec2(l, "symlink", path, "target", target);
	if (apply)
		CHECK_SYS(symlink(target, at(l, path)));
	return l->seq;
}

uint64_t ml_link(struct mlog *l, const char *from, const char *to, bool apply)
{
	ml_rec2(l, "link", from, "to", to);
	if (apply)
		CHECK_SYS(link(at(l, from), at(l, to)));
	return l->seq;
}

void ml_durable(struct mlog *l)
{
	ml_rec(l, "{\"t\": \"durable\", \"m\": \"%s\", \"seq\": %llu}", l->id, (unsigned long long)l->seq);
	ASSERT_EQ(manifest_sync(&l->m), 0);
}

void ml_void(struct mlog *l, uint64_t seq)
{
	ml_rec(l, "{\"t\": \"void\", \"m\": \"%s\", \"seq\": %llu}", l->id, (unsigned long long)seq);
}

void ml_close(struct mlog *l)
{
	manifest_close(&l->m, l->seq, true);
	close(l->root_fd);
}

void ml_copy_tree(const char *from, const char *to)
{
	const char *argv[] = { "cp", "-a", from, to, NULL };
	if (tm_run(argv, NULL) != 0)
		FAILF("cp -a %s %s failed", from, to);
}

void ml_scratch(char *out, size_t len, const char *name)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(out, len, "%s/ckptfs-%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
	if (!mkdtemp(out))
		FAILF("mkdtemp %s: %s", out, strerror(errno));
}

char *ml_verdicts(const char *root)
{
	char *out, *lines;

	it_verify(root, 1, &out);
	lines = it_verdict_lines(out);
	free(out);
	return lines;
}

const char *ml_log_path(const char *root, const char *node)
{
	static char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/.ckptfs/nodes/%s/manifest.log", root, node);
	return path;
}
