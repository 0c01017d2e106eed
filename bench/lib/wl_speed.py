"""wl_speed.py -- workloads for issue 13's targets beyond the checkpoint saves.

Owns:
  bw8k     one file written with 8 KiB write(2) calls (pickle, json.dump and
           buffered Python files write 8 KiB at a time): the per-request
           cost of small writes.
  mount    mount time of ckptfs for several cache sizes (the cache is
           pre-faulted in the background), and the stall of a checkpoint
           written at once after the mount against one written later.
  appends  ten one-line appends, each open/append/close, to a 512 MiB file
           that is already durable (training loggers' open(..., "a") per
           step): time to append and to durable, bytes written to the
           backend for them.
  randio   small random writes, truncates and fsyncs over multi-GiB sparse
           files, four processes at once (a stress of rewrites).
  long     (bench/run --long) 100 checkpoints into one daemon with keep-2
           rotation: absorb rate and daemon memory from the first to the
           last; then the daemon's memory per small file it holds.
The measured children are rewriter.py (appends, randio) and writer.py.
"""
import json
import os
import statistics
import subprocess
import sys
import time

from common import GiB, KiB, MiB, empty_dir, log, proc_status_kib, run_json
import targets as T
import wl_files

HERE = os.path.dirname(os.path.abspath(__file__))
REWRITER = os.path.join(HERE, "rewriter.py")
WRITER = os.path.join(HERE, "writer.py")


class Workload:
	"""What every workload here does the same: nothing to prepare, verify or
	finish, and the target's directory emptied after each round."""
	daemon_stats = True
	ratios = []

	def prepare(self, target):
		pass

	def verify(self, target):
		pass

	def cleanup(self, target, path):
		if path:
			empty_dir(path)

	def finish(self, target):
		pass


