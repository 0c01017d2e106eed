/*
 * basecopy — a new version of a file built from its published file where
 * it did not change (base_copy, backend/flush.c): the unchanged ranges are
 * copied on the backend with copy_file_range and their digest comes from
 * the published file's block leaves, never from reading them back.  What
 * must hold, through the real mount, whatever the backend does with the
 * copy (ext4 here: the kernel copies; XFS/btrfs reflink):
 *
 *   1. base_copy=on: appends (each published before the next: leaves of
 *      leaves), an append sealed while the previous version is pending, a
 *      small overwrite in the middle, a shrink and a re-extension — after
 *      each, the backend file holds exactly the model's bytes, and the
 *      xattr digest is the reference digest of those bytes
 *      (tests/digest_ref.c); the path was taken (backend_copied_bytes
 *      grew); ckptfs-ctl verify passes after unmount.
 *   2. base_copy=off and auto on this file system (not XFS, btrfs or NFS):
 *      the same file, the data the cache holds written from it (under
 *      1 MiB copied: at most the zeros past the shrink, when that version
 *      is published before the next open); stats say which.  With base_copy=on
 *      and copy_file_range refused as unsupported (EXDEV), the same bytes
 *      and digest by read and write, nothing counted as copied; with it
 *      failing (EIO, twice), the versions are flushed again and the history
 *      still holds; a close that comes after its own version's copy failed
 *      is told EIO (a blocked operation's close, docs/contract.md), one
 *      that comes before is not: either is right there, nowhere else.
 *   3. base_copy=maybe is refused with exit 2, naming the option.
 *   4. Over XFS (an image on a loop device, where mkfs.xfs and loop devices
 *      exist; skipped otherwise): auto turns base_copy on and the same
 *      history holds with the copies made as reflinks.
 *   5. Whatever base_copy says, a new version hashes only the blocks it
 *      changed (known_blocks below).
 *   6. A version built on a file this mount wrote into a new temporary
 *      file copies that file's data from where it was written (kept with
 *      its leaves), without asking the file system where its extents are:
 *      backend_extent_walks stays put across step 5's later versions.  After a remount (the published file
 *      is an earlier mount's) and for a file swapped in at the name on the
 *      backend (another inode, the same bytes), it is asked
 *      (SEEK_DATA/SEEK_HOLE): the counter grows, and the bytes and digest
 *      are the model's either way.
 *   7. A file with more separate data ranges than the flusher keeps
 *      (RUNS_MAX in backend/flush.c, 65,536; lowered to 64 here with
 *      CKPTFS_RUNS_MAX, since 65,537 ranges cost minutes of disk writes),
 *      laid down on the backend directly, one 4 KiB block of data every
 *      8 KiB: a version written through the mount copies every range and
 *      keeps none, so the version after it asks the file system again (the
 *      counter grows) and still holds the ranges past the 64th: bytes and
 *      digest the model's, verify passes.  With half as many ranges, they are
 *      kept (the counter stays).
 *   8. A published file changed on the backend behind the mount before its
 *      next version: rewritten in place (the same inode), deleted and made
 *      again (the number comes back on ext4), or another file renamed over
 *      it — each with data where the published file had a hole.  The mount
 *      shows those bytes (beside what it still caches of its own writes;
 *      another inode renamed over it is looked up afresh and shown whole);
 *      the next version (a write elsewhere) holds what it showed and the
 *      write, its digest is theirs, verify passes, and for the same inode
 *      backend_base_changed counts it: neither the kept data ranges nor
 *      the kept block digests are used for a file that is not the one
 *      they were kept for.
 */
#include "tests/core/core_util.h"
#include "tests/digest_ref.h"

#include <linux/magic.h>
#include <sys/vfs.h>
#include <sys/xattr.h>

#define BIG (10 * MiB + 77)

struct model {
	char *buf;
	size_t len, cap;
};

