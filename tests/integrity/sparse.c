/*
 * sparse.c — cost proportional to data, not size (issue 9 item 5): holes
 * stay holes on the backend and are never hashed byte by byte, through the
 * real mount, judged on the backend.
 *
 *  1. terabyte: among ordinary checkpoint files (some before, some after,
 *     then a `latest` marker), a 1 TiB file with 4 MiB of data at scattered
 *     offsets (unaligned, across block and chunk boundaries, a hole at the
 *     end).  It publishes (fsync of the root returns within the test's
 *     timeout; no time is asserted); on the backend it has its size, its
 *     allocated blocks are about its data, not its size, and it reads back
 *     right through the mount and on the backend (holes read as zeros).
 *     The manifest's digest and user.ckptfs.xxh3 equal the reference
 *     digest of a model of the file (tests/digest_ref.h); verify says OK,
 *     and MISMATCH once a data byte or a hole byte is changed on the
 *     backend — and OK again when the hole byte is set back to zero, now as
 *     allocated data (the digest is of the bytes, not of how they lie);
 *  2. rewrite: the published file reopened, a few KiB written in the
 *     middle, closed: the new version keeps the holes (it is built from
 *     the published file's data extents), reads right and verifies; then
 *     again on mounts where copy_file_range fails as unsupported (EXDEV,
 *     the pread/pwrite fallback) and copies only half of each call;
 *  3. stage: with a tiny cache, a file still open spills to a stage file;
 *     truncated down and up again, its cut range must read as zeros though
 *     the stage held data there: punched (and, where punching fails with
 *     EOPNOTSUPP, zeroed) — and with punching, not allocated;
 *  4. gaps: two 4 KiB writes 3 MiB apart in one cache chunk (the chunk
 *     holds zeros between them) take blocks for 8 KiB on the backend, not
 *     3 MiB; a dense file of zeros put on the backend directly, reopened
 *     through the mount and changed a little, comes out holes but for the
 *     pages with data (zeros are not copied as data);
 *  5. rescue: over a backend whose writes fail, a new sparse file and a
 *     rewrite of a published sparse one are rescued at exit with their
 *     holes (blocks about their data), right contents, and the digest of
 *     their model in the rescue manifest;
 *  6. petabyte: over a tmpfs backend (ext4 stops at 16 TiB), `truncate -s
 *     1P` and a 1 PiB file with 4 KiB at its end publish in seconds
 *     between ordinary files and a marker: the hole is not hashed (its
 *     digest is the definition's, built here by hand) and not written
 *     (no blocks), and verify passes.
 * Needs root for the tmpfs (case 4 is skipped without it).  Registered for
 * both I/O engines.
 */
#include "tests/integrity/integ.h"

#include <sys/mount.h>
#include <sys/xattr.h>
#include <xxhash.h>

#define TiB (1ull << 40)
#define PiB (1ull << 50)
#define NPIECE 16
#define PIECE (256 * KiB)
#define MINU(a, b) ((a) < (b) ? (a) : (b))

/* ---- a model of a sparse file: pieces of pattern, later ones on top ---- */

struct model {
	uint64_t size;
	struct td_piece p[64];
	size_t n;
};

static void model_add(struct model *m, uint64_t off, uint64_t len, uint64_t seed)
{
	ASSERT_LT(m->n, CU_LEN(m->p));
	m->p[m->n++] = (struct td_piece){ off, len, seed };
}

static uint64_t model_data(const struct model *m)
{
	uint64_t sum = 0;
	for (size_t i = 0; i < m->n; i++)
		sum += m->p[i].len;
	return sum;
}

/* The model's bytes [off, off + len) into buf; false if they are all zeros. */
static bool model_fill(void *arg, uint64_t off, size_t len, void *buf)
{
	const struct model *m = arg;
	struct td_pieces v = { m->p, m->n };
	return td_fill_pieces(&v, off, len, buf);
}

/* Write the pieces from `from` on through fd (the file is open in the mount). */
static void model_write(struct model *m, int fd, size_t from)
{
	for (size_t i = from; i < m->n; i++) {
		char *buf = malloc(m->p[i].len);
		fill_pattern(buf, m->p[i].len, m->p[i].seed, m->p[i].off);
		cu_pwrite_all(fd, buf, m->p[i].len, m->p[i].off);
		free(buf);
	}
}

