/*
 * order.c — prefix consistency (DESIGN contract 3) under the checkpoint
 * streams of four frameworks, each on its own mount over a backend whose
 * namespace calls sleep, so the publisher lags the trainer by a second or
 * more:
 *   DeepSpeed  mkdir global_stepN, shard files, then `latest` rewritten in
 *              place with O_TRUNC;
 *   DCP        ckpt_N/__R_0.distcp per rank, `.metadata.tmp` written and
 *              fsync'd, then renamed to `.metadata`;
 *   Orbax      a whole temporary directory, then renamed to its final name;
 *              the oldest checkpoint deleted;
 *   Megatron   iter_N/mp_rank_00/model_optim_rng.pt, then
 *              latest_checkpointed_iteration.txt, then the oldest iteration
 *              directory deleted recursively.
 *
 * A stream is a list of operations.  Applying them one by one to a model
 * tree gives the state after every prefix (a file's contents count from its
 * close).  While the stream runs, a monitor thread snapshots the backend
 * over and over; every snapshot must equal one of those states, and the
 * matched prefix may never go backwards.  A snapshot is judged only when two
 * walks in a row agree, so a walk that raced with a publish is not taken for
 * a state.  After an fsync the backend must be at least at that prefix.  At
 * the end the backend, the mount and the model must agree, before and after
 * unmount.
 */
#include "tests/core/core_util.h"

#include <pthread.h>
#include <stdatomic.h>

enum sop_kind { S_MKDIR, S_FILE, S_FILE_FSYNC, S_RENAME, S_UNLINK, S_RMDIR };

struct sop {
	enum sop_kind kind;
	char path[128], path2[128];
	char text[64];		/* file contents if set, else size bytes of pattern seed */
	uint64_t size, seed;
};

struct stream {
	struct sop *ops;
	size_t n, cap;
	char **states;		/* states[i]: the tree after the first i ops */
	uint64_t seed;
};

static struct sop *stream_add(struct stream *s, enum sop_kind kind, const char *path)
{
	if (s->n == s->cap)
		s->ops = realloc(s->ops, (s->cap = s->cap ? s->cap * 2 : 64) * sizeof(*s->ops));
	struct sop *op = &s->ops[s->n++];
	memset(op, 0, sizeof(*op));
	op->kind = kind;
	snprintf(op->path, sizeof(op->path), "%s", path);
	return op;
}

static void add_file(struct stream *s, const char *path, uint64_t size)
{
	struct sop *op = stream_add(s, S_FILE, path);
	op->size = size;
	op->seed = ++s->seed;
}

static void add_text(struct stream *s, enum sop_kind kind, const char *path, const char *text)
{
	snprintf(stream_add(s, kind, path)->text, sizeof(s->ops[0].text), "%s", text);
}

static void add_rename(struct stream *s, const char *from, const char *to)
{
	snprintf(stream_add(s, S_RENAME, from)->path2, sizeof(s->ops[0].path2), "%s", to);
}

/* ---- the four streams ---- */

#define ROUNDS 4

static void deepspeed(struct stream *s)
{
	char p[128], tag[64];

	for (int r = 1; r <= ROUNDS; r++) {
		snprintf(tag, sizeof(tag), "global_step%d", r * 100);
		stream_add(s, S_MKDIR, tag);
		snprintf(p, sizeof(p), "%s/mp_rank_00_model_states.pt", tag);
		add_file(s, p, 96 * KiB + (uint64_t)r);
		for (int rank = 0; rank < 3; rank++) {
			snprintf(p, sizeof(p), "%s/zero_pp_rank_%d_mp_rank_00_optim_states.pt", tag, rank);
			add_file(s, p, 64 * KiB + 17 * (uint64_t)rank);
		}
		add_text(s, S_FILE, "latest", tag);
	}
}

static void dcp(struct stream *s)
{
	char dir[64], p[128];

	for (int r = 1; r <= ROUNDS; r++) {
		snprintf(dir, sizeof(dir), "ckpt_%d", r);
		stream_add(s, S_MKDIR, dir);
		for (int rank = 0; rank < 4; rank++) {
			snprintf(p, sizeof(p), "%s/__%d_0.distcp", dir, rank);
			add_file(s, p, 80 * KiB + (uint64_t)rank * 1000);
		}
		snprintf(p, sizeof(p), "%s/.metadata.tmp", dir);
		add_text(s, S_FILE_FSYNC, p, dir);
		char to[128];
		snprintf(to, sizeof(to), "%s/.metadata", dir);
		add_rename(s, p, to);
	}
}

/* Delete a directory holding files (and one level of subdirectories) bottom up. */
static void remove_tree(struct stream *s, const char *dir, const char *const *files, size_t n,
			const char *const *subdirs, size_t nsub)
{
	char p[128];

	for (size_t i = 0; i < n; i++) {
		snprintf(p, sizeof(p), "%s/%s", dir, files[i]);
		stream_add(s, S_UNLINK, p);
	}
	for (size_t i = 0; i < nsub; i++) {
		snprintf(p, sizeof(p), "%s/%s", dir, subdirs[i]);
		stream_add(s, S_RMDIR, p);
	}
	stream_add(s, S_RMDIR, dir);
}

