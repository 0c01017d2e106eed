"""torch_ranks.py -- N trainer ranks that save, load and train on command.

Run with /usr/bin/python3 (Debian's python3-torch) by wl_torch.py:
    /usr/bin/python3 torch_ranks.py '{"ranks": 4, "d": 1024, "layers": 8, ...}'
The main process spawns the ranks (torch.distributed, gloo backend, file://
rendezvous), waits until each has built its state, prints one JSON line
{"ready": ...}, then reads one JSON command per stdin line, hands it to every
rank, and prints one JSON line with the combined result.  The state is built
once per run, so a round costs only the measured I/O.

State, as a data-parallel GPT trainer with ZeRO holds it:
  every rank   a GPT-like torch.nn model (same seed: replicas); its fp16
               state_dict is what DeepSpeed saves as "module"; a tensor-
               parallel slice of it (1/N of each matrix) for Megatron and DCP
  every rank   an Adam optimizer over its 1/N partition of the flat fp32
               parameters, stepped once (exp_avg, exp_avg_sq, fp32 master):
               12 bytes per parameter per partition
With d=1024, 8 layers, vocab 50304: 153 M parameters, ~2.0 GiB per checkpoint
(fp16 model 0.29 GiB + optimizer 1.7 GiB).

Commands (op):
  save   layout ds|megatron|dcp, dir, it, spec (durable.py) -> stall, durable
  load   layout ds, dir, it, how torch|read -> seconds, bytes (all ranks)
  train  steps, every, dir or null, spec, keep, compute sleep|cpu, step_s
         -> total, durable.  compute "sleep": each step sleeps step_s (a
         device-bound step: the accelerator is busy, the host CPU idle, as in
         GPU training); "cpu": calibrated matmuls on every rank (a CPU-bound
         trainer: then ckptfs' own CPU use competes with the compute)
  quit
Times are time.monotonic() deltas (one clock for all processes of the host).
"""
import json
import os
import pickle
import shutil
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import durable as D  # noqa: E402

MiB = 1 << 20


class Block(nn.Module):
	def __init__(self, d):
		super().__init__()
		self.ln_1 = nn.LayerNorm(d)
		self.attn_qkv = nn.Linear(d, 3 * d)
		self.attn_proj = nn.Linear(d, d)
		self.ln_2 = nn.LayerNorm(d)
		self.mlp_fc = nn.Linear(d, 4 * d)
		self.mlp_proj = nn.Linear(4 * d, d)


class GPT(nn.Module):
	"""The parameter layout of GPT-2 (tied LM head); never run forward here."""

	def __init__(self, vocab, ctx, d, layers):
		super().__init__()
		self.wte = nn.Embedding(vocab, d)
		self.wpe = nn.Embedding(ctx, d)
		self.h = nn.ModuleList([Block(d) for _ in range(layers)])
		self.ln_f = nn.LayerNorm(d)


def tp_slice(t, rank, ws):
	"""Rank's tensor-parallel slice of a tensor, as its own storage (torch.save
	of a view would write the whole underlying storage)."""
	if t.dim() >= 1 and t.shape[0] >= ws:
		return t.chunk(ws, 0)[rank].clone()
	return t.clone()


