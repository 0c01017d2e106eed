/*
 * manifest.c — the per-node manifest log and state file, and recovery from
 * an unclean end of the previous mount (see manifest.h, docs/manifest.md).
 *
 * Recovery, when the previous mount of this node left no "unmount" record:
 *  1. cut a torn tail off the log (records are length- and hash-checked);
 *  2. decide which of its operations after its last "durable" record were
 *     really applied.  They were applied in sequence order (P1), so they
 *     form a prefix, and the prefix ends at the last operation whose effect
 *     is visible on the backend: scanning backwards, the first one with
 *     positive evidence (a file version whose size and XXH3 match, a mkdir
 *     whose directory exists, a rename or unlink whose source is gone).  An
 *     earlier operation's effect may have been overwritten by a later one,
 *     so absence of evidence alone proves nothing.  A "recovered" record
 *     then voids the rest for readers;
 *  3. report versions that were queued ("intent") but never published: the
 *     files that were in flight and were never acknowledged durable;
 *  4. remove that mount's temporary files (".ckptfs.<k>.<mount id>.<n>").
 */
#include "backend/manifest.h"
#include "backend/bsys.h"
#include "cache/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define REC_HDR_LEN 29		/* "C1 " + 8 + " " + 16 + " " */

/* ---- hashing ----------------------------------------------------------- */

int hash_fd(int fd, XXH128_hash_t *out, uint64_t *size)
{
	const size_t bs = 4u << 20;
	char *buf = xmalloc(bs);
	XXH3_state_t *st = XXH3_createState();
	uint64_t total = 0;
	off_t off = 0;
	int r = 0;

	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	XXH3_128bits_reset(st);
	for (;;) {
		ssize_t n = pread(fd, buf, bs, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			break;
		}
		if (n == 0)
			break;
		XXH3_128bits_update(st, buf, (size_t)n);
		off += n;
		total += (uint64_t)n;
	}
	*out = XXH3_128bits_digest(st);
	if (size)
		*size = total;
	XXH3_freeState(st);
	free(buf);
	return r;
}

void hash_hex(XXH128_hash_t h, char out[33])
{
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, h);
	for (int i = 0; i < 16; i++)
		snprintf(out + 2 * i, 3, "%02x", c.digest[i]);
}

/* ---- framing ------------------------------------------------------------ */

int manifest_append(struct manifest *m, const char *payload, size_t len)
{
	int r = 0;
	char hdr[REC_HDR_LEN + 1];
	struct iovec iov[3];

	snprintf(hdr, sizeof(hdr), "C1 %08x %016llx ", (unsigned)len,
		 (unsigned long long)XXH3_64bits(payload, len));
	iov[0] = (struct iovec){ hdr, REC_HDR_LEN };
	iov[1] = (struct iovec){ (void *)payload, len };
	iov[2] = (struct iovec){ "\n", 1 };
	if (m->fd < 0)
		return 0;	/* manifest=off */
	pthread_mutex_lock(&m->lock);
	/* One writev on an O_APPEND fd: a record is never interleaved. */
	ssize_t n = writev(m->fd, iov, 3);
	if (n < 0)
		r = -errno;
	else if ((size_t)n != REC_HDR_LEN + len + 1)
		r = -EIO;
	if (r < 0)
		ckpt_log(LOG_WARNING, "manifest append failed: %s", strerror(-r));
	m->records++;
	pthread_mutex_unlock(&m->lock);
	return r;
}

int manifest_sync(struct manifest *m)
{
	return m->fd < 0 ? 0 : bsys.fdatasync(m->fd);
}

void manifest_disabled(struct manifest *m)
{
	memset(m, 0, sizeof(*m));
	m->fd = m->dirfd = -1;
}

