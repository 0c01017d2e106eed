/*
 * visible.c — a coherent namespace across nodes (docs/contract.md, "Beyond
 * one node"): a file another node made durable is visible here within
 * 2 x attr_timeout (plus the backend client's own cache time, which
 * CKPTFS_MN_CACHE_S adds for a shared file system), while this node's own
 * unpublished changes keep precedence.
 *
 * Through node a, with b's directory already loaded and read: a new file,
 * a new directory with a file, a rewritten file (one b wrote itself and
 * still holds clean in its cache, and one b loaded), a deleted file.  Each
 * must show through b within the bound after a's drain returned; the time
 * is printed as the figure.  A descriptor b opened before the rewrite
 * keeps reading the old contents, as on a local file system.  Then b's own
 * pending changes — a file whose publication is held back, and an unlink
 * held back likewise (a whiteout) — survive b's revalidations while a
 * changes the same directory.  Last, b's rmdir of a directory it holds
 * empty, which a filled, is refused (ENOTEMPTY) once attr_timeout passed.
 */
#include "tests/multinode/mn_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#define ATTR_S 0.5

static double bound_ms(void)
{
	const char *extra = getenv("CKPTFS_MN_CACHE_S");
	return (2 * ATTR_S + (extra ? atof(extra) : 0)) * 1000 + 1000;	/* + 1 s: a busy machine */
}

static void drain(struct mcluster *c, int i)
{
	const char *argv[] = { mn_tool("ckptfs-ctl"), "drain", c->node[i].m.mnt, NULL };
	if (tm_run(argv, NULL) != 0)
		FAILF("ckptfs-ctl drain %s failed", c->node[i].m.mnt);
}