static void model_write(struct model *md, uint64_t off, const void *p, size_t n)
{
	if (off + n > md->cap)
		FAILF("model overflow");
	if (off > md->len)
		memset(md->buf + md->len, 0, off - md->len);
	memcpy(md->buf + off, p, n);
	if (off + n > md->len)
		md->len = off + n;
}

static void model_truncate(struct model *md, size_t n)
{
	if (n > md->len)
		memset(md->buf + md->len, 0, n - md->len);
	md->len = n;
}

/* Everything durable (a failed copy waits for its retry: asked again until then). */
static void drain(struct tmount *m)
{
	cu_sync_retry(m, 30000);
}

/* The backend file is the model, and the digest the mount reports is the model's. */
static void check(struct tmount *m, const char *rel, const struct model *md, const char *when)
{
	char want[33], x[64];
	size_t len;
	char *got = read_file(tm_bpath(m, rel), &len);

	if (!got)
		FAILF("%s: backend file %s: %s", when, rel, strerror(errno));
	if (len != md->len || memcmp(got, md->buf, len)) {
		size_t at = 0;
		while (at < len && at < md->len && got[at] == md->buf[at])
			at++;
		FAILF("%s: backend %s differs from the model (%zu vs %zu bytes; first at %zu)", when,
		      rel, len, md->len, at);
	}
	free(got);
	td_digest_buf(md->buf, md->len, want);
	ssize_t n = CHECK_SYS(getxattr(tm_path(m, rel), "user.ckptfs.xxh3", x, sizeof(x) - 1));
	x[n] = '\0';
	if (strcmp(x, want))
		FAILF("%s: digest of %s is %s, the reference says %s", when, rel, x, want);
}

/* Set for the history whose copies fail: there a close may be told so. */
static bool close_may_fail;

static void close_told(int fd)
{
	if (close(fd) == 0)
		return;
	if (errno != EIO || !close_may_fail)
		FAILF("close: %s", strerror(errno));
}

static void append_line(struct tmount *m, struct model *md, const char *rel, int i)
{
	char line[64];
	int n = snprintf(line, sizeof(line), "step %d loss 0.%04d\n", i, 1234 + i);
	int fd = cu_open(tm_path(m, rel), O_WRONLY | O_APPEND);

	ASSERT_EQ(write(fd, line, (size_t)n), n);
	close_told(fd);
	model_write(md, md->len, line, (size_t)n);
}

static void ctl_bin(char *buf, size_t len, const char *tool)
{
	snprintf(buf, len, "%s", tm_daemon_bin());
	char *slash = strrchr(buf, '/');
	ASSERT_TRUE(slash != NULL);
	snprintf(slash + 1, len - (size_t)(slash + 1 - buf), "%s", tool);
}

/* After the mount stopped: ckptfs-ctl verify finds its one file as the manifest says. */
static void verify_one(struct tmount *m, const char *name)
{
	char ctl[PATH_MAX], *out = NULL;

	ctl_bin(ctl, sizeof(ctl), "ckptfs-ctl");
	const char *argv[] = { ctl, "verify", m->backend, NULL };
	int st = tm_run(argv, &out);
	if (st != 0 || !strstr(out, "1 ok, 0 mismatch"))
		FAILF("verify after %s (exit %d):\n%s", name, st, out);
	free(out);
}

/* What base_copy=auto decides for this directory's file system. */
static bool cheap_copies(const char *dir)
{
	struct statfs sf;

	CHECK_SYS(statfs(dir, &sf));
	return sf.f_type == XFS_SUPER_MAGIC || sf.f_type == BTRFS_SUPER_MAGIC ||
	       sf.f_type == NFS_SUPER_MAGIC;
}

