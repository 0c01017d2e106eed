/*
 * namespace.c — where the control directory lives and who may use it.
 *
 *  - MOUNT/.ckptfs is absent from the root's listing (while the backend's
 *    own .ckptfs metadata directory exists) yet reachable by name: stat of
 *    .ckptfs/stats works; the directory holds stats, files, drain and ctl
 *    with their modes;
 *  - nothing can be created, renamed into or removed from it (EPERM), its
 *    files cannot be chmod'ed, and a second .ckptfs cannot be made at the
 *    root (EEXIST);
 *  - ctl takes commands from root, the mount's owner ("sync", and an
 *    unknown one answered with ok false); as another user (uid 65534, on
 *    an allow_other mount) opening ctl gets EACCES while stats can still
 *    be read — so the refusal is ctl's own, not the mount's (root only);
 *  - a user's file or directory named .ckptfs below the root is ordinary:
 *    created, written, read back, listed, and on the backend after a sync.
 */
#include "tests/ctl/ctl_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Is `name` in the listing of dir? */
static bool listed(const char *dir, const char *name)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	bool found = false;

	if (!d)
		FAILF("opendir %s: %s", dir, strerror(errno));
	while ((de = readdir(d)))
		found |= strcmp(de->d_name, name) == 0;
	closedir(d);
	return found;
}

