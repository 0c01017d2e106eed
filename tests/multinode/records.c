/*
 * records.c — a peer's watermark record is untrusted input: one that no
 * daemon could have written holds markers, as an unreadable one does, and
 * no value makes the margin wrap around (nodes.h N4).
 *
 * Only node a runs (peers=a:b); node b's record is written by the test.
 * For each bad record: `latest` is written through a, must stay off the
 * backend for SETTLE_MS, held for b; then b's record is replaced by a good
 * one (T two minutes ahead) and the same `latest` must reach the backend
 * (so each case also shows that the record alone held it).  Fails on the
 * old code at the first case: "durable_before_ns": -1 was read as 2^64 - 1
 * and released the marker; so did a maxerror of 2^64 - 1 (the margin
 * wrapped to a few ms), T later than the record's own time, and a lost
 * window ending at 2^64 - 1 (its end plus the margin wrapped).
 *
 * Then the open window of lost files (N5), with T far ahead: a format-3
 * record with "gap_to_ns": 0 holds the marker for `ckptfs-ctl ack-lost`,
 * and so does a format-2 record (an older daemon's) reporting lost files
 * in a window it ended at its restart; an open window starting after the
 * record was written, and a format from the future, are rejected.
 *
 * Then format 4's T for the markers of uids other than those listed
 * (nodes.h N3): it releases a marker of an unlisted uid, not one of a
 * listed uid; a list or a T no daemon writes is rejected (per_actor).
 *
 * Last, a record that cannot be read leaves the last good one in force
 * (unreadable); a damaged one, as in every case above after the good
 * record that released the case before it, does not.
 */
#include "tests/multinode/mn_util.h"

#include <sys/stat.h>
#include <time.h>

#define SETTLE_MS 1500
#define AHEAD_NS 120000000000ull

static unsigned long long wall_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

/* b's record in format fmt, with these fields as text (numbers, or what a damaged one holds). */
static void b_record_fmt(struct mcluster *c, int fmt, const char *before, const char *written,
			 const char *maxerror, const char *gap, unsigned lost)
{
	char text[1024];

	snprintf(text, sizeof(text),
		 "{\"format\": %d, \"node\": \"b\", \"mount_id\": \"000000000001\", \"boot_id\": \"-\", "
		 "\"state\": \"running\", \"seq\": 5, \"durable_before_ns\": %s, \"written_ns\": %s, "
		 "\"maxerror_ns\": %s, \"clock_synced\": false, %s, \"lost_files\": %u, "
		 "\"skipped\": 0, \"skipped_from_ns\": 0}\n", fmt, before, written, maxerror, gap, lost);
	cu_write_text(mn_bpath(c, ".ckptfs/nodes/b/watermark.json"), text);
}

/* b's record in format 4: T for markers of uids other than `uids` is `others`. */
static void b_record4(struct mcluster *c, const char *before, const char *written,
		      const char *uids, const char *others)
{
	char text[1024];

	snprintf(text, sizeof(text),
		 "{\"format\": 4, \"node\": \"b\", \"mount_id\": \"000000000001\", \"boot_id\": \"-\", "
		 "\"state\": \"running\", \"seq\": 5, \"durable_before_ns\": %s, \"written_ns\": %s, "
		 "\"maxerror_ns\": 1000000, \"clock_synced\": false, \"gap_mount\": \"-\", "
		 "\"gap_from_ns\": 0, \"gap_to_ns\": 0, \"lost_files\": 0, \"skipped\": 0, "
		 "\"skipped_from_ns\": 0, \"blocked_uids\": \"%s\", \"others_before_ns\": %s}\n",
		 before, written, uids, others);
	cu_write_text(mn_bpath(c, ".ckptfs/nodes/b/watermark.json"), text);
}

static void b_record(struct mcluster *c, const char *before, const char *written,
		     const char *maxerror, const char *gap)
{
	b_record_fmt(c, 2, before, written, maxerror, gap, 0);
}

static void b_record_good(struct mcluster *c)
{
	char t[32];
	snprintf(t, sizeof(t), "%llu", wall_now() + AHEAD_NS);
	b_record(c, t, t, "1000000", "\"gap_mount\": \"-\", \"gap_from_ns\": 0, \"gap_to_ns\": 0");
}

