#!/usr/bin/env python3
"""bench/sparse_stress.py -- a random-I/O stress over sparse files: what the
backend holds through ckptfs against the same workload on a plain directory.

  sudo bench/sparse_stress.py                     # 4 processes, 1500 ops each
  sudo bench/sparse_stress.py --procs 4 --ops 3000 --max-size 3G --seed 7
  bench/sparse_stress.py --help

Each of N processes owns one file and runs a fixed, seeded sequence of
operations on it: small writes (85%: 512 B to 64 KiB of random bytes) at
random offsets below --max-size, truncates to a random size (1%), fsyncs
(9%), and closes and reopens (5%) (on ckptfs each fsync or close is a new version of the file).
The same sequences run twice, one target after the other:

  plain   a directory of the work directory's own file system (ext4 here);
  ckptfs  a ckptfs mount over a backend directory on that same file system,
          then `ckptfs-ctl drain` until everything is durable.

Reported, per target: wall time of the workload (the slowest process; for
ckptfs also the drain after it), apparent size and allocated bytes
(st_blocks) of the files, for ckptfs of the backend files (and, apart, of
its manifest under .ckptfs/), and the ratio of allocated bytes ckptfs/plain.
A workload that outlasts --timeout is killed and reported unfinished (the
backend is measured as the drain leaves it).  The files must end equal: their digests (`ckptfs-ctl hash`, which does not
read holes) are compared file by file, and `ckptfs-ctl verify` must pass on
the backend.  A run that fails either check says so and exits 1.

Uses the daemon at $CKPTFS_BIN, else build/fs/ckptfs of this checkout, else
/work/main/build/fs/ckptfs (ckptfs-ctl beside it, or $CKPTFS_CTL: one that has
`hash`, to measure an older daemon).  Root (it mounts), the
machine's python3, standard library only.  Figures vary from run to run on a
shared machine; compare the two targets of one run.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "lib"))

from common import find_ctl, find_daemon, fmt_bytes, parse_size  # noqa: E402


# ---- the workload: one process, one file ----------------------------------

def worker(path, seed, ops, max_size):
	"""Run the seeded sequence on path."""
	rnd = random.Random(seed)
	t0 = time.monotonic()
	fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
	for _ in range(ops):
		x = rnd.random()
		if x < 0.85:
			n = rnd.randint(512, 64 << 10)
			off = rnd.randrange(0, max_size - n)
			os.pwrite(fd, rnd.randbytes(n), off)
		elif x < 0.86:
			os.ftruncate(fd, rnd.randrange(0, max_size))
		elif x < 0.95:
			os.fsync(fd)
		else:
			os.close(fd)
			fd = os.open(path, os.O_RDWR)
	os.close(fd)
	return 0


def run_workload(d, args):
	"""All processes at once in directory d: the slowest one's wall seconds,
	and whether they all finished within --timeout (the rest are killed)."""
	t0 = time.monotonic()
	procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker",
				   os.path.join(d, "f%d" % i), str(args.seed * 1000 + i), str(args.ops),
				   str(args.max_size)], stdout=subprocess.DEVNULL)
		 for i in range(args.procs)]
	finished = True
	for p in procs:
		try:
			p.wait(timeout=max(1, args.timeout - (time.monotonic() - t0)))
		except subprocess.TimeoutExpired:
			finished = False
	for p in procs:
		if p.poll() is None:
			p.kill()
			p.wait()
		elif p.returncode != 0:
			raise RuntimeError("a worker failed (exit %d)" % p.returncode)
	return time.monotonic() - t0, finished


def usage(d, names):
	apparent = allocated = 0
	for n in names:
		st = os.stat(os.path.join(d, n))
		apparent += st.st_size
		allocated += st.st_blocks * 512
	return apparent, allocated


def tree_allocated(d):
	total = 0
	for root, _, files in os.walk(d):
		for f in files:
			total += os.lstat(os.path.join(root, f)).st_blocks * 512
	return total


def digests(ctl, d, names):
	out = subprocess.run([ctl, "hash"] + [os.path.join(d, n) for n in names], check=True,
			     stdout=subprocess.PIPE, text=True).stdout.split("\n")
	return [line.split()[0] for line in out if line.strip()]


def main():
	ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
	ap.add_argument("--procs", type=int, default=4, help="processes, one file each (4)")
	ap.add_argument("--ops", type=int, default=1500, help="operations per process (1500)")
	ap.add_argument("--max-size", default="3G", help="offsets and sizes below this (3G)")
	ap.add_argument("--seed", type=int, default=1, help="the sequences' seed (1)")
	ap.add_argument("--workdir", default="/var/tmp/ckptfs-sparse-stress",
			help="emptied and used for both targets (/var/tmp/ckptfs-sparse-stress)")
	ap.add_argument("--cache-size", default="1G", help="ckptfs cache_size (1G)")
	ap.add_argument("--timeout", type=int, default=900,
			help="seconds allowed for the workload and for the drain, each (900)")
	ap.add_argument("--keep", action="store_true", help="leave the work directory for inspection")
	ap.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
	args = ap.parse_args()
	if args.worker:
		p, seed, ops, size = args.worker
		return worker(p, int(seed), int(ops), int(size))
	args.max_size = parse_size(args.max_size)
	if os.geteuid() != 0:
		sys.exit("sparse_stress: run as root (it mounts ckptfs)")
	daemon = find_daemon(REPO)
	ctl = find_ctl(daemon)
	names = ["f%d" % i for i in range(args.procs)]
	w = args.workdir
	shutil.rmtree(w, ignore_errors=True)
	plain, backend, mnt = (os.path.join(w, x) for x in ("plain", "backend", "mnt"))
	for x in (plain, backend, mnt):
		os.makedirs(x)
	res = {"procs": args.procs, "ops": args.ops, "max_size": args.max_size, "seed": args.seed,
	       "daemon": daemon}

	print("sparse_stress: plain directory (%s)..." % plain, file=sys.stderr)
	res["plain_secs"], res["plain_finished"] = run_workload(plain, args)
	res["plain_apparent"], res["plain_allocated"] = usage(plain, names)

	print("sparse_stress: ckptfs over %s..." % backend, file=sys.stderr)
	subprocess.run([daemon, backend, mnt, "-o", "cache_size=" + args.cache_size], check=True)
	ok = True
	try:
		res["ckptfs_workload_secs"], res["ckptfs_finished"] = run_workload(mnt, args)
		t0 = time.monotonic()
		d = subprocess.run([ctl, "drain", mnt, "--timeout", str(args.timeout)])
		res["ckptfs_drain_secs"] = time.monotonic() - t0
		res["drained"] = d.returncode == 0
		ok = res["drained"] and res["ckptfs_finished"] and res["plain_finished"]
	finally:
		subprocess.run(["fusermount3", "-u", mnt])
		for _ in range(600):	# the daemon drains and exits
			if subprocess.run(["mountpoint", "-q", mnt]).returncode != 0 and \
			   subprocess.run(["pgrep", "-f", "ckptfs %s " % backend],
					  stdout=subprocess.DEVNULL).returncode != 0:
				break
			time.sleep(0.1)
	res["ckptfs_secs"] = res["ckptfs_workload_secs"] + res["ckptfs_drain_secs"]
	res["ckptfs_apparent"], res["ckptfs_allocated"] = usage(backend, names)
	res["ckptfs_metadata_allocated"] = tree_allocated(os.path.join(backend, ".ckptfs"))
	res["allocated_ratio"] = res["ckptfs_allocated"] / max(1, res["plain_allocated"])

	same = res["ckptfs_finished"] and digests(ctl, plain, names) == digests(ctl, backend, names)
	v = subprocess.run([ctl, "verify", "--quiet", backend], stdout=subprocess.PIPE, text=True)
	res["same_contents"], res["verify_ok"] = same, v.returncode == 0
	ok = ok and same and res["verify_ok"]

	print("| | plain | ckptfs (backend) | ratio |")
	print("|---|---|---|---|")
	print("| wall time | %.2f s | %.2f s (workload %.2f%s + drain %.2f) | %.2fx |" % (
		res["plain_secs"], res["ckptfs_secs"], res["ckptfs_workload_secs"],
		"" if res["ckptfs_finished"] else ", NOT FINISHED: killed", res["ckptfs_drain_secs"],
		res["ckptfs_secs"] / res["plain_secs"]))
	print("| apparent size | %s | %s | |" % (fmt_bytes(res["plain_apparent"]), fmt_bytes(res["ckptfs_apparent"])))
	print("| allocated | %s | %s (+ %s manifest) | %.2fx |" % (
		fmt_bytes(res["plain_allocated"]), fmt_bytes(res["ckptfs_allocated"]),
		fmt_bytes(res["ckptfs_metadata_allocated"]), res["allocated_ratio"]))
	print("| same contents (ckptfs-ctl hash) | | %s | |" % (
		"yes" if same else "NO" if res["ckptfs_finished"] else "not compared (unfinished)"))
	print("| verify | | %s | |" % ("OK" if res["verify_ok"] else "FAILED:\n" + v.stdout[-2000:]))
	print(json.dumps(res))
	if not args.keep and subprocess.run(["mountpoint", "-q", mnt]).returncode != 0:
		shutil.rmtree(w, ignore_errors=True)
	return 0 if ok else 1


if __name__ == "__main__":
	sys.exit(main())
