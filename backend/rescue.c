/*
 * rescue.c — what happens to data the backend would not take, and the
 * directory it goes to.
 *
 * When the daemon must exit while operations are still unpublished (the
 * backend refuses, and the drain at unmount gave up), backend_rescue()
 * writes every queued file version, whole, under
 * RESCUE_DIR/<host>-<mount id>/files/<backend path> — or, where that name
 * is taken (an earlier version of the same path, renamed away later; a
 * file where this path needs a directory), under versions/<seq>/<backend
 * path>; each version's line says which ("file") — and every queued
 * operation (versions with their XXH3-128, and the namespace changes that
 * were to follow) to RESCUE_DIR/<host>-<mount id>/manifest.jsonl, in
 * sequence order, so an administrator can finish the job by hand.  Each
 * rescued operation is also noted in the backend's manifest when possible.
 * Files still open for writing at exit are never published (contract item
 * 4); what was written to them goes to RESCUE_DIR/<host>-<mount id>/partial/
 * <mount path>, listed in the manifest as "partial".  Nothing is dropped
 * silently: the daemon logs where the data went (and exits non-zero if
 * anything closed could not be persisted).
 *
 * The daemon runs as root and the default RESCUE_DIR lies in a world-writable
 * directory, so (invariants):
 *  R1  RESCUE_DIR is reached from "/" one component at a time, never through
 *      a symlink; every ancestor is a directory owned by root or the daemon's
 *      user that no one else may rename entries in (not group/other-writable,
 *      or sticky); RESCUE_DIR itself is owned by the daemon's user and
 *      writable by no one else.  It is created 0700 if missing.  The walk is
 *      safepath's (safepath_open_private), each directory judged as opened.
 *      The mount checks this (backend_rescue_dir_check) and refuses to start
 *      otherwise; the rescue checks it again.
 *  R2  The per-mount directory is created fresh (mkdirat 0700; one that
 *      exists is refused, never reused) and everything inside it by
 *      mkdirat/openat relative to directory fds, O_NOFOLLOW, files 0600
 *      O_CREAT|O_EXCL: no path string is ever resolved.
 *  R3  The rescue directory is not on the backend: it uses bsys_direct, the
 *      same confined calls without the fault wrappers, so faults injected
 *      into the backend do not reach it.
 *  R4  What is saved survives a power cut: each directory made is synced
 *      into its parent (the per-mount one into RESCUE_DIR); each file is
 *      synced and then its name; a file whose syncs failed is "saved":
 *      false; a failed sync of a directory, or a failed write or sync of
 *      manifest.jsonl, fails the rescue (-errno) after it has saved all it
 *      can: a copy not known durable is better than none.  A directory
 *      fsync refused (EINVAL) syncs its file system.
 */
#include "backend/backend.h"
#include "backend/bsys.h"
#include "backend/safepath.h"
#include "cache/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int flush_copy_version(struct cver *v, int fd, XXH128_hash_t *digest);

#define D bsys_direct

int backend_rescue_dir_check(const char *dir, char *why, size_t wlen)
{
	int fd = safepath_open_private(dir, why, wlen);

	if (fd < 0)
		return fd;
	D.close(fd);
	return 0;
}

/* fsync a directory; where that is refused (EINVAL), its file system. */
static int dir_sync(int fd)
{
	int r = D.fsync(fd);

	if (r == -EINVAL)
		r = syncfs(fd) == 0 ? 0 : -errno;
	return r;
}

/* The first sync error of a rescue (R4): what it saved may not survive a power cut. */
static _Thread_local int sync_err;

static void note_err(int r)
{
	if (r < 0 && !sync_err)
		sync_err = r;
}

/*
 * A new directory `name` in dirfd, or an existing one (may_exist): its fd.
 * One made is synced into dirfd at once (what is saved below must survive
 * a power cut with it); if that fails it is used all the same and the
 * rescue says so: a copy not known durable is better than none.
 */
static int subdir(int dirfd, const char *name, bool may_exist)
{
	int r = D.mkdirat(dirfd, name, 0700);

	if (r == 0)
		note_err(dir_sync(dirfd));
	if (r < 0 && !(r == -EEXIST && may_exist))
		return r;
	return D.openat(dirfd, name, O_RDONLY | O_DIRECTORY, 0);
}

/*
 * Create `path` (components separated by '/') below the directory `base`,
 * with its directories, as a new file: its fd (R2), and in *dirfd the
 * directory that holds it (base, or one to close).  A name taken (EEXIST,
 * ENOTDIR) is never replaced: it holds another version rescued.
 */
