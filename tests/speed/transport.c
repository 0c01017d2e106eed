/*
 * transport — the same work through each way requests reach the daemon
 * (fs/loop.c, fs/uring.c, fs/devio.c), checked the same way:
 *   dev_fuse   our loop over /dev/fuse (loop=readv): the fuse module's
 *              enable_uring off, or -o fuse_uring=off;
 *   big        both, with 4 MiB requests (fs.fuse.max_pages_limit 1024 and
 *              fs.pipe-max-size 8 MiB for the mount, put back at exit);
 *   io_uring   FUSE over io_uring, where the kernel has it (enable_uring on
 *              for the mount's INIT; the parameter is put back at exit);
 *   fallbacks  io_uring offered but no ring could be set up
 *              (CKPTFS_FUSE_URING_FAULT=setup: not asked for at INIT), and
 *              asked for but every ring entry refused by the kernel
 *              (CKPTFS_FUSE_URING_FAULT=register: the kernel goes back to
 *              /dev/fuse by itself).
 * The work: writes of 1 byte to 20 MiB in pieces from 1 byte to 1 MiB,
 * unaligned; four writers at once; reads back (replies from chunk memory
 * and, once durable and evicted from nothing, from backend files: spliced
 * replies); fsync and a drain (replies sent later, from other threads);
 * namespace changes and a 300-entry readdir; xattrs; then the backend must
 * hold exactly what was written.
 */
#include "tests/core/core_util.h"

#include <pthread.h>
#include <sys/xattr.h>
#include <dirent.h>

static const char *PARAM = "/sys/module/fuse/parameters/enable_uring";
static char param_saved = 0;
static const char *MAXPAGES = "/proc/sys/fs/fuse/max_pages_limit";
static const char *PIPEMAX = "/proc/sys/fs/pipe-max-size";
static char maxpages_saved[32], pipemax_saved[32];

/* A sysctl's value into buf (saved), then set to val: true if it took. */
static bool sysctl_swap(const char *path, char *saved, size_t len, const char *val)
{
	FILE *f = fopen(path, "r");
	if (!f || !fgets(saved, (int)len, f)) {
		if (f)
			fclose(f);
		saved[0] = '\0';
		return false;
	}
	fclose(f);
	saved[strcspn(saved, "\n")] = '\0';
	f = fopen(path, "w");
	if (!f)
		return false;
	bool ok = fputs(val, f) >= 0;
	return fclose(f) == 0 && ok;
}

static void sysctl_put(const char *path, const char *saved)
{
	FILE *f = saved[0] ? fopen(path, "w") : NULL;
	if (f) {
		fputs(saved, f);
		fclose(f);
	}
}

static void sysctls_restore(void)
{
	sysctl_put(MAXPAGES, maxpages_saved);
	sysctl_put(PIPEMAX, pipemax_saved);
}

static char param_get(void)
{
	char c = 0;
	FILE *f = fopen(PARAM, "r");
	if (f) {
		if (fread(&c, 1, 1, f) != 1)
			c = 0;
		fclose(f);
	}
	return c;
}

static bool param_set(char c)
{
	FILE *f = fopen(PARAM, "w");
	if (!f)
		return false;
	bool ok = fputc(c, f) != EOF;
	return fclose(f) == 0 && ok && param_get() == c;
}

static void param_restore(void)
{
	if (param_saved)
		param_set(param_saved);
}

struct wargs {
	struct tmount *m;
	int id;
};

static void *writer(void *arg)
{
	struct wargs *a = arg;
	char name[64];

	for (int i = 0; i < 5; i++) {
		snprintf(name, sizeof(name), "par/w%d-%d", a->id, i);
		int fd = cu_open(tm_path(a->m, name), O_WRONLY | O_CREAT | O_TRUNC);
		cu_write_pattern_fd(fd, 0, 3 * MiB + 4097 * (uint64_t)i, 1000 + (uint64_t)a->id * 10 + (uint64_t)i,
				    (size_t)(64 * KiB + 3 * (uint64_t)i));
		cu_close(fd);
	}
	return NULL;
}

static void check_writers(const char *root)
{
	char name[PATH_MAX];
	for (int id = 0; id < 4; id++)
		for (int i = 0; i < 5; i++) {
			snprintf(name, sizeof(name), "%s/par/w%d-%d", root, id, i);
			cu_check_pattern(name, 3 * MiB + 4097 * (uint64_t)i, 1000 + (uint64_t)id * 10 + (uint64_t)i);
		}
}

static const struct { const char *name; uint64_t size; size_t piece; } files[] = {
	{ "one", 1, 1 },
	{ "small", 8191, 100 },
	{ "eight", 2 * MiB + 5, 8192 },
	{ "odd", 3 * MiB + 777, 65537 },
	{ "big", 20 * MiB, MiB },
};

