/*
 * ledger.c — the seal ledger's two paths no mount test reaches
 * (backend/ledger.c, driven directly):
 *
 * 1. A ledger left by another boot: its page is older than the log it
 *    would be compared with, so ledger_take answers -ESTALE (no count) and
 *    removes it, and the next ledger_open sweeps every other boot's ledger
 *    while keeping this boot's.  The same boot's ledger is read (positive
 *    control: the sealed number comes back).
 * 2. A ledger that cannot be made (.seals is a regular file): ledger_open
 *    leaves the mount without one, logged once ("no seal ledger", naming
 *    the path), ledger_seal is harmless, ledger_take finds nothing, and
 *    the file is left as it was.
 * 3. A ledger on a full file system (a tmpfs filled up): ledger_open says
 *    there is none (ENOSPC) and the process lives on — its page is
 *    written, not made sparse, so no store through the mapping can find no
 *    block (SIGBUS, which killed the daemon at mount).
 */
#include "tests/integrity/integ.h"
#include "backend/ledger.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static bool exists_in_seals(const char *name)
{
	char p[256];
	snprintf(p, sizeof(p), "%s/.seals/%s", dir, name);
	return access(p, F_OK) == 0;
}

/* A ledger of mount m, boot b, that sealed seq and was left (its daemon killed). */
static void left_ledger(const char *m, const char *b, uint64_t seq)
{
	struct ledger lg;

	ledger_open(&lg, dir, m, b);
	ASSERT_TRUE(lg.page != NULL);
	ledger_seal(&lg, seq);
	ledger_close(&lg, false);
}

static void other_boot(void)
{
	uint64_t seq = 0;

	left_ledger("mountA", "boot-1", 41);
	ASSERT_TRUE(exists_in_seals("seals-mountA"));
	ASSERT_EQ(ledger_take(dir, "mountA", "boot-2", &seq), -ESTALE);
	ASSERT_EQ(seq, 0);
	ASSERT_TRUE(!exists_in_seals("seals-mountA"));	/* removed either way */

	/* Positive control: on the same boot the number comes back. */
	left_ledger("mountB", "boot-2", 17);
	ASSERT_EQ(ledger_take(dir, "mountB", "boot-2", &seq), 0);
	ASSERT_EQ(seq, 17);
	ASSERT_TRUE(!exists_in_seals("seals-mountB"));

	/* The sweep: another boot's ledger goes at the next open, this boot's stays. */
	left_ledger("mountC", "boot-1", 5);
	left_ledger("mountD", "boot-2", 6);
	struct ledger lg;
	ledger_open(&lg, dir, "mountE", "boot-2");
	ASSERT_TRUE(lg.page != NULL);
	ASSERT_TRUE(!exists_in_seals("seals-mountC"));
	ASSERT_TRUE(exists_in_seals("seals-mountD"));
	ASSERT_TRUE(exists_in_seals("seals-mountE"));
	ledger_close(&lg, true);
	ASSERT_TRUE(!exists_in_seals("seals-mountE"));
	ASSERT_EQ(ledger_take(dir, "mountD", "boot-2", &seq), 0);
	ASSERT_EQ(seq, 6);
}

static void cannot_create(void)
{
	char seals[128], logp[128];
	const char *log;
	struct ledger lg;
	uint64_t seq = 99;

	snprintf(seals, sizeof(seals), "%s/.seals", dir);
	rmdir(seals);
	cu_write_text(seals, "not a directory");
	snprintf(logp, sizeof(logp), "%s/log", dir);
	fflush(stderr);
	int saved = dup(2), fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ASSERT_TRUE(saved >= 0 && fd >= 0);
	dup2(fd, 2);
	ledger_open(&lg, dir, "mountF", "boot-2");
	ledger_seal(&lg, 3);		/* without a page: nothing, no crash */
	fflush(stderr);
	dup2(saved, 2);
	close(fd);
	close(saved);
	log = cu_slurp(logp);
	fprintf(stderr, "logged: %s", log);
	ASSERT_TRUE(lg.page == NULL);
	if (!strstr(log, "no seal ledger") || !strstr(log, ".seals"))
		FAILF("ledger_open did not say there is no ledger, naming .seals: '%s'", log);
	ledger_close(&lg, true);
	ASSERT_TRUE(ledger_take(dir, "mountF", "boot-2", &seq) < 0);
	ASSERT_EQ(seq, 99);
	ASSERT_STR_EQ(cu_slurp(seals), "not a directory");
}

/* ledger_open with stderr captured into a file under dir: what it logged. */
static const char *open_logged(struct ledger *lg, const char *where, const char *mount_id)
{
	char logp[128];

	snprintf(logp, sizeof(logp), "%s/log", dir);
	fflush(stderr);
	int saved = dup(2), fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ASSERT_TRUE(saved >= 0 && fd >= 0);
	dup2(fd, 2);
	ledger_open(lg, where, mount_id, "boot-2");
	fflush(stderr);
	dup2(saved, 2);
	close(fd);
	close(saved);
	return cu_slurp(logp);
}

static void full_fs(void)
{
	char fs[160], fill[200];
	struct ledger lg;

	snprintf(fs, sizeof(fs), "%s/full", dir);
	CHECK_SYS(mkdir(fs, 0700));
	if (mount("ckptfs-ledger-test", fs, "tmpfs", 0, "size=64k,mode=0700") != 0) {
		fprintf(stderr, "no tmpfs mount here (%s): the full file system is not checked\n",
			strerror(errno));
		return;
	}
	snprintf(fill, sizeof(fill), "%s/.seals", fs);
	CHECK_SYS(mkdir(fill, 0700));
	snprintf(fill, sizeof(fill), "%s/fill", fs);
	int fd = CHECK_SYS(open(fill, O_WRONLY | O_CREAT, 0600));
	char block[4096] = { 1 };
	while (write(fd, block, sizeof(block)) == (ssize_t)sizeof(block))
		;
	close(fd);
	const char *log = open_logged(&lg, fs, "mountG");
	fprintf(stderr, "logged: %s", log);
	ASSERT_TRUE(lg.page == NULL);
	if (!strstr(log, "no seal ledger") || !strstr(log, strerror(ENOSPC)))
		FAILF("ledger_open on a full file system did not say why there is no ledger: '%s'", log);
	ledger_seal(&lg, 3);
	ledger_close(&lg, true);
	CHECK_SYS(umount(fs));
}

int main(void)
{
	snprintf(dir, sizeof(dir), "/tmp/ckptfs-ledger.XXXXXX");
	if (!mkdtemp(dir))
		FAILF("mkdtemp: %s", strerror(errno));
	other_boot();
	cannot_create();
	full_fs();
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		return 1;
	return 0;
}
