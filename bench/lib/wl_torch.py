"""wl_torch.py -- workloads with real PyTorch: framework layouts, training loop, restore.

Owns: the torch rank server (torch_ranks.py, run with /usr/bin/python3 and
Debian's python3-torch; started once per run and shared by these workloads,
since building a GPT and its Adam state takes ~25 s), and the workloads:

  torch_ds  DeepSpeed ZeRO layout: global_stepN/mp_rank_00_model_states.pt
            (rank 0) and zero_pp_rank_K_mp_rank_00_optim_states.pt (every
            rank, concurrently), torch.save each, then `latest`.
  megatron  iter_XXXXXXX/mp_rank_XX/model_optim_rng.pt per rank, then
            latest_checkpointed_iteration.txt, then deletion of the older
            iteration (a small one is laid down, unmeasured, before each save).
  dcp       torch.distributed.checkpoint's file protocol in plain Python: per
            rank __R_0.distcp (fsynced, as DCP's sync_files default does),
            then .metadata.tmp written, fsynced, renamed to .metadata.
  train     a loop of fixed compute steps (calibrated matmuls + all-reduce on
            every rank) with a torch_ds checkpoint every K steps; total loop
            time without checkpoints, with write+fsync to the backend, with
            ckptfs; overhead % against the loop without checkpoints.
  restore   read a torch_ds checkpoint back (torch.load and plain 1 MiB reads,
            every rank its own files): as left after the save (warm), from
            ckptfs' own cache (kernel page cache of the mount dropped), and
            cold (ckptfs remounted, backend page cache dropped).
"""
import json
import os
import selectors
import signal
import subprocess

from common import GiB, empty_dir, log
import targets as T

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "torch_ranks.py")
TORCH_PY = "/usr/bin/python3"
IT = 100	# the iteration saved every round: tmpfs targets overwrite the same names


