/*
 * cli.c — shared pieces of the command-line tools (see cli.h).
 */
#include "fs/cli.h"
#include "fs/mounts.h"
#include "cache/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CKPTFS_FSTYPE "fuse.ckptfs"

void cli_put_path(FILE *f, const char *s)
{
	const char *p = s, *end = s + strlen(s);

	while (p < end) {
		unsigned char c = (unsigned char)*p;
		size_t k = utf8_valid_len(p, (size_t)(end - p));
		if (c == '\\')
			fputs("\\\\", f);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c == '\t')
			fputs("\\t", f);
		else if (c == '\r')
			fputs("\\r", f);
		else if (!k || c < 0x20 || c == 0x7f)
			fprintf(f, "\\x%02x", c);
		else {
			fwrite(p, 1, k, f);
			p += k;
			continue;
		}
		p++;
	}
}

int cli_mount(const char *prog, const char *path, char *mnt, size_t mlen, char *backend,
	      size_t blen)
{
	char real[PATH_MAX];
	struct mountent *m;
	int n, i;

	if (!realpath(path, real)) {
		fprintf(stderr, "%s: '%s': %s\n", prog, path, strerror(errno));
		return CLI_USAGE;
	}
	if ((n = mounts_read(&m)) < 0) {
		fprintf(stderr, "%s: cannot read /proc/self/mountinfo: %s\n", prog, strerror(-n));
		return 1;
	}
	i = mounts_find(m, n, real);
	if (i < 0 || strcmp(m[i].fstype, CKPTFS_FSTYPE) != 0) {
		fprintf(stderr, "%s: '%s' is not a ckptfs mount\n", prog, path);
		mounts_free(m, n);
		return CLI_USAGE;
	}
	snprintf(mnt, mlen, "%s", real);
	if (backend)
		snprintf(backend, blen, "%s", m[i].source);
	mounts_free(m, n);
	return 0;
}

int cli_all_mounts(char ***out)
{
	struct mountent *m;
	int n = mounts_read(&m), k = 0;

	*out = NULL;
	for (int i = 0; i < n; i++) {
		if (strcmp(m[i].fstype, CKPTFS_FSTYPE) != 0)
			continue;
		*out = xrealloc(*out, (size_t)(k + 1) * sizeof(char *));
		(*out)[k++] = xstrdup(m[i].target);
	}
	if (n >= 0)
		mounts_free(m, n);
	return k;
}

char *cli_read_ctl(const char *prog, const char *mnt, const char *name)
{
	char path[PATH_MAX];
	struct strbuf b = { 0 };
	char chunk[65536];
	int fd;

	snprintf(path, sizeof(path), "%s/.ckptfs/%s", mnt, name);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		fprintf(stderr, "%s: cannot open %s: %s\n", prog, path, strerror(errno));
		return NULL;
	}
	for (;;) {
		ssize_t n = read(fd, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fprintf(stderr, "%s: reading %s: %s\n", prog, path, strerror(errno));
			close(fd);
			sb_free(&b);
			return NULL;
		}
		if (n == 0)
			break;
		sb_printf(&b, "%.*s", (int)n, chunk);
	}
	close(fd);
	return b.s ? b.s : xstrdup("");
}