/* [off, off+len) of path must be what the model says. */
static void check_window(const char *path, const struct model *m, uint64_t off, uint64_t len)
{
	if (off >= m->size)
		return;
	len = MINU(len, m->size - off);
	char *got = malloc(len), *want = malloc(len);
	int fd = cu_open(path, O_RDONLY);

	cu_pread_all(fd, got, len, off);
	if (!model_fill((void *)m, off, len, want))
		memset(want, 0, len);
	for (size_t i = 0; i < len; i++)
		if (got[i] != want[i])
			FAILF("%s: wrong byte at offset %" PRIu64 " (0x%02x, expected 0x%02x)", path,
			      off + i, (unsigned char)got[i], (unsigned char)want[i]);
	cu_close(fd);
	free(got);
	free(want);
}

/* The model's contents, read back around every piece and in the holes between. */
static void check_contents(const char *path, const struct model *m)
{
	char c;
	int fd;

	ASSERT_EQ(cu_file_size(path), m->size);
	for (size_t i = 0; i < m->n; i++) {
		const struct td_piece *p = &m->p[i];
		uint64_t lo = p->off > 8192 ? p->off - 8192 : 0;
		check_window(path, m, lo, p->len + (p->off - lo) + 8192);
		check_window(path, m, p->off + p->len + m->size / 97, 64 * KiB);	/* a hole, mostly */
	}
	check_window(path, m, m->size - 64 * KiB, 64 * KiB);
	fd = cu_open(path, O_RDONLY);
	ASSERT_EQ(pread(fd, &c, 1, (off_t)m->size), 0);
	cu_close(fd);
}

/* ---- the backend ---------------------------------------------------------- */

/* The newest manifest record of a file version at rel: its digest. */
static void record_digest(struct tmount *m, const char *rel, char hex[33])
{
	struct it_log l;
	char t[16], p[PATH_MAX];

	hex[0] = '\0';
	ASSERT_EQ(it_log_read(it_manifest_path(m), &l), 0);
	for (size_t i = l.n; i-- > 0;)
		if (it_json_get(l.r[i].payload, "t", t, sizeof(t)) && !strcmp(t, "file") &&
		    it_json_get(l.r[i].payload, "path", p, sizeof(p)) && !strcmp(p, rel)) {
			ASSERT_TRUE(it_json_get(l.r[i].payload, "xxh3", hex, 33));
			break;
		}
	it_log_free(&l);
	if (!hex[0])
		FAILF("no file record for %s in the manifest", rel);
}

/* The manifest, the xattr and the reference agree on the model's digest. */
static void check_digest(struct tmount *m, const char *rel, const struct model *md)
{
	char want[33], rec[33], x[64];

	td_digest_fill(md->size, model_fill, (void *)md, want);
	record_digest(m, rel, rec);
	ASSERT_STR_EQ(rec, want);
	ssize_t n = getxattr(tm_path(m, rel), "user.ckptfs.xxh3", x, sizeof(x) - 1);
	if (n < 0)
		FAILF("%s: no digest (%s); its state is %s; stats %s", rel, strerror(errno),
		      cu_file_state(tm_path(m, rel)), cu_slurp(tm_path(m, ".ckptfs/files")));
	x[n] = '\0';
	ASSERT_STR_EQ(x, want);
}

static void expect_verify(const char *path, const char *rel, const char *verdict, int status)
{
	char *out;
	int st = it_verify(path, 0, &out);

	if (st != status || strcmp(it_verdict(out, rel), verdict))
		FAILF("verify %s: expected %s %s (exit %d), got exit %d:\n%s", path, verdict, rel,
		      status, st, out);
	free(out);
}

/* Overwrite one byte of a backend file. */
static void poke(const char *path, uint64_t off, char c)
{
	int fd = cu_open(path, O_WRONLY);
	cu_pwrite_all(fd, &c, 1, off);
	cu_close(fd);
}

/* ---- 1 and 2: a terabyte among checkpoint files ---------------------------- */

static const struct it_file before[] = {
	{ "step1/mp_rank_00_model_states.pt", 1, 3 * MiB + 5 },
	{ "step1/zero_pp_rank_0_optim_states.pt", 2, MiB },
};
static const struct it_file after[] = {
	{ "step1/zero_pp_rank_1_optim_states.pt", 3, MiB + 17 },
	{ "step1/zero_pp_rank_2_optim_states.pt", 4, 100 * KiB },
};
#define SPARSE "step1/sparse.bin"

