/*
 * opts.c — the daemon's command line and its checks against the machine.
 *
 * `ckptfs BACKEND MOUNTPOINT [-f] [-d] [-o opt[,opt...]]` — the form that
 * mount.fuse3 uses for fstab entries of type fuse.ckptfs, so fstab, mount(8)
 * and a Slurm prolog all start the daemon the same way.  Options are ckptfs's
 * own (see opts_usage), FUSE mount options passed on to libfuse, or options
 * mount(8) and systemd add for their own use, which are accepted and ignored.
 * Anything else is an error naming the option: one line, exit status 2.
 */
#include "fs/opts.h"
#include "cache/util.h"
#include "backend/backend.h"
#include "backend/marker.h"
#include "backend/safepath.h"
#include "fs/mounts.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_CHUNK (4u << 20)

static int usage_error(const char *fmt, const char *a, const char *b)
{
	fprintf(stderr, "ckptfs: ");
	fprintf(stderr, fmt, a, b);
	fprintf(stderr, "\n");
	return CKPTFS_USAGE_ERROR;
}

/*
 * A NAME=WORD option: *out gets the index of val in words (NULL-ended);
 * any other value is a usage error that lists the words.
 */
static int parse_word(const char *opt, const char *val, const char *const *words, int *out)
{
	char msg[512];
	size_t len;
	int n = 0;

	for (; words[n]; n++) {
		if (val && !strcmp(val, words[n])) {
			*out = n;
			return 0;
		}
	}
	len = (size_t)snprintf(msg, sizeof(msg), "option '%s' must be ", opt);
	for (int i = 0; i < n && len < sizeof(msg); i++)
		len += (size_t)snprintf(msg + len, sizeof(msg) - len, "%s%s",
					i == 0 ? "" : i == n - 1 ? " or " : ", ", words[i]);
	return usage_error("%s, not '%s'", msg, val ? val : "");
}

