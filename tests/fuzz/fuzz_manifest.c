/*
 * fuzz_manifest.c — libFuzzer target for the manifest: the record framing
 * (manifest_record_check), the bounded line-by-line scan, and the whole
 * mount-time path over arbitrary log bytes — metadata checks, scan,
 * recovery (evidence, "recovered" record, in-flight report, orphans) and,
 * with a tiny threshold, compaction — followed by a clean close and a
 * second open, which must find the log it left readable and whole.
 *
 * The backend is a scratch directory (on /dev/shm when it exists, so the
 * fsyncs cost nothing), made once; each input becomes the node's
 * manifest.log.  Everything runs in this process.  The daemon's messages
 * are expected by the thousand: run it with -close_fd_mask=3 (ctest does;
 * crash reports still reach the terminal).
 */
#include "backend/manifest.h"
#include "cache/json.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "property failed: %s\n", #c); abort(); } } while (0)

static int root_fd = -1;
static char log_path[4096];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char tmpl[64];
	int fd;

	snprintf(tmpl, sizeof(tmpl), "%s/ckptfs-fuzz.XXXXXX",
		 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
	if (!mkdtemp(tmpl))
		abort();
	root_fd = open(tmpl, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	snprintf(log_path, sizeof(log_path), "%s/.ckptfs/nodes/fuzz/manifest.log", tmpl);
	/* A file for "file" records to find (evidence) and a tiny compaction threshold. */
	fd = openat(root_fd, "a", O_WRONLY | O_CREAT, 0644);
	if (fd >= 0 && write(fd, "x", 1) == 1)
		close(fd);
	setenv("CKPTFS_MANIFEST_COMPACT", "records=3,bytes=1G", 1);
	return 0;
}

static int count_cb(void *arg, const char *p, size_t len, uint64_t off)
{
	struct json_obj o;
	(*(uint64_t *)arg)++;
	if (json_parse(p, len, &o, NULL, 0) == 0)
		json_free(&o);
	return 0;
}

static void write_log(const unsigned char *data, size_t size)
{
	int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {	/* the first time: the node directory is made by a mount */
		struct manifest m;
		struct recovery_report rep;
		CHECK(manifest_open(&m, root_fd, "fuzz", "000000000000", &rep) == 0);
		manifest_close(&m, 0, true);
		fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	}
	CHECK(fd >= 0);
	CHECK(write(fd, data, size) == (ssize_t)size);
	close(fd);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	struct manifest m;
	struct recovery_report rep;
	struct manifest_scan scan;
	uint64_t n = 0;
	const char *payload;
	size_t plen;

	/* The framing alone, on each line of the input. */
	for (size_t lo = 0; lo < size;) {
		const unsigned char *nl = memchr(data + lo, '\n', size - lo);
		size_t end = nl ? (size_t)(nl - data) + 1 : size;
		char *line = malloc(end - lo);	/* exactly the line: reads past it are caught */
		memcpy(line, data + lo, end - lo);
		if (manifest_record_check(line, end - lo, &payload, &plen))
			CHECK(payload == line + 29 && plen + 30 == end - lo);
		free(line);
		lo = end;
	}
	/* The first mount over these bytes, then a clean unmount. */
	write_log(data, size);
	CHECK(manifest_open(&m, root_fd, "fuzz", "000000000001", &rep) == 0);	/* bytes alone never refuse */
	{
		static const char rec[] = "{\"t\": \"x\", \"m\": \"000000000001\"}";
		CHECK(manifest_append(&m, rec, sizeof(rec) - 1) == 0);
		manifest_close(&m, 0, true);
		/* What it left ends whole (corruption in the input's middle may stay). */
		int fd = open(log_path, O_RDONLY | O_CLOEXEC);
		CHECK(fd >= 0);
		CHECK(manifest_scan_fd(fd, count_cb, &n, &scan) == 0);
		CHECK(scan.good_end == scan.size && n >= 2);
		close(fd);
		/* And the next mount reads it as a clean end. */
		CHECK(manifest_open(&m, root_fd, "fuzz", "000000000002", &rep) == 0);
		CHECK(rep.previous && !rep.unclean && rep.torn_bytes == 0);
		manifest_close(&m, 0, true);
	}
	return 0;
}