#define KEEP 2

static void orbax(struct stream *s)
{
	static const char *const files[] = { "_CHECKPOINT_METADATA", "default/_METADATA",
					     "default/d/0.0", "default/d/1.0" };
	static const char *const subdirs[] = { "default/d", "default" };
	char tmp[64], fin[64], p[128];

	for (int r = 1; r <= ROUNDS; r++) {
		snprintf(tmp, sizeof(tmp), "%d.orbax-checkpoint-tmp-%d", r * 10, 1000 + r);
		snprintf(fin, sizeof(fin), "%d", r * 10);
		stream_add(s, S_MKDIR, tmp);
		snprintf(p, sizeof(p), "%s/default", tmp);
		stream_add(s, S_MKDIR, p);
		snprintf(p, sizeof(p), "%s/default/d", tmp);
		stream_add(s, S_MKDIR, p);
		for (size_t i = 1; i < CU_LEN(files); i++) {
			snprintf(p, sizeof(p), "%s/%s", tmp, files[i]);
			add_file(s, p, 40 * KiB + i);
		}
		snprintf(p, sizeof(p), "%s/%s", tmp, files[0]);
		add_text(s, S_FILE, p, "{\"item_handlers\": null}");
		add_rename(s, tmp, fin);
		if (r > KEEP) {
			snprintf(fin, sizeof(fin), "%d", (r - KEEP) * 10);
			remove_tree(s, fin, files, CU_LEN(files), subdirs, CU_LEN(subdirs));
		}
	}
}

static void megatron(struct stream *s)
{
	static const char *const files[] = { "mp_rank_00/model_optim_rng.pt" };
	static const char *const subdirs[] = { "mp_rank_00" };
	char it[64], p[128], num[32];

	for (int r = 1; r <= ROUNDS; r++) {
		snprintf(it, sizeof(it), "iter_%07d", r * 100);
		stream_add(s, S_MKDIR, it);
		snprintf(p, sizeof(p), "%s/mp_rank_00", it);
		stream_add(s, S_MKDIR, p);
		snprintf(p, sizeof(p), "%s/mp_rank_00/model_optim_rng.pt", it);
		add_file(s, p, 160 * KiB + (uint64_t)r);
		snprintf(num, sizeof(num), "%d", r * 100);
		add_text(s, S_FILE, "latest_checkpointed_iteration.txt", num);
		if (r > KEEP) {
			snprintf(it, sizeof(it), "iter_%07d", (r - KEEP) * 100);
			remove_tree(s, it, files, CU_LEN(files), subdirs, CU_LEN(subdirs));
		}
	}
}

/* ---- expected states ---- */

static char *op_content(const struct sop *op, size_t *len)
{
	char *buf;
	if (op->text[0]) {
		*len = strlen(op->text);
		return strdup(op->text);
	}
	*len = (size_t)op->size;
	buf = malloc(*len ? *len : 1);
	fill_pattern(buf, *len, op->seed, 0);
	return buf;
}

static void build_states(struct stream *s)
{
	struct cu_model model = { 0 };

	s->states = calloc(s->n + 1, sizeof(*s->states));
	s->states[0] = cu_model_render(&model);
	for (size_t i = 0; i < s->n; i++) {
		const struct sop *op = &s->ops[i];
		size_t len;
		char *buf;

		switch (op->kind) {
		case S_MKDIR:
			cu_model_mkdir(&model, op->path);
			break;
		case S_FILE:
		case S_FILE_FSYNC:
			buf = op_content(op, &len);
			cu_model_file(&model, op->path, buf, len);
			free(buf);
			break;
		case S_RENAME:
			cu_model_rename(&model, op->path, op->path2);
			break;
		case S_UNLINK:
		case S_RMDIR:
			cu_model_remove(&model, op->path);
			break;
		}
		s->states[i + 1] = cu_model_render(&model);
	}
	cu_model_free(&model);
}

/* The first state at index >= from equal to snap, or -1. */
static long match_state(const struct stream *s, const char *snap, long from)
{
	for (size_t i = (size_t)from; i <= s->n; i++)
		if (strcmp(s->states[i], snap) == 0)
			return (long)i;
	return -1;
}

/* ---- the monitor ---- */

struct monitor {
	struct tmount *m;
	struct stream *s;
	atomic_bool stop;
	pthread_mutex_t lock;	/* one judge at a time: snapshots are judged in order */
	long last;		/* highest prefix seen on the backend */
	unsigned judged, intermediate;
};

/*
 * Match a stable snapshot of the backend against the states; fail if none
 * fits.  False if the backend never held still long enough to judge.
 */
