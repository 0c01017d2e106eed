/*
 * spill_lost.c — spilled bytes whose stage file failed a sync are never
 * published (backend/flush.c, spill_lost).
 *
 * A file larger than the cache, written while it stays open, is spilled
 * to its stage file on the backend through the page cache.  At the close
 * the stage becomes the version's output and is synced; that sync fails
 * once (EIO).  Linux reports a write-back error to a file's next sync only:
 * a retry's sync of the same file succeeds over bytes the kernel may have
 * dropped, so a retry that publishes the stage would report durable what
 * may not be on disk.  Expected: the version stays blocked with EIO over
 * several retries (fsync and drain say so, the backend never holds the
 * file), and `ckptfs-ctl skip` gives it up; a file written before it and
 * one written after the skip are published.
 * Fails on the code before spill_lost: the first retry published the stage.
 */
#include "tests/ctl/ctl_util.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fsync_fd(int fd)
{
	return fsync(fd) < 0 ? -errno : 0;
}

static bool exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

static void ctl(struct ct_result *r, struct tmount *m, const char *cmd, const char *a1, const char *a2)
{
	ct_run(r, (const char *[]){ ct_tool("ckptfs-ctl"), cmd, m->mnt, a1, a2, NULL });
}

int main(void)
{
	struct tmount m;
	char flag[PATH_MAX], env[PATH_MAX + 256], seq[32];
	struct ct_result r;
	struct json_obj s;

	tm_require_fuse();
	tm_init(&m, "spill-lost");
	snprintf(flag, sizeof(flag), "%s/fault-flag", m.root);
	snprintf(env, sizeof(env),
		 "CKPTFS_FAULT=op=fdatasync,err=EIO,count=1,name=.ckptfs.s,while=%s", flag);
	tm_mount(&m, "cache_size=4M,chunk_size=256K", (const char *const[]){ env, NULL });

	ct_write_seeded(tm_path(&m, "before"), 64 * KiB, 1);
	tm_sync(&m);

	/* 24 MiB through a 4 MiB cache, the file open throughout: spilled to its stage. */
	int fd = CHECK_SYS(open(tm_path(&m, "big"), O_WRONLY | O_CREAT | O_TRUNC, 0644));
	size_t piece = 256 * KiB;
	char *buf = malloc(piece);
	ASSERT_TRUE(buf != NULL);
	for (uint64_t off = 0; off < 24 * MiB; off += piece) {
		fill_pattern(buf, piece, 7, off);
		ASSERT_EQ(pwrite(fd, buf, piece, (off_t)off), (ssize_t)piece);
	}
	free(buf);
	ct_stats(&m, &s);
	if (ct_num(&s, "spilled_bytes") < 8.0 * MiB)
		FAILF("only %.0f bytes were spilled: the test needs the stage", ct_num(&s, "spilled_bytes"));
	json_free(&s);

	ct_touch(flag);		/* the stage's first sync fails */
	ASSERT_EQ(fsync_fd(fd), -EIO);
	/* Retried (backoff from 50 ms): never published, whatever a later sync says. */
	uint64_t t0 = mono_ms();
	while (mono_ms() - t0 < 20000) {
		ct_stats(&m, &s);
		double attempts = ct_num(&s, "blocked_attempts");
		json_free(&s);
		if (attempts >= 3)
			break;
		usleep(50 * 1000);
	}
	ct_stats(&m, &s);
	if (ct_num(&s, "blocked_attempts") < 3)
		FAILF("the blocked version was retried %.0f times in 20 s", ct_num(&s, "blocked_attempts"));
	ct_expect_in(ct_str(&s, "last_error"), strerror(EIO), "stats' last_error");
	json_free(&s);
	ct_run(&r, (const char *[]){ "cat", m.log, NULL });
	ct_expect_in(r.out, "spilled bytes whose stage file failed a sync", "the daemon's log");
	ct_result_free(&r);
	ASSERT_TRUE(!exists(tm_bpath(&m, "big")));
	ASSERT_EQ(fsync_fd(fd), -EIO);
	ASSERT_EQ(close(fd) < 0 ? -errno : 0, -EIO);

	ctl(&r, &m, "drain", "--timeout", "5");
	ct_expect_status(&r, 1, "ckptfs-ctl drain over the lost spill");
	ct_result_free(&r);
	ASSERT_TRUE(!exists(tm_bpath(&m, "big")));

	/* The administrator gives it up; what comes after is published. */
	ct_blocked_seq(&m, seq);
	ctl(&r, &m, "skip", seq, NULL);
	ct_expect_status(&r, 0, "ckptfs-ctl skip");
	ct_result_free(&r);
	unlink(flag);
	ct_write_seeded(tm_path(&m, "after"), 64 * KiB, 2);
	ctl(&r, &m, "drain", "--timeout", "30");
	ct_expect_status(&r, 0, "ckptfs-ctl drain after the skip");
	ct_result_free(&r);
	ct_check_seeded(tm_bpath(&m, "before"), 64 * KiB, 1);
	ct_check_seeded(tm_bpath(&m, "after"), 64 * KiB, 2);
	ASSERT_TRUE(!exists(tm_bpath(&m, "big")));
	ct_run(&r, (const char *[]){ ct_tool("ckptfs-ctl"), "verify", m.backend, NULL });
	ct_expect_status(&r, 0, "ckptfs-ctl verify");
	ct_result_free(&r);
	tm_stop(&m);
	tm_cleanup(&m);
	printf("ok: a stage whose sync failed is never published\n");
	return 0;
}
