/*
 * prealloc — before the flushers' first O_DIRECT write to a new temporary
 * file they allocate its data's blocks with fallocate(2) (backend/flush.c,
 * prealloc_fresh), so io_uring can issue the writes without handing them to
 * worker threads.  What must hold, through the real mount, over this
 * machine's file system:
 *
 *   1. Exactly the data is allocated: a file with 8 MiB of zeros written
 *      between two 4 MiB runs of data keeps the zeros as a hole (where the
 *      file system keeps holes), a dense file is allocated whole; the
 *      backend holds the bytes written.
 *   2. The call is made, at that step: with a fault that kills the daemon
 *      at fallocate, a file of zeros is published (no run of data, no
 *      call) and the daemon dies once a dense file is closed (its close
 *      may see the connection abort: the version is queued before the
 *      reply; nothing else calls fallocate on a fresh file); nothing is
 *      left under the file's name, and the next mount leaves no
 *      temporary file behind.
 *      With direct=off (buffered writes, no preallocation) the same fault
 *      never fires.
 *   3. Best effort: fallocate refused (EOPNOTSUPP, then ENOSPC) changes
 *      nothing about what is published.
 */
#include "tests/core/core_util.h"

#include <linux/magic.h>
#include <sys/vfs.h>
#include <sys/wait.h>

#define RUN (4 * MiB)
#define GAP (8 * MiB)
#define DENSE (12 * MiB + 4096)

/* Data, GAP bytes of zeros written with write(2), data, and a short tail. */
static void write_gappy(struct tmount *m, const char *rel)
{
	char *zeros = calloc(1, GAP);
	int fd = cu_open(tm_path(m, rel), O_CREAT | O_WRONLY | O_TRUNC);

	ASSERT_TRUE(zeros != NULL);
	cu_write_pattern_fd(fd, 0, RUN, 5, MiB);
	cu_pwrite_all(fd, zeros, GAP, RUN);
	cu_write_pattern_fd(fd, RUN + GAP, RUN + 100, 6, MiB);
	cu_close(fd);
	free(zeros);
}

static void check_gappy(struct tmount *m, const char *rel)
{
	int fd = cu_open(tm_bpath(m, rel), O_RDONLY);

	cu_check_range(fd, "first run", 0, RUN, 5);
	cu_check_range(fd, "zeros", RUN, GAP, 0);
	cu_check_range(fd, "second run", RUN + GAP, RUN + 100, 6);
	cu_close(fd);
	ASSERT_EQ(cu_file_size(tm_bpath(m, rel)), 2 * RUN + GAP + 100);
}

/* Wait up to ms for the daemon to exit; its wait status, or -1 if it is still up. */
static int wait_death(struct tmount *m, unsigned ms)
{
	int st;

	for (uint64_t end = mono_ms() + ms; mono_ms() < end; usleep(20000))
		if (waitpid(m->pid, &st, WNOHANG) == m->pid) {
			m->pid = 0;
			return st;
		}
	return -1;
}