class Bw8k(wl_files.FileWorkload):
	name = "bw8k"

	def __init__(self, total=256 * MiB):
		super().__init__()
		self.io_size = 8 * KiB
		self.files = ["bw8k.bin"]
		self.sizes = [total]
		self.desc = "one %d MiB file in 8 KiB write() calls (tmpfs: overwritten in place)" % (total // MiB)


def writer_spec(path, files, sizes, io_size, durable, open_mode="create"):
	s = {"dir": path, "files": files, "sizes": sizes, "io_size": io_size, "open": open_mode,
	     "mkdirs": sorted(set(os.path.dirname(f) for f in files if os.path.dirname(f))), "seed": 1}
	s.update(durable)
	return s


def write_files(spec, timeout=1800):
	return run_json([sys.executable, WRITER], timeout, stdin_data=json.dumps(spec))


class MountTime(Workload):
	"""Not a target comparison: ckptfs alone, mounted at several cache sizes.
	Runs on the pseudo-target 'nockpt' (nothing mounted for it) and mounts
	its own daemons."""
	name = "mount"
	daemon_stats = False
	targets = ["nockpt"]
	ratios = []

	def __init__(self, cfg, sizes, ckpt_bytes):
		self.cfg = cfg
		avail = T_mem_available()
		self.sizes = [s for s in sizes if s <= avail * 0.6]
		self.skipped = [s for s in sizes if s not in self.sizes]
		self.ckpt_bytes = ckpt_bytes
		self.first_cache = max([s for s in self.sizes if s >= 2 * ckpt_bytes] or self.sizes)
		self.total_bytes = ckpt_bytes
		self.pids = []
		self.desc = ("mount time for cache_size %s (pre-faulting in the background); a %d MiB "
			     "checkpoint (4 files, 1 MiB writes) written at once after mounting %s, and again "
			     "once the cache is ready%s" % (
				     "/".join("%dG" % (s // GiB) for s in self.sizes), ckpt_bytes // MiB,
				     "%dG" % (self.first_cache // GiB),
				     "; skipped for lack of memory: " + "/".join("%dG" % (s // GiB) for s in self.skipped)
				     if self.skipped else ""))
		self.metrics = [("mount_s_%dG" % (s // GiB), "mount s, %dG" % (s // GiB), "%.3f") for s in self.sizes]
		self.metrics += [("ready_s_%dG" % (s // GiB), "cache ready s, %dG" % (s // GiB), "%.1f")
				 for s in self.sizes]
		self.metrics += [("first_stall", "first ckpt stall s", "%.3f"),
				 ("later_stall", "later ckpt stall s", "%.3f"),
				 ("first_vs_later", "first / later", "%.2f")]

	def daemon(self, size):
		c = self.cfg
		name = "ckptfs_mount"
		store = os.path.join(c.workdir, "store-" + name)
		t = T.Ckptfs(c.mnt(name), store, c.workdir, c.binary, size, c.args.ckptfs_opts)
		t.wait_for_cache = False
		t.setup()
		return t

	def ckpt(self, t, tag):
		files = ["%s/part%d.bin" % (tag, i) for i in range(4)]
		r = write_files(writer_spec(t.path, files, [self.ckpt_bytes // 4] * 4, MiB, t.durable_spec()))
		return r["stall"], r["durable"]

	def measure(self, target, path):
		out = {}
		for size in self.sizes:
			t = self.daemon(size)
			try:
				t.mount()
				out["mount_s_%dG" % (size // GiB)] = t.mount_s
				if size == self.first_cache:
					out["first_stall"], out["first_durable"] = self.ckpt(t, "first")
				out["ready_s_%dG" % (size // GiB)] = t.mount_s + t.wait_ready(600)
				if size == self.first_cache:
					empty_dir(t.path)
					out["later_stall"], out["later_durable"] = self.ckpt(t, "later")
					out["first_vs_later"] = out["first_stall"] / out["later_stall"]
				empty_dir(t.path)
				secs, rc = t.unmount()
				if rc != 0:
					raise RuntimeError("ckptfs exited %d after unmount" % rc)
			finally:
				t.teardown()
				empty_dir(t.store)
		return out


def T_mem_available():
	with open("/proc/meminfo") as f:
		for line in f:
			if line.startswith("MemAvailable:"):
				return int(line.split()[1]) * KiB
	return 0


class Rewrites(Workload):
	"""appends and randio: rewriter.py does the work and times itself."""
	daemon_stats = True

	def __init__(self, name, targets, ratios, desc, job, timeout):
		self.name, self.targets, self.ratios, self.desc = name, targets, ratios, desc
		self.job, self.timeout = job, timeout
		self.total_bytes = job.get("bytes", 0)
		self.pids = []
		self.metrics = [("work_s", "work s", "%.3f"), ("durable", "durable s", "%.3f"),
				("backend_mib", "written to backend MiB", "%.0f"),
				("daemon_cpu_s", "daemon CPU s", "%.2f"),
				("rss_over_cache_mib", "peak RSS - cache MiB", "%.0f"),
				("cpu_wait_pct", "CPU wait %", "%.0f")]

	def measure(self, target, path):
		spec = dict(self.job, dir=path, phase="setup")
		spec.update(target.durable_spec())
		run_json([sys.executable, REWRITER], self.timeout, stdin_data=json.dumps(spec))
		before = target.stats() if isinstance(target, T.Ckptfs) else {}
		spec["phase"] = "work"
		try:
			r = run_json([sys.executable, REWRITER], self.timeout,
				     on_start=lambda pid: setattr(self, "pids", [pid]), stdin_data=json.dumps(spec))
		except RuntimeError as e:
			if "timed out" in str(e):
				raise RuntimeError("did not finish within %d s" % self.timeout)
			raise
		after = target.stats() if isinstance(target, T.Ckptfs) else {}
		if before and after:
			r["backend_mib"] = (after.get("backend_written_bytes", 0) -
					    before.get("backend_written_bytes", 0)) / MiB
		r["bytes"] = self.total_bytes
		return r


def appends(quick):
	size = (128 if quick else 512) * MiB
	return Rewrites(
		"appends", ["ckptfs", "direct_fsync"],
		[("ckptfs time-to-durable / ext4 with fsync per append", ("ckptfs", "durable"),
		  ("direct_fsync", "durable"), "<= 3"),
		 ("ckptfs append time / ext4 with fsync per append", ("ckptfs", "work_s"),
		  ("direct_fsync", "work_s"), "")],
		"ten one-line appends (open O_APPEND, write, close) to a %d MiB file already durable; "
		"ext4: fsync before each close" % (size // MiB),
		{"kind": "appends", "size": size, "count": 10}, 600)


def randio(quick):
	size, ops = (1 * GiB, 60) if quick else (3 * GiB, 200)
	return Rewrites(
		"randio", ["ckptfs", "direct_fsync"],
		[("ckptfs / ext4 (fsync is durable on both)", ("ckptfs", "durable"),
		  ("direct_fsync", "durable"), "<= 5")],
		"4 processes, each %d ops on its own sparse %d GiB file: 70%% pwrite of 4-64 KiB at a "
		"random offset, 15%% fsync, 15%% ftruncate (to between half and all of it); then all "
		"durable" % (ops, size // GiB),
		{"kind": "randio", "size": size, "ops": ops, "procs": 4}, 180 if quick else 300)


class Long(Workload):
	"""--long: a hundred checkpoints into one daemon, keep-2 rotation."""
	name = "long"
	daemon_stats = True
	targets = ["ckptfs"]
	ratios = []

	def __init__(self, count, ckpt_bytes, small_files):
		self.count, self.ckpt_bytes, self.small_files = count, ckpt_bytes, small_files
		self.total_bytes = ckpt_bytes
		self.pids = []
		self.desc = ("%d checkpoints of %d MiB (4 files, 1 MiB writes) into one daemon, each made "
			     "durable, the one before the previous deleted (keep 2); then %d small files "
			     "held by it" % (count, ckpt_bytes // MiB, small_files))
		self.metrics = [("absorb_first_gibs", "absorb GiB/s, first 10", "%.2f"),
				("absorb_last_gibs", "absorb GiB/s, last 10", "%.2f"),
				("absorb_last_vs_first", "last / first", "%.2f"),
				("rss_first_mib", "daemon RSS - cache MiB, after 10", "%.1f"),
				("rss_last_mib", "daemon RSS - cache MiB, at the end", "%.1f"),
				("bytes_per_small_file", "daemon bytes per small file", "%.0f")]

	def measure(self, target, path):
		rates, rss = [], []
		files = ["part%d.bin" % i for i in range(4)]
		for k in range(self.count):
			d = "ckpt%04d" % k
			spec = writer_spec(path, [d + "/" + f for f in files], [self.ckpt_bytes // 4] * 4, MiB,
					   target.durable_spec())
			r = write_files(spec)
			rates.append(self.ckpt_bytes / GiB / r["stall"])
			if k >= 2:
				empty_dir(os.path.join(path, "ckpt%04d" % (k - 2)))
				os.rmdir(os.path.join(path, "ckpt%04d" % (k - 2)))
			rss.append((proc_status_kib(target.daemon.pid, "VmRSS") - target.cache_bytes) / MiB)
			if k % 10 == 9:
				log("long: %d checkpoints, absorb %.2f GiB/s, RSS - cache %.1f MiB" % (
					k + 1, rates[-1], rss[-1]))
		out = {"absorb_first_gibs": statistics.median(rates[:10]),
		       "absorb_last_gibs": statistics.median(rates[-10:]),
		       "rss_first_mib": rss[min(9, len(rss) - 1)], "rss_last_mib": rss[-1],
		       "per_checkpoint": {"absorb_gibs": rates, "rss_over_cache_mib": rss}}
		out["absorb_last_vs_first"] = out["absorb_last_gibs"] / out["absorb_first_gibs"]
		# Memory per small file the daemon holds (nodes, names, pending state).
		before = proc_status_kib(target.daemon.pid, "VmRSS")
		names = ["small/d%02d/f%05d" % (i % 50, i) for i in range(self.small_files)]
		write_files(writer_spec(path, names, [4096] * len(names), 4096, {"durable": "none"}))
		after = proc_status_kib(target.daemon.pid, "VmRSS")
		out["bytes_per_small_file"] = (after - before) / len(names)
		empty_dir(path)
		out["bytes"] = self.ckpt_bytes
		return out
