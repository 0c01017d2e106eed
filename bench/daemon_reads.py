#!/usr/bin/env python3
"""bench/daemon_reads.py -- reads of backend data that go through the daemon.

A file the cache does not hold is read by the kernel straight from the
backend (FUSE passthrough) when it is clean, durable and opened read-only.
Otherwise -- passthrough=off, a kernel without passthrough, a file also
open for writing -- the daemon reads the backend for each request, on a
helper thread it waits for at most drain_timeout (fs/bread.c), so that a
hung backend costs the reader EIO, not its FUSE worker.  This measures
that path: N files published on the backend before the mount, read whole
with 1 MiB reads through a fresh mount with passthrough=off, against the
same reads straight from the backend, in interleaved rounds; cold (page
cache dropped first) and warm (the backend's pages cached).

  sudo bench/daemon_reads.py [-n 4] [--size-mib 256] [--rounds 3]
                             [--bin2 OTHER/ckptfs ...]   # other builds beside it

Uses $CKPTFS_BIN, else build/fs/ckptfs beside this checkout.  Prints GiB/s
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
MIB = 1 << 20


def drop_caches():
	os.sync()
	with open("/proc/sys/vm/drop_caches", "w") as f:
		f.write("3\n")


def read_all(top, names):
	total = 0
	t0 = time.monotonic()
	for name in names:
		fd = os.open(f"{top}/{name}", os.O_RDONLY)
		try:
			while True:
				n = len(os.read(fd, MIB))
				if not n:
					break
				total += n
		finally:
			os.close(fd)
	return total / (time.monotonic() - t0) / (1 << 30)


def through_mount(binary, backend, names, cold):
	mnt = tempfile.mkdtemp(prefix="ckptfs-dreads-mnt-")
	subprocess.run([binary, backend, mnt, "-o", "cache_size=1G,passthrough=off"], check=True)
	try:
		if cold:
			drop_caches()
		else:
			read_all(backend, names)
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
	ap.add_argument("-n", type=int, default=4)
	ap.add_argument("--size-mib", type=int, default=256)
	ap.add_argument("--rounds", type=int, default=3)
	ap.add_argument("--bin2", action="append", default=[],
			help="another ckptfs binary, measured beside the first (repeatable)")
	a = ap.parse_args()
	root = tempfile.mkdtemp(prefix="ckptfs-dreads-", dir="/var/tmp")
	backend = f"{root}/backend"
	os.mkdir(backend)
	names = [f"rank{i}.pt" for i in range(a.n)]
	for name in names:
		with open(f"{backend}/{name}", "wb") as f:
			for _ in range(a.size_mib):
				f.write(os.urandom(MIB))
	targets = {"direct": None, "ckptfs": BIN}
	for i, b in enumerate(a.bin2):
		targets[f"ckptfs{i + 2}"] = b
	rates = {(t, c): [] for t in targets for c in ("cold", "warm")}
	for _ in range(a.rounds):
		for cold in (True, False):
			c = "cold" if cold else "warm"
			for t, binary in targets.items():
				if binary is None:
					if cold:
						drop_caches()
					else:
						read_all(backend, names)
					rates[(t, c)].append(read_all(backend, names))
				else:
					rates[(t, c)].append(through_mount(binary, backend, names, cold))
	subprocess.run(["rm", "-rf", root], check=True)
	print(f"{a.n} files of {a.size_mib} MiB, 1 MiB reads, passthrough=off, "
	      f"median of {a.rounds} interleaved rounds:")
	for c in ("cold", "warm"):
		med = {t: statistics.median(rates[(t, c)]) for t in targets}
		for t in targets:
			runs = ", ".join(f"{r:.2f}" for r in rates[(t, c)])
			print(f"  {c} {t:8s} {med[t]:6.2f} GiB/s  ({med[t] / med['direct']:.2f}x direct; "
			      f"rounds {runs})")
		for i in range(len(a.bin2)):
			print(f"  {c} ckptfs / ckptfs{i + 2}: {med['ckptfs'] / med[f'ckptfs{i + 2}']:.3f}")


if __name__ == "__main__":
	main()