/* Parse a record at p (avail bytes); returns its total length or 0 if invalid. */
static size_t record_parse(const char *p, size_t avail, const char **payload, size_t *plen)
{
	unsigned len;
	unsigned long long h;

	if (avail < REC_HDR_LEN + 1 || memcmp(p, "C1 ", 3) != 0 || p[11] != ' ' || p[28] != ' ')
		return 0;
	if (sscanf(p + 3, "%8x", &len) != 1 || sscanf(p + 12, "%16llx", &h) != 1)
		return 0;
	if (avail < REC_HDR_LEN + (size_t)len + 1 || p[REC_HDR_LEN + len] != '\n')
		return 0;
	if (XXH3_64bits(p + REC_HDR_LEN, len) != h)
		return 0;
	*payload = p + REC_HDR_LEN;
	*plen = len;
	return REC_HDR_LEN + (size_t)len + 1;
}

int manifest_scan_fd(int fd, manifest_cb cb, void *arg, uint64_t *good_end, uint64_t *corrupt)
{
	struct stat st;
	char *data;
	size_t size, pos = 0;
	int r = 0;

	*good_end = 0;
	*corrupt = 0;
	if (fstat(fd, &st) < 0)
		return -errno;
	size = (size_t)st.st_size;
	data = xmalloc(size + 1);
	for (size_t got = 0; got < size;) {
		ssize_t n = pread(fd, data + got, size - got, (off_t)got);
		if (n <= 0) {
			size = got;
			break;
		}
		got += (size_t)n;
	}
	while (pos < size && r == 0) {
		const char *payload;
		size_t plen, k = record_parse(data + pos, size - pos, &payload, &plen);
		if (k) {
			r = cb(arg, payload, plen, pos);
			pos += k;
			*good_end = pos;
			continue;
		}
		/* Bad record: resync at the next line that starts a record. */
		char *next = memmem(data + pos + 1, size - pos - 1, "\nC1 ", 4);
		if (!next)
			break;		/* nothing valid after it: a torn tail */
		(*corrupt)++;
		pos = (size_t)(next + 1 - data);
	}
	free(data);
	return r;
}

/* ---- paths below the backend root ------------------------------------- */

static int open_beneath(int root_fd, const char *path, int flags)
{
	struct open_how how = {
		.flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW),
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	long fd = syscall(SYS_openat2, root_fd, path, &how, sizeof(how));
	return fd < 0 ? -errno : (int)fd;
}

static bool path_exists(int root_fd, const char *path)
{
	int fd = open_beneath(root_fd, path, O_PATH);
	if (fd < 0)
		return false;
	close(fd);
	return true;
}

/* ---- the state file ----------------------------------------------------- */

