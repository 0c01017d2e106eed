/*
 * roundtrip.c — captured bytes reach the backend exactly, and the manifest's
 * XXH3 of each file matches them (ckptfs-ctl verify), through a real mount
 * and the mock driver: one byte; a page; a whole chunk; a range that starts
 * mid-chunk and spans three; 40 MiB captured in eleven pieces in reverse
 * order (chunks reopened, adopted out of order); a zero-length capture (an
 * empty file).  The sources are freed right after ckptfs_wait_captured, and
 * the files read back through the mount before they are flushed.  The
 * daemon's counters agree: every captured byte adopted, nothing refused.
 */
#include "tests/gpu/gpu_util.h"

#define NFILES 6

int main(void)
{
	static const char *const rel[NFILES] = { "rt/one", "rt/page", "rt/chunk", "rt/span",
						 "rt/reverse", "rt/empty" };
	const size_t len[NFILES] = { 1, 4096, 4 * MiB, 8 * MiB + 12345, 40 * MiB, 0 };
	const uint64_t off0[NFILES] = { 0, 0, 0, 777, 0, 0 };
	void *src[NFILES], *expect[NFILES];
	size_t flen[NFILES];
	struct tmount m;
	uint64_t total = 0;

	gt_init();
	tm_start(&m, "gpu_roundtrip", "cache_size=256M", NULL);
	ckptfs_session *s = gt_open(&m, 64 * MiB);
	for (int i = 0; i < NFILES; i++) {
		int fd = gt_create(&m, rel[i]);
		src[i] = it_pattern(100 + (uint64_t)i, len[i] ? len[i] : 1);
		flen[i] = off0[i] + len[i];
		expect[i] = calloc(1, flen[i] ? flen[i] : 1);
		memcpy((char *)expect[i] + off0[i], src[i], len[i]);
		if (i == 4) {	/* eleven pieces, last first */
			const size_t piece = 4 * MiB - 4096 + 77;
			size_t n = (len[i] + piece - 1) / piece;
			for (size_t k = n; k-- > 0;) {
				size_t a = k * piece, b = a + piece > len[i] ? len[i] : a + piece;
				int r = ckptfs_capture(s, fd, a, (uint64_t)(uintptr_t)src[i] + a, b - a, NULL);
				if (r < 0)
					FAILF("capture %s piece %zu: %s", rel[i], k, ckptfs_last_error());
				ASSERT_EQ(r, (int)(n - 1 - k));	/* captures are numbered per file */
			}
		} else {
			int r = ckptfs_capture(s, fd, off0[i], (uint64_t)(uintptr_t)src[i], len[i], NULL);
			if (r < 0)
				FAILF("capture %s: %s", rel[i], ckptfs_last_error());
			ASSERT_EQ(r, 0);
		}
		total += len[i];
		ASSERT_EQ(ckptfs_file_close(s, fd, NULL, 0, NULL, NULL), 0);
	}
	ASSERT_EQ(ckptfs_wait_captured(s), 0);
	for (int i = 0; i < NFILES; i++) {	/* the copies are done: the sources may go */
		memset(src[i], 0xAB, len[i] ? len[i] : 1);
		free(src[i]);
	}
	if (ckptfs_wait_files(s) < 0)
		FAILF("wait_files: %s", ckptfs_last_error());
	for (int i = 0; i < NFILES; i++)	/* through the mount, from the cache */
		cu_check_content(tm_path(&m, rel[i]), expect[i], flen[i]);

	struct ckptfs_stats st;
	ASSERT_EQ(ckptfs_session_stats(s, &st), 0);
	ASSERT_STR_EQ(st.driver, "mock");
	ASSERT_EQ(st.adopted_bytes, total);
	ASSERT_EQ(st.rejected, 0);
	ASSERT_GE(st.adopted_chunks, 1 + 1 + 1 + 3 + 10);
	ASSERT_EQ(gt_stat(&m, "gpu_captured_bytes"), total);
	ASSERT_EQ(gt_stat(&m, "gpu_rejected_entries"), 0);
	ASSERT_EQ(gt_stat(&m, "gpu_sessions_active"), 1);
	ASSERT_EQ(ckptfs_session_close(s), 0);

	gt_check_backend(&m, rel, expect, flen, NFILES);
	/* The session is gone and its arena went back to the cache. */
	ASSERT_TRUE(it_wait_stat(&m, "gpu_arena_bytes", "0", 10000));
	ASSERT_TRUE(it_wait_stat(&m, "gpu_sessions_active", "0", 10000));
	tm_stop(&m);
	for (int i = 0; i < NFILES; i++)
		free(expect[i]);
	tm_cleanup(&m);
	return 0;
}
