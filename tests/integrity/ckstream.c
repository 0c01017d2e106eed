/*
 * ckstream.c — the checkpoint stream that the crash loop (crash.c) and the
 * power-loss loop (powerloss.c) write through a mount, and how they judge a
 * backend after it (see ckstream.h).
 *
 * The stream writes checkpoints the way four frameworks do:
 *
 *   DeepSpeed-like  ds/global_step<N>/{zero_pp_rank_<r>_mp_rank_00_optim_states.pt
 *                   (one written with O_DIRECT), mp_rank_00_model_states.pt}, with
 *                   ds/zero_to_fp32.py rewritten among them (a file of the
 *                   marker's directory between the checkpoint's files), then
 *                   ds/latest rewritten in place, then the mount root fsync'd;
 *   DCP-like        dcp/step_<N>/__<r>_0.distcp each fsync'd, .metadata.tmp
 *                   fsync'd then renamed to .metadata;
 *   Megatron-like   mg/iter_<N:07>/mp_rank_0<r>/model_optim_rng.pt (rank 1's
 *                   sparse: 4-12 MiB with two small data ranges, written
 *                   by seeking over the holes, and a hole at its end), then
 *                   mg/latest_checkpointed_iteration.txt rewritten in place;
 *   Orbax-like      orbax/<N>.orbax-checkpoint-tmp/{array_<r>, _CHECKPOINT_METADATA},
 *                   no fsync, then the directory renamed to orbax/<N>;
 * each keeps its two newest checkpoints and deletes the oldest (rmtree)
 * after its marker.  File contents derive from (framework, step, file).
 *
 * The child logs each operation to a file outside the mount *before* it
 * attempts it ("M dir", "V file size hash", "R from to", "U file",
 * "D dir") and an "A" after every fsync that returned 0, so the log bounds
 * what the backend may hold: the state after some prefix of the logged
 * operations, at least as long as the last acknowledged one.  The checks:
 *  - every file under its final name has exactly the contents of one of
 *    its closed versions (not torn, zero-filled or mixed);
 *  - the backend equals the model after some prefix p >= acknowledged
 *    (prefix consistency; nothing fsync-acknowledged is missing);
 *  - every marker (ds/latest, dcp/.../.metadata, the Megatron tracker, an
 *    Orbax directory under its final name) names a checkpoint whose files
 *    are all present with the expected contents, and `ckptfs-ctl verify`
 *    says OK for each of them (checkpoints being deleted excepted);
 *  - after a mount (recovery): no ".ckptfs." name anywhere, the mount shows
 *    exactly the backend, and verify of the whole backend finds nothing
 *    MISMATCH, MISSING or UNTRACKED.
 * Violations are counted, not fatal, so one run reports them all (a bad
 * verify verdict once, however many rounds it stays).
 */
#include "tests/integrity/ckstream.h"

#include <dirent.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>

#define CS_KEEP 2			/* checkpoints kept per framework */
#define CS_MAX_FILES 8

enum cs_fw { CS_FW_DS, CS_FW_DCP, CS_FW_MG, CS_FW_OX, CS_FW_COUNT };
static const char *const cs_fw_name[CS_FW_COUNT] = { "ds", "dcp", "mg", "orbax" };
#define CS_OX_TMP ".orbax-checkpoint-tmp"

struct cs_spec {
	char rel[160];
	uint64_t seed;
	size_t size;
	bool direct;		/* written with O_DIRECT */
	bool fsync;		/* fsync'd before close */
	bool sparse;		/* data only in cs_sparse_ranges(), holes elsewhere */
};

/* The data ranges of a sparse file ([0]..[1] and [2]..[3]); zeros elsewhere. */
static void cs_sparse_ranges(const struct cs_spec *sp, size_t r[4])
{
	r[0] = 0;
	r[1] = 64 * KiB + sp->seed % 4096;
	r[2] = sp->size / 2 - 5000;
	r[3] = sp->size / 2 + 70 * KiB;
}

/* The contents of a file of the stream (size bytes at buf). */
static void cs_spec_fill(const struct cs_spec *sp, char *buf)
{
	size_t r[4];

	fill_pattern(buf, sp->size, sp->seed, 0);
	if (!sp->sparse)
		return;
	cs_sparse_ranges(sp, r);
	memset(buf + r[1], 0, r[2] - r[1]);
	memset(buf + r[3], 0, sp->size - r[3]);
}