/* Steps 1 and 2: the whole history on one mount; copied says whether base_copy is on. */
static void history(const char *name, const char *opts, int copied_or_auto, const char *under,
		    const char *const *env)
{
	struct tmount m;
	struct model md = { .buf = malloc(16 * MiB), .cap = 16 * MiB };
	char *data = malloc(BIG);

	ASSERT_TRUE(md.buf && data);
	tm_init(&m, name);
	if (under)	/* the backend on another file system */
		snprintf(m.backend, sizeof(m.backend), "%s", under);
	tm_mount(&m, opts, env);
	bool copied = copied_or_auto < 0 ? cheap_copies(m.backend) : copied_or_auto;
	bool on = opts && strstr(opts, "base_copy=on");	/* on, whatever the copies then do */
	ASSERT_EQ(strstr(cu_slurp(tm_path(&m, ".ckptfs/stats")),
			 copied || on ? "\"base_copy\": true" : "\"base_copy\": false") != NULL, true);
	fill_pattern(data, BIG, 41, 0);
	write_file(tm_path(&m, "log"), data, BIG);
	model_write(&md, 0, data, BIG);
	drain(&m);
	check(&m, "log", &md, "first version");
	uint64_t c0 = cu_stat(&m, "backend_copied_bytes");

	/* Appends, each published before the next: its leaves come from leaves. */
	for (int i = 0; i < 4; i++) {
		append_line(&m, &md, "log", i);
		drain(&m);
		check(&m, "log", &md, "append");
	}
	/* Two appends sealed back to back: the second may find the first pending. */
	append_line(&m, &md, "log", 4);
	append_line(&m, &md, "log", 5);
	drain(&m);
	check(&m, "log", &md, "appends in a row");

	/* 1000 bytes in the middle of a block, at an odd offset. */
	int fd = cu_open(tm_path(&m, "log"), O_WRONLY);
	fill_pattern(data, 1000, 42, 0);
	cu_pwrite_all(fd, data, 1000, 5 * MiB + 123);
	close_told(fd);
	model_write(&md, 5 * MiB + 123, data, 1000);
	drain(&m);
	check(&m, "log", &md, "overwrite in the middle");

	/* Shrink into a block, extend with zeros past the old end, one line more. */
	fd = cu_open(tm_path(&m, "log"), O_WRONLY);
	CHECK_SYS(ftruncate(fd, 7 * MiB + 5));
	model_truncate(&md, 7 * MiB + 5);
	CHECK_SYS(ftruncate(fd, 12 * MiB));
	model_truncate(&md, 12 * MiB);
	close_told(fd);
	append_line(&m, &md, "log", 6);
	drain(&m);
	check(&m, "log", &md, "shrunk and extended");

	uint64_t c1 = cu_stat(&m, "backend_copied_bytes");
	if (copied && c1 < c0 + 6 * 10 * MiB)
		FAILF("base_copy=on: only %llu bytes copied from the published file",
		      (unsigned long long)(c1 - c0));
	/*
	 * Off: what the cache holds is written from it.  Only a range it does
	 * not hold may come from a published file — the zeros past the shrink,
	 * when that version was published before the append opened the file.
	 */
	if (!copied && c1 >= MiB)
		FAILF("%s: %llu bytes copied, at most the tail of a shrink expected", name,
		      (unsigned long long)c1);
	tm_stop(&m);

	verify_one(&m, name);
	tm_cleanup(&m);
	free(md.buf);
	free(data);
}

/* Step 5: one write of n pattern bytes at off, published; the digest work it took. */
static uint64_t write_one(struct tmount *m, struct model *md, const char *rel, uint64_t off,
			  size_t n, uint64_t seed, const char *when)
{
	char buf[8192];
	uint64_t h0 = cu_stat(m, "backend_hashed_bytes");
	int fd = cu_open(tm_path(m, rel), O_WRONLY);

	ASSERT_TRUE(n <= sizeof(buf));
	fill_pattern(buf, n, seed, 0);
	cu_pwrite_all(fd, buf, n, off);
	close_told(fd);
	model_write(md, off, buf, n);
	drain(m);
	check(m, rel, md, when);
	return cu_stat(m, "backend_hashed_bytes") - h0;
}

#define KNOWN_SIZE (48 * MiB + 333)
#define KNOWN_MAX (4 * MiB + 2 * MiB)	/* the default chunk it touched, and a block more */

