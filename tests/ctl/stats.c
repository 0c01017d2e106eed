/*
 * stats.c — MOUNT/.ckptfs/stats is strict JSON and its numbers add up
 * against a workload the test knows byte for byte.
 *
 * The cache is small (16 MiB of 1 MiB chunks), every publish sleeps 150 ms
 * and every fdatasync 100 ms, so writing 12 files of about 3.4 MiB each
 * (written once, never rewritten) fills the cache faster than the flushers
 * free it, and writers wait.  Checked:
 *  - at mount: version 1, every key with its JSON type, the mount and
 *    backend paths, the capacity and chunk size asked for, nothing absorbed,
 *    the manifest on and nothing recovered (a fresh backend);
 *  - right after the writes, while the publisher lags by seconds:
 *    absorbed_bytes == bytes written; dirty + flushing + clean <= used <=
 *    capacity and free == capacity - used; persisted < absorbed;
 *    seq_durable < seq_current and ops_pending is their difference; the
 *    last file is pending and `files` lists it (strict JSON lines) with its
 *    size; backpressure was counted (waits and seconds);
 *  - after a drain: persisted == absorbed == written, seq_durable ==
 *    seq_current, nothing pending, no dirty or flushing bytes, `files`
 *    empty, no backend errors, every version published and written;
 *  - io_engine names the engine asked for (or a fallback with its reason).
 */
#include "tests/ctl/ctl_util.h"

#define NFILES 12
#define CAPACITY (16 * MiB)

static size_t file_size(int i) { return 3 * MiB + (size_t)i * 77777; }

/* Keys of stats and their JSON types. */
static const struct {
	const char *key;
	enum json_type type;
} schema[] = {
	{ "version", JSON_NUM }, { "mount", JSON_STR }, { "backend", JSON_STR }, { "mount_id", JSON_STR },
	{ "pid", JSON_NUM }, { "uptime_s", JSON_NUM }, { "io_engine", JSON_STR },
	{ "io_fallback_reason", JSON_STR }, { "fsync", JSON_STR }, { "cache_capacity_bytes", JSON_NUM },
	{ "cache_chunk_bytes", JSON_NUM }, { "cache_used_bytes", JSON_NUM }, { "cache_dirty_bytes", JSON_NUM },
	{ "cache_flushing_bytes", JSON_NUM }, { "cache_clean_bytes", JSON_NUM },
	{ "cache_free_bytes", JSON_NUM }, { "files_pending", JSON_NUM }, { "versions_pending", JSON_NUM },
	{ "ops_pending", JSON_NUM }, { "oldest_pending_age_s", JSON_NUM }, { "absorbed_bytes", JSON_NUM },
	{ "persisted_bytes", JSON_NUM }, { "backend_written_bytes", JSON_NUM }, { "read_bytes", JSON_NUM },
	{ "absorb_rate_bps", JSON_NUM }, { "persist_rate_bps", JSON_NUM }, { "seq_current", JSON_NUM },
	{ "seq_durable", JSON_NUM }, { "versions_published", JSON_NUM }, { "ops_applied", JSON_NUM },
	{ "dir_fsyncs", JSON_NUM }, { "manifest_syncs", JSON_NUM },
	{ "manifest_rewrites", JSON_NUM },
	{ "backend_hashed_bytes", JSON_NUM }, { "backend_extent_walks", JSON_NUM },
	{ "backend_base_changed", JSON_NUM }, { "backend_max_file_bytes", JSON_NUM },
	{ "passthrough_renewed", JSON_NUM },
	{ "backpressure_waits", JSON_NUM },
	{ "backpressure_wait_s", JSON_NUM },
	{ "spilled_bytes", JSON_NUM }, { "evictions", JSON_NUM }, { "backend_errors", JSON_NUM },
	{ "backend_retries", JSON_NUM }, { "degraded", JSON_BOOL }, { "last_error", JSON_STR },
	{ "manifest", JSON_BOOL }, { "recovered_unclean", JSON_BOOL },
	{ "recovered_inflight_files", JSON_NUM }, { "recovered_orphans_removed", JSON_NUM },
	{ "recovered_torn_bytes", JSON_NUM }, { "recovered_corrupt_records", JSON_NUM },
};

