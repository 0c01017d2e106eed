/*
 * manifest.c — the per-node manifest log and state file: record framing,
 * appends, the line-by-line scan, and the metadata directories and files
 * with their ownership checks (see manifest.h, docs/manifest.md).
 * Recovery is in recover.c, compaction in compact.c.
 *
 * The scan reads the log in blocks into a buffer of bounded size and takes
 * it one line at a time: a line is a record if its header parses (hex by
 * hand, exact widths), its length field is at most MANIFEST_REC_MAX and
 * equals the line's length, and its hash matches.  Every byte is searched
 * for the newline once and hashed at most once, so a scan is linear in the
 * log's size whatever the log holds, and a line too long to be a record is
 * skipped without being buffered.
 *
 * An append builds the record in one buffer and writes it at the end (the
 * fd is O_APPEND) under m->lock; if the write fails part way, the file is
 * cut back to the end of the last whole record before the error is
 * returned, and if even that fails the cut is retried before the next
 * append writes anything (tail_dirty): no record ever follows a half one.
 */
#include "backend/manifest_priv.h"
#include "backend/digest.h"
#include "backend/bsys.h"
#include "cache/json.h"
#include "cache/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define REC_HDR_LEN 29		/* "C1 " + 8 + " " + 16 + " " */

/* ---- hashing ----------------------------------------------------------- */

int hash_fd(int fd, XXH128_hash_t *out, uint64_t *size)
{
	return digest_fd(fd, out, size);
}

void hash_hex(XXH128_hash_t h, char out[33])
{
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, h);
	for (int i = 0; i < 16; i++)
		snprintf(out + 2 * i, 3, "%02x", c.digest[i]);
}

/* ---- framing ------------------------------------------------------------ */

#define SCAN_BLOCK (1u << 20)

static struct ckpt_ratelimit append_rl;

void manifest_frame(struct strbuf *b, const char *payload, size_t len)
{
	size_t need = REC_HDR_LEN + len + 2;

	if (b->cap < need) {
		b->s = xrealloc(b->s, need);
		b->cap = need;
	}
	snprintf(b->s, REC_HDR_LEN + 1, "C1 %08x %016llx ", (unsigned)len,
		 (unsigned long long)XXH3_64bits(payload, len));
	memcpy(b->s + REC_HDR_LEN, payload, len);
	b->s[REC_HDR_LEN + len] = '\n';
	b->s[REC_HDR_LEN + len + 1] = '\0';
	b->len = REC_HDR_LEN + len + 1;
}

/* n lowercase hex digits at p, exactly. */
static bool hex_field(const char *p, int n, uint64_t *out)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++) {
		unsigned d;
		if (p[i] >= '0' && p[i] <= '9')
			d = (unsigned)(p[i] - '0');
		else if (p[i] >= 'a' && p[i] <= 'f')
			d = (unsigned)(p[i] - 'a' + 10);
		else
			return false;
		v = v << 4 | d;
	}
	*out = v;
	return true;
}

bool manifest_record_check(const char *line, size_t n, const char **payload, size_t *plen)
{
	uint64_t len, h;

	if (n < REC_HDR_LEN + 1 || memcmp(line, "C1 ", 3) != 0 || line[11] != ' ' || line[28] != ' ')
		return false;
	if (!hex_field(line + 3, 8, &len) || !hex_field(line + 12, 16, &h))
		return false;
	/* The length is checked against the line before anything trusts it. */
	if (len > MANIFEST_REC_MAX || n != REC_HDR_LEN + len + 1 || line[n - 1] != '\n')
		return false;
	if (memchr(line + REC_HDR_LEN, '\n', (size_t)len))
		return false;
	if (XXH3_64bits(line + REC_HDR_LEN, (size_t)len) != h)
		return false;
	*payload = line + REC_HDR_LEN;
	*plen = (size_t)len;
	return true;
}