static bool judge(struct monitor *mon, const char *who)
{
	pthread_mutex_lock(&mon->lock);
	char *snap = cu_tree_stable(mon->m->backend);
	long last = mon->last, i;

	if (!snap) {
		pthread_mutex_unlock(&mon->lock);
		return false;
	}
	if ((i = match_state(mon->s, snap, last)) < 0) {
		long back = match_state(mon->s, snap, 0);
		if (back >= 0)
			FAILF("%s: the backend went back from prefix %ld to prefix %ld of %zu", who, last,
			      back, mon->s->n);
		FAILF("%s: the backend matches no prefix of the operations; last matched prefix "
		      "%ld of %zu\n--- backend:\n%s--- state after that prefix:\n%s", who, last,
		      mon->s->n, snap, mon->s->states[last]);
	}
	mon->last = i;
	mon->judged++;
	if (i > 0 && (size_t)i < mon->s->n)
		mon->intermediate++;
	pthread_mutex_unlock(&mon->lock);
	free(snap);
	return true;
}

static void *monitor_main(void *arg)
{
	struct monitor *mon = arg;
	while (!atomic_load(&mon->stop)) {
		judge(mon, "monitor");
		usleep(2000);
	}
	return NULL;
}

/* ---- running a stream ---- */

static void run_op(struct tmount *m, const struct sop *op)
{
	size_t len;
	char *buf;
	int fd;

	switch (op->kind) {
	case S_MKDIR:
		CHECK_SYS(mkdir(tm_path(m, op->path), 0755));
		break;
	case S_FILE:
	case S_FILE_FSYNC:
		buf = op_content(op, &len);
		fd = cu_open(tm_path(m, op->path), O_CREAT | O_WRONLY | O_TRUNC);
		/* In a few writes, as torch.save does. */
		for (size_t off = 0; off < len; off += 32 * KiB)
			cu_pwrite_all(fd, buf + off, len - off < 32 * KiB ? len - off : 32 * KiB, off);
		if (op->kind == S_FILE_FSYNC)
			CHECK_SYS(fsync(fd));
		cu_close(fd);
		free(buf);
		break;
	case S_RENAME:
		CHECK_SYS(rename(tm_path(m, op->path), tm_path(m, op->path2)));
		break;
	case S_UNLINK:
		CHECK_SYS(unlink(tm_path(m, op->path)));
		break;
	case S_RMDIR:
		CHECK_SYS(rmdir(tm_path(m, op->path)));
		break;
	}
}

static void run_stream(const char *name, void (*gen)(struct stream *))
{
	struct tmount m;
	struct stream s = { 0 };
	struct monitor mon = { .m = &m, .s = &s, .lock = PTHREAD_MUTEX_INITIALIZER };
	const char *env[] = { cu_fault_env("op=rename|mkdir|unlink,delay_ms=25"), NULL };
	pthread_t th;

	gen(&s);
	build_states(&s);
	tm_start(&m, name, NULL, env);
	ASSERT_EQ(pthread_create(&th, NULL, monitor_main, &mon), 0);
	for (size_t i = 0; i < s.n; i++) {
		run_op(&m, &s.ops[i]);
		if (s.ops[i].kind == S_FILE_FSYNC) {
			/* Durable: the backend holds at least this prefix now. */
			while (!judge(&mon, "after fsync"))
				;
			pthread_mutex_lock(&mon.lock);	/* the monitor thread updates it */
			long last = mon.last;
			pthread_mutex_unlock(&mon.lock);
			ASSERT_GE(last, (long)i + 1);
		}
	}
	tm_sync(&m);
	atomic_store(&mon.stop, true);
	pthread_join(th, NULL);
	fprintf(stderr, "%s: %zu ops, %u snapshots judged, %u at intermediate prefixes\n", name, s.n,
		mon.judged, mon.intermediate);

	char *final = s.states[s.n];
	char *back = cu_tree_snapshot(m.backend), *mnt = cu_tree_snapshot(m.mnt);
	cu_assert_snapshots_equal("backend after sync vs expected", back, final);
	cu_assert_snapshots_equal("mount vs expected", mnt, final);
	/* Taken while the publisher lagged by a second or more: it must have seen it. */
	ASSERT_GE(mon.intermediate, 1);
	tm_stop(&m);
	free(back);
	back = cu_tree_snapshot(m.backend);
	cu_assert_snapshots_equal("backend after unmount vs mount", back, mnt);
	ASSERT_EQ(cu_count_temp_tree(m.backend), 0);
	free(back);
	free(mnt);
	for (size_t i = 0; i <= s.n; i++)
		free(s.states[i]);
	free(s.states);
	free(s.ops);
	tm_cleanup(&m);
}

int main(void)
{
	tm_require_fuse();
	run_stream("order-deepspeed", deepspeed);
	run_stream("order-dcp", dcp);
	run_stream("order-orbax", orbax);
	run_stream("order-megatron", megatron);
	return 0;
}