static void check_schema(const struct json_obj *s)
{
	for (size_t i = 0; i < sizeof(schema) / sizeof(*schema); i++) {
		const struct json_member *v = json_get(s, schema[i].key);
		if (!v || v->type != schema[i].type)
			FAILF("stats: \"%s\" should be a %s, is %s", schema[i].key,
			      json_type_name(schema[i].type), v ? json_type_name(v->type) : "missing");
		if (v->type == JSON_NUM && v->num < 0)
			FAILF("stats: \"%s\" is negative: %f", schema[i].key, v->num);
	}
	ASSERT_EQ(ct_num(s, "version"), 1);
}

/* What must hold in every snapshot. */
static void check_invariants(const struct json_obj *s)
{
	double cap = ct_num(s, "cache_capacity_bytes"), used = ct_num(s, "cache_used_bytes");

	check_schema(s);
	ASSERT_EQ(cap, CAPACITY);
	ASSERT_EQ(ct_num(s, "cache_chunk_bytes"), MiB);
	ASSERT_LE(ct_num(s, "cache_dirty_bytes") + ct_num(s, "cache_flushing_bytes") +
			  ct_num(s, "cache_clean_bytes"),
		  used);
	ASSERT_LE(used, cap);
	ASSERT_EQ(ct_num(s, "cache_free_bytes"), cap - used);
	ASSERT_LE(ct_num(s, "persisted_bytes"), ct_num(s, "absorbed_bytes"));
	ASSERT_LE(ct_num(s, "seq_durable"), ct_num(s, "seq_current"));
	ASSERT_EQ(ct_num(s, "ops_pending"), ct_num(s, "seq_current") - ct_num(s, "seq_durable"));
	ASSERT_STR_EQ(ct_str(s, "fsync"), "durable");
}

static void check_engine(const struct json_obj *s)
{
	const char *want = getenv("CKPTFS_TEST_IO"), *engine = ct_str(s, "io_engine");

	if (want && !strcmp(want, "pwrite")) {
		ASSERT_STR_EQ(engine, "pwrite");
		ASSERT_STR_EQ(ct_str(s, "io_fallback_reason"), "");
	} else if (strcmp(engine, "io_uring") != 0) {
		ASSERT_STR_EQ(engine, "pwrite");	/* fell back, and must say why */
		ASSERT_TRUE(ct_str(s, "io_fallback_reason")[0] != '\0');
	}
}

/* The pending file `rel` in `files`, with its size; every line strict JSON. */
static void check_files_lists(struct tmount *m, const char *rel, size_t size)
{
	char *text = ct_read_ctl(m, "files");
	struct json_obj *lines;
	size_t n = ct_parse_lines(text, &lines, "files"), found = 0;

	for (size_t i = 0; i < n; i++) {
		const char *state = ct_str(&lines[i], "state");
		ASSERT_TRUE(!strcmp(state, "dirty") || !strcmp(state, "flushing"));
		ASSERT_GE(ct_num(&lines[i], "age_s"), 0);
		if (strcmp(ct_str(&lines[i], "path"), rel) == 0) {
			ASSERT_EQ(ct_num(&lines[i], "size"), size);
			found++;
		}
	}
	if (found != 1)
		FAILF("files lists %s %zu times:\n%s", rel, found, text);
	ct_lines_free(lines, n);
	free(text);
}

