"""targets.py -- the places a workload writes to, and how each is made durable.

Owns: setting up, mounting, unmounting and tearing down every target the
benchmark compares, and the per-round daemon measurements (CPU seconds from
/proc/PID/stat, peak RSS from VmHWM in /proc/PID/status).

A target has
  name      key in the results ("ckptfs", "tmpfs", "direct", ...)
  path      where the application writes (a mount point or a directory)
  store     where the bytes end up (the backend directory), for verification
  durable   what the writer does after its last close to make the data
            durable: "none", "fsync_each" (write+fsync+close per file),
            "fsync_dir", "command", "read_file" (see writer.py)
  overwrite True if the workload rewrites pre-created files in place
and the round protocol
  setup()     once per run: may raise Skip("why") when the target cannot run
  begin()     before a round: mount if needed; returns path
  snapshot()  just before the measured child starts (daemon CPU baseline)
  collect(s)  just after it exits: daemon CPU used, peak RSS - cache size
  end()       after the round's files were removed: unmount, empty backend
  abort()     best-effort recovery after a failed round
  teardown()  once at the end, also on errors and Ctrl-C

Every process started here is remembered by PID and only those are ever
signalled.
"""
import json
import os
import signal
import socket
import shutil
import subprocess
import time

from common import (GiB, MiB, empty_dir, free_port, is_mounted, log, proc_cpu_seconds,
		    proc_status_kib, run, syncfs, which)


class Skip(Exception):
	"""The target cannot run here; the message says why (printed, recorded)."""


class Target:
	name = "?"
	label = "?"
	durable = "none"
	overwrite = False
	daemon = None		# subprocess.Popen of a FUSE daemon, or None
	cache_bytes = 0		# subtracted from the daemon's peak RSS

	def __init__(self, path, store):
		self.path = path
		self.store = store

	def setup(self):
		os.makedirs(self.path, exist_ok=True)

	def begin(self):
		return self.path

	def durable_spec(self):
		return {"durable": self.durable}

	def snapshot(self):
		if not self.daemon:
			return None
		return proc_cpu_seconds(self.daemon.pid)

	def collect(self, snap):
		if not self.daemon or snap is None:
			return {}
		cpu = proc_cpu_seconds(self.daemon.pid)
		hwm = proc_status_kib(self.daemon.pid, "VmHWM")
		return {"daemon_user_s": cpu["user"] - snap["user"],
			"daemon_sys_s": cpu["sys"] - snap["sys"],
			"daemon_cpu_s": cpu["user"] + cpu["sys"] - snap["user"] - snap["sys"],
			"daemon_hwm_bytes": hwm,
			"rss_over_cache_mib": (hwm - self.cache_bytes) / MiB if hwm else None}

	def end(self):
		return {}

	def make_cold(self):
		"""Drop every cached copy of the store's data, so the next read comes
		from the disk; False where the target has no cold state (tmpfs)."""
		return False

	def abort(self):
		pass

	def teardown(self):
		pass


def drop_file_cache(top):
	"""posix_fadvise(DONTNEED) on every file under top: evicts their clean
	page-cache pages without touching the rest of the machine's cache (no
	drop_caches on a shared machine).  Files must have been synced."""
	for root, dirs, names in os.walk(top):
		for n in names:
			p = os.path.join(root, n)
			if os.path.islink(p):
				continue
			fd = os.open(p, os.O_RDONLY)
			try:
				os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
			finally:
				os.close(fd)


class NoCkpt(Target):
	"""The training loop without checkpoints: the baseline of loop overhead."""
	name, label = "nockpt", "no checkpointing"

	def __init__(self):
		super().__init__(None, None)

	def setup(self):
		pass


class Tmpfs(Target):
	"""/dev/shm, files overwritten in place: the memory-copy reference."""
	name, label = "tmpfs", "tmpfs /dev/shm"
	overwrite = True

	def teardown(self):
		shutil.rmtree(self.path, ignore_errors=True)


class Direct(Target):
	"""The backend directory itself, no fsync: page-cache speed."""
	name, label = "direct", "backend dir, no fsync"

	def setup(self):
		os.makedirs(self.path, exist_ok=True)
		empty_dir(self.path)

	def end(self):
		empty_dir(self.path)
		return {}

	def make_cold(self):
		syncfs(self.store)
		drop_file_cache(self.store)
		return True


