"""fwmount.py — a real ckptfs mount for the framework fidelity tests.

This module owns the daemon's life cycle as the Python tests see it, and the
tools that look at the result from outside the mount:

  Mount.start()   runs $CKPTFS_BIN BACKEND MNT -f -o OPTS (log to daemon.log)
                  and returns once /proc/self/mountinfo shows fuse.ckptfs at
                  MNT; a daemon that exits first fails the test with its log.
  Mount.stop()    fusermount3 -u (retried while the mount is busy), then waits
                  for the daemon, which drains everything to the backend
                  before it exits; any status but 0 fails the test.
  Mount.kill()    SIGKILL and a lazy detach: only for cleaning up after a
                  failure, never part of what a test checks.
  BackendWatcher  polls the backend while ranks write: snapshots of a
                  marker file (`latest`, `.metadata`) and the file listing,
                  for checking prefix consistency afterwards.
  drain(), stats(), verify()   ckptfs-ctl drain, MNT/.ckptfs/stats,
                  ckptfs-ctl verify; verify() also insists that every file
                  the caller names is reported OK, so an empty or stale
                  manifest cannot pass.

Invariant: a Mount is either stopped (self.proc is None, MNT unmounted) or
running (self.proc is the daemon, MNT is mounted by it).  Tests reach the
backend only through bpath() and only read it.
"""
import json
import os
import signal
import subprocess
import threading
import time

MOUNT_TIMEOUT_S = 20
EXIT_TIMEOUT_S = 120


def daemon_bin():
    """The daemon under test: $CKPTFS_BIN (set by ctest) or the default build."""
    default = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "..", "..", "build", "fs", "ckptfs")
    return os.path.abspath(os.environ.get("CKPTFS_BIN") or default)


def ctl_bin():
    """ckptfs-ctl is built next to the daemon."""
    return os.path.join(os.path.dirname(daemon_bin()), "ckptfs-ctl")


def _unescape_mountinfo(field):
    """mountinfo writes space, tab, newline and backslash as \\ooo."""
    out, i = [], 0
    while i < len(field):
        code = field[i + 1:i + 4]
        if field[i] == "\\" and len(code) == 3 and code.isdigit():
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mounted_fstype(path):
    """The file system type mounted exactly at path, or None."""
    path = os.path.realpath(path)
    found = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            if len(fields) >= 5 and _unescape_mountinfo(fields[4]) == path:
                found = right.split()[0]  # the last mount there wins
    return found


def _run(argv, timeout=120):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=timeout)