static void state_write(struct manifest *m, bool clean, uint64_t seq)
{
	char buf[512];
	int fd, n;

	n = snprintf(buf, sizeof(buf),
		     "{\"format\": %d, \"host\": \"%s\", \"mount_id\": \"%s\", \"clean\": %s, "
		     "\"seq_durable\": %llu, \"time_ns\": %llu}\n",
		     MANIFEST_FORMAT, m->host, m->mount_id, clean ? "true" : "false",
		     (unsigned long long)seq, (unsigned long long)wall_ns());
	fd = openat(m->dirfd, "state.json.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (write_full(fd, buf, (size_t)n) == 0 && fsync(fd) == 0)
		renameat(m->dirfd, "state.json.tmp", m->dirfd, "state.json");
	close(fd);
	fsync(m->dirfd);
}

/* The format number in state.json, or 0 if there is none. */
static int state_format(int dirfd)
{
	char buf[512] = { 0 };
	int fd = openat(dirfd, "state.json", O_RDONLY | O_CLOEXEC), fmt = 0;
	const char *p;

	if (fd < 0)
		return 0;
	if (read(fd, buf, sizeof(buf) - 1) > 0 && (p = strstr(buf, "\"format\":")))
		fmt = atoi(p + 9);
	close(fd);
	return fmt;
}

/* ---- recovery ------------------------------------------------------------ */

/* A record, as recovery needs it. */
struct rrec {
	char t[16];
	uint64_t seq;
	char *path, *to, *xxh3;
	uint64_t size;
	bool exchange;
};

struct rscan {
	char prev[24];		/* the last mount of this log */
	bool prev_clean;
	uint64_t prev_durable;
	struct rrec *ops;	/* operations of prev after its last durable record */
	size_t nops;
	struct rrec *intents;
	size_t nintents;
};

/* Minimal field extraction from our own flat JSON payloads. */
static bool field(const char *p, size_t len, const char *key, char *out, size_t outlen)
{
	char pat[40];
	const char *s, *end = p + len;
	size_t k = 0;

	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	if (!(s = memmem(p, len, pat, strlen(pat))))
		return false;
	s += strlen(pat);
	if (*s == '"') {
		for (s++; s < end && *s != '"' && k + 1 < outlen; s++) {
			if (*s == '\\' && s + 1 < end)
				s++;
			out[k++] = *s;
		}
	} else {
		while (s < end && *s != ',' && *s != '}' && k + 1 < outlen)
			out[k++] = *s++;
	}
	out[k] = '\0';
	return true;
}

static void rrec_free(struct rrec *r)
{
	free(r->path);
	free(r->to);
	free(r->xxh3);
}

static void rscan_reset_ops(struct rscan *s)
{
	for (size_t i = 0; i < s->nops; i++)
		rrec_free(&s->ops[i]);
	for (size_t i = 0; i < s->nintents; i++)
		rrec_free(&s->intents[i]);
	s->nops = s->nintents = 0;
}

static int rscan_cb(void *arg, const char *p, size_t len, uint64_t off)
{
	struct rscan *s = arg;
	char t[16], mid[24], buf[4096];
	struct rrec r = { 0 };

	if (!field(p, len, "t", t, sizeof(t)) || !field(p, len, "m", mid, sizeof(mid)))
		return 0;
	if (!strcmp(t, "mount")) {
		rscan_reset_ops(s);
		snprintf(s->prev, sizeof(s->prev), "%s", mid);
		s->prev_clean = false;
		s->prev_durable = 0;
		return 0;
	}
	if (strcmp(mid, s->prev) != 0)
		return 0;	/* another daemon's records: not ours to recover */
	if (field(p, len, "seq", buf, sizeof(buf)))
		r.seq = strtoull(buf, NULL, 10);
	if (!strcmp(t, "unmount")) {
		s->prev_clean = true;
		return 0;
	}
	if (!strcmp(t, "void")) {	/* an operation that was skipped, never applied */
		size_t k = 0;
		for (size_t i = 0; i < s->nops; i++) {
			if (s->ops[i].seq != r.seq)
				s->ops[k++] = s->ops[i];
			else
				rrec_free(&s->ops[i]);
		}
		s->nops = k;
		return 0;
	}
	if (!strcmp(t, "durable")) {
		s->prev_durable = r.seq;
		/* Everything up to it is settled. */
		size_t k = 0;
		for (size_t i = 0; i < s->nops; i++) {
			if (s->ops[i].seq > r.seq)
				s->ops[k++] = s->ops[i];
			else
				rrec_free(&s->ops[i]);
		}
		s->nops = k;
		return 0;
	}
	snprintf(r.t, sizeof(r.t), "%s", t);
	if (field(p, len, "path", buf, sizeof(buf)))
		r.path = xstrdup(buf);
	if (field(p, len, "to", buf, sizeof(buf)))
		r.to = xstrdup(buf);
	if (field(p, len, "xxh3", buf, sizeof(buf)))
		r.xxh3 = xstrdup(buf);
	if (field(p, len, "size", buf, sizeof(buf)))
		r.size = strtoull(buf, NULL, 10);
	if (field(p, len, "exchange", buf, sizeof(buf)))
		r.exchange = !strcmp(buf, "true");
	if (!strcmp(t, "intent")) {
		s->intents = xrealloc(s->intents, (s->nintents + 1) * sizeof(r));
		s->intents[s->nintents++] = r;
	} else {
		s->ops = xrealloc(s->ops, (s->nops + 1) * sizeof(r));
		s->ops[s->nops++] = r;
	}
	return 0;
}

/*
 * Does the backend show that this operation was applied?  Only positive
 * evidence counts: the name an unlink or rename removes existed before it,
 * the name a mkdir creates did not, a file version's hash is its own.
 */
static bool rec_applied(int root_fd, const struct rrec *r)
{
	if (!strcmp(r->t, "file")) {
		int fd = open_beneath(root_fd, r->path, O_RDONLY);
		XXH128_hash_t h;
		uint64_t size;
		char hex[33];
		bool ok = false;
		if (fd < 0)
			return false;
		if (hash_fd(fd, &h, &size) == 0 && size == r->size) {
			hash_hex(h, hex);
			ok = r->xxh3 && !strcmp(hex, r->xxh3);
		}
		close(fd);
		return ok;
	}
	if (!strcmp(r->t, "mkdir") || !strcmp(r->t, "symlink"))
		return path_exists(root_fd, r->path);
	if (!strcmp(r->t, "rmdir") || !strcmp(r->t, "unlink"))
		return !path_exists(root_fd, r->path);
	if (!strcmp(r->t, "rename"))
		return !r->exchange && !path_exists(root_fd, r->path);
	if (!strcmp(r->t, "link"))
		return r->to && path_exists(root_fd, r->to);
	return false;	/* attributes leave no evidence of their own */
}

/* Remove temporary files of mount `id` below dirfd (recursively). */
static uint64_t remove_orphans(int dirfd, const char *id, int depth)
{
	char needle[40];
	uint64_t n = 0;
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d;
	struct dirent *de;

	if (fd < 0 || depth > 256 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	snprintf(needle, sizeof(needle), ".%s.", id);
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    (depth == 0 && !strcmp(de->d_name, ".ckptfs")))
			continue;
		if (!strncmp(de->d_name, ".ckptfs.", 8) && strstr(de->d_name, needle)) {
			if (unlinkat(dirfd, de->d_name, 0) == 0)
				n++;
			continue;
		}
		if (de->d_type == DT_DIR || de->d_type == DT_UNKNOWN) {
			int sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0) {
				n += remove_orphans(sub, id, depth + 1);
				close(sub);
			}
		}
	}
	closedir(d);
	return n;
}