void opts_usage(FILE *f)
{
	fprintf(f,
"usage: ckptfs BACKEND MOUNTPOINT [-f] [-d] [-o opt[,opt...]]\n"
"\n"
"Mount a write-back checkpoint cache over the directory BACKEND at MOUNTPOINT.\n"
"Writes return once they are in the cache; files are persisted to BACKEND in\n"
"the order they were closed, whole, with XXH3 checksums.\n"
"\n"
"  -f                   stay in the foreground, log to stderr\n"
"  -d                   debug: foreground, FUSE request trace\n"
"  -s                   accepted for FUSE compatibility; ignored\n"
"  -h, --help           this help\n"
"  -V, --version        version\n"
"\n"
"ckptfs options (-o):\n"
"  cache_size=SIZE      cache bytes, K/M/G/T suffixes (default: 1/4 of RAM)\n"
"  chunk_size=SIZE      cache chunk, a power of two from 64K to 64M (default 4M)\n"
"  flush_threads=N      threads writing to the backend, 1-64 (default 2)\n"
"  flush_nice=N         the flushers' nice level, 0-19: where CPUs are short,\n"
"                       the threads answering the trainer go first (default 10)\n"
"  queue_depth=N        I/O requests in flight per flusher, 2-1024 (default 32)\n"
"  max_threads=N        FUSE worker threads, 2-256 (default 16)\n"
"  fsync=durable|lazy   fsync waits for the backend (default), or returns at once\n"
"  io=uring|pwrite      backend I/O engine (default uring; pwrite if unavailable)\n"
"  loop=readv|splice|libfuse  how requests are read from /dev/fuse: readv puts\n"
"                       a write's data straight into a free cache chunk, which\n"
"                       the file takes without a copy where the write starts a\n"
"                       chunk; splice moves it through a pipe; libfuse is\n"
"                       libfuse's own loop, without io_uring or passthrough\n"
"                       (default readv; splice=on|off: loop=splice|libfuse)\n"
"  fuse_uring=on|off    take FUSE requests over io_uring where the kernel offers\n"
"                       it (fuse module parameter enable_uring; default on)\n"
"  passthrough=on|off   let the kernel read clean, durable files opened\n"
"                       read-only straight from the backend (default on)\n"
"  read_direct=on|off   read-only opens that the daemon serves bypass the\n"
"                       kernel's page cache, where the kernel allows shared\n"
"                       mmap of such files (Linux 6.6+; default on)\n"
"  direct=on|off        write to the backend with O_DIRECT where aligned and\n"
"                       supported (default on)\n"
"  manifest=on|off      keep the manifest of checksums that recovery and\n"
"                       ckptfs-ctl verify need (default on)\n"
"  base_copy=auto|on|off  build a new version of a file from its published\n"
"                       file where unchanged (copy_file_range: reflink on\n"
"                       XFS/btrfs, server-side on NFS) instead of from the\n"
"                       cache (default auto: on for XFS, btrfs and NFS)\n"
"  sessions=on|off      offer GPU capture sessions to trainers (libckptfs,\n"
"                       ckptfs.torch.save) (default on)\n"
"  attr_timeout=SEC     kernel attribute and entry cache time (default 1)\n"
"  readahead=SIZE       kernel readahead on the mount, for restores (default 4M;\n"
"                       needs root, 0 keeps the kernel's)\n"
"  drain_timeout=SEC    at unmount, give up on a failing backend after SEC\n"
"                       seconds without progress and rescue the data; a write\n"
"                       waiting that long for cache space, or an fsync for\n"
"                       durability, gets the backend's error; a first open,\n"
"                       listing or xattr read, or a read of file data, whose\n"
"                       backend call hangs that long gets EIO (default 60;\n"
"                       0 waits forever)\n"
"  rescue_dir=PATH      where data the backend refused is saved at exit\n"
"                       (default /var/tmp/ckptfs-rescue)\n"
"\n"
"Many nodes over one backend (see docs/contract.md, \"Beyond one node\"):\n"
"  node=NAME            this daemon's node name under BACKEND/.ckptfs/nodes/\n"
"                       (default: the short hostname); one live daemon per name\n"
"  peers=N|A:B:...      the job's nodes (a count, or names; this node may be\n"
"                       listed): markers wait until every peer has made\n"
"                       durable what it sealed before them (default: none)\n"
"  job=ID|none          the job this daemon serves (default: $SLURM_JOB_ID when\n"
"                       it is such an id); with peers=N only daemons of the\n"
"                       same job count\n"
"  markers=LIST         marker file names, ':'-separated globs (from=GLOB: a\n"
"                       rename's source); +LIST adds to the defaults; none\n"
"  peer_skew=SEC        clock-skew margin added to a marker's time and to a\n"
"                       lease's ttl (default: from the clocks' error bounds,\n"
"                       see the contract)\n"
"  marker_timeout=SEC   after this long, a held marker is handled by\n"
"                       marker_policy (default 0: never)\n"
"  marker_policy=hold|release  keep holding and reporting it (default), or\n"
"                       release it with a log line\n"
"  lease_ttl=SEC        how long a silent node's lease lasts before another\n"
"                       daemon may take the node over (default 30)\n"
"\n"
"FUSE options passed on: allow_other, allow_root, auto_unmount, ro, rw,\n"
"suid, nosuid, dev, nodev, exec, noexec, atime, noatime, sync, async,\n"
"dirsync, max_read=.  Set by ckptfs itself, refused: fsname=, subtype=.\n"
"Ignored, as mount(8) expects: defaults, auto, noauto, user, users, nouser,\n"
"owner, group, _netdev, nofail, relatime, strictatime, lazytime,\n"
"nodiratime, diratime, comment=, x-*.\n");
}

