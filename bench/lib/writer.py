"""writer.py -- the measured process of the file workloads (ckpt2g, small files).

Run as a child of bench/run:  python3 writer.py < SPEC.json  (or with the JSON
as its argument) and prints one JSON line with its timings.  The spec comes
on stdin because 10,000 file names do not fit in one argument.  Keeping the trainer-side writes in their own process
means the runner's own work (sampling, bookkeeping) never shares its CPU time,
and the writer's CPU (getrusage) is its own.

Spec keys: dir, files (relative names), sizes, io_size, mkdirs (created
before the clock starts), mkdir_each (each file's directory made when the
loop first reaches it, on the clock; with "fsync_each" each such directory,
and its parent once, is fsynced after its last file: a new tree's entries
are durable only then), and
  open:    "create"    O_CREAT|O_TRUNC, the normal checkpoint write
           "overwrite" no O_TRUNC: rewrite existing files in place (tmpfs
                       reference, whose pages were allocated beforehand)
  durable: see durable.py; "fsync_each" fsyncs each file before its close
           (stall == durable), the others run once after the last close.

Timings are seconds from just before the first open(2): stall = when the last
close(2) returned; durable = when the durable step returned.
"""
import json
import os
import random
import resource
import sys
import time

import durable as D


def write_all(fd, buf, size):
	"""Write size bytes in len(buf)-sized write(2) calls, resuming short writes."""
	view = memoryview(buf)
	left = size
	while left > 0:
		block = view[:min(len(buf), left)]
		while len(block):
			n = os.write(fd, block)
			block = block[n:]
			left -= n


def pattern(io_size, seed):
	"""Random bytes (one block, reused for every write): nothing any layer
	could skip as zeros or compress."""
	return random.Random(seed).randbytes(io_size)


def main():
	spec = json.loads(sys.argv[1]) if len(sys.argv) > 1 else json.load(sys.stdin)
	d = spec["dir"]
	io_size = spec.get("io_size", 1 << 20)
	buf = pattern(io_size, spec.get("seed", 1))
	flags = os.O_WRONLY | os.O_CLOEXEC
	if spec.get("open", "create") == "create":
		flags |= os.O_CREAT | os.O_TRUNC
	durable = spec.get("durable", "none")
	sizes = spec.get("sizes")
	for m in spec.get("mkdirs", []):
		os.makedirs(os.path.join(d, m), exist_ok=True)
	closes = []
	made = []	# directories made on the clock, in order
	t0 = time.perf_counter()
	t0_mono = time.monotonic()	# the clock the sampler uses, for the plot
	for i, name in enumerate(spec["files"]):
		sub = os.path.dirname(name)
		if spec.get("mkdir_each") and sub and (not made or made[-1] != sub):
			if made and durable == "fsync_each":
				D.fsync_path(os.path.join(d, made[-1]), directory=True)
			os.makedirs(os.path.join(d, sub), exist_ok=True)
			made.append(sub)
		fd = os.open(os.path.join(d, name), flags, 0o644)
		write_all(fd, buf, sizes[i])
		if durable == "fsync_each":
			os.fsync(fd)
		os.close(fd)
		closes.append(time.perf_counter() - t0)
	if made and durable == "fsync_each":
		for p in {made[-1], os.path.dirname(made[-1])} - {""}:
			D.fsync_path(os.path.join(d, p), directory=True)
	stall = time.perf_counter() - t0
	D.finish(spec, {os.path.join(d, n): sz for n, sz in zip(spec["files"], sizes)})
	dur = time.perf_counter() - t0 if durable != "none" else None
	ru = resource.getrusage(resource.RUSAGE_SELF)
	out = {"stall": stall, "durable": dur, "files": len(closes), "t0_mono": t0_mono,
	       "first_close": closes[0] if closes else None,
	       "writer_user": ru.ru_utime, "writer_sys": ru.ru_stime}
	if spec.get("keep_closes"):
		out["closes"] = closes
	print(json.dumps(out))


if __name__ == "__main__":
	main()
