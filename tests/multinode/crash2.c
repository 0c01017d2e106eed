/*
 * crash2.c — the crash loop on two nodes (tests/integrity/crash.c's idea,
 * across nodes): daemons a and b over one backend, a checkpoint stream
 * that writes a shard through each node, meets at a barrier, and writes
 * `latest` through a; then SIGKILL of both daemons at random moments, in a
 * random order, and a look at the backend.
 *
 * What must hold after every crash (nodes.h N3, N4; contract 3, 4):
 *  - if `latest` names step N, both nodes' shards of step N are on the
 *    backend, whole, with exactly the contents written (a marker never
 *    overtakes another node's files, even when that node died first);
 *  - every shard on the backend has exactly the contents of its close.
 * Each round then mounts both nodes again (each recovers its own node) on
 * the same backend and goes on from the next step.
 *
 * CKPTFS_CRASH2_ROUNDS=N (default 12) and CKPTFS_CRASH2_SEED=S.
 */
#include "tests/multinode/mn_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t mix(uint64_t x)
{
	return it_hash64(&x, sizeof(x));
}

static uint64_t shard_seed(int node, unsigned step) { return mix((uint64_t)step << 4 | (unsigned)node); }
static size_t shard_size(int node, unsigned step) { return 4096 + shard_seed(node, step) % (192 << 10); }

static void shard_rel(int node, unsigned step, char *buf, size_t len)
{
	snprintf(buf, len, "ckpt/step%u/shard_%c", step, 'a' + node);
}

/* Write a shard; the stream ends (quietly, no atexit) once a mount is gone. */
static void s_write(const char *path, uint64_t seed, size_t size)
{
	char *buf = it_pattern(seed, size);
	int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);

	if (fd < 0)
		_exit(0);
	for (size_t done = 0; done < size;) {
		ssize_t n = write(fd, buf + done, size - done);
		if (n <= 0)
			_exit(0);
		done += (size_t)n;
	}
	if (close(fd) < 0)
		_exit(0);
	free(buf);
}

/* The stream: one process writing through both mounts until one dies. */
static void stream(struct mcluster *c, unsigned step)
{
	char rel[96], text[32];

	alarm(60);
	for (;; step++) {
		snprintf(rel, sizeof(rel), "ckpt/step%u", step);
		for (int i = 0; i < 2; i++)
			if (mkdir(mn_path(c, i, rel), 0755) < 0 && errno != EEXIST)
				_exit(0);
		for (int i = 1; i >= 0; i--) {
			shard_rel(i, step, rel, sizeof(rel));
			s_write(mn_path(c, i, rel), shard_seed(i, step), shard_size(i, step));
		}
		/* the barrier: both shards are closed */
		snprintf(text, sizeof(text), "step%u", step);
		int fd = open(mn_path(c, 0, "ckpt/latest"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
		if (fd < 0 || write(fd, text, strlen(text)) < 0 || close(fd) < 0)
			_exit(0);
		usleep(20000);	/* the training steps between two checkpoints */
	}
}

/* Judge the backend: violations found (printed). */
static unsigned judge(struct mcluster *c, unsigned max_step, unsigned *latest_out)
{
	unsigned bad = 0, latest = 0;
	char rel[96];
	const char *l = cu_slurp(mn_bpath(c, "ckpt/latest"));

	if (*l && sscanf(l, "step%u", &latest) != 1) {
		fprintf(stderr, "VIOLATION: ckpt/latest holds '%s'\n", l);
		bad++;
	}
	for (unsigned s = 1; s <= max_step; s++) {
		for (int i = 0; i < 2; i++) {
			shard_rel(i, s, rel, sizeof(rel));
			bool there = file_exists(mn_bpath(c, rel));
			if (there && !mn_has(mn_bpath(c, rel), shard_size(i, s), shard_seed(i, s))) {
				fprintf(stderr, "VIOLATION: %s is on the backend but not as closed\n", rel);
				bad++;
			}
			if (s == latest && !there) {
				fprintf(stderr, "VIOLATION: latest names step%u but %s is missing\n", s, rel);
				bad++;
			}
		}
	}
	*latest_out = latest;
	return bad;
}

int main(void)
{
	struct mcluster c;
	const char *r = getenv("CKPTFS_CRASH2_ROUNDS"), *sd = getenv("CKPTFS_CRASH2_SEED");
	unsigned rounds = r ? (unsigned)atoi(r) : 12, bad = 0, step = 1, markers = 0;
	uint64_t seed = sd ? strtoull(sd, NULL, 10) : (uint64_t)time(NULL);

	tm_require_fuse();
	fprintf(stderr, "crash2: %u rounds, seed %llu (CKPTFS_CRASH2_SEED)\n", rounds,
		(unsigned long long)seed);
	mn_init(&c, "mn-crash2", 2);
	for (unsigned round = 0; round < rounds; round++) {
		uint64_t x = mix(seed + round);
		if (getenv("CKPTFS_CRASH2_VERBOSE"))
			fprintf(stderr, "round %u: step %u\n", round, step);
		/* Every other round, b's publishing is slowed: its shards trail the marker. */
		const char *slow = round % 2 ? "CKPTFS_FAULT=op=fdatasync,delay_ms=40" : NULL;
		const char *const benv[] = { slow, NULL };
		mn_mount(&c, 0, NULL, NULL);
		mn_mount(&c, 1, NULL, slow ? benv : NULL);
		if (round == 0)
			CHECK_SYS(mkdir(mn_path(&c, 0, "ckpt"), 0755));
		pid_t child = fork();
		if (child == 0)
			stream(&c, step);
		usleep((useconds_t)(150000 + x % 900000));
		int first = (int)((x >> 20) % 2);
		mn_kill(&c, first);
		usleep((useconds_t)((x >> 24) % 400000));
		mn_kill(&c, 1 - first);
		int st;
		waitpid(child, &st, 0);
		unsigned latest;
		unsigned top = step + 200;
		bad += judge(&c, top, &latest);
		if (getenv("CKPTFS_CRASH2_VERBOSE"))
			fprintf(stderr, "  latest %u, backend %s, mnt0 '%s' name0 '%s'\n", latest, c.backend,
				c.node[0].m.mnt, c.node[0].name);
		markers += latest >= step;
		/* The next round starts past whatever the stream reached. */
		for (char rel[96]; ; step++) {
			snprintf(rel, sizeof(rel), "ckpt/step%u", step);
			if (!file_exists(mn_bpath(&c, rel)) && step > latest)
				break;
		}
		step += 1;
	}
	/* A last clean mount of both: recovery leaves a mount that shows the backend. */
	mn_mount(&c, 0, NULL, NULL);
	mn_mount(&c, 1, NULL, NULL);
	unsigned latest;
	bad += judge(&c, step + 200, &latest);
	fprintf(stderr, "crash2: %u rounds, %u with a marker from that round on the backend, "
		"%u violations\n", rounds, markers, bad);
	if (bad)
		FAILF("%u violations (seed %llu)", bad, (unsigned long long)seed);
	mn_cleanup(&c);
	return 0;
}