static uint64_t mix(uint64_t x)
{
	x ^= x >> 31;
	x *= 0x9E3779B97F4A7C15ull;
	x ^= x >> 29;
	x *= 0xBF58476D1CE4E5B9ull;
	return x ^ (x >> 32);
}

static uint64_t file_seed(enum cs_fw fw, unsigned step, unsigned idx)
{
	return mix(((uint64_t)fw << 48) ^ ((uint64_t)step << 8) ^ idx);
}

static void cs_ckpt_dir(enum cs_fw fw, unsigned step, char *buf, size_t len)
{
	if (fw == CS_FW_DS)
		snprintf(buf, len, "ds/global_step%u", step);
	else if (fw == CS_FW_DCP)
		snprintf(buf, len, "dcp/step_%u", step);
	else if (fw == CS_FW_MG)
		snprintf(buf, len, "mg/iter_%07u", step);
	else
		snprintf(buf, len, "orbax/%u", step);
}

/* The files of one checkpoint, its marker excluded; returns how many. */
static unsigned cs_ckpt_files(enum cs_fw fw, unsigned step, struct cs_spec *s)
{
	char dir[64];
	unsigned n = 0;

	cs_ckpt_dir(fw, step, dir, sizeof(dir));
	memset(s, 0, CS_MAX_FILES * sizeof(*s));
	for (unsigned i = 0; i < (fw == CS_FW_MG ? 2u : 3u); i++, n++) {
		uint64_t h = file_seed(fw, step, i);
		s[n].seed = h;
		if (fw == CS_FW_DS) {
			snprintf(s[n].rel, sizeof(s[n].rel),
				 "%s/zero_pp_rank_%u_mp_rank_00_optim_states.pt", dir, i);
			s[n].size = 4 * KiB * (1 + h % 64);
			s[n].direct = i == 0;
		} else if (fw == CS_FW_DCP) {
			snprintf(s[n].rel, sizeof(s[n].rel), "%s/__%u_0.distcp", dir, i);
			s[n].size = 1 + h % (512 * KiB);
			s[n].fsync = true;
		} else if (fw == CS_FW_MG) {
			snprintf(s[n].rel, sizeof(s[n].rel), "%s/mp_rank_%02u/model_optim_rng.pt", dir, i);
			s[n].size = i == 1 ? 4 * MiB + h % (8 * MiB) : 64 * KiB + h % MiB;
			s[n].sparse = i == 1;
		} else if (i < 2) {
			snprintf(s[n].rel, sizeof(s[n].rel), "%s/array_%u", dir, i);
			s[n].size = 1 + h % (768 * KiB);
		} else {
			snprintf(s[n].rel, sizeof(s[n].rel), "%s/_CHECKPOINT_METADATA", dir);
			s[n].size = 200 + h % 300;
		}
	}
	if (fw == CS_FW_DS) {
		uint64_t h = file_seed(fw, step, 99);
		snprintf(s[n].rel, sizeof(s[n].rel), "%s/mp_rank_00_model_states.pt", dir);
		s[n].seed = h;
		/* every fourth step spans two default (4 MiB) chunks */
		s[n].size = 64 * KiB + h % (step % 4 ? 2 * MiB : 6 * MiB);
		n++;
	}
	return n;
}

/* The marker file's path and the text it holds for `step` (Orbax has none). */
static void cs_marker(enum cs_fw fw, unsigned step, char *path, size_t plen, char *text,
		      size_t tlen)
{
	char dir[64];

	cs_ckpt_dir(fw, step, dir, sizeof(dir));
	if (fw == CS_FW_DS) {
		snprintf(path, plen, "ds/latest");
		snprintf(text, tlen, "global_step%u", step);
	} else if (fw == CS_FW_DCP) {
		struct cs_spec s[CS_MAX_FILES];
		unsigned n = cs_ckpt_files(fw, step, s), k = 0;
		snprintf(path, plen, "%s/.metadata", dir);
		k += (unsigned)snprintf(text, tlen, "{\"step\": %u, \"shards\": [", step);
		for (unsigned i = 0; i < n && k < tlen; i++)
			k += (unsigned)snprintf(text + k, tlen - k, "%s[\"%s\", %zu]", i ? ", " : "",
						strrchr(s[i].rel, '/') + 1, s[i].size);
		if (k < tlen)
			snprintf(text + k, tlen - k, "]}\n");
	} else {
		snprintf(path, plen, "mg/latest_checkpointed_iteration.txt");
		snprintf(text, tlen, "%u", step);
	}
}

