#!/usr/bin/env python3
"""bench/manifest_scale.py -- what manifest compaction buys: mount (recovery)
time and `ckptfs-ctl verify` time over a backend that has seen many
checkpointed files, before and after the log is compacted.

  sudo bench/manifest_scale.py                       # 10 checkpoints x 10,000 files
  sudo bench/manifest_scale.py --checkpoints 3 --files 2000 --rounds 1   # a quick look

History: one mount per checkpoint (one job each), with compaction held off
(CKPTFS_MANIFEST_COMPACT), writes CHECKPOINTS checkpoints of FILES small
files each (step_K/shard_N, then a `latest` marker), drains, and removes the
checkpoint KEEP steps back (rm -rf), as training jobs keep the last few.  The manifest then holds
every version ever published (file, intent, unlink, durable records), while
the backend holds KEEP checkpoints.

Measured on that backend, ROUNDS times each (the median is reported, with
min-max), first with the log as it is and then after one mount compacted it:
  mount (clean)   `ckptfs BACKEND MNT` until mounted (the parent exits when
                  the mount is up): the log's scan, state files, the mount
  mount (crash)   the same after the previous daemon was SIGKILLed: scan and
                  recovery (evidence, orphan sweep of the backend)
  verify          `ckptfs-ctl verify BACKEND`: every node's log replayed,
                  every live file hashed
plus the log's size and record count.  Ratios are taken within this run.
Times are never asserted; the machine is shared (see bench/README.md).

Uses the daemon at $CKPTFS_BIN, else build/fs/ckptfs of this checkout;
ckptfs-ctl beside it.  Runs as root (it mounts).  Writes the Markdown table
to stdout and bench/results/manifest_scale-<stamp>.{md,json}.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
NO_COMPACT = "records=1000000000000,bytes=1000T"


def log(msg):
	print(f"[manifest_scale] {msg}", file=sys.stderr, flush=True)


def find_binary():
	for p in (os.environ.get("CKPTFS_BIN"), os.path.join(REPO, "build", "fs", "ckptfs")):
		if p and os.access(p, os.X_OK):
			return os.path.abspath(p)
	sys.exit("manifest_scale: no ckptfs binary (build it, or set CKPTFS_BIN)")


def is_mounted(path):
	with open("/proc/self/mountinfo") as f:
		return any(line.split()[4] == path for line in f)


class Bench:
	def __init__(self, args):
		self.args = args
		self.bin = find_binary()
		self.ctl = os.path.join(os.path.dirname(self.bin), "ckptfs-ctl")
		self.work = os.path.abspath(args.workdir)
		self.backend = os.path.join(self.work, "backend")
		self.mnt = os.path.join(self.work, "mnt")
		self.daemon_pid = None

	def env(self, compact):
		e = dict(os.environ)
		e.pop("CKPTFS_FAULT", None)
		e["CKPTFS_MANIFEST_COMPACT"] = compact if compact else NO_COMPACT
		if compact == "default":
			e.pop("CKPTFS_MANIFEST_COMPACT")
		return e

	def mount(self, compact=None):
		"""Mount (the daemon forks; its parent exits once mounted): seconds."""
		t0 = time.monotonic()
		r = subprocess.run([self.bin, self.backend, self.mnt, "-o", "cache_size=256M"],
				   env=self.env(compact), capture_output=True, text=True, timeout=600)
		dt = time.monotonic() - t0
		if r.returncode != 0 or not is_mounted(self.mnt):
			sys.exit(f"manifest_scale: mount failed ({r.returncode}): {r.stderr.strip()}")
		return dt

	def daemon(self):
		out = subprocess.run(["pgrep", "-f", f"^{self.bin} {self.backend} {self.mnt}"],
				     capture_output=True, text=True).stdout.split()
		return int(out[0]) if out else None

	def unmount(self):
		pid = self.daemon()
		subprocess.run(["fusermount3", "-u", self.mnt], check=True)
		while pid and os.path.exists(f"/proc/{pid}"):
			time.sleep(0.05)

	def crash(self):
		pid = self.daemon()
		os.kill(pid, signal.SIGKILL)
		while os.path.exists(f"/proc/{pid}"):
			time.sleep(0.02)
		subprocess.run(["fusermount3", "-uz", self.mnt], check=False)

	def drain(self):
		subprocess.run([self.ctl, "drain", self.mnt], check=True, capture_output=True, timeout=3600)

	def verify(self):
		t0 = time.monotonic()
		r = subprocess.run([self.ctl, "verify", "--quiet", self.backend], capture_output=True,
				   text=True, timeout=3600)
		dt = time.monotonic() - t0
		if r.returncode != 0:
			sys.exit(f"manifest_scale: verify failed: {r.stdout[-500:]} {r.stderr[-500:]}")
		return dt, r.stdout.strip().splitlines()[-1]

	def log_stats(self):
		nodes = os.path.join(self.backend, ".ckptfs", "nodes")
		size = records = 0
		for node in os.listdir(nodes):
			p = os.path.join(nodes, node, "manifest.log")
			if os.path.exists(p):
				size += os.path.getsize(p)
				with open(p, "rb") as f:
					records += sum(1 for _ in f)
		return size, records

	def history(self):
		a = self.args
		log(f"history: {a.checkpoints} checkpoints x {a.files} files, keeping {a.keep}")
		payload = os.urandom(a.size)
		t0 = time.monotonic()
		for k in range(1, a.checkpoints + 1):
			# One mount per checkpoint, as one job per checkpoint would (and the
			# daemon holds an fd per file it published during a mount).
			self.mount()
			d = os.path.join(self.mnt, f"step_{k}")
			os.mkdir(d)
			for i in range(a.files):
				with open(os.path.join(d, f"shard_{i:05d}.pt"), "wb") as f:
					f.write(payload[: a.size - (i % 7)])
			with open(os.path.join(self.mnt, "latest"), "w") as f:
				f.write(f"step_{k}")
			self.drain()
			old = k - a.keep
			if old >= 1:
				shutil.rmtree(os.path.join(self.mnt, f"step_{old}"))
				self.drain()
			self.unmount()
			log(f"  checkpoint {k} done ({time.monotonic() - t0:.0f} s)")

	def measure(self, label):
		rounds = self.args.rounds
		clean, crashed, verify = [], [], []
		summary = ""
		for _ in range(rounds):
			clean.append(self.mount())
			self.unmount()
			self.mount()
			self.crash()
			crashed.append(self.mount())
			self.unmount()
			dt, summary = self.verify()
			verify.append(dt)
		size, records = self.log_stats()
		log(f"{label}: log {size} bytes, {records} records; mount {statistics.median(clean):.3f} s, "
		    f"after a crash {statistics.median(crashed):.3f} s, verify {statistics.median(verify):.3f} s")
		return {"log_bytes": size, "log_records": records, "mount_clean_s": clean,
			"mount_after_crash_s": crashed, "verify_s": verify, "verify_summary": summary}

	def run(self):
		if os.path.exists(self.work):
			shutil.rmtree(self.work)
		os.makedirs(self.backend)
		os.makedirs(self.mnt)
		try:
			self.history()
			before = self.measure("before compaction")
			log("compacting: one mount with the " + (f"threshold records={self.args.compact_records}"
			    if self.args.compact_records else "default thresholds"))
			t_compact = self.mount(compact=f"records={self.args.compact_records}"
					       if self.args.compact_records else "default")
			self.unmount()
			after = self.measure("after compaction")
		finally:
			if is_mounted(self.mnt):
				subprocess.run(["fusermount3", "-uz", self.mnt], check=False)
		return {"checkpoints": self.args.checkpoints, "files": self.args.files,
			"keep": self.args.keep, "file_bytes": self.args.size, "rounds": self.args.rounds,
			"before": before, "compacting_mount_s": t_compact, "after": after}


def fmt(values):
	m = statistics.median(values)
	return f"{m:.3f} s ({min(values):.3f}-{max(values):.3f})" if len(values) > 1 else f"{m:.3f} s"


def report(r):
	b, a = r["before"], r["after"]
	def ratio(key):
		return statistics.median(b[key]) / max(statistics.median(a[key]), 1e-9)
	lines = [
		f"## Manifest compaction: {r['checkpoints']} checkpoints x {r['files']} files "
		f"({r['checkpoints'] * r['files']:,} files checkpointed, last {r['keep']} kept)",
		"",
		f"Median of {r['rounds']} rounds (min-max); ratio = before / after.",
		"",
		"| | before compaction | after compaction | ratio |",
		"|---|---|---|---|",
		f"| manifest log | {b['log_bytes'] / 2**20:.1f} MiB, {b['log_records']:,} records | "
		f"{a['log_bytes'] / 2**20:.1f} MiB, {a['log_records']:,} records | "
		f"{b['log_bytes'] / max(a['log_bytes'], 1):.1f}x |",
		f"| mount (clean) | {fmt(b['mount_clean_s'])} | {fmt(a['mount_clean_s'])} | "
		f"{ratio('mount_clean_s'):.1f}x |",
		f"| mount after a crash (recovery) | {fmt(b['mount_after_crash_s'])} | "
		f"{fmt(a['mount_after_crash_s'])} | {ratio('mount_after_crash_s'):.1f}x |",
		f"| ckptfs-ctl verify | {fmt(b['verify_s'])} | {fmt(a['verify_s'])} | {ratio('verify_s'):.1f}x |",
		"",
		f"The mount that compacted took {r['compacting_mount_s']:.3f} s.",
		f"verify before: `{b['verify_summary']}`",
		f"verify after: `{a['verify_summary']}`",
	]
	return "\n".join(lines) + "\n"


def main():
	ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
	ap.add_argument("--checkpoints", type=int, default=10)
	ap.add_argument("--files", type=int, default=10000, help="files per checkpoint")
	ap.add_argument("--keep", type=int, default=2, help="checkpoints kept on the backend")
	ap.add_argument("--size", type=int, default=4096, help="bytes per file")
	ap.add_argument("--rounds", type=int, default=3)
	ap.add_argument("--workdir", default="/var/tmp/ckptfs-manifest-scale")
	ap.add_argument("--compact-records", type=int,
			help="compaction threshold for the compacting mount (default: the daemon's)")
	args = ap.parse_args()
	if os.geteuid() != 0:
		sys.exit("manifest_scale: run as root (it mounts)")
	r = Bench(args).run()
	text = report(r)
	print(text)
	out = os.path.join(HERE, "results")
	os.makedirs(out, exist_ok=True)
	stamp = time.strftime("%Y%m%d-%H%M%S")
	with open(os.path.join(out, f"manifest_scale-{stamp}.md"), "w") as f:
		f.write(text)
	with open(os.path.join(out, f"manifest_scale-{stamp}.json"), "w") as f:
		json.dump(r, f, indent=1)


if __name__ == "__main__":
	main()
