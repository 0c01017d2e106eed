/*
 * queuecost — what a stalled backend's queue costs grows with the work,
 * not with the history (issue 13, item 7).
 *
 * The backend stops taking new files (the creation of temporary files
 * waits while a flag exists: a hung server), and 4,000 files are written
 * into one directory.  Every one of them queues behind the first.
 *
 *   - The publisher walks the queue when something may apply, not once per
 *     file queued: fewer walks than files (publisher_passes in stats; a
 *     walk per submission made the N-th file cost O(N), and 20,000 queued
 *     files took 51 s to write where 5,000 took 5 s).
 *   - The directory, changed on the backend by another tool meanwhile, is
 *     revalidated with all 4,000 names pending: the other tool's file
 *     appears, none of this mount's pending files vanishes (their names are
 *     looked up in a hashed set, so the merge holds the namespace lock for
 *     O(names), not O(names x pending)).
 *   - Once the backend answers again, everything is published: the backend
 *     equals the mount.
 */
#include "tests/core/core_util.h"

#include <dirent.h>

#define NFILES 4000

static unsigned count_entries(const char *dir, bool *has_other)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	unsigned n = 0;

	if (!d)
		FAILF("opendir %s: %s", dir, strerror(errno));
	*has_other = false;
	while ((e = readdir(d))) {
		if (!strncmp(e->d_name, "f", 1))
			n++;
		if (!strcmp(e->d_name, "other"))
			*has_other = true;
	}
	closedir(d);
	return n;
}

int main(void)
{
	struct tmount m;
	char hold[PATH_MAX], name[64];
	bool other;

	tm_require_fuse();
	tm_init(&m, "queuecost");
	snprintf(hold, sizeof(hold), "%s/hold", m.root);
	const char *env[] = { cu_fault_env("op=openat,hold=%s,name=.ckptfs.", hold), NULL };
	tm_mount(&m, "attr_timeout=0.2", env);

	CHECK_SYS(mkdir(tm_path(&m, "d"), 0755));
	tm_sync(&m);
	write_file(hold, "", 0);	/* from here on, no temporary file can be made */

	uint64_t passes0 = cu_stat(&m, "publisher_passes");
	for (int i = 0; i < NFILES; i++) {
		snprintf(name, sizeof(name), "d/f%05d", i);
		cu_write_text(tm_path(&m, name), name);
	}
	uint64_t passes = cu_stat(&m, "publisher_passes") - passes0;
	printf("%d files queued behind a hung backend: %llu publisher passes\n", NFILES,
	       (unsigned long long)passes);
	ASSERT_LT(cu_stat(&m, "versions_published"), 2);	/* the hold held */
	ASSERT_LT(passes, NFILES / 4);

	/* Another tool adds a file to the directory; the mount revalidates it. */
	write_file(tm_bpath(&m, "d/other"), "x", 1);
	unsigned n = 0;
	for (int tries = 0; tries < 100; tries++) {
		usleep(300 * 1000);	/* past attr_timeout: the next look revalidates */
		n = count_entries(tm_path(&m, "d"), &other);
		if (other)
			break;
	}
	if (!other)
		FAILF("the backend's new file never appeared through the mount");
	ASSERT_EQ(n, NFILES);	/* every pending file survived the merge */
	cu_check_content(tm_path(&m, "d/f01234"), "d/f01234", 8);

	unlink(hold);
	tm_sync(&m);
	ASSERT_EQ(cu_stat(&m, "versions_published"), NFILES);
	cu_assert_backend_is_mount(&m);
	tm_stop(&m);
	tm_cleanup(&m);
	printf("ok\n");
	return 0;
}