/* The backend's `latest` says text within 5 s, or the test fails (`what`: released when). */
static void latest_released(struct mcluster *c, const char *text, const char *name,
			    const char *what)
{
	uint64_t t0 = mono_ms();
	while (strcmp(cu_slurp(mn_bpath(c, "latest")), text) && mono_ms() - t0 < 5000)
		usleep(20000);
	if (strcmp(cu_slurp(mn_bpath(c, "latest")), text))
		FAILF("%s: the marker was not released %s: %s", name, what,
		      mn_stat(c, 0, "marker_held_reason"));
}

/* The marker is held for b's record, its reason saying `reason`; a good record releases it. */
static void held_for_then_released(struct mcluster *c, const char *name, unsigned k,
				   const char *reason)
{
	char text[64], why[600] = "";

	snprintf(text, sizeof(text), "case%u", k);
	mn_wait_peer_reads(c, 0, 2);	/* a's watcher has read the bad record */
	cu_write_text(mn_path(c, 0, "latest"), text);
	for (uint64_t t0 = mono_ms(); mono_ms() - t0 < SETTLE_MS; usleep(20000)) {
		if (!strcmp(cu_slurp(mn_bpath(c, "latest")), text))
			FAILF("%s: b's record released the marker", name);
		snprintf(why, sizeof(why), "%s", mn_stat(c, 0, "marker_held_reason"));
	}
	if (!strstr(why, reason))
		FAILF("%s: the marker is not reported held for b's record ('%s'): '%s'", name,
		      reason, why);
	b_record_good(c);
	latest_released(c, text, name, "once b's record was good");
	fprintf(stderr, "%s: held, then released by a good record\n", name);
}

static void held_then_released(struct mcluster *c, const char *name, unsigned k)
{
	held_for_then_released(c, name, k, "node b's watermark record is damaged or not one a "
			       "daemon wrote");
}

/* The marker (of root) is released by b's record alone. */
static void released_by(struct mcluster *c, const char *name, unsigned k)
{
	char text[64];

	snprintf(text, sizeof(text), "case%u", k);
	mn_wait_peer_reads(c, 0, 2);	/* a's watcher has read the record */
	cu_write_text(mn_path(c, 0, "latest"), text);
	latest_released(c, text, name, "by b's record");
	fprintf(stderr, "%s: released\n", name);
}

/*
 * Format 4 (N3 per actor): T for the markers of uids b does not list.  A
 * marker of root (uid 0) is released by it when b lists only another uid,
 * held by b's T when b lists uid 0; a list or T no daemon writes is
 * rejected.
 */
static void per_actor(struct mcluster *c, unsigned *k)
{
	char behind[32], ahead[32], past[32], uids[256];

	snprintf(behind, sizeof(behind), "%llu", wall_now() - 10000000000ull);
	snprintf(ahead, sizeof(ahead), "%llu", wall_now() + AHEAD_NS);
	snprintf(past, sizeof(past), "%llu", wall_now() + AHEAD_NS + 1000);
	b_record4(c, behind, ahead, "61902", ahead);
	released_by(c, "format 4, another uid listed", ++*k);
	b_record4(c, behind, ahead, "0,61902", ahead);
	held_for_then_released(c, "format 4, the marker's uid listed", ++*k,
			       "an operation of uid 0 failed there");
	b_record4(c, behind, ahead, "-", ahead);
	held_then_released(c, "format 4, a T for other uids but none listed", ++*k);
	b_record4(c, ahead, ahead, "61902", behind);
	held_then_released(c, "format 4, the T for other uids before T", ++*k);
	b_record4(c, behind, ahead, "61902", past);
	held_then_released(c, "format 4, the T for other uids after the record", ++*k);
	b_record4(c, behind, ahead, "61902,1000", ahead);
	held_then_released(c, "format 4, uids not ascending", ++*k);
	b_record4(c, behind, ahead, "4294967296", ahead);
	held_then_released(c, "format 4, a uid past 32 bits", ++*k);
	uids[0] = '\0';
	for (unsigned i = 1; i <= 17; i++)
		snprintf(uids + strlen(uids), sizeof(uids) - strlen(uids), "%s%u", i > 1 ? "," : "", i);
	b_record4(c, behind, ahead, uids, ahead);
	held_then_released(c, "format 4, 17 uids", ++*k);
}

/*
 * A record that cannot be read (gone while b replaces it, as a GlusterFS
 * client may show it) leaves the last good one in force (N4): one 10 s
 * behind still holds the marker, and says so; one ahead still releases it.
 * The old code dropped the last good record: "no watermark from node b
 * yet", and the second marker held.
 */
