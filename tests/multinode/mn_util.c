/*
 * mn_util.c — several daemons over one backend (see mn_util.h).
 */
#include "tests/multinode/mn_util.h"

#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static struct mcluster *live;

/* On a failed test: every node's log, then every daemon down. */
static void mn_at_exit(void)
{
	struct mcluster *c = live;

	if (!c)
		return;
	for (int i = 0; i < c->n; i++) {
		if (!c->node[i].up)
			continue;
		char *log = it_log_text(&c->node[i].m);
		fprintf(stderr, "---- node %s (%s) ----\n%s", c->node[i].name, c->node[i].m.log, log);
		free(log);
		tm_kill(&c->node[i].m);
		c->node[i].up = false;
	}
}

void mn_init(struct mcluster *c, const char *test, int n)
{
	const char *env = getenv("CKPTFS_MN_BACKENDS");
	char *dup = env && *env ? strdup(env) : NULL, *save = NULL;
	char *bk[MN_MAX] = { 0 };
	int nbk = 0;

	memset(c, 0, sizeof(*c));
	c->n = n;
	for (char *t = dup ? strtok_r(dup, ":", &save) : NULL; t && nbk < MN_MAX;
	     t = strtok_r(NULL, ":", &save))
		bk[nbk++] = t;
	for (int i = 0; i < n; i++) {
		char name[64];
		snprintf(c->node[i].name, sizeof(c->node[i].name), "%c", 'a' + i);
		snprintf(name, sizeof(name), "%s-%c", test, 'a' + i);
		tm_init(&c->node[i].m, name);
		if (nbk) {
			/* One fresh directory per test, seen through node i's own client. */
			snprintf(c->node[i].m.backend, sizeof(c->node[i].m.backend), "%s/%s.%d",
				 bk[i % nbk], test, (int)getpid());
			if (i == 0 && mkdir(c->node[i].m.backend, 0755) < 0 && errno != EEXIST)
				FAILF("mkdir %s: %s", c->node[i].m.backend, strerror(errno));
		} else if (i > 0) {
			snprintf(c->node[i].m.backend, sizeof(c->node[i].m.backend), "%s",
				 c->node[0].m.backend);
		}
	}
	snprintf(c->backend, sizeof(c->backend), "%s", c->node[0].m.backend);
	c->shared_backends = nbk > 0;
	free(dup);
	/* Other clients may need a moment to see the directory node 0's made. */
	for (int i = 1; i < n && nbk; i++)
		for (uint64_t t0 = mono_ms(); access(c->node[i].m.backend, F_OK) != 0;) {
			if (mono_ms() - t0 > 5000)
				FAILF("%s did not appear through the second client", c->node[i].m.backend);
			usleep(20000);
		}
	live = c;
	atexit(mn_at_exit);
}

void mn_mount_raw(struct mcluster *c, int i, const char *opts, const char *const *env)
{
	tm_mount(&c->node[i].m, opts, env);
	c->node[i].up = true;
}

void mn_mount(struct mcluster *c, int i, const char *opts, const char *const *env)
{
	char o[1024], peers[64] = "";

	for (int k = 0; k < c->n; k++)
		snprintf(peers + strlen(peers), sizeof(peers) - strlen(peers), "%s%s", k ? ":" : "",
			 c->node[k].name);
	snprintf(o, sizeof(o), "node=%s,peers=%s%s%s", c->node[i].name, peers, opts ? "," : "",
		 opts ? opts : "");
	mn_mount_raw(c, i, o, env);
}

void mn_stop(struct mcluster *c, int i)
{
	tm_stop(&c->node[i].m);
	c->node[i].up = false;
}

void mn_kill(struct mcluster *c, int i)
{
	tm_kill(&c->node[i].m);
	c->node[i].up = false;
}

