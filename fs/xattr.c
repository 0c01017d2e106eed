/*
 * xattr.c — extended attributes.  A node's xattrs are read from the backend
 * on first use and kept in memory (node->alock); changes are applied there
 * and queued as operations, so they reach the backend in order like any
 * other change, and each file version carries the set it was sealed with.
 *
 * Two read-only keys are ckptfs's own, on every regular file:
 *   user.ckptfs.state  dirty | flushing | durable
 *   user.ckptfs.xxh3   the digest of the published contents (32 hex digits,
 *                      as in the manifest and `ckptfs-ctl hash`: the
 *                      block-run XXH3-128 of backend/digest.h), once durable
 */
#include "fs/bcall.h"
#include "fs/fs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#define XATTR_STATE "user.ckptfs.state"
#define XATTR_XXH3 "user.ckptfs.xxh3"
#define XATTR_OWN_PREFIX "user.ckptfs."

void xattrs_free(struct fsnode *n)
{
	for (uint32_t i = 0; i < n->nxattrs; i++) {
		free(n->xattrs[i].key);
		free(n->xattrs[i].val);
	}
	free(n->xattrs);
	n->xattrs = NULL;
	n->nxattrs = 0;
}

static struct xattr *xattr_find(struct fsnode *n, const char *key)
{
	for (uint32_t i = 0; i < n->nxattrs; i++)
		if (strcmp(n->xattrs[i].key, key) == 0)
			return &n->xattrs[i];
	return NULL;
}

static void xattr_put(struct fsnode *n, const char *key, const void *val, size_t len)
{
	struct xattr *x = xattr_find(n, key);

	if (!x) {
		n->xattrs = xrealloc(n->xattrs, (n->nxattrs + 1) * sizeof(*n->xattrs));
		x = &n->xattrs[n->nxattrs++];
		x->key = xstrdup(key);
		x->val = NULL;
	}
	free(x->val);
	x->val = xmalloc(len);
	memcpy(x->val, val, len);
	x->len = len;
}

static int xattr_del(struct fsnode *n, const char *key)
{
	struct xattr *x = xattr_find(n, key);

	if (!x)
		return -ENODATA;
	free(x->key);
	free(x->val);
	*x = n->xattrs[--n->nxattrs];
	return 0;
}

static int xattr_take(void *arg, const char *key, const void *val, size_t len)
{
	xattr_put(arg, key, val, len);
	return 0;
}

/*
 * Read the xattrs of the object at (dfd, name) into n, a private holder:
 * all of them, or an error (a set read in part would be published as the
 * whole, dropping the rest from the file's next version).
 */
static int xattrs_read(void *arg, int dfd, const char *name)
{
	struct fsnode *n = arg;
	int r = bsys_xattrs_each(dfd, name, S_ISLNK(n->mode) ? BSYS_LINK : 0, xattr_take, n);

	return r < 0 && r != -ENOTSUP && r != -EOPNOTSUPP ? r : 0;
}

struct xattr_call {
	struct bcall c;
	struct ckptfs *fs;
	struct bnode *b;
	struct fsnode tmp;	/* the private holder */
};

static int xattr_call_run(struct bcall *c)
{
	struct xattr_call *x = CKPT_CONTAINER_OF(c, struct xattr_call, c);

	return bnode_at(&x->fs->be, x->b, xattrs_read, &x->tmp);
}

static void xattr_call_drop(struct bcall *c)
{
	struct xattr_call *x = CKPT_CONTAINER_OF(c, struct xattr_call, c);

	xattrs_free(&x->tmp);
	bnode_put(x->b);
	free(x);
}

/*
 * Read the backend's xattrs into memory once, through bsys (a symlink
 * planted where the object was is refused, -ELOOP, never followed), on a
 * helper thread (bcall.h: EIO once drain_timeout passes) with no lock
 * held: stat takes a node's alock under the namespace lock, so a slow
 * backend must never be waited for while holding either.  Two readers may
 * race; the first to finish installs what it read.  0 or -errno.
 */
