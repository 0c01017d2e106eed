/*
 * recover_evidence.c — recovery's evidence for a file version whose
 * contents its path may have held before (backend/recover.c), at the API
 * level: histories written through the manifest's own API (mlog.c), a
 * crash by _exit before the clean unmount, then the next mount's recovery
 * and `ckptfs-ctl verify` judged.
 *
 * A version is no evidence of its own record when its path held the same
 * contents already, so recovery must know what each path held after the
 * operations that really happened, not after every record:
 *  - a version recovery voided (never applied) held nothing: the same
 *    contents written again by the next mount and applied are evidence
 *    (the crash loop's `ds/zero_to_fp32.py`, rewritten unchanged each step,
 *    showed UNTRACKED when this went wrong);
 *  - a version an administrator skipped ("void" in the same mount) likewise;
 *  - an unlinked path holds nothing: a file written, removed and written
 *    again with the same contents is evidence;
 *  - a renamed directory takes its files' contents along: the old name
 *    written again is evidence.
 * In each case every operation must be found applied (nothing voided) and
 * verify must say OK for every file: no UNTRACKED, MISMATCH or MISSING.
 * A case keeps the rule itself: a version rewritten unchanged and not
 * applied, after an operation that was not applied either, must not be
 * taken for applied, while one with different contents still counts.  And a shorter prefix
 * that leaves a path holding what a later operation would put there is no
 * evidence for that operation (backend/rprefix.c): a checkpoint directory
 * renamed away, made again and its unchanged file rewritten, none of it
 * applied (judged one operation at a time, the rename, mkdir and file were
 * taken for applied and verify found the renamed files MISSING), or applied
 * up to the unchanged file; a marker written as DCP does (a temporary file
 * renamed into place) after a shard, with neither the temporary file nor
 * the rename applied (a name that never existed is no evidence of its
 * rename), or both applied.  Judged by every path at once, the backend
 * must also not be outvoted: a file removed behind the mount whose next
 * version was not applied (its directory's existence alone once counted
 * it); a hard link's other name, relinked by the daemon to a new version
 * the replay does not carry, then a new file and that name rewritten
 * unchanged, neither applied (a tie once claimed the new file); a symlink
 * marker swapped into place by rename, not applied and applied (any object
 * at the name once counted as the new link); a same-size file renamed over
 * another (`save(tmp); rename`), not applied and applied (a file carried by
 * a rename was judged by its size alone); a batch applied whole whose
 * marker was then rewritten behind the mount (its shards, found by their
 * digests, still count).  And what another node left at a name this one
 * never wrote: files it wrote with the very bytes of this node's next
 * versions, after this node's missing shard (they once outvoted it); a
 * same-size file it wrote, replaced here by rename (judged by size alone
 * once); its file linked to a temporary name and renamed over ours (a name
 * that never existed, gone, once counted as a trace) — none applied; its
 * checkpoint removed at the end of a batch, applied (a removal of a name
 * the replay did not know once left no trace, and was voided).  And a
 * backend that fails (EIO) a lookup or a read while recovery judges is no
 * evidence either way: a version not applied whose name or bytes could not
 * be read is never claimed, nor one applied (it is left for verify to
 * report, not recorded as durable on no evidence).
 */
#include "tests/integrity/mlog.h"
#include "backend/bsys.h"

#include <sys/wait.h>
#include <unistd.h>