static int rescue_file_create(int base, const char *path, int *dirfd)
{
	char *dup = xstrdup(path), *p = dup, *slash;
	int fd = -ENOENT;

	*dirfd = base;
	while ((slash = strchr(p, '/'))) {
		*slash = '\0';
		int sub = *p ? subdir(*dirfd, p, true) : *dirfd;
		if (*dirfd != base && sub != *dirfd)
			D.close(*dirfd);
		if (sub < 0) {
			*dirfd = base;
			free(dup);
			return sub;
		}
		*dirfd = sub;
		p = slash + 1;
	}
	fd = D.openat(*dirfd, p, O_WRONLY | O_CREAT | O_EXCL, 0600);
	if (fd < 0 && *dirfd != base) {
		D.close(*dirfd);
		*dirfd = base;
	}
	free(dup);
	return fd;
}

/*
 * Write v into fd, sync it and then its name in dirfd, close fd: 0 or
 * -errno (saved only if both syncs succeeded); its digest in *h.
 */
static int rescue_write(int fd, int dirfd, struct cver *v, XXH128_hash_t *h)
{
	int r = flush_copy_version(v, fd, h), s = D.fsync(fd);

	if (r == 0 && s == 0)
		s = dir_sync(dirfd);
	D.close(fd);
	return r ? r : s;
}

/*
 * Save one version's contents as `path` below `files` (its name relative to
 * the rescue directory in `as`, under `files_name`), or where that name is
 * taken and `versions` is given, as <seq>/<path> below *versions (made in
 * base on first use): 0 or -errno; its digest in hex.
 */
static int rescue_version(int base, int files, const char *files_name, int *versions,
			  uint64_t seq, const char *path, struct cver *v, char hex[33], char *as,
			  size_t aslen)
{
	XXH128_hash_t h = { 0 };
	int in = files, top = files, fd = rescue_file_create(files, path, &in), r = fd;

	snprintf(as, aslen, "%s/%s", files_name, path);
	if ((fd == -EEXIST || fd == -ENOTDIR) && versions) {
		char alt[4200];
		if (*versions < 0)
			*versions = subdir(base, "versions", false);
		snprintf(alt, sizeof(alt), "%llu/%s", (unsigned long long)seq, path);
		snprintf(as, aslen, "versions/%s", alt);
		top = *versions;
		r = fd = *versions < 0 ? *versions : rescue_file_create(*versions, alt, &in);
	}
	if (fd >= 0) {
		r = rescue_write(fd, in, v, &h);
		if (in != top)
			D.close(in);
	}
	hash_hex(h, hex);
	if (r < 0)
		log_err("rescue: could not save %s: %s", as, strerror(-r));
	return r;
}

/* Where the queued operations put directories, in sequence order (not on the backend yet). */
struct planned {
	struct { struct bnode *node; char *path; } *v;
	size_t n;
};

/*
 * The backend path of `name` in `dir`: where an earlier queued operation
 * puts dir (a directory made, or renamed, by the operations being
 * rescued), or else where the backend has it.  0, or -1.
 */
static int rescue_path(struct backend *be, const struct planned *pl, struct bnode *dir,
		       const char *name, char *out, size_t len)
{
	if (!dir || !name)
		return -1;
	for (size_t i = pl->n; i-- > 0;)	/* made or moved by the queue: there, then */
		if (pl->v[i].node == dir)
			return snprintf(out, len, "%s/%s", pl->v[i].path, name) < (int)len ? 0 : -1;
	return bnode_path(be, dir, name, out, len) == 0 ? 0 : -1;
}

static void planned_add(struct planned *pl, struct bnode *node, const char *path)
{
	pl->v = xrealloc(pl->v, (pl->n + 1) * sizeof(*pl->v));
	pl->v[pl->n].node = node;
	pl->v[pl->n++].path = xstrdup(path);
}