static const char *const fuse_flags[] = {
	"allow_other", "allow_root", "auto_unmount", "ro", "rw", "suid", "nosuid", "dev",
	"nodev", "exec", "noexec", "atime", "noatime", "sync", "async", "dirsync",
	"default_permissions",
};
static const char *const fuse_valued[] = { "max_read" };	/* checked as a number first */
static const char *const ignored[] = {
	"defaults", "auto", "noauto", "user", "users", "nouser", "owner", "group", "_netdev",
	"nofail", "relatime", "strictatime", "lazytime", "nodiratime", "diratime",
};

static bool in_list(const char *key, const char *const *list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(key, list[i]) == 0)
			return true;
	return false;
}

static void fuse_opt_append(struct ckptfs_opts *o, const char *opt)
{
	size_t have = o->fuse_opts ? strlen(o->fuse_opts) : 0, add = strlen(opt);
	o->fuse_opts = xrealloc(o->fuse_opts, have + add + 2);
	if (have)
		o->fuse_opts[have++] = ',';
	memcpy(o->fuse_opts + have, opt, add + 1);
}

static int parse_uint(const char *key, const char *val, unsigned lo, unsigned hi, unsigned *out)
{
	unsigned long long v;

	if (parse_whole(val, lo, hi, &v) < 0) {
		char range[64];
		snprintf(range, sizeof(range), "%u to %u", lo, hi);
		return usage_error("option '%s' needs a whole number from %s", key, range);
	}
	*out = (unsigned)v;
	return 0;
}

