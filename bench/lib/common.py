"""common.py -- small helpers every part of the benchmark uses.

Owns: clocks and statistics (median, min, max), size parsing and formatting,
running commands with a timeout, reading /proc (a process's CPU seconds and
peak RSS, the machine's dirty page count, load average), syncfs(2), and "quiesce": waiting until the disk is idle before a measured run so
that writeback left over from the previous target does not land on the next
one.  Nothing here knows about targets or workloads.

Only the Python standard library is used: the runner must work with the
machine's python3 and nothing installed.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from durable import syncfs  # noqa: F401 -- one syncfs for the runner and the children

GiB = 1 << 30
MiB = 1 << 20
KiB = 1 << 10

CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg):
	"""Progress goes to stderr so stdout carries only the report."""
	print("[bench %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def parse_size(text):
	"""'4G' -> 4294967296; K/M/G/T suffixes are powers of two."""
	s = str(text).strip().upper().rstrip("B").rstrip("I")
	mult = 1
	for suf, m in (("K", KiB), ("M", MiB), ("G", GiB), ("T", GiB << 10), ("P", GiB << 20)):
		if s.endswith(suf):
			s, mult = s[:-1], m
			break
	return int(float(s) * mult)


def find_daemon(repo):
	"""$CKPTFS_BIN, else build/fs/ckptfs of the checkout at repo, else main's build."""
	for p in (os.environ.get("CKPTFS_BIN"), os.path.join(repo, "build", "fs", "ckptfs"),
		  "/work/main/build/fs/ckptfs"):
		if p and os.access(p, os.X_OK):
			return os.path.abspath(p)
	sys.exit("no ckptfs binary: set CKPTFS_BIN or build this checkout")


def find_ctl(daemon):
	"""$CKPTFS_CTL (one with `hash`, to measure an older daemon), else beside the daemon."""
	return os.environ.get("CKPTFS_CTL") or os.path.join(os.path.dirname(daemon), "ckptfs-ctl")


def fmt_bytes(n):
	for unit, m in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
		if abs(n) >= m:
			return "%.3g %s" % (n / m, unit)
	return "%d B" % n


def summarize(values):
	"""Median, min, max and n of the non-None values, or None if none."""
	v = [x for x in values if x is not None]
	if not v:
		return None
	return {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)}


def run(cmd, timeout=120, check=True, **kw):
	"""Run a command, capture its output, raise with the output on failure."""
	p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
			   text=True, timeout=timeout, **kw)
	if check and p.returncode != 0:
		raise RuntimeError("%s exited %d: %s" % (" ".join(cmd), p.returncode, p.stdout.strip()[-2000:]))
	return p


def run_json(cmd, timeout, on_start=None, stdin_data=None):
	"""Run a measuring child that prints one JSON object as its last stdout
	line; on_start(pid) is called once it runs (to sample its progress);
	stdin_data is written to its standard input (specs too big for argv)."""
	p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
			     text=True)
	if on_start:
		on_start(p.pid)
	try:
		out, err = p.communicate(stdin_data, timeout=timeout)
	except subprocess.TimeoutExpired:
		p.kill()
		p.communicate()
		raise RuntimeError("%s timed out after %d s" % (os.path.basename(cmd[1]), timeout))
	if p.returncode != 0:
		raise RuntimeError("%s exited %d: %s" % (os.path.basename(cmd[1] if len(cmd) > 1 else cmd[0]),
							 p.returncode, (err or out).strip()[-3000:]))
	lines = [line for line in out.splitlines() if line.strip()]
	return json.loads(lines[-1])


def proc_cpu_seconds(pid):
	"""utime + stime of a live process, from /proc/PID/stat (all threads)."""
	with open("/proc/%d/stat" % pid) as f:
		data = f.read()
	fields = data[data.rindex(")") + 2:].split()
	# fields[0] is field 3 (state); utime and stime are fields 14 and 15
	return {"user": int(fields[11]) / CLK_TCK, "sys": int(fields[12]) / CLK_TCK}


def proc_status_kib(pid, key):
	"""A kB field (VmHWM, VmRSS, ...) of /proc/PID/status, in bytes."""
	with open("/proc/%d/status" % pid) as f:
		for line in f:
			if line.startswith(key + ":"):
				return int(line.split()[1]) * KiB
	return None