static int xattrs_ensure(struct ckptfs *fs, struct fsnode *n)
{
	struct xattr_call *x;
	int err, r;

	pthread_mutex_lock(&n->alock);
	bool loaded = n->xattrs_loaded;
	mode_t mode = n->mode;
	pthread_mutex_unlock(&n->alock);
	if (loaded)
		return 0;
	x = xcalloc(1, sizeof(*x));
	x->c = (struct bcall){ .run = xattr_call_run, .drop = xattr_call_drop,
			       .what = "read xattrs" };
	x->fs = fs;
	x->b = bnode_get(n->b);
	x->tmp.mode = mode;
	if ((r = bcall_run(fs, &x->c, &err)) == BCALL_GONE)
		return err;	/* the helper frees x when the call returns */
	if (r == -ENOENT)
		r = 0;	/* not on the backend: nothing to read */
	pthread_mutex_lock(&n->alock);
	if (r == 0 && !n->xattrs_loaded) {
		n->xattrs = x->tmp.xattrs;
		n->nxattrs = x->tmp.nxattrs;
		x->tmp.xattrs = NULL;
		x->tmp.nxattrs = 0;
		n->xattrs_loaded = true;
	}
	pthread_mutex_unlock(&n->alock);
	xattr_call_drop(&x->c);
	return r;
}

bool xattrs_snapshot(struct fsnode *n, void **buf, size_t *len)
{
	size_t total = 0;
	char *p;

	if (!n->xattrs_loaded)
		return false;
	for (uint32_t i = 0; i < n->nxattrs; i++)
		total += 8 + strlen(n->xattrs[i].key) + 1 + n->xattrs[i].len;
	*buf = p = xmalloc(total ? total : 1);
	*len = total;
	for (uint32_t i = 0; i < n->nxattrs; i++) {
		uint32_t kl = (uint32_t)strlen(n->xattrs[i].key) + 1, vl = (uint32_t)n->xattrs[i].len;
		memcpy(p, &kl, 4);
		memcpy(p + 4, n->xattrs[i].key, kl);
		memcpy(p + 4 + kl, &vl, 4);
		memcpy(p + 8 + kl, n->xattrs[i].val, vl);
		p += 8 + kl + vl;
	}
	return true;
}

/* user.ckptfs.* values; -ENODATA if not applicable. */
static int own_xattr(struct ckptfs *fs, struct fsnode *n, const char *key, char *buf, size_t len)
{
	if (!S_ISREG(n->mode) || n->ctl)
		return -ENODATA;
	if (strcmp(key, XATTR_STATE) == 0)
		return snprintf(buf, len, "%s", node_state_name(fs, n));
	if (strcmp(key, XATTR_XXH3) == 0) {
		if (strcmp(node_state_name(fs, n), "durable") != 0 || !atomic_load(&n->b->has_digest))
			return -ENODATA;
		char hex[33];
		hash_hex(n->b->digest, hex);
		return snprintf(buf, len, "%s", hex);
	}
	return -ENODATA;
}

static void reply_value(fuse_req_t req, const void *val, size_t len, size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (len > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, val, len);
}

void fs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *key, size_t size)
{
	struct ckptfs *fs = fuse_req_userdata(req);
	struct fsnode *n = fs_node(fs, ino);
	char own[64];
	int r;

	if (strncmp(key, XATTR_OWN_PREFIX, sizeof(XATTR_OWN_PREFIX) - 1) == 0) {
		pthread_mutex_lock(&fs->ns);
		r = own_xattr(fs, n, key, own, sizeof(own));
		pthread_mutex_unlock(&fs->ns);
		if (r < 0)
			fuse_reply_err(req, -r);
		else
			reply_value(req, own, (size_t)r, size);
		return;
	}
	r = xattrs_ensure(fs, n);
	pthread_mutex_lock(&n->alock);
	struct xattr *x = r == 0 ? xattr_find(n, key) : NULL;
	if (r == 0 && !x)
		r = -ENODATA;
	if (r < 0) {
		pthread_mutex_unlock(&n->alock);
		fuse_reply_err(req, -r);
		return;
	}
	void *copy = xmalloc(x->len ? x->len : 1);
	size_t len = x->len;
	memcpy(copy, x->val, len);
	pthread_mutex_unlock(&n->alock);
	reply_value(req, copy, len, size);
	free(copy);
}