class DirectFsync(Direct):
	"""The backend directory with write+fsync+close per file: durable today."""
	name, label = "direct_fsync", "backend dir, fsync each file"
	durable = "fsync_each"


class FuseDaemon(Target):
	"""Common life cycle of a FUSE daemon run in the foreground by us.

	remount="each": a fresh daemon per round (see bench/README.md);
	remount="once": one daemon for the whole run, files removed through it."""
	remount = "each"
	unmount_timeout = 600

	def __init__(self, path, store, workdir):
		super().__init__(path, store)
		self.workdir = workdir
		self.logpath = os.path.join(workdir, "%s.log" % self.name)
		self.mounts = 0

	def command(self):
		raise NotImplementedError

	def setup(self):
		os.makedirs(self.store, exist_ok=True)
		os.makedirs(self.path, exist_ok=True)
		if is_mounted(self.path):
			# left by an earlier run that was killed (the run lock rules out
			# a live one): the mount point is ours, detach it
			log("%s: detaching a stale mount at %s" % (self.name, self.path))
			run(["fusermount3", "-uz", self.path], check=False)
			run(["umount", "-l", self.path], check=False)
			if is_mounted(self.path):
				raise Skip("%s is already a mount point" % self.path)
		if os.listdir(self.path):
			raise Skip("mount point %s is not empty" % self.path)
		empty_dir(self.store)

	def mount(self):
		logf = open(self.logpath, "a")
		logf.write("=== mount %d: %s\n" % (self.mounts, " ".join(self.command())))
		logf.flush()
		self.daemon = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=logf,
					       stderr=logf, start_new_session=True)
		logf.close()
		self.mounts += 1
		t0 = time.monotonic()
		while not is_mounted(self.path):
			if self.daemon.poll() is not None:
				rc, self.daemon = self.daemon.returncode, None
				raise RuntimeError("%s exited %d before mounting; see %s" %
						   (self.name, rc, self.logpath))
			if time.monotonic() - t0 > 180:
				self.abort()
				raise RuntimeError("%s did not mount within 180 s" % self.name)
			time.sleep(0.05)
		self.mount_s = time.monotonic() - t0
		self.after_mount()

	def after_mount(self):
		pass

	def begin(self):
		if not self.daemon:
			self.mount()
		return self.path

	def unmount(self):
		"""Clean unmount; the daemon drains and exits.  Returns seconds, rc."""
		t0 = time.monotonic()
		for attempt in range(50):
			p = run(["fusermount3", "-u", self.path], check=False)
			if p.returncode == 0 or not is_mounted(self.path):
				break
			time.sleep(0.2)	# EBUSY right after the writer exits
		else:
			raise RuntimeError("cannot unmount %s: %s" % (self.path, p.stdout.strip()))
		try:
			rc = self.daemon.wait(self.unmount_timeout)
		finally:
			if self.daemon.poll() is None:
				self.kill()
		self.daemon = None
		return time.monotonic() - t0, rc

	def end(self):
		if self.remount != "each":
			return {}
		secs, rc = self.unmount()
		empty_dir(self.store)
		if rc != 0:
			raise RuntimeError("%s exited %d after unmount; see %s" % (self.name, rc, self.logpath))
		return {"unmount_s": secs, "daemon_exit": rc}

	def kill(self):
		if self.daemon and self.daemon.poll() is None:
			os.kill(self.daemon.pid, signal.SIGKILL)
			self.daemon.wait(30)

	def abort(self):
		if is_mounted(self.path):
			run(["fusermount3", "-uz", self.path], check=False)
		if self.daemon:
			if self.daemon.poll() is None:
				os.kill(self.daemon.pid, signal.SIGTERM)
				try:
					self.daemon.wait(60)
				except subprocess.TimeoutExpired:
					self.kill()
			self.daemon = None

	def teardown(self):
		if self.daemon or is_mounted(self.path):
			try:
				if self.daemon and is_mounted(self.path):
					self.unmount()
			except Exception as e:	# noqa: BLE001 -- teardown must go on
				log("%s: clean unmount failed (%s); aborting" % (self.name, e))
			self.abort()


