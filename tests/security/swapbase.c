/*
 * swapbase.c — a published file nobody has open keeps no backend
 * descriptor; its next open reopens it by name.  What is at the name then
 * must be the file the mount knows (cfile_set_base_fd), or the open gets
 * ESTALE and the kernel looks the name up again, finding what is there
 * now with its own owner and mode.  Before, the root daemon read whatever
 * held the name, with the permissions of the file it replaced.
 *
 *   1. A file A wrote, loaded from a listing: A renames a root-owned 0600
 *      file over it on the backend (A owns the directory) and reads it
 *      through the mount, within attr_timeout (60 s: no revalidation of
 *      its own).  Before: root's secret, with A's file's permissions.
 *      Now: EACCES, the mount showing root's file as the backend has it.
 *      A's append through the mount is refused too, and root's file on the
 *      backend stays as it was (before: A's next version was built from
 *      root's bytes and published world-readable under A's name).
 *   2. The same with a file this mount published itself (its inode known
 *      from the publication, not a listing).
 *   3. Another program replaces a file on the backend (a new file renamed
 *      over it, as another node's publication does) whose first chunk was
 *      evicted from the cache and the rest still cached: a read gets one
 *      version or the other whole, never the new file's bytes around the
 *      old file's cached chunks.
 *   4. This mount's own new version, renamed in before its publication is
 *      declared: an open in that window takes it (it is not another file).
 */
#include "tests/security/sec_util.h"

#define USER_A 61901
#define SECRET "root secret: TOPSECRET\n"

static struct tmount m;
static const char *rel;
static char got[8192];
static ssize_t got_len;

/* As A, through the mount: read rel whole into got. */
static int as_a_read(void *arg)
{
	(void)arg;
	int fd = open(tm_path(&m, rel), O_RDONLY);
	if (fd < 0)
		return errno;
	got_len = read(fd, got, sizeof(got));
	int e = got_len < 0 ? errno : 0;
	close(fd);
	return e;
}

static int as_a_append(void *arg)
{
	(void)arg;
	int fd = open(tm_path(&m, rel), O_WRONLY | O_APPEND);
	if (fd < 0)
		return errno;
	int e = write(fd, "Z", 1) == 1 ? 0 : errno;
	close(fd);
	return e;
}

static int as_a_write_mine2(void *arg)
{
	(void)arg;
	cu_write_text(tm_path(&m, "a/mine2"), "A's second file\n");
	return 0;
}

static const char *swap_from, *swap_to;

static int as_a_rename(void *arg)
{
	(void)arg;
	return SEC_ERR(rename(tm_bpath(&m, swap_from), tm_bpath(&m, swap_to)));
}

/* A swaps root's 0600 file `secret` over `mine` and reads and appends through the mount. */
static void swap_and_read(const char *secret, const char *mine, const char *what)
{
	struct stat st;

	rel = mine;
	CHECK_SYS(stat(tm_path(&m, mine), &st));	/* the mount knows A's file */
	ASSERT_EQ(st.st_uid, USER_A);
	swap_from = secret;
	swap_to = mine;
	ASSERT_EQ(tm_as_user(USER_A, USER_A, as_a_rename, NULL), 0);
	got_len = 0;
	int e = tm_as_user(USER_A, USER_A, as_a_read, NULL);
	if (got_len > 0 && memmem(got, (size_t)got_len, "root secret", 11))
		FAILF("%s: A read root's 0600 file through the mount (it was renamed over A's)", what);
	if (e != EACCES)
		FAILF("%s: A's read got %s, not EACCES for root's file now at the name", what,
		      e ? strerror(e) : "success");
	e = tm_as_user(USER_A, USER_A, as_a_append, NULL);
	if (e != EACCES)
		FAILF("%s: A's append got %s, not EACCES", what, e ? strerror(e) : "success");
	tm_sync(&m);
	cu_check_content(tm_bpath(&m, mine), SECRET, strlen(SECRET));
	CHECK_SYS(lstat(tm_bpath(&m, mine), &st));
	ASSERT_EQ(st.st_uid, 0);
	ASSERT_EQ(st.st_mode & 07777, 0600);
	printf("%s: A read and appended with EACCES; root's file unchanged\n", what);
}

/*
 * 4. This mount's own new version, renamed in on the backend while its
 *    publication is not yet declared (the directory's sync held): an open
 *    then finds that inode at the name, not the published one's, and must
 *    take it (it was refused with ESTALE until the sync was done).
 */