static void check_published(struct tmount *m, const struct model *md, bool holes)
{
	const char *b = tm_bpath(m, SPARSE);

	ASSERT_EQ(cu_file_size(b), md->size);
	if (holes && cu_allocated(b) > model_data(md) + NPIECE * 16 * KiB + MiB)
		FAILF("%s holds %" PRIu64 " bytes of blocks for %" PRIu64 " bytes of data", b,
		      cu_allocated(b), model_data(md));
	check_contents(b, md);
	check_contents(tm_path(m, SPARSE), md);
	check_digest(m, SPARSE, md);
	expect_verify(tm_bpath(m, "step1"), SPARSE, "OK", 0);
	ASSERT_EQ(count_temp_files(tm_bpath(m, "step1")), 0);
}

/* Reopen the published file, write a little, close, and check the new version. */
static void rewrite(struct tmount *m, struct model *md, bool holes, uint64_t off, uint64_t len,
		    uint64_t seed)
{
	int fd = cu_open(tm_path(m, SPARSE), O_WRONLY);

	model_add(md, off, len, seed);
	model_write(md, fd, md->n - 1);
	cu_close(fd);
	tm_sync(m);
	check_published(m, md, holes);
}

static void case_terabyte(void)
{
	struct tmount m;
	struct model md = { .size = TiB };
	bool holes;
	int fd;

	tm_start(&m, "sparse", NULL, NULL);
	holes = cu_keeps_holes(m.backend);
	CHECK_SYS(mkdir(tm_path(&m, "step1"), 0755));
	it_write_files(&m, before, CU_LEN(before), 0);
	model_add(&md, 0, PIECE, 40);
	for (uint64_t i = 1; i < NPIECE; i++)	/* 64 GiB apart, astride block and chunk edges */
		model_add(&md, i * (TiB / NPIECE) + i * MiB - 100 * KiB + i * 1111, PIECE, 40 + i);
	fd = cu_open(tm_path(&m, SPARSE), O_CREAT | O_WRONLY | O_TRUNC);
	CHECK_SYS(ftruncate(fd, (off_t)md.size));
	model_write(&md, fd, 0);
	cu_close(fd);
	it_write_files(&m, after, CU_LEN(after), 0);
	cu_write_text(tm_path(&m, "latest"), "step1");
	tm_sync(&m);

	ASSERT_STR_EQ(cu_slurp(tm_bpath(&m, "latest")), "step1");
	for (size_t i = 0; i < CU_LEN(before); i++)
		ASSERT_TRUE(it_has_pattern(tm_bpath(&m, before[i].rel), before[i].seed, before[i].size));
	for (size_t i = 0; i < CU_LEN(after); i++)
		ASSERT_TRUE(it_has_pattern(tm_bpath(&m, after[i].rel), after[i].seed, after[i].size));
	check_published(&m, &md, holes);

	/* verify reads every data byte, and the holes count as zeros. */
	const char *b = tm_bpath(&m, SPARSE);
	uint64_t data_at = md.p[5].off + 1000, hole_at = md.p[5].off + 5 * GiB;
	char orig;
	int rfd = cu_open(b, O_RDONLY);
	cu_pread_all(rfd, &orig, 1, data_at);
	cu_close(rfd);
	poke(b, data_at, (char)(orig ^ 0x5a));
	expect_verify(tm_bpath(&m, "step1"), SPARSE, "MISMATCH", 1);
	poke(b, data_at, orig);
	poke(b, hole_at, 1);
	expect_verify(tm_bpath(&m, "step1"), SPARSE, "MISMATCH", 1);
	poke(b, hole_at, 0);	/* zeros again, now allocated: the same bytes, the same digest */
	expect_verify(tm_bpath(&m, "step1"), SPARSE, "OK", 0);
	expect_verify(m.backend, "step1/zero_pp_rank_2_optim_states.pt", "OK", 0);

	/* 2: rewrites build the new version from the published one's data extents. */
	rewrite(&m, &md, holes, TiB / 2 + 12345, 5000, 60);
	tm_stop(&m);

	const char *exdev[] = { cu_fault_env("op=copy_file_range,err=EXDEV"), NULL };
	tm_mount(&m, NULL, exdev);
	rewrite(&m, &md, holes, 100 * GiB + 1, 6000, 61);
	tm_stop(&m);

	const char *half[] = { cu_fault_env("op=copy_file_range,err=short"), NULL };
	tm_mount(&m, NULL, half);
	rewrite(&m, &md, holes, md.p[2].off + 100, 3000, 62);	/* inside a piece */
	tm_stop(&m);
	tm_cleanup(&m);
}