/* Read the whole directory (so it is loaded and listed). */
static unsigned list_dir(const char *path)
{
	DIR *d = opendir(path);
	unsigned n = 0;

	if (!d)
		FAILF("opendir %s: %s", path, strerror(errno));
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static double times[16];
static unsigned ntimes;

/* Poll until check() holds through b; the time since t0 (ms), or fail after the bound. */
static double wait_visible(const char *what, double t0, bool (*check)(const char *), const char *path)
{
	while (!check(path)) {
		if (mn_now_ms() - t0 > bound_ms() + 3000)
			FAILF("%s: not visible through the other node after %.0f ms (bound %.0f ms)",
			      what, mn_now_ms() - t0, bound_ms());
		usleep(2000);
	}
	double ms = mn_now_ms() - t0;
	if (ms > bound_ms())
		FAILF("%s: visible after %.0f ms, beyond the documented %.0f ms", what, ms, bound_ms());
	fprintf(stderr, "%-40s visible after %6.1f ms\n", what, ms);
	if (ntimes < 16)
		times[ntimes++] = ms;
	return ms;
}

static bool is_new(const char *p) { return mn_has(p, 5000, 1); }
static bool is_sub(const char *p) { return mn_has(p, 3000, 2); }
static bool is_rewritten(const char *p) { return mn_has(p, 7000, 3); }
static bool is_rewritten2(const char *p) { return mn_has(p, 6000, 4); }
static bool is_gone(const char *p) { return !file_exists(p); }

int main(void)
{
	struct mcluster c;
	char opts[64], flag[PATH_MAX], env[PATH_MAX + 128];

	tm_require_fuse();
	mn_init(&c, "mn-visible", 2);
	snprintf(opts, sizeof(opts), "attr_timeout=%.1f", ATTR_S);
	snprintf(flag, sizeof(flag), "%s/hold", c.node[1].m.root);
	/* b's publishing of mine* hangs while the flag exists. */
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=rename|unlink,name=mine,hold=%s", flag);
	const char *const benv[] = { env, NULL };
	mn_mount(&c, 0, opts, NULL);
	mn_mount(&c, 1, opts, benv);

	/* What both have seen: d/loaded (from a), d/bfile (b's own, clean in b's cache). */
	CHECK_SYS(mkdir(mn_path(&c, 0, "d"), 0755));
	mn_write(mn_path(&c, 0, "d/loaded"), 6000, 10);
	mn_write(mn_path(&c, 0, "d/old"), 100, 11);
	drain(&c, 0);
	ASSERT_TRUE(mn_has(mn_path(&c, 1, "d/loaded"), 6000, 10));
	mn_write(mn_path(&c, 1, "d/bfile"), 7000, 12);
	drain(&c, 1);
	ASSERT_TRUE(mn_has(mn_path(&c, 1, "d/bfile"), 7000, 12));	/* from b's cache */
	ASSERT_TRUE(mn_wait_file(mn_path(&c, 0, "d/bfile"), 7000, 5000) != 0);
	list_dir(mn_path(&c, 1, "d"));
	int oldfd = CHECK_SYS(open(mn_path(&c, 1, "d/loaded"), O_RDONLY));

	/* a changes d. */
	mn_write(mn_path(&c, 0, "d/new"), 5000, 1);
	CHECK_SYS(mkdir(mn_path(&c, 0, "d/sub"), 0755));
	mn_write(mn_path(&c, 0, "d/sub/x"), 3000, 2);
	mn_write(mn_path(&c, 0, "d/bfile"), 7000, 3);	/* b's own file, rewritten by a */
	mn_write(mn_path(&c, 0, "d/loaded"), 6000, 4);
	CHECK_SYS(unlink(mn_path(&c, 0, "d/old")));
	drain(&c, 0);
	double t0 = mn_now_ms();
	wait_visible("a new file", t0, is_new, mn_path(&c, 1, "d/new"));
	wait_visible("a new directory's file", t0, is_sub, mn_path(&c, 1, "d/sub/x"));
	wait_visible("a rewrite of a file b wrote", t0, is_rewritten, mn_path(&c, 1, "d/bfile"));
	wait_visible("a rewrite of a file b loaded", t0, is_rewritten2, mn_path(&c, 1, "d/loaded"));
	wait_visible("a deleted file", t0, is_gone, mn_path(&c, 1, "d/old"));
	/* A descriptor opened before the rewrite keeps what it had. */
	char *buf = malloc(6000), *want = it_pattern(10, 6000);
	ASSERT_EQ(pread(oldfd, buf, 6000, 0), 6000);
	ASSERT_TRUE(memcmp(buf, want, 6000) == 0);
	free(buf);
	free(want);
	close(oldfd);

	/* b's own pending changes keep precedence over what the backend says. */
	mn_write(mn_path(&c, 0, "d/mine-unlinked"), 100, 5);
	drain(&c, 0);
	ASSERT_TRUE(mn_wait_file(mn_path(&c, 1, "d/mine-unlinked"), 100, (unsigned)bound_ms()) != 0);
	cu_write_text(flag, "");
	mn_write(mn_path(&c, 1, "d/mine-pending"), 200, 6);	/* its rename is held back */
	CHECK_SYS(unlink(mn_path(&c, 1, "d/mine-unlinked")));	/* this unlink too */
	mn_write(mn_path(&c, 0, "d/later"), 300, 7);
	drain(&c, 0);
	wait_visible("a's file beside b's pending ones", mn_now_ms(),
		     (bool (*)(const char *))file_exists, mn_path(&c, 1, "d/later"));
	for (int i = 0; i < 3; i++) {	/* several revalidations of d through b */
		usleep((useconds_t)(ATTR_S * 1e6) + 100000);
		list_dir(mn_path(&c, 1, "d"));
		if (!mn_has(mn_path(&c, 1, "d/mine-pending"), 200, 6))
			FAILF("b's own pending file vanished from b after a revalidation");
		if (file_exists(mn_path(&c, 1, "d/mine-unlinked")))
			FAILF("b's pending unlink was undone by a revalidation");
	}
	ASSERT_TRUE(!file_exists(mn_bpath(&c, "d/mine-pending")));
	ASSERT_TRUE(file_exists(mn_bpath(&c, "d/mine-unlinked")));
	unlink(flag);
	drain(&c, 1);
	/* The checker sees the backend through another client (GlusterFS): its cache time. */
	ASSERT_TRUE(mn_wait_file(mn_bpath(&c, "d/mine-pending"), 200, (unsigned)bound_ms()) != 0);
	ASSERT_TRUE(mn_has(mn_bpath(&c, "d/mine-pending"), 200, 6));
	for (double tg = mn_now_ms(); file_exists(mn_bpath(&c, "d/mine-unlinked")); usleep(20000))
		if (mn_now_ms() - tg > bound_ms())
			FAILF("b's unlink is not on the backend %.0f ms after its drain", bound_ms());

	/*
	 * A directory b holds loaded and empty, which a fills: once b's view
	 * is older than attr_timeout, b's rmdir of it is refused (ENOTEMPTY),
	 * not accepted and then refused by the backend, which would block
	 * b's later operations.  b does not look into it before the rmdir.
	 */
	CHECK_SYS(mkdir(mn_path(&c, 1, "e"), 0755));
	drain(&c, 1);
	ASSERT_EQ(list_dir(mn_path(&c, 1, "e")), 2);
	wait_visible("another node's new directory", mn_now_ms(),
		     (bool (*)(const char *))file_exists, mn_path(&c, 0, "e"));
	mn_write(mn_path(&c, 0, "e/afile"), 400, 8);
	drain(&c, 0);
	usleep((useconds_t)(bound_ms() * 1000));
	int rr = rmdir(mn_path(&c, 1, "e"));
	if (rr == 0 || errno != ENOTEMPTY)
		FAILF("b's rmdir of a directory a filled: %s (want ENOTEMPTY)",
		      rr == 0 ? "accepted" : strerror(errno));
	drain(&c, 1);
	ASSERT_STR_EQ(mn_stat(&c, 1, "backend_state"), "ok");
	ASSERT_TRUE(mn_has(mn_bpath(&c, "e/afile"), 400, 8));

	double worst = 0;
	for (unsigned i = 0; i < ntimes; i++)
		worst = times[i] > worst ? times[i] : worst;
	fprintf(stderr, "FIGURE visibility of another node's durable files%s: worst %.0f ms, "
		"documented bound %.0f ms (2 x attr_timeout=%.1f s%s)\n",
		c.shared_backends ? " (shared backend clients)" : "", worst,
		bound_ms() - 1000, ATTR_S, getenv("CKPTFS_MN_CACHE_S") ? " + client cache" : "");
	mn_cleanup(&c);
	return 0;
}
