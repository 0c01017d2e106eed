"""wl_files.py -- workloads made of plain write(2) calls: ckpt2g, smallfiles, arraydirs.

Owns: the file lists and sizes of those workloads, pre-creating files for
targets that overwrite in place (tmpfs), running writer.py as the measured
child, checking what reached the store, and removing the files after a round.

ckpt2g      N files (default 8 x 256 MiB = 2 GiB) written with 1 MiB write()
            calls from one process, one after the other: the shape of a
            torch.save of a large shard set, minus serialisation.
smallfiles  10,000 files of 4-64 KiB (deterministic sizes) in 100 directories:
            the create/write/close rate (optimizer shards of small models,
            tokenizer files, DCP with many ranks).
arraydirs   one new directory per array, made inside the measured loop, each
            holding a 512-byte metadata file and one 16-256 KiB chunk: the
            shape of a zarr/tensorstore tree (Orbax without OCDBT), where
            each file's directory is as new as the file.  direct+fsync
            fsyncs each file and each new directory, as a durable save must.
"""
import json
import os
import random
import sys

from common import GiB, KiB, MiB, run_json

HERE = os.path.dirname(os.path.abspath(__file__))
WRITER = os.path.join(HERE, "writer.py")


class FileWorkload:
	name = "?"
	timeout = 1800
	daemon_stats = True

	def __init__(self):
		self.files, self.sizes, self.mkdirs = [], [], []
		self.pids = []		# the measured processes, for the sampler

	@property
	def total_bytes(self):
		return sum(self.sizes)

	mkdir_each = False	# make each file's directory in the measured loop

	def spec(self, path, open_mode, durable):
		s = {"dir": path, "files": self.files, "sizes": self.sizes, "io_size": self.io_size,
		     "open": open_mode, "mkdirs": self.mkdirs, "seed": 1, "mkdir_each": self.mkdir_each}
		s.update(durable)
		return s

	def writer(self, spec):
		return run_json([sys.executable, WRITER], self.timeout,
				on_start=lambda pid: setattr(self, "pids", [pid]), stdin_data=json.dumps(spec))

	def prepare(self, target):
		"""Targets that overwrite in place get their files once, unmeasured."""
		if target.overwrite:
			self.writer(self.spec(target.path, "create", {"durable": "none"}))

	def measure(self, target, path):
		mode = "overwrite" if target.overwrite else "create"
		r = self.writer(self.spec(path, mode, target.durable_spec()))
		r["bytes"] = self.total_bytes
		return r

	def verify(self, target):
		"""What reached the store: every file, its size, its first block; no
		temporary names left once the target said it was durable."""
		if target.durable_spec().get("durable", "none") == "none":
			return
		expect = random.Random(1).randbytes(min(self.io_size, min(self.sizes)))
		for name, size in zip(self.files, self.sizes):
			p = os.path.join(target.store, name)
			st = os.stat(p)
			if st.st_size != size:
				raise RuntimeError("%s: size %d, expected %d" % (p, st.st_size, size))
			with open(p, "rb") as f:
				if f.read(len(expect)) != expect:
					raise RuntimeError("%s: first block differs from what was written" % p)
		leftovers = []
		for root, dirs, names in os.walk(target.store):
			leftovers += [os.path.join(root, n) for n in names if n.startswith(".ckptfs.")]
		if leftovers:
			raise RuntimeError("temporary files left after durable: %s" % leftovers[:3])

	def cleanup(self, target, path):
		if not target.overwrite:
			self.remove(path)

	def remove(self, path):
		for name in self.files:
			os.unlink(os.path.join(path, name))
		made = set(self.mkdirs)
		if self.mkdir_each:
			for name in self.files:
				d = os.path.dirname(name)
				while d:
					made.add(d)
					d = os.path.dirname(d)
		for d in sorted(made, reverse=True):
			os.rmdir(os.path.join(path, d))

	def finish(self, target):
		"""After the last round: free the pre-created files of tmpfs."""
		if target.overwrite:
			self.remove(target.path)


class Ckpt2g(FileWorkload):
	name = "ckpt2g"
	targets = ["ckptfs", "tmpfs", "direct", "direct_fsync"]
	ratios = [
		("ckptfs stall / tmpfs stall", ("ckptfs", "stall"), ("tmpfs", "stall"), "<= 1.5"),
		("ckptfs stall / direct+fsync", ("ckptfs", "stall"), ("direct_fsync", "durable"), ""),
		("ckptfs time-to-durable / direct+fsync", ("ckptfs", "durable"),
		 ("direct_fsync", "durable"), "<= 1.05"),
		("ckptfs stall / direct (no fsync)", ("ckptfs", "stall"), ("direct", "stall"), ""),
	]

	def __init__(self, total=2 * GiB, nfiles=8, io_size=MiB):
		super().__init__()
		self.io_size = io_size
		self.files = ["ckpt2g-%02d.bin" % i for i in range(nfiles)]
		self.sizes = [total // nfiles] * nfiles
		self.desc = "%d files x %d MiB, %d KiB writes, one process (tmpfs: overwritten in place)" % (
			nfiles, total // nfiles // MiB, io_size // KiB)


class SmallFiles(FileWorkload):
	name = "smallfiles"

	def __init__(self, count=10000, dirs=100):
		super().__init__()
		self.io_size = 64 * KiB
		r = random.Random(6)
		self.mkdirs = ["d%03d" % i for i in range(dirs)]
		self.files = ["d%03d/f%05d" % (i % dirs, i) for i in range(count)]
		# 4-64 KiB, multiples of 4 KiB, deterministic
		self.sizes = [r.randint(1, 16) * 4 * KiB for _ in range(count)]
		self.desc = "%d files of 4-64 KiB in %d dirs, create+write+close" % (count, dirs)


class ArrayDirs(FileWorkload):
	name = "arraydirs"
	mkdir_each = True

	def __init__(self, arrays=1000):
		super().__init__()
		self.io_size = 64 * KiB
		r = random.Random(7)
		for i in range(arrays):
			self.files += ["ckpt/arr%05d/.zarray" % i, "ckpt/arr%05d/0.0" % i]
			self.sizes += [512, r.randint(4, 64) * 4 * KiB]
		self.desc = ("%d arrays, each a new directory (made in the loop) with a 512 B "
			     "metadata file and a 16-256 KiB chunk" % arrays)
