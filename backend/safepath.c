/*
 * safepath.c — the command line's paths, resolved as a root daemon may
 * trust them (safepath.h).  Every lookup goes through bsys_direct, one
 * component at a time below a directory fd, never following a symlink by
 * itself: a symlink is read (readlinkat) and followed here, only if root
 * owns it.  The rescue directory takes the same walk under stricter rules
 * (WALK_PRIVATE: safepath_open_private).
 */
#include "backend/safepath.h"
#include "backend/bsys.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define D bsys_direct
#define LINKS_MAX 40	/* as the kernel's MAXSYMLINKS */

const char *safepath_dir_problem(const struct stat *st)
{
	if (!S_ISDIR(st->st_mode))
		return "is not a directory";
	if (st->st_uid != 0 && st->st_uid != geteuid())
		return "is owned by another user, who could replace what lies below it";
	if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX))
		return "is writable by others without the sticky bit";
	return NULL;
}

/*
 * The walk's own flag beside safepath_resolve's: the rescue directory's
 * rules (safepath_open_private).  "/" and every directory opened on the way
 * must pass safepath_dir_problem, the last one private_problem; no symlink
 * is followed, root's neither; '.' and '..' are refused; a missing last
 * component is made 0700.
 */
#define WALK_PRIVATE 0x100

/* Why the rescue directory itself may not be used, or NULL: it must be the daemon user's alone. */
static const char *private_problem(const struct stat *st)
{
	if (!S_ISDIR(st->st_mode))
		return "is not a directory";
	if (st->st_uid != geteuid())
		return "is not owned by the daemon's user";
	if (st->st_mode & (S_IWGRP | S_IWOTH))
		return "is writable by its group or others";
	return NULL;
}

/* The walk: a directory fd, its canonical path and what it is. */
struct walk {
	int fd;
	char path[PATH_MAX];
	struct stat st;
	unsigned flags;		/* SAFEPATH_*, WALK_PRIVATE */
	char *why;
	size_t wlen;
};

/* (Re)start the walk at the directory `path`, already judged (or "/"). */
static int walk_at(struct walk *w, const char *path)
{
	int fd = bsys_open_dir_path(path), r;

	if (fd < 0) {
		snprintf(w->why, w->wlen, "%s: %s", path, strerror(-fd));
		return fd;
	}
	if ((r = D.fstatat(fd, "", &w->st)) < 0) {
		D.close(fd);
		snprintf(w->why, w->wlen, "%s: %s", path, strerror(-r));
		return r;
	}
	if (w->fd >= 0)
		D.close(w->fd);
	w->fd = fd;
	snprintf(w->path, sizeof(w->path), "%s", path);
	return 0;
}

/* w->path joined with name, for messages and the next step: 0, or -ENAMETOOLONG said in why. */
static int join(struct walk *w, const char *name, char out[PATH_MAX])
{
	int n = snprintf(out, PATH_MAX, "%s%s%s", w->path, strcmp(w->path, "/") ? "/" : "", name);

	if (n < 0 || n >= PATH_MAX) {
		snprintf(w->why, w->wlen, "%s/%s: %s", w->path, name, strerror(ENAMETOOLONG));
		return -ENAMETOOLONG;
	}
	return 0;
}

/* WALK_PRIVATE: may the directory w opened (the last of the path, or one on the way) be used? */
static int judge_private(struct walk *w, bool last)
{
	const char *p = last ? private_problem(&w->st) : safepath_dir_problem(&w->st);

	if (p) {
		snprintf(w->why, w->wlen, "%s %s", w->path, p);
		return -EPERM;
	}
	return 0;
}

/*
 * May the mount point's path go from the directory w to its entry e (st)?
 * 0, or -EPERM with the reason: another user could change what the name
 * resolves to before mount(2) resolves it again.
 */
static int unchangeable(struct walk *w, const char *name, const struct stat *st)
{
	const char *p = safepath_dir_problem(&w->st);

	if (p) {
		snprintf(w->why, w->wlen, "%s %s", w->path, p);
		return -EPERM;
	}
	if ((w->st.st_mode & (S_IWGRP | S_IWOTH)) && st->st_uid != 0 && st->st_uid != geteuid()) {
		char full[PATH_MAX];
		if (join(w, name, full) < 0)
			return -ENAMETOOLONG;
		snprintf(w->why, w->wlen, "%s is owned by uid %u in a directory others may write "
			 "(sticky): its owner could replace it", full, (unsigned)st->st_uid);
		return -EPERM;
	}
	return 0;
}

