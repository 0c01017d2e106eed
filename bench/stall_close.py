#!/usr/bin/env python3
"""bench/stall_close.py -- close() latency while the backend stalls.

Issue 9 item 6: no backend I/O on the request path under the namespace lock.
Two mounts, measured side by side in one run: a healthy backend, and one
where every backend system call sleeps STALL seconds (CKPTFS_FAULT
op=any,delay_ms=...) once the checkpoint directory is loaded.  In each, N
files of 64 KiB (data that fits in the cache) are written and closed, and
each close() is timed; stat() and a readdir of the loaded directory too.

  sudo bench/stall_close.py [--stall 30] [-n 200]

Prints p50/p99 close() latency for both and their ratio.  Uses $CKPTFS_BIN,
else build/fs/ckptfs beside this checkout.
"""
import argparse
import os
import statistics
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("CKPTFS_BIN") or os.path.join(os.path.dirname(HERE), "build", "fs", "ckptfs")


def pct(v, p):
	v = sorted(v)
	return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def measure(stall_s, n):
	root = tempfile.mkdtemp(prefix="ckptfs-stall-")
	backend, mnt, flag = f"{root}/backend", f"{root}/mnt", f"{root}/stall"
	os.mkdir(backend)
	os.mkdir(mnt)
	env = dict(os.environ)
	if stall_s:
		env["CKPTFS_FAULT"] = f"op=any,delay_ms={int(stall_s * 1000)},while={flag}"
	subprocess.run([BIN, backend, mnt, "-o", "cache_size=512M,drain_timeout=0"], env=env, check=True)
	try:
		os.mkdir(f"{mnt}/ckpt")
		with open(f"{mnt}/ckpt/warm", "wb") as f:
			f.write(b"x")
		os.listdir(f"{mnt}/ckpt")
		if stall_s:
			open(flag, "w").close()
			time.sleep(0.2)
		data = os.urandom(64 << 10)
		closes, stats = [], []
		for i in range(n):
			fd = os.open(f"{mnt}/ckpt/f{i}", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
			os.write(fd, data)
			t0 = time.perf_counter()
			os.close(fd)
			closes.append(time.perf_counter() - t0)
			t0 = time.perf_counter()
			os.stat(f"{mnt}/ckpt")
			os.listdir(f"{mnt}/ckpt")
			stats.append(time.perf_counter() - t0)
		return closes, stats
	finally:
		if stall_s and os.path.exists(flag):
			os.unlink(flag)
		subprocess.run(["fusermount3", "-u", mnt])


def main():
	ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
	ap.add_argument("--stall", type=float, default=30.0, help="seconds each backend call sleeps")
	ap.add_argument("-n", type=int, default=200, help="files closed per mount")
	a = ap.parse_args()
	healthy, hs = measure(0, a.n)
	stalled, ss = measure(a.stall, a.n)
	ms = lambda x: f"{x * 1e3:8.3f} ms"
	print(f"close() of {a.n} files of 64 KiB; backend stall {a.stall:.0f} s per call")
	print(f"{'':22}{'p50':>12}{'p99':>12}")
	print(f"{'healthy backend':22}{ms(pct(healthy, 50))}{ms(pct(healthy, 99))}")
	print(f"{'stalled backend':22}{ms(pct(stalled, 50))}{ms(pct(stalled, 99))}")
	print(f"{'stat+readdir healthy':22}{ms(pct(hs, 50))}{ms(pct(hs, 99))}")
	print(f"{'stat+readdir stalled':22}{ms(pct(ss, 50))}{ms(pct(ss, 99))}")
	print(f"ratio stalled/healthy: p50 {pct(stalled, 50) / pct(healthy, 50):.2f}x, "
	      f"p99 {pct(stalled, 99) / pct(healthy, 99):.2f}x")


if __name__ == "__main__":
	main()
