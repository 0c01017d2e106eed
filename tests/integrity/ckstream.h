/*
 * ckstream.h — a checkpoint stream written through a mount by a child
 * process that logs every operation, and the judging of a backend tree
 * against that log: prefix consistency, whole files, markers, verify.
 * Shared by the crash loop (crash.c: the daemon dies, the page cache
 * survives) and the power-loss loop (powerloss.c: only what was made
 * durable survives).  ckstream.c describes the stream and the checks.
 */
#ifndef CKPTFS_TESTS_CKSTREAM_H
#define CKPTFS_TESTS_CKSTREAM_H

#include "tests/integrity/integ.h"

/*
 * The child: write checkpoints from `step` on through the mount root fd
 * `root`, logging to `log`, until an operation fails (the daemon is gone);
 * exits 0 then.
 */
void cs_stream_main(int root, const char *log, unsigned step) __attribute__((noreturn));

/* One logged operation: M(kdir) V(ersion) R(ename) U(nlink) D(rmdir). */
struct cs_op {
	char kind;
	char path[160], to[160];
	uint64_t size, hash;
};
struct cs_oplog {
	struct cs_op *v;
	size_t n;
	size_t acked;		/* the first `acked` ops were fsync-acknowledged */
	unsigned last_step;
	char end[256];		/* how the stream ended */
};
/* Read the child's log (fails the test on a malformed line). */
void cs_oplog_read(const char *path, struct cs_oplog *l);

/* The state of one judge: the tree it looks at and what it has found. */
struct cs_judge {
	char backend[PATH_MAX];		/* the backend tree judged */
	const char *tag;		/* printed with each violation, or NULL */
	unsigned round;			/* printed with each violation */
	struct it_tree doomed;		/* checkpoint dirs whose deletion began */
	struct it_tree reported;	/* bad verify verdicts already counted */
	unsigned violations;
	unsigned verdicts;		/* of them, bad verify verdicts */
	uint64_t markers, verified;
	unsigned lost_in_flight;	/* rounds whose backend was behind the stream */
};
void cs_violation(struct cs_judge *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
 * The backend tree b equals the model after some prefix p >= acked of the
 * log, starting from `start`; every file in b holds one of its versions.
 */
void cs_check_prefix(struct cs_judge *c, const struct it_tree *start, const struct cs_oplog *l,
		     const struct it_tree *b);
/* Checkpoints whose deletion was attempted promise nothing any more. */
void cs_note_doomed(struct cs_judge *c, const struct cs_oplog *l);
/* Every marker in b names a complete checkpoint; verify (if asked) says OK for it. */
void cs_check_markers(struct cs_judge *c, const struct it_tree *b, bool verify);
/*
 * Right after mounting m (recovery): no temporary names on the backend, the
 * mount shows exactly the backend, verify of it finds nothing bad.  The
 * backend's tree into *b.
 */
void cs_check_after_mount(struct cs_judge *c, struct tmount *m, struct it_tree *b);
/* The daemon's summary of the recovery it just did, if any, on stdout. */
void cs_print_recovery(struct tmount *m);
/* A backend speed for round r: NULL (full) or a CKPTFS_FAULT delay rule. */
const char *cs_round_speed(unsigned r);

#endif
