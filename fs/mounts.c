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
		v[n].options = xmalloc(strlen(fields[5]) + (sep + 3 < k ? strlen(fields[sep + 3]) : 0) + 2);
		sprintf(v[n].options, "%s,%s", fields[5], sep + 3 < k ? fields[sep + 3] : "");
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
		free(m[i].options);
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

/* Is word one of options' comma-separated entries (the whole entry)? */
static bool has_option(const char *options, const char *word)
{
	size_t n = strlen(word);

	for (const char *p = options; p; p = strchr(p, ',')) {
		p += *p == ',';
		if (!strncmp(p, word, n) && (p[n] == ',' || p[n] == '\0'))
			return true;
	}
	return false;
}

bool mounts_flock_global(const char *fstype, const char *options, char *why, size_t len)
{
	static const char *const one_host[] = {	/* this host is every client there is */
		"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "f2fs", "zfs", "bcachefs", "jfs",
		"reiserfs", "ramfs", "overlay",
	};
	static const char *const cluster[] = {	/* their flock goes through the cluster */
		"fuse.glusterfs", "glusterfs", "gpfs", "ceph", "gfs2", "ocfs2",
	};

	for (size_t i = 0; i < CKPT_ARRAY_LEN(one_host); i++)
		if (!strcmp(fstype, one_host[i]))
			return true;
	for (size_t i = 0; i < CKPT_ARRAY_LEN(cluster); i++)
		if (!strcmp(fstype, cluster[i]))
			return true;
	if (!strcmp(fstype, "nfs") || !strcmp(fstype, "nfs4")) {
		const char *local = has_option(options, "nolock") ? "nolock"
				  : has_option(options, "local_lock=flock") ? "local_lock=flock"
				  : has_option(options, "local_lock=all") ? "local_lock=all" : NULL;
		if (!local)
			return true;
		snprintf(why, len, "%s mounted with %s: its flock is local to each client", fstype, local);
		return false;
	}
	if (!strcmp(fstype, "lustre")) {
		if (has_option(options, "flock"))
			return true;
		snprintf(why, len, "lustre mounted %s: its flock is local to each client, or missing",
			 has_option(options, "localflock") ? "with localflock" : "without flock");
		return false;
	}
	snprintf(why, len, "%s: its flock is not known to reach other clients", fstype);
	return false;
}

bool mounts_flock_global_at(const char *path, char *why, size_t len)
{
	struct mountent *m;
	int n = mounts_read(&m), i;
	bool global = false;

	if (n < 0) {
		snprintf(why, len, "cannot read /proc/self/mountinfo: %s", strerror(-n));
		return false;
	}
	if ((i = mounts_containing(m, n, path)) >= 0)
		global = mounts_flock_global(m[i].fstype, m[i].options, why, len);
	else
		snprintf(why, len, "no mount holds it in /proc/self/mountinfo");
	mounts_free(m, n);
	return global;
}
