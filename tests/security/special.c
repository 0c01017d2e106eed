/*
 * special.c — FIFOs, sockets and device nodes, as a local file system has
 * them (issue 10 item 7; fs/ops.c op_mknod, OP_MKNOD in backend/publish.c,
 * fs/node.c dir_load).
 *
 *  - A FIFO, a socket and a character device already on the backend are
 *    listed by the mount with their types, modes and device number, and
 *    the FIFO works through the mount (the kernel's pipe: FUSE sends no
 *    OPEN for it, so the daemon never opens one).
 *  - mkfifo, bind(2) of a Unix socket and, as root, mknod of a character
 *    device through the mount make the node on the backend, in order: a
 *    FIFO made after a file is closed never reaches the backend before that
 *    file (whose publishing CKPTFS_FAULT delays); the manifest has a
 *    "mknod" record.  The socket accepts a connection through the mount.
 *  - Another user may make a FIFO (owned by that user on the backend) but
 *    not a device (EPERM); chmod, rename and unlink of a FIFO reach the
 *    backend, and the daemon never tries to open one (no "refused" line).
 *  - The fault names of the new bsys entries are accepted (the mount runs
 *    with a rule naming each of them).
 */
#include "tests/security/sec_util.h"
#include "tests/integrity/integ.h"

#include <dirent.h>
#include <sys/socket.h>
#include <sys/sysmacros.h>
#include <sys/un.h>

#define A 1000

static struct tmount m;

static int bind_unix(const char *path, bool do_listen)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int s = CHECK_SYS(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));

	if (strlen(path) >= sizeof(a.sun_path))
		FAILF("socket path too long for this test: %s", path);
	strcpy(a.sun_path, path);
	CHECK_SYS(bind(s, (struct sockaddr *)&a, sizeof(a)));
	if (do_listen)
		CHECK_SYS(listen(s, 1));
	return s;
}

static void assert_type(const char *path, mode_t type, mode_t perm)
{
	struct stat st;
	CHECK_SYS(lstat(path, &st));
	if ((st.st_mode & S_IFMT) != type || (perm && (st.st_mode & 07777) != perm))
		FAILF("%s: mode %06o, expected type %06o perm %04o", path, (unsigned)st.st_mode,
		      (unsigned)type, (unsigned)perm);
}

static unsigned char dtype_of(const char *dir, const char *name)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	unsigned char t = 0xff;
	ASSERT_TRUE(d != NULL);
	while ((de = readdir(d)))
		if (!strcmp(de->d_name, name))
			t = de->d_type;
	closedir(d);
	return t;
}

/* Nodes made on the backend before the mount are shown, and a FIFO works. */
static void found_on_backend(void)
{
	struct stat st;
	char buf[8];

	assert_type(tm_path(&m, "pre.fifo"), S_IFIFO, 0640);
	assert_type(tm_path(&m, "pre.sock"), S_IFSOCK, 0);
	assert_type(tm_path(&m, "pre.null"), S_IFCHR, 0600);
	CHECK_SYS(lstat(tm_path(&m, "pre.null"), &st));
	ASSERT_EQ(major(st.st_rdev), 1);
	ASSERT_EQ(minor(st.st_rdev), 3);
	ASSERT_EQ(dtype_of(m.mnt, "pre.fifo"), DT_FIFO);
	ASSERT_EQ(dtype_of(m.mnt, "pre.sock"), DT_SOCK);
	ASSERT_EQ(dtype_of(m.mnt, "pre.null"), DT_CHR);
	int fd = CHECK_SYS(open(tm_path(&m, "pre.fifo"), O_RDWR | O_NONBLOCK));
	ASSERT_EQ(write(fd, "ping", 4), 4);
	ASSERT_EQ(read(fd, buf, sizeof(buf)), 4);
	ASSERT_TRUE(memcmp(buf, "ping", 4) == 0);
	close(fd);
}

/* A FIFO made after a file is closed reaches the backend after it. */
static void in_order(void)
{
	bool saw_neither = false;

	cu_write_text(tm_path(&m, "first"), "published first");	/* its rename is delayed */
	CHECK_SYS(mkfifo(tm_path(&m, "second.fifo"), 0600));
	assert_type(tm_path(&m, "second.fifo"), S_IFIFO, 0600);
	for (uint64_t t0 = mono_ms(); mono_ms() - t0 < 8000; usleep(5000)) {
		bool first = file_exists(tm_bpath(&m, "first"));
		struct stat st;
		bool second = lstat(tm_bpath(&m, "second.fifo"), &st) == 0;
		if (second && !first)
			FAILF("second.fifo reached the backend before first, which was closed before it");
		saw_neither |= !first && !second;
		if (first && second)
			break;
	}
	ASSERT_TRUE(saw_neither);	/* the delay held first back: the order was tested */
	tm_sync(&m);
	assert_type(tm_bpath(&m, "second.fifo"), S_IFIFO, 0600);
	ASSERT_STR_EQ(cu_slurp(tm_bpath(&m, "first")), "published first");
}

