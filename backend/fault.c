/*
 * fault.c — fault injection for the backend system call table (bsys.h).
 *
 * CKPTFS_FAULT holds rules separated by ';', each a list of key=value:
 *   op=NAME[|NAME...]  calls to affect: bsys_op_names, or "data" (pwrite,
 *                      fdatasync, fsync, openat, fallocate,
 *                      copy_file_range), "meta" (rename, unlink,
 *                      mkdir, symlink, link, mknod, chmod, chown, utimens,
 *                      fchmod, fchown, futimens), "any"
 *   err=ERRNO|short|zero|kill  error to return (EIO, ENOSPC, EDQUOT, ...) or,
 *                      for writes, write only half (short) or nothing and
 *                      return 0 (zero: appends only); kill: the process SIGKILLs
 *                      itself instead of making the call (a crash at that
 *                      exact step)
 *   delay_ms=N         sleep before the call (a slow backend)
 *   after=N            let the first N matching calls through
 *   count=N            inject at most N times
 *   while=PATH         inject only while PATH exists (tests toggle recovery)
 *   hold=PATH          the call waits while PATH exists (a hung backend that
 *                      the test lets go by removing PATH)
 *   name=SUBSTR        only calls whose file name contains SUBSTR (fsync and
 *                      fdatasync: the fd's path, as /proc/self/fd shows it)
 *   flagged=1          renames that pass flags (RENAME_NOREPLACE, ...) only:
 *                      with err=EINVAL, a backend without renameat2 flags
 *   lose=1             fsync and fdatasync of an append-only file (the
 *                      manifest log): the failure also loses what the sync
 *                      was to write, as a kernel that marks the pages of a
 *                      failed write-back clean does — under CKPTFS_POWERLOSS
 *                      those bytes stay zeros in every later durable copy
 *                      (powerloss.c, bsys_powerloss_lose)
 * Example: CKPTFS_FAULT='op=pwrite,err=ENOSPC,while=/tmp/full'
 *
 * Used by the test suite; harmless and inert when the variable is unset.
 */
#include "backend/bsys.h"
#include "cache/util.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAULT_SHORT (-1)
#define FAULT_KILL (-2)
#define FAULT_ZERO (-3)

struct fault_rule {
	uint32_t ops;		/* bit per enum bsys_op */
	int err;		/* errno, FAULT_SHORT, or 0 (delay only) */
	unsigned delay_ms;
	uint64_t after, count;
	atomic_uint_least64_t seen, fired;
	char *while_path;
	char *hold_path;
	char *name;
	bool flagged;	/* renames with flags only */
	bool lose;	/* a failed sync loses its dirty bytes (powerloss.c) */
};

static struct fault_rule *rules;
static unsigned nrules;
static struct bsys real;

static const struct { const char *name; int err; } errnames[] = {
	{ "EIO", EIO }, { "ENOSPC", ENOSPC }, { "EDQUOT", EDQUOT }, { "EROFS", EROFS },
	{ "EACCES", EACCES }, { "EPERM", EPERM }, { "ENOENT", ENOENT }, { "EAGAIN", EAGAIN },
	{ "EINTR", EINTR }, { "ESTALE", ESTALE }, { "ETIMEDOUT", ETIMEDOUT },
	{ "ENAMETOOLONG", ENAMETOOLONG }, { "ELOOP", ELOOP },
	{ "EXDEV", EXDEV }, { "EOPNOTSUPP", EOPNOTSUPP }, { "ENOLCK", ENOLCK }, { "EINVAL", EINVAL },
};

static uint32_t parse_ops(const char *s)
{
	uint32_t ops = 0;
	char *dup = xstrdup(s), *save, *tok;

	for (tok = strtok_r(dup, "|", &save); tok; tok = strtok_r(NULL, "|", &save)) {
		if (!strcmp(tok, "any")) {
			ops |= (uint32_t)((1ull << BOP_COUNT) - 1);	/* a bit per op: BOP_COUNT <= 32 */
		} else if (!strcmp(tok, "data")) {
			ops |= 1u << BOP_PWRITE | 1u << BOP_FDATASYNC | 1u << BOP_FSYNC | 1u << BOP_OPENAT |
			       1u << BOP_FALLOCATE | 1u << BOP_COPY_FILE_RANGE;
		} else if (!strcmp(tok, "meta")) {
			ops |= 1u << BOP_RENAMEAT2 | 1u << BOP_UNLINKAT | 1u << BOP_MKDIRAT |
			       1u << BOP_SYMLINKAT | 1u << BOP_LINKAT | 1u << BOP_FCHMODAT |
			       1u << BOP_FCHOWNAT | 1u << BOP_UTIMENSAT | 1u << BOP_MKNODAT |
			       1u << BOP_FCHMOD | 1u << BOP_FCHOWN | 1u << BOP_FUTIMENS;
		} else {
			unsigned i;
			for (i = 0; i < BOP_COUNT; i++)
				if (!strcmp(tok, bsys_op_names[i]))
					break;
			if (i == BOP_COUNT) {
				free(dup);
				return 0;
			}
			ops |= 1u << i;
		}
	}
	free(dup);
	return ops;
}