static int parse_one(struct ckptfs_opts *o, char *opt)
{
	char *val = strchr(opt, '=');
	uint64_t size;
	int r;

	if (val)
		*val++ = '\0';
	if (!*opt)
		return 0;
	if (!strcmp(opt, "readahead")) {
		if (!val || parse_size(val, &size) < 0 || size > (1ull << 30))
			return usage_error("option '%s' needs a size up to 1G such as 4M, not '%s'", opt,
					   val ? val : "");
		o->readahead = size;
		return 0;
	}
	if (!strcmp(opt, "cache_size") || !strcmp(opt, "chunk_size")) {
		if (!val || parse_size(val, &size) < 0 || size == 0)
			return usage_error("option '%s' needs a size such as 4M or 64G, not '%s'", opt,
					   val ? val : "");
		if (opt[1] == 'a')
			o->cache_size = size;
		else if (size < (64u << 10) || size > (64u << 20) || (size & (size - 1)))
			return usage_error("option '%s=%s' must be a power of two from 64K to 64M",
					   opt, val);
		else
			o->chunk_size = (uint32_t)size;
		return 0;
	}
	if (!strcmp(opt, "flush_threads"))
		return parse_uint(opt, val ? val : "", 1, 64, &o->flush_threads);
	if (!strcmp(opt, "flush_nice"))
		return parse_uint(opt, val ? val : "", 0, 19, &o->flush_nice);
	if (!strcmp(opt, "queue_depth"))
		return parse_uint(opt, val ? val : "", 2, 1024, &o->queue_depth);
	if (!strcmp(opt, "max_threads"))
		return parse_uint(opt, val ? val : "", 2, 256, &o->max_threads);
	static const char *const off_on[] = { "off", "on", NULL };
	int k;
	if (!strcmp(opt, "fsync")) {
		static const char *const words[] = { "durable", "lazy", NULL };
		if ((r = parse_word(opt, val, words, &k)) == 0)
			o->fsync_lazy = k == 1;
		return r;
	}
	if (!strcmp(opt, "base_copy")) {
		static const char *const words[] = { "auto", "on", "off", NULL };
		if ((r = parse_word(opt, val, words, &k)) == 0)
			o->base_copy = k == 0 ? -1 : k == 1;
		return r;
	}
	if (!strcmp(opt, "io")) {
		static const char *const words[] = { "uring", "pwrite", NULL };
		if ((r = parse_word(opt, val, words, &k)) == 0)
			o->io = k == 0 ? BIO_URING : BIO_PWRITE;
		return r;
	}
	if (!strcmp(opt, "loop")) {
		static const char *const words[] = { "readv", "splice", "libfuse", NULL };
		static const enum fuse_loop_kind kinds[] = { LOOP_READV, LOOP_SPLICE, LOOP_LIBFUSE };
		if ((r = parse_word(opt, val, words, &k)) == 0)
			o->loop = kinds[k];
		return r;
	}
	if (!strcmp(opt, "splice")) {	/* the older spelling of loop=splice|libfuse */
		if ((r = parse_word(opt, val, off_on, &k)) == 0)
			o->loop = k ? LOOP_SPLICE : LOOP_LIBFUSE;
		return r;
	}
	if (!strcmp(opt, "direct") || !strcmp(opt, "manifest") ||
	    !strcmp(opt, "sessions") || !strcmp(opt, "fuse_uring") || !strcmp(opt, "passthrough") ||
	    !strcmp(opt, "read_direct")) {
		bool *flag = !strcmp(opt, "sessions") ? &o->sessions : !strcmp(opt, "fuse_uring") ?
			     &o->fuse_uring : !strcmp(opt, "passthrough") ? &o->passthrough :
			     !strcmp(opt, "read_direct") ? &o->read_direct :
			     opt[0] == 'd' ? &o->direct : &o->manifest;
		if ((r = parse_word(opt, val, off_on, &k)) == 0)
			*flag = k == 1;
		return r;
	}
	if (!strcmp(opt, "attr_timeout") || !strcmp(opt, "drain_timeout")) {
		double t;
		if (parse_seconds(val, 0, 86400 * 7, &t) < 0)
			return usage_error("option '%s' needs seconds from 0 to 604800, not '%s'", opt,
					   val ? val : "");
		if (opt[0] == 'a')
			o->attr_timeout = t;
		else
			o->drain_timeout = t;
		return 0;
	}
	if (!strcmp(opt, "node")) {
		if (!val || !nodes_name_ok(val))
			return usage_error("option 'node=%s' is not a node name: 1-255 letters, digits, "
					   "'.', '-' or '_', not starting with '.' or '-'%s",
					   val ? val : "", "");
		snprintf(o->nodes.node, sizeof(o->nodes.node), "%s", val);
		return 0;
	}
	if (!strcmp(opt, "job")) {
		if (val && !strcmp(val, "none")) {	/* $SLURM_JOB_ID not taken */
			o->nodes.job[0] = '\0';
			return 0;
		}
		if (!val || !nodes_job_ok(val))
			return usage_error("option 'job=%s' is not a job id (1-63 letters, digits, "
					   "'.', '-', '_' or '+', starting with a letter or digit) "
					   "or %s", val ? val : "", "none");
		snprintf(o->nodes.job, sizeof(o->nodes.job), "%s", val);
		return 0;
	}
	if (!strcmp(opt, "peers") || !strcmp(opt, "markers")) {
		char why[512];
		if ((opt[0] == 'p' ? nodes_parse_peers(&o->nodes, val, why, sizeof(why))
				   : marker_configure(val ? val : "", why, sizeof(why))) < 0)
			return usage_error("%s%s", why, "");
		if (opt[0] == 'm') {
			free(o->markers);
			o->markers = xstrdup(val);
		}
		return 0;
	}
	if (!strcmp(opt, "marker_policy")) {
		if (val && !strcmp(val, "hold"))
			o->nodes.marker_policy = MARKER_HOLD;
		else if (val && !strcmp(val, "release"))
			o->nodes.marker_policy = MARKER_RELEASE;
		else
			return usage_error("option '%s' must be marker_policy=hold or "
					   "marker_policy=release, not '%s'", opt, val ? val : "");
		return 0;
	}
	if (!strcmp(opt, "peer_skew") || !strcmp(opt, "marker_timeout") ||
	    !strcmp(opt, "lease_ttl")) {
		double t;
		if (parse_seconds(val, opt[0] == 'l' ? 1 : 0, 86400 * 7, &t) < 0)
			return usage_error(opt[0] == 'l' ? "option '%s' needs seconds from 1 to 604800, "
					   "not '%s'" : "option '%s' needs seconds from 0 to 604800, "
					   "not '%s'", opt, val ? val : "");
		if (opt[0] == 'p')
			o->nodes.peer_skew = t;
		else if (opt[0] == 'm')
			o->nodes.marker_timeout = t;
		else
			o->nodes.lease_ttl = t;
		return 0;
	}
	if (!strcmp(opt, "rescue_dir")) {
		if (!val || val[0] != '/')
			return usage_error("option '%s' needs an absolute path, not '%s'", opt,
					   val ? val : "");
		free(o->rescue_dir);
		o->rescue_dir = xstrdup(val);
		return 0;
	}
	if (in_list(opt, ignored, CKPT_ARRAY_LEN(ignored)) || !strncmp(opt, "x-", 2) ||
	    !strcmp(opt, "comment"))
		return 0;
	/* The mount's source and type are how ckptfs-ctl and ckptfs-stat find it and its backend. */
	if (!strcmp(opt, "fsname") || !strcmp(opt, "subtype"))
		return usage_error("option '%s' is set by ckptfs itself (the backend's path, and "
				   "'ckptfs'), which its tools rely on; leave it out%s", opt, "");
	unsigned mr;
	if (!strcmp(opt, "max_read") && (r = parse_uint(opt, val ? val : "", 1, UINT_MAX, &mr)))
		return r;	/* libfuse would refuse it, after the backend started */
	if ((!val && in_list(opt, fuse_flags, CKPT_ARRAY_LEN(fuse_flags))) ||
	    (val && in_list(opt, fuse_valued, CKPT_ARRAY_LEN(fuse_valued)))) {
		if (!strcmp(opt, "allow_other"))
			o->allow_other = true;
		if (val) {
			char buf[4096];
			snprintf(buf, sizeof(buf), "%s=%s", opt, val);
			fuse_opt_append(o, buf);
		} else if (strcmp(opt, "default_permissions") != 0) {
			fuse_opt_append(o, opt);
		}
		return 0;
	}
	r = usage_error("unknown option '%s'%s (see ckptfs --help)", opt,
			val ? " with a value" : "");
	return r;
}