int manifest_scan_fd(int fd, manifest_cb cb, void *arg, struct manifest_scan *res)
{
	const size_t maxline = REC_HDR_LEN + MANIFEST_REC_MAX + 1, cap = maxline + SCAN_BLOCK;
	char *buf = xmalloc(cap);
	size_t lo = 0, hi = 0, srch = 0;	/* window [lo, hi); searched up to srch */
	uint64_t base = 0;			/* file offset of buf[0] */
	uint64_t pend_lines = 0, pend_bytes = 0; /* failing lines since the last record */
	uint64_t skip_from = 0;
	bool skipping = false, eof = false;
	int r = 0;

	memset(res, 0, sizeof(*res));
	while (r == 0) {
		char *nl = hi > srch ? memchr(buf + srch, '\n', hi - srch) : NULL;
		if (nl) {
			size_t end = (size_t)(nl - buf) + 1;
			const char *payload;
			size_t plen;
			if (skipping) {		/* the end of a line too long to be a record */
				pend_lines++;
				pend_bytes += base + end - skip_from;
				skipping = false;
			} else if (manifest_record_check(buf + lo, end - lo, &payload, &plen)) {
				res->corrupt_records += pend_lines;
				res->corrupt_bytes += pend_bytes;
				pend_lines = pend_bytes = 0;
				res->records++;
				if (cb)
					r = cb(arg, payload, plen, base + lo);
				res->good_end = base + end;
			} else {
				pend_lines++;
				pend_bytes += end - lo;
			}
			lo = srch = end;
			continue;
		}
		srch = hi;
		if (eof)
			break;
		if (hi - lo >= maxline) {
			/* Longer than any record can be: drop it as it streams by. */
			if (!skipping)
				skip_from = base + lo;
			skipping = true;
			base += hi;
			lo = hi = srch = 0;
		} else if (cap - hi < SCAN_BLOCK && lo) {
			memmove(buf, buf + lo, hi - lo);
			base += lo;
			hi -= lo;
			srch -= lo;
			lo = 0;
		}
		ssize_t n = bsys.pread(fd, buf + hi, cap - hi, (off_t)(base + hi));
		if (n == -EINTR)
			continue;
		if (n < 0)
			r = (int)n;
		else if (n == 0)
			eof = true;
		else
			hi += (size_t)n;
	}
	res->size = base + hi;
	free(buf);
	return r;
}

int manifest_write_all(int fd, const char *buf, size_t len, uint64_t off, size_t *done)
{
	*done = 0;
	while (*done < len) {
		ssize_t n = bsys.append(fd, buf + *done, len - *done, (off_t)(off + *done));
		if (n == -EINTR)
			continue;
		if (n <= 0)	/* 0: nothing written and no error; retrying at once would spin */
			return n < 0 ? (int)n : -EIO;
		*done += (size_t)n;
	}
	return 0;
}

/* Cut the log back to its last whole record; m->lock held. */
static int tail_cut_locked(struct manifest *m)
{
	int r = bsys.ftruncate(m->fd, (off_t)m->size);
	m->changes++;
	m->tail_dirty = r < 0;
	return r;
}

int manifest_append(struct manifest *m, const char *payload, size_t len)
{
	size_t done = 0;
	int r = 0;

	if (m->fd < 0)
		return 0;		/* manifest=off */
	if (len > MANIFEST_REC_MAX)
		return -EMSGSIZE;
	if (memchr(payload, '\n', len) || memchr(payload, '\0', len))
		return -EINVAL;		/* a record is one line of text */
	pthread_mutex_lock(&m->lock);
	if (m->tail_dirty && (r = tail_cut_locked(m)) < 0)
		goto out;
	manifest_frame(&m->rec, payload, len);
	m->changes++;	/* even a failed write may have left bytes to sync */
	/* One record, written whole at the end of the log (O_APPEND). */
	r = manifest_write_all(m->fd, m->rec.s, m->rec.len, m->size, &done);
	if (r == 0) {
		m->size += done;
		m->records++;
		sb_put(&m->unsynced, m->rec.s, done);	/* until a sync covers it */
	} else if (done) {
		tail_cut_locked(m);	/* no record may follow a half one */
	}
out:
	pthread_mutex_unlock(&m->lock);
	if (r < 0)
		ckpt_log_limited(&append_rl, 5000000000ull, LOG_ERR,
				 "manifest: appending a record to %s/" MANIFEST_LOG " failed: %s; "
				 "the operation is not durable", m->where ? m->where : "?", strerror(-r));
	return r;
}