/* ---- the child: a checkpoint stream that logs what it attempts ---------- */

struct stream {
	int root;		/* the mount root: dies with the daemon, never the stub dir */
	int log;
};

static void s_log(struct stream *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void s_log(struct stream *s, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	line[n++] = '\n';
	if (write(s->log, line, (size_t)n) != n)
		_exit(3);
}

/* The daemon is gone (or something failed): the stream ends here. */
static void s_end(struct stream *s, const char *what, const char *rel)
{
	s_log(s, "E %s %s: %s", what, rel, strerror(errno));
	_exit(0);
}

static void s_mkdir(struct stream *s, const char *rel)
{
	s_log(s, "M %s", rel);
	if (mkdirat(s->root, rel, 0755) < 0 && errno != EEXIST)
		s_end(s, "mkdir", rel);
}

/* Write [off, end) of buf at the same offset. */
static void s_pwrite(struct stream *s, int fd, const char *rel, const char *buf, size_t off,
		     size_t end)
{
	const size_t piece = 256 * KiB;

	while (off < end) {
		size_t k = end - off < piece ? end - off : piece;
		ssize_t n = pwrite(fd, buf + off, k, (off_t)off);
		if (n <= 0)
			s_end(s, "write", rel);
		off += (size_t)n;
	}
}

/* sparse: only the ranges of cs_sparse_ranges(sparse) are written; the rest are holes. */
static void s_write(struct stream *s, const char *rel, const char *buf, size_t len, bool direct,
		    bool do_fsync, const struct cs_spec *sparse)
{
	int fd = openat(s->root, rel, O_CREAT | O_WRONLY | O_TRUNC | (direct ? O_DIRECT : 0), 0644);

	if (fd < 0)
		s_end(s, "open", rel);
	if (sparse) {
		size_t r[4];
		cs_sparse_ranges(sparse, r);
		s_pwrite(s, fd, rel, buf, r[0], r[1]);
		s_pwrite(s, fd, rel, buf, r[2], r[3]);
		if (ftruncate(fd, (off_t)len) < 0)
			s_end(s, "ftruncate", rel);
	} else {
		s_pwrite(s, fd, rel, buf, 0, len);
	}
	/* The version is sealed at the fsync or close below. */
	s_log(s, "V %s %zu %016llx", rel, len, (unsigned long long)it_hash64(buf, len));
	if (do_fsync) {
		if (fsync(fd) < 0)
			s_end(s, "fsync", rel);
		s_log(s, "A");
	}
	if (close(fd) < 0)
		s_end(s, "close", rel);
}

/*
 * The GPU copy of the crash loop (tests/gpu/crash_gpu.c) captures some files
 * through libckptfs instead: crash_capture_open() returns the new file open
 * and bound, its contents captured (-1: write it here; -2: the mount is
 * gone), crash_capture_close() closes it, sealing the version, and with
 * do_fsync waits for durability.  Absent (weak, NULL) everywhere else.
 */
int crash_capture_open(int root, const char *rel, const char *buf, size_t len) __attribute__((weak));
int crash_capture_close(int root, int fd, bool do_fsync) __attribute__((weak));

static bool s_capture(struct stream *s, const struct cs_spec *sp, const char *buf)
{
	int fd = crash_capture_open ? crash_capture_open(s->root, sp->rel, buf, sp->size) : -1;

	if (fd == -2)
		s_end(s, "capture", sp->rel);
	if (fd < 0)
		return false;
	s_log(s, "V %s %zu %016llx", sp->rel, sp->size, (unsigned long long)it_hash64(buf, sp->size));
	if (crash_capture_close(s->root, fd, sp->fsync) < 0)
		s_end(s, "capture close", sp->rel);
	if (sp->fsync)
		s_log(s, "A");
	return true;
}

static void s_write_spec(struct stream *s, const struct cs_spec *sp)
{
	char *buf;

	if (posix_memalign((void **)&buf, 4096, sp->size ? sp->size : 1))
		_exit(4);
	cs_spec_fill(sp, buf);
	if (sp->direct || !s_capture(s, sp, buf))
		s_write(s, sp->rel, buf, sp->size, sp->direct, sp->fsync, sp->sparse ? sp : NULL);
	free(buf);
}

static void s_rmtree(struct stream *s, const char *rel)
{
	int fd = openat(s->root, rel, O_RDONLY | O_DIRECTORY);
	char names[64][256];
	unsigned n = 0;
	struct dirent *de;
	DIR *d;

	if (fd < 0 || !(d = fdopendir(fd)))
		s_end(s, "opendir", rel);
	while ((de = readdir(d)) && n < 64)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			snprintf(names[n++], sizeof(names[0]), "%s", de->d_name);
	closedir(d);
	for (unsigned i = 0; i < n; i++) {
		char child[PATH_MAX];
		struct stat st;
		if (snprintf(child, sizeof(child), "%s/%s", rel, names[i]) >= (int)sizeof(child) ||
		    fstatat(s->root, child, &st, AT_SYMLINK_NOFOLLOW) < 0)
			s_end(s, "stat", child);
		if (S_ISDIR(st.st_mode)) {
			s_rmtree(s, child);
			continue;
		}
		s_log(s, "U %s", child);
		if (unlinkat(s->root, child, 0) < 0)
			s_end(s, "unlink", child);
	}
	s_log(s, "D %s", rel);
	if (unlinkat(s->root, rel, AT_REMOVEDIR) < 0)
		s_end(s, "rmdir", rel);
}

struct entry {
	unsigned step;
	char name[128];
};

static int entry_cmp(const void *a, const void *b)
{
	unsigned x = ((const struct entry *)a)->step, y = ((const struct entry *)b)->step;
	return x < y ? -1 : x > y;
}

/* Delete the oldest checkpoints of fw (finished or not) beyond the newest CS_KEEP. */
static void s_prune(struct stream *s, enum cs_fw fw)
{
	static const char *const prefix[CS_FW_COUNT] = { "global_step", "step_", "iter_", "" };
	int fd = openat(s->root, cs_fw_name[fw], O_RDONLY | O_DIRECTORY);
	size_t plen = strlen(prefix[fw]);
	struct entry e[256];
	unsigned n = 0;
	struct dirent *de;
	DIR *d;

	if (fd < 0 || !(d = fdopendir(fd)))
		s_end(s, "opendir", cs_fw_name[fw]);
	while ((de = readdir(d)) && n < 256)
		if (!strncmp(de->d_name, prefix[fw], plen) && de->d_name[plen] >= '0' &&
		    de->d_name[plen] <= '9') {
			e[n].step = (unsigned)strtoul(de->d_name + plen, NULL, 10);
			snprintf(e[n++].name, sizeof(e[0].name), "%.120s", de->d_name);
		}
	closedir(d);
	qsort(e, n, sizeof(*e), entry_cmp);
	for (unsigned i = 0; i + CS_KEEP < n; i++) {
		char dir[160];
		snprintf(dir, sizeof(dir), "%s/%s", cs_fw_name[fw], e[i].name);
		s_rmtree(s, dir);
	}
}

/* Orbax: every file into a temporary directory, renamed to its name at the end. */
static void s_orbax(struct stream *s, const char *dir, const struct cs_spec *sp, unsigned n)
{
	char tmp[96];

	snprintf(tmp, sizeof(tmp), "%s" CS_OX_TMP, dir);
	s_mkdir(s, tmp);
	for (unsigned i = 0; i < n; i++) {
		struct cs_spec t = sp[i];
		snprintf(t.rel, sizeof(t.rel), "%s%s", tmp, strrchr(sp[i].rel, '/'));
		s_write_spec(s, &t);
	}
	s_log(s, "R %s %s", tmp, dir);
	if (renameat(s->root, tmp, s->root, dir) < 0)
		s_end(s, "rename", tmp);
}

static void s_checkpoint(struct stream *s, enum cs_fw fw, unsigned step)
{
	struct cs_spec sp[CS_MAX_FILES];
	unsigned n = cs_ckpt_files(fw, step, sp);
	char dir[64], mpath[96], mtext[512], tmp[128];

	cs_ckpt_dir(fw, step, dir, sizeof(dir));
	if (fw == CS_FW_OX) {
		s_orbax(s, dir, sp, n);
		s_prune(s, fw);
		return;
	}
	s_mkdir(s, dir);
	for (unsigned i = 0; fw == CS_FW_MG && i < n; i++) {
		snprintf(tmp, sizeof(tmp), "%.*s", (int)(strrchr(sp[i].rel, '/') - sp[i].rel), sp[i].rel);
		s_mkdir(s, tmp);
	}
	for (unsigned i = 0; i < n; i++) {
		s_write_spec(s, &sp[i]);
		if (fw == CS_FW_DS && i == 1) {
			/* Rank 0 copies its recovery script beside `latest` while other ranks still write. */
			struct cs_spec script = { .rel = "ds/zero_to_fp32.py", .seed = 0x7a3f, .size = 7 * KiB };
			s_write_spec(s, &script);
		}
	}
	cs_marker(fw, step, mpath, sizeof(mpath), mtext, sizeof(mtext));
	if (fw == CS_FW_DCP) {
		snprintf(tmp, sizeof(tmp), "%s.tmp", mpath);
		s_write(s, tmp, mtext, strlen(mtext), false, true, NULL);
		s_log(s, "R %s %s", tmp, mpath);
		if (renameat(s->root, tmp, s->root, mpath) < 0)
			s_end(s, "rename", tmp);
	} else {
		s_write(s, mpath, mtext, strlen(mtext), false, false, NULL);	/* in place */
	}
	if (fw == CS_FW_DS) {
		if (fsync(s->root) < 0)
			s_end(s, "fsync", ".");
		s_log(s, "A");
	}
	s_prune(s, fw);
}

/*
 * root: the mount's root, opened by the parent while mounted — never the
 * directory beneath, which the path names again once the daemon is gone.
 */
void cs_stream_main(int root, const char *log, unsigned step)
{
	struct stream s = { .root = root };

	alarm(60);		/* never outlive a stuck round */
	if ((s.log = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644)) < 0)
		_exit(2);
	for (unsigned f = 0; f < CS_FW_COUNT; f++)
		s_mkdir(&s, cs_fw_name[f]);
	for (;; step++) {
		s_log(&s, "S %u", step);
		for (unsigned f = 0; f < CS_FW_COUNT; f++)
			s_checkpoint(&s, (enum cs_fw)f, step);
	}
}