/* Splice a symlink's target in front of what is left of the path. */
static int splice_link(char *rest, size_t cap, const char *target, const char *left)
{
	char *tmp = malloc(cap);
	int n;

	if (!tmp)
		return -ENOMEM;
	n = snprintf(tmp, cap, "%s/%s", target, left);
	if (n < 0 || (size_t)n >= cap) {
		free(tmp);
		return -ENAMETOOLONG;
	}
	memcpy(rest, tmp, (size_t)n + 1);
	free(tmp);
	return 0;
}

/*
 * One step of the walk: the entry `name` of w (`last`: nothing follows it).
 * 1 when a symlink was spliced into rest.
 */
static int step(struct walk *w, const char *name, bool last, char *rest, size_t cap,
		const char *left, unsigned *links)
{
	char full[PATH_MAX], target[PATH_MAX];
	struct stat st;
	ssize_t n;
	int r, sub;

	if ((r = join(w, name, full)) < 0)
		return r;
	r = D.fstatat(w->fd, name, &st);
	if (r == -ENOENT && last && (w->flags & WALK_PRIVATE)) {
		if ((r = D.mkdirat(w->fd, name, 0700)) == -EEXIST)
			r = 0;
		if (r == 0)
			r = D.fstatat(w->fd, name, &st);
	}
	if (r < 0) {
		snprintf(w->why, w->wlen, "%s: %s", full, strerror(-r));
		return r;
	}
	if ((w->flags & SAFEPATH_UNCHANGEABLE) && (r = unchangeable(w, name, &st)) < 0)
		return r;
	if (S_ISLNK(st.st_mode)) {
		if (w->flags & WALK_PRIVATE) {
			snprintf(w->why, w->wlen, "%s is a symlink; give the real path", full);
			return -ELOOP;
		}
		if (st.st_uid != 0) {
			snprintf(w->why, w->wlen, "%s is a symlink owned by uid %u: as root, ckptfs "
				 "follows only root's symlinks (give the path it points to, if that "
				 "is meant)", full, (unsigned)st.st_uid);
			return -ELOOP;
		}
		if (++*links > LINKS_MAX) {
			snprintf(w->why, w->wlen, "%s: %s", full, strerror(ELOOP));
			return -ELOOP;
		}
		n = D.readlinkat(w->fd, name, target, sizeof(target) - 1);
		if (n <= 0) {
			snprintf(w->why, w->wlen, "%s: %s", full, strerror(n < 0 ? (int)-n : ENOENT));
			return n < 0 ? (int)n : -ENOENT;
		}
		target[n] = '\0';
		if ((r = splice_link(rest, cap, target, left)) < 0) {
			snprintf(w->why, w->wlen, "%s: %s", full, strerror(-r));
			return r;
		}
		if (target[0] == '/' && (r = walk_at(w, "/")) < 0)
			return r;
		return 1;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(w->why, w->wlen, "%s is not a directory", full);
		return -ENOTDIR;
	}
	if ((sub = D.openat(w->fd, name, O_RDONLY | O_DIRECTORY, 0)) < 0) {
		snprintf(w->why, w->wlen, "%s: %s", full, strerror(-sub));
		return sub;
	}
	D.close(w->fd);
	w->fd = sub;
	snprintf(w->path, sizeof(w->path), "%s", full);
	if ((r = D.fstatat(sub, "", &w->st)) < 0) {	/* judge what was opened */
		snprintf(w->why, w->wlen, "%s: %s", full, strerror(-r));
		return r;
	}
	return (w->flags & WALK_PRIVATE) ? judge_private(w, last) : 0;
}

/* The parent of w's directory ("/" for "/"): its path, judged on the way down already. */
static int step_up(struct walk *w)
{
	char up[PATH_MAX];
	char *slash;

	snprintf(up, sizeof(up), "%s", w->path);
	slash = strrchr(up, '/');
	if (slash == up)
		up[1] = '\0';
	else if (slash)
		*slash = '\0';
	return walk_at(w, up);
}

