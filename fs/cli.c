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

static const char *skip_ws(const char *p)
{
	while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
		p++;
	return p;
}

/* A JSON string at p (after the quote); returns the end quote or NULL. */
static const char *json_string(const char *p, struct strbuf *out)
{
	for (; *p && *p != '"'; p++) {
		if (*p != '\\') {
			sb_printf(out, "%c", *p);
			continue;
		}
		p++;
		switch (*p) {
		case 'n': sb_printf(out, "\n"); break;
		case 't': sb_printf(out, "\t"); break;
		case 'u': {
			unsigned v = 0;
			if (sscanf(p + 1, "%4x", &v) != 1)
				return NULL;
			sb_printf(out, "%c", v < 0x80 ? (char)v : '?');
			p += 4;
			break;
		}
		case '\0': return NULL;
		default: sb_printf(out, "%c", *p);
		}
	}
	return *p == '"' ? p : NULL;
}

bool jobj_parse(const char *text, struct jobj *o)
{
	const char *p = skip_ws(text);

	memset(o, 0, sizeof(*o));
	if (*p++ != '{')
		return false;
	for (;;) {
		struct strbuf k = { 0 }, v = { 0 };
		bool str = false;
		p = skip_ws(p);
		if (*p == '}')
			return true;
		if (*p++ != '"' || !(p = json_string(p, &k)))
			goto bad;
		p = skip_ws(p + 1);
		if (*p++ != ':')
			goto bad;
		p = skip_ws(p);
		if (*p == '"') {
			if (!(p = json_string(p + 1, &v)))
				goto bad;
			p++;
			str = true;
		} else {
			const char *s = p;
			while (*p && *p != ',' && *p != '}' && *p != ' ' && *p != '\n')
				p++;
			sb_printf(&v, "%.*s", (int)(p - s), s);
		}
		o->keys = xrealloc(o->keys, (size_t)(o->n + 1) * sizeof(char *));
		o->vals = xrealloc(o->vals, (size_t)(o->n + 1) * sizeof(char *));
		o->is_str = xrealloc(o->is_str, (size_t)(o->n + 1) * sizeof(bool));
		o->keys[o->n] = k.s ? k.s : xstrdup("");
		o->vals[o->n] = v.s ? v.s : xstrdup("");
		o->is_str[o->n] = str;
		o->n++;
		p = skip_ws(p);
		if (*p == ',') {
			p++;
			continue;
		}
		if (*p == '}')
			return true;
		return false;
bad:
		sb_free(&k);
		sb_free(&v);
		return false;
	}
}

void jobj_free(struct jobj *o)
{
	for (int i = 0; i < o->n; i++) {
		free(o->keys[i]);
		free(o->vals[i]);
	}
	free(o->keys);
	free(o->vals);
	free(o->is_str);
	memset(o, 0, sizeof(*o));
}

const char *jobj_get(const struct jobj *o, const char *key)
{
	for (int i = 0; i < o->n; i++)
		if (strcmp(o->keys[i], key) == 0)
			return o->vals[i];
	return NULL;
}

double jobj_num(const struct jobj *o, const char *key)
{
	const char *v = jobj_get(o, key);
	return v ? strtod(v, NULL) : 0;
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