class Rank:
	def __init__(self, rank, ws, cfg):
		self.rank, self.ws, self.cfg = rank, ws, cfg
		torch.set_num_threads(1)
		torch.manual_seed(cfg.get("seed", 1234))
		model = GPT(cfg.get("vocab", 50304), cfg.get("ctx", 1024), cfg["d"], cfg["layers"])
		self.params = sum(p.numel() for p in model.parameters())
		sd = model.state_dict()
		self.module16 = {k: v.detach().half().clone() for k, v in sd.items()}
		self.tp16 = {k: tp_slice(v, rank, ws) for k, v in self.module16.items()}
		flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
		del model, sd
		part = (flat.numel() + ws - 1) // ws
		master = nn.Parameter(flat[rank * part:(rank + 1) * part].clone())
		del flat
		master.grad = torch.randn_like(master) * 1e-3
		opt = torch.optim.Adam([master], lr=1e-4)
		opt.step()
		master.grad = None
		self.master = master
		self.opt_sd = opt.state_dict()
		self.reps = None

	# ---- checkpoint contents, as the frameworks lay them out ----

	def ds_optim(self):
		return {"optimizer_state_dict": {"loss_scaler": None, "dynamic_loss_scale": True,
						 "overflow": False, "base_optimizer_state": self.opt_sd,
						 "single_partition_of_fp32_groups": [self.master.data],
						 "zero_stage": 1, "partition_count": [self.ws]},
			"ds_config": {"train_batch_size": 8 * self.ws}, "ds_version": "0.9.0"}

	def ds_model(self, it):
		return {"module": self.module16, "buffer_names": [], "optimizer": None,
			"param_shapes": [{k: v.shape for k, v in self.module16.items()}],
			"lr_scheduler": {}, "sparse_tensor_module_names": set(), "skipped_steps": 0,
			"global_steps": it, "global_samples": it * 8 * self.ws, "dp_world_size": self.ws,
			"mp_world_size": 1, "ds_config": {}, "ds_version": "0.9.0"}

	def megatron(self, it):
		return {"args": {"tensor_model_parallel_size": self.ws, "iteration": it},
			"checkpoint_version": 3.0, "iteration": it, "model": {"language_model": self.tp16},
			"optimizer": self.opt_sd,
			"rng_state": [{"torch_rng_state": torch.get_rng_state()}]}

	# ---- saves ----

	def save(self, path, obj, spec, written):
		torch.save(obj, path)
		D.per_file(spec, path)
		written[path] = os.stat(path).st_size

	def save_ds(self, c, written):
		d = os.path.join(c["dir"], "global_step%d" % c["it"])
		os.makedirs(d, exist_ok=True)
		if self.rank == 0:
			self.save(os.path.join(d, "mp_rank_00_model_states.pt"), self.ds_model(c["it"]),
				  c["spec"], written)
		self.save(os.path.join(d, "zero_pp_rank_%d_mp_rank_00_optim_states.pt" % self.rank),
			  self.ds_optim(), c["spec"], written)
		dist.barrier()
		if self.rank == 0:
			self.marker(os.path.join(c["dir"], "latest"), "global_step%d" % c["it"], c, written)

	def marker(self, path, text, c, written):
		with open(path, "w") as f:
			f.write(text)
		D.per_file(c["spec"], path)
		if c["spec"].get("durable") == "fsync_each":
			D.fsync_path(os.path.dirname(path), directory=True)
		written[path] = len(text)

	def save_megatron(self, c, written):
		top = c["dir"]
		old = os.path.join(top, "iter_%07d" % (c["it"] - 1))
		d = os.path.join(top, "iter_%07d" % c["it"], "mp_rank_%02d" % self.rank)
		os.makedirs(d, exist_ok=True)
		self.save(os.path.join(d, "model_optim_rng.pt"), self.megatron(c["it"]), c["spec"], written)
		dist.barrier()
		if self.rank == 0:
			self.marker(os.path.join(top, "latest_checkpointed_iteration.txt"), str(c["it"]), c,
				    written)
			shutil.rmtree(old)	# keep one: drop the oldest after the marker

	def save_dcp(self, c, written):
		"""torch.distributed.checkpoint's FileSystemWriter protocol: one
		__R_0.distcp per rank (torch.save of each tensor, fsync when
		sync_files), then rank 0 writes .metadata.tmp, fsyncs, renames."""
		d = os.path.join(c["dir"], "dcp_step%d" % c["it"])
		os.makedirs(d, exist_ok=True)
		name = "__%d_0.distcp" % self.rank
		items = dict(("model." + k, v) for k, v in self.tp16.items())
		for i, (k, v) in enumerate(self.opt_sd["state"][0].items()):
			if torch.is_tensor(v) and v.dim():
				items["optim.%s" % k] = v
		items["optim.master"] = self.master.data
		index = {}
		path = os.path.join(d, name)
		with open(path, "wb") as f:
			for k, v in items.items():
				off = f.tell()
				torch.save(v, f)
				index[k] = (name, off, f.tell() - off)
			f.flush()
			os.fsync(f.fileno())	# sync_files=True, DCP's default
		written[path] = os.stat(path).st_size
		gathered = [None] * self.ws
		dist.all_gather_object(gathered, index)
		if self.rank == 0:
			meta = {"storage_data": {k: v for g in gathered for k, v in g.items()},
				"planner_data": {}, "version": "bench"}
			tmp = os.path.join(d, ".metadata.tmp")
			with open(tmp, "wb") as f:
				pickle.dump(meta, f)
				f.flush()
				os.fsync(f.fileno())
			os.rename(tmp, os.path.join(d, ".metadata"))
			written[os.path.join(d, ".metadata")] = os.stat(os.path.join(d, ".metadata")).st_size

	def cmd_save(self, c):
		if c["layout"] == "megatron" and self.rank == 0:
			self.seed_old_megatron(c)	# an older iteration to delete, unmeasured
		written = {}
		dist.barrier()
		t0 = time.monotonic()
		getattr(self, "save_" + c["layout"])(c, written)
		t_own = time.monotonic() - t0
		dist.barrier()
		stall = time.monotonic() - t0
		dur = None
		everything = self.gather_written(written)
		if self.rank == 0:
			D.finish(c["spec"], everything)
			dur = time.monotonic() - t0 if c["spec"].get("durable", "none") != "none" else None
		return {"stall": stall, "durable": dur, "own_s": t_own, "written": written, "t0_mono": t0}

	def gather_written(self, written):
		"""Every rank's {path: size}, for durable waits that check the store."""
		all_w = [None] * self.ws
		dist.all_gather_object(all_w, written)
		return {k: v for w in all_w for k, v in w.items()}

	def seed_old_megatron(self, c):
		for r in range(self.ws):
			d = os.path.join(c["dir"], "iter_%07d" % (c["it"] - 1), "mp_rank_%02d" % r)
			os.makedirs(d, exist_ok=True)
			with open(os.path.join(d, "model_optim_rng.pt"), "wb") as f:
				f.write(b"\0" * 4096)

	# ---- restore ----

	def ds_files(self, c):
		d = os.path.join(c["dir"], "global_step%d" % c["it"])
		files = [os.path.join(d, "zero_pp_rank_%d_mp_rank_00_optim_states.pt" % self.rank)]
		if self.rank == 0:
			files.append(os.path.join(d, "mp_rank_00_model_states.pt"))
		return files

	def cmd_load(self, c):
		files = self.ds_files(c)
		nbytes = sum(os.stat(f).st_size for f in files)
		dist.barrier()
		t0 = time.monotonic()
		if c["how"] == "torch":
			objs = [torch.load(f, map_location="cpu") for f in files]
		else:
			buf = bytearray(MiB)
			for f in files:
				with open(f, "rb", buffering=0) as fh:
					while fh.readinto(buf):
						pass
		own = time.monotonic() - t0
		dist.barrier()
		secs = time.monotonic() - t0
		ok = True
		if c["how"] == "torch":	# what came back is what was saved
			got = objs[0]["optimizer_state_dict"]["single_partition_of_fp32_groups"][0]
			ok = torch.equal(got, self.master.data)
		return {"seconds": secs, "own_s": own, "bytes": nbytes, "ok": ok}

	# ---- training loop ----

	def calibrate(self, step_s):
		"""Matmul repetitions per step so one step takes about step_s with
		every rank computing at once; the same count for every target after."""
		a = torch.randn(256, 256)
		dist.barrier()
		n, t0 = 0, time.monotonic()
		while time.monotonic() - t0 < 2.0:
			a = torch.mm(a, a).clamp_(-1, 1)
			n += 1
		rate = torch.tensor([n / (time.monotonic() - t0)])
		dist.all_reduce(rate, op=dist.ReduceOp.MIN)
		self.reps = max(1, int(rate.item() * step_s))

	def compute(self, c):
		if c["compute"] == "sleep":
			time.sleep(c["step_s"])	# the accelerator computes; the host idles
		else:
			a = torch.randn(256, 256)
			for _ in range(self.reps):
				a = torch.mm(a, a).clamp_(-1, 1)
		g = torch.ones(1)
		dist.all_reduce(g)	# the gradient all-reduce, in miniature

	def cmd_train(self, c):
		if self.reps is None and c["compute"] == "cpu":
			self.calibrate(c["step_s"])
		written = {}
		dist.barrier()
		t0 = time.monotonic()
		ckpts = 0
		for step in range(1, c["steps"] + 1):
			self.compute(c)
			if c["dir"] and step % c["every"] == 0:
				s = dict(c, it=step)
				self.save_ds(s, written)
				ckpts += 1
				old = os.path.join(c["dir"], "global_step%d" % (step - c["keep"] * c["every"]))
				if self.rank == 0 and os.path.isdir(old):
					shutil.rmtree(old)
		dist.barrier()
		total = time.monotonic() - t0
		dur = None
		everything = self.gather_written(written)
		if self.rank == 0 and c["dir"] and c["spec"].get("durable", "none") != "none":
			D.finish(c["spec"], everything)
			dur = time.monotonic() - t0
		return {"total": total, "durable": dur, "checkpoints": ckpts, "reps": self.reps,
			"written": written}


