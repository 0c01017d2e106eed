#!/usr/bin/env python3
"""bench/sparse_publish.py -- how long a sparse file takes to become durable.

  sudo bench/sparse_publish.py                    # 1 TiB, 4 MiB of data in 16 pieces
  sudo bench/sparse_publish.py --size 20G --rounds 3
  CKPTFS_BIN=/work/main/build/fs/ckptfs sudo bench/sparse_publish.py --size 20G

Mounts ckptfs over an empty backend directory, creates a file of --size
bytes (ftruncate) with --data bytes written in 16 pieces at scattered,
unaligned offsets, closes it, and times close -> durable (fsync of the
mount root, which waits for every operation before it).  Then the backend
file's size and allocated bytes, and `ckptfs-ctl verify` of the backend,
timed too.  One line of JSON per round, then the medians.

Uses the daemon at $CKPTFS_BIN, else build/fs/ckptfs of this checkout, else
/work/main/build/fs/ckptfs; ckptfs-ctl beside it (or $CKPTFS_CTL).  Root.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "lib"))

from common import find_ctl, find_daemon, parse_size  # noqa: E402


def one_round(daemon, ctl, workdir, size, data, timeout):
	shutil.rmtree(workdir, ignore_errors=True)
	backend, mnt = os.path.join(workdir, "backend"), os.path.join(workdir, "mnt")
	os.makedirs(backend)
	os.makedirs(mnt)
	subprocess.run([daemon, backend, mnt, "-o", "cache_size=256M"], check=True)
	try:
		piece = data // 16
		fd = os.open(os.path.join(mnt, "sparse"), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
		os.ftruncate(fd, size)
		for i in range(16):
			off = 0 if i == 0 else i * (size // 16) + i * 1048576 - 100 * 1024 + i * 1111
			os.pwrite(fd, os.urandom(piece), min(off, size - piece))
		t0 = time.monotonic()
		os.close(fd)
		root = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
		os.fsync(root)
		os.close(root)
		publish = time.monotonic() - t0
	finally:
		subprocess.run(["fusermount3", "-u", mnt], timeout=timeout)
		for _ in range(int(timeout * 10)):
			if subprocess.run(["pgrep", "-f", "ckptfs %s " % backend],
					  stdout=subprocess.DEVNULL).returncode != 0:
				break
			time.sleep(0.1)
	st = os.stat(os.path.join(backend, "sparse"))
	t0 = time.monotonic()
	v = subprocess.run([ctl, "verify", "--quiet", backend], stdout=subprocess.PIPE, text=True,
			   timeout=timeout)
	verify = time.monotonic() - t0
	shutil.rmtree(workdir, ignore_errors=True)
	return {"size": size, "data": data, "publish_s": publish, "backend_size": st.st_size,
		"backend_allocated": st.st_blocks * 512, "verify_s": verify, "verify_ok": v.returncode == 0}


def main():
	ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
	ap.add_argument("--size", default="1T", help="apparent size of the file (1T)")
	ap.add_argument("--data", default="4M", help="bytes of data in it, 16 pieces (4M)")
	ap.add_argument("--rounds", type=int, default=3, help="rounds (3)")
	ap.add_argument("--workdir", default="/var/tmp/ckptfs-sparse-publish",
			help="emptied and used (/var/tmp/ckptfs-sparse-publish)")
	ap.add_argument("--timeout", type=int, default=600, help="seconds per round (600)")
	args = ap.parse_args()
	if os.geteuid() != 0:
		sys.exit("sparse_publish: run as root (it mounts ckptfs)")
	daemon = find_daemon(REPO)
	ctl = find_ctl(daemon)
	size, data = parse_size(args.size), parse_size(args.data)
	rows = []
	for _ in range(args.rounds):
		r = one_round(daemon, ctl, args.workdir, size, data, args.timeout)
		print(json.dumps(r), flush=True)
		rows.append(r)
	print("daemon %s: %s file, %s of data: publish %.3f s, verify %.3f s (medians of %d); "
	      "backend %d bytes, %d allocated; verify %s" % (
		daemon, args.size, args.data, statistics.median(r["publish_s"] for r in rows),
		statistics.median(r["verify_s"] for r in rows), len(rows), rows[-1]["backend_size"],
		rows[-1]["backend_allocated"], "OK" if all(r["verify_ok"] for r in rows) else "FAILED"))
	return 0 if all(r["verify_ok"] for r in rows) else 1


if __name__ == "__main__":
	sys.exit(main())