class Knobs:
	"""Kernel settings only an administrator changes (a sysctl, a module
	parameter), set for one mount's INIT and put back as soon as the daemon
	answers: the FUSE connection keeps what INIT negotiated, and the machine
	(shared) runs with its defaults again.

	  enable_uring     /sys/module/fuse/parameters/enable_uring: the kernel
	                   offers FUSE over io_uring at INIT
	  max_pages_limit  fs.fuse.max_pages_limit: pages per FUSE request
	  pipe_max_size    fs.pipe-max-size: what an unprivileged pipe may hold
	                   (the splice loop's pipe must hold a whole request;
	                   a daemon with CAP_SYS_RESOURCE needs no raise)"""
	PATHS = {"enable_uring": "/sys/module/fuse/parameters/enable_uring",
		 "max_pages_limit": "/proc/sys/fs/fuse/max_pages_limit",
		 "pipe_max_size": "/proc/sys/fs/pipe-max-size"}

	def __init__(self, values):
		self.values = dict(values)
		self.saved = {}

	def describe(self):
		return ",".join("%s=%s" % kv for kv in self.values.items())

	def check(self):
		for k in self.values:
			p = self.PATHS[k]
			if not os.path.exists(p):
				raise Skip("%s is missing (this kernel has no such setting)" % p)
			if not os.access(p, os.W_OK):
				raise Skip("%s is not writable (root needed)" % p)

	def set(self):
		for k, v in self.values.items():
			p = self.PATHS[k]
			with open(p) as f:
				self.saved.setdefault(p, f.read().strip())
			with open(p, "w") as f:
				f.write(str(v))

	def restore(self):
		for p, v in self.saved.items():
			try:
				with open(p, "w") as f:
					f.write(v)
			except OSError as e:
				log("cannot put %s back to %s: %s" % (p, v, e))
		self.saved = {}