/*
 * The walk described in safepath.h from "/" to the directory `path` names,
 * under w->flags: 0 with w->fd open on it and w->path its canonical path
 * (the caller closes w->fd, whatever the result), or -errno said in w->why.
 */
static int walk_path(struct walk *w, const char *path)
{
	size_t cap = 2 * PATH_MAX;
	char *rest = malloc(cap), cwd[PATH_MAX];
	unsigned links = 0;
	int r = 0, n;

	if (!rest)
		return -ENOMEM;
	if (path[0] == '/')
		n = snprintf(rest, cap, "%s", path);
	else if (getcwd(cwd, sizeof(cwd)))
		n = snprintf(rest, cap, "%s/%s", cwd, path);
	else
		n = -1;
	if (n < 0 || (size_t)n >= cap) {
		snprintf(w->why, w->wlen, "%s: %s", path, strerror(ENAMETOOLONG));
		free(rest);
		return -ENAMETOOLONG;
	}
	r = walk_at(w, "/");
	if (r >= 0 && (w->flags & WALK_PRIVATE))
		r = judge_private(w, false);
	for (char *p = rest; r >= 0 && *p;) {
		char name[NAME_MAX + 1];
		size_t k;

		while (*p == '/')
			p++;
		k = strcspn(p, "/");
		if (k == 0)
			break;
		if (k > NAME_MAX) {
			snprintf(w->why, w->wlen, "%s%s%.*s: %s", w->path, strcmp(w->path, "/") ? "/" : "",
				 (int)k, p, strerror(ENAMETOOLONG));
			r = -ENAMETOOLONG;
			break;
		}
		memcpy(name, p, k);
		name[k] = '\0';
		p += k;
		if ((w->flags & WALK_PRIVATE) && (!strcmp(name, ".") || !strcmp(name, ".."))) {
			snprintf(w->why, w->wlen, "%s must not contain '.' or '..'", path);
			r = -EINVAL;
			break;
		}
		if (!strcmp(name, "."))
			continue;
		if (!strcmp(name, "..")) {
			r = step_up(w);
			continue;
		}
		r = step(w, name, p[strspn(p, "/")] == '\0', rest, cap, p, &links);
		if (r == 1) {	/* the target now leads what is left */
			p = rest;
			r = 0;
		}
	}
	free(rest);
	return r;
}

/* As root: the walk described in safepath.h. */
static int resolve_as_root(const char *path, unsigned flags, char *out, size_t len, char *why,
			   size_t wlen)
{
	struct walk w = { .fd = -1, .flags = flags & SAFEPATH_UNCHANGEABLE, .why = why, .wlen = wlen };
	int r = walk_path(&w, path);

	if (r >= 0 && snprintf(out, len, "%s", w.path) >= (int)len) {
		snprintf(why, wlen, "%s: %s", w.path, strerror(ENAMETOOLONG));
		r = -ENAMETOOLONG;
	}
	if (w.fd >= 0)
		D.close(w.fd);
	return r;
}

int safepath_resolve(const char *path, unsigned flags, char *out, size_t len, char *why,
		     size_t wlen)
{
	char buf[PATH_MAX];

	if (!*path) {
		snprintf(why, wlen, "an empty path");
		return -EINVAL;
	}
	if (geteuid() == 0)
		return resolve_as_root(path, flags, out, len, why, wlen);
	if (!realpath(path, buf)) {
		int e = errno;
		snprintf(why, wlen, "%s: %s", path, strerror(e));
		return -e;
	}
	if (snprintf(out, len, "%s", buf) >= (int)len) {
		snprintf(why, wlen, "%s: %s", buf, strerror(ENAMETOOLONG));
		return -ENAMETOOLONG;
	}
	return 0;
}

int safepath_open_private(const char *path, char *why, size_t wlen)
{
	struct walk w = { .fd = -1, .flags = WALK_PRIVATE, .why = why, .wlen = wlen };
	int r;

	if (path[0] != '/') {
		snprintf(why, wlen, "%s is not an absolute path", path);
		return -EINVAL;
	}
	if ((r = walk_path(&w, path)) < 0) {
		if (w.fd >= 0)
			D.close(w.fd);
		return r;
	}
	return w.fd;
}
