/*
 * mounts.c — /proc/self/mountinfo parsing (see mounts.h).
 */
#include "fs/mounts.h"
#include "cache/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Decode mountinfo's octal escapes (\040 for space) in place. */
static void unescape(char *s)
{
	char *w = s;
	for (char *r = s; *r; r++) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '7' && r[2] && r[3]) {
			*w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
			r += 3;
		} else {
			*w++ = *r;
		}
	}
	*w = '\0';
}

int mounts_read(struct mountent **out)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[8192];
	struct mountent *v = NULL;
	int n = 0;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char *fields[16], *save = NULL, *tok;
		int k = 0, sep = -1;
		line[strcspn(line, "\n")] = '\0';
		for (tok = strtok_r(line, " ", &save); tok && k < 16; tok = strtok_r(NULL, " ", &save)) {
			if (sep < 0 && !strcmp(tok, "-"))
				sep = k;
			fields[k++] = tok;
		}
		if (k < 5 || sep < 0 || sep + 2 >= k)
			continue;
		unescape(fields[4]);
		unescape(fields[sep + 2]);
		v = xrealloc(v, (size_t)(n + 1) * sizeof(*v));
		v[n].target = xstrdup(fields[4]);
		v[n].fstype = xstrdup(fields[sep + 1]);
		v[n].source = xstrdup(fields[sep + 2]);
		n++;
	}
	fclose(f);
	*out = v;
	return n;
}

void mounts_free(struct mountent *m, int n)
{
	for (int i = 0; i < n; i++) {
		free(m[i].target);
		free(m[i].fstype);
		free(m[i].source);
	}
	free(m);
}

int mounts_find(const struct mountent *m, int n, const char *path)
{
	int found = -1;
	for (int i = 0; i < n; i++)
		if (strcmp(m[i].target, path) == 0)
			found = i;
	return found;
}

int mounts_containing(const struct mountent *m, int n, const char *path)
{
	int best = -1;
	size_t best_len = 0;

	for (int i = 0; i < n; i++) {
		size_t len = strlen(m[i].target);
		bool root = strcmp(m[i].target, "/") == 0;
		if ((root || (strncmp(path, m[i].target, len) == 0 &&
			      (path[len] == '/' || path[len] == '\0'))) &&
		    (best < 0 || len >= best_len)) {
			best = i;
			best_len = len;
		}
	}
	return best;
}
