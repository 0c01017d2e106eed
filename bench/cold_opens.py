#!/usr/bin/env python3
"""bench/cold_opens.py -- what reading many files the cache does not hold costs.

The first listing of a directory and the first open of a file not in the
cache are backend calls made for the request; they run on a helper thread
so that a hung backend costs the caller EIO after drain_timeout, not its
FUSE worker (fs/bcall.c).  This measures the price of that hand-off where
it is paid most: N small files published on the backend before the mount
(100 directories), each opened, read whole and closed once through a fresh
mount, against the same reads straight from the backend, in interleaved
rounds.  The page cache is dropped before every pass, so both read cold.

  sudo bench/cold_opens.py [-n 10000] [--size 16384] [--rounds 3]
                           [--bin2 OTHER/ckptfs]   # a second build beside it

Uses $CKPTFS_BIN, else build/fs/ckptfs beside this checkout.  Prints files/s
per target and the ratios to direct, medians over the rounds.
"""
import argparse
import os
import statistics
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("CKPTFS_BIN") or os.path.join(os.path.dirname(HERE), "build", "fs", "ckptfs")


def drop_caches():
	os.sync()
	with open("/proc/sys/vm/drop_caches", "w") as f:
		f.write("3\n")


def read_all(top, names):
	t0 = time.monotonic()
	for d in sorted(x for x in os.listdir(top) if not x.startswith(".")):
		for name in os.listdir(f"{top}/{d}"):
			with open(f"{top}/{d}/{name}", "rb") as f:
				f.read()
	return len(names) / (time.monotonic() - t0)


def through_mount(binary, backend, names):
	mnt = tempfile.mkdtemp(prefix="ckptfs-coldopen-mnt-")
	subprocess.run([binary, backend, mnt, "-o", "cache_size=1G"], check=True)
	try:
		drop_caches()
		return read_all(mnt, names)
	finally:
		subprocess.run(["fusermount3", "-u", mnt], check=True)
		for _ in range(200):  # the daemon drains and exits
			if not os.path.ismount(mnt):
				break
			time.sleep(0.05)
		time.sleep(0.5)
		os.rmdir(mnt)


def main():
	ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
	ap.add_argument("-n", type=int, default=10000)
	ap.add_argument("--size", type=int, default=16384)
	ap.add_argument("--rounds", type=int, default=3)
	ap.add_argument("--bin2", help="a second ckptfs binary, measured beside the first")
	a = ap.parse_args()
	root = tempfile.mkdtemp(prefix="ckptfs-coldopen-", dir="/var/tmp")
	backend = f"{root}/backend"
	os.mkdir(backend)
	names = []
	data = os.urandom(a.size)
	for i in range(a.n):
		d = f"{backend}/d{i % 100:03d}"
		os.makedirs(d, exist_ok=True)
		names.append(f"{d}/f{i:06d}")
		with open(names[-1], "wb") as f:
			f.write(data)
	targets = {"direct": None, "ckptfs": BIN}
	if a.bin2:
		targets["ckptfs2"] = a.bin2
	rates = {t: [] for t in targets}
	for _ in range(a.rounds):
		for t, binary in targets.items():
			if binary is None:
				drop_caches()
				rates[t].append(read_all(backend, names))
			else:
				rates[t].append(through_mount(binary, backend, names))
	subprocess.run(["rm", "-rf", root], check=True)
	med = {t: statistics.median(v) for t, v in rates.items()}
	print(f"{a.n} files of {a.size} B, cold, median of {a.rounds} interleaved rounds:")
	for t in targets:
		runs = ", ".join(f"{r:.0f}" for r in rates[t])
		print(f"  {t:8s} {med[t]:8.0f} files/s  ({med[t] / med['direct']:.2f}x direct; rounds {runs})")
	if a.bin2:
		print(f"  ckptfs / ckptfs2: {med['ckptfs'] / med['ckptfs2']:.3f}")


if __name__ == "__main__":
	main()
