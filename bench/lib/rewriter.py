"""rewriter.py -- the measured process of the rewrite workloads (appends, randio).

Run as a child of bench/run with a JSON spec on stdin; prints one JSON line.
  phase "setup": lay down what the work starts from, unmeasured, and make it
                 durable (appends: the big file; randio: nothing).
  phase "work":  appends  `count` times: open O_APPEND, write one line, (ext4:
                          fsync,) close; then durable (see durable.py)
                 randio   `procs` processes, each `ops` operations on its own
                          sparse file of `size` bytes (seeded): 70% pwrite of
                          4-64 KiB at a random offset, 15% fsync, 15%
                          ftruncate to between half and all of `size`; then
                          durable
Output: work_s (the appends, or until every process finished), durable
(seconds from the start until durable).
"""
import json
import os
import random
import sys
import time

import durable as D


def setup_appends(spec):
	path = os.path.join(spec["dir"], "log.bin")
	block = random.Random(3).randbytes(1 << 20)
	fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
	left = spec["size"]
	while left > 0:
		left -= os.write(fd, block[:min(len(block), left)])
	if spec.get("durable") == "fsync_each":
		os.fsync(fd)
	os.close(fd)
	D.finish(spec, {path: spec["size"]})


def work_appends(spec):
	path = os.path.join(spec["dir"], "log.bin")
	each = spec.get("durable") == "fsync_each"
	t0 = time.perf_counter()
	for i in range(spec["count"]):
		fd = os.open(path, os.O_WRONLY | os.O_APPEND)
		os.write(fd, b"step %6d loss 2.%06d lr 3.0e-4 tokens/s 123456.7\n" % (i, i * 7919 % 999999))
		if each:
			os.fsync(fd)
		os.close(fd)
	work = time.perf_counter() - t0
	D.finish(spec, {path: os.stat(path).st_size})
	return work, time.perf_counter() - t0


def randio_proc(spec, k):
	r = random.Random(100 + k)
	size = spec["size"]
	path = os.path.join(spec["dir"], "sparse%d.bin" % k)
	fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
	os.ftruncate(fd, size)
	buf = r.randbytes(64 << 10)
	for _ in range(spec["ops"]):
		x = r.random()
		if x < 0.70:
			n = r.randint(1, 16) * 4096
			os.pwrite(fd, buf[:n], r.randrange(0, size - n))
		elif x < 0.85:
			os.fsync(fd)
		else:
			os.ftruncate(fd, r.randrange(size // 2, size))
	os.fsync(fd)
	os.close(fd)


def work_randio(spec):
	t0 = time.perf_counter()
	kids = []
	for k in range(spec["procs"]):
		pid = os.fork()
		if pid == 0:
			try:
				randio_proc(spec, k)
				os._exit(0)
			except BaseException as e:  # noqa: BLE001 -- reported through the exit status
				print("randio process %d: %s" % (k, e), file=sys.stderr)
				os._exit(1)
		kids.append(pid)
	bad = 0
	for pid in kids:
		_, st = os.waitpid(pid, 0)
		bad += st != 0
	if bad:
		raise SystemExit("%d randio processes failed" % bad)
	work = time.perf_counter() - t0
	files = {os.path.join(spec["dir"], "sparse%d.bin" % k): None for k in range(spec["procs"])}
	D.finish(spec, {p: os.stat(p).st_size for p in files})
	return work, time.perf_counter() - t0


def main():
	spec = json.load(sys.stdin)
	if spec["phase"] == "setup":
		if spec["kind"] == "appends":
			setup_appends(spec)
		print(json.dumps({}))
		return
	work, dur = (work_appends if spec["kind"] == "appends" else work_randio)(spec)
	print(json.dumps({"work_s": work, "durable": dur, "stall": work}))


if __name__ == "__main__":
	main()