static void exercise(struct tmount *m)
{
	for (size_t i = 0; i < CU_LEN(files); i++) {
		int fd = cu_open(tm_path(m, files[i].name), O_WRONLY | O_CREAT | O_TRUNC);
		cu_write_pattern_fd(fd, 0, files[i].size, 10 + i, files[i].piece);
		if (i == 2)
			CHECK_SYS(fsync(fd));	/* waits for the backend: a later reply */
		cu_close(fd);
	}
	/* Four writers at once. */
	CHECK_SYS(mkdir(tm_path(m, "par"), 0755));
	pthread_t th[4];
	struct wargs wa[4];
	for (int i = 0; i < 4; i++) {
		wa[i] = (struct wargs){ m, i };
		ASSERT_EQ(pthread_create(&th[i], NULL, writer, &wa[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	/* Read back while cached (replies from chunk memory). */
	for (size_t i = 0; i < CU_LEN(files); i++)
		cu_check_pattern(tm_path(m, files[i].name), files[i].size, 10 + i);
	check_writers(m->mnt);
	/* A drain: replied by another thread once durable. */
	const char *d = cu_slurp(tm_path(m, ".ckptfs/drain"));
	ASSERT_TRUE(strstr(d, "durable") != NULL);
	/* Read again: durable now, parts may come from the backend file. */
	cu_check_pattern(tm_path(m, "big"), 20 * MiB, 14);
	/* Namespace: directories, renames, unlinks, a readdir of 300 entries. */
	CHECK_SYS(mkdir(tm_path(m, "dir"), 0755));
	for (int i = 0; i < 300; i++) {
		char name[64];
		snprintf(name, sizeof(name), "dir/e%03d", i);
		cu_write_text(tm_path(m, name), name);
	}
	CHECK_SYS(rename(tm_path(m, "dir/e000"), tm_path(m, "dir/renamed")));
	CHECK_SYS(unlink(tm_path(m, "dir/e001")));
	DIR *dir = opendir(tm_path(m, "dir"));
	ASSERT_TRUE(dir != NULL);
	int n = 0;
	for (struct dirent *de; (de = readdir(dir));)
		n += de->d_name[0] != '.';
	closedir(dir);
	ASSERT_EQ(n, 299);
	/* xattrs go through the same replies. */
	CHECK_SYS(setxattr(tm_path(m, "one"), "user.k", "v", 1, 0));
	char v[8];
	ASSERT_EQ(getxattr(tm_path(m, "one"), "user.k", v, sizeof(v)), 1);
	int fd = cu_open(tm_path(m, "dir"), O_RDONLY | O_DIRECTORY);
	CHECK_SYS(fsync(fd));	/* fsyncdir: a later reply as well */
	cu_close(fd);
}

static void check_backend(struct tmount *m)
{
	for (size_t i = 0; i < CU_LEN(files); i++)
		cu_check_pattern(tm_bpath(m, files[i].name), files[i].size, 10 + i);
	check_writers(m->backend);
	ASSERT_STR_EQ(cu_slurp(tm_bpath(m, "dir/e002")), "dir/e002");
	ASSERT_TRUE(file_exists(tm_bpath(m, "dir/renamed")));
	ASSERT_TRUE(!file_exists(tm_bpath(m, "dir/e001")));
}

static bool transport_is(struct tmount *m, const char *want)
{
	char key[64];
	snprintf(key, sizeof(key), "\"fuse_transport\": \"%s\"", want);
	return strstr(cu_slurp(tm_path(m, ".ckptfs/stats")), key) != NULL;
}

/*
 * Mount, check the transport (and the request size, unless 0), do the
 * work, unmount, check the backend.
 */
static void run(const char *name, const char *opts, const char *const *env, const char *want,
		uint64_t max_write)
{
	struct tmount m;

	tm_start(&m, name, opts, env);
	if (!transport_is(&m, want))
		FAILF("%s: expected transport %s: %s", name, want, cu_slurp(tm_path(&m, ".ckptfs/stats")));
	if (max_write)
		ASSERT_EQ(cu_stat(&m, "fuse_max_write"), max_write);
	uint64_t before = cu_stat(&m, "fuse_uring_requests");
	exercise(&m);
	if (!strcmp(want, "io_uring"))
		ASSERT_GE(cu_stat(&m, "fuse_uring_requests"), before + 100);
	else
		ASSERT_EQ(cu_stat(&m, "fuse_uring_requests"), before);
	ASSERT_TRUE(transport_is(&m, want));
	tm_stop(&m);
	check_backend(&m);
	tm_cleanup(&m);
	fprintf(stderr, "%-16s %s ok\n", name, want);
}

int main(void)
{
	tm_require_fuse();
	param_saved = param_get();

	/* /dev/fuse: with the kernel parameter off, and with the option off. */
	bool can_toggle = param_saved && param_set('N');
	if (can_toggle)
		atexit(param_restore);
	if (!param_saved || can_toggle)
		run("tr-devfuse", NULL, NULL, "dev_fuse", 0);
	/*
	 * Requests of 4 MiB where the administrator allows them (1024 pages per
	 * request, and pipes that can hold one: this test's daemon may lack
	 * CAP_SYS_RESOURCE), put back at exit.
	 */
	bool big = sysctl_swap(MAXPAGES, maxpages_saved, sizeof(maxpages_saved), "1024");
	atexit(sysctls_restore);
	big = sysctl_swap(PIPEMAX, pipemax_saved, sizeof(pipemax_saved), "8388608") && big;
	if (big && (!param_saved || can_toggle))
		run("tr-bigreq", NULL, NULL, "dev_fuse", 4 * MiB);
	if (!can_toggle) {
		fprintf(stderr, "no writable %s: the io_uring transport is not tested here\n", PARAM);
		return param_saved ? TEST_SKIP : 0;
	}
	ASSERT_TRUE(param_set('Y'));
	if (big)
		run("tr-bigreq-uring", NULL, NULL, "io_uring", 4 * MiB);
	sysctls_restore();
	run("tr-optoff", "fuse_uring=off", NULL, "dev_fuse", 0);
	/* io_uring. */
	run("tr-uring", NULL, NULL, "io_uring", 0);
	/* No ring could be set up: INIT does not ask for io_uring. */
	const char *setup[] = { "CKPTFS_FUSE_URING_FAULT=setup", NULL };
	run("tr-nosetup", NULL, setup, "dev_fuse", 0);
	/* Asked for, but the kernel refuses every entry: it falls back by itself. */
	const char *reg[] = { "CKPTFS_FUSE_URING_FAULT=register", NULL };
	run("tr-refused", NULL, reg, "dev_fuse", 0);
	return 0;
}
