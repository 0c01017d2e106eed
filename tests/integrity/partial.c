/*
 * partial.c — a file still open for writing when the daemon stops is never
 * published (contract item 4), and what was written to it is not lost.
 *
 * With rescue_dir=R: "done" is written and closed; "half.bin" is written
 * (twice: a closed first version, then more, still open) and the daemon gets
 * SIGTERM.  It drains what was closed and exits 0: the backend holds "done"
 * and half.bin's closed first version, never the open contents; R/<host>-
 * <mount id>/partial/half.bin holds exactly what was written to the open
 * file, and manifest.jsonl lists it as "partial"; the log says where.
 */
#include "tests/integrity/integ.h"

#include <signal.h>
#include <sys/wait.h>

int main(void)
{
	struct tmount m;
	char rescue[PATH_MAX], opts[PATH_MAX + 64], mid[64], host[256] = "localhost";
	char where[2 * PATH_MAX], path[3 * PATH_MAX];
	size_t len;

	tm_require_fuse();
	tm_init(&m, "partial");
	snprintf(rescue, sizeof(rescue), "%s/rescue", m.root);
	snprintf(opts, sizeof(opts), "rescue_dir=%s", rescue);
	tm_mount(&m, opts, NULL);
	ASSERT_EQ(it_write_pattern(tm_path(&m, "done"), 1, 300 * KiB), 0);
	ASSERT_EQ(it_write_pattern(tm_path(&m, "half.bin"), 2, 100 * KiB), 0);
	char *more = it_pattern(3, 700 * KiB);
	int fd = CHECK_SYS(open(tm_path(&m, "half.bin"), O_WRONLY | O_TRUNC));
	for (size_t done = 0; done < 700 * KiB;)
		done += (size_t)CHECK_SYS(write(fd, more + done, 700 * KiB - done));
	ASSERT_TRUE(it_json_get(it_stats(&m), "mount_id", mid, sizeof(mid)));

	CHECK_SYS(kill(m.pid, SIGTERM));
	int st;
	CHECK_SYS(waitpid(m.pid, &st, 0));
	m.pid = 0;
	ASSERT_TRUE(WIFEXITED(st));
	ASSERT_EQ(WEXITSTATUS(st), 0);
	close(fd);	/* the mount is gone: its error does not matter */

	ASSERT_TRUE(it_has_pattern(tm_bpath(&m, "done"), 1, 300 * KiB));
	ASSERT_TRUE(it_has_pattern(tm_bpath(&m, "half.bin"), 2, 100 * KiB));
	gethostname(host, sizeof(host) - 1);
	snprintf(where, sizeof(where), "%s/%s-%s", rescue, host, mid);
	snprintf(path, sizeof(path), "%s/partial/half.bin", where);
	ASSERT_TRUE(it_has_pattern(path, 3, 700 * KiB));
	snprintf(path, sizeof(path), "%s/manifest.jsonl", where);
	char *mf = read_file(path, &len);
	ASSERT_TRUE(mf != NULL);
	mf = realloc(mf, len + 1);
	mf[len] = '\0';
	ASSERT_TRUE(strstr(mf, "\"op\": \"partial\", \"path\": \"half.bin\"") != NULL);
	ASSERT_TRUE(strstr(mf, "\"saved\": true") != NULL);
	free(mf);
	snprintf(path, sizeof(path), "saved in %s", where);
	if (it_log_count(&m, path) != 1)
		FAILF("the daemon log does not say \"%s\"", path);
	free(more);
	tm_cleanup(&m);
	return 0;
}