/* 2: killed at the preallocation of a dense file; or, with direct=off, not. */
static void killed_at_prealloc(const char *opts, bool dies)
{
	struct tmount m;
	const char *env[] = { "CKPTFS_FAULT=op=fallocate,err=kill", NULL };

	tm_init(&m, dies ? "prealloc-kill" : "prealloc-nokill");
	tm_mount(&m, opts, env);
	/* A file of zeros has no run of data: no call, the daemon lives on. */
	char *zeros = calloc(1, GAP);
	ASSERT_TRUE(zeros != NULL);
	write_file(tm_path(&m, "zeros"), zeros, GAP);
	free(zeros);
	tm_sync(&m);
	ASSERT_EQ(wait_death(&m, 0), -1);
	ASSERT_EQ(cu_file_size(tm_bpath(&m, "zeros")), GAP);
	/*
	 * The close seals the version and queues it before its reply: a flusher
	 * can reach fallocate, and the daemon die, before that reply is sent,
	 * so the close may also end with the connection aborted.
	 */
	int dfd = cu_open(tm_path(&m, "dense"), O_CREAT | O_WRONLY | O_TRUNC);
	cu_write_pattern_fd(dfd, 0, DENSE, 7, MiB);
	if (close(dfd) < 0 && !(dies && (errno == ECONNABORTED || errno == ENOTCONN)))
		FAILF("close of the dense file: %s", strerror(errno));
	int st = wait_death(&m, dies ? 20000 : 0);
	if (!dies) {
		tm_sync(&m);
		ASSERT_EQ(wait_death(&m, 0), -1);
		cu_check_pattern(tm_bpath(&m, "dense"), DENSE, 7);
		tm_stop(&m);
		printf("direct=off: no preallocation, the fault never fired, the file is published\n");
		tm_cleanup(&m);
		return;
	}
	if (st == -1)
		FAILF("the daemon did not reach fallocate within 20 s of the dense file's close");
	ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	cu_unmount(m.mnt);
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "dense")));
	tm_mount(&m, NULL, NULL);
	tm_stop(&m);
	ASSERT_EQ(count_temp_files(m.backend), 0);
	printf("killed at fallocate: nothing under the name, no temporary file after the next mount\n");
	tm_cleanup(&m);
}

int main(void)
{
	struct tmount m;
	struct statfs sf;

	tm_require_fuse();
	cu_require_root();

	/* 1. */
	tm_start(&m, "prealloc", NULL, NULL);
	CHECK_SYS(statfs(m.backend, &sf));
	bool direct = sf.f_type != TMPFS_MAGIC, holes = cu_keeps_holes(m.backend);
	write_gappy(&m, "gappy");
	cu_write_pattern(tm_path(&m, "dense"), DENSE, 3);
	tm_sync(&m);
	check_gappy(&m, "gappy");
	cu_check_pattern(tm_bpath(&m, "dense"), DENSE, 3);
	uint64_t ag = cu_allocated(tm_bpath(&m, "gappy")), ad = cu_allocated(tm_bpath(&m, "dense"));
	printf("allocated: gappy %llu KiB for %llu KiB of data, dense %llu KiB of %llu\n",
	       (unsigned long long)(ag / KiB), (unsigned long long)((2 * RUN + 100) / KiB),
	       (unsigned long long)(ad / KiB), (unsigned long long)(DENSE / KiB));
	if (holes)
		ASSERT_LT(ag, 2 * RUN + 2 * MiB);
	ASSERT_TRUE(ad >= DENSE - 4096);
	tm_stop(&m);
	tm_cleanup(&m);

	/* 3. */
	const char *refused[] = { "op=fallocate,err=EOPNOTSUPP", "op=fallocate,err=ENOSPC,count=1" };
	for (size_t i = 0; i < CU_LEN(refused); i++) {
		char envv[128];
		snprintf(envv, sizeof(envv), "CKPTFS_FAULT=%s", refused[i]);
		const char *env[] = { envv, NULL };
		tm_start(&m, "prealloc-refused", NULL, env);
		write_gappy(&m, "gappy");
		cu_write_pattern(tm_path(&m, "dense"), DENSE, 4);
		cu_write_pattern(tm_path(&m, "dense2"), DENSE, 8);
		tm_sync(&m);
		check_gappy(&m, "gappy");
		cu_check_pattern(tm_bpath(&m, "dense"), DENSE, 4);
		cu_check_pattern(tm_bpath(&m, "dense2"), DENSE, 8);
		tm_stop(&m);
		tm_cleanup(&m);
		printf("fallocate refused (%s): the same files published\n", refused[i]);
	}

	/* 2. */
	if (!direct) {
		printf("note: the backend is tmpfs (no O_DIRECT, no preallocation): step 2 skipped\n");
		return 0;
	}
	killed_at_prealloc(NULL, true);
	killed_at_prealloc("direct=off", false);
	return 0;
}