static void own_window(void)
{
	struct tmount w;
	char hold[PATH_MAX], env[3 * PATH_MAX];
	struct stat st0, st1;
	size_t len;

	tm_init(&w, "swapbase-own");
	CHECK_SYS(mkdir(tm_bpath(&w, "d"), 0755));
	snprintf(hold, sizeof(hold), "%s/hold", w.root);
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=fsync,hold=%s,name=%s", hold, tm_bpath(&w, "d"));
	tm_mount(&w, NULL, (const char *const[]){ env, NULL });
	cu_write_text(tm_path(&w, "d/f"), "first\n");
	tm_sync(&w);
	CHECK_SYS(stat(tm_bpath(&w, "d/f"), &st0));
	cu_write_text(hold, "");
	int fd = cu_open(tm_path(&w, "d/f"), O_WRONLY | O_APPEND);
	cu_pwrite_all(fd, "second\n", 7, 6);
	cu_close(fd);
	st1 = st0;
	for (uint64_t t0 = mono_ms(); st1.st_ino == st0.st_ino && mono_ms() - t0 < 10000;
	     usleep(20 * 1000))
		CHECK_SYS(stat(tm_bpath(&w, "d/f"), &st1));
	if (st1.st_ino == st0.st_ino)
		FAILF("%s", "4. the new version was never renamed in");
	char *text = read_file(tm_path(&w, "d/f"), &len);
	if (!text)
		FAILF("4. an open of this mount's own version, renamed in, failed: %s",
		      strerror(errno));
	if (len != 13 || memcmp(text, "first\nsecond\n", 13))
		FAILF("4. read \"%.*s\"", (int)len, text);
	free(text);
	unlink(hold);
	tm_sync(&w);
	tm_stop(&w);
	tm_cleanup(&w);
	printf("4. this mount's own version, renamed in before its sync: opened\n");
}

int main(void)
{
	char opts[256];

	sec_init_user_dir(&m, "swapbase", "a", USER_A);
	cu_write_text(tm_bpath(&m, "a/secret"), SECRET);
	CHECK_SYS(chmod(tm_bpath(&m, "a/secret"), 0600));
	cu_write_text(tm_bpath(&m, "a/secret2"), SECRET);
	CHECK_SYS(chmod(tm_bpath(&m, "a/secret2"), 0600));
	cu_write_text(tm_bpath(&m, "a/mine"), "A's own file, listed\n");
	CHECK_SYS(chown(tm_bpath(&m, "a/mine"), USER_A, USER_A));
	snprintf(opts, sizeof(opts), "allow_other,attr_timeout=60,cache_size=32M,chunk_size=4M");
	tm_mount(&m, opts, NULL);

	swap_and_read("a/secret", "a/mine", "1. a listed file");

	ASSERT_EQ(tm_as_user(USER_A, USER_A, as_a_write_mine2, NULL), 0);
	tm_sync(&m);
	swap_and_read("a/secret2", "a/mine2", "2. a file this mount published");

	/* 3. f: 12 MiB of 'A', its first chunk evicted; replaced on the backend by 'B'. */
	tm_stop(&m);
	snprintf(opts, sizeof(opts), "attr_timeout=60,cache_size=32M,chunk_size=4M,passthrough=off");
	tm_mount(&m, opts, NULL);	/* reads through the daemon, where the cache is */
	static char buf[12 << 20];
	memset(buf, 'A', sizeof(buf));
	int fd = cu_open(tm_path(&m, "f"), O_WRONLY | O_CREAT | O_TRUNC);
	cu_pwrite_all(fd, buf, sizeof(buf), 0);
	cu_close(fd);
	tm_sync(&m);
	cu_write_pattern(tm_path(&m, "g"), 24 << 20, 7);	/* evicts f's first chunks */
	tm_sync(&m);
	if (cu_stat(&m, "evictions") < 1)
		FAILF("%s", "f was not evicted");
	memset(buf, 'B', sizeof(buf));
	fd = cu_open(tm_bpath(&m, "f.new"), O_WRONLY | O_CREAT | O_TRUNC);
	cu_pwrite_all(fd, buf, sizeof(buf), 0);
	cu_close(fd);
	CHECK_SYS(rename(tm_bpath(&m, "f.new"), tm_bpath(&m, "f")));
	fd = cu_open(tm_path(&m, "f"), O_RDONLY);
	cu_pread_all(fd, buf, sizeof(buf), 0);
	cu_close(fd);
	size_t as = 0;
	for (size_t i = 0; i < sizeof(buf); i++)
		as += buf[i] == 'A';
	if (as != 0 && as != sizeof(buf))
		FAILF("3. a read of a replaced file mixed versions: %zu bytes of the old, %zu of "
		      "the new", as, sizeof(buf) - as);
	printf("3. a replaced file read whole as the %s version\n", as ? "old" : "new");

	tm_stop(&m);
	own_window();
	tm_cleanup(&m);
	printf("ok: a reopened base is the file the mount knows, or the name is looked up again\n");
	return 0;
}
