"""workloads.py -- the suite: which workloads run on which targets, in what order.

Owns: the configuration derived from the command line (Config: sizes, rounds
and targets per mode), the target registry (created on first use, set up
once, torn down once, in reverse order), the round loop (Suite.run: every
target once per round, order rotated each round, the disk quiesced before
each measurement, failures recorded per round without stopping the run), the
absorb/durable sampling of ckptfs, and the Markdown rendering of a results
document.

The measured work lives in wl_files.py and wl_torch.py.  A workload offers
prepare(target), measure(target, path) -> dict, verify(target),
cleanup(target, path), finish(target), optionally post_round(record), and
declares name, desc, targets, ratios, total_bytes, pids (the processes that
write, for the sampler), daemon_stats, and optionally metrics (table columns).
"""
import os

from common import Contention, empty_dir, log, parse_size, quiesce
import report
import sampler as S
import targets as T
import wl_files
import wl_speed
import wl_torch

ALL = ["ckpt2g", "bw8k", "smallfiles", "arraydirs", "torch_ds", "megatron", "dcp", "train", "restore", "mount",
       "appends", "randio"]
QUICK = ALL
LONG = ["long"]	# bench/run --long: its own run
SAMPLED = ("ckpt2g", "torch_ds")	# workloads whose ckptfs rounds are sampled and plotted
FULL_ONLY = {"gluster_fsync": "GlusterFS targets run in full mode only (setup takes a while)",
	     "ckptfs_gluster": "GlusterFS targets run in full mode only (setup takes a while)"}

# per mode: (ckpt2g rounds, other rounds), model, small-file count, training loop
MODES = {
	"quick": {"rounds": (3, 1), "model": {"d": 512, "layers": 4}, "smallfiles": 2000,
		  "arraydirs": 300, "ckpt2g_peers": False, "bw8k": 128 << 20, "mount_sizes": (1 << 30, 8 << 30),
		  "long": (20, 256 << 20, 2000),
		  "train": {"steps": 12, "every": 6, "step_s": 0.5}},
	"full": {"rounds": (5, 3), "model": {"d": 1024, "layers": 8}, "smallfiles": 10000,
		 "arraydirs": 1000, "ckpt2g_peers": True, "bw8k": 256 << 20, "mount_sizes": (1 << 30, 8 << 30, 16 << 30),
		 "long": (100, 256 << 20, 10000),
		 "train": {"steps": 30, "every": 15, "step_s": 1.0}},
}


class Config:
	def __init__(self, args, binary):
		self.args = args
		self.binary = binary
		self.quick = args.quick
		self.mode = MODES["quick" if args.quick else "full"]
		self.workdir = os.path.abspath(args.workdir)
		self.shm = os.path.abspath(args.shm_dir)
		self.cache_size = parse_size(args.cache_size)
		self.size = parse_size(args.size)
		self.target_filter = set(args.targets.split(",")) if args.targets else None
		self.workload_names = args.workloads.split(",") if args.workloads else (
			LONG if args.long else QUICK if args.quick else ALL)
		unknown = [w for w in self.workload_names if w not in ALL + LONG]
		if unknown:
			raise SystemExit("bench/run: unknown workload(s) %s; known: %s" %
					 (",".join(unknown), ",".join(ALL + LONG)))

	def rounds(self, wl):
		if self.args.rounds:
			return self.args.rounds
		if wl in ("randio", "long"):
			return 1	# minutes per round; one is enough for what they show
		return self.mode["rounds"][0 if wl == "ckpt2g" else 1]

	def warmup(self, wl):
		if self.args.warmup is not None:
			return self.args.warmup
		return 1 if wl == "ckpt2g" else 0

	def mnt(self, name):
		return os.path.join(self.workdir, "mnt-" + name)

	def describe(self):
		return {"rounds": {w: self.rounds(w) for w in self.workload_names},
			"warmup": {w: self.warmup(w) for w in self.workload_names},
			"workdir": self.workdir, "shm": self.shm,
			"cache_size": self.cache_size, "ckptfs_opts": self.args.ckptfs_opts,
			"remount": self.args.remount, "workloads": self.workload_names,
			"model": self.mode["model"], "targets": sorted(self.target_filter)
			if self.target_filter else "all"}


# The admin levers of issue 13 item 2, each against the same daemon as the
# machine is configured (enable_uring off, 256-page requests), side by side.
LEVERS = ["ckptfs_uring", "ckptfs_mp1024", "ckptfs_tuned"]