/* Run fn(l) in a child that opens the node as mount `id` and crashes (no unmount record). */
static void crashed_mount(const char *root, const char *id, void (*fn)(struct mlog *))
{
	pid_t pid = fork();
	if (pid == 0) {
		struct mlog l;
		ml_open(&l, root, "n1", id);
		fn(&l);
		manifest_sync(&l.m);
		_exit(0);
	}
	int st;
	CHECK_SYS(waitpid(pid, &st, 0));
	ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Mount once more and recover the last crash: it must find `applied`. */
static void recover(const char *root, const char *id, uint64_t applied)
{
	struct mlog l;

	ml_open(&l, root, "n1", id);
	ASSERT_TRUE(l.rep.unclean);
	ASSERT_EQ(l.rep.prev_seq_applied, applied);
	ml_close(&l);
}

/*
 * recover(), with the backend failing as CKPTFS_FAULT rule `fault` says
 * (backend/fault.c), in a child: the wrappers stay in that process.
 */
static void recover_faulty(const char *root, const char *id, uint64_t applied, const char *fault)
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		if (setenv("CKPTFS_FAULT", fault, 1) < 0 || bsys_faults_from_env() < 0)
			_exit(3);
		recover(root, id, applied);
		_exit(0);
	}
	CHECK_SYS(waitpid(pid, &st, 0));
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		FAILF("recovery with CKPTFS_FAULT='%s' at %s: status %#x", fault, root, st);
}

/* Recover (under `fault` where not NULL), then verify with a healthy backend. */
static void judge(const char *root, const char *id, uint64_t applied, const char *want,
		  const char *fault)
{
	if (fault)
		recover_faulty(root, id, applied, fault);
	else
		recover(root, id, applied);
	char *v = ml_verdicts(root);
	if (strcmp(v, want))
		FAILF("verify after recovery at %s:\n%s\nwanted:\n%s", root, v, want);
	free(v);
}

/* Voided by the next mount's recovery, then written again and applied. */
static void voided_first(struct mlog *l)
{
	ml_file(l, "a", "A", true);
	ml_durable(l);
	ml_file(l, "p", "P", false);		/* recorded, never applied: voided */
}

static void voided_again(struct mlog *l)
{
	ml_file(l, "b", "B", true);
	ml_durable(l);
	ml_file(l, "c", "C", true);
	ml_file(l, "p", "P", true);		/* the same contents, applied this time */
}

static void skipped(struct mlog *l)
{
	ml_file(l, "q", "Q0", true);
	ml_durable(l);
	ml_void(l, ml_file(l, "q", "Q1", false));	/* skipped after a permanent failure */
	ml_file(l, "r", "R", true);
	ml_file(l, "q", "Q1", true);		/* retried as a new operation, applied */
}

static void unlinked(struct mlog *l)
{
	ml_file(l, "u", "U", true);
	ml_durable(l);
	ml_unlink(l, "u", true);
	ml_file(l, "u", "U", true);
}

static void dir_renamed(struct mlog *l)
{
	ml_file(l, "tmp/x", "X", true);
	ml_durable(l);
	ml_rename(l, "tmp", "step1", false, true);
	ml_file(l, "tmp/x", "X", true);
}

static void unchanged_not_applied(struct mlog *l)
{
	ml_file(l, "s", "S", true);
	ml_durable(l);
	ml_file(l, "t", "T", true);
	ml_unlink(l, "t", false);		/* recorded, not applied */
	ml_file(l, "s", "S", false);		/* rewritten unchanged: no evidence either way */
}

static void changed(struct mlog *l)
{
	ml_unlink(l, "t", true);
	ml_file(l, "s", "S2", true);		/* new contents: evidence for itself and the unlink */
}

/*
 * A checkpoint directory renamed away and made again, its unchanged file
 * written again: before the rename is applied, the old directory still
 * shows that file, which a shorter prefix explains (no evidence).
 */
static void renamed_away(struct mlog *l, int applied)
{
	ml_file(l, "D/config.json", "C", true);
	ml_file(l, "D/model.pt", "M0", true);
	ml_durable(l);
	ml_rename(l, "D", "D.old", false, applied > 0);
	ml_mkdir(l, "D", applied > 1);
	ml_file(l, "D/config.json", "C", applied > 2);
	ml_file(l, "D/model.pt", "M1", applied > 3);
}

static void renamed_away_none(struct mlog *l)
{
	renamed_away(l, 0);
}

static void renamed_away_three(struct mlog *l)
{
	renamed_away(l, 3);
}

/*
 * A marker written the way DCP writes it (a temporary file renamed into
 * place) after a shard: a marker whose temporary name never existed is
 * not evidence of its rename.
 */