static int mkdir_open(int parent, const char *name)
{
	if (mkdirat(parent, name, 0755) < 0 && errno != EEXIST)
		return -errno;
	int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static void recover(struct manifest *m, int root_fd, struct rscan *s, struct recovery_report *rep)
{
	char buf[512];
	size_t k = 0;
	int n;

	rep->unclean = true;
	snprintf(rep->prev_mount_id, sizeof(rep->prev_mount_id), "%s", s->prev);
	rep->prev_seq_applied = s->prev_durable;
	/* Applied operations form a prefix (P1): it ends at the last with evidence. */
	for (k = s->nops; k > 0 && !rec_applied(root_fd, &s->ops[k - 1]); k--)
		;
	if (k)
		rep->prev_seq_applied = s->ops[k - 1].seq;
	n = snprintf(buf, sizeof(buf), "{\"t\": \"recovered\", \"m\": \"%s\", \"seq\": %llu, \"by\": \"%s\"}",
		     s->prev, (unsigned long long)rep->prev_seq_applied, m->mount_id);
	manifest_append(m, buf, (size_t)n);
	for (size_t i = 0; i < s->nintents; i++) {
		bool dup = false;
		if (s->intents[i].seq <= rep->prev_seq_applied)
			continue;
		for (size_t j = 0; j < i; j++)
			dup |= s->intents[j].seq == s->intents[i].seq;
		if (dup)
			continue;
		rep->inflight_files++;
		ckpt_log(LOG_WARNING, "in flight when the previous mount stopped, never persisted: %s "
			 "(operation %llu)", s->intents[i].path ? s->intents[i].path : "?",
			 (unsigned long long)s->intents[i].seq);
	}
	rep->orphans_removed = remove_orphans(root_fd, s->prev, 0);
	ckpt_log(LOG_WARNING, "recovered from an unclean stop of mount %s: %llu operations applied, "
		 "%zu after them voided, %llu files in flight lost, %llu temporary files removed",
		 s->prev, (unsigned long long)rep->prev_seq_applied, s->nops - k,
		 (unsigned long long)rep->inflight_files, (unsigned long long)rep->orphans_removed);
}

void manifest_node_default(char *buf, size_t len)
{
	char host[256];

	if (gethostname(host, sizeof(host)) < 0 || !host[0] || host[0] == '.' || strchr(host, '/'))
		snprintf(host, sizeof(host), "localhost");
	host[sizeof(host) - 1] = '\0';
	host[strcspn(host, ".")] = '\0';
	snprintf(buf, len, "%s", host);
}

int manifest_open(struct manifest *m, int root_fd, const char *node, const char *mount_id,
		  struct recovery_report *rep)
{
	struct rscan s = { 0 };
	uint64_t good_end, corrupt;
	struct stat st;
	int meta, nodes, fmt, r;
	char buf[512];

	memset(m, 0, sizeof(*m));
	memset(rep, 0, sizeof(*rep));
	m->fd = m->dirfd = -1;
	pthread_mutex_init(&m->lock, NULL);
	snprintf(m->mount_id, sizeof(m->mount_id), "%s", mount_id);
	snprintf(m->host, sizeof(m->host), "%s", node);
	if ((meta = mkdir_open(root_fd, ".ckptfs")) < 0)
		return meta;
	nodes = mkdir_open(meta, "nodes");
	close(meta);
	if (nodes < 0)
		return nodes;
	m->dirfd = mkdir_open(nodes, m->host);
	close(nodes);
	if (m->dirfd < 0)
		return m->dirfd;
	if ((fmt = state_format(m->dirfd)) > MANIFEST_FORMAT) {
		fprintf(stderr, "ckptfs: the backend's metadata is format %d, newer than this "
			"ckptfs understands (%d); upgrade ckptfs\n", fmt, MANIFEST_FORMAT);
		return -EPROTO;
	}
	m->fd = openat(m->dirfd, "manifest.log", O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (m->fd < 0)
		return -errno;
	if ((r = manifest_scan_fd(m->fd, rscan_cb, &s, &good_end, &corrupt)) < 0)
		return r;
	if (fstat(m->fd, &st) == 0 && (uint64_t)st.st_size > good_end) {
		rep->torn_bytes = (uint64_t)st.st_size - good_end;
		if (ftruncate(m->fd, (off_t)good_end) == 0)
			ckpt_log(LOG_WARNING, "manifest: cut a torn tail of %llu bytes at offset %llu",
				 (unsigned long long)rep->torn_bytes, (unsigned long long)good_end);
	}
	rep->corrupt_records = corrupt;
	if (corrupt)
		ckpt_log(LOG_ERR, "manifest: %llu corrupt records skipped", (unsigned long long)corrupt);
	rep->previous = s.prev[0] != '\0';
	if (rep->previous && !s.prev_clean)
		recover(m, root_fd, &s, rep);
	rscan_reset_ops(&s);
	free(s.ops);
	free(s.intents);

	r = snprintf(buf, sizeof(buf), "{\"t\": \"mount\", \"m\": \"%s\", \"host\": \"%s\", "
		     "\"format\": %d, \"time\": %llu}", m->mount_id, m->host, MANIFEST_FORMAT,
		     (unsigned long long)wall_ns());
	manifest_append(m, buf, (size_t)r);
	manifest_sync(m);
	state_write(m, false, 0);
	return 0;
}

void manifest_close(struct manifest *m, uint64_t seq_durable, bool clean)
{
	char buf[256];
	int n;

	if (m->fd < 0)
		return;
	if (clean) {
		n = snprintf(buf, sizeof(buf), "{\"t\": \"unmount\", \"m\": \"%s\", \"seq\": %llu, "
			     "\"time\": %llu}", m->mount_id, (unsigned long long)seq_durable,
			     (unsigned long long)wall_ns());
		manifest_append(m, buf, (size_t)n);
	}
	manifest_sync(m);
	state_write(m, clean, seq_durable);
	close(m->fd);
	close(m->dirfd);
	m->fd = m->dirfd = -1;
	pthread_mutex_destroy(&m->lock);
}