static bool path_within(const char *inner, const char *outer);

static int parse_optstr(struct ckptfs_opts *o, const char *s)
{
	char *dup = xstrdup(s), *save = NULL, *tok;
	int r = 0;

	for (tok = strtok_r(dup, ",", &save); tok && !r; tok = strtok_r(NULL, ",", &save))
		r = parse_one(o, tok);
	free(dup);
	return r;
}

int opts_parse(int argc, char **argv, struct ckptfs_opts *o)
{
	int npos = 0, r;

	memset(o, 0, sizeof(*o));
	o->chunk_size = DEFAULT_CHUNK;
	o->flush_threads = 2;
	o->queue_depth = 32;
	o->max_threads = 16;
	o->io = BIO_URING;
	o->loop = LOOP_READV;
	o->fuse_uring = true;
	o->passthrough = true;
	o->read_direct = true;
	o->flush_nice = 10;
	o->base_copy = -1;
	o->direct = true;
	o->manifest = true;
	o->sessions = true;
	o->attr_timeout = 1.0;
	o->readahead = 4u << 20;
	o->drain_timeout = 60;
	o->rescue_dir = xstrdup("/var/tmp/ckptfs-rescue");
	o->nodes.peer_skew = -1;	/* derived from the clocks */
	o->nodes.lease_ttl = 30;
	o->nodes.marker_policy = MARKER_HOLD;
	const char *job = getenv("SLURM_JOB_ID");	/* job= overrides it */
	if (job && nodes_job_ok(job))
		snprintf(o->nodes.job, sizeof(o->nodes.job), "%s", job);

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			opts_usage(stdout);
			return -1;
		}
		if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
			printf("ckptfs %s\n", CKPTFS_VERSION);
			return -1;
		}
		if (!strcmp(a, "-f")) {
			o->foreground = true;
		} else if (!strcmp(a, "-d")) {
			o->debug = o->foreground = true;
		} else if (!strcmp(a, "-s")) {
			/* single-threaded: accepted for FUSE compatibility, ignored */
		} else if (!strncmp(a, "-o", 2)) {
			const char *s = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);
			if (!s)
				return usage_error("%s%s", "option -o needs a value", "");
			if ((r = parse_optstr(o, s)))
				return r;
		} else if (a[0] == '-' && a[1]) {
			return usage_error("unknown argument '%s'%s (see ckptfs --help)", a, "");
		} else if (npos == 0) {
			o->backend = xstrdup(a);
			npos++;
		} else if (npos == 1) {
			o->mountpoint = xstrdup(a);
			npos++;
		} else {
			return usage_error("unexpected argument '%s'%s: give BACKEND and MOUNTPOINT only",
					   a, "");
		}
	}
	if (npos < 2) {
		fprintf(stderr, "ckptfs: missing %s (usage: ckptfs BACKEND MOUNTPOINT [-f] [-d] "
			"[-o opt,...])\n", npos == 0 ? "BACKEND and MOUNTPOINT" : "MOUNTPOINT");
		return CKPTFS_USAGE_ERROR;
	}
	if (path_within(o->rescue_dir, o->backend ? o->backend : "") && o->backend[0] == '/')
		return usage_error("rescue_dir '%s' lies inside the backend '%s'; it must survive the "
				   "backend failing", o->rescue_dir, o->backend);
	if (o->fuse_opts && strstr(o->fuse_opts, "allow_other") && strstr(o->fuse_opts, "allow_root"))
		return usage_error("options '%s' and '%s' exclude each other; pick one",
				   "allow_other", "allow_root");
	return 0;
}

