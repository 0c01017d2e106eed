"""sampler.py -- bytes absorbed vs bytes durable over time, and their plot.

Owns: a background thread that samples every 100 ms while a workload writes
through ckptfs, and the gnuplot rendering of the samples.

Sources, best first:
  MOUNT/.ckptfs/stats  absorbed_bytes (accepted into the cache),
                       backend_written_bytes (written to temp files on the
                       backend), persisted_bytes (published: durable)
  otherwise            absorbed = write(2) bytes of the measured processes
                       (/proc/PID/io wchar); on the backend, bytes in
                       temporary .ckptfs.* files (in flight) and in files under
                       their final names (published, fdatasynced first)
Both are recorded when both exist, so the two can be checked against each
other.  Counters are relative to the first sample.
"""
import json
import os
import shutil
import subprocess
import threading
import time

from common import GiB, log, proc_io


def scan_store(top):
	"""(bytes in final names, bytes in .ckptfs.* temp files) under top,
	skipping the daemon's own .ckptfs directory."""
	final = temp = 0
	for root, dirs, names in os.walk(top):
		if root == top and ".ckptfs" in dirs:
			dirs.remove(".ckptfs")
		for n in names:
			try:
				size = os.lstat(os.path.join(root, n)).st_size
			except OSError:
				continue	# renamed or removed between listing and stat
			if n.startswith(".ckptfs."):
				temp += size
			else:
				final += size
	return final, temp


class Sampler(threading.Thread):
	def __init__(self, mount, store, pids_fn, interval=0.1):
		super().__init__(daemon=True)
		self.stats_path = os.path.join(mount, ".ckptfs", "stats")
		self.store = store
		self.pids_fn = pids_fn
		self.interval = interval
		self.samples = []
		self.halt = threading.Event()
		self.base = None

	def read_stats(self):
		try:
			with open(self.stats_path) as f:
				s = json.load(f)
			return {"absorbed": s["absorbed_bytes"], "written": s["backend_written_bytes"],
				"persisted": s["persisted_bytes"], "dirty": s.get("cache_dirty_bytes")}
		except (OSError, ValueError, KeyError):
			return None

	def sample(self, t0):
		now = time.monotonic()
		rec = {"t": now - t0, "mono": now}
		st = self.read_stats()
		if st:
			rec.update(st)
		rec["wchar"] = sum(proc_io(p).get("wchar", 0) for p in self.pids_fn())
		rec["store_final"], rec["store_temp"] = scan_store(self.store)
		if self.base is None:
			self.base = dict(rec)
		for k in ("absorbed", "written", "persisted", "wchar", "store_final"):  # relative
			if k in rec and k in self.base:
				rec[k] -= self.base[k]
		return rec

	def run(self):
		t0 = time.monotonic()
		while not self.halt.is_set():
			self.samples.append(self.sample(t0))
			self.halt.wait(self.interval)
		self.samples.append(self.sample(t0))

	def stop(self, t0_mono=None):
		"""Stop; with t0_mono (when the measured process started its clock),
		sample times become relative to it, so they line up with its stall
		and durable figures."""
		self.halt.set()
		self.join(30)
		if t0_mono:
			for s in self.samples:
				s["t"] = s["mono"] - t0_mono
		return self.samples


def plot(samples, marks, title, base):
	"""Write base.dat, base.gp and base.svg (or .png); returns the figure's
	path, or None with a logged reason."""
	if not samples:
		return None
	have_stats = "absorbed" in samples[-1]
	with open(base + ".dat", "w") as f:
		f.write("# t_s absorbed_GiB backend_written_GiB durable_GiB  (%s)\n" %
			("from .ckptfs/stats" if have_stats else "wchar / backend scan"))
		for s in samples:
			if have_stats:
				a, w, d = s["absorbed"], s["written"], s["persisted"]
			else:
				a, w, d = s["wchar"], s["store_final"] + s["store_temp"], s["store_final"]
			f.write("%.3f %.4f %.4f %.4f\n" % (s["t"], a / GiB, w / GiB, d / GiB))
	gnuplot = shutil.which("gnuplot")
	if not gnuplot:
		log("plot skipped: gnuplot is not installed (apt-get install gnuplot-nox); data in %s.dat" % base)
		return None
	term, ext = "svg size 900,500 dynamic", ".svg"
	probe = subprocess.run([gnuplot, "-e", "set terminal pngcairo"], capture_output=True, text=True)
	if probe.returncode == 0 and not probe.stderr.strip():
		term, ext = "pngcairo size 900,500", ".png"
	arrows = "".join('set arrow from %.3f, graph 0 to %.3f, graph 1 nohead dt 2\n'
			 'set label "%s" at %.3f, graph %.2f right offset -0.3,0\n'
			 % (t, t, name, t, 0.55 - 0.07 * i) for i, (name, t) in enumerate(marks) if t)
	with open(base + ".gp", "w") as f:
		f.write('set terminal %s noenhanced\nset output "%s%s"\nset title "%s"\n'
			'set xlabel "seconds since the save started"\nset ylabel "GiB"\n'
			'set key left top\nset grid\nset xrange [0:*]\n%s'
			'plot "%s.dat" using 1:2 with lines lw 2 title "absorbed (in cache)", '
			'"" using 1:3 with lines lw 2 title "written to backend", '
			'"" using 1:4 with lines lw 2 title "durable (published)"\n'
			% (term, os.path.basename(base), ext, title, arrows, os.path.basename(base)))
	p = subprocess.run([gnuplot, os.path.basename(base) + ".gp"], cwd=os.path.dirname(base),
			   capture_output=True, text=True)
	if p.returncode != 0:
		log("gnuplot failed: %s" % p.stderr.strip()[-500:])
		return None
	return base + ext