class Mount:
    def __init__(self, root, opts="cache_size=512M", env=None):
        self.root = root
        self.backend = os.path.join(root, "backend")
        self.mnt = os.path.join(root, "mnt")
        self.log = os.path.join(root, "daemon.log")
        self.opts = opts
        self.env = dict(env or {})
        self.proc = None
        os.makedirs(self.backend, exist_ok=True)
        os.makedirs(self.mnt, exist_ok=True)

    # ---- life cycle ----

    def start(self):
        assert self.proc is None, "already mounted"
        env = dict(os.environ, **self.env)
        argv = [daemon_bin(), self.backend, self.mnt, "-f", "-o", self.opts]
        with open(self.log, "a") as log:
            log.write("==== %s\n" % " ".join(argv))
            log.flush()
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while mounted_fstype(self.mnt) != "fuse.ckptfs":
            rc = self.proc.poll()
            if rc is not None:
                self.proc = None
                raise AssertionError("daemon exited with status %d before mounting\n%s"
                                     % (rc, self.log_text()))
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError("daemon did not mount %s within %d s\n%s"
                                     % (self.mnt, MOUNT_TIMEOUT_S, self.log_text()))
            time.sleep(0.01)
        return self

    def stop(self):
        """Unmount cleanly; the daemon must drain and exit 0."""
        assert self.proc is not None, "not mounted"
        deadline = time.monotonic() + 10
        while True:
            r = _run(["fusermount3", "-u", self.mnt])
            if r.returncode == 0:
                break
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError("fusermount3 -u %s keeps failing: %s"
                                     % (self.mnt, r.stdout.strip()))
            time.sleep(0.05)  # busy: a close may still be in flight
        try:
            rc = self.proc.wait(timeout=EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("daemon did not exit within %d s of unmount\n%s"
                                 % (EXIT_TIMEOUT_S, self.log_text()))
        self.proc = None
        if rc != 0:
            raise AssertionError("daemon exited with status %d after unmount\n%s"
                                 % (rc, self.log_text()))

    def kill(self):
        if self.proc is not None:
            try:
                self.proc.send_signal(signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
            self.proc = None
        if mounted_fstype(self.mnt) == "fuse.ckptfs":
            _run(["fusermount3", "-uz", self.mnt])

    @property
    def running(self):
        return self.proc is not None

    def log_text(self, tail=200):
        try:
            with open(self.log, errors="replace") as f:
                lines = f.readlines()
        except OSError:
            return "(no daemon log)"
        return "---- daemon log (%s) ----\n%s" % (self.log, "".join(lines[-tail:]))

    # ---- paths ----

    def path(self, *rel):
        return os.path.join(self.mnt, *rel)

    def bpath(self, *rel):
        return os.path.join(self.backend, *rel)

    # ---- control interface and tools ----

    def stats(self):
        with open(self.path(".ckptfs", "stats")) as f:
            return json.load(f)

    def drain(self, timeout=90):
        r = _run([ctl_bin(), "drain", self.mnt, "--timeout", str(timeout)], timeout + 30)
        assert r.returncode == 0, "ckptfs-ctl drain %s exited %d: %s\n%s" % (
            self.mnt, r.returncode, r.stdout, self.log_text())

    def verify(self, expect=()):
        """ckptfs-ctl verify on the backend: exit 0, nothing untracked, and
        every backend-relative path in expect reported OK."""
        r = _run([ctl_bin(), "verify", self.backend])
        assert r.returncode == 0, "ckptfs-ctl verify %s exited %d:\n%s" % (
            self.backend, r.returncode, r.stdout)
        ok = set()
        for line in r.stdout.splitlines():
            status, _, rel = line.partition(" ")
            if status == "OK":
                ok.add(rel.strip())
            assert status != "UNTRACKED", "verify found an untracked file: %s\n%s" % (
                line, r.stdout)
        missing = sorted(set(expect) - ok)
        assert not missing, "verify did not report these OK: %s\n%s" % (missing, r.stdout)
        return r.stdout


def backend_listing(root):
    """{relative path: size} of every file under root, skipping the daemon's
    own .ckptfs directory at the top."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == root and ".ckptfs" in dirnames:
            dirnames.remove(".ckptfs")
        for name in filenames:
            full = os.path.join(dirpath, name)
            try:
                out[os.path.relpath(full, root)] = os.lstat(full).st_size
            except FileNotFoundError:
                pass  # renamed away between readdir and stat
    return out


def assert_whole_files(listing, final):
    """Every file of a backend snapshot that is also in the final listing had
    its final size: the backend never showed a partial file (each file in
    these tests is written once)."""
    for rel, size in listing.items():
        if rel in final:
            assert size == final[rel], "backend showed %s at %d bytes, final %d" % (
                rel, size, final[rel])


def temp_names(listing):
    """Names in a backend listing that are the daemon's temporary files."""
    return sorted(p for p in listing if ".ckptfs." in os.path.basename(p))


class BackendWatcher(threading.Thread):
    """Snapshots (marker bytes or None, listing) of a backend, taken in that
    order: files complete when the marker was read are still there when the
    listing is taken, so a snapshot never makes a correct backend look
    inconsistent."""

    def __init__(self, root, marker, interval=0.02):
        super().__init__(daemon=True)
        self.root = root
        self.marker = os.path.join(root, marker)
        self.interval = interval
        self.snapshots = []
        self._done = threading.Event()

    def snapshot(self):
        try:
            with open(self.marker, "rb") as f:
                content = f.read()
        except FileNotFoundError:
            content = None
        return content, backend_listing(self.root)

    def run(self):
        while not self._done.is_set():
            self.snapshots.append(self.snapshot())
            self._done.wait(self.interval)

    def finish(self):
        self._done.set()
        self.join()
        self.snapshots.append(self.snapshot())
        return self.snapshots