/* The type of the mount at `path` if it is a mount point, else NULL. */
static char *mounted_at(const char *path)
{
	struct mountent *m;
	int n = mounts_read(&m), i;
	char *type = NULL;

	if (n < 0)
		return NULL;
	if ((i = mounts_find(m, n, path)) >= 0)
		type = xstrdup(m[i].fstype);
	mounts_free(m, n);
	return type;
}

static bool path_within(const char *inner, const char *outer)
{
	size_t n = strlen(outer);
	if (strcmp(outer, "/") == 0)
		return true;
	return strncmp(inner, outer, n) == 0 && (inner[n] == '/' || inner[n] == '\0');
}

/*
 * Where path lies once its existing part is resolved (symlinks, ".",
 * "//"), the part not made yet appended as written: into out; false if
 * nothing of it resolves.
 */
static bool resolve_existing(const char *path, char *out, size_t len)
{
	char probe[PATH_MAX], real[PATH_MAX];
	size_t n = strlen(path);

	if (n >= sizeof(probe))
		return false;
	memcpy(probe, path, n + 1);
	for (;;) {
		if (realpath(probe, real)) {
			const char *rest = path + strlen(probe);
			while (*rest == '/')
				rest++;
			return snprintf(out, len, "%s%s%s", real,
					*rest && strcmp(real, "/") ? "/" : "", rest) < (int)len;
		}
		char *slash = strrchr(probe, '/');
		if (!slash || slash == probe)
			return false;
		*slash = '\0';
	}
}