static void marker(struct mlog *l, bool written)
{
	ml_file(l, "base", "B", true);
	ml_durable(l);
	ml_file(l, "ck/shard0", "S", true);
	ml_file(l, "ck/.metadata.tmp", "M", written);
	ml_rename(l, "ck/.metadata.tmp", "ck/.metadata", false, written);
}

static void marker_unwritten(struct mlog *l)
{
	marker(l, false);
}

static void marker_written(struct mlog *l)
{
	marker(l, true);
}

/* A file removed on the backend behind the mount, then a new version of it not applied. */
static void removed_behind(struct mlog *l)
{
	char path[PATH_MAX];

	ml_file(l, "d/f", "H1", true);
	ml_durable(l);
	snprintf(path, sizeof(path), "%s/d/f", l->root);
	CHECK_SYS(unlink(path));
	ml_file(l, "d/f", "H2", false);
}

/*
 * A hard link's second name, given the new version the daemon relinks it
 * to (the replay keeps its first contents), then two versions not applied:
 * a new file, and the linked name written again with the bytes it holds.
 */
static void stale_link(struct mlog *l)
{
	ml_file(l, "a", "A", true);
	ml_link(l, "a", "b", true);
	ml_file(l, "a", "B", true);		/* in place: b holds B too */
	ml_unlink(l, "a", true);
	ml_durable(l);
	ml_file(l, "x", "D", false);
	ml_file(l, "b", "B", false);
}

/*
 * A hard link made and its source rewritten in one batch, then a marker:
 * the new name shows the new version (the daemon relinked it), which the
 * judgement must expect of it (it expected the old bytes, found the first
 * prefix the only one b shows, voided what was applied and reported the
 * files lost).
 */
static void link_rewrite(struct mlog *l, bool applied)
{
	ml_file(l, "a", "AAAA", true);
	ml_durable(l);
	ml_link(l, "a", "b", applied);
	ml_file(l, "a", "BBBBBB", applied);	/* in place: b holds it too */
	ml_file(l, "latest", "1", applied);
}

static void link_rewrite_applied(struct mlog *l)
{
	link_rewrite(l, true);
}

static void link_rewrite_none(struct mlog *l)
{
	link_rewrite(l, false);
}

/* A symlink marker swapped the way `ln -s T tmp; mv -T tmp latest` does. */
static void symlink_swap(struct mlog *l, bool applied)
{
	ml_file(l, "base", "B", true);
	ml_symlink(l, "step1", "latest", true);
	ml_durable(l);
	ml_symlink(l, "step2", "latest.tmp", applied);
	ml_rename(l, "latest.tmp", "latest", false, applied);
}

static void symlink_unswapped(struct mlog *l)
{
	symlink_swap(l, false);
}

static void symlink_swapped(struct mlog *l)
{
	symlink_swap(l, true);
}

/* A file replaced atomically by a same-size one (`save(tmp); rename(tmp, last)`). */
static void replace(struct mlog *l, bool applied)
{
	ml_file(l, "last", "OLD1", true);
	ml_durable(l);
	ml_file(l, "last.tmp", "NEW2", applied);
	ml_rename(l, "last.tmp", "last", false, applied);
}

static void replace_not_applied(struct mlog *l)
{
	replace(l, false);
}

static void replace_applied(struct mlog *l)
{
	replace(l, true);
}

/* A batch applied whole, then its marker rewritten behind the mount. */
static void marker_changed_behind(struct mlog *l)
{
	char path[PATH_MAX];

	ml_file(l, "latest", "step0", true);
	ml_durable(l);
	ml_file(l, "s/x1", "X1", true);
	ml_file(l, "s/x2", "X2", true);
	ml_file(l, "latest", "step1", true);
	snprintf(path, sizeof(path), "%s/latest", l->root);
	write_file(path, "other!", 6);
}

/*
 * Files another node wrote with the bytes this one's next versions hold
 * (a config every node saves), after this node's shard: nothing applied.
 */