void manifest_synced_to_locked(struct manifest *m, uint64_t size)
{
	if (size <= m->synced_size)
		return;
	size_t k = (size_t)CKPT_MIN(size - m->synced_size, (uint64_t)m->unsynced.len);
	memmove(m->unsynced.s, m->unsynced.s + k, m->unsynced.len - k);
	m->unsynced.len -= k;
	m->synced_size = size;
	if (m->unsynced.len == 0 && m->unsynced.cap > (1u << 20))
		sb_free(&m->unsynced);	/* what a long failure grew goes with it */
}

#define REWRITE_BLOCK (256u << 10)

/* The log as it should be: its synced prefix, read back, and the records since. */
static int rewrite_fill(void *arg, int fd, uint64_t *size, uint64_t *records)
{
	struct manifest *m = arg;
	char *buf = xmalloc(REWRITE_BLOCK);
	uint64_t off = 0;
	size_t done;
	int r = 0;

	while (off < m->synced_size && r == 0) {
		ssize_t n = bsys.pread(m->fd, buf, (size_t)CKPT_MIN(m->synced_size - off, REWRITE_BLOCK),
				       (off_t)off);
		if (n == -EINTR)
			continue;
		if (n <= 0)
			r = n < 0 ? (int)n : -EIO;	/* shorter than it was synced at */
		else if ((r = manifest_write_all(fd, buf, (size_t)n, off, &done)) == 0)
			off += (uint64_t)n;
	}
	free(buf);
	if (r == 0)
		r = manifest_write_all(fd, m->unsynced.s, m->unsynced.len, off, &done);
	*size = off + m->unsynced.len;
	*records = m->records;
	return r;
}

int manifest_sync(struct manifest *m)
{
	int fd, r;
	bool dir;

	if (m->fd < 0)
		return 0;
	/*
	 * Only the publisher syncs and compacts, so fd stays valid meanwhile.
	 * A log unchanged since its last fdatasync needs none: a batch that
	 * syncs between operations in different directories would otherwise
	 * flush the device once more per operation for nothing.
	 */
	pthread_mutex_lock(&m->lock);
	if (m->resync) {
		/* Not the same file again: its lost pages may read as written. */
		if ((r = manifest_replace_locked(m, rewrite_fill, m)) == 0 && m->resync)
			r = -EIO;	/* renamed, but its name not synced: anew next time */
		if (r < 0) {
			pthread_mutex_unlock(&m->lock);
			return r;
		}
		atomic_fetch_add(&m->rewrites, 1);
		ckpt_log(LOG_WARNING, "manifest: %s/" MANIFEST_LOG " written anew (%llu bytes): a "
			 "sync of it failed, or was not seen to succeed before a stop", m->where,
			 (unsigned long long)m->size);
	}
	fd = m->fd;
	dir = m->dir_unsynced;
	uint64_t changes = m->changes, size = m->size;
	bool clean = changes == m->changes_synced;
	pthread_mutex_unlock(&m->lock);
	if (!clean) {
		if ((r = bsys.fdatasync(fd)) < 0) {
			pthread_mutex_lock(&m->lock);
			m->resync = true;
			pthread_mutex_unlock(&m->lock);
			return r;
		}
		atomic_fetch_add(&m->syncs, 1);
		pthread_mutex_lock(&m->lock);
		if (changes > m->changes_synced)
			m->changes_synced = changes;
		manifest_synced_to_locked(m, size);
		pthread_mutex_unlock(&m->lock);
	}
	if (dir) {
		r = bsys_fsync_dir(m->dirfd);
		pthread_mutex_lock(&m->lock);
		if (r < 0)
			m->resync = true;	/* not this fsync again: a new name for the log */
		else
			m->dir_unsynced = false;
		pthread_mutex_unlock(&m->lock);
		if (r < 0)
			return r;
	}
	return 0;
}

void manifest_disabled(struct manifest *m)
{
	memset(m, 0, sizeof(*m));
	m->fd = m->dirfd = -1;
}

uint64_t manifest_syncs(struct manifest *m)
{
	return atomic_load(&m->syncs);	/* m->lock is held across appends to the backend */
}

uint64_t manifest_rewrites(struct manifest *m)
{
	return atomic_load(&m->rewrites);
}