void mn_cleanup(struct mcluster *c)
{
	for (int i = 0; i < c->n; i++) {
		if (c->node[i].up)
			mn_stop(c, i);
		tm_cleanup(&c->node[i].m);
	}
	if (c->shared_backends) {
		char cmd[PATH_MAX + 16];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", c->backend);
		if (system(cmd) != 0)
			fprintf(stderr, "warning: could not remove %s\n", c->backend);
	}
	live = NULL;
}

const char *mn_path(struct mcluster *c, int i, const char *rel)
{
	return tm_path(&c->node[i].m, rel);
}

const char *mn_bpath(struct mcluster *c, const char *rel)
{
	return tm_bpath(&c->node[0].m, rel);
}

const char *mn_stat(struct mcluster *c, int i, const char *key)
{
	static char v[1024];

	if (!it_json_get(it_stats(&c->node[i].m), key, v, sizeof(v)))
		v[0] = '\0';
	return v;
}

double mn_stat_num(struct mcluster *c, int i, const char *key)
{
	return atof(mn_stat(c, i, key));
}

void mn_wait_peer_reads(struct mcluster *c, int i, unsigned n)
{
	double r0 = mn_stat_num(c, i, "peer_reads");
	uint64_t t0 = mono_ms();

	while (mn_stat_num(c, i, "peer_reads") < r0 + n) {
		if (mono_ms() - t0 > 10000)
			FAILF("node %s read its peers' records %.0f times in 10 s, not %u", c->node[i].name,
			      mn_stat_num(c, i, "peer_reads") - r0, n);
		usleep(20 * 1000);
	}
}

int mn_log_count(struct mcluster *c, int i, const char *needle)
{
	return it_log_count(&c->node[i].m, needle);
}

void mn_write(const char *path, size_t size, uint64_t seed)
{
	if (it_write_pattern(path, seed, size) < 0)
		FAILF("writing %s failed", path);
}

bool mn_has(const char *path, size_t size, uint64_t seed)
{
	return it_has_pattern(path, seed, size);
}

uint64_t mn_wait_file(const char *path, size_t size, unsigned timeout_ms)
{
	struct stat st;

	for (uint64_t t0 = mono_ms(); mono_ms() - t0 < timeout_ms; usleep(1000))
		if (stat(path, &st) == 0 && (size_t)st.st_size == size)
			return mono_ms();
	return 0;
}

uint64_t mn_marker_follows(struct mcluster *c, const char *shard, size_t size,
			   const char *marker, const char *text, unsigned timeout_ms)
{
	uint64_t t_shard = mn_wait_file(mn_bpath(c, shard), size, timeout_ms), t_marker = 0;

	if (!t_shard)
		FAILF("the shard %s never reached the backend", shard);
	while (!t_marker && mono_ms() - t_shard < timeout_ms) {
		if (!strcmp(cu_slurp(mn_bpath(c, marker)), text))
			t_marker = mono_ms();
		usleep(5000);
	}
	if (!t_marker)
		FAILF("%s never followed the shard %s (%s)", marker, shard,
		      mn_stat(c, 0, "marker_held_reason"));
	fprintf(stderr, "%s released %llu ms after the shard %s\n", marker,
		(unsigned long long)(t_marker - t_shard), shard);
	return t_marker - t_shard;
}

const char *mn_record(struct mcluster *c, int i)
{
	static char path[PATH_MAX + 64];

	snprintf(path, sizeof(path), "%s/.ckptfs/nodes/%s/watermark.json", c->node[i].m.backend,
		 c->node[i].name);
	return cu_slurp(path);
}

bool mn_window_open(struct mcluster *c, int i)
{
	const char *r = mn_record(c, i);
	return strstr(r, "\"gap_mount\": \"-\"") == NULL && strstr(r, "\"gap_to_ns\": 0,") != NULL;
}