def lever_ratios(metric="stall", ref="tmpfs", goal="<= 1.25"):
	out = [("ckptfs %s / %s %s" % (metric, ref, metric), ("ckptfs", metric), (ref, metric), goal)]
	for t, what in (("ckptfs_uring", "io_uring"), ("ckptfs_mp1024", "max_pages 1024"),
			("ckptfs_tuned", "io_uring + max_pages 1024")):
		out.append(("ckptfs with %s %s / %s %s" % (what, metric, ref, metric), (t, metric),
			    (ref, metric), goal))
		out.append(("lever %s: %s with / without" % (what, metric), (t, metric), ("ckptfs", metric), ""))
	return out


def ckptfs_ratios(ref_fsync="direct_fsync"):
	return [
		("ckptfs stall / tmpfs stall", ("ckptfs", "stall"), ("tmpfs", "stall"), "<= 1.5"),
		("ckptfs stall / direct+fsync", ("ckptfs", "stall"), (ref_fsync, "durable"), ""),
		("ckptfs time-to-durable / direct+fsync", ("ckptfs", "durable"), (ref_fsync, "durable"),
		 "<= 1.05"),
	]


PEER_RATIOS = [
	("ckptfs stall / rclone stall", ("ckptfs", "stall"), ("rclone", "stall"), ""),
	("ckptfs time-to-durable / rclone time-to-durable", ("ckptfs", "durable"), ("rclone", "durable"), ""),
	("bindfs+fsync / direct+fsync", ("bindfs_fsync", "durable"), ("direct_fsync", "durable"), ""),
]


# What the manifest (checksum records, group-committed) costs: the same
# ckptfs with and without it, side by side.
MANIFEST_RATIOS = [
	("ckptfs stall, manifest on / off", ("ckptfs", "stall"), ("ckptfs_nomanifest", "stall"), ""),
	("ckptfs time-to-durable, manifest on / off", ("ckptfs", "durable"),
	 ("ckptfs_nomanifest", "durable"), ""),
]


# The flushers' priority (flush_nice): the default (10) against 0, side by side.
# direct=off: the flushers write through the backend's page cache (warm restores find it there).
BUFFERED_RATIOS = [
	("lever direct=off: stall with / O_DIRECT", ("ckptfs_buffered", "stall"), ("ckptfs", "stall"), ""),
	("lever direct=off: time-to-durable with / O_DIRECT", ("ckptfs_buffered", "durable"),
	 ("ckptfs", "durable"), ""),
]

LOOP_RATIOS = [
	("lever loop=readv: stall with / loop=splice", ("ckptfs", "stall"), ("ckptfs_splice", "stall"), ""),
	("lever chunk_size=1M (every 1 MiB write taken as it lies): stall with / 4M",
	 ("ckptfs_chunk1m", "stall"), ("ckptfs", "stall"), ""),
	("ckptfs chunk_size=1M stall / tmpfs stall", ("ckptfs_chunk1m", "stall"), ("tmpfs", "stall"), ""),
]

# --ckptfs-bin-b: another build of the daemon beside this one (ckpt2g only).
BUILD_B_RATIOS = [
	("build B / this build: stall", ("ckptfs_b", "stall"), ("ckptfs", "stall"), ""),
	("build B / this build: time-to-durable", ("ckptfs_b", "durable"), ("ckptfs", "durable"), ""),
	("build B stall / tmpfs stall", ("ckptfs_b", "stall"), ("tmpfs", "stall"), ""),
]

NICE_RATIOS = [
	("lever flush_nice 10: stall with / with 0", ("ckptfs", "stall"), ("ckptfs_nice0", "stall"), ""),
	("lever flush_nice 19: stall with / with 10", ("ckptfs_nice19", "stall"), ("ckptfs", "stall"), ""),
	("lever flush_nice 19: time-to-durable with / with 10", ("ckptfs_nice19", "durable"),
	 ("ckptfs", "durable"), ""),
	("ckptfs flush_nice=0 files/s / direct files/s", ("direct", "stall"), ("ckptfs_nice0", "stall"),
	 ""),
]