int opts_validate(struct ckptfs_opts *o)
{
	struct stat st;
	char buf[PATH_MAX], sz1[32], sz2[32], why[1024];
	char *type;

	if (stat(o->backend, &st) < 0)
		return usage_error("backend '%s': %s", o->backend, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return usage_error("backend '%s' is not a directory%s", o->backend, "");
	if (access(o->backend, R_OK | W_OK | X_OK) < 0)
		return usage_error("backend '%s' is not writable: %s", o->backend, strerror(errno));
	if (safepath_resolve(o->backend, 0, buf, sizeof(buf), why, sizeof(why)) < 0)
		return usage_error("backend '%s': %s", o->backend, why);
	o->backend_real = xstrdup(buf);
	/* Where flock stays on this client, the lease decides across clients (lease.c). */
	char *fl = o->nodes.flock_local;
	if (getenv("CKPTFS_FLOCK_LOCAL"))	/* tests: such a backend, on a local disk */
		snprintf(fl, sizeof(o->nodes.flock_local), "CKPTFS_FLOCK_LOCAL is set");
	else if (mounts_flock_global_at(o->backend_real, fl, sizeof(o->nodes.flock_local)))
		fl[0] = '\0';

	if (stat(o->mountpoint, &st) < 0)
		return usage_error("mountpoint '%s': %s", o->mountpoint, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return usage_error("mountpoint '%s' is not a directory%s", o->mountpoint, "");
	if (safepath_resolve(o->mountpoint, SAFEPATH_UNCHANGEABLE, buf, sizeof(buf), why,
			     sizeof(why)) < 0)
		return usage_error("mountpoint '%s': %s", o->mountpoint, why);
	o->mountpoint_real = xstrdup(buf);
	if ((type = mounted_at(o->mountpoint_real)) && strcmp(o->mountpoint_real, "/") != 0) {
		usage_error("mountpoint '%s' is already mounted (%s); unmount it first",
			    o->mountpoint, type);
		free(type);
		return CKPTFS_USAGE_ERROR;
	}
	free(type);
	if (strcmp(o->mountpoint_real, o->backend_real) != 0 &&
	    path_within(o->mountpoint_real, o->backend_real))
		return usage_error("mountpoint '%s' lies inside the backend '%s'; pick one outside it",
				   o->mountpoint, o->backend);

	/* The command line's check compared the names as written: now where they lead. */
	if (resolve_existing(o->rescue_dir, buf, sizeof(buf)) && path_within(buf, o->backend_real))
		return usage_error("rescue_dir '%s' lies inside the backend '%s'; it must survive the "
				   "backend failing", o->rescue_dir, o->backend);
	/* Checked (and made) now, so a bad one fails the mount, not the rescue. */
	if (backend_rescue_dir_check(o->rescue_dir, why, sizeof(why)) < 0)
		return usage_error("rescue_dir '%s': %s", o->rescue_dir, why);

	uint64_t avail = mem_available();
	if (!o->cache_size) {
		o->cache_size = mem_total() / 4;
		if (avail && o->cache_size > avail / 2)
			o->cache_size = avail / 2;
		if (o->cache_size < 64ull << 20)
			o->cache_size = 64ull << 20;
	}
	o->cache_size -= o->cache_size % o->chunk_size;
	if (o->cache_size < 2ull * o->chunk_size) {
		snprintf(buf, sizeof(buf), "%s", format_size(o->chunk_size, sz1, sizeof(sz1)));
		return usage_error("cache_size must hold at least two chunks (2 x %s); raise it%s",
				   buf, "");
	}
	if (avail && o->cache_size > avail)
		return usage_error("cache_size=%s exceeds available memory (%s)",
				   format_size(o->cache_size, sz1, sizeof(sz1)),
				   format_size(avail, sz2, sizeof(sz2)));
	return 0;
}

void opts_free(struct ckptfs_opts *o)
{
	free(o->backend);
	free(o->mountpoint);
	free(o->backend_real);
	free(o->mountpoint_real);
	free(o->fuse_opts);
	free(o->rescue_dir);
	free(o->markers);
	nodes_opts_free(&o->nodes);
	memset(o, 0, sizeof(*o));
}
