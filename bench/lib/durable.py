"""durable.py -- "wait until durable" for every target, used by the measured children.

Owns the two places durability enters a workload, so that writer.py (plain
writes, any python3) and torch_ranks.py (/usr/bin/python3 with torch) do
exactly the same thing for the same target:

  per_file(spec, path)  after a file is written and closed: "fsync_each"
                        reopens it and fsync(2)s it (the application-level
                        durable save: what durable checkpointing costs today)
  finish(spec)          after the last close, make everything durable:
     "none"        nothing (stall only)
     "fsync_each"  nothing more (each file was fsynced)
     "fsync_dir"   fsync(2) the directory durable_path (ckptfs: the mount
                   root, which waits for every operation before it)
     "command"     run durable_cmd (ckptfs-ctl drain MOUNT)
     "read_file"   read durable_path to EOF (MOUNT/.ckptfs/drain)
     "rclone"      poll rclone's remote-control vfs/stats at rc_url until no
                   upload is queued or running and every file written (still
                   present) has its full size on the backend, then syncfs(2)
                   the backend (rclone's local backend never fsyncs).  The
                   size check is needed: rclone reports idle before the upload
                   of a just-closed file is queued.
     "syncfs"      syncfs(2) durable_path (bindfs: a passthrough has nothing
                   of its own to wait for)
Only the standard library is used.
"""
import ctypes
import ctypes.util
import json
import os
import subprocess
import time
import urllib.request

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def syncfs(path):
	fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
	try:
		if _libc.syncfs(fd) != 0:
			e = ctypes.get_errno()
			raise OSError(e, os.strerror(e), path)
	finally:
		os.close(fd)


def fsync_path(path, directory=False):
	fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
	try:
		os.fsync(fd)
	finally:
		os.close(fd)


def per_file(spec, path):
	if spec.get("durable") == "fsync_each":
		fsync_path(path)


def rclone_idle(url):
	req = urllib.request.Request(url.rstrip("/") + "/vfs/stats", data=b"{}", method="POST",
				     headers={"Content-Type": "application/json"})
	with urllib.request.urlopen(req, timeout=10) as r:
		st = json.load(r)["diskCache"]
	return st["uploadsInProgress"] == 0 and st["uploadsQueued"] == 0


def store_complete(spec, written):
	"""Every written file that still exists through the mount has its full
	size under the same name in the store."""
	for path, size in written.items():
		rel = os.path.relpath(path, spec["mount"])
		if not os.path.exists(path):
			continue	# removed later in the workload
		try:
			if os.stat(os.path.join(spec["durable_path"], rel)).st_size != size:
				return False
		except FileNotFoundError:
			return False
	return True


def finish(spec, written=None):
	"""written: {path as the application named it: size}, for "rclone"."""
	how = spec.get("durable", "none")
	if how in ("none", "fsync_each"):
		return
	if how == "fsync_dir":
		fsync_path(spec["durable_path"], directory=True)
	elif how == "command":
		subprocess.run(spec["durable_cmd"], check=True, stdout=subprocess.DEVNULL)
	elif how == "read_file":
		with open(spec["durable_path"], "rb") as f:
			f.read()
	elif how == "rclone":
		idle = 0
		while idle < 2:	# two idle answers in a row: nothing between them
			ok = rclone_idle(spec["rc_url"]) and store_complete(spec, written or {})
			idle = idle + 1 if ok else 0
			time.sleep(0.02)
		syncfs(spec["durable_path"])
	elif how == "syncfs":
		syncfs(spec["durable_path"])
	else:
		raise ValueError("unknown durable mode %r" % how)