class Ckptfs(FuseDaemon):
	"""ckptfs over the backend directory.  knobs: admin settings for its mount
	(Knobs); without them it runs as the machine is configured."""
	name = "ckptfs"

	KNOBS = None	# subclasses: the admin settings their mounts get

	def __init__(self, path, store, workdir, binary, cache_size, opts="", remount="each", knobs=None):
		super().__init__(path, store, workdir)
		self.binary = binary
		self.cache_bytes = cache_size
		self.opts = opts
		self.remount = remount
		self.drain = None
		knobs = knobs or self.KNOBS
		self.knobs = Knobs(knobs) if knobs else None
		self.label = "ckptfs (cache_size=%dG%s%s)" % (cache_size // GiB, "," + opts if opts else "",
							 "; " + self.knobs.describe() if self.knobs else "")
		self.ready_s = None
		self.transport = None

	def command(self):
		o = "cache_size=%d" % self.cache_bytes
		if self.opts:
			o += "," + self.opts
		return [self.binary, self.store, self.path, "-f", "-o", o]

	def setup(self):
		if not os.access(self.binary, os.X_OK):
			raise Skip("no ckptfs binary at %s (build it, or set CKPTFS_BIN)" % self.binary)
		if not os.path.exists("/dev/fuse"):
			raise Skip("/dev/fuse is missing")
		if self.knobs:
			self.knobs.check()
		super().setup()

	def mount(self):
		if self.knobs:
			self.knobs.set()
		try:
			super().mount()
		finally:
			if self.knobs:
				self.knobs.restore()

	def stats(self):
		try:
			with open(os.path.join(self.path, ".ckptfs", "stats")) as f:
				return json.load(f)
		except (OSError, ValueError):
			return {}

	def wait_ready(self, limit=300):
		"""The cache is pre-faulted in the background after the mount; a
		measurement starts once it is done, as it did when mounting waited for
		it (the mount workload measures the first checkpoint without waiting).
		Returns seconds waited."""
		t0 = time.monotonic()
		while time.monotonic() - t0 < limit:
			s = self.stats()
			if s.get("cache_ready_bytes", 1) >= s.get("cache_capacity_bytes", 0):
				break
			time.sleep(0.05)
		return time.monotonic() - t0

	def after_mount(self):
		s = self.stats()	# answered: INIT is done, the knobs may go back
		self.transport = "%s, %s requests up to %d KiB%s" % (
			s.get("fuse_transport", "?"), "passthrough on" if s.get("passthrough") else "no passthrough",
			s.get("fuse_max_write", 0) // 1024, "")
		self.ready_s = self.wait_ready() if getattr(self, "wait_for_cache", True) else None
		self.idle_rss = proc_status_kib(self.daemon.pid, "VmRSS")
		if self.drain is None:
			self.drain = self.pick_drain()
			log("ckptfs: time-to-durable via %s" % self.drain["how"])

	def pick_drain(self):
		"""The strongest 'wait until everything is durable' the build offers:
		ckptfs-ctl drain, else reading MOUNT/.ckptfs/drain, else fsync of the
		mount root (which the daemon defines as waiting for everything)."""
		ctl = which("ckptfs-ctl", [os.path.dirname(self.binary)])
		if ctl:
			p = run([ctl, "drain", self.path], check=False, timeout=60)
			if p.returncode == 0:
				return {"how": "ckptfs-ctl drain", "durable": "command",
					"durable_cmd": [ctl, "drain", self.path]}
		dp = os.path.join(self.path, ".ckptfs", "drain")
		if os.path.exists(dp):
			return {"how": "read .ckptfs/drain", "durable": "read_file", "durable_path": dp}
		return {"how": "fsync(mount root)", "durable": "fsync_dir", "durable_path": self.path}

	def durable_spec(self):
		d = dict(self.drain)
		d.pop("how")
		return d

	def collect(self, snap):
		out = super().collect(snap)
		out["daemon_idle_rss_over_cache_mib"] = (self.idle_rss - self.cache_bytes) / MiB
		out["mount_s"] = self.mount_s
		if self.ready_s is not None:
			out["cache_ready_wait_s"] = self.ready_s
		return out

	def end(self):
		if self.remount == "each":
			return super().end()
		# one daemon for all rounds: the workload removed its files through
		# the mount; wait until those unlinks are durable too
		fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
		os.fsync(fd)
		os.close(fd)
		return {}

	def make_cold(self):
		"""Unmount (drains), drop the backend files' page cache, mount again:
		the next read comes from the backend's disk through a fresh daemon.
		The restore starts as soon as the mount answers, without waiting for
		the cache to be pre-faulted: a restarted job loads its checkpoint
		first thing."""
		self.unmount()
		drop_file_cache(self.store)
		self.wait_for_cache = False
		try:
			self.mount()
		finally:
			self.wait_for_cache = True
		return True


class CkptfsOpt(Ckptfs):
	"""ckptfs with one more -o option (OPT): a lever measured beside the default."""
	OPT = ""

	def __init__(self, path, store, workdir, binary, cache_size, opts="", remount="each"):
		opts = ",".join(o for o in (opts, self.OPT) if o)
		super().__init__(path, store, workdir, binary, cache_size, opts, remount)


class CkptfsUring(Ckptfs):
	"""ckptfs with FUSE over io_uring: enable_uring on for its mount."""
	name = "ckptfs_uring"
	KNOBS = {"enable_uring": "Y"}


class CkptfsPages(Ckptfs):
	"""ckptfs with 4 MiB FUSE requests: max_pages_limit 1024 (and pipes that
	hold such a request: pipe-max-size 8 MiB, as this machine's root lacks
	CAP_SYS_RESOURCE), over /dev/fuse."""
	name = "ckptfs_mp1024"
	KNOBS = {"enable_uring": "N", "max_pages_limit": 1024, "pipe_max_size": 8 << 20}


class CkptfsTuned(Ckptfs):
	"""ckptfs with both admin levers: io_uring and 4 MiB requests."""
	name = "ckptfs_tuned"
	KNOBS = {"enable_uring": "Y", "max_pages_limit": 1024, "pipe_max_size": 8 << 20}


class CkptfsReadCached(CkptfsOpt):
	"""ckptfs with -o read_direct=off: reads through the daemon fill the
	kernel's page cache (a second read of a file is served from it)."""
	name = "ckptfs_rdcache"
	OPT = "read_direct=off"


class CkptfsNoPassthrough(CkptfsOpt):
	"""ckptfs with -o passthrough=off: restores read through the daemon."""
	name = "ckptfs_nopt"
	OPT = "passthrough=off"


class CkptfsNoPassthroughCached(CkptfsOpt):
	"""ckptfs with passthrough=off and read_direct=off: every read through
	the daemon and the kernel's page cache (as before read_direct)."""
	name = "ckptfs_nopt_rdcache"
	OPT = "passthrough=off,read_direct=off"


class CkptfsBuffered(CkptfsOpt):
	"""ckptfs with -o direct=off: the flushers write through the backend's
	page cache (then fsync), which keeps the checkpoint there."""
	name = "ckptfs_buffered"
	OPT = "direct=off"


class CkptfsBuildB(Ckptfs):
	"""Another build of the daemon (bench/run --ckptfs-bin-b), with this
	build's options: a change with no option to turn it off, measured in
	the same rounds as this build."""
	name = "ckptfs_b"

	def __init__(self, *a, **kw):
		super().__init__(*a, **kw)
		self.label = "ckptfs build B (%s)" % self.binary


class CkptfsLazy(CkptfsOpt):
	"""ckptfs with -o fsync=lazy: an application's fsync returns at once."""
	name = "ckptfs_lazy"
	OPT = "fsync=lazy"


class CkptfsNice19(CkptfsOpt):
	"""ckptfs with -o flush_nice=19: flushers at the lowest priority."""
	name = "ckptfs_nice19"
	OPT = "flush_nice=19"


class CkptfsNice0(CkptfsOpt):
	"""ckptfs with -o flush_nice=0: flushers at the same priority as the
	threads answering requests (the lever's off position)."""
	name = "ckptfs_nice0"
	OPT = "flush_nice=0"


class CkptfsSplice(CkptfsOpt):
	"""ckptfs with -o loop=splice: write data spliced through a pipe, then
	copied into the cache (the request loop before loop=readv)."""
	name = "ckptfs_splice"
	OPT = "loop=splice"


class CkptfsChunk1M(CkptfsOpt):
	"""ckptfs with -o chunk_size=1M: every 1 MiB write starts a chunk."""
	name = "ckptfs_chunk1m"
	OPT = "chunk_size=1M"


class CkptfsNoManifest(CkptfsOpt):
	"""ckptfs with -o manifest=off: no checksum records, for the manifest's cost."""
	name = "ckptfs_nomanifest"
	OPT = "manifest=off"


class Bindfs(FuseDaemon):
	"""bindfs: a FUSE passthrough; the application fsyncs each file (the
	durable save), so this shows what one FUSE hop adds to direct+fsync."""
	name, label = "bindfs_fsync", "bindfs passthrough, fsync each file"
	durable = "fsync_each"

	def command(self):
		return ["bindfs", "-f", "--no-allow-other", self.store, self.path]

	def setup(self):
		if not which("bindfs"):
			raise Skip("bindfs is not installed (apt-get install bindfs)")
		super().setup()

	def make_cold(self):
		self.unmount()
		drop_file_cache(self.store)
		self.mount()
		return True


class Rclone(FuseDaemon):
	"""rclone mount --vfs-cache-mode writes: a write-back FUSE peer.  Files
	are staged in rclone's disk cache (under the work directory) and copied to
	the backend after close; --vfs-write-back 0s starts that at once (the
	default waits 5 s).  Durable = rclone reports no upload queued or running,
	then syncfs of the backend (rclone's local backend does not fsync)."""
	name = "rclone"
	label = "rclone mount --vfs-cache-mode writes"

	def __init__(self, path, store, workdir):
		super().__init__(path, store, workdir)
		self.cache = os.path.join(workdir, "rclone-cache")
		self.port = None

	def command(self):
		return ["rclone", "mount", self.store, self.path, "--vfs-cache-mode", "writes",
			"--vfs-write-back", "0s", "--cache-dir", self.cache, "--rc",
			"--rc-addr", "127.0.0.1:%d" % self.port, "--rc-no-auth", "--config", "/dev/null"]

	def setup(self):
		if not which("rclone"):
			raise Skip("rclone is not installed (apt-get install rclone)")
		super().setup()
		shutil.rmtree(self.cache, ignore_errors=True)

	def mount(self):
		self.port = free_port()
		super().mount()

	def durable_spec(self):
		return {"durable": "rclone", "rc_url": "http://127.0.0.1:%d" % self.port,
			"durable_path": self.store, "mount": self.path}

	def end(self):
		out = super().end()
		shutil.rmtree(self.cache, ignore_errors=True)
		return out

	def make_cold(self):
		self.unmount()
		shutil.rmtree(self.cache, ignore_errors=True)
		drop_file_cache(self.store)
		self.mount()
		return True


class GlusterVolume:
	"""A one-brick GlusterFS volume on loopback, made for this run and removed
	after it: the second backend (a network file system's client path).
	glusterd is started only if it is not running, and then stopped by PID;
	a glusterd someone else runs is used and left alone."""
	VOL = "ckptfsbench"

	def __init__(self, workdir):
		self.brick = os.path.join(workdir, "gluster-brick")
		self.mnt = os.path.join(workdir, "gluster-mnt")
		self.glusterd_pid = None
		self.created = False
		self.error = None

	def gluster(self, *args, check=True, timeout=120):
		return run(["gluster", "--mode=script"] + list(args), check=check, timeout=timeout)

	def setup(self):
		if self.error:
			raise Skip(self.error)
		if self.created:
			return
		try:
			self._setup()
		except Skip as e:
			self.error = str(e)
			self.teardown()
			raise
		except Exception as e:  # noqa: BLE001 -- any failure: skip with the reason
			self.error = "GlusterFS setup failed: %s" % e
			self.teardown()
			raise Skip(self.error)

	def _setup(self):
		for tool in ("gluster", "glusterd"):
			if not which(tool):
				raise Skip("%s is not installed (apt-get install glusterfs-server)" % tool)
		if self.gluster("pool", "list", check=False, timeout=30).returncode != 0:
			log("gluster: starting glusterd")
			pidfile = self.brick + ".glusterd.pid"
			run(["glusterd", "--pid-file=" + pidfile], timeout=60)
			for _ in range(100):
				if self.gluster("pool", "list", check=False, timeout=30).returncode == 0:
					break
				time.sleep(0.2)
			else:
				raise Skip("glusterd did not answer")
			try:
				with open(pidfile) as f:
					self.glusterd_pid = int(f.read().strip())
			except (OSError, ValueError):
				log("gluster: no pid in %s; glusterd will be left running" % pidfile)
		if self.gluster("volume", "info", self.VOL, check=False).returncode == 0:
			self.remove_volume()	# left by an interrupted run of ours
		if is_mounted(self.mnt):
			run(["umount", "-l", self.mnt], check=False)
		shutil.rmtree(self.brick, ignore_errors=True)
		os.makedirs(self.brick)
		os.makedirs(self.mnt, exist_ok=True)
		host = socket.gethostname()
		self.gluster("volume", "create", self.VOL, "%s:%s" % (host, self.brick), "force")
		self.created = True
		self.gluster("volume", "start", self.VOL)
		run(["mount", "-t", "glusterfs", "%s:/%s" % (host, self.VOL), self.mnt], timeout=120)
		t0 = time.monotonic()
		while not is_mounted(self.mnt):
			if time.monotonic() - t0 > 60:
				raise Skip("the GlusterFS mount did not appear")
			time.sleep(0.1)
		log("gluster: volume %s on %s mounted at %s" % (self.VOL, self.brick, self.mnt))

	def remove_volume(self):
		self.gluster("volume", "stop", self.VOL, "force", check=False)
		self.gluster("volume", "delete", self.VOL, check=False)

	def teardown(self):
		if is_mounted(self.mnt):
			run(["umount", self.mnt], check=False, timeout=120)
			if is_mounted(self.mnt):
				run(["umount", "-l", self.mnt], check=False)
		if self.created:
			self.remove_volume()
			self.created = False
		if self.glusterd_pid:
			try:
				os.kill(self.glusterd_pid, signal.SIGTERM)
			except ProcessLookupError:
				pass
			self.glusterd_pid = None
		shutil.rmtree(self.brick, ignore_errors=True)


class GlusterFsync(DirectFsync):
	"""The GlusterFS mount used directly, write+fsync per file."""
	name, label = "gluster_fsync", "GlusterFS loopback, fsync each file"

	def __init__(self, volume):
		d = os.path.join(volume.mnt, "direct")
		super().__init__(d, d)
		self.volume = volume

	def setup(self):
		self.volume.setup()
		super().setup()


class CkptfsGluster(Ckptfs):
	"""ckptfs with the GlusterFS mount as its backend."""
	name = "ckptfs_gluster"

	def __init__(self, path, volume, workdir, binary, cache_size, opts="", remount="each"):
		super().__init__(path, os.path.join(volume.mnt, "ckptfs"), workdir, binary, cache_size, opts,
				 remount)
		self.volume = volume
		self.label = self.label.replace("ckptfs", "ckptfs over GlusterFS", 1)

	def setup(self):
		self.volume.setup()
		super().setup()
