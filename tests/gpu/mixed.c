/*
 * mixed.c — captured ranges and ordinary writes combine into one version.
 * With 1 MiB chunks, file "mix" gets: a header written before any capture
 * in the chunk a capture then fills (the daemon merges the written bytes
 * into the adopted chunk); a hole between captures (zeros); a capture
 * spanning two chunks; two captures and a write between them in one chunk
 * (gaps filled with zeros, the write kept); a write past the last capture
 * (the file's size comes from it); a BYTES patch over captured bytes and a
 * CRC-32 patch (written once the captures landed, so they win).  File
 * "after" is written inside a chunk already adopted (the write goes into
 * the arena chunk itself); file "before" is written whole, then captured
 * into.  The expected contents are built alongside; the backend and
 * ckptfs-ctl verify must agree, and the CRC patch must equal an
 * independent bitwise CRC-32.
 */
#include "tests/gpu/gpu_util.h"

#include <unistd.h>

#define CH MiB

static uint32_t crc32_bitwise(const unsigned char *p, size_t n)
{
	uint32_t c = ~0u;
	while (n--) {
		c ^= *p++;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0xEDB88320u : c >> 1;
	}
	return ~c;
}

struct file {
	const char *rel;
	int fd;
	unsigned char *model;
	size_t size;
};

static void put(struct file *f, uint64_t off, const void *src, size_t len)
{
	if (off + len > f->size)
		f->size = off + len;
	memcpy(f->model + off, src, len);
}

static void wr(struct file *f, uint64_t off, const void *src, size_t len)
{
	cu_pwrite_all(f->fd, src, len, off);
	put(f, off, src, len);
}

static int cap(ckptfs_session *s, struct file *f, uint64_t off, const unsigned char *src, size_t len,
	       unsigned flags)
{
	int r = ckptfs_capture_ex(s, f->fd, off, (uint64_t)(uintptr_t)src, len, NULL, flags);
	if (r < 0)
		FAILF("capture %s [%llu, +%zu): %s", f->rel, (unsigned long long)off, len,
		      ckptfs_last_error());
	put(f, off, src, len);
	return r;
}

int main(void)
{
	struct tmount m;
	struct file mix = { .rel = "mixed/mix" }, after = { .rel = "mixed/after" },
		    before = { .rel = "mixed/before" };
	unsigned char *src = it_pattern(7, 8 * CH), *hdr = it_pattern(8, 64 * KiB);

	gt_init();
	tm_start(&m, "gpu_mixed", "cache_size=128M,chunk_size=1M", NULL);
	ckptfs_session *s = gt_open(&m, 16 * MiB);
	struct file *fs[] = { &mix, &after, &before };
	for (int i = 0; i < 3; i++) {
		fs[i]->fd = gt_create(&m, fs[i]->rel);
		fs[i]->model = calloc(1, 8 * CH);
	}

	/* mix */
	wr(&mix, 0, hdr, 100);					/* header, then capture beside it */
	cap(s, &mix, 100, src + 100, 300000 - 100, 0);
	cap(s, &mix, 300100, src + 300100, CH + CH / 2 - 300100, 0);	/* hole [300000, 300100) */
	cap(s, &mix, 2 * CH + 10, src + 10, 990, 0);		/* two captures, a write between */
	wr(&mix, 2 * CH + 2000, hdr + 200, 1000);
	int c = cap(s, &mix, 2 * CH + 5000, src + 5000, 4000, CKPTFS_CAPTURE_CRC32);
	cap(s, &mix, 3 * CH, src + 3 * CH, 40000, 0);
	wr(&mix, 5 * CH + 7, hdr + 300, 3000);			/* past the last capture: the size */
	struct ckptfs_patch p[2] = {
		{ .file_offset = 3 * CH + 16, .kind = CKPTFS_PATCH_BYTES, .data = "PATCHED!", .len = 8 },
		{ .file_offset = 3 * CH + 100, .kind = CKPTFS_PATCH_CRC32_LE, .capture = c },
	};
	put(&mix, 3 * CH + 16, "PATCHED!", 8);
	uint32_t crc = crc32_bitwise(src + 5000, 4000);
	unsigned char le[4] = { crc & 0xff, (crc >> 8) & 0xff, (crc >> 16) & 0xff, crc >> 24 };
	put(&mix, 3 * CH + 100, le, 4);
	ASSERT_EQ(ckptfs_file_close(s, mix.fd, p, 2, NULL, NULL), 0);

	/* after: a whole chunk captured and adopted, then written into */
	cap(s, &after, 0, src, CH, 0);
	ASSERT_EQ(ckptfs_wait_captured(s), 0);
	struct ckptfs_stats st;
	const uint64_t landed = (300000 - 100) + (CH + CH / 2 - 300100) + 990 + 4000 + 40000 + CH;
	for (int i = 0; i < 1000; i++) {	/* mix is closing: all of its chunks go */
		ckptfs_session_stats(s, &st);
		if (st.adopted_bytes == landed)
			break;
		usleep(10000);
	}
	ASSERT_EQ(st.adopted_bytes, landed);
	wr(&after, 4096, hdr, 8192);
	wr(&after, CH - 10, hdr, 20);				/* and across into the next chunk */

	/* before: written whole, then captured into */
	wr(&before, 0, hdr, 64 * KiB);
	cap(s, &before, 1000, src, 2000, 0);
	cap(s, &before, 60 * KiB, src + 9999, 8 * KiB, 0);	/* past the written end */

	for (int i = 1; i < 3; i++)
		ASSERT_EQ(ckptfs_file_close(s, fs[i]->fd, NULL, 0, NULL, NULL), 0);
	if (ckptfs_wait_files(s) < 0)
		FAILF("wait_files: %s", ckptfs_last_error());
	ckptfs_session_stats(s, &st);
	ASSERT_EQ(st.rejected, 0);
	ASSERT_TRUE(st.merged_bytes > 0);	/* written bytes merged into adopted chunks */
	ASSERT_EQ(ckptfs_session_close(s), 0);

	const char *rel[3];
	void *buf[3];
	size_t len[3];
	for (int i = 0; i < 3; i++) {
		rel[i] = fs[i]->rel;
		buf[i] = fs[i]->model;
		len[i] = fs[i]->size;
		cu_check_content(tm_path(&m, rel[i]), buf[i], len[i]);
	}
	ASSERT_EQ(mix.size, 5 * CH + 3007);
	gt_check_backend(&m, rel, buf, len, 3);
	tm_stop(&m);
	tm_cleanup(&m);
	for (int i = 0; i < 3; i++)
		free(fs[i]->model);
	free(src);
	free(hdr);
	return 0;
}