/* ---- the parent: judging the backend ------------------------------------ */

void cs_oplog_read(const char *path, struct cs_oplog *l)
{
	size_t len;
	char *text = read_file(path, &len);

	memset(l, 0, sizeof(*l));
	if (!text)
		return;
	text = realloc(text, len + 1);
	text[len] = '\0';
	for (char *line = text, *eol; line && *line; line = eol ? eol + 1 : NULL) {
		struct cs_op o = { 0 };
		unsigned long long size, hash;
		if ((eol = strchr(line, '\n')))
			*eol = '\0';
		o.kind = line[0];
		if (o.kind == 'A') {
			l->acked = l->n;
			continue;
		}
		if (o.kind == 'S') {
			l->last_step = (unsigned)strtoul(line + 2, NULL, 10);
			continue;
		}
		if (o.kind == 'E') {
			snprintf(l->end, sizeof(l->end), "%s", line + 2);
			continue;
		}
		if (o.kind == 'V' && sscanf(line + 2, "%159s %llu %llx", o.path, &size, &hash) == 3) {
			o.size = size;
			o.hash = hash;
		} else if (o.kind == 'R' && sscanf(line + 2, "%159s %159s", o.path, o.to) == 2) {
		} else if (strchr("MUD", o.kind) && sscanf(line + 2, "%159s", o.path) == 1) {
		} else {
			FAILF("bad line in the stream's log: '%s'", line);
		}
		l->v = realloc(l->v, (l->n + 1) * sizeof(*l->v));
		l->v[l->n++] = o;
	}
	free(text);
}