static void identical_elsewhere(struct mlog *l)
{
	ml_file(l, "base", "B", true);
	ml_durable(l);
	ml_put(l->root, "ck/config.json", "C");	/* another node's, no record here */
	ml_put(l->root, "ck/tok.json", "T");
	ml_file(l, "ck/shard_1", "S", false);
	ml_file(l, "ck/config.json", "C", false);
	ml_file(l, "ck/tok.json", "T", false);
}

/* `save(tmp); rename(tmp, last)` over a same-size file another node wrote: not applied. */
static void replace_foreign(struct mlog *l)
{
	ml_file(l, "base", "B", true);
	ml_durable(l);
	ml_put(l->root, "last", "OLD1");
	ml_file(l, "last.tmp", "NEW2", false);
	ml_rename(l, "last.tmp", "last", false, false);
}

/* Another node's file linked to a temporary name and renamed over ours: not applied. */
static void link_foreign(struct mlog *l)
{
	ml_file(l, "D", "DDD1", true);
	ml_durable(l);
	ml_put(l->root, "O", "OOOOO");
	ml_link(l, "O", "tmp", false);
	ml_rename(l, "tmp", "D", false, false);
}

/* Rotation of a checkpoint another host wrote (a job moved to new hosts): applied. */
static void rotate_foreign(struct mlog *l)
{
	ml_file(l, "base", "B", true);
	ml_durable(l);
	ml_put(l->root, "ck100/s0", "OLD");	/* written from another host's log */
	ml_file(l, "ck600/s0", "NEW", true);
	ml_unlink(l, "ck100/s0", true);
	ml_rmdir(l, "ck100", true);
}

/* A shard after a durable base, applied or not (the EIO cases). */
static void shard(struct mlog *l, bool applied)
{
	ml_file(l, "base", "B", true);
	ml_durable(l);
	ml_file(l, "ck/eioshard", "S", applied);
}

static void shard_not_applied(struct mlog *l)
{
	shard(l, false);
}

static void shard_applied(struct mlog *l)
{
	shard(l, true);
}

