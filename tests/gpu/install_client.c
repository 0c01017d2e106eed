/*
 * install_client.c — compiled by install.sh against the *installed*
 * ckptfs.h and libckptfs (proving the public header stands alone): captures
 * a buffer into MOUNT/installed.bin, closes it through the library, and
 * checks what the mount then holds.  Exit 0 on success.
 */
#include <ckptfs.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	char path[4096];
	size_t n = (5u << 20) + 17;
	unsigned char *buf = malloc(n), *back = malloc(n);

	if (argc != 2 || !buf || !back)
		return 2;
	for (size_t i = 0; i < n; i++)
		buf[i] = (unsigned char)(i * 131 + 7);
	ckptfs_session *s = ckptfs_session_open(argv[1]);
	if (!s) {
		fprintf(stderr, "session: %s\n", ckptfs_last_error());
		return 1;
	}
	snprintf(path, sizeof(path), "%s/installed.bin", argv[1]);
	int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
	if (fd < 0 || ckptfs_capture(s, fd, 0, (uint64_t)(uintptr_t)buf, n, NULL) < 0 ||
	    ckptfs_file_close(s, fd, NULL, 0, NULL, NULL) < 0 || ckptfs_wait_files(s) < 0) {
		fprintf(stderr, "capture: %s\n", ckptfs_last_error());
		return 1;
	}
	struct ckptfs_stats st;
	ckptfs_session_stats(s, &st);
	if (ckptfs_session_close(s) < 0 || strcmp(st.driver, "mock") != 0)
		return 1;
	fd = open(path, O_RDONLY);
	if (fd < 0 || read(fd, back, n) != (ssize_t)n || memcmp(buf, back, n) != 0) {
		fprintf(stderr, "%s does not hold what was captured\n", path);
		return 1;
	}
	return 0;
}