class Suite:
	def __init__(self, cfg):
		self.cfg = cfg
		self.targets = {}
		self.skipped_targets = {}
		self.samples = {}
		self.partial = None
		self.volume = T.GlusterVolume(cfg.workdir)
		m = dict(cfg.mode["model"], ranks=4)
		self.server = wl_torch.TorchServer(m, os.path.join(cfg.workdir, "torch.log"))
		os.makedirs(cfg.workdir, exist_ok=True)

	# ---- workloads ----

	def selected(self):
		c, m = self.cfg, self.cfg.mode
		srv = self.server
		made = {
			"ckpt2g": lambda: self.with_ratios(
				wl_files.Ckpt2g(total=c.size, nfiles=c.args.files),
				["ckptfs"] + LEVERS + ["tmpfs", "direct", "direct_fsync", "ckptfs_nomanifest",
						       "ckptfs_nice0", "ckptfs_nice19", "ckptfs_buffered", "ckptfs_splice",
						       "ckptfs_chunk1m"] + (
					["bindfs_fsync", "rclone", "gluster_fsync", "ckptfs_gluster"]
					if m["ckpt2g_peers"] or c.target_filter else []) + (
					["ckptfs_b"] if c.args.ckptfs_bin_b else []),
				lever_ratios() + ckptfs_ratios()[1:] + [
					("ckptfs with io_uring time-to-durable / direct+fsync",
					 ("ckptfs_uring", "durable"), ("direct_fsync", "durable"), "<= 1.0")] +
				MANIFEST_RATIOS + NICE_RATIOS[:3] + BUFFERED_RATIOS + LOOP_RATIOS + BUILD_B_RATIOS + [
					("ckptfs stall / direct (no fsync)", ("ckptfs", "stall"),
						    ("direct", "stall"), "")] + PEER_RATIOS + [
					("ckptfs/GlusterFS stall / GlusterFS+fsync", ("ckptfs_gluster", "stall"),
					 ("gluster_fsync", "durable"), ""),
					("ckptfs/GlusterFS time-to-durable / GlusterFS+fsync",
					 ("ckptfs_gluster", "durable"), ("gluster_fsync", "durable"), "<= 1.05")]),
			"bw8k": lambda: self.with_ratios(
				wl_speed.Bw8k(total=m["bw8k"]),
				["ckptfs", "ckptfs_uring", "tmpfs", "direct"],
				[("ckptfs stall / tmpfs stall", ("ckptfs", "stall"), ("tmpfs", "stall"), "<= 2"),
				 ("ckptfs with io_uring stall / tmpfs stall", ("ckptfs_uring", "stall"),
				  ("tmpfs", "stall"), "<= 2"),
				 ("ckptfs with io_uring stall / direct (no fsync)", ("ckptfs_uring", "stall"),
				  ("direct", "stall"), "")]),
			"smallfiles": lambda: self.with_ratios(
				wl_files.SmallFiles(count=m["smallfiles"]),
				["ckptfs", "ckptfs_uring", "tmpfs", "direct", "direct_fsync", "ckptfs_nomanifest",
				 "ckptfs_nice0"] + (["ckptfs_b"] if c.args.ckptfs_bin_b else []),
				MANIFEST_RATIOS + NICE_RATIOS + BUILD_B_RATIOS + [
				 ("ckptfs files/s / direct files/s", ("direct", "stall"), ("ckptfs", "stall"), ">= 1.0"),
				 ("ckptfs with io_uring files/s / direct files/s", ("direct", "stall"),
				  ("ckptfs_uring", "stall"), ">= 1.0"),
				 ("ckptfs stall / tmpfs stall", ("ckptfs", "stall"), ("tmpfs", "stall"), ""),
				 ("ckptfs time-to-durable / direct+fsync", ("ckptfs", "durable"),
				  ("direct_fsync", "durable"), "")],
				metrics=[("stall", "stall s", "%.3f"), ("rate_files_s", "files/s", "%.0f"),
					 ("durable", "durable s", "%.3f"), ("daemon_cpu_s", "daemon CPU s", "%.2f"),
					 ("rss_over_cache_mib", "peak RSS - cache MiB", "%.0f"),
					 ("cpu_wait_pct", "CPU wait %", "%.0f")]),
			"arraydirs": lambda: self.with_ratios(
				wl_files.ArrayDirs(arrays=m["arraydirs"]),
				["ckptfs", "tmpfs", "direct", "direct_fsync"] + (
					["ckptfs_b"] if c.args.ckptfs_bin_b else []),
				BUILD_B_RATIOS + [("ckptfs time-to-durable / direct+fsync", ("ckptfs", "durable"),
				  ("direct_fsync", "durable"), "<= 1.0"),
				 ("ckptfs stall / direct (no fsync)", ("ckptfs", "stall"), ("direct", "stall"), ""),
				 ("ckptfs stall / tmpfs stall", ("ckptfs", "stall"), ("tmpfs", "stall"), "")],
				metrics=[("stall", "stall s", "%.3f"), ("durable", "durable s", "%.3f"),
					 ("daemon_cpu_s", "daemon CPU s", "%.2f")]),
			"torch_ds": lambda: wl_torch.TorchSave(
				srv, "ds", ["ckptfs"] + LEVERS + ["tmpfs", "direct", "direct_fsync", "bindfs_fsync",
								  "rclone", "ckptfs_splice"],
				lever_ratios() + ckptfs_ratios()[1:] + LOOP_RATIOS[:1] + [
					("ckptfs with io_uring time-to-durable / direct+fsync",
					 ("ckptfs_uring", "durable"), ("direct_fsync", "durable"), "<= 1.0")] +
				PEER_RATIOS,
				"DeepSpeed layout, torch.save by 4 gloo ranks at once, then `latest`"),
			"megatron": lambda: wl_torch.TorchSave(
				srv, "megatron", ["ckptfs", "tmpfs", "direct", "direct_fsync"], ckptfs_ratios(),
				"Megatron layout (TP=4): iter_*/mp_rank_*/model_optim_rng.pt, tracker file, "
				"older iteration deleted"),
			"dcp": lambda: wl_torch.TorchSave(
				srv, "dcp", ["ckptfs", "ckptfs_lazy", "tmpfs", "direct"],
				[("ckptfs stall / direct (both fsync, as DCP does)", ("ckptfs", "stall"),
				  ("direct", "stall"), ""),
				 ("ckptfs fsync=lazy stall / tmpfs", ("ckptfs_lazy", "stall"), ("tmpfs", "stall"), ""),
				 ("ckptfs fsync=lazy stall / direct", ("ckptfs_lazy", "stall"), ("direct", "stall"), ""),
				 ("ckptfs fsync=lazy time-to-durable / direct", ("ckptfs_lazy", "durable"),
				  ("direct", "stall"), "<= 1.05")],
				"DCP file protocol: __R_0.distcp per rank (fsynced), .metadata.tmp fsynced and "
				"renamed"),
			"train": lambda: wl_torch.TrainLoop(srv, compute=c.args.train_compute, **self.train_shape()),
			"restore": lambda: wl_torch.Restore(srv),
			"mount": lambda: wl_speed.MountTime(c, m["mount_sizes"], (256 if c.quick else 1024) << 20),
			"appends": lambda: wl_speed.appends(c.quick),
			"randio": lambda: wl_speed.randio(c.quick),
			"long": lambda: wl_speed.Long(*m["long"]),
		}
		return [made[n]() for n in c.workload_names]

	def train_shape(self):
		a, t = self.cfg.args, dict(self.cfg.mode["train"])
		for k in ("steps", "every", "step_s"):
			if getattr(a, "train_" + k) is not None:
				t[k] = getattr(a, "train_" + k)
		return t

	@staticmethod
	def with_ratios(wl, targets, ratios, metrics=None):
		wl.targets, wl.ratios = targets, ratios
		if metrics:
			wl.metrics = metrics
		return wl

	# ---- targets ----

	def make_target(self, name):
		"""Each target writes to its own directory on the same file system
		(WORKDIR/store-NAME), so no target ever touches another's files, even
		with --remount once (a live ckptfs owns its backend)."""
		c = self.cfg
		ck = (c.binary, c.cache_size, c.args.ckptfs_opts, c.args.remount)
		store = os.path.join(c.workdir, "store-" + name)
		made = {
			"nockpt": lambda: T.NoCkpt(),
			"tmpfs": lambda: T.Tmpfs(c.shm, c.shm),
			"direct": lambda: T.Direct(store, store),
			"direct_fsync": lambda: T.DirectFsync(store, store),
			"ckptfs": lambda: T.Ckptfs(c.mnt(name), store, c.workdir, *ck),
			"ckptfs_lazy": lambda: T.CkptfsLazy(c.mnt(name), store, c.workdir, *ck),
			"ckptfs_nomanifest": lambda: T.CkptfsNoManifest(c.mnt(name), store, c.workdir, *ck),
			"ckptfs_nice0": lambda: T.CkptfsNice0(c.mnt(name), store, c.workdir, *ck),
			"ckptfs_nice19": lambda: T.CkptfsNice19(c.mnt(name), store, c.workdir, *ck),
			"ckptfs_splice": lambda: T.CkptfsSplice(c.mnt(name), store, c.workdir, *ck),
			"ckptfs_chunk1m": lambda: T.CkptfsChunk1M(c.mnt(name), store, c.workdir, *ck),
			"ckptfs_uring": lambda: T.CkptfsUring(c.mnt(name), store, c.workdir, *ck),
			"ckptfs_mp1024": lambda: T.CkptfsPages(c.mnt(name), store, c.workdir, *ck),
			"ckptfs_tuned": lambda: T.CkptfsTuned(c.mnt(name), store, c.workdir, *ck),
			"ckptfs_nopt": lambda: T.CkptfsNoPassthrough(c.mnt(name), store, c.workdir, *ck),
			"ckptfs_nopt_rdcache": lambda: T.CkptfsNoPassthroughCached(c.mnt(name), store, c.workdir, *ck),
			"ckptfs_rdcache": lambda: T.CkptfsReadCached(c.mnt(name), store, c.workdir, *ck),
			"ckptfs_buffered": lambda: T.CkptfsBuffered(c.mnt(name), store, c.workdir, *ck),
			"ckptfs_b": lambda: T.CkptfsBuildB(c.mnt(name), store, c.workdir,
							    os.path.abspath(c.args.ckptfs_bin_b or ""), *ck[1:]),
			"bindfs_fsync": lambda: T.Bindfs(c.mnt(name), store, c.workdir),
			"rclone": lambda: T.Rclone(c.mnt(name), store, c.workdir),
			"gluster_fsync": lambda: T.GlusterFsync(self.volume),
			"ckptfs_gluster": lambda: T.CkptfsGluster(c.mnt(name), self.volume, c.workdir, *ck),
		}
		return made[name]()

	def target(self, name):
		"""The set-up target, or None if it is filtered out or cannot run."""
		c = self.cfg
		if c.target_filter and name not in c.target_filter:
			return None
		if c.quick and name in FULL_ONLY and not c.target_filter:
			self.skipped_targets.setdefault(name, FULL_ONLY[name])
			return None
		if name in self.skipped_targets:
			return None
		if name not in self.targets:
			t = self.make_target(name)
			try:
				t.setup()
			except T.Skip as e:
				log("target %s skipped: %s" % (name, e))
				self.skipped_targets[name] = str(e)
				return None
			self.targets[name] = t
		return self.targets[name]

	# ---- rounds ----

	def measure(self, wl, t, sample):
		"""One target, one round.  Never raises: a failure becomes the record."""
		q = quiesce(self.cfg.workdir)
		smp = None
		try:
			path = t.begin()
			snap = t.snapshot() if wl.daemon_stats else None
			if sample:
				smp = S.Sampler(t.path, t.store, lambda: wl.pids)
				smp.start()
			busy = Contention()
			r = wl.measure(t, path)
			r.update(busy.result())
			if smp:
				self.samples[wl.name] = {"samples": smp.stop(r.get("t0_mono")), "stall": r.get("stall"),
							 "durable": r.get("durable")}
				smp = None
			r.update(t.collect(snap))
			wl.verify(t)
			wl.cleanup(t, path)
			r.update(t.end())
		except Exception as e:  # noqa: BLE001 -- recorded, the run goes on
			log("%s on %s failed: %s" % (wl.name, t.name, e))
			r = {"error": str(e)}
			if smp:
				smp.stop()
			t.abort()
			if t.store and not t.overwrite:
				try:
					empty_dir(t.store)
				except OSError as e2:
					log("cannot empty %s: %s" % (t.store, e2))
		r["quiesce_s"] = q
		return report.derive(r) if "error" not in r else r

	def run(self, wl):
		tl = [t for t in (self.target(n) for n in wl.targets) if t]
		if not tl:
			raise T.Skip("no target available")
		for t in tl:
			wl.prepare(t)
		rounds, orders, warm = [], [], []
		w, n = self.cfg.warmup(wl.name), self.cfg.rounds(wl.name)
		try:
			for i in range(w + n):
				k = (i - w) % len(tl)
				order = tl[k:] + tl[:k]
				rec = {}
				for t in order:
					rec[t.name] = self.measure(wl, t, wl.name in SAMPLED and t.name == "ckptfs")
				if hasattr(wl, "post_round"):
					wl.post_round(rec)
				what = "warm-up %d/%d" % (i + 1, w) if i < w else "round %d/%d" % (i - w + 1, n)
				log("%s %s: %s" % (wl.name, what, "  ".join("%s %s" % (t.name, short(rec[t.name]))
									      for t in order)))
				if i < w:
					warm.append(rec)
				else:
					orders.append([t.name for t in order])
					rounds.append(rec)
			for t in tl:
				wl.finish(t)
		except KeyboardInterrupt:
			if rounds:	# keep the rounds that completed
				self.partial = (wl.name, self.result(wl, tl, rounds, orders, warm))
			raise
		return self.result(wl, tl, rounds, orders, warm)

	def result(self, wl, tl, rounds, orders, warm):
		names = [t.name for t in tl]
		out = {"desc": wl.desc, "bytes": wl.total_bytes, "targets": names,
		       "labels": {t.name: t.label for t in tl}, "orders": orders, "rounds": rounds,
		       "warmup_rounds": warm, "summary": report.summarize_targets(rounds, names),
		       "ratios": report.paired_ratios(rounds, [x for x in wl.ratios
								if x[1][0] in names and x[2][0] in names]),
		       "metrics": getattr(wl, "metrics", None),
		       "durable_method": {t.name: t.drain["how"] for t in tl if getattr(t, "drain", None)}}
		if wl.name in self.samples:
			out["absorb_samples"] = self.samples[wl.name]
		return out

	def teardown(self):
		self.server.stop()
		for t in reversed(list(self.targets.values())):
			try:
				t.teardown()
			except Exception as e:  # noqa: BLE001
				log("teardown of %s: %s" % (t.name, e))
		try:
			self.volume.teardown()
		except Exception as e:  # noqa: BLE001
			log("teardown of the GlusterFS volume: %s" % e)