/* A history: up to two crashed mounts, then what the next mount must find. */
static const struct evcase {
	const char *name;
	void (*mount1)(struct mlog *), (*mount2)(struct mlog *);
	uint64_t applied;	/* the last operation recovery finds applied */
	const char *verdicts;	/* verify's, after it */
	const char *what;
	const char *fault;	/* CKPTFS_FAULT while recovering, or NULL */
} cases[] = {
	{ "voided", voided_first, voided_again, 3, "OK a\nOK b\nOK c\nOK p\n",
	  "a version voided by recovery, then applied with the same contents", NULL },
	{ "skipped", skipped, NULL, 4, "OK q\nOK r\n",
	  "a skipped version, then the same contents applied", NULL },
	{ "unlinked", unlinked, NULL, 3, "OK u\n",
	  "written, unlinked, written again with the same contents", NULL },
	{ "dir-renamed", dir_renamed, NULL, 3, "OK step1/x\nOK tmp/x\n",
	  "a directory renamed, its old name written again with the same contents", NULL },
	{ "unchanged", unchanged_not_applied, NULL, 2, "OK s\nOK t\n",
	  "an unchanged rewrite not applied is no evidence", NULL },
	{ "renamed-away", renamed_away_none, NULL, 2, "OK D/config.json\nOK D/model.pt\n",
	  "a directory renamed away, made again and its unchanged file rewritten: none applied", NULL },
	{ "renamed-away-3", renamed_away_three, NULL, 5,
	  "OK D.old/config.json\nOK D.old/model.pt\nOK D/config.json\n",
	  "the same, applied up to the unchanged file", NULL },
	{ "marker-unwritten", marker_unwritten, NULL, 2, "OK base\nOK ck/shard0\n",
	  "a shard applied, its marker's temporary file and rename not", NULL },
	{ "marker-written", marker_written, NULL, 4, "OK base\nOK ck/.metadata\nOK ck/shard0\n",
	  "a shard and its marker applied", NULL },
	{ "removed-behind", removed_behind, NULL, 1, "MISSING d/f\n",
	  "a file removed behind the mount, its next version not applied", NULL },
	{ "stale-link", stale_link, NULL, 4, "OK b\n",
	  "a relinked name, a new file and that name rewritten unchanged, neither applied", NULL },
	{ "symlink-unswapped", symlink_unswapped, NULL, 2, "OK base\n",
	  "a symlink swapped into place by rename, not applied", NULL },
	{ "symlink-swapped", symlink_swapped, NULL, 4, "OK base\n",
	  "a symlink swapped into place by rename, applied", NULL },
	{ "replace", replace_not_applied, NULL, 1, "OK last\n",
	  "a same-size file renamed over another, not applied", NULL },
	{ "replace-applied", replace_applied, NULL, 3, "OK last\n",
	  "a same-size file renamed over another, applied", NULL },
	{ "changed-behind", marker_changed_behind, NULL, 3, "MISMATCH latest\nOK s/x1\nOK s/x2\n",
	  "a batch applied, its marker rewritten behind the mount: the shards still count", NULL },
	{ "identical-elsewhere", identical_elsewhere, NULL, 1,
	  "OK base\nUNTRACKED ck/config.json\nUNTRACKED ck/tok.json\n",
	  "a shard not applied, then files another node wrote with the same bytes", NULL },
	{ "replace-foreign", replace_foreign, NULL, 1, "OK base\nUNTRACKED last\n",
	  "a same-size file of another node replaced by rename, not applied", NULL },
	{ "link-foreign", link_foreign, NULL, 1, "OK D\nUNTRACKED O\n",
	  "another node's file linked and renamed over ours, not applied", NULL },
	{ "rotate-foreign", rotate_foreign, NULL, 4, "OK base\nOK ck600/s0\n",
	  "a checkpoint another host wrote removed at the end of a batch, applied", NULL },
	{ "eio-lookup", shard_not_applied, NULL, 1, "OK base\n",
	  "a shard not applied, its lookup failing with EIO", "op=stat,name=eioshard,err=EIO" },
	{ "eio-lookup-applied", shard_applied, NULL, 1, "OK base\nUNTRACKED ck/eioshard\n",
	  "a shard applied, its lookup failing with EIO", "op=stat,name=eioshard,err=EIO" },
	{ "link-rewrite", link_rewrite_applied, NULL, 4, "OK a\nOK b\nOK latest\n",
	  "a hard link and its source rewritten in one batch, then a marker, all applied", NULL },
	{ "link-rewrite-none", link_rewrite_none, NULL, 1, "OK a\n",
	  "the same, none of it applied", NULL },
	{ "eio-read", replace_not_applied, NULL, 1, "OK last\n",
	  "a same-size file renamed over another, not applied, its bytes unreadable",
	  "op=openat,name=last,err=EIO" },
	{ "eio-read-applied", replace_applied, NULL, 1, "MISMATCH last\n",
	  "the same, applied, its bytes unreadable", "op=openat,name=last,err=EIO" },
};

int main(void)
{
	char root[PATH_MAX], name[64];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct evcase *c = &cases[i];
		snprintf(name, sizeof(name), "recover-%s", c->name);
		ml_scratch(root, sizeof(root), name);
		crashed_mount(root, "aaaaaaaaaaa1", c->mount1);
		if (c->mount2)		/* it recovers the first */
			crashed_mount(root, "aaaaaaaaaaa2", c->mount2);
		judge(root, c->mount2 ? "aaaaaaaaaaa3" : "aaaaaaaaaaa2", c->applied, c->verdicts,
		      c->fault);
		if (!strcmp(c->name, "unchanged")) {	/* then a changed one after it is */
			crashed_mount(root, "aaaaaaaaaaa3", changed);
			judge(root, "aaaaaaaaaaa4", 2, "OK s\n", NULL);
		}
		printf("ok: %s\n", c->what);
	}
	return 0;
}