/* A Unix socket bound in the mount: made on the backend, and it works. */
static void unix_socket(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	char buf[8];
	int srv = bind_unix(tm_path(&m, "live.sock"), true);
	int cli = CHECK_SYS(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));

	strcpy(a.sun_path, tm_path(&m, "live.sock"));
	CHECK_SYS(connect(cli, (struct sockaddr *)&a, sizeof(a)));
	int c = CHECK_SYS(accept(srv, NULL, NULL));
	ASSERT_EQ(send(cli, "hi", 2, 0), 2);
	ASSERT_EQ(recv(c, buf, sizeof(buf), 0), 2);
	close(c);
	close(cli);
	close(srv);
	tm_sync(&m);
	assert_type(tm_bpath(&m, "live.sock"), S_IFSOCK, 0);
}

static int user_mkfifo(void *unused) { return SEC_ERR(mkfifo(tm_path(&m, "pub/a.fifo"), 0640)); }
static int user_mknod(void *unused)
{
	return SEC_ERR(mknod(tm_path(&m, "pub/a.null"), S_IFCHR | 0666, makedev(1, 3)));
}

static void devices_and_users(void)
{
	struct stat st;

	CHECK_SYS(mknod(tm_path(&m, "dev.null"), S_IFCHR | 0600, makedev(1, 3)));
	CHECK_SYS(mkdir(tm_path(&m, "pub"), 0777));
	ASSERT_EQ(tm_as_user(A, A, user_mkfifo, NULL), 0);
	ASSERT_EQ(tm_as_user(A, A, user_mknod, NULL), EPERM);
	tm_sync(&m);
	assert_type(tm_bpath(&m, "dev.null"), S_IFCHR, 0600);
	CHECK_SYS(lstat(tm_bpath(&m, "dev.null"), &st));
	ASSERT_EQ(st.st_rdev, makedev(1, 3));
	assert_type(tm_bpath(&m, "pub/a.fifo"), S_IFIFO, 0640);
	ASSERT_EQ(sec_uid(tm_bpath(&m, "pub/a.fifo")), A);
	ASSERT_TRUE(!file_exists(tm_bpath(&m, "pub/a.null")));

	CHECK_SYS(chmod(tm_path(&m, "pub/a.fifo"), 0604));
	CHECK_SYS(rename(tm_path(&m, "pub/a.fifo"), tm_path(&m, "pub/b.fifo")));
	CHECK_SYS(unlink(tm_path(&m, "pre.fifo")));
	tm_sync(&m);
	assert_type(tm_bpath(&m, "pub/b.fifo"), S_IFIFO, 0604);
	ASSERT_TRUE(lstat(tm_bpath(&m, "pub/a.fifo"), &st) < 0 && errno == ENOENT);
	ASSERT_TRUE(lstat(tm_bpath(&m, "pre.fifo"), &st) < 0 && errno == ENOENT);
}

static void manifest_records(void)
{
	struct it_log l;

	ASSERT_EQ(it_log_read(it_manifest_path(&m), &l), 0);
	ASSERT_EQ(it_log_count_type(&l, "mknod", "second.fifo"), 1);
	ASSERT_EQ(it_log_count_type(&l, "mknod", "live.sock"), 1);
	ASSERT_EQ(it_log_count_type(&l, "mknod", "dev.null"), 1);
	it_log_free(&l);
}

int main(void)
{
	cu_require_root();
	tm_require_fuse();
	umask(0);
	tm_init(&m, "special");
	CHECK_SYS(chmod(m.root, 0755));
	CHECK_SYS(mkfifo(tm_bpath(&m, "pre.fifo"), 0640));
	close(bind_unix(tm_bpath(&m, "pre.sock"), false));
	CHECK_SYS(mknod(tm_bpath(&m, "pre.null"), S_IFCHR | 0600, makedev(1, 3)));
	const char *env[] = { "CKPTFS_FAULT=op=rename,delay_ms=1500,name=first;"
			      "op=mknod|readdir|readlink|getxattr|listxattr|fchmod|fchown|futimens,"
			      "delay_ms=1", NULL };
	tm_mount(&m, "allow_other,cache_size=64M", env);
	found_on_backend();
	in_order();
	unix_socket();
	devices_and_users();
	/* Nothing here was planted: the daemon never met a node it would not open. */
	ASSERT_EQ(sec_log_count(&m, "refused to"), 0);
	tm_stop(&m);
	manifest_records();
	tm_cleanup(&m);
	return 0;
}