static void unreadable(struct mcluster *c, unsigned *k)
{
	char behind[32], now[32];

	snprintf(behind, sizeof(behind), "%llu", wall_now() - 10000000000ull);
	snprintf(now, sizeof(now), "%llu", wall_now());
	b_record(c, behind, now, "1000000", "\"gap_mount\": \"-\", \"gap_from_ns\": 0, \"gap_to_ns\": 0");
	mn_wait_peer_reads(c, 0, 2);
	CHECK_SYS(unlink(mn_bpath(c, ".ckptfs/nodes/b/watermark.json")));
	held_for_then_released(c, "no record after one 10 s behind", ++*k,
			       "could not be read at the last look: No such file or directory; "
			       "the one read ");
	mn_wait_peer_reads(c, 0, 2);	/* the good record was read */
	CHECK_SYS(unlink(mn_bpath(c, ".ckptfs/nodes/b/watermark.json")));
	released_by(c, "no record after a good one", ++*k);
	ASSERT_STR_EQ(mn_stat(c, 0, "marker_held_for"), "");
}

int main(void)
{
	struct mcluster c;
	char now[32], ahead[32], gap[160];

	tm_require_fuse();
	cu_require_root();
	mn_init(&c, "mn-records", 2);
	mn_mount(&c, 0, NULL, NULL);
	CHECK_SYS(mkdir(mn_bpath(&c, ".ckptfs/nodes/b"), 0755));
	const char *nogap = "\"gap_mount\": \"-\", \"gap_from_ns\": 0, \"gap_to_ns\": 0";
	unsigned k = 0;

	snprintf(now, sizeof(now), "%llu", wall_now());
	b_record(&c, "-1", now, "1000000", nogap);
	held_then_released(&c, "T of -1", ++k);

	snprintf(now, sizeof(now), "%llu", wall_now());
	snprintf(ahead, sizeof(ahead), "%llu", wall_now() + 30000000000ull);
	b_record(&c, ahead, ahead, "18446744073709551615", nogap);
	held_then_released(&c, "maxerror of 2^64 - 1", ++k);

	b_record(&c, ahead, now, "1000000", nogap);
	held_then_released(&c, "T later than the record was written", ++k);

	snprintf(ahead, sizeof(ahead), "%llu", wall_now() + AHEAD_NS);
	snprintf(gap, sizeof(gap), "\"gap_mount\": \"000000000000\", \"gap_from_ns\": %llu, "
		 "\"gap_to_ns\": 18446744073709551615", wall_now() - 10000000000ull);
	b_record(&c, ahead, ahead, "1000000", gap);
	held_then_released(&c, "lost window ending at 2^64 - 1", ++k);

	b_record(&c, ahead, ahead, "99999999999999999999999", nogap);
	held_then_released(&c, "a number past 64 bits", ++k);

	snprintf(ahead, sizeof(ahead), "%llu", wall_now() + AHEAD_NS);
	snprintf(gap, sizeof(gap), "\"gap_mount\": \"000000000000\", \"gap_from_ns\": %llu, "
		 "\"gap_to_ns\": 0", wall_now() - 10000000000ull);
	b_record_fmt(&c, 3, ahead, ahead, "1000000", gap, 1);
	held_for_then_released(&c, "an open window of lost files", ++k, "`ckptfs-ctl ack-lost`");
	snprintf(gap, sizeof(gap), "\"gap_mount\": \"000000000000\", \"gap_from_ns\": %llu, "
		 "\"gap_to_ns\": %llu", wall_now() - 10000000000ull, wall_now() - 5000000000ull);
	b_record_fmt(&c, 2, ahead, ahead, "1000000", gap, 1);
	held_for_then_released(&c, "a format-2 window with lost files", ++k, "`ckptfs-ctl ack-lost`");
	snprintf(gap, sizeof(gap), "\"gap_mount\": \"000000000000\", \"gap_from_ns\": %llu, "
		 "\"gap_to_ns\": 0", wall_now() + AHEAD_NS + 1000);
	b_record_fmt(&c, 3, ahead, ahead, "1000000", gap, 1);
	held_then_released(&c, "an open window starting after the record", ++k);
	b_record_fmt(&c, 6, ahead, ahead, "1000000", nogap, 0);
	held_then_released(&c, "format 6", ++k);
	per_actor(&c, &k);
	unreadable(&c, &k);
	mn_cleanup(&c);
	return 0;
}