/* ---- 3: a stage file's cut range ----------------------------------------- */

static void case_stage(const char *fault)
{
	struct tmount m;
	struct model md = { .size = 20 * MiB };
	const char *env[] = { fault ? cu_fault_env("%s", fault) : NULL, NULL };
	bool holes;
	int fd;

	tm_start(&m, "sparse-stage", "cache_size=4M,chunk_size=256K", env);
	holes = cu_keeps_holes(m.backend) && !fault;
	fd = cu_open(tm_path(&m, "st"), O_CREAT | O_RDWR | O_TRUNC);
	cu_write_pattern_fd(fd, 0, 12 * MiB, 5, MiB);	/* three times the cache: spills */
	if (count_temp_files(m.backend) < 1)
		FAILF("no stage file on the backend after writing 12 MiB through a 4 MiB cache");
	CHECK_SYS(ftruncate(fd, (off_t)(MiB + 1000)));
	CHECK_SYS(ftruncate(fd, (off_t)md.size));
	model_add(&md, 0, MiB + 1000, 5);
	model_add(&md, 15 * MiB, 4 * KiB, 6);
	model_write(&md, fd, 1);
	cu_close(fd);
	tm_sync(&m);

	const char *b = tm_bpath(&m, "st");
	ASSERT_EQ(cu_file_size(b), md.size);
	check_window(b, &md, 0, md.size);
	check_window(tm_path(&m, "st"), &md, 0, md.size);
	if (holes && cu_allocated(b) > 2 * MiB)
		FAILF("%s: %" PRIu64 " bytes allocated for %" PRIu64 " of data: the cut range was "
		      "not punched", b, cu_allocated(b), model_data(&md));
	check_digest(&m, "st", &md);
	expect_verify(m.backend, "st", "OK", 0);
	ASSERT_EQ(count_temp_files(m.backend), 0);
	tm_stop(&m);
	tm_cleanup(&m);
}

/* ---- 4: zeros inside chunks and inside published files -------------------- */

static void case_gaps(void)
{
	struct tmount m;
	struct model md = { .size = 3 * MiB + 4 * KiB };
	struct model dz = { .size = 8 * MiB };
	bool holes;
	int fd;

	tm_init(&m, "sparse-gaps");
	holes = cu_keeps_holes(m.backend);
	/* A dense file of zeros, as an older ckptfs or another tool left it. */
	char *zeros = calloc(1, dz.size);
	write_file(tm_bpath(&m, "dense"), zeros, dz.size);
	free(zeros);
	tm_mount(&m, NULL, NULL);
	model_add(&md, 0, 4 * KiB, 7);
	model_add(&md, 3 * MiB, 4 * KiB, 8);
	fd = cu_open(tm_path(&m, "gap"), O_CREAT | O_WRONLY | O_TRUNC);
	model_write(&md, fd, 0);
	cu_close(fd);
	fd = cu_open(tm_path(&m, "dense"), O_WRONLY);
	model_add(&dz, 5 * MiB + 10, 100, 9);
	model_write(&dz, fd, 0);
	cu_close(fd);
	tm_sync(&m);

	check_window(tm_bpath(&m, "gap"), &md, 0, md.size);
	check_window(tm_bpath(&m, "dense"), &dz, 0, dz.size);
	check_digest(&m, "gap", &md);
	check_digest(&m, "dense", &dz);
	if (holes) {
		ASSERT_LE(cu_allocated(tm_bpath(&m, "gap")), 64 * KiB);
		ASSERT_LE(cu_allocated(tm_bpath(&m, "dense")), 64 * KiB);
	}
	expect_verify(m.backend, "gap", "OK", 0);
	tm_stop(&m);
	tm_cleanup(&m);
}

/* ---- 5: rescue keeps holes ------------------------------------------------- */