int manifest_replace_locked(struct manifest *m,
			    int (*fill)(void *arg, int fd, uint64_t *size, uint64_t *records),
			    void *arg)
{
	uint64_t size = 0, records = 0;
	int fd, r;

	bsys.unlinkat(m->dirfd, MANIFEST_LOG_TMP, 0);
	fd = bsys.openat(m->dirfd, MANIFEST_LOG_TMP,
			 O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW, 0644);
	if (fd < 0)
		return fd;
	if ((r = fill(arg, fd, &size, &records)) < 0 || (r = bsys.fdatasync(fd)) < 0 ||
	    (r = bsys.renameat2(m->dirfd, MANIFEST_LOG_TMP, m->dirfd, MANIFEST_LOG, 0)) < 0) {
		bsys.close(fd);
		bsys.unlinkat(m->dirfd, MANIFEST_LOG_TMP, 0);
		return r;
	}
	/* The new log is in place: it is the one appends go to from now on. */
	bsys.close(m->fd);
	m->fd = fd;
	m->size = m->synced_size = size;
	m->records = records;
	m->unsynced.len = 0;
	m->resync = false;
	m->tail_dirty = false;
	m->changes_synced = ++m->changes;	/* all of it synced above */
	m->dir_unsynced = false;
	if (bsys_fsync_dir(m->dirfd) < 0) {
		/* Not that fsync again (it may report its error once): renamed anew. */
		m->resync = true;
		ckpt_log(LOG_WARNING, "manifest: %s: directory fsync after replacing the log "
			 "failed; it is written anew at the next sync, which fails until that works",
			 m->where);
	}
	return 0;
}

bool manifest_wants_compaction(const struct manifest *m)
{
	return m->fd >= 0 &&
	       ((m->records >= m->compact_records && m->records >= 2 * m->base_records) ||
		(m->size >= m->compact_bytes && m->size >= 2 * m->base_bytes));
}

/* ---- the metadata directories and files ---------------------------------- */

static bool node_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (!n || n > 255 || s[0] == '.')
		return false;
	for (; *s; s++)
		if (*s == '/' || (unsigned char)*s < 0x20 || *s == 0x7f)
			return false;
	return true;
}

void manifest_node_default(char *buf, size_t len)
{
	char host[HOST_NAME_MAX + 2] = "";

	if (gethostname(host, sizeof(host) - 1) == 0)
		host[strcspn(host, ".")] = '\0';
	snprintf(buf, len, "%s", node_name_ok(host) ? host : "localhost");
}

/* Is the open object fd the daemon's own?  0 or -MANIFEST_EREFUSED (message printed). */
static int owned_check(int fd, const char *shown, bool dir)
{
	struct stat st;
	int r = bsys.fstatat(fd, "", &st);

	if (r < 0) {
		fprintf(stderr, "ckptfs: %s: %s\n", shown, strerror(-r));
		return r;
	}
	if (dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
		fprintf(stderr, "ckptfs: %s is not a %s; refusing to mount\n", shown,
			dir ? "directory" : "regular file");
		return -MANIFEST_EREFUSED;
	}
	if (st.st_uid != geteuid()) {
		fprintf(stderr, "ckptfs: %s is owned by uid %u, not by uid %u who mounts; "
			"refusing to mount\n", shown, (unsigned)st.st_uid, (unsigned)geteuid());
		return -MANIFEST_EREFUSED;
	}
	if (st.st_mode & 022) {
		fprintf(stderr, "ckptfs: %s is writable by group or others (mode %04o); "
			"refusing to mount\n", shown, (unsigned)(st.st_mode & 07777));
		return -MANIFEST_EREFUSED;
	}
	if (!dir && st.st_nlink != 1) {
		fprintf(stderr, "ckptfs: %s has %lu hard links; refusing to mount\n", shown,
			(unsigned long)st.st_nlink);
		return -MANIFEST_EREFUSED;
	}
	return 0;
}

int manifest_file_check(int fd, const char *shown)
{
	return owned_check(fd, shown, false);
}

static int refuse_kind(const char *shown, mode_t mode)
{
	fprintf(stderr, "ckptfs: %s is %s, not the daemon's own; refusing to mount (remove it)\n",
		shown, S_ISLNK(mode) ? "a symlink" : "of the wrong type");
	return -MANIFEST_EREFUSED;
}

