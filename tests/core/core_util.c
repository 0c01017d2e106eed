/*
 * core_util.c — helpers shared by the core tests (see core_util.h).
 */
#include "tests/core/core_util.h"

#include <dirent.h>
#include <ftw.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <sys/xattr.h>

#define IO_BLOCK (1u << 20)

/* ---- I/O that must succeed ------------------------------------------------ */

int cu_open(const char *path, int flags)
{
	int fd = open(path, flags, 0644);
	if (fd < 0)
		FAILF("open %s (flags 0%o): %s", path, flags, strerror(errno));
	return fd;
}

void cu_close(int fd)
{
	if (close(fd) < 0)
		FAILF("close: %s", strerror(errno));
}

/* pread or pwrite all of [off, off+len), or fail. */
static void io_all(int fd, char *p, size_t len, uint64_t off, bool write)
{
	while (len) {
		ssize_t n = write ? pwrite(fd, p, len, (off_t)off) : pread(fd, p, len, (off_t)off);
		if (n <= 0)
			FAILF("%s of %zu bytes at %" PRIu64 ": %s", write ? "pwrite" : "pread", len,
			      off, n < 0 ? strerror(errno) : "nothing moved");
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
}

void cu_pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
	io_all(fd, (char *)buf, len, off, true);
}

void cu_pread_all(int fd, void *buf, size_t len, uint64_t off)
{
	io_all(fd, buf, len, off, false);
}

void cu_write_pattern_fd(int fd, uint64_t off, uint64_t len, uint64_t seed, size_t piece)
{
	char *buf = malloc(piece);
	for (uint64_t done = 0; done < len;) {
		size_t k = (size_t)(len - done < piece ? len - done : piece);
		fill_pattern(buf, k, seed, off + done);
		cu_pwrite_all(fd, buf, k, off + done);
		done += k;
	}
	free(buf);
}

void cu_write_pattern(const char *path, uint64_t size, uint64_t seed)
{
	int fd = cu_open(path, O_CREAT | O_WRONLY | O_TRUNC);
	cu_write_pattern_fd(fd, 0, size, seed, IO_BLOCK);
	cu_close(fd);
}

void cu_check_range(int fd, const char *what, uint64_t off, uint64_t len, uint64_t seed)
{
	char *got = malloc(IO_BLOCK), *want = malloc(IO_BLOCK);
	for (uint64_t done = 0; done < len;) {
		size_t k = (size_t)(len - done < IO_BLOCK ? len - done : IO_BLOCK);
		cu_pread_all(fd, got, k, off + done);
		if (seed)
			fill_pattern(want, k, seed, off + done);
		else
			memset(want, 0, k);
		if (memcmp(got, want, k) != 0) {
			size_t i = 0;
			while (got[i] == want[i])
				i++;
			FAILF("%s: wrong byte at offset %" PRIu64 " (0x%02x, expected 0x%02x%s)", what,
			      off + done + i, (unsigned char)got[i], (unsigned char)want[i],
			      seed ? "" : ", a hole");
		}
		done += k;
	}
	free(got);
	free(want);
}

uint64_t cu_file_size(const char *path)
{
	struct stat st;
	if (stat(path, &st) < 0)
		FAILF("stat %s: %s", path, strerror(errno));
	return (uint64_t)st.st_size;
}

uint64_t cu_allocated(const char *path)
{
	struct stat st;
	if (stat(path, &st) < 0)
		FAILF("stat %s: %s", path, strerror(errno));
	return (uint64_t)st.st_blocks * 512;
}

bool cu_keeps_holes(const char *dir)
{
	char path[PATH_MAX + 16];

	snprintf(path, sizeof(path), "%s/hole-probe", dir);
	int fd = cu_open(path, O_CREAT | O_WRONLY | O_TRUNC);
	if (ftruncate(fd, 64 * MiB) < 0)
		FAILF("ftruncate %s: %s", path, strerror(errno));
	cu_pwrite_all(fd, "x", 1, 32 * MiB);
	cu_close(fd);
	bool yes = cu_allocated(path) < MiB;
	unlink(path);
	if (!yes)
		fprintf(stderr, "note: %s fills holes; allocation is not checked\n", dir);
	return yes;
}

void cu_check_pattern(const char *path, uint64_t size, uint64_t seed)
{
	int fd = cu_open(path, O_RDONLY);
	char c;
	ASSERT_EQ(cu_file_size(path), size);
	cu_check_range(fd, path, 0, size, seed);
	ASSERT_EQ(pread(fd, &c, 1, (off_t)size), 0);	/* and nothing beyond */
	cu_close(fd);
}