/*
 * Step 5: a version hashes only the blocks it changed.  A sparse file with
 * a little data in every block, published; then small writes, each
 * published before the next, two sealed back to back, and a shrink into a
 * block with a re-extension.  After each the backend and the digest are
 * the model's (check), and a one-write version hashed at most the chunk
 * it touched and a block (backend_hashed_bytes), not every block with
 * data (48 MiB here before).  With a cache smaller than the file, most of
 * the unchanged blocks are no longer cached: they are copied from the
 * published file unread (backend_copied_bytes).
 */
static void known_blocks(const char *name, const char *opts, bool evicted)
{
	struct tmount m;
	struct model md = { .buf = malloc(KNOWN_SIZE), .cap = KNOWN_SIZE };
	char piece[8192];

	ASSERT_TRUE(md.buf != NULL);
	tm_init(&m, name);
	tm_mount(&m, opts, NULL);
	int fd = cu_open(tm_path(&m, "sparse"), O_WRONLY | O_CREAT | O_TRUNC);
	for (uint64_t b = 0; b < KNOWN_SIZE / MiB; b++) {
		uint64_t off = b * MiB + 4096 * (b % 7) + 11 * (b % 3);
		fill_pattern(piece, sizeof(piece), 50 + b, 0);
		cu_pwrite_all(fd, piece, sizeof(piece), off);
		model_write(&md, off, piece, sizeof(piece));
	}
	CHECK_SYS(ftruncate(fd, KNOWN_SIZE));
	model_truncate(&md, KNOWN_SIZE);
	close_told(fd);
	drain(&m);
	check(&m, "sparse", &md, "first version");
	uint64_t c0 = cu_stat(&m, "backend_copied_bytes");

	uint64_t h = write_one(&m, &md, "sparse", 21 * MiB + 5000, 4096, 90, "a 4 KiB write");
	printf("%s: a 4 KiB write into a %d MiB file hashed %llu KiB\n", name, (int)(KNOWN_SIZE >> 20),
	       (unsigned long long)(h >> 10));
	if (h > KNOWN_MAX)
		FAILF("%s: a 4 KiB write hashed %llu bytes", name, (unsigned long long)h);
	/* From here on the published file is one this mount wrote into a new file (the first
	 * version may have gone out through its stage file, when the cache was short). */
	uint64_t w0 = cu_stat(&m, "backend_extent_walks");
	h = write_one(&m, &md, "sparse", KNOWN_SIZE - 100, 100, 91, "a write into the short last block");
	ASSERT_TRUE(h <= KNOWN_MAX);
	h = write_one(&m, &md, "sparse", 2 * MiB - 10, 20, 92, "a write across blocks");
	ASSERT_TRUE(h <= KNOWN_MAX);

	/* Two versions sealed back to back: the second may find the first pending. */
	fd = cu_open(tm_path(&m, "sparse"), O_WRONLY);
	fill_pattern(piece, 4096, 93, 0);
	cu_pwrite_all(fd, piece, 4096, 3 * MiB + 1);
	model_write(&md, 3 * MiB + 1, piece, 4096);
	close_told(fd);
	h = write_one(&m, &md, "sparse", 40 * MiB, 4096, 94, "two versions in a row");
	printf("%s: two such versions in a row hashed %llu KiB\n", name, (unsigned long long)(h >> 10));
	ASSERT_TRUE(h <= 3 * KNOWN_MAX);	/* the second's chunks: its own and the first's, if pending */

	/* Shrink into the middle of a block with data, then extend with zeros. */
	fd = cu_open(tm_path(&m, "sparse"), O_WRONLY);
	CHECK_SYS(ftruncate(fd, 30 * MiB + 4097));
	model_truncate(&md, 30 * MiB + 4097);
	CHECK_SYS(ftruncate(fd, KNOWN_SIZE));
	model_truncate(&md, KNOWN_SIZE);
	close_told(fd);
	write_one(&m, &md, "sparse", 10 * MiB, 4096, 95, "shrunk and extended");

	uint64_t copied = cu_stat(&m, "backend_copied_bytes") - c0;
	if (evicted && copied < 20 * sizeof(piece))
		FAILF("%s: only %llu bytes copied unread from the published file", name,
		      (unsigned long long)copied);
	uint64_t w1 = cu_stat(&m, "backend_extent_walks");
	printf("%s: extent look-ups for versions of a file this mount wrote: %llu\n", name,
	       (unsigned long long)(w1 - w0));
	ASSERT_EQ(w1, w0);
	/* ... and none of them took its base for one changed behind the mount (a base replaced
	 * by the version before has a new ctime, and no name). */
	ASSERT_EQ(cu_stat(&m, "backend_base_changed"), 0);

	/* Step 6: another inode at the name, the same bytes: its extents are asked for. */
	char tmp[PATH_MAX + 8];
	size_t len;
	char *bytes = read_file(tm_bpath(&m, "sparse"), &len);
	ASSERT_TRUE(bytes != NULL);
	snprintf(tmp, sizeof(tmp), "%s.swap", tm_bpath(&m, "sparse"));
	write_file(tmp, bytes, len);
	free(bytes);
	CHECK_SYS(rename(tmp, tm_bpath(&m, "sparse")));
	write_one(&m, &md, "sparse", 12 * MiB, 4096, 96, "over a file swapped in");
	uint64_t w2 = cu_stat(&m, "backend_extent_walks");
	printf("%s: extent look-ups for a version over another inode: %llu\n", name,
	       (unsigned long long)(w2 - w1));
	ASSERT_TRUE(w2 > w1);
	tm_stop(&m);

	/* After a remount the published file is an earlier mount's: asked, then known again. */
	tm_mount(&m, opts, NULL);
	w0 = cu_stat(&m, "backend_extent_walks");
	write_one(&m, &md, "sparse", 33 * MiB + 7, 4096, 97, "after a remount");
	w1 = cu_stat(&m, "backend_extent_walks");
	ASSERT_TRUE(w1 > w0);
	write_one(&m, &md, "sparse", 34 * MiB, 4096, 98, "after a remount, again");
	ASSERT_EQ(cu_stat(&m, "backend_extent_walks"), w1);
	tm_stop(&m);

	verify_one(&m, name);
	tm_cleanup(&m);
	free(md.buf);
}