/*
 * Refuse a name that is not of the kind expected before opening it (so the
 * one line the user gets is this one); 0 if it is absent or of that kind.
 * Opening still never follows: a name swapped meanwhile fails the open.
 */
static int kind_check(int parent, const char *name, const char *shown, bool dir)
{
	struct stat st;

	if (bsys.fstatat(parent, name, &st) < 0 || (dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode)))
		return 0;
	return refuse_kind(shown, st.st_mode);
}

/* Say why opening `name` (without following) failed: a symlink is refused. */
static int open_refused(int parent, const char *name, const char *shown, int err)
{
	struct stat st;

	if ((err == -ELOOP || err == -ENOTDIR || err == -ENXIO) &&
	    bsys.fstatat(parent, name, &st) == 0)
		return refuse_kind(shown, st.st_mode);
	fprintf(stderr, "ckptfs: cannot open %s: %s\n", shown, strerror(-err));
	return err;
}

/*
 * Create (0755) and open a metadata directory below parent, and check it.
 * Its name is synced into parent at every mount (one a crash made but did
 * not sync too): the log below it is synced often, the name never else.
 */
static int meta_dir(int parent, const char *name, const char *shown)
{
	int fd, r = bsys.mkdirat(parent, name, 0755);

	if ((r == 0 || r == -EEXIST) && (r = bsys_fsync_dir(parent)) < 0) {
		fprintf(stderr, "ckptfs: cannot sync the directory holding %s: %s\n", shown,
			strerror(-r));
		return r;
	}
	if (r < 0) {
		fprintf(stderr, "ckptfs: cannot create %s: %s\n", shown, strerror(-r));
		return r;
	}
	if ((r = kind_check(parent, name, shown, true)) < 0)
		return r;
	fd = bsys.openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
	if (fd < 0)
		return open_refused(parent, name, shown, fd);
	if ((r = owned_check(fd, shown, true)) < 0) {
		bsys.close(fd);
		return r;
	}
	return fd;
}

/* Open a metadata file of the node directory without following, and check it. */
static int meta_file(struct manifest *m, const char *name, int flags, char *shown, size_t len)
{
	int fd, r;

	snprintf(shown, len, "%s/%s", m->where, name);
	if ((r = kind_check(m->dirfd, name, shown, false)) < 0)
		return r;
	fd = bsys.openat(m->dirfd, name, flags | O_NOFOLLOW | O_NONBLOCK, 0644);
	if (fd < 0)
		return fd == -ENOENT ? fd : open_refused(m->dirfd, name, shown, fd);
	if ((r = owned_check(fd, shown, false)) < 0) {
		bsys.close(fd);
		return r;
	}
	return fd;
}

/* ---- the state file ------------------------------------------------------ */

int manifest_write_file(int dirfd, const char *name, const char *tmp, const char *buf, size_t len)
{
	int fd, r = 0;

	/* A stale temp file (or anything planted there) goes; ours is born new. */
	bsys.unlinkat(dirfd, tmp, 0);
	fd = bsys.openat(dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, 0644);
	if (fd < 0)
		return fd;
	size_t done;
	r = manifest_write_all(fd, buf, len, 0, &done);
	if (r == 0)
		r = bsys.fsync(fd);
	if (r == 0)
		r = bsys.renameat2(dirfd, tmp, dirfd, name, 0);
	bsys.close(fd);
	if (r == 0)
		r = bsys_fsync_dir(dirfd);
	else
		bsys.unlinkat(dirfd, tmp, 0);
	return r;
}

static int state_write(struct manifest *m, bool clean, uint64_t seq)
{
	struct strbuf b = { 0 };

	sb_printf(&b, "{\"format\": %d, \"host\": ", MANIFEST_FORMAT);
	sb_json_str(&b, m->host);
	sb_printf(&b, ", \"mount_id\": ");
	sb_json_str(&b, m->mount_id);
	sb_printf(&b, ", \"clean\": %s, \"seq_durable\": %llu, \"time_ns\": %llu}\n",
		  clean ? "true" : "false", (unsigned long long)seq, (unsigned long long)wall_ns());
	int r = manifest_write_file(m->dirfd, MANIFEST_STATE, MANIFEST_STATE_TMP, b.s, b.len);
	sb_free(&b);
	return r;
}