int main(void)
{
	struct tmount m;
	const char *env[] = { "CKPTFS_FAULT=op=rename,delay_ms=150;op=fdatasync,delay_ms=100", NULL };
	char real[PATH_MAX], rel[32];
	struct json_obj s;
	double written = 0;

	tm_require_fuse();
	tm_start(&m, "ctl-stats", "cache_size=16M,chunk_size=1M", env);

	ct_stats(&m, &s);
	check_invariants(&s);
	check_engine(&s);
	ASSERT_STR_EQ(ct_str(&s, "mount"), realpath(m.mnt, real));
	ASSERT_STR_EQ(ct_str(&s, "backend"), realpath(m.backend, real));
	ASSERT_EQ(ct_num(&s, "absorbed_bytes"), 0);
	ASSERT_EQ(ct_num(&s, "files_pending"), 0);
	ASSERT_TRUE(!ct_bool(&s, "degraded"));
	ASSERT_TRUE(ct_bool(&s, "manifest"));
	ASSERT_TRUE(!ct_bool(&s, "recovered_unclean"));	/* a fresh backend */
	ASSERT_EQ(ct_num(&s, "recovered_inflight_files"), 0);
	json_free(&s);

	for (int i = 0; i < NFILES; i++) {
		snprintf(rel, sizeof(rel), "f%02d", i);
		ct_write_seeded(tm_path(&m, rel), file_size(i), (uint64_t)i + 1);
		written += (double)file_size(i);
	}
	ct_stats(&m, &s);
	check_invariants(&s);
	ASSERT_EQ(ct_num(&s, "absorbed_bytes"), written);
	ASSERT_LT(ct_num(&s, "persisted_bytes"), written);
	ASSERT_LT(ct_num(&s, "seq_durable"), ct_num(&s, "seq_current"));
	ASSERT_GE(ct_num(&s, "files_pending"), 1);
	ASSERT_GE(ct_num(&s, "backpressure_waits"), 1);
	ASSERT_TRUE(ct_num(&s, "backpressure_wait_s") > 0);
	ASSERT_TRUE(ct_num(&s, "oldest_pending_age_s") >= 0);
	json_free(&s);
	snprintf(rel, sizeof(rel), "f%02d", NFILES - 1);
	check_files_lists(&m, rel, file_size(NFILES - 1));

	ct_exchange(&m, "drain", NULL, &s);
	ASSERT_TRUE(ct_bool(&s, "ok"));
	json_free(&s);
	ct_stats(&m, &s);
	check_invariants(&s);
	ASSERT_EQ(ct_num(&s, "absorbed_bytes"), written);
	ASSERT_EQ(ct_num(&s, "persisted_bytes"), written);
	ASSERT_GE(ct_num(&s, "backend_written_bytes"), written);
	ASSERT_EQ(ct_num(&s, "seq_durable"), ct_num(&s, "seq_current"));
	ASSERT_GE(ct_num(&s, "seq_current"), NFILES);
	ASSERT_EQ(ct_num(&s, "ops_pending"), 0);
	ASSERT_EQ(ct_num(&s, "files_pending"), 0);
	ASSERT_EQ(ct_num(&s, "versions_pending"), 0);
	ASSERT_GE(ct_num(&s, "versions_published"), NFILES);
	ASSERT_EQ(ct_num(&s, "cache_dirty_bytes"), 0);
	ASSERT_EQ(ct_num(&s, "cache_flushing_bytes"), 0);
	ASSERT_EQ(ct_num(&s, "backend_errors"), 0);
	ASSERT_TRUE(!ct_bool(&s, "degraded"));
	ASSERT_STR_EQ(ct_str(&s, "last_error"), "");
	json_free(&s);
	char *files = ct_read_ctl(&m, "files");
	ASSERT_STR_EQ(files, "");
	free(files);
	for (int i = 0; i < NFILES; i++) {
		snprintf(rel, sizeof(rel), "f%02d", i);
		ct_check_seeded(tm_bpath(&m, rel), file_size(i), (uint64_t)i + 1);
	}
	tm_stop(&m);
	tm_cleanup(&m);
	return 0;
}
