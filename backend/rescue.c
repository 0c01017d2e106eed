/*
 * rescue.c — what happens to data the backend would not take.
 *
 * When the daemon must exit while operations are still unpublished (the
 * backend refuses, and the drain at unmount gave up), backend_rescue()
 * writes every queued file version, whole, under
 * RESCUE_DIR/<host>-<mount id>/files/<backend path>, and every queued
 * operation (versions with their XXH3-128, and the namespace changes that
 * were to follow) to RESCUE_DIR/<host>-<mount id>/manifest.jsonl, in
 * sequence order, so an administrator can finish the job by hand.  Each
 * rescued operation is also noted in the backend's manifest when possible.
 * Nothing is dropped silently: the daemon logs where the data went and
 * exits non-zero.
 */
#include "backend/backend.h"
#include "cache/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int flush_copy_version(struct cver *v, int fd, XXH128_hash_t *digest);

/* mkdir -p for the directories of `path` below the open dir `base`. */
static int mkdirs_for(int base, const char *path)
{
	char *dup = xstrdup(path), *p = dup;
	int r = 0;

	while ((p = strchr(p, '/'))) {
		*p = '\0';
		if (mkdirat(base, dup, 0700) < 0 && errno != EEXIST) {
			r = -errno;
			break;
		}
		*p++ = '/';
	}
	free(dup);
	return r;
}

static const char *kind_name(enum op_kind k)
{
	static const char *const names[] = { "file", "mkdir", "rmdir", "unlink", "rename",
					     "symlink", "link", "setattr", "setxattr", "removexattr" };
	return k < CKPT_ARRAY_LEN(names) ? names[k] : "?";
}

long backend_rescue(struct backend *be, const char *dir, char *where, size_t wlen)
{
	char host[256] = "localhost";
	int base, files, mf;
	long saved = 0;

	gethostname(host, sizeof(host) - 1);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	snprintf(where, wlen, "%s/%s-%s", dir, host, be->mount_id);
	if (mkdir(where, 0700) < 0 && errno != EEXIST)
		return -errno;
	if ((base = open(where, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return -errno;
	mkdirat(base, "files", 0700);
	files = openat(base, "files", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	mf = openat(base, "manifest.jsonl", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (files < 0 || mf < 0) {
		int e = -errno;
		close(base);
		return e;
	}
	for (struct list *e = be->ops.next; e != &be->ops; e = e->next) {
		struct op *op = list_entry(e, struct op, link);
		struct strbuf b = { 0 };
		char path[4096], to[4096] = "";

		if (op->dir && bnode_path(be, op->dir, op->name, path, sizeof(path)) == 0)
			;
		else if (op->name)
			snprintf(path, sizeof(path), "unplaced/%llu-%s", (unsigned long long)op->seq, op->name);
		else
			snprintf(path, sizeof(path), "unplaced/%llu", (unsigned long long)op->seq);
		if (op->dir2 && bnode_path(be, op->dir2, op->name2, to, sizeof(to)) < 0)
			snprintf(to, sizeof(to), "unplaced/%s", op->name2);
		sb_printf(&b, "{\"seq\": %llu, \"op\": \"%s\", \"path\": ", (unsigned long long)op->seq,
			  kind_name(op->kind));
		sb_json_str(&b, path);
		if (to[0]) {
			sb_printf(&b, ", \"to\": ");
			sb_json_str(&b, to);
		}
		if (op->kind == OP_VERSION) {
			XXH128_hash_t h;
			char hex[33];
			int fd, r = mkdirs_for(files, path);
			fd = r < 0 ? r : openat(files, path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
			r = fd < 0 ? -errno : flush_copy_version(op->ver, fd, &h);
			if (fd >= 0 && fsync(fd) < 0 && !r)
				r = -errno;
			if (fd >= 0)
				close(fd);
			hash_hex(h, hex);
			sb_printf(&b, ", \"size\": %llu, \"mode\": %u, \"xxh3\": \"%s\", \"saved\": %s",
				  (unsigned long long)op->ver->size, (unsigned)op->mode, hex,
				  r == 0 ? "true" : "false");
			if (r < 0)
				log_err("rescue: could not save %s: %s", path, strerror(-r));
		} else if (op->kind == OP_SYMLINK) {
			sb_printf(&b, ", \"target\": ");
			sb_json_str(&b, op->target);
		}
		sb_printf(&b, "}\n");
		write_full(mf, b.s, b.len);
		sb_free(&b);
		saved++;
	}
	fsync(mf);
	close(mf);
	close(files);
	fsync(base);
	close(base);
	char rec[512];
	int n = snprintf(rec, sizeof(rec), "{\"t\": \"rescued\", \"m\": \"%s\", \"count\": %ld, \"where\": \"%s\"}",
			 be->mount_id, saved, where);
	(void)manifest_append(&be->man, rec, (size_t)n);
	return saved;
}