class TorchServer:
	"""The rank server: one JSON command per line in, one JSON answer out."""

	def __init__(self, model, logpath):
		self.model = model
		self.logpath = logpath
		self.proc = None
		self.pids = []
		self.error = None

	def start(self):
		if self.error:
			raise T.Skip(self.error)
		if self.proc:
			return
		if not os.access(TORCH_PY, os.X_OK) or subprocess.run(
				[TORCH_PY, "-c", "import torch, torch.distributed as d; assert d.is_gloo_available()"],
				stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
			self.error = "%s cannot import torch with gloo (apt-get install python3-torch)" % TORCH_PY
			raise T.Skip(self.error)
		log("torch: starting %d ranks (d=%d, %d layers)" % (self.model["ranks"], self.model["d"],
								     self.model["layers"]))
		logf = open(self.logpath, "a")
		self.proc = subprocess.Popen([TORCH_PY, SERVER, json.dumps(self.model)], stdin=subprocess.PIPE,
					     stdout=subprocess.PIPE, stderr=logf, text=True,
					     start_new_session=True)
		logf.close()
		ready = self.read(1800)
		self.pids = ready["pids"]
		self.params = ready["params"]
		log("torch: ready, %.0f M parameters" % (self.params / 1e6))

	def read(self, timeout):
		sel = selectors.DefaultSelector()
		sel.register(self.proc.stdout, selectors.EVENT_READ)
		if not sel.select(timeout):
			self.stop(kill=True)
			raise RuntimeError("torch ranks did not answer within %d s" % timeout)
		line = self.proc.stdout.readline()
		if not line:
			self.stop(kill=True)
			raise RuntimeError("torch ranks exited; see %s" % self.logpath)
		out = json.loads(line)
		if "error" in out:
			self.stop(kill=True)
			raise RuntimeError("torch ranks failed: %s" % out["error"][-1500:])
		return out

	def call(self, cmd, timeout=3600):
		self.start()
		self.proc.stdin.write(json.dumps(dict(cmd, timeout=timeout)) + "\n")
		self.proc.stdin.flush()
		return self.read(timeout + 60)

	def stop(self, kill=False):
		if not self.proc:
			return
		try:
			if not kill:
				self.proc.stdin.write('{"op": "quit"}\n')
				self.proc.stdin.flush()
				self.proc.wait(120)
		except Exception:  # noqa: BLE001 -- fall through to the kill
			pass
		if self.proc.poll() is None or kill:
			try:	# the ranks are in the session we started for the server
				os.killpg(self.proc.pid, signal.SIGKILL)
			except ProcessLookupError:
				pass
			self.proc.wait(60)
		self.proc = None


def rel(written, top):
	return {os.path.relpath(p, top): n for p, n in written.items()}


class TorchSave:
	"""torch_ds, megatron, dcp: one checkpoint save per round."""
	daemon_stats = True

	def __init__(self, server, layout, targets, ratios, desc):
		self.server = server
		self.layout = layout
		self.name = {"ds": "torch_ds"}.get(layout, layout)
		self.targets = targets
		self.ratios = ratios
		self.desc = desc
		self.total_bytes = 0
		self.pids = []

	def save(self, target, path):
		r = self.server.call({"op": "save", "layout": self.layout, "dir": path, "it": IT,
				      "spec": target.durable_spec()})
		self.pids = self.server.pids
		self.written = rel(r.pop("written"), path)
		self.total_bytes = sum(self.written.values())
		r["bytes"] = self.total_bytes
		return r

	def prepare(self, target):
		self.server.start()
		self.pids = self.server.pids
		if target.overwrite:
			self.save(target, target.path)

	def measure(self, target, path):
		return self.save(target, path)

	def verify(self, target):
		if target.durable_spec().get("durable", "none") == "none":
			return
		for name, size in self.written.items():
			p = os.path.join(target.store, name)
			if os.stat(p).st_size != size:
				raise RuntimeError("%s: size %d on the store, %d written" % (p, os.stat(p).st_size, size))
		if self.layout == "megatron" and os.path.exists(os.path.join(target.store, "iter_%07d" % (IT - 1))):
			raise RuntimeError("the older Megatron iteration is still on the store")
		if self.layout == "dcp" and os.path.exists(os.path.join(target.store, "dcp_step%d" % IT,
									 ".metadata.tmp")):
			raise RuntimeError(".metadata.tmp is still on the store")

	def cleanup(self, target, path):
		if not target.overwrite:
			empty_dir(path)

	def finish(self, target):
		if target.overwrite:
			empty_dir(target.path)


class TrainLoop:
	"""Workload 5: checkpoint every K steps inside a compute loop."""
	name = "train"
	daemon_stats = True
	targets = ["nockpt", "ckptfs", "ckptfs_uring", "direct_fsync", "tmpfs"]
	ratios = [
		("ckptfs loop time / no checkpoint", ("ckptfs", "total_s"), ("nockpt", "total_s"), "<= 1.05"),
		("ckptfs with io_uring loop time / no checkpoint", ("ckptfs_uring", "total_s"),
		 ("nockpt", "total_s"), "<= 1.05"),
		("tmpfs loop time / no checkpoint (the memory-copy floor)", ("tmpfs", "total_s"),
		 ("nockpt", "total_s"), ""),
		("write+fsync loop time / no checkpoint", ("direct_fsync", "total_s"), ("nockpt", "total_s"), ""),
		("ckptfs loop time / write+fsync", ("ckptfs", "total_s"), ("direct_fsync", "total_s"), ""),
	]
	metrics = [("total_s", "loop s", "%.2f"), ("overhead_pct", "overhead %", "%.1f"),
		   ("durable", "durable s (after start)", "%.2f"), ("daemon_cpu_s", "daemon CPU s", "%.2f"),
		   ("rss_over_cache_mib", "peak RSS - cache MiB", "%.0f"), ("cpu_wait_pct", "CPU wait %", "%.0f")]

	def __init__(self, server, steps, every, step_s, compute="sleep"):
		self.server = server
		self.steps, self.every, self.step_s, self.compute = steps, every, step_s, compute
		self.desc = ("%d steps of %.1f s %s on every rank + all-reduce, a torch_ds checkpoint "
			     "every %d steps (keep 1 older)" % (
				     steps, step_s, "device-bound compute (host idle)" if compute == "sleep"
				     else "CPU matmul compute", every))
		self.total_bytes = 0
		self.pids = []

	def prepare(self, target):
		self.server.start()

	def measure(self, target, path):
		r = self.server.call({"op": "train", "steps": self.steps, "every": self.every, "keep": 1,
				      "dir": path, "step_s": self.step_s, "compute": self.compute,
				      "spec": target.durable_spec()})
		self.pids = self.server.pids
		written = r.pop("written")
		self.last = {os.path.relpath(p, path): n for p, n in written.items()
			     if "global_step%d/" % (self.steps // self.every * self.every) in p} if path else {}
		r["total_s"] = r.pop("total")
		r["bytes"] = sum(written.values())
		if r["checkpoints"]:
			self.total_bytes = r["bytes"] // r["checkpoints"]
		if target.name == "nockpt":
			r["durable"] = None
		return r

	def post_round(self, rec):
		base = rec.get("nockpt", {}).get("total_s")
		for r in rec.values():
			if base and r.get("total_s"):
				r["overhead_pct"] = (r["total_s"] / base - 1) * 100

	def verify(self, target):
		for name, size in self.last.items():
			if os.stat(os.path.join(target.store, name)).st_size != size:
				raise RuntimeError("%s: wrong size on the store" % name)

	def cleanup(self, target, path):
		if path:
			empty_dir(path)

	def finish(self, target):
		pass


class Restore:
	"""Workload 6: read a torch_ds checkpoint back in several cache states."""
	name = "restore"
	daemon_stats = False	# the daemon is restarted inside a round
	targets = ["ckptfs", "ckptfs_nopt", "ckptfs_rdcache", "ckptfs_nopt_rdcache", "ckptfs_buffered", "direct_fsync", "tmpfs"]
	STATES = [("warm", "as left by the save"), ("dcache", "ckptfs cache only (mount's page cache dropped)"),
		  ("cold", "cold (remounted, backend page cache dropped)")]
	metrics = [("%s_%s_gibs" % (how, st), "%s %s GiB/s" % (how, st), "%.2f")
		   for st, _ in STATES for how in ("load", "read")]
	ratios = [
		("ckptfs warm / direct warm (torch.load)", ("ckptfs", "load_warm_gibs"),
		 ("direct_fsync", "load_warm_gibs"), ">= 1"),
		("ckptfs own cache / direct cold (read)", ("ckptfs", "read_dcache_gibs"),
		 ("direct_fsync", "read_cold_gibs"), ">= 1"),
		("ckptfs cold / direct cold (read)", ("ckptfs", "read_cold_gibs"),
		 ("direct_fsync", "read_cold_gibs"), ">= 0.9"),
		("ckptfs cold / direct cold (torch.load)", ("ckptfs", "load_cold_gibs"),
		 ("direct_fsync", "load_cold_gibs"), ">= 1"),
		("ckptfs own cache / direct cold (torch.load)", ("ckptfs", "load_dcache_gibs"),
		 ("direct_fsync", "load_cold_gibs"), ">= 1"),
		("ckptfs without passthrough cold / direct cold (torch.load)", ("ckptfs_nopt", "load_cold_gibs"),
		 ("direct_fsync", "load_cold_gibs"), ""),
		("ckptfs without passthrough cold / direct cold (read)", ("ckptfs_nopt", "read_cold_gibs"),
		 ("direct_fsync", "read_cold_gibs"), ""),
		("ckptfs without passthrough warm / direct warm (torch.load)", ("ckptfs_nopt", "load_warm_gibs"),
		 ("direct_fsync", "load_warm_gibs"), ""),
		("read_direct on / off, warm (torch.load)", ("ckptfs", "load_warm_gibs"),
		 ("ckptfs_rdcache", "load_warm_gibs"), ""),
		("read_direct on / off, warm (read)", ("ckptfs", "read_warm_gibs"),
		 ("ckptfs_rdcache", "read_warm_gibs"), ""),
		("read_direct on / off, own cache (torch.load)", ("ckptfs", "load_dcache_gibs"),
		 ("ckptfs_rdcache", "load_dcache_gibs"), ""),
		("read_direct on / off, own cache (read)", ("ckptfs", "read_dcache_gibs"),
		 ("ckptfs_rdcache", "read_dcache_gibs"), ""),
		("read_direct on / off, cold without passthrough (torch.load)", ("ckptfs_nopt", "load_cold_gibs"),
		 ("ckptfs_nopt_rdcache", "load_cold_gibs"), ""),
		("read_direct on / off, cold without passthrough (read)", ("ckptfs_nopt", "read_cold_gibs"),
		 ("ckptfs_nopt_rdcache", "read_cold_gibs"), ""),
		("ckptfs direct=off warm / direct warm (torch.load)", ("ckptfs_buffered", "load_warm_gibs"),
		 ("direct_fsync", "load_warm_gibs"), ""),
		("ckptfs direct=off warm / direct warm (read)", ("ckptfs_buffered", "read_warm_gibs"),
		 ("direct_fsync", "read_warm_gibs"), ""),
	]

	def __init__(self, server):
		self.server = server
		self.desc = "torch_ds checkpoint read back by every rank: torch.load, and plain 1 MiB reads"
		self.total_bytes = 0
		self.pids = []

	def prepare(self, target):
		self.server.start()

	def load(self, path, how):
		r = self.server.call({"op": "load", "layout": "ds", "dir": path, "it": IT, "how": how})
		if not r["ok"]:
			raise RuntimeError("torch.load returned different optimizer state")
		self.total_bytes = r["bytes"]
		return r["bytes"] / GiB / r["seconds"]

	def measure(self, target, path):
		self.server.call({"op": "save", "layout": "ds", "dir": path, "it": IT,
				  "spec": target.durable_spec()})
		out = {}
		for st, _ in self.STATES:
			for how in ("load", "read"):
				if st == "dcache":
					if not isinstance(target, T.Ckptfs):
						continue
					T.drop_file_cache(path)
				elif st == "cold" and not target.make_cold():
					continue
				out["%s_%s_gibs" % (how, st)] = self.load(path, "torch" if how == "load" else "read")
		out["bytes"] = self.total_bytes
		return out

	def verify(self, target):
		pass

	def cleanup(self, target, path):
		empty_dir(path)

	def finish(self, target):
		pass
