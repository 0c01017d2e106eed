/*
 * stall.c — a capture waiting for arena space over a backend that makes no
 * progress ends: every data write fails (CKPTFS_FAULT, gated), so closed
 * files keep their arena chunks in their versions and the daemon can give
 * none back.  The next capture fails with ETIMEDOUT once
 * CKPTFS_STALL_TIMEOUT has passed with nothing given back, its file is
 * dropped at close, and ckptfs_wait_files says why.
 */
#include "tests/gpu/gpu_util.h"

#include <unistd.h>

#define STALL_S 2
#define LEN (8 * MiB)

int main(void)
{
	struct tmount m;
	char gate[PATH_MAX], rel[32];
	unsigned char *buf = it_pattern(9, LEN);
	int fd, r;

	gt_init();
	tm_init(&m, "gpu_stall");
	snprintf(gate, sizeof(gate), "%s/gate", m.root);
	const char *env[] = { cu_fault_env("op=pwrite|fdatasync|fallocate,err=EIO,while=%s", gate),
			      NULL };
	/* 128M: one user's sessions get a quarter of the cache, the 32 MiB arena asked for. */
	tm_mount(&m, "cache_size=128M,drain_timeout=3", env);
	it_gate_set(gate, true);
	setenv("CKPTFS_STALL_TIMEOUT", "2", 1);
	ckptfs_session *s = gt_open(&m, 32 * MiB);
	gt_watchdog(60, "HANG: a capture still waits for the arena after 60 s");

	/* Four files fill the arena: their chunks stay in versions the backend refuses. */
	for (int i = 0; i < 4; i++) {
		snprintf(rel, sizeof(rel), "stall/f%d", i);
		fd = gt_create(&m, rel);
		ASSERT_EQ(ckptfs_capture(s, fd, 0, (uint64_t)(uintptr_t)buf, LEN, NULL), 0);
		gt_close_wait(s, fd);
	}
	fd = gt_create(&m, "stall/f4");
	uint64_t t0 = mono_ms();
	r = ckptfs_capture(s, fd, 0, (uint64_t)(uintptr_t)buf, LEN, NULL);
	uint64_t took = mono_ms() - t0;
	GT_EXPECT_ERR(r, ETIMEDOUT, "CKPTFS_STALL_TIMEOUT");
	ASSERT_GE(took, STALL_S * 1000 - 100);	/* it waited the limit out */
	ASSERT_LE(took, STALL_S * 1000 + 5000);
	ASSERT_EQ(ckptfs_file_close(s, fd, NULL, 0, NULL, NULL), 0);
	GT_EXPECT_ERR(ckptfs_wait_files(s), ETIMEDOUT, "the file was dropped");
	ASSERT_TRUE(!file_exists(tm_path(&m, "stall/f4")));
	gt_watchdog(0, "");

	it_gate_set(gate, false);
	ckptfs_session_close(s);
	cu_stop_any(&m);
	tm_cleanup(&m);
	free(buf);
	return 0;
}