#define RUNS_KEPT 64

/* Step 7: more data ranges (nruns and a write) than are kept, or fewer. */
static void many_runs(unsigned nruns)
{
	const size_t size = (size_t)nruns * 8192 + 6 * MiB;	/* leaves kept (4 MiB and more) */
	struct model md = { .buf = malloc(size), .cap = size };
	struct tmount m;
	char piece[4096], env[64];

	ASSERT_TRUE(md.buf != NULL);
	tm_init(&m, "basecopy_many_runs");
	int fd = CHECK_SYS(open(tm_bpath(&m, "runs"), O_WRONLY | O_CREAT | O_TRUNC, 0644));
	for (uint64_t k = 0; k < nruns; k++) {
		fill_pattern(piece, sizeof(piece), 700 + k, 0);
		cu_pwrite_all(fd, piece, sizeof(piece), k * 8192);
		model_write(&md, k * 8192, piece, sizeof(piece));
	}
	CHECK_SYS(ftruncate(fd, (off_t)size));
	model_truncate(&md, size);
	close(fd);
	snprintf(env, sizeof(env), "CKPTFS_RUNS_MAX=%d", RUNS_KEPT);
	tm_mount(&m, "attr_timeout=600", (const char *[]){ env, NULL });
	uint64_t w0 = cu_stat(&m, "backend_extent_walks");
	/* Past the ranges: the version copies every one of them from the earlier file. */
	write_one(&m, &md, "runs", size - MiB, 1000, 701, "a version over separate ranges");
	uint64_t w1 = cu_stat(&m, "backend_extent_walks");
	ASSERT_TRUE(w1 > w0);	/* an earlier mount's file: asked */
	write_one(&m, &md, "runs", size - 2 * MiB, 100, 702, "the version after it");
	uint64_t w2 = cu_stat(&m, "backend_extent_walks");
	printf("basecopy_many_runs: extent look-ups for the version after one of %u ranges "
	       "(%d kept): %llu\n", nruns + 1, RUNS_KEPT, (unsigned long long)(w2 - w1));
	if (nruns >= RUNS_KEPT)
		ASSERT_TRUE(w2 > w1);	/* too many to keep: asked again */
	else
		ASSERT_EQ(w2, w1);
	tm_stop(&m);
	verify_one(&m, "basecopy_many_runs");
	tm_cleanup(&m);
	free(md.buf);
}

