/*
 * seal.c — when a file's contents become a version, and whose it is.
 *
 * A version is sealed (cfile_seal) and queued for the publisher
 *   - at FLUSH, i.e. close(2), of a handle that wrote or created the file;
 *   - at fsync(2), as of the call (later writes go to copy-on-write chunks);
 *     a file bound to a capture session is none of these: its fsync fails
 *     (EBUSY, ops.c), and it counts as open for writing;
 *   - when truncate(2) changes a file nobody has open for writing (and no
 *     capture session has bound);
 *   - before a rename or link of a file that was never sealed, so every name
 *     the backend gets refers to a published file.
 * Drain, `ctl sync`, unmount and signals seal only files that are *closed*
 * (seal_all_locked): a file still open for writing keeps its previous
 * durable version on the backend, and its unsealed contents are never
 * published under its final name (contract item 4).
 *
 * The version's actor — the uid whose order it joins (backend.h P1) — is
 * the caller that sealed it, or for seal_all_locked the last writer.
 * Everything here runs with fs->ns held and makes no backend system call
 * (the base file is opened before, see node_open_base callers).
 */
#include "fs/fs.h"
#include "fs/session.h"
#include "cache/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static bool node_unsealed(struct fsnode *n)
{
	return S_ISREG(n->mode) && !n->ctl && (n->new_file || (n->cf && cfile_dirty(n->cf)));
}

bool node_needs_seal(struct fsnode *n)
{
	/* A file bound to a GPU session is complete only once unbound (session.c S2). */
	return node_unsealed(n) && !session_node_bound(n);
}

bool node_open_for_writing(struct fsnode *n)
{
	/* A bound file is being written by its captures, whoever has it open. */
	return node_unsealed(n) && (n->writers || session_node_bound(n));
}

int fs_submit(struct ckptfs *fs, uid_t actor, struct op *op)
{
	op->actor = actor;
	return backend_submit(&fs->be, op);
}

int seal_locked(struct ckptfs *fs, struct fsnode *n, uid_t actor)
{
	struct fsdent *d = node_first_dent(n);
	struct cfile *cf = node_cfile(fs, n);
	struct op *op;
	int r;

	if (!d) {		/* unlinked: no name to publish it under */
		n->new_file = false;
		return 0;
	}
	/*
	 * The version keeps ranges of the published file, which must be open.
	 * The publisher may close it again meanwhile (cfile_published, without
	 * fs->ns, when no handle is open): then cfile_seal finds it closed and
	 * makes nothing, and it is opened again.
	 */
	struct cver *ver = NULL;
	uint64_t seq = 0;
	for (int tries = 0; !ver; tries++) {
		if (tries == 8) {
			log_err("sealing a version of %s: its published file keeps being closed",
				d->name);
			r = -EIO;
		} else if (!cfile_base_lazy(cf) || (r = node_open_base(fs, n)) == 0) {
			seq = backend_reserve_seq(&fs->be);	/* the same one again on a retry */
			ver = cfile_seal(cf, seq);
			continue;
		}
		if (seq)
			backend_release_seq(&fs->be);
		return r;
	}
	op = op_new(OP_VERSION);
	op->seq = seq;
	op->ver = ver;
	op->node = bnode_get(n->b);
	op->dir = bnode_get(d->parent->b);
	op->name = xstrdup(d->name);
	char path[4096];
	if (node_path(fs, n, path, sizeof(path)))
		op->path_hint = xstrdup(path);
	pthread_mutex_lock(&n->alock);
	op->mode = n->mode;
	op->uid = n->uid;
	op->gid = n->gid;
	op->atime = n->atime;
	op->mtime = n->mtime;
	op->valid = OPA_MODE | OPA_UID | OPA_GID | OPA_ATIME | OPA_MTIME;
	op->xattr_blob = xattrs_snapshot(n, &op->value, &op->value_len);
	op->copy_xattrs = !op->xattr_blob;
	n->dirty_ns = 0;
	n->sealed_ns = now_ns();
	pthread_mutex_unlock(&n->alock);
	n->ever_sealed = true;
	n->new_file = false;
	n->seal_actor = actor;
	n->seal_seq = op->seq;
	fs_submit(fs, actor, op);	/* whether something holds it back: close asks (ops.c) */
	return 0;
}

uint64_t seal_all_locked(struct ckptfs *fs, struct seal_report *rep)
{
	memset(rep, 0, sizeof(*rep));
	for (struct list *e = fs->all_nodes.next; e != &fs->all_nodes; e = e->next) {
		struct fsnode *n = list_entry(e, struct fsnode, all);
		if (node_open_for_writing(n)) {
			rep->open_files++;	/* not ours to publish yet */
			continue;
		}
		if (!node_needs_seal(n))
			continue;
		int k = seal_locked(fs, n, n->writer_uid);
		if (k < 0 && !rep->err)
			rep->err = k;
		if (k == 0)
			rep->sealed++;
	}
	return backend_last_seq(&fs->be);
}

const char *node_state_name(struct ckptfs *fs, struct fsnode *n)
{
	int sticky = atomic_load(&n->b->sticky_err);
	enum cfile_state cs = n->cf ? cfile_state(n->cf) : CF_DURABLE;	/* one moment */

	if (n->new_file || cs == CF_DIRTY)
		return "dirty";
	if (sticky == ECANCELED)
		return "skipped";	/* an administrator dropped its last version */
	bool pending = cs == CF_FLUSHING;
	if (sticky || (pending && backend_actor_error(&fs->be, n->seal_actor, n->seal_seq)))
		return "blocked";
	if (pending)
		return "flushing";
	/*
	 * Its contents are on the backend; its name and attributes are only
	 * once its last change is too, and the last change of the name of each
	 * directory above it (a rename of its checkpoint's directory, say,
	 * still queued; not their own chmods).
	 */
	for (struct fsnode *x = n; x;) {
		int k = backend_node_state(&fs->be, x->b, x != n);
		if (k)
			return k < 0 ? "blocked" : "flushing";
		struct fsdent *d = node_first_dent(x);
		x = d ? d->parent : NULL;
	}
	return "durable";
}