def short(r):
	if "error" in r:
		return "FAILED"
	if r.get("total_s"):
		return "%.2fs" % r["total_s"]
	if r.get("load_warm_gibs"):
		return "load %.2f GiB/s" % r["load_warm_gibs"]
	s = "%.2fs" % r["stall"] if r.get("stall") else ""
	if r.get("durable") and r["durable"] != r.get("stall"):
		s += "/%.2fs" % r["durable"]
	return s


def plot_all(doc, results_dir, stamp):
	for name, w in doc["workloads"].items():
		a = w.get("absorb_samples")
		if not a:
			continue
		base = os.path.join(results_dir, "%s-%s-absorb" % (stamp, name))
		fig = S.plot(a["samples"], [("last close", a.get("stall")), ("durable", a.get("durable"))],
			     "ckptfs, %s: bytes absorbed vs durable" % name, base)
		if fig:
			w["plot"] = os.path.basename(fig)


def render(doc):
	env = doc["environment"]
	out = ["# ckptfs benchmark, %s mode (%s)" % (doc["mode"], doc["stamp"]), "",
	       "`%s` -- kernel %s, %d CPUs, %.0f GiB RAM, load %.2f -> %.2f, %.0f s total; "
	       "daemon %s%s" % (doc["command"], env.get("kernel"), env.get("cpus", 0),
				env.get("mem_total_gib", 0), env.get("loadavg_start", 0),
				env.get("loadavg_end", 0), doc.get("elapsed_s", 0), env.get("ckptfs_bin"),
				" (sha256 %s, git %s%s, copied for the run)" % (
					(env.get("ckptfs_sha256") or "?")[:12], env.get("git_head", "?")[:10],
					"+dirty" if env.get("git_dirty") else ""))]
	for name, w in doc["workloads"].items():
		out += ["", "## %s: %s" % (name, w["desc"]), "",
			"%s; median (min-max) of %d round(s) after %d warm-up, targets interleaved.%s" % (
				report.fmt_bytes_gib(w["bytes"]), len(w["rounds"]), len(w.get("warmup_rounds", [])),
				"".join(" %s durable via %s." % kv for kv in w.get("durable_method", {}).items())),
			"", report.markdown_table(w["summary"], w["labels"], w.get("metrics"))]
		if w.get("ratios"):
			out += ["", report.markdown_ratios(w["ratios"])]
		if w.get("plot"):
			out += ["", "Absorbed vs durable, last ckptfs round: %s" % w["plot"]]
		for t, s in w["summary"].items():
			for e in s.get("errors", [])[:3]:
				out.append("\n- %s failed: %s" % (t, e.strip().splitlines()[-1][:300] if e.strip() else e))
	if doc.get("skipped"):
		out += ["", "Skipped:"] + ["- %s: %s" % kv for kv in doc["skipped"].items()]
	if doc.get("interrupted"):
		out += ["", "**Interrupted**: partial results."]
	return "\n".join(out)
