/*
 * pllost.c — a manifest log whose fdatasync failed is never taken as
 * durable by a later fdatasync that returns 0.
 *
 * A failed write-back may leave the kernel with the log's pages marked
 * clean and their bytes never written: the error is reported once, and the
 * next fdatasync of the same file returns 0 without writing them.  The
 * fault rule lose=1 (backend/fault.c) fails one fdatasync of manifest.log
 * and has the power-loss layer (backend/powerloss.c) model exactly that:
 * the bytes it was to write stay zeros in every later durable copy of that
 * file.
 *
 * The failed sync covers the intent record of a file just closed (written
 * once, when its version is queued: no retry writes it again), whose
 * publishing rename the backend then refuses, so it is still in flight
 * when the power is cut.  The next mount of the strict image (what the cut
 * leaves) must name it as lost in flight: recovery knows a closed file that
 * never became durable only by its intent.  The image's log must hold no
 * zeroed bytes, and a file made durable before verifies OK.  (A daemon
 * that synced the same log again lost the intent: the file vanished
 * unreported.)
 *
 * Then the last sync at an unmount fails: the log holds the unmount
 * record, in the page cache, so the stop looks clean; state.json says it
 * was not, and the next mount writes the log anew.
 */
#include "tests/integrity/integ.h"
#include "tests/integrity/plimage.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#define SIZE 90000
#define SEED_BEFORE 0x5101u
#define SEED_HELD 0x5102u

/* Bytes of NUL in the image's manifest log (-1 if it cannot be read). */
static long nul_bytes(const char *img)
{
	char p[PATH_MAX + 16], buf[65536];
	long nuls = 0;
	ssize_t n;

	snprintf(p, sizeof(p), "%s/.ckptfs/nodes", img);
	DIR *d = opendir(p);
	struct dirent *e;
	char log[PATH_MAX * 3] = "";
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.')
			snprintf(log, sizeof(log), "%s/%s/manifest.log", p, e->d_name);
	if (d)
		closedir(d);
	int fd = log[0] ? open(log, O_RDONLY) : -1;
	if (fd < 0)
		return -1;
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		for (ssize_t i = 0; i < n; i++)
			nuls += buf[i] == '\0';
	close(fd);
	return nuls;
}

int main(void)
{
	struct tmount m, im;
	char shadow[PATH_MAX], gate[PATH_MAX], envpl[PATH_MAX + 32], img[PATH_MAX];
	char *out = NULL;

	tm_require_fuse();
	tm_init(&m, "pllost");
	snprintf(shadow, sizeof(shadow), "%s/shadow", m.root);
	snprintf(gate, sizeof(gate), "%s/gate", m.root);
	snprintf(envpl, sizeof(envpl), "CKPTFS_POWERLOSS=%s", shadow);
	const char *env[] = {
		envpl,
		cu_fault_env("op=fdatasync,err=EIO,lose=1,count=1,name=manifest.log,while=%s;"
			     "op=rename,err=EACCES,name=pll-held,while=%s", gate, gate),
		NULL
	};
	tm_mount(&m, NULL, env);
	if (it_write_pattern(tm_path(&m, "pll-before"), SEED_BEFORE, SIZE) != 0)
		FAILF("%s", "writing pll-before");
	tm_sync(&m);

	it_gate_set(gate, true);
	/* close(2) may report the failed sync it follows */
	int r = it_write_pattern(tm_path(&m, "pll-held"), SEED_HELD, SIZE);
	if (r != 0 && r != -EIO && r != -EACCES)
		FAILF("writing pll-held: %s", strerror(-r));
	/* Its rename refused, after the log's rewrite (or, before the fix, its second sync). */
	for (int i = 0; !strstr(it_stats(&m), "pll-held: Permission denied"); i++) {
		if (i == 200)
			FAILF("pll-held is not blocked by its refused rename: %s", it_stats(&m));
		usleep(100 * 1000);
	}
	printf("the log's sync failed once (lose=1); pll-held blocked; manifest_rewrites %lld\n",
	       (long long)cu_stat(&m, "manifest_rewrites"));
	tm_kill(&m);	/* the power cut */

	pl_strict_image(&m, shadow, "image", img, sizeof(img));
	long nuls = nul_bytes(img);
	if (nuls != 0)
		FAILF("the durable manifest log in the strict image %s has %ld zeroed bytes (or "
		      "cannot be read: -1): records were lost with the failed sync", img, nuls);
	it_verify(img, 0, &out);
	if (strcmp(it_verdict(out, "pll-before"), "OK") != 0)
		FAILF("verify of the strict image %s: pll-before is '%s', not OK:\n%s", img,
		      it_verdict(out, "pll-before"), out);
	free(out);

	/* The power is back: recovery must name the file lost in flight. */
	tm_init(&im, "pllost-image");
	snprintf(im.backend, sizeof(im.backend), "%s", img);
	tm_mount(&im, NULL, NULL);
	long long inflight = cu_stat(&im, "recovered_inflight_files");
	if (inflight < 1 || it_log_count(&im, "never persisted: pll-held") != 1)
		FAILF("recovery of the strict image %s reports %lld files lost in flight and does not "
		      "name pll-held: its intent record went with the failed sync", img, inflight);
	printf("after the power cut: the image's log whole, pll-before verifies OK, recovery names "
	       "pll-held lost in flight\n");

	/* The last sync of a clean stop fails. */
	char gate2[PATH_MAX];
	snprintf(gate2, sizeof(gate2), "%s/gate2", m.root);
	tm_stop(&im);
	const char *env2[] = {
		cu_fault_env("op=fdatasync,err=EIO,count=1,name=manifest.log,while=%s", gate2), NULL
	};
	tm_mount(&im, NULL, env2);
	if (it_write_pattern(tm_path(&im, "pll-last"), SEED_BEFORE, SIZE) != 0)
		FAILF("%s", "writing pll-last");
	tm_sync(&im);
	it_gate_set(gate2, true);
	cu_stop_any(&im);
	it_gate_set(gate2, false);
	tm_mount(&im, NULL, NULL);
	if (cu_stat(&im, "manifest_rewrites") != 1)
		FAILF("the stop's last sync of the log failed, yet the next mount did not write it "
		      "anew (manifest_rewrites %lld)", (long long)cu_stat(&im, "manifest_rewrites"));
	tm_stop(&im);
	printf("a stop whose last sync failed: the next mount wrote the log anew\n");
	tm_cleanup(&im);
	tm_cleanup(&m);
	return 0;
}