/*
 * The format number in state.json (0 if there is none); or -errno.  In
 * unclean (len bytes), the mount id it names if it says that mount did not
 * stop cleanly ("" otherwise).
 */
static int state_format(struct manifest *m, char *unclean, size_t len)
{
	char shown[PATH_MAX + 64], buf[4096];
	struct json_obj o;
	uint64_t fmt = 0;
	ssize_t n;
	bool clean = true;
	int fd = meta_file(m, MANIFEST_STATE, O_RDONLY, shown, sizeof(shown));

	unclean[0] = '\0';

	if (fd == -ENOENT)
		return 0;
	if (fd < 0)
		return fd;
	n = bsys.pread(fd, buf, sizeof(buf), 0);
	bsys.close(fd);
	if (n < 0)
		return (int)n;
	if (json_parse(buf, (size_t)n, &o, NULL, 0) < 0) {
		ckpt_log(LOG_WARNING, "manifest: %s is not a JSON object; ignoring it", shown);
		return 0;
	}
	if (!json_u64(&o, "format", &fmt) || fmt > INT32_MAX)
		fmt = 0;
	const char *id = json_str(&o, "mount_id");
	if (json_bool(&o, "clean", &clean) && !clean && id)
		snprintf(unclean, len, "%s", id);
	json_free(&o);
	return (int)fmt;
}

/* ---- open and close ------------------------------------------------------ */

/* Compaction thresholds: the defaults, or CKPTFS_MANIFEST_COMPACT="records=N,bytes=SIZE". */
static void thresholds(struct manifest *m)
{
	const char *env = getenv("CKPTFS_MANIFEST_COMPACT");
	char *dup, *save, *kv;

	m->compact_records = MANIFEST_COMPACT_RECORDS;
	m->compact_bytes = MANIFEST_COMPACT_BYTES;
	if (!env || !*env)
		return;
	dup = xstrdup(env);
	for (kv = strtok_r(dup, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
		uint64_t v;
		if (!strncmp(kv, "records=", 8) && parse_size(kv + 8, &v) == 0)
			m->compact_records = v;
		else if (!strncmp(kv, "bytes=", 6) && parse_size(kv + 6, &v) == 0)
			m->compact_bytes = v;
		else
			ckpt_log(LOG_WARNING, "CKPTFS_MANIFEST_COMPACT: ignoring '%s'", kv);
	}
	free(dup);
}

/* "<backend>/.ckptfs/nodes/<node>" (the backend as the kernel names it). */
static char *where_of(int root_fd, const char *node)
{
	char fdname[24], dir[48], root[PATH_MAX] = "BACKEND";
	struct strbuf b = { 0 };
	ssize_t n = -1;
	int proc;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)getpid());	/* /proc/self is a symlink */
	proc = bsys_open_dir_path(dir);

	snprintf(fdname, sizeof(fdname), "%d", root_fd);
	if (proc >= 0) {
		n = bsys.readlinkat(proc, fdname, root, sizeof(root) - 1);
		bsys.close(proc);
	}
	root[n > 0 ? n : 7] = '\0';
	sb_printf(&b, "%s/" MANIFEST_NODES_DIR "/%s", root, node);
	return b.s;
}

static void manifest_release(struct manifest *m)
{
	if (m->fd >= 0)
		bsys.close(m->fd);
	if (m->dirfd >= 0)
		bsys.close(m->dirfd);
	m->fd = m->dirfd = -1;
	free(m->where);
	m->where = NULL;
	sb_free(&m->rec);
	sb_free(&m->unsynced);
	pthread_mutex_destroy(&m->lock);
}

/* Open the three metadata directories (creating them) and check each. */
/* shown: where, ".../.ckptfs/nodes/<node>"; cut back for the parents. */
static int node_dirs(int root_fd, const char *node, const char *where, int *nodes_fd, int *node_fd)
{
	size_t wl = strlen(where), nl = strlen(node);
	char *shown = xstrdup(where);
	int meta, nodes;

	shown[wl - nl - 7] = '\0';
	meta = meta_dir(root_fd, ".ckptfs", shown);
	shown[wl - nl - 7] = '/';
	shown[wl - nl - 1] = '\0';
	nodes = meta < 0 ? meta : meta_dir(meta, "nodes", shown);
	if (meta >= 0)
		bsys.close(meta);
	shown[wl - nl - 1] = '/';
	*node_fd = nodes < 0 ? nodes : meta_dir(nodes, node, shown);
	if (nodes >= 0 && (!nodes_fd || *node_fd < 0))
		bsys.close(nodes);
	else if (nodes_fd)
		*nodes_fd = nodes;
	free(shown);
	return *node_fd < 0 ? *node_fd : 0;
}