void mn_shards(struct mcluster *c, unsigned step, size_t size)
{
	char rel[64];

	for (int i = 0; i < 2; i++) {
		snprintf(rel, sizeof(rel), "s%u", step);
		if (mkdir(mn_path(c, i, rel), 0755) < 0 && errno != EEXIST)
			FAILF("mkdir %s on node %d: %s", rel, i, strerror(errno));
	}
	for (int i = 1; i >= 0; i--) {
		snprintf(rel, sizeof(rel), "s%u/shard%d", step, i);
		mn_write(mn_path(c, i, rel), size, step * 10 + (unsigned)i);
	}
}

void mn_marker(struct mcluster *c, unsigned step)
{
	char text[16];

	snprintf(text, sizeof(text), "s%u", step);
	cu_write_text(mn_path(c, 0, "latest"), text);
}

bool mn_latest_names(struct mcluster *c, unsigned step, unsigned ms)
{
	char want[16];

	snprintf(want, sizeof(want), "s%u", step);
	for (uint64_t t0 = mono_ms();; usleep(10000)) {
		if (!strcmp(cu_slurp(mn_bpath(c, "latest")), want))
			return true;
		if (mono_ms() - t0 >= ms)
			return false;
	}
}

int mn_ack_lost(struct mcluster *c, int i, char **out)
{
	const char *argv[] = { mn_tool("ckptfs-ctl"), "ack-lost", c->node[i].m.mnt, NULL };

	*out = NULL;
	return tm_run(argv, out);
}

void mn_ack_lost_ok(struct mcluster *c, int i)
{
	char *out = NULL;
	int rc = mn_ack_lost(c, i, &out);

	if (rc != 0)
		FAILF("ckptfs-ctl ack-lost: exit %d: %s", rc, out ? out : "");
	free(out);
}

void mn_released_after_ack(struct mcluster *c, size_t size, const char *label)
{
	usleep(100 * 1000);
	mn_shards(c, 2, size);
	double t0 = mn_now_ms();
	mn_marker(c, 2);
	if (!mn_latest_names(c, 2, 5000))
		FAILF("the marker of a checkpoint written after the acknowledgement is held: %s",
		      mn_stat(c, 0, "marker_held_reason"));
	fprintf(stderr, "%s: marker released in %.0f ms\n", label, mn_now_ms() - t0);
	ASSERT_TRUE(mn_has(mn_bpath(c, "s2/shard1"), size, 21));
	ASSERT_EQ(mn_stat_num(c, 0, "markers_released_by_policy"), 0);
}

const char *mn_tool(const char *name)
{
	static char bufs[4][PATH_MAX];
	static int next;
	char *b = bufs[next++ % 4];
	const char *d = tm_daemon_bin(), *slash = strrchr(d, '/');

	snprintf(b, PATH_MAX, "%.*s/%s", slash ? (int)(slash - d) : 1, slash ? d : ".", name);
	return b;
}

void mn_stat_report(struct mcluster *c, int i, const char *want, const char *label)
{
	const char *argv[] = { mn_tool("ckptfs-stat"), c->node[i].m.mnt, NULL };
	char *out = NULL;

	tm_run(argv, &out);
	const char *at = out ? strstr(out, want) : NULL;
	if (!at)
		FAILF("ckptfs-stat on node %s does not say '%s':\n%s", c->node[i].name, want,
		      out ? out : "");
	while (at > out && at[-1] != '\n')
		at--;
	fprintf(stderr, "REPORT (%s): %.*s\n", label, (int)strcspn(at, "\n"), at);
	free(out);
}

bool mn_wait_held(struct mcluster *c, const char *node, const char *reason_part, unsigned ms)
{
	for (uint64_t t0 = mono_ms(); mono_ms() - t0 < ms; usleep(20000))
		if (!strcmp(mn_stat(c, 0, "marker_held"), "latest") &&
		    !strcmp(mn_stat(c, 0, "marker_held_for"), node) &&
		    (!reason_part || strstr(mn_stat(c, 0, "marker_held_reason"), reason_part)))
			return true;
	return false;
}

double mn_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}