void cu_check_content(const char *path, const void *buf, size_t len)
{
	size_t have;
	char *got = read_file(path, &have);
	if (!got)
		FAILF("cannot read %s: %s", path, strerror(errno));
	if (have != len)
		FAILF("%s has %zu bytes, expected %zu", path, have, len);
	if (memcmp(got, buf, len) != 0)	/* then find where, for the message */
		for (size_t i = 0; i < len; i++)
			if (got[i] != ((const char *)buf)[i])
				FAILF("%s: wrong byte at offset %zu (0x%02x, expected 0x%02x)",
				      path, i, (unsigned char)got[i],
				      ((const unsigned char *)buf)[i]);
	free(got);
}

void cu_check_pfiles(const char *root, const struct cu_pfile *f, size_t n)
{
	char path[PATH_MAX * 2];
	for (size_t i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/%s", root, f[i].name);
		cu_check_pattern(path, f[i].size, f[i].seed);
	}
}

const char *cu_slurp(const char *path)
{
	static char buf[16384];
	size_t have = 0;
	ssize_t n = 0;
	int fd = open(path, O_RDONLY);

	while (fd >= 0 && have < sizeof(buf) - 1 &&
	       (n = read(fd, buf + have, sizeof(buf) - 1 - have)) > 0)
		have += (size_t)n;
	buf[have] = '\0';
	if (fd >= 0)
		close(fd);
	return buf;
}

const char *cu_file_state(const char *path)
{
	static char v[64];
	ssize_t n = getxattr(path, "user.ckptfs.state", v, sizeof(v) - 1);
	v[n > 0 ? n : 0] = '\0';
	return v;
}

void cu_write_text(const char *path, const char *text)
{
	write_file(path, text, strlen(text));
}

/* ---- the daemon ----------------------------------------------------------- */

const char *cu_fault_env(const char *fmt, ...)
{
	static char buf[2048];
	va_list ap;
	int n = snprintf(buf, sizeof(buf), "CKPTFS_FAULT=");

	va_start(ap, fmt);
	vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	va_end(ap);
	return buf;
}

int cu_mount_count(const char *path)
{
	char line[4096], point[4096];
	FILE *f = fopen("/proc/self/mountinfo", "r");
	int n = 0;

	while (f && fgets(line, sizeof(line), f))
		n += sscanf(line, "%*s %*s %*s %*s %4095s", point) == 1 && !strcmp(point, path);
	if (f)
		fclose(f);
	return n;
}

uint64_t cu_stat(struct tmount *m, const char *key)
{
	char want[128];
	const char *json = cu_slurp(tm_path(m, ".ckptfs/stats")), *at;

	snprintf(want, sizeof(want), "\"%s\": ", key);
	if (!(at = strstr(json, want)))
		FAILF("%s is not in the stats: %s", key, json);
	return strtoull(at + strlen(want), NULL, 10);
}