static int parse_rule(char *spec, struct fault_rule *r)
{
	char *save, *kv;

	memset(r, 0, sizeof(*r));
	r->count = UINT64_MAX;
	for (kv = strtok_r(spec, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(kv, '=');
		if (!eq)
			return -EINVAL;
		*eq++ = '\0';
		if (!strcmp(kv, "op")) {
			if (!(r->ops = parse_ops(eq)))
				return -EINVAL;
		} else if (!strcmp(kv, "err")) {
			unsigned i;
			if (!strcmp(eq, "short") || !strcmp(eq, "kill") || !strcmp(eq, "zero")) {
				r->err = eq[0] == 's' ? FAULT_SHORT : eq[0] == 'z' ? FAULT_ZERO : FAULT_KILL;
				continue;
			}
			for (i = 0; i < CKPT_ARRAY_LEN(errnames); i++)
				if (!strcmp(eq, errnames[i].name))
					r->err = errnames[i].err;
			if (!r->err)
				return -EINVAL;
		} else if (!strcmp(kv, "delay_ms")) {
			r->delay_ms = (unsigned)strtoul(eq, NULL, 10);
		} else if (!strcmp(kv, "after")) {
			r->after = strtoull(eq, NULL, 10);
		} else if (!strcmp(kv, "count")) {
			r->count = strtoull(eq, NULL, 10);
		} else if (!strcmp(kv, "while")) {
			r->while_path = xstrdup(eq);
		} else if (!strcmp(kv, "hold")) {
			r->hold_path = xstrdup(eq);
		} else if (!strcmp(kv, "name")) {
			r->name = xstrdup(eq);
		} else if (!strcmp(kv, "flagged")) {
			r->flagged = strcmp(eq, "0") != 0;
		} else if (!strcmp(kv, "lose")) {
			r->lose = strcmp(eq, "0") != 0;
		} else {
			return -EINVAL;
		}
	}
	return r->ops ? 0 : -EINVAL;
}

/* Whether the error this thread was last given came from a lose=1 rule. */
static _Thread_local bool injected_lose;

/* The error to inject for this call (0: none, FAULT_SHORT), after any delay. */
static int fault_check_flags(enum bsys_op op, const char *name, unsigned flags)
{
	int inject = 0;

	injected_lose = false;

	for (unsigned i = 0; i < nrules; i++) {
		struct fault_rule *r = &rules[i];
		if (!(r->ops & (1u << op)) || (r->flagged && !flags))
			continue;
		if (r->name && (!name || !strstr(name, r->name)))
			continue;
		if (r->while_path && access(r->while_path, F_OK) != 0)
			continue;
		if (atomic_fetch_add(&r->seen, 1) < r->after)
			continue;
		if (atomic_fetch_add(&r->fired, 1) >= r->count)
			continue;
		if (r->delay_ms)
			usleep(r->delay_ms * 1000u);
		while (r->hold_path && access(r->hold_path, F_OK) == 0)
			usleep(10 * 1000);
		if (r->err == FAULT_KILL)
			raise(SIGKILL);
		if (r->err && !inject) {
			inject = r->err;
			injected_lose = r->lose;
		}
	}
	return inject;
}

static int fault_check(enum bsys_op op, const char *name)
{
	return fault_check_flags(op, name, 0);
}

#define CHECK(op, name)                                              \
	int f_ = fault_check(op, name);                              \
	if (f_ > 0)                                                  \
		return -f_

static int f_openat(int d, const char *n, int fl, mode_t m) { CHECK(BOP_OPENAT, n); return real.openat(d, n, fl, m); }
static int f_close(int fd) { return real.close(fd); }
static ssize_t f_pread(int fd, void *b, size_t n, off_t o) { CHECK(BOP_PREAD, NULL); return real.pread(fd, b, n, o); }
static ssize_t f_pwrite(int fd, const void *b, size_t n, off_t o)
{
	CHECK(BOP_PWRITE, NULL);
	if (f_ == FAULT_SHORT && n > 1)
		n /= 2;
	return real.pwrite(fd, b, n, o);
}
/* The path of fd, for name= rules on calls that take none; NULL if no rule asks. */
static const char *fd_name(int fd, char *buf, size_t len)
{
	char link[64];
	ssize_t n;
	bool wanted = false;

	for (unsigned i = 0; i < nrules && !wanted; i++)
		wanted = rules[i].name != NULL;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	if (!wanted || (n = readlink(link, buf, len - 1)) < 0)
		return NULL;
	buf[n] = '\0';
	return buf;
}

/* A sync's injected error; with lose=1 the bytes it was to write are lost too. */
static int sync_fault(enum bsys_op op, int fd)
{
	char p[PATH_MAX];
	int f = fault_check(op, fd_name(fd, p, sizeof(p)));

	if (f > 0 && injected_lose)
		bsys_powerloss_lose(fd);
	return f > 0 ? -f : 0;
}

static int f_fsync(int fd)
{
	int r = sync_fault(BOP_FSYNC, fd);
	return r ? r : real.fsync(fd);
}
static int f_fdatasync(int fd)
{
	int r = sync_fault(BOP_FDATASYNC, fd);
	return r ? r : real.fdatasync(fd);
}
static int f_ftruncate(int fd, off_t l) { CHECK(BOP_FTRUNCATE, NULL); return real.ftruncate(fd, l); }
static int f_renameat2(int od, const char *on, int nd, const char *nn, unsigned fl)
{
	int f_ = fault_check_flags(BOP_RENAMEAT2, nn, fl);
	if (f_ > 0)
		return -f_;
	return real.renameat2(od, on, nd, nn, fl);
}
static int f_unlinkat(int d, const char *n, int fl) { CHECK(BOP_UNLINKAT, n); return real.unlinkat(d, n, fl); }
static int f_mkdirat(int d, const char *n, mode_t m) { CHECK(BOP_MKDIRAT, n); return real.mkdirat(d, n, m); }
static int f_symlinkat(const char *t, int d, const char *n) { CHECK(BOP_SYMLINKAT, n); return real.symlinkat(t, d, n); }
static int f_linkat(int od, const char *on, int nd, const char *nn) { CHECK(BOP_LINKAT, nn); return real.linkat(od, on, nd, nn); }
static int f_fchmodat(int d, const char *n, mode_t m) { CHECK(BOP_FCHMODAT, n); return real.fchmodat(d, n, m); }
static int f_fchownat(int d, const char *n, uid_t u, gid_t g, int at)
{
	CHECK(BOP_FCHOWNAT, n);
	return real.fchownat(d, n, u, g, at);
}
static int f_utimensat(int d, const char *n, const struct timespec ts[2], int at)
{
	CHECK(BOP_UTIMENSAT, n);
	return real.utimensat(d, n, ts, at);
}
static int f_setxattr(int d, const char *n, const char *k, const void *v, size_t l, int fl, int at)
{
	CHECK(BOP_SETXATTR, n);
	return real.setxattr(d, n, k, v, l, fl, at);
}
static int f_fsetxattr(int fd, const char *k, const void *v, size_t l, int fl)
{
	char p[PATH_MAX];
	CHECK(BOP_SETXATTR, fd_name(fd, p, sizeof(p)));
	return real.fsetxattr(fd, k, v, l, fl);
}
static int f_removexattr(int d, const char *n, const char *k, int at)
{
	CHECK(BOP_REMOVEXATTR, n);
	return real.removexattr(d, n, k, at);
}
static ssize_t f_getxattr(int d, const char *n, const char *k, void *b, size_t l, int at)
{
	CHECK(BOP_GETXATTR, n);
	return real.getxattr(d, n, k, b, l, at);
}
static ssize_t f_listxattr(int d, const char *n, char *b, size_t l, int at)
{
	CHECK(BOP_LISTXATTR, n);
	return real.listxattr(d, n, b, l, at);
}
static int f_fstatat(int d, const char *n, struct stat *st) { CHECK(BOP_FSTATAT, n); return real.fstatat(d, n, st); }
static ssize_t f_readlinkat(int d, const char *n, char *b, size_t l) { CHECK(BOP_READLINKAT, n); return real.readlinkat(d, n, b, l); }
static int f_mknodat(int d, const char *n, mode_t m, dev_t dev) { CHECK(BOP_MKNODAT, n); return real.mknodat(d, n, m, dev); }
static int f_readdir(int d, int (*fn)(void *, const char *), void *arg)
{
	CHECK(BOP_READDIR, NULL);
	return real.readdir(d, fn, arg);
}
static int f_fchmod(int fd, mode_t m) { CHECK(BOP_FCHMOD, NULL); return real.fchmod(fd, m); }
static int f_fchown(int fd, uid_t u, gid_t g) { CHECK(BOP_FCHOWN, NULL); return real.fchown(fd, u, g); }
static int f_futimens(int fd, const struct timespec ts[2]) { CHECK(BOP_FUTIMENS, NULL); return real.futimens(fd, ts); }
static int f_flock(int fd, int op) { CHECK(BOP_FLOCK, NULL); return real.flock(fd, op); }
_Static_assert(BOP_COUNT <= 32, "fault rules keep a bit per operation in 32");
static int f_fstatvfs(int fd, struct statvfs *sv) { CHECK(BOP_FSTATVFS, NULL); return real.fstatvfs(fd, sv); }
static ssize_t f_append(int fd, const void *b, size_t n, off_t o)
{
	CHECK(BOP_APPEND, NULL);
	if (f_ == FAULT_SHORT && n > 1)
		n /= 2;
	if (f_ == FAULT_ZERO)
		return 0;
	return real.append(fd, b, n, o);
}
static int f_fallocate(int fd, int m, off_t o, off_t l) { CHECK(BOP_FALLOCATE, NULL); return real.fallocate(fd, m, o, l); }
static ssize_t f_copy_file_range(int in, off_t io, int out, off_t oo, size_t n)
{
	CHECK(BOP_COPY_FILE_RANGE, NULL);
	if (f_ == FAULT_SHORT && n > 1)
		n /= 2;
	return real.copy_file_range(in, io, out, oo, n);
}
static ssize_t f_splice(int fd, off_t *o, int pipe_w, size_t n)
{
	CHECK(BOP_SPLICE, NULL);
	return real.splice(fd, o, pipe_w, n);
}
static int f_io_result(enum bsys_op op, int fd, size_t len, int res)
{
	char p[PATH_MAX];
	/* Syncs are named as bsys's are (name=); writes, as there, are not. */
	bool named = op == BOP_FSYNC || op == BOP_FDATASYNC;
	int f = fault_check(op, named ? fd_name(fd, p, sizeof(p)) : NULL);
	if (f > 0)
		return -f;
	if (f == FAULT_SHORT && res > 1)
		return res / 2;
	return real.io_result(op, fd, len, res);	/* a layer beneath (powerloss.c) */
}

int bsys_faults_from_env(void)
{
	const char *env = getenv("CKPTFS_FAULT");
	char *dup, *save, *spec;

	if (!env || !*env)
		return 0;
	dup = xstrdup(env);
	for (spec = strtok_r(dup, ";", &save); spec; spec = strtok_r(NULL, ";", &save)) {
		char *copy = xstrdup(spec);
		rules = xrealloc(rules, (nrules + 1) * sizeof(*rules));
		if (parse_rule(copy, &rules[nrules]) < 0) {
			fprintf(stderr, "ckptfs: CKPTFS_FAULT: bad rule '%s'\n", spec);
			free(copy);
			free(dup);
			return -EINVAL;
		}
		free(copy);
		nrules++;
	}
	free(dup);
	real = bsys;
	bsys = (struct bsys){
		.openat = f_openat, .close = f_close, .pread = f_pread, .pwrite = f_pwrite,
		.fsync = f_fsync, .fdatasync = f_fdatasync, .ftruncate = f_ftruncate,
		.renameat2 = f_renameat2, .unlinkat = f_unlinkat, .mkdirat = f_mkdirat,
		.symlinkat = f_symlinkat, .linkat = f_linkat, .fchmodat = f_fchmodat,
		.fchownat = f_fchownat, .utimensat = f_utimensat, .setxattr = f_setxattr, .fsetxattr = f_fsetxattr,
		.removexattr = f_removexattr, .getxattr = f_getxattr, .listxattr = f_listxattr,
		.fstatat = f_fstatat, .readlinkat = f_readlinkat, .mknodat = f_mknodat,
		.readdir = f_readdir, .fchmod = f_fchmod, .fchown = f_fchown,
		.futimens = f_futimens, .io_result = f_io_result, .append = f_append,
		.fallocate = f_fallocate, .copy_file_range = f_copy_file_range, .flock = f_flock, .fstatvfs = f_fstatvfs,
		.splice = f_splice, .faults_active = 1,
	};
	return 0;
}