#define CHANGED_SIZE (8 * MiB)

enum change { IN_PLACE, RECREATED, RENAMED_OVER };

/* Step 8: the published file changed behind the mount. */
static void changed_behind(enum change how)
{
	static const char *const names[] = { "basecopy_changed_in_place", "basecopy_changed_recreated",
					     "basecopy_changed_renamed_over" };
	struct model md = { .buf = malloc(CHANGED_SIZE), .cap = CHANGED_SIZE };
	struct tmount m;
	char piece[4096], got[4096], tmp[PATH_MAX + 8];
	struct stat st;

	ASSERT_TRUE(md.buf != NULL);
	tm_init(&m, names[how]);
	tm_mount(&m, "attr_timeout=600", NULL);
	int fd = cu_open(tm_path(&m, "f"), O_WRONLY | O_CREAT | O_TRUNC);
	for (int k = 0; k < 2; k++) {	/* data at 0 and 4 MiB, the rest a hole */
		fill_pattern(piece, sizeof(piece), 800 + k, 0);
		cu_pwrite_all(fd, piece, sizeof(piece), k * 4 * MiB);
	}
	CHECK_SYS(ftruncate(fd, CHANGED_SIZE));
	close_told(fd);
	drain(&m);
	CHECK_SYS(stat(tm_bpath(&m, "f"), &st));
	ino_t published = st.st_ino;

	/* Another program's file: data at 0 and at 1 MiB (a hole in the published one). */
	snprintf(tmp, sizeof(tmp), "%s.new", tm_bpath(&m, "f"));
	if (how == RECREATED)
		CHECK_SYS(unlink(tm_bpath(&m, "f")));
	int bfd = CHECK_SYS(open(how == RENAMED_OVER ? tmp : tm_bpath(&m, "f"),
				 O_RDWR | O_CREAT | O_TRUNC, 0644));
	for (int k = 0; k < 2; k++) {
		fill_pattern(piece, sizeof(piece), 810 + k, 0);
		cu_pwrite_all(bfd, piece, sizeof(piece), k * MiB);
		model_write(&md, k * MiB, piece, sizeof(piece));
	}
	CHECK_SYS(ftruncate(bfd, CHANGED_SIZE));
	model_truncate(&md, CHANGED_SIZE);
	CHECK_SYS(fstat(bfd, &st));
	close(bfd);
	if (how == RENAMED_OVER)
		CHECK_SYS(rename(tmp, tm_bpath(&m, "f")));
	printf("%s: inode %s\n", names[how], st.st_ino == published ? "the same" : "another");

	/* The model is what the mount shows: what it still caches of its own writes over the
	 * backend's file (until attr_timeout says the file changed), the new bytes in its hole. */
	uint64_t c0 = cu_stat(&m, "backend_base_changed");
	fd = cu_open(tm_path(&m, "f"), O_RDWR);
	if (memcmp(md.buf + MiB, (fill_pattern(got, sizeof(got), 811, 0), got), sizeof(got)))
		FAILF("model");
	cu_pread_all(fd, md.buf, CHANGED_SIZE, 0);
	if (memcmp(got, md.buf + MiB, sizeof(got)))
		FAILF("%s: the mount does not show the backend's new bytes at 1 MiB", names[how]);
	if (how == RENAMED_OVER && memcmp(md.buf, (fill_pattern(got, sizeof(got), 810, 0), got),
					  sizeof(got)))	/* another inode: looked up afresh */
		FAILF("%s: the mount shows its own cached bytes at 0 around another file's", names[how]);
	fill_pattern(piece, sizeof(piece), 820, 0);
	cu_pwrite_all(fd, piece, sizeof(piece), 6 * MiB);
	model_write(&md, 6 * MiB, piece, sizeof(piece));
	close_told(fd);
	drain(&m);
	check(&m, "f", &md, names[how]);
	if (how != RENAMED_OVER)	/* the same inode changed under the mount's version */
		ASSERT_TRUE(cu_stat(&m, "backend_base_changed") > c0);
	tm_stop(&m);
	verify_one(&m, names[how]);
	tm_cleanup(&m);
	free(md.buf);
}