def proc_io(pid):
	"""/proc/PID/io as a dict (wchar = bytes passed to write-like calls)."""
	out = {}
	try:
		with open("/proc/%d/io" % pid) as f:
			for line in f:
				k, v = line.split(":")
				out[k] = int(v)
	except OSError:
		pass
	return out


def cpu_pressure_us():
	"""Total microseconds some task waited for a CPU (PSI), or None."""
	try:
		with open("/proc/pressure/cpu") as f:
			return int(f.readline().split("total=")[1])
	except (OSError, IndexError, ValueError):
		return None


def cpu_steal_s():
	"""Seconds of CPU time the hypervisor gave to others (all CPUs)."""
	with open("/proc/stat") as f:
		return int(f.readline().split()[8]) / CLK_TCK


def kthread_cpu_s():
	"""utime + stime of every kernel thread (children of kthreadd, PID 2):
	writeback flushers, io_uring and block workers."""
	total = 0
	for d in os.listdir("/proc"):
		if not d.isdigit():
			continue
		try:
			with open("/proc/%s/stat" % d) as f:
				data = f.read()
		except OSError:
			continue
		fields = data[data.rindex(")") + 2:].split()
		if fields[1] == "2" or d == "2":
			total += int(fields[11]) + int(fields[12])
	return total / CLK_TCK


class Contention:
	"""Measures how contended the machine was over an interval: the share of
	wall time some task waited for a CPU, and stolen CPU seconds.  Recorded
	with every measurement so a noisy round can be recognised.  Also the
	kernel threads' CPU seconds (the baselines' writeback is done there)."""

	def __init__(self):
		self.t = time.monotonic()
		self.psi = cpu_pressure_us()
		self.steal = cpu_steal_s()
		self.kthreads = kthread_cpu_s()

	def result(self):
		wall = time.monotonic() - self.t
		out = {"steal_s": cpu_steal_s() - self.steal, "kthread_cpu_s": kthread_cpu_s() - self.kthreads}
		psi = cpu_pressure_us()
		if psi is not None and self.psi is not None and wall > 0:
			out["cpu_wait_pct"] = (psi - self.psi) / 1e6 / wall * 100
		return out


def meminfo(key):
	with open("/proc/meminfo") as f:
		for line in f:
			if line.startswith(key + ":"):
				return int(line.split()[1]) * KiB
	return 0


def loadavg():
	with open("/proc/loadavg") as f:
		return float(f.read().split()[0])


def quiesce(path, limit=30.0, dirty_floor=64 * MiB):
	"""Make the disk idle before a measured run: syncfs, then wait (bounded)
	until the machine's Dirty+Writeback pages are small.  Returns seconds
	spent, which the report keeps as a noise indicator."""
	t0 = time.monotonic()
	if path:
		syncfs(path)
	while time.monotonic() - t0 < limit:
		if meminfo("Dirty") + meminfo("Writeback") < dirty_floor:
			break
		time.sleep(0.1)
	return time.monotonic() - t0


def empty_dir(path):
	"""Remove everything inside path (not path itself), hidden names too."""
	for name in os.listdir(path):
		p = os.path.join(path, name)
		if os.path.isdir(p) and not os.path.islink(p):
			shutil.rmtree(p)
		else:
			os.unlink(p)


def is_mounted(path):
	"""True if path is a mount point, from /proc/self/mountinfo: no stat of the
	mount itself, which could block while a FUSE daemon starts."""
	real = os.path.realpath(path)
	with open("/proc/self/mountinfo") as f:
		for line in f:
			mp = line.split()[4].replace("\\040", " ")
			if mp == real:
				return True
	return False


def free_port():
	"""A TCP port on 127.0.0.1 that was free a moment ago."""
	import socket
	with socket.socket() as s:
		s.bind(("127.0.0.1", 0))
		return s.getsockname()[1]


def which(name, extra_dirs=()):
	for d in extra_dirs:
		p = os.path.join(d, name)
		if os.access(p, os.X_OK):
			return p
	return shutil.which(name)