def rank_main(rank, ws, cfg, rdv, cmdq, resq):
	try:
		dist.init_process_group("gloo", init_method="file://" + rdv, rank=rank, world_size=ws)
		r = Rank(rank, ws, cfg)
		resq.put((rank, {"ready": True, "pid": os.getpid(), "params": r.params}))
		while True:
			c = cmdq.get()
			if c["op"] == "quit":
				break
			resq.put((rank, getattr(r, "cmd_" + c["op"])(c)))
		dist.destroy_process_group()
	except BaseException:  # noqa: BLE001 -- report, then die
		resq.put((rank, {"error": traceback.format_exc()}))


def main():
	cfg = json.loads(sys.argv[1])
	ws = cfg.get("ranks", 4)
	ctx = mp.get_context("spawn")
	fd, rdv = tempfile.mkstemp(prefix="ckptfs-bench-rdv-")
	os.close(fd)
	os.unlink(rdv)
	cmdqs = [ctx.Queue() for _ in range(ws)]
	resq = ctx.Queue()
	procs = [ctx.Process(target=rank_main, args=(r, ws, cfg, rdv, cmdqs[r], resq)) for r in range(ws)]
	for p in procs:
		p.start()

	def gather(timeout):
		res = [None] * ws
		for _ in range(ws):
			r, out = resq.get(timeout=timeout)
			if "error" in out:
				print(json.dumps({"error": "rank %d: %s" % (r, out["error"])}), flush=True)
				for p in procs:
					p.terminate()
				sys.exit(1)
			res[r] = out
		return res

	ready = gather(1800)
	print(json.dumps({"ready": True, "pids": [r["pid"] for r in ready], "params": ready[0]["params"]}),
	      flush=True)
	for line in sys.stdin:
		c = json.loads(line)
		for q in cmdqs:
			q.put(c)
		if c["op"] == "quit":
			break
		res = gather(c.get("timeout", 3600))
		out = dict(res[0])
		out["written"] = {k: v for r in res for k, v in r.get("written", {}).items()}
		out["rank_own_s"] = [r.get("own_s") for r in res]
		if "ok" in out:
			out["ok"] = all(r["ok"] for r in res)
			out["bytes"] = sum(r["bytes"] for r in res)
		print(json.dumps(out), flush=True)
	for p in procs:
		p.join(60)
	try:
		os.unlink(rdv)
	except OSError:
		pass


if __name__ == "__main__":
	main()