int cu_unmount(const char *path)
{
	int st;
	pid_t pid = fork();

	if (pid == 0) {
		execlp("fusermount3", "fusermount3", "-u", path, (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void cu_unmount_busy(const char *path)
{
	for (int tries = 0; cu_unmount(path) != 0; tries++) {
		if (tries > 100)
			FAILF("fusermount3 -u %s keeps failing", path);
		usleep(50000);
	}
}

int cu_stop_any(struct tmount *m)
{
	int st;

	cu_unmount_busy(m->mnt);
	for (uint64_t t0 = mono_ms(); waitpid(m->pid, &st, WNOHANG) != m->pid;) {
		if (mono_ms() - t0 > 60000)
			FAILF("daemon did not exit within 60 s of unmount");
		usleep(10000);
	}
	m->pid = 0;
	m->exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	return m->exit_status;
}

void cu_sync_retry(struct tmount *m, unsigned timeout_ms)
{
	uint64_t t0 = mono_ms();
	for (;;) {
		int fd = CHECK_SYS(open(m->mnt, O_RDONLY | O_DIRECTORY));
		int r = fsync(fd), e = errno;
		close(fd);
		if (r == 0)
			return;
		if (mono_ms() - t0 > timeout_ms)
			FAILF("fsync of the mount root still fails after %u ms: %s", timeout_ms,
			      strerror(e));
		usleep(100000);
	}
}

bool cu_wait_exists(const char *path, unsigned timeout_ms)
{
	for (uint64_t t0 = mono_ms(); !file_exists(path);) {
		if (mono_ms() - t0 > timeout_ms)
			return false;
		usleep(20000);
	}
	return true;
}

void cu_expect_refused(const char *opt, const char *name)
{
	struct tmount m;
	char err[4096];

	tm_init(&m, "refused");
	const char *argv[] = { "ckptfs", m.backend, m.mnt, "-o", opt, NULL };
	ASSERT_EQ(tm_run_daemon(argv, err, sizeof(err)), 2);
	if (!strstr(err, name))
		FAILF("-o %s: the refusal does not name '%s':\n%s", opt, name, err);
	tm_cleanup(&m);
}

void cu_require_root(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "skip: needs root\n");
		exit(TEST_SKIP);
	}
}

/* ---- trees ---------------------------------------------------------------- */

static uint64_t cu_hash(const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint64_t h = 0x84222325cbf29ce4ull ^ len;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		h = (h ^ w) * 0x9E3779B97F4A7C15ull;
		h ^= h >> 31;
	}
	for (; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h ^ (h >> 29);
}

struct lines {
	char **v;
	size_t n, cap;
};

static void lines_add(struct lines *l, const char *path, char kind, uint64_t size, uint64_t hash)
{
	char buf[PATH_MAX + 64];
	snprintf(buf, sizeof(buf), "%s %c %" PRIu64 " %016" PRIx64, path, kind, size, hash);
	if (l->n == l->cap)
		l->v = realloc(l->v, (l->cap = l->cap ? l->cap * 2 : 64) * sizeof(*l->v));
	l->v[l->n++] = strdup(buf);
}

static int cmp_line(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sort, join with newlines and free the lines: the canonical snapshot. */
static char *lines_render(struct lines *l)
{
	size_t total = 1, pos = 0;
	char *out;

	if (l->n)
		qsort(l->v, l->n, sizeof(*l->v), cmp_line);
	for (size_t i = 0; i < l->n; i++)
		total += strlen(l->v[i]) + 1;
	out = malloc(total);
	for (size_t i = 0; i < l->n; i++) {
		pos += (size_t)sprintf(out + pos, "%s\n", l->v[i]);
		free(l->v[i]);
	}
	out[pos] = '\0';
	free(l->v);
	l->v = NULL;
	l->n = l->cap = 0;
	return out;
}

static bool name_hidden(const char *name, bool at_root)
{
	return strncmp(name, ".ckptfs.", 8) == 0 || (at_root && strcmp(name, ".ckptfs") == 0);
}

/* Hash a regular file's contents; -1 if it vanished. */
static int hash_file(int dfd, const char *name, uint64_t *size, uint64_t *hash)
{
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW);
	size_t cap = 1 << 16, have = 0;
	char *buf;

	if (fd < 0)
		return -1;
	buf = malloc(cap);
	for (;;) {
		if (have == cap)
			buf = realloc(buf, cap *= 2);
		ssize_t n = read(fd, buf + have, cap - have);
		if (n < 0)
			FAILF("read %s: %s", name, strerror(errno));
		if (n == 0)
			break;
		have += (size_t)n;
	}
	close(fd);
	*size = have;
	*hash = cu_hash(buf, have);
	free(buf);
	return 0;
}

/* Add the tree under rel (relative to the snapshot root) to l; -1 if torn. */
static int walk(int dfd, const char *rel, bool at_root, struct lines *l)
{
	int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	struct dirent *de;
	int r = 0;

	if (!d)
		return -1;
	while (r == 0 && (de = readdir(d))) {
		char path[PATH_MAX], target[PATH_MAX];
		struct stat st;
		uint64_t size = 0, hash = 0;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    name_hidden(de->d_name, at_root))
			continue;
		snprintf(path, sizeof(path), "%s%s%s", rel, *rel ? "/" : "", de->d_name);
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			r = -1;
		} else if (S_ISDIR(st.st_mode)) {
			int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
			lines_add(l, path, 'd', 0, 0);
			r = sub < 0 ? -1 : walk(sub, path, false, l);
			if (sub >= 0)
				close(sub);
		} else if (S_ISLNK(st.st_mode)) {
			ssize_t n = readlinkat(dirfd(d), de->d_name, target, sizeof(target));
			if (n < 0)
				r = -1;
			else
				lines_add(l, path, 'l', (uint64_t)n, cu_hash(target, (size_t)n));
		} else if (S_ISREG(st.st_mode)) {
			r = hash_file(dirfd(d), de->d_name, &size, &hash);
			if (r == 0)
				lines_add(l, path, 'f', size, hash);
		} else {
			lines_add(l, path, '?', 0, 0);
		}
	}
	closedir(d);
	return r;
}