static void case_rescue(void)
{
	struct tmount m;
	struct model base = { .size = 256 * MiB }, fresh = { .size = GiB };
	const char *env[] = { cu_fault_env("op=pwrite,err=EIO"), NULL };
	char opts[PATH_MAX + 64], rescue[PATH_MAX], where[PATH_MAX * 2], host[256] = "", mid[32];
	bool holes;
	int fd;

	tm_start(&m, "sparse-rescue", NULL, NULL);
	holes = cu_keeps_holes(m.backend);
	model_add(&base, 3 * MiB + 5, 70 * KiB, 20);
	model_add(&base, 200 * MiB, 30 * KiB, 21);
	fd = cu_open(tm_path(&m, "base"), O_CREAT | O_WRONLY | O_TRUNC);
	CHECK_SYS(ftruncate(fd, (off_t)base.size));
	model_write(&base, fd, 0);
	cu_close(fd);
	tm_stop(&m);

	snprintf(rescue, sizeof(rescue), "%s/rescue", m.root);
	snprintf(opts, sizeof(opts), "drain_timeout=2,rescue_dir=%s", rescue);
	tm_mount(&m, opts, env);
	ASSERT_TRUE(it_json_get(it_stats(&m), "mount_id", mid, sizeof(mid)));
	fd = cu_open(tm_path(&m, "base"), O_WRONLY);
	model_add(&base, 100 * MiB, 10 * KiB, 22);
	model_write(&base, fd, base.n - 1);
	close(fd);	/* may see its own failure */
	fd = cu_open(tm_path(&m, "fresh"), O_CREAT | O_WRONLY | O_TRUNC);
	CHECK_SYS(ftruncate(fd, (off_t)fresh.size));
	model_add(&fresh, 0, 5000, 23);
	model_add(&fresh, 700 * MiB + 3, 50 * KiB, 24);
	model_write(&fresh, fd, 0);
	close(fd);
	if (cu_stop_any(&m) == 0)
		FAILF("the daemon exited 0 although it could not persist its data");

	gethostname(host, sizeof(host) - 1);
	snprintf(where, sizeof(where), "%s/%s-%s/manifest.jsonl", rescue, host, mid);
	size_t len;
	char *text = read_file(where, &len), line[PATH_MAX * 3], v[64], want[33];
	if (!text)
		FAILF("no rescue manifest %s: %s", where, strerror(errno));
	text = realloc(text, len + 1);
	text[len] = '\0';
	const struct { const char *rel; struct model *md; } saved[] = { { "base", &base },
									 { "fresh", &fresh } };
	for (size_t i = 0; i < CU_LEN(saved); i++) {
		char *p = text, *found = NULL;
		snprintf(line, sizeof(line), "\"path\": \"%s\"", saved[i].rel);
		for (char *q; (q = strstr(p, line)); p = q + 1)
			found = q;	/* the newest version of the path */
		if (!found)
			FAILF("%s is not in %s:\n%s", saved[i].rel, where, text);
		while (found > text && found[-1] != '\n')
			found--;
		snprintf(line, sizeof(line), "%.*s", (int)(strchr(found, '\n') - found), found);
		ASSERT_TRUE(it_json_get(line, "xxh3", v, sizeof(v)));
		td_digest_fill(saved[i].md->size, model_fill, saved[i].md, want);
		ASSERT_STR_EQ(v, want);
		ASSERT_TRUE(it_json_get(line, "saved", v, sizeof(v)));
		ASSERT_STR_EQ(v, "true");
		snprintf(line, sizeof(line), "%s/%s-%s/files/%s", rescue, host, mid, saved[i].rel);
		check_contents(line, saved[i].md);
		if (holes && cu_allocated(line) > model_data(saved[i].md) + 256 * KiB)
			FAILF("rescued %s holds %" PRIu64 " bytes of blocks for %" PRIu64 " of data",
			      line, cu_allocated(line), model_data(saved[i].md));
	}
	free(text);
	tm_cleanup(&m);
}

/* ---- 6: a petabyte on tmpfs ------------------------------------------------ */

static char tmpfs_dir[PATH_MAX];

static void tmpfs_release(void)
{
	if (tmpfs_dir[0] && umount2(tmpfs_dir, MNT_DETACH) < 0)
		fprintf(stderr, "warning: umount %s: %s\n", tmpfs_dir, strerror(errno));
	tmpfs_dir[0] = '\0';
}

