/*
 * ledger.c — the seal ledger (ledger.h).
 *
 * The file is the rescue directory's `.seals/seals-<mount id>` (a name no
 * per-mount rescue directory, `<host>-<mount id>`, can take), 0600, one
 * page: a magic, the mount id, the boot id, and the last sealed sequence
 * number, stored with a release store by backend_submit under be->lock.
 * Opened through bsys_direct (not the backend: no faults, no power-loss
 * shadow) by a walk that follows no symlink (safepath_open_private).
 */
#include "backend/ledger.h"
#include "backend/bsys.h"
#include "backend/safepath.h"
#include "cache/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define LEDGER_MAGIC "ckptsl1"
#define LEDGER_SIZE 4096

struct ledger_page {
	char magic[8];
	char mount_id[24];
	char boot_id[40];
	_Atomic uint64_t sealed;
};

static void ledger_name(char *out, size_t len, const char *mount_id)
{
	snprintf(out, len, "seals-%.23s", mount_id);
}

/*
 * The ledgers' directory below the rescue directory `dir`, made 0700 if
 * missing (both walked and judged as rescue.c R1 says): its fd or -errno;
 * *parent (if not NULL) gets the rescue directory's.
 */
static int ledger_dir(const char *dir, int *parent, char *why, size_t wlen)
{
	char path[PATH_MAX];
	int fd;

	if (snprintf(path, sizeof(path), "%s/.seals", dir) >= (int)sizeof(path)) {
		snprintf(why, wlen, "%s/.seals: %s", dir, strerror(ENAMETOOLONG));
		return -ENAMETOOLONG;
	}
	if ((fd = safepath_open_private(path, why, wlen)) < 0 || !parent)
		return fd;
	if ((*parent = safepath_open_private(dir, why, wlen)) < 0) {
		bsys_direct.close(fd);
		return *parent;
	}
	return fd;
}

/* Read name's page in dirfd: 0, or -errno (-EBADMSG: not a ledger). */
static int page_read(int dirfd, const char *name, struct ledger_page *pg)
{
	int fd = bsys_direct.openat(dirfd, name, O_RDONLY | O_NOFOLLOW, 0);

	if (fd < 0)
		return fd;
	memset(pg, 0, sizeof(*pg));
	ssize_t n = bsys_direct.pread(fd, pg, sizeof(*pg), 0);
	bsys_direct.close(fd);
	if (n < 0)
		return (int)n;
	if (n != (ssize_t)sizeof(*pg) || memcmp(pg->magic, LEDGER_MAGIC, sizeof(pg->magic)) != 0)
		return -EBADMSG;
	return 0;
}

struct sweep {
	int dirfd;
	const char *boot_id;
};

/* Ledgers of earlier boots are of no use (ledger_take): their mounts' next ones never read them. */
static int sweep_one(void *arg, const char *name)
{
	struct sweep *sw = arg;
	struct ledger_page pg;

	if (!strncmp(name, "seals-", 6) && page_read(sw->dirfd, name, &pg) == 0 &&
	    strncmp(pg.boot_id, sw->boot_id, sizeof(pg.boot_id)) != 0)
		bsys_direct.unlinkat(sw->dirfd, name, 0);
	return 0;
}

void ledger_open(struct ledger *lg, const char *dir, const char *mount_id, const char *boot_id)
{
	char why[512];
	int fd = -1, r;
	void *p;

	memset(lg, 0, sizeof(*lg));
	lg->dirfd = lg->parentfd = -1;
	if (!dir)
		return;
	ledger_name(lg->name, sizeof(lg->name), mount_id);
	if ((r = lg->dirfd = ledger_dir(dir, &lg->parentfd, why, sizeof(why))) < 0)
		goto fail;
	struct sweep sw = { lg->dirfd, boot_id };
	bsys_direct.readdir(lg->dirfd, sweep_one, &sw);
	fd = r = bsys_direct.openat(lg->dirfd, lg->name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
	if (r >= 0) {
		/*
		 * Written, not truncated to size: a sparse page would be given its
		 * block at the first store through the mapping, which on a full
		 * file system is a SIGBUS, not an error.
		 */
		static const char zeros[LEDGER_SIZE];
		ssize_t w = bsys_direct.pwrite(fd, zeros, sizeof(zeros), 0);
		r = w == (ssize_t)sizeof(zeros) ? 0 : w < 0 ? (int)w : -ENOSPC;
	}
	if (r < 0) {
		snprintf(why, sizeof(why), "%s/.seals/%s: %s", dir, lg->name, strerror(-r));
		goto fail;
	}
	p = mmap(NULL, LEDGER_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		r = -errno;
		snprintf(why, sizeof(why), "%s/.seals/%s: mmap: %s", dir, lg->name, strerror(errno));
		goto fail;
	}
	bsys_direct.close(fd);
	lg->page = p;
	snprintf(lg->page->mount_id, sizeof(lg->page->mount_id), "%s", mount_id);
	snprintf(lg->page->boot_id, sizeof(lg->page->boot_id), "%s", boot_id);
	memcpy(lg->page->magic, LEDGER_MAGIC, sizeof(lg->page->magic));
	return;
fail:
	log_warn("no seal ledger (%s): if this daemon is killed, versions closed in the moment "
		 "before the backend's log noted them are lost without being counted", why);
	if (fd >= 0) {
		bsys_direct.close(fd);
		bsys_direct.unlinkat(lg->dirfd, lg->name, 0);
	}
	ledger_close(lg, false);
}

void ledger_seal(struct ledger *lg, uint64_t seq)
{
	/* The highest, whatever the order of submission: only the caller's lock writes it. */
	if (lg->page && seq > atomic_load_explicit(&lg->page->sealed, memory_order_relaxed))
		atomic_store_explicit(&lg->page->sealed, seq, memory_order_release);
}

void ledger_close(struct ledger *lg, bool clean)
{
	if (lg->page)
		munmap(lg->page, LEDGER_SIZE);
	lg->page = NULL;
	if (lg->dirfd >= 0 && clean)	/* and .seals, if no other mount's ledger is left */
		if (bsys_direct.unlinkat(lg->dirfd, lg->name, 0) == 0 && lg->parentfd >= 0)
			bsys_direct.unlinkat(lg->parentfd, ".seals", AT_REMOVEDIR);
	if (lg->dirfd >= 0)
		bsys_direct.close(lg->dirfd);
	if (lg->parentfd >= 0)
		bsys_direct.close(lg->parentfd);
	lg->dirfd = lg->parentfd = -1;
}

int ledger_take(const char *dir, const char *prev, const char *boot_id, uint64_t *seq)
{
	struct ledger_page pg;
	char why[512], name[40];
	int dirfd, r;

	if (!dir)
		return -ENOENT;
	if ((dirfd = ledger_dir(dir, NULL, why, sizeof(why))) < 0)
		return dirfd;
	ledger_name(name, sizeof(name), prev);
	if ((r = page_read(dirfd, name, &pg)) == -ENOENT) {
		bsys_direct.close(dirfd);
		return r;
	}
	if (r == 0 && (strncmp(pg.mount_id, prev, sizeof(pg.mount_id)) != 0 ||
		       strncmp(pg.boot_id, boot_id, sizeof(pg.boot_id)) != 0))
		r = -ESTALE;
	if (r == 0)
		*seq = atomic_load(&pg.sealed);
	bsys_direct.unlinkat(dirfd, name, 0);
	bsys_direct.close(dirfd);
	return r;
}