static int open_node_dir(struct manifest *m, int root_fd, const char *node)
{
	return node_dirs(root_fd, node, m->where, NULL, &m->dirfd);
}

int manifest_node_dirs(int root_fd, const char *node, int *nodes_fd, int *node_fd)
{
	char *where;
	int r;

	if (!node_name_ok(node)) {
		fprintf(stderr, "ckptfs: node name '%s' cannot name a directory under %s\n", node,
			MANIFEST_NODES_DIR);
		return -MANIFEST_EREFUSED;
	}
	where = where_of(root_fd, node);
	r = node_dirs(root_fd, node, where, nodes_fd, node_fd);
	free(where);
	return r;
}

int manifest_open(struct manifest *m, int root_fd, const char *node, const char *mount_id,
		  struct recovery_report *rep)
{
	struct manifest_scan scan;
	struct rscan *s = NULL;
	char shown[PATH_MAX + 64];
	struct strbuf b = { 0 };
	char state_unclean[24];
	bool clean;
	int fmt, r;

	memset(m, 0, sizeof(*m));
	memset(rep, 0, sizeof(*rep));
	m->fd = m->dirfd = -1;
	pthread_mutex_init(&m->lock, NULL);
	thresholds(m);
	snprintf(m->mount_id, sizeof(m->mount_id), "%s", mount_id);
	if (!node_name_ok(node)) {
		fprintf(stderr, "ckptfs: node name '%s' cannot name a directory under %s "
			"(1-255 bytes, no '/', no control characters, not starting with '.')\n",
			node, MANIFEST_NODES_DIR);
		pthread_mutex_destroy(&m->lock);
		return -MANIFEST_EREFUSED;
	}
	snprintf(m->host, sizeof(m->host), "%s", node);
	m->where = where_of(root_fd, node);
	if ((r = open_node_dir(m, root_fd, node)) < 0)
		goto fail;
	/* Leftovers of an interrupted compaction or state update. */
	bsys.unlinkat(m->dirfd, MANIFEST_LOG_TMP, 0);
	bsys.unlinkat(m->dirfd, MANIFEST_STATE_TMP, 0);
	if ((fmt = r = state_format(m, state_unclean, sizeof(state_unclean))) < 0)
		goto fail;
	if (fmt > MANIFEST_FORMAT) {
		fprintf(stderr, "ckptfs: the backend's metadata is format %d, newer than this "
			"ckptfs understands (%d); upgrade ckptfs\n", fmt, MANIFEST_FORMAT);
		r = -EPROTO;
		goto fail;
	}
	m->fd = meta_file(m, MANIFEST_LOG, O_RDWR | O_APPEND | O_CREAT, shown, sizeof(shown));
	if (m->fd < 0) {
		r = m->fd;
		if (r == -ENOENT)	/* other errors were reported by meta_file */
			fprintf(stderr, "ckptfs: cannot open %s: %s\n", shown, strerror(-r));
		goto fail;
	}
	s = rscan_new();
	if ((r = manifest_scan_fd(m->fd, rscan_cb, s, &scan)) < 0) {
		fprintf(stderr, "ckptfs: cannot read %s: %s\n", shown, strerror(-r));
		goto fail;
	}
	m->size = m->synced_size = scan.good_end;	/* what the disk holds, read back */
	m->records = scan.records;
	m->dir_unsynced = true;	/* the log may be new: the first sync makes its name durable too */
	rscan_compacted(s, &m->base_records, &m->base_bytes);
	if (scan.size > scan.good_end) {
		rep->torn_bytes = scan.size - scan.good_end;
		pthread_mutex_lock(&m->lock);
		r = tail_cut_locked(m);
		pthread_mutex_unlock(&m->lock);
		ckpt_log(LOG_WARNING, "manifest: %s torn tail of %llu bytes at offset %llu%s",
			 r == 0 ? "cut a" : "could not cut a", (unsigned long long)rep->torn_bytes,
			 (unsigned long long)scan.good_end, r == 0 ? "" : " (retried at the next append)");
	}
	rep->corrupt_records = scan.corrupt_records;
	if (scan.corrupt_records)
		ckpt_log(LOG_ERR, "manifest: %s: %llu corrupt records skipped (%llu bytes)", shown,
			 (unsigned long long)scan.corrupt_records, (unsigned long long)scan.corrupt_bytes);
	rep->previous = rscan_previous(s, &clean, rep->prev_mount_id, sizeof(rep->prev_mount_id));
	if (rep->previous && !clean && (r = manifest_recover(m, root_fd, s, rep)) < 0)
		goto fail;
	rscan_free(s);
	s = NULL;