/* The call must fail with `err`. */
#define EXPECT_ERRNO(call, err)                                                 \
	do {                                                                    \
		errno = 0;                                                      \
		if ((call) >= 0)                                                \
			FAILF("%s succeeded, expected %s", #call, strerror(err)); \
		if (errno != (err))                                             \
			FAILF("%s: %s, expected %s", #call, strerror(errno), strerror(err)); \
	} while (0)

static void control_dir_hidden(struct tmount *m)
{
	static const struct {
		const char *name;
		mode_t mode;
	} files[] = { { "stats", 0444 }, { "files", 0444 }, { "drain", 0666 }, { "ctl", 0600 } };
	struct stat st;

	write_file(tm_path(m, "a"), "a", 1);
	CHECK_SYS(mkdir(tm_path(m, "sub"), 0755));
	tm_sync(m);
	ASSERT_TRUE(file_exists(tm_bpath(m, ".ckptfs")));	/* what the mount hides */
	ASSERT_TRUE(listed(m->mnt, "a"));
	ASSERT_TRUE(listed(m->mnt, "sub"));
	ASSERT_TRUE(!listed(m->mnt, ".ckptfs"));

	CHECK_SYS(stat(tm_path(m, ".ckptfs"), &st));
	ASSERT_TRUE(S_ISDIR(st.st_mode));
	for (size_t i = 0; i < sizeof(files) / sizeof(*files); i++) {
		char rel[32];
		snprintf(rel, sizeof(rel), ".ckptfs/%s", files[i].name);
		CHECK_SYS(stat(tm_path(m, rel), &st));
		ASSERT_TRUE(S_ISREG(st.st_mode));
		ASSERT_EQ(st.st_mode & 07777, files[i].mode);
		ASSERT_TRUE(listed(tm_path(m, ".ckptfs"), files[i].name));
	}
	ASSERT_TRUE(!listed(tm_path(m, ".ckptfs"), "nodes"));	/* not the backend's */
}

static void control_dir_closed(struct tmount *m)
{
	EXPECT_ERRNO(open(tm_path(m, ".ckptfs/new"), O_CREAT | O_WRONLY, 0644), EPERM);
	EXPECT_ERRNO(mkdir(tm_path(m, ".ckptfs/d"), 0755), EPERM);
	EXPECT_ERRNO(symlink("stats", tm_path(m, ".ckptfs/s")), EPERM);
	EXPECT_ERRNO(rename(tm_path(m, "a"), tm_path(m, ".ckptfs/a")), EPERM);
	EXPECT_ERRNO(link(tm_path(m, "a"), tm_path(m, ".ckptfs/a")), EPERM);
	EXPECT_ERRNO(unlink(tm_path(m, ".ckptfs/stats")), EPERM);
	EXPECT_ERRNO(chmod(tm_path(m, ".ckptfs/ctl"), 0666), EPERM);
	EXPECT_ERRNO(mkdir(tm_path(m, ".ckptfs"), 0755), EEXIST);
	EXPECT_ERRNO(open(tm_path(m, ".ckptfs"), O_CREAT | O_EXCL | O_WRONLY, 0644), EEXIST);
	ASSERT_TRUE(rmdir(tm_path(m, ".ckptfs")) < 0);
	ASSERT_TRUE(file_exists(tm_path(m, ".ckptfs/stats")));
	ASSERT_TRUE(!file_exists(tm_path(m, ".ckptfs/new")));
	ASSERT_TRUE(file_exists(tm_path(m, "a")));
}

static void owner_commands(struct tmount *m)
{
	struct json_obj a;
	char *help = ct_read_ctl(m, "ctl");

	ct_expect_in(help, "sync", "ctl read fresh");
	free(help);
	write_file(tm_path(m, "synced"), "s", 1);
	ct_exchange(m, "ctl", "sync\n", &a);
	ASSERT_TRUE(ct_bool(&a, "ok"));
	ASSERT_GE(ct_num(&a, "seq"), 1);
	json_free(&a);
	ct_exchange(m, "ctl", "frobnicate\n", &a);
	ASSERT_TRUE(!ct_bool(&a, "ok"));
	ct_expect_in(ct_str(&a, "error"), "unknown command", "ctl's answer");
	json_free(&a);
}

/* In a child as uid/gid 65534: what a stranger may and may not do. */
static void stranger(struct tmount *m)
{
	char buf[4096];
	pid_t pid;
	int st, fd;

	if (geteuid() != 0) {
		fprintf(stderr, "note: not root; the non-owner check is skipped\n");
		return;
	}
	if ((pid = CHECK_SYS(fork())) == 0) {
		CHECK_SYS(setgroups(0, NULL));
		CHECK_SYS(setgid(65534));
		CHECK_SYS(setuid(65534));
		EXPECT_ERRNO(open(tm_path(m, ".ckptfs/ctl"), O_WRONLY), EACCES);
		EXPECT_ERRNO(open(tm_path(m, ".ckptfs/ctl"), O_RDWR), EACCES);
		fd = (int)CHECK_SYS(open(tm_path(m, ".ckptfs/stats"), O_RDONLY));
		ssize_t n = CHECK_SYS(read(fd, buf, sizeof(buf)));
		close(fd);
		ASSERT_TRUE(n > 0 && buf[0] == '{');
		_exit(0);
	}
	CHECK_SYS(waitpid(pid, &st, 0));
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		FAILF("the non-owner checks failed (status 0x%x)", st);
}

static void user_dot_ckptfs(struct tmount *m)
{
	static const char text[] = "an ordinary file that happens to be called .ckptfs\n";
	size_t len;
	char *back;
	struct stat st;

	write_file(tm_path(m, "sub/.ckptfs"), text, sizeof(text) - 1);
	back = read_file(tm_path(m, "sub/.ckptfs"), &len);
	ASSERT_TRUE(back != NULL);
	ASSERT_EQ(len, sizeof(text) - 1);
	ASSERT_TRUE(memcmp(back, text, len) == 0);
	free(back);
	CHECK_SYS(stat(tm_path(m, "sub/.ckptfs"), &st));
	ASSERT_TRUE(S_ISREG(st.st_mode));
	ASSERT_TRUE(listed(tm_path(m, "sub"), ".ckptfs"));

	CHECK_SYS(mkdir(tm_path(m, "sub2"), 0755));
	CHECK_SYS(mkdir(tm_path(m, "sub2/.ckptfs"), 0755));
	ct_write_seeded(tm_path(m, "sub2/.ckptfs/inner"), 3000, 5);
	ASSERT_TRUE(listed(tm_path(m, "sub2"), ".ckptfs"));
	ASSERT_TRUE(listed(tm_path(m, "sub2/.ckptfs"), "inner"));
	ct_check_seeded(tm_path(m, "sub2/.ckptfs/inner"), 3000, 5);

	tm_sync(m);
	assert_files_equal(tm_bpath(m, "sub/.ckptfs"), tm_path(m, "sub/.ckptfs"));
	ct_check_seeded(tm_bpath(m, "sub2/.ckptfs/inner"), 3000, 5);
	CHECK_SYS(unlink(tm_path(m, "sub/.ckptfs")));
	tm_sync(m);
	ASSERT_TRUE(!file_exists(tm_bpath(m, "sub/.ckptfs")));
}

int main(void)
{
	struct tmount m;

	tm_require_fuse();
	tm_init(&m, "ctl-namespace");
	CHECK_SYS(chmod(m.root, 0711));	/* so uid 65534 can reach the mount */
	tm_mount(&m, geteuid() == 0 ? "allow_other" : NULL, NULL);
	control_dir_hidden(&m);
	control_dir_closed(&m);
	owner_commands(&m);
	stranger(&m);
	user_dot_ckptfs(&m);
	tm_stop(&m);
	tm_cleanup(&m);
	return 0;
}
