/*
 * sec_util.c — helpers shared by the security tests (see sec_util.h).
 */
#include "tests/security/sec_util.h"

#include <dirent.h>
#include <stdarg.h>
#include <grp.h>
#include <sys/wait.h>
#include <sys/xattr.h>

static bool log_scan(struct tmount *m, const char *a, const char *b, int *count)
{
	FILE *f = fopen(m->log, "r");
	char line[4096];
	bool found = false;

	*count = 0;
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, a) && (!b || strstr(line, b))) {
			found = true;
			(*count)++;
		}
	fclose(f);
	return found;
}

bool sec_log_wait(struct tmount *m, const char *a, const char *b, unsigned timeout_ms)
{
	int n;

	for (uint64_t t0 = mono_ms();; usleep(20000)) {
		if (log_scan(m, a, b, &n))
			return true;
		if (mono_ms() - t0 > timeout_ms)
			return false;
	}
}

int sec_log_count(struct tmount *m, const char *s)
{
	int n;
	log_scan(m, s, NULL, &n);
	return n;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A growing text (the tests do not link cache/'s strbuf). */
struct sec_text {
	char *s;
	size_t len, cap;
};

static void state_add(struct sec_text *sb, const char *fmt, ...)
{
	va_list ap;
	char tmp[8192];
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(tmp))
		n = sizeof(tmp) - 1;
	if (sb->len + (size_t)n + 1 > sb->cap) {
		sb->cap = (sb->len + (size_t)n + 1) * 2;
		sb->s = realloc(sb->s, sb->cap);
	}
	memcpy(sb->s + sb->len, tmp, (size_t)n + 1);
	sb->len += (size_t)n;
}

static void state_walk(struct sec_text *sb, const char *root, const char *rel)
{
	char path[PATH_MAX], buf[4097], keys[4096];
	struct stat st;

	snprintf(path, sizeof(path), "%s%s%s", root, rel[0] ? "/" : "", rel);
	if (lstat(path, &st) < 0) {
		state_add(sb, "%s missing\n", rel);
		return;
	}
	state_add(sb, "%s mode=%o uid=%u gid=%u size=%lld mtime=%lld.%09ld ctime=%lld.%09ld",
		  rel[0] ? rel : ".", (unsigned)st.st_mode, (unsigned)st.st_uid, (unsigned)st.st_gid,
		  (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
		  (long long)st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
	if (S_ISREG(st.st_mode)) {
		int fd = open(path, O_RDONLY | O_NOFOLLOW);
		ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
		if (fd >= 0)
			close(fd);
		buf[n < 0 ? 0 : n] = '\0';
		state_add(sb, " data=\"%s\"", buf);
	} else if (S_ISLNK(st.st_mode)) {
		ssize_t n = readlink(path, buf, sizeof(buf) - 1);
		buf[n < 0 ? 0 : n] = '\0';
		state_add(sb, " target=%s", buf);
	}
	ssize_t kl = llistxattr(path, keys, sizeof(keys));
	char *sorted[64];
	int nk = 0;
	for (ssize_t off = 0; kl > 0 && off < kl && nk < 64; off += (ssize_t)strlen(keys + off) + 1)
		sorted[nk++] = keys + off;
	qsort(sorted, (size_t)nk, sizeof(*sorted), cmp_str);
	for (int i = 0; i < nk; i++) {
		ssize_t vl = lgetxattr(path, sorted[i], buf, sizeof(buf) - 1);
		buf[vl < 0 ? 0 : vl] = '\0';
		state_add(sb, " xattr:%s=%s", sorted[i], buf);
	}
	state_add(sb, "\n");
	if (!S_ISDIR(st.st_mode))
		return;
	DIR *d = opendir(path);
	struct dirent *de;
	char *names[256];
	int nn = 0;
	if (!d)
		FAILF("opendir %s: %s", path, strerror(errno));
	while ((de = readdir(d)) && nn < 256)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			names[nn++] = strdup(de->d_name);
	closedir(d);
	qsort(names, (size_t)nn, sizeof(*names), cmp_str);
	for (int i = 0; i < nn; i++) {
		char sub[PATH_MAX];
		snprintf(sub, sizeof(sub), "%s%s%s", rel, rel[0] ? "/" : "", names[i]);
		state_walk(sb, root, sub);
		free(names[i]);
	}
}

char *sec_tree_state(const char *root)
{
	struct sec_text sb = { 0 };
	state_walk(&sb, root, "");
	return sb.s;
}

void sec_assert_unchanged(const char *what, const char *root, const char *was)
{
	char *now = sec_tree_state(root);
	if (strcmp(now, was) != 0)
		FAILF("%s: %s changed outside the backend\nbefore:\n%safter:\n%s", what, root, was, now);
	free(now);
}

static struct stat must_lstat(const char *path)
{
	struct stat st;
	CHECK_SYS(lstat(path, &st));
	return st;
}

mode_t sec_mode(const char *path) { return must_lstat(path).st_mode; }
uid_t sec_uid(const char *path) { return must_lstat(path).st_uid; }
gid_t sec_gid(const char *path) { return must_lstat(path).st_gid; }

void sec_init_user_dir(struct tmount *m, const char *name, const char *dir, uid_t uid)
{
	cu_require_root();
	tm_require_fuse();
	tm_init(m, name);
	CHECK_SYS(chmod(m->root, 0755));
	CHECK_SYS(mkdir(tm_bpath(m, dir), 0755));
	CHECK_SYS(chown(tm_bpath(m, dir), uid, uid));
}

char *sec_root_path(const struct tmount *m, const char *rel)
{
	static char buf[4][PATH_MAX];
	static int k;
	char *p = buf[k++ % 4];

	snprintf(p, PATH_MAX, "%s/%s", m->root, rel);
	return p;
}