	sb_printf(&b, "{\"t\": \"mount\", \"m\": ");
	sb_json_str(&b, m->mount_id);
	sb_printf(&b, ", \"host\": ");
	sb_json_str(&b, m->host);
	sb_printf(&b, ", \"format\": %d, \"time\": %llu}", MANIFEST_FORMAT,
		  (unsigned long long)wall_ns());
	r = manifest_append(m, b.s, b.len);
	sb_free(&b);
	/*
	 * A daemon that died, or whose last sync failed (its unmount record
	 * in the log, its state.json not clean), may have left the log's pages
	 * after a failed sync in the page cache, not on disk: what was read is
	 * written anew.  Where that cannot be done (a backend refusing renames
	 * can still be mounted, to be rescued), it is synced in place.
	 */
	if (r == 0 && rep->previous &&
	    (!clean || !strcmp(state_unclean, rep->prev_mount_id))) {
		int oldfd = m->fd;
		m->resync = true;
		if ((r = manifest_sync(m)) < 0 && m->fd != oldfd) {
			r = manifest_sync(m);	/* renamed, its name not synced: anew, once more */
		} else if (r < 0) {
			ckpt_log(LOG_WARNING, "manifest: %s/" MANIFEST_LOG " could not be written anew "
				 "after an unclean stop (%s); synced as it is", m->where,
				 strerror(-r));
			m->resync = false;
			m->dir_unsynced = true;
			r = manifest_sync(m);
		}
	} else if (r == 0) {
		r = manifest_sync(m);
	}
	if (r < 0) {
		fprintf(stderr, "ckptfs: cannot write %s: %s\n", shown, strerror(-r));
		goto fail;
	}
	if ((r = state_write(m, false, 0)) < 0)
		ckpt_log(LOG_WARNING, "manifest: cannot write %s/" MANIFEST_STATE ": %s", m->where,
			 strerror(-r));
	if (manifest_wants_compaction(m) && (r = manifest_compact(m, 0)) < 0)
		ckpt_log(LOG_WARNING, "manifest: compaction at mount failed (%s); the log stays "
			 "as it was", strerror(-r));
	return 0;
fail:
	if (s)
		rscan_free(s);
	manifest_release(m);
	return r;
}

bool manifest_close(struct manifest *m, uint64_t seq_durable, bool clean)
{
	struct strbuf b = { 0 };

	if (m->fd < 0)
		return false;
	if (clean) {
		sb_printf(&b, "{\"t\": \"unmount\", \"m\": ");
		sb_json_str(&b, m->mount_id);
		sb_printf(&b, ", \"seq\": %llu, \"time\": %llu}", (unsigned long long)seq_durable,
			  (unsigned long long)wall_ns());
		if (manifest_append(m, b.s, b.len) < 0)
			clean = false;
		sb_free(&b);
	}
	if (manifest_sync(m) < 0) {
		ckpt_log(LOG_ERR, "manifest: the last records of %s/" MANIFEST_LOG " may not be durable",
			 m->where);
		clean = false;	/* the next mount writes the log anew (state.json says why) */
	}
	if (state_write(m, clean, seq_durable) < 0)
		ckpt_log(LOG_WARNING, "manifest: cannot write %s/" MANIFEST_STATE, m->where);
	manifest_release(m);
	return clean;
}