/* Step 4: a 1 GiB sparse XFS image, loop-mounted in a scratch directory. */
static void xfs_history(void)
{
	struct tmount s;
	char img[PATH_MAX], dir[PATH_MAX], be[PATH_MAX], *out = NULL;

	tm_init(&s, "basecopy_xfs");
	snprintf(img, sizeof(img), "%s/xfs.img", s.root);
	snprintf(dir, sizeof(dir), "%s/xfs", s.root);
	snprintf(be, sizeof(be), "%s/xfs/backend", s.root);
	int fd = CHECK_SYS(open(img, O_WRONLY | O_CREAT | O_TRUNC, 0600));
	CHECK_SYS(ftruncate(fd, 1024 * MiB));
	close(fd);
	CHECK_SYS(mkdir(dir, 0755));
	const char *mkfs[] = { "mkfs.xfs", "-q", "-m", "reflink=1", img, NULL };
	const char *mnt[] = { "mount", "-o", "loop", img, dir, NULL };
	if (tm_run(mkfs, &out) != 0 || (free(out), out = NULL, tm_run(mnt, &out)) != 0) {
		printf("basecopy: no XFS here (mkfs.xfs or a loop device missing), step 4 skipped: %s\n",
		       out ? out : "");
		free(out);
		tm_cleanup(&s);
		return;
	}
	free(out);
	CHECK_SYS(mkdir(be, 0755));
	printf("basecopy: over XFS on a loop device\n");
	history("basecopy_xfs_auto", NULL, 1, be, NULL);
	const char *umnt[] = { "umount", dir, NULL };
	ASSERT_EQ(tm_run(umnt, NULL), 0);
	tm_cleanup(&s);
}

int main(void)
{
	tm_require_fuse();
	history("basecopy_on", "base_copy=on", 1, NULL, NULL);
	history("basecopy_off", "base_copy=off", 0, NULL, NULL);
	history("basecopy_auto", NULL, -1, NULL, NULL);	/* by the scratch directory's file system */
	/* copy_file_range unsupported there (EXDEV): the same bytes, read and written. */
	const char *exdev[] = { cu_fault_env("op=copy_file_range,err=EXDEV"), NULL };
	history("basecopy_exdev", "base_copy=on", 0, NULL, exdev);
	/* A copy that fails (EIO, twice): the version is flushed again, nothing torn. */
	const char *eio[] = { cu_fault_env("op=copy_file_range,err=EIO,count=2"), NULL };
	close_may_fail = true;
	history("basecopy_eio", "base_copy=on", 1, NULL, eio);
	close_may_fail = false;
	xfs_history();
	/* attr_timeout: the file swapped in under the mount in step 6 is not taken for another
	 * node's while the test writes (a revalidation would replace the mount's node). */
	known_blocks("basecopy_known", "attr_timeout=600", false);
	known_blocks("basecopy_known_evicted", "cache_size=16M,attr_timeout=600", true);
	many_runs(RUNS_KEPT + 1);
	many_runs(RUNS_KEPT / 2);
	changed_behind(IN_PLACE);
	changed_behind(RECREATED);
	changed_behind(RENAMED_OVER);

	/* Step 3. */
	cu_expect_refused("base_copy=maybe", "base_copy");
	return 0;
}
