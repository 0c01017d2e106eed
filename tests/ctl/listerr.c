/*
 * listerr.c — a directory listing of the backend that fails part way fails
 * as a whole: an entry whose stat (or a symlink whose readlink) gets EIO
 * is not left out of the mount's view, where it would read as removed
 * from the backend (ENOENT, and gone from readdir), or as a symlink to
 * nothing.
 *
 * The backend holds d/{victim, other, link -> victim}, made before the
 * mount.  While stat of "victim" fails with EIO (CKPTFS_FAULT), the first
 * listing of d fails (EIO) instead of showing d without victim; then the
 * same with readlink of "link" failing; then both work, and d lists all
 * three, link pointing at victim.
 */
#include "tests/ctl/ctl_util.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

/* readdir of path: how many entries besides . and .., or -errno. */
static int list(const char *path)
{
	DIR *d = opendir(path);
	int n = 0;

	if (!d)
		return -errno;
	errno = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	int err = errno;
	closedir(d);
	return err ? -err : n;
}

int main(void)
{
	struct tmount m;
	char env[2 * PATH_MAX + 128], sflag[PATH_MAX], lflag[PATH_MAX], target[64];

	tm_require_fuse();
	tm_init(&m, "ctl-listerr");
	snprintf(sflag, sizeof(sflag), "%s/stat-eio", m.root);
	snprintf(lflag, sizeof(lflag), "%s/readlink-eio", m.root);
	snprintf(env, sizeof(env), "CKPTFS_FAULT=op=stat,name=victim,err=EIO,while=%s;"
		 "op=readlink,name=link,err=EIO,while=%s", sflag, lflag);
	CHECK_SYS(mkdir(tm_bpath(&m, "d"), 0755));
	write_file(tm_bpath(&m, "d/victim"), "v\n", 2);
	write_file(tm_bpath(&m, "d/other"), "o\n", 2);
	CHECK_SYS(symlink("victim", tm_bpath(&m, "d/link")));
	tm_mount(&m, "attr_timeout=0.2", (const char *const[]){ env, NULL });

	ct_touch(sflag);
	int n = list(tm_path(&m, "d"));
	if (n != -EIO)
		FAILF("listing d while stat of an entry fails: %d (%s), expected EIO", n,
		      n < 0 ? strerror(-n) : "entries, one left out");
	unlink(sflag);
	ct_touch(lflag);
	usleep(300 * 1000);	/* past attr_timeout: listed again */
	n = list(tm_path(&m, "d"));
	if (n != -EIO)
		FAILF("listing d while readlink of an entry fails: %d (%s), expected EIO", n,
		      n < 0 ? strerror(-n) : "entries, a symlink to nothing");
	unlink(lflag);
	usleep(300 * 1000);
	ASSERT_EQ(list(tm_path(&m, "d")), 3);
	ssize_t len = readlink(tm_path(&m, "d/link"), target, sizeof(target) - 1);
	ASSERT_EQ(len, 6);
	target[len] = '\0';
	ASSERT_STR_EQ(target, "victim");
	tm_stop(&m);
	tm_cleanup(&m);
	printf("ok: a listing whose entry cannot be read fails, then shows everything\n");
	return 0;
}