void fs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct ckptfs *fs = fuse_req_userdata(req);
	struct fsnode *n = fs_node(fs, ino);
	char own[64];
	char *buf = NULL;
	size_t len = 0;
	int r;

	r = xattrs_ensure(fs, n);
	pthread_mutex_lock(&n->alock);
	for (uint32_t i = 0; r == 0 && i < n->nxattrs; i++) {
		size_t kl = strlen(n->xattrs[i].key) + 1;
		buf = xrealloc(buf, len + kl);
		memcpy(buf + len, n->xattrs[i].key, kl);
		len += kl;
	}
	pthread_mutex_unlock(&n->alock);
	if (r < 0) {
		free(buf);
		fuse_reply_err(req, -r);
		return;
	}
	static const char *const own_keys[] = { XATTR_STATE, XATTR_XXH3 };
	pthread_mutex_lock(&fs->ns);
	for (size_t i = 0; i < CKPT_ARRAY_LEN(own_keys); i++) {
		if (own_xattr(fs, n, own_keys[i], own, sizeof(own)) < 0)
			continue;
		size_t kl = strlen(own_keys[i]) + 1;
		buf = xrealloc(buf, len + kl);
		memcpy(buf + len, own_keys[i], kl);
		len += kl;
	}
	pthread_mutex_unlock(&fs->ns);
	reply_value(req, buf, len, size);
	free(buf);
}

/* Set (val != NULL) or remove an xattr, in memory and on the backend in order. */
static void xattr_change(fuse_req_t req, fuse_ino_t ino, const char *key, const char *val,
			 size_t len, int flags)
{
	struct ckptfs *fs = fuse_req_userdata(req);
	struct fsnode *n = fs_node(fs, ino);
	int r;

	if (strncmp(key, XATTR_OWN_PREFIX, sizeof(XATTR_OWN_PREFIX) - 1) == 0 || n->ctl) {
		fuse_reply_err(req, EPERM);
		return;
	}
	r = xattrs_ensure(fs, n);
	pthread_mutex_lock(&fs->ns);
	pthread_mutex_lock(&n->alock);
	if (r == 0) {
		struct xattr *x = xattr_find(n, key);
		if (val && (flags & XATTR_CREATE) && x)
			r = -EEXIST;
		else if (val && (flags & XATTR_REPLACE) && !x)
			r = -ENODATA;
		else if (val)
			xattr_put(n, key, val, len);
		else
			r = xattr_del(n, key);
	}
	if (r == 0)
		clock_gettime(CLOCK_REALTIME, &n->ctime);
	uid_t owner = n->uid;
	pthread_mutex_unlock(&n->alock);
	if (r == 0) {
		struct op *op = op_new(val ? OP_SETXATTR : OP_RMXATTR);
		op->node = bnode_get(n->b);
		op->owner = owner;
		op->owner_known = true;
		op->target = xstrdup(key);
		if (val) {
			op->value = xmalloc(len ? len : 1);
			memcpy(op->value, val, len);
			op->value_len = len;
		}
		fs_submit(fs, fuse_req_ctx(req)->uid, op);
	}
	pthread_mutex_unlock(&fs->ns);
	fuse_reply_err(req, -r);
}

void fs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *key, const char *val,
		       size_t len, int flags)
{
	xattr_change(req, ino, key, val, len, flags);
}

void fs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *key)
{
	xattr_change(req, ino, key, NULL, 0, 0);
}