long backend_rescue(struct backend *be, const char *dir, const struct rescue_item *partial,
		    unsigned npartial, char *where, size_t wlen)
{
	struct planned pl = { 0 };
	char host[256] = "localhost", name[300], why[512];
	int top, base, files, mf, pfiles = -1, versions = -1;
	long saved = 0;

	sync_err = 0;
	gethostname(host, sizeof(host) - 1);
	for (char *c = host; *c; c++)
		if (*c == '/')
			*c = '_';
	snprintf(name, sizeof(name), "%s-%s", host, be->mount_id);
	snprintf(where, wlen, "%s/%s", dir, name);
	if ((top = safepath_open_private(dir, why, sizeof(why))) < 0) {
		log_err("rescue directory: %s", why);
		return top;
	}
	base = subdir(top, name, false);	/* fresh (R2): never one that exists */
	D.close(top);
	if (base < 0)
		return base;
	files = subdir(base, "files", false);
	mf = D.openat(base, "manifest.jsonl", O_WRONLY | O_CREAT | O_EXCL, 0600);
	if (files < 0 || mf < 0) {
		int e = files < 0 ? files : mf;
		if (files >= 0)
			D.close(files);
		if (mf >= 0)
			D.close(mf);
		D.close(base);
		return e;
	}
	for (struct list *e = be->ops.next; e != &be->ops; e = e->next) {
		struct op *op = list_entry(e, struct op, link);
		struct strbuf b = { 0 };
		char path[4096], to[4096] = "";

		if (rescue_path(be, &pl, op->dir, op->name, path, sizeof(path)) == 0)
			;
		else if (op->path_hint && op->path_hint[0])	/* where the mount had it */
			snprintf(path, sizeof(path), "%s", op->path_hint);
		else if (op->name)
			snprintf(path, sizeof(path), "unplaced/%llu-%s", (unsigned long long)op->seq, op->name);
		else
			snprintf(path, sizeof(path), "unplaced/%llu", (unsigned long long)op->seq);
		if (op->dir2 && rescue_path(be, &pl, op->dir2, op->name2, to, sizeof(to)) < 0)
			snprintf(to, sizeof(to), "unplaced/%llu-%s", (unsigned long long)op->seq,
				 op->name2);
		if (op->kind == OP_MKDIR && op->node)
			planned_add(&pl, op->node, path);
		else if (op->kind == OP_RENAME && op->node && op->node->is_dir && op->dir2)
			planned_add(&pl, op->node, to);
		sb_printf(&b, "{\"seq\": %llu, \"op\": \"%s\", ", (unsigned long long)op->seq,
			  op_record_type(op->kind));
		sb_json_paths(&b, path, to);
		if (op->kind == OP_VERSION) {
			char hex[33], as[4300];
			int r = rescue_version(base, files, "files", &versions, op->seq, path, op->ver,
					       hex, as, sizeof(as));
			sb_printf(&b, ", \"size\": %llu, \"mode\": %u, \"xxh3\": \"%s\", \"saved\": %s",
				  (unsigned long long)op->ver->size, (unsigned)op->mode, hex,
				  r == 0 ? "true" : "false");
			sb_printf(&b, ", \"file\": ");
			sb_json_str(&b, as);
		} else if (op->kind == OP_SYMLINK) {
			sb_printf(&b, ", \"target\": ");
			sb_json_str(&b, op->target);
		} else if (op->kind == OP_MKDIR || op->kind == OP_MKNOD) {
			sb_printf(&b, ", \"mode\": %u", (unsigned)op->mode);
			if (op->rdev)
				sb_printf(&b, ", \"rdev\": %llu", (unsigned long long)op->rdev);
		}
		sb_printf(&b, "}\n");
		note_err(write_full(mf, b.s, b.len));
		sb_free(&b);
		saved++;
	}
	for (unsigned i = 0; i < npartial; i++) {
		struct strbuf b = { 0 };
		char hex[33], as[4300];
		int r = pfiles >= 0 ? 0 : (pfiles = subdir(base, "partial", false));
		if (r >= 0)
			r = rescue_version(base, pfiles, "partial", NULL, 0, partial[i].path,
					   partial[i].ver, hex, as, sizeof(as));
		else
			hash_hex((XXH128_hash_t){ 0 }, hex);
		sb_printf(&b, "{\"seq\": 0, \"op\": \"partial\", \"path\": ");
		sb_json_str(&b, partial[i].path);
		sb_printf(&b, ", \"size\": %llu, \"xxh3\": \"%s\", \"saved\": %s, \"note\": "
			  "\"open for writing at exit: what was written so far, never closed\"}\n",
			  (unsigned long long)partial[i].ver->size, hex, r == 0 ? "true" : "false");
		note_err(write_full(mf, b.s, b.len));
		sb_free(&b);
		saved++;
	}
	/* Each file was synced with its name; what holds them and the list last, each tried. */
	if (pfiles >= 0) {
		note_err(dir_sync(pfiles));
		D.close(pfiles);
	}
	note_err(D.fsync(mf));
	D.close(mf);
	note_err(dir_sync(files));
	D.close(files);
	if (versions >= 0) {
		note_err(dir_sync(versions));
		D.close(versions);
	}
	note_err(dir_sync(base));
	D.close(base);
	int synced = sync_err;
	for (size_t i = 0; i < pl.n; i++)
		free(pl.v[i].path);
	free(pl.v);
	struct strbuf rec = { 0 };
	sb_printf(&rec, "{\"t\": \"rescued\", \"m\": \"%s\", \"count\": %ld, \"synced\": %s, "
		  "\"where\": ", be->mount_id, saved, synced < 0 ? "false" : "true");
	sb_json_str(&rec, where);
	sb_printf(&rec, "}");
	if (!backend_threads_stuck(be))	/* else the backend hangs: the rescue's own manifest says it */
		(void)manifest_append(&be->man, rec.s, rec.len);
	sb_free(&rec);
	return synced < 0 ? synced : saved;	/* not synced: not saved */
}
