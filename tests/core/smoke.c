/* A file written through the mount reaches the backend whole after unmount. */
#include "tests/harness.h"

int main(void)
{
	struct tmount m;
	char buf[4096];

	tm_require_fuse();
	tm_start(&m, "smoke", NULL, NULL);
	fill_pattern(buf, sizeof(buf), 1, 0);
	write_file(tm_path(&m, "f"), buf, sizeof(buf));
	tm_stop(&m);
	assert_files_equal(tm_bpath(&m, "f"), tm_path(&m, "../backend/f"));
	size_t len;
	char *got = read_file(tm_bpath(&m, "f"), &len);
	ASSERT_TRUE(got != NULL);
	ASSERT_EQ(len, sizeof(buf));
	ASSERT_EQ(memcmp(got, buf, len), 0);
	free(got);
	tm_cleanup(&m);
	return 0;
}
