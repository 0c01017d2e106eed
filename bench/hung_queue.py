#!/usr/bin/env python3
"""bench/hung_queue.py -- what a long queue behind a hung backend costs.

Issue 13 item 7 (cost grows with work, not history).  Two mounts, side by
side in one run: a healthy backend, and one whose temporary files cannot be
created (CKPTFS_FAULT op=openat,hold=... on ".ckptfs." names: a hung server)
once the directory exists.  In each, N small files are written into one
directory in blocks; files/s is reported per block, so a rate that falls as
the queue grows shows.  In the hung mount, once all N are queued, another
tool adds a file to the directory on the backend and the mount revalidates
it: the time of a stat of an unrelated, already loaded file made meanwhile
is reported (the namespace lock held by the merge).

  sudo bench/hung_queue.py [-n 20000] [--blocks 4]

Uses $CKPTFS_BIN, else build/fs/ckptfs beside this checkout.
"""
import argparse
import os
import subprocess
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("CKPTFS_BIN") or os.path.join(os.path.dirname(HERE), "build", "fs", "ckptfs")
CTL = os.path.join(os.path.dirname(BIN), "ckptfs-ctl")


def write_block(d, start, count):
	t0 = time.monotonic()
	for i in range(start, start + count):
		with open(f"{d}/f{i:07d}", "wb") as f:
			f.write(b"x" * 100)
	return count / (time.monotonic() - t0)


def measure(hung, n, blocks):
	root = tempfile.mkdtemp(prefix="ckptfs-hungq-")
	backend, mnt, hold = f"{root}/backend", f"{root}/mnt", f"{root}/hold"
	os.mkdir(backend)
	os.mkdir(mnt)
	env = dict(os.environ)
	if hung:
		env["CKPTFS_FAULT"] = f"op=openat,name=.ckptfs.,hold={hold}"
	subprocess.run([BIN, backend, mnt, "-o", "cache_size=1G,attr_timeout=0.2"], env=env, check=True)
	res = {"rates": [], "stat_s": None}
	try:
		os.mkdir(f"{mnt}/d")
		os.mkdir(f"{mnt}/other")
		open(f"{mnt}/other/x", "wb").close()
		subprocess.run([CTL, "drain", mnt], check=True, stdout=subprocess.DEVNULL)
		time.sleep(3)  # the cache's pre-faulting settles
		if hung:
			open(hold, "w").close()
		step = n // blocks
		for b in range(blocks):
			res["rates"].append(write_block(f"{mnt}/d", b * step, step))
		if hung:
			with open(f"{backend}/d/foreign", "wb") as f:
				f.write(b"y")
			time.sleep(0.3)
			took = {}

			def other():
				time.sleep(0.02)
				t = time.monotonic()
				os.stat(f"{mnt}/other/x")
				took["s"] = time.monotonic() - t
			th = threading.Thread(target=other)
			th.start()
			os.listdir(f"{mnt}/d")	# revalidates d: all n names pending
			th.join()
			res["stat_s"] = took["s"]
	finally:
		if os.path.exists(hold):
			os.unlink(hold)
		subprocess.run([CTL, "drain", mnt, "--timeout", "300"], stdout=subprocess.DEVNULL)
		subprocess.run(["umount", mnt])
		subprocess.run(["rm", "-rf", root])
	return res


def main():
	ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
	ap.add_argument("-n", type=int, default=20000, help="files (default 20000)")
	ap.add_argument("--blocks", type=int, default=4, help="blocks reported (default 4)")
	a = ap.parse_args()
	healthy = measure(False, a.n, a.blocks)
	hung = measure(True, a.n, a.blocks)
	step = a.n // a.blocks
	print(f"{a.n} files of 100 B into one directory, files/s per block of {step}")
	print("| block | healthy | hung backend | hung / healthy |")
	print("|---|---|---|---|")
	for b in range(a.blocks):
		h, s = healthy["rates"][b], hung["rates"][b]
		print(f"| {b * step}-{(b + 1) * step} | {h:.0f} | {s:.0f} | {s / h:.2f} |")
	print(f"stat of another file during the revalidation of the directory with {a.n} "
	      f"pending names: {hung['stat_s'] * 1000:.1f} ms")


if __name__ == "__main__":
	main()