/* The digest of `size` zero bytes (a multiple of 1 MiB), by hand from the definition. */
static void zero_digest(uint64_t size, char hex[33])
{
	unsigned char *zb = calloc(1, MiB), rec[32];
	XXH128_canonical_t c;
	XXH128_hash_t h;

	XXH128_canonicalFromHash(&c, XXH3_128bits(zb, MiB));
	memcpy(rec, c.digest, 16);
	for (int i = 0; i < 8; i++) {
		rec[16 + i] = (unsigned char)((size / MiB) >> (8 * i));
		rec[24 + i] = (unsigned char)(size >> (8 * i));
	}
	h = XXH3_128bits(rec, sizeof(rec));
	snprintf(hex, 33, "%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
	free(zb);
}

static void case_petabyte(void)
{
	static const struct it_file files[] = { { "run/a", 1, MiB }, { "run/b", 2, 3 * KiB } };
	struct model tail = { .size = PiB };
	struct tmount m;
	char want[33], rec[33];
	int fd;

	if (geteuid() != 0) {
		fprintf(stderr, "note: not root, no tmpfs: the petabyte case is skipped\n");
		return;
	}
	tm_init(&m, "sparse-pb");
	if (mount("tmpfs", m.backend, "tmpfs", 0, "size=64m,mode=0755") < 0) {
		fprintf(stderr, "note: cannot mount a tmpfs (%s): the petabyte case is skipped\n",
			strerror(errno));
		tm_cleanup(&m);
		return;
	}
	snprintf(tmpfs_dir, sizeof(tmpfs_dir), "%s", m.backend);
	atexit(tmpfs_release);
	tm_mount(&m, NULL, NULL);
	CHECK_SYS(mkdir(tm_path(&m, "run"), 0755));
	it_write_files(&m, files, 1, 0);
	fd = cu_open(tm_path(&m, "run/huge"), O_CREAT | O_WRONLY | O_TRUNC);
	cu_close(fd);
	CHECK_SYS(truncate(tm_path(&m, "run/huge"), (off_t)PiB));	/* truncate -s 1P */
	fd = cu_open(tm_path(&m, "run/tail"), O_CREAT | O_WRONLY | O_TRUNC);
	CHECK_SYS(ftruncate(fd, (off_t)PiB));
	model_add(&tail, PiB - 4 * KiB - 7, 4 * KiB, 3);
	model_write(&tail, fd, 0);
	cu_close(fd);
	it_write_files(&m, files + 1, 1, 0);
	cu_write_text(tm_path(&m, "run/latest"), "huge");
	tm_sync(&m);	/* hashing the hole would take most of a day: the timeout says */

	ASSERT_STR_EQ(cu_slurp(tm_bpath(&m, "run/latest")), "huge");
	ASSERT_TRUE(it_has_pattern(tm_bpath(&m, "run/b"), 2, 3 * KiB));
	ASSERT_EQ(cu_file_size(tm_bpath(&m, "run/huge")), PiB);
	ASSERT_EQ(cu_allocated(tm_bpath(&m, "run/huge")), 0);
	ASSERT_LE(cu_allocated(tm_bpath(&m, "run/tail")), 64 * KiB);
	zero_digest(PiB, want);
	record_digest(&m, "run/huge", rec);
	ASSERT_STR_EQ(rec, want);
	struct model hole = { .size = PiB };
	check_contents(tm_path(&m, "run/huge"), &hole);
	check_contents(tm_bpath(&m, "run/tail"), &tail);
	check_contents(tm_path(&m, "run/tail"), &tail);
	char *out;
	int st = it_verify(tm_bpath(&m, "run"), 0, &out);
	if (st != 0 || it_verdict_count(out, "OK") != 5)
		FAILF("verify of the petabyte files (exit %d):\n%s", st, out);
	free(out);
	poke(tm_bpath(&m, "run/tail"), PiB - 100, 0x11);
	expect_verify(tm_bpath(&m, "run"), "run/tail", "MISMATCH", 1);
	tm_stop(&m);
	tmpfs_release();
	tm_cleanup(&m);
}

int main(void)
{
	tm_require_fuse();
	case_terabyte();
	case_stage(NULL);
	case_stage("op=fallocate,err=EOPNOTSUPP");
	case_gaps();
	case_rescue();
	case_petabyte();
	return 0;
}