char *cu_tree_snapshot(const char *root)
{
	struct lines l = { 0 };
	int dfd = open(root, O_RDONLY | O_DIRECTORY);
	int r;

	if (dfd < 0)
		FAILF("open %s: %s", root, strerror(errno));
	r = walk(dfd, "", true, &l);
	close(dfd);
	char *out = lines_render(&l);
	if (r < 0) {
		free(out);
		return NULL;
	}
	return out;
}

char *cu_tree_stable(const char *root)
{
	char *prev = cu_tree_snapshot(root);
	for (int tries = 0; tries < 200; tries++) {
		char *cur = cu_tree_snapshot(root);
		if (prev && cur && strcmp(prev, cur) == 0) {
			free(cur);
			return prev;
		}
		free(prev);
		prev = cur;
	}
	free(prev);
	return NULL;
}

void cu_assert_snapshots_equal(const char *what, const char *a, const char *b)
{
	if (!a || !b || strcmp(a, b) != 0)
		FAILF("%s: trees differ\n--- first:\n%s--- second:\n%s", what, a ? a : "(torn)\n",
		      b ? b : "(torn)\n");
}

void cu_assert_backend_is_mount(struct tmount *m)
{
	char *back = cu_tree_snapshot(m->backend), *mnt = cu_tree_snapshot(m->mnt);

	cu_assert_snapshots_equal("backend vs mount", back, mnt);
	free(back);
	free(mnt);
}

static int temp_total;

static int count_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	if (flag == FTW_D || flag == FTW_DP)
		temp_total += count_temp_files(path);
	return 0;
}

int cu_count_temp_tree(const char *root)
{
	temp_total = 0;
	if (nftw(root, count_cb, 16, FTW_PHYS) < 0)
		FAILF("walk %s: %s", root, strerror(errno));
	return temp_total;
}

/* ---- the model ------------------------------------------------------------ */

struct cu_entry {
	char *path;
	char kind;
	uint64_t size, hash;
};

static size_t model_find(const struct cu_model *m, const char *path)
{
	for (size_t i = 0; i < m->n; i++)
		if (strcmp(m->e[i].path, path) == 0)
			return i;
	return SIZE_MAX;
}

static bool path_under(const char *path, const char *top)
{
	size_t n = strlen(top);
	return strncmp(path, top, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

static void model_put(struct cu_model *m, const char *path, char kind, uint64_t size, uint64_t hash)
{
	size_t i = model_find(m, path);
	if (i == SIZE_MAX) {
		if (m->n == m->cap)
			m->e = realloc(m->e, (m->cap = m->cap ? m->cap * 2 : 64) * sizeof(*m->e));
		i = m->n++;
		m->e[i].path = strdup(path);
	}
	m->e[i].kind = kind;
	m->e[i].size = size;
	m->e[i].hash = hash;
}

void cu_model_mkdir(struct cu_model *m, const char *path)
{
	model_put(m, path, 'd', 0, 0);
}

void cu_model_file(struct cu_model *m, const char *path, const void *buf, size_t len)
{
	model_put(m, path, 'f', len, cu_hash(buf, len));
}

void cu_model_remove(struct cu_model *m, const char *path)
{
	size_t w = 0;
	for (size_t i = 0; i < m->n; i++) {
		if (path_under(m->e[i].path, path))
			free(m->e[i].path);
		else
			m->e[w++] = m->e[i];
	}
	m->n = w;
}

void cu_model_rename(struct cu_model *m, const char *from, const char *to)
{
	size_t flen = strlen(from);

	cu_model_remove(m, to);
	for (size_t i = 0; i < m->n; i++) {
		if (!path_under(m->e[i].path, from))
			continue;
		char *p = malloc(strlen(to) + strlen(m->e[i].path) - flen + 1);
		sprintf(p, "%s%s", to, m->e[i].path + flen);
		free(m->e[i].path);
		m->e[i].path = p;
	}
}

char *cu_model_render(const struct cu_model *m)
{
	struct lines l = { 0 };
	for (size_t i = 0; i < m->n; i++)
		lines_add(&l, m->e[i].path, m->e[i].kind, m->e[i].size, m->e[i].hash);
	return lines_render(&l);
}

void cu_model_free(struct cu_model *m)
{
	for (size_t i = 0; i < m->n; i++)
		free(m->e[i].path);
	free(m->e);
	memset(m, 0, sizeof(*m));
}
