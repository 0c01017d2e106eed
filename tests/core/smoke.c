/*
 * A file written through the mount reads back through it, reaches the
 * backend whole after unmount, and a fresh mount over that backend shows
 * the same bytes again.
 */
#include "tests/harness.h"

int main(void)
{
	struct tmount m;
	char buf[4096];
	size_t len;
	char *got;

	tm_require_fuse();
	tm_start(&m, "smoke", NULL, NULL);
	fill_pattern(buf, sizeof(buf), 1, 0);
	write_file(tm_path(&m, "f"), buf, sizeof(buf));
	got = read_file(tm_path(&m, "f"), &len);	/* from the cache */
	ASSERT_TRUE(got != NULL);
	ASSERT_EQ(len, sizeof(buf));
	ASSERT_EQ(memcmp(got, buf, len), 0);
	free(got);
	tm_stop(&m);

	got = read_file(tm_bpath(&m, "f"), &len);	/* on the backend */
	ASSERT_TRUE(got != NULL);
	ASSERT_EQ(len, sizeof(buf));
	ASSERT_EQ(memcmp(got, buf, len), 0);
	free(got);

	tm_mount(&m, NULL, NULL);			/* through a new mount */
	assert_files_equal(tm_path(&m, "f"), tm_bpath(&m, "f"));
	tm_stop(&m);
	tm_cleanup(&m);
	return 0;
}