static void model_apply(struct it_tree *t, const struct cs_op *o)
{
	const struct it_ent *e;

	switch (o->kind) {
	case 'M':
		it_tree_put(t, o->path, 'd', 0, 0);
		break;
	case 'V':
		it_tree_put(t, o->path, 'f', o->size, o->hash);
		break;
	case 'U':
	case 'D':
		it_tree_del(t, o->path);
		break;
	case 'R':
		if ((e = it_tree_find(t, o->path)))
			it_tree_move(t, o->path, o->to);
		break;
	}
}


void cs_violation(struct cs_judge *c, const char *fmt, ...)
{
	va_list ap;

	c->violations++;
	printf("VIOLATION (round %u%s%s): ", c->round, c->tag ? ", " : "", c->tag ? c->tag : "");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

/* A path below the judged backend (static rotating buffers). */
static const char *cs_bpath(const struct cs_judge *c, const char *rel)
{
	static char buf[4][PATH_MAX + 200];
	static unsigned k;
	char *p = buf[k++ % 4];

	snprintf(p, sizeof(buf[0]), "%s/%s", c->backend, rel);
	return p;
}

/* Each bad verdict is one violation, however many rounds it stays there. */
static void cs_bad_verdicts(struct cs_judge *c, const char *what, const char *out, int st)
{
	char *lines = it_verdict_lines(out);

	for (char *l = lines, *eol; l && *l; l = eol + 1) {
		eol = strchr(l, '\n');
		*eol = '\0';
		if (!strncmp(l, "OK ", 3) || it_tree_find(&c->reported, l))
			continue;
		it_tree_put(&c->reported, l, 'f', 0, 0);
		c->verdicts++;
		cs_violation(c, "verify %s (exit %d): %s", what, st, l);
	}
	free(lines);
}

/* What a file that matches none of its versions looks like, for the report. */
static const char *describe_bad(const char *path, const struct it_ent *e, const struct it_tree *seen)
{
	size_t len;
	unsigned char *p = read_file(path, &len);
	bool zeros = false;
	uint64_t max = 0;

	for (size_t i = 0; p && i + 4096 <= len && !zeros; i += 4096) {
		size_t k = 0;
		while (k < 4096 && !p[i + k])
			k++;
		zeros = k == 4096;
	}
	free(p);
	for (size_t i = 0; i < seen->n; i++)
		if (!strncmp(seen->e[i].path, e->path, strlen(e->path)) &&
		    seen->e[i].path[strlen(e->path)] == '#' && seen->e[i].size > max)
			max = seen->e[i].size;
	if (zeros)
		return "zero-filled";
	if (e->size < max)
		return "torn (shorter than its versions)";
	return "mixed or foreign contents";
}

/* Record (path, hash) as a state some file has been in. */
static void seen_add(struct it_tree *seen, const char *path, uint64_t size, uint64_t hash)
{
	char key[256];
	snprintf(key, sizeof(key), "%s#%016llx", path, (unsigned long long)hash);
	it_tree_put(seen, key, 'f', size, hash);
}

static bool seen_has(const struct it_tree *seen, const char *path, uint64_t hash)
{
	char key[256];
	snprintf(key, sizeof(key), "%s#%016llx", path, (unsigned long long)hash);
	return it_tree_find(seen, key) != NULL;
}

/*
 * Prefix consistency: the backend must equal the model after some prefix
 * p of the logged operations with p >= acked.  Also every file must hold
 * one of its versions.
 */
void cs_check_prefix(struct cs_judge *c, const struct it_tree *start, const struct cs_oplog *l,
		     const struct it_tree *b)
{
	struct it_tree model, seen = { 0 };
	long first = -1, last = -1;
	size_t best_p = l->acked;
	int best = -1;
	char why[1024];

	it_tree_copy(&model, start);
	for (size_t i = 0; i < model.n; i++)
		if (model.e[i].type == 'f')
			seen_add(&seen, model.e[i].path, model.e[i].size, model.e[i].hash);
	for (size_t p = 0;; p++) {
		int d = it_tree_diff(&model, b, NULL, 0);
		if (d == 0) {
			if (first < 0)
				first = (long)p;
			last = (long)p;
		}
		if (p >= l->acked && (best < 0 || d < best)) {
			best = d;
			best_p = p;
		}
		if (p == l->n)
			break;
		model_apply(&model, &l->v[p]);
		for (size_t i = 0; i < model.n; i++)
			if (model.e[i].type == 'f')
				seen_add(&seen, model.e[i].path, model.e[i].size, model.e[i].hash);
	}
	for (size_t i = 0; i < b->n; i++) {
		const struct it_ent *e = &b->e[i];
		if (e->type == 'f' && !seen_has(&seen, e->path, e->hash))
			cs_violation(c, "%s under its final name is %s (%llu bytes)", e->path,
				     describe_bad(cs_bpath(c, e->path), e, &seen),
				     (unsigned long long)e->size);
	}
	if (last < (long)l->acked) {
		it_tree_free(&model);
		it_tree_copy(&model, start);
		for (size_t p = 0; p < best_p; p++)
			model_apply(&model, &l->v[p]);
		it_tree_diff(&model, b, why, sizeof(why));
		if (last < 0)
			cs_violation(c, "the backend equals no prefix of the %zu operations (closest: "
				     "after %zu, acked %zu):%s", l->n, best_p, l->acked, why);
		else
			cs_violation(c, "fsync-acknowledged operations lost: the backend is at prefix %ld "
				     "but %zu were acknowledged; at %zu:%s", last, l->acked, best_p, why);
	}
	if (last >= 0 && (size_t)last < l->n)
		c->lost_in_flight++;
	printf("  ops %zu, acknowledged %zu, backend at prefix %ld..%ld\n", l->n, l->acked, first, last);
	it_tree_free(&model);
	it_tree_free(&seen);
}

/* ckptfs-ctl verify on dir must say OK for exactly `want` files. */
static void check_verify_dir(struct cs_judge *c, const char *rel, int want)
{
	char *out;
	int st = it_verify(cs_bpath(c, rel), 0, &out);
	int ok = it_verdict_count(out, "OK");

	if (ok != want && !it_verdict_count(out, "MISMATCH") && !it_verdict_count(out, "MISSING") &&
	    !it_verdict_count(out, "UNTRACKED"))
		cs_violation(c, "verify %s: exit %d, %d OK of %d files:\n%s", rel, st, ok, want, out);
	cs_bad_verdicts(c, rel, out, st);
	c->verified += (uint64_t)ok;
	free(out);
}

/* The marker of fw names `step`: all its files must be complete (and verify). */
static void check_checkpoint(struct cs_judge *c, const struct it_tree *b, bool verify,
			     enum cs_fw fw, unsigned step)
{
	char mpath[96], mtext[512], dir[64];
	struct cs_spec sp[CS_MAX_FILES];
	const struct it_ent *e;
	unsigned n = cs_ckpt_files(fw, step, sp);

	cs_ckpt_dir(fw, step, dir, sizeof(dir));
	if (it_tree_find(&c->doomed, dir))
		return;		/* being deleted (rmtree is not atomic): no promise left */
	c->markers++;
	cs_marker(fw, step, mpath, sizeof(mpath), mtext, sizeof(mtext));
	if (fw == CS_FW_OX)
		snprintf(mpath, sizeof(mpath), "%s", dir);	/* the directory's name is the marker */
	else if (!(e = it_tree_find(b, mpath)) || e->size != strlen(mtext) ||
		 e->hash != it_hash64(mtext, strlen(mtext))) {
		cs_violation(c, "marker %s does not hold \"%s\"", mpath, mtext);
		return;
	}
	for (unsigned k = 0; k < n; k++) {
		char *want = malloc(sp[k].size ? sp[k].size : 1);
		cs_spec_fill(&sp[k], want);
		uint64_t h = it_hash64(want, sp[k].size);
		free(want);
		if (!(e = it_tree_find(b, sp[k].rel)))
			cs_violation(c, "marker %s names step %u but %s is missing", mpath, step, sp[k].rel);
		else if (e->size != sp[k].size || e->hash != h)
			cs_violation(c, "marker %s names step %u but %s is not complete (%llu bytes of %zu, "
				     "or other contents)", mpath, step, sp[k].rel,
				     (unsigned long long)e->size, sp[k].size);
	}
	if (verify)
		check_verify_dir(c, dir, (int)n + (fw == CS_FW_DCP));
}

void cs_check_markers(struct cs_judge *c, const struct it_tree *b, bool verify)
{
	char mpath[96], mtext[512];

	/* ds/latest and the Megatron tracker name a step in their text. */
	for (unsigned f = 0; f < CS_FW_COUNT; f++) {
		size_t len;
		char *t, txt[64];
		if (f == CS_FW_DCP || f == CS_FW_OX)
			continue;
		cs_marker((enum cs_fw)f, 0, mpath, sizeof(mpath), mtext, sizeof(mtext));
		if (!it_tree_find(b, mpath) || !(t = read_file(cs_bpath(c, mpath), &len)))
			continue;
		snprintf(txt, sizeof(txt), "%.*s", (int)len, t);
		free(t);
		check_checkpoint(c, b, verify, (enum cs_fw)f,
				 (unsigned)strtoul(txt + (f == CS_FW_DS ? 11 : 0), NULL, 10));
	}
	/* Each DCP checkpoint with a .metadata is a complete one. */
	for (size_t i = 0; i < b->n; i++) {
		const char *p = b->e[i].path, *slash = strrchr(p, '/');
		if (!strncmp(p, "dcp/step_", 9) && slash && !strcmp(slash, "/.metadata"))
			check_checkpoint(c, b, verify, CS_FW_DCP, (unsigned)strtoul(p + 9, NULL, 10));
		/* Each Orbax directory under its final name (digits only) is complete. */
		if (b->e[i].type == 'd' && !strncmp(p, "orbax/", 6) && p[6] &&
		    strspn(p + 6, "0123456789") == strlen(p + 6))
			check_checkpoint(c, b, verify, CS_FW_OX, (unsigned)strtoul(p + 6, NULL, 10));
	}
}

/* The daemon's summary of the recovery it just did, if any. */
void cs_print_recovery(struct tmount *m)
{
	char *log = it_log_text(m), *p = log, *last = NULL;

	while ((p = strstr(p, "recovered from an unclean stop")))
		last = p++;
	if (last)
		printf("  %.*s\n", (int)strcspn(last, "\n"), last);
	free(log);
}

/* Right after a mount: recovery removed every temporary name, mount == backend. */
void cs_check_after_mount(struct cs_judge *c, struct tmount *m, struct it_tree *b)
{
	struct it_tree mt;
	char why[1024], *out;
	int d, st;

	if (it_tree_scan(m->backend, b) < 0)
		cs_violation(c, "cannot read the backend");
	if (b->temps)
		cs_violation(c, "%d temporary (.ckptfs.) names on the backend after recovery", b->temps);
	if (it_tree_scan(m->mnt, &mt) < 0)
		cs_violation(c, "cannot read the whole tree through the mount");
	if ((d = it_tree_diff(b, &mt, why, sizeof(why))))
		cs_violation(c, "the mount shows %d differences from the backend (first: backend, "
			     "second: mount):%s", d, why);
	it_tree_free(&mt);
	st = it_verify(m->backend, 0, &out);
	cs_bad_verdicts(c, "of the whole backend after recovery", out, st);
	free(out);
}

/* The backend speed of this round: NULL (full), or a CKPTFS_FAULT delay rule. */
const char *cs_round_speed(unsigned r)
{
	/* Each widens a window: apply -> sync -> durable, publishing, flushing. */
	static const char *const slow[] = {
		NULL, "op=fsync,delay_ms=25", "op=rename|unlink|mkdir,delay_ms=3", "op=pwrite,delay_ms=2",
	};
	const char *pin = getenv("CKPTFS_CRASH_SPEED");

	return slow[(pin && *pin ? (unsigned)strtoul(pin, NULL, 10) : r / 2) % 4];
}

/* Checkpoints whose deletion was attempted promise nothing any more. */
void cs_note_doomed(struct cs_judge *c, const struct cs_oplog *l)
{
	for (size_t i = 0; i < l->n; i++) {
		char dir[160], *slash;
		if (!strchr("UD", l->v[i].kind))
			continue;
		/* A checkpoint's directory: the first two components of the path. */
		snprintf(dir, sizeof(dir), "%s", l->v[i].path);
		if ((slash = strchr(dir, '/')) && (slash = strchr(slash + 1, '/')))
			*slash = '\0';
		it_tree_put(&c->doomed, dir, 'd', 0, 0);
	}
}
