"""_lib.py — libckptfs through ctypes: loading it, one Session per mount and
process, and the module-level wait/commit that act on every session.

The library is found, in order, at $CKPTFS_LIBRARY, where `cmake --install`
put it (_paths.py, written by the install), and by the dynamic linker's
search ("libckptfs.so.0").  Nothing here imports torch.

A Session keeps the storages it captured from alive until their copies are
done, so the caching allocator cannot hand their memory to new tensors while
the copy still reads it: wait() releases them, and after stream_wait() they
are released once the driver says the copies it ordered the stream after
have completed (looked at, without waiting, by the next capture or
stream_wait).  A forked child (a DataLoader worker)
never uses its parent's session: session_for() opens a new one there.
"""
import ctypes
import ctypes.util
import errno
import os
import threading

try:
    from . import _paths
except ImportError:  # running from the source tree
    _paths = None

CAPTURE_CRC32 = 0x1
PATCH_CRC32_LE = 1
PATCH_BYTES = 2


class CkptfsError(OSError):
    """A libckptfs call failed: errno and the library's message."""


class _Patch(ctypes.Structure):
    _fields_ = [("file_offset", ctypes.c_uint64), ("kind", ctypes.c_uint32),
                ("capture", ctypes.c_int32), ("data", ctypes.c_void_p),
                ("len", ctypes.c_uint64)]


class _Opts(ctypes.Structure):
    _fields_ = [("arena_bytes", ctypes.c_uint64), ("device", ctypes.c_int),
                ("crc_threads", ctypes.c_int)]


class _Stats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "arena_bytes", "chunk_size", "captures", "captured_bytes", "host_written_bytes",
        "entries", "adopted_chunks", "adopted_bytes", "merged_bytes", "moved_chunks",
        "rejected", "arena_waits", "arena_wait_ns")] + [
        ("adopt_latency_avg_s", ctypes.c_double), ("adopt_latency_max_s", ctypes.c_double),
        ("numa_node", ctypes.c_int), ("hugepages", ctypes.c_int), ("arena_pinned", ctypes.c_int),
        ("driver", ctypes.c_char_p)]


_lib = None
_lib_lock = threading.Lock()


def _candidates():
    env = os.environ.get("CKPTFS_LIBRARY")
    if env:
        return [env]
    out = [_paths.LIBRARY] if _paths is not None else []
    found = ctypes.util.find_library("ckptfs")
    return out + ([found] if found else []) + ["libckptfs.so.0"]


def mock_driver():
    """The installed mock CUDA driver (for CKPTFS_LIBCUDA without a GPU), or None."""
    return _paths.MOCK_DRIVER if _paths is not None else None


def library():
    """The loaded libckptfs (raises CkptfsError if it cannot be found)."""
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        errors = []
        for path in _candidates():
            if os.sep in path and not os.path.exists(path):
                continue
            try:
                lib = ctypes.CDLL(path, use_errno=True)
                break
            except OSError as e:
                errors.append(str(e))
        else:
            raise CkptfsError(errno.ENOENT, "libckptfs not found (set CKPTFS_LIBRARY): "
                              + "; ".join(errors or ["no candidate exists"]))
        vp, i, u64, sz = (ctypes.c_void_p, ctypes.c_int,
                          ctypes.c_uint64, ctypes.c_size_t)
        sigs = {
            "ckptfs_session_open_ex": (vp, [ctypes.c_char_p, ctypes.POINTER(_Opts)]),
            "ckptfs_session_close": (i, [vp]),
            "ckptfs_file_bind": (i, [vp, i, u64]),
            "ckptfs_capture_ex": (i, [vp, i, u64, u64, sz, vp, ctypes.c_uint]),
            "ckptfs_wait_captured": (i, [vp]),
            "ckptfs_stream_wait": (i, [vp, vp]),
            "ckptfs_stream_wait_done": (i, [vp]),
            "ckptfs_file_close": (i, [vp, i, ctypes.POINTER(_Patch), sz, ctypes.c_char_p,
                                      ctypes.c_char_p]),
            "ckptfs_wait_files": (i, [vp]),
            "ckptfs_session_stats": (i, [vp, ctypes.POINTER(_Stats)]),
            "ckptfs_last_error": (ctypes.c_char_p, []),
        }
        for name, (res, args) in sigs.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        _lib = lib
        return lib


def _check(r):
    if r < 0:
        msg = library().ckptfs_last_error().decode(errors="replace")
        raise CkptfsError(-r, msg or os.strerror(-r))
    return r


class Session:
    """A libckptfs session with the mount holding `path`, for this process."""

    def __init__(self, path, arena_bytes=0, device=-1):
        lib = library()
        opts = _Opts(arena_bytes, device, 0)
        self.path = path
        self.pid = os.getpid()
        self._held = []    # captured since the last wait or stream_wait
        self._marked = []  # covered by a stream_wait: released once its copies are done
        self._lock = threading.Lock()
        self._s = lib.ckptfs_session_open_ex(os.fsencode(path), ctypes.byref(opts))
        if not self._s:
            e = ctypes.get_errno() or errno.EIO
            msg = lib.ckptfs_last_error().decode(errors="replace")
            raise CkptfsError(e, msg)
        self.driver = self.stats()["driver"]

    def _live(self):
        if not self._s:
            raise CkptfsError(errno.ENOTCONN, "ckptfs: the session is closed")
        return self._s

    def bind(self, fd, size=0):
        return _check(library().ckptfs_file_bind(self._live(), fd, size))

    def capture(self, fd, offset, ptr, nbytes, stream=0, crc=False, keep=None):
        """Copy nbytes at ptr to fd at offset, after `stream`'s queued work; its number."""
        r = _check(library().ckptfs_capture_ex(self._live(), fd, offset, ptr, nbytes,
                                               stream or None, CAPTURE_CRC32 if crc else 0))
        if keep is not None:
            with self._lock:
                self._held.append(keep)
        self._release_done()
        return r

    def _take_held(self):
        """The storages captured so far, all issued before a wait that follows."""
        with self._lock:
            held, self._held = self._held, []
        return held

    def _give_back(self, held):
        with self._lock:
            self._held = held + self._held

    def wait_captured(self):
        held, marked = self._take_held(), self._marked
        try:
            _check(library().ckptfs_wait_captured(self._live()))
        except BaseException:
            self._give_back(held)
            raise
        self._drop_marked(marked)

    def stream_wait(self, stream):
        held = self._take_held()
        try:
            _check(library().ckptfs_stream_wait(self._live(), stream or None))
        except BaseException:
            self._give_back(held)
            raise
        with self._lock:
            self._marked = self._marked + held
        self._release_done()

    def _release_done(self):
        """Drop the storages a stream_wait covered once their copies are done.
        Only those moved to _marked after their stream_wait's mark: the
        driver's answer is about that mark (or a later one)."""
        if not self._marked or not self._s:
            return
        marked = self._marked
        if library().ckptfs_stream_wait_done(self._s) == 1:
            self._drop_marked(marked)

    def _drop_marked(self, done):
        """Release `done` (a snapshot of _marked); what came meanwhile stays."""
        with self._lock:
            if self._marked is done:
                self._marked = []
            else:
                ids = {id(x) for x in done}
                self._marked = [x for x in self._marked if id(x) not in ids]

    def file_close(self, fd, patches=(), rename_from=None, rename_to=None):
        """Hand fd over; patches: (offset, bytes) or (offset, "crc", capture).
        Afterwards fd is the library's (or closed), even if this raises."""
        try:
            s = self._live()
            arr = (_Patch * max(1, len(patches)))()
            keep = []
            for k, p in enumerate(patches):
                if len(p) == 3:
                    arr[k] = _Patch(p[0], PATCH_CRC32_LE, p[2], None, 0)
                else:
                    buf = ctypes.create_string_buffer(bytes(p[1]), len(p[1]))
                    keep.append(buf)
                    arr[k] = _Patch(p[0], PATCH_BYTES, -1, ctypes.cast(buf, ctypes.c_void_p),
                                    len(p[1]))
        except BaseException:
            os.close(fd)  # never handed over: a bound file is dropped with the session
            raise
        return _check(library().ckptfs_file_close(
            s, fd, arr, len(patches),
            os.fsencode(rename_from) if rename_from else None,
            os.fsencode(rename_to) if rename_to else None))

    def wait_files(self):
        _check(library().ckptfs_wait_files(self._live()))

    def stats(self):
        st = _Stats()
        _check(library().ckptfs_session_stats(self._live(), ctypes.byref(st)))
        out = {name: getattr(st, name) for name, _ in _Stats._fields_}
        out["driver"] = st.driver.decode() if st.driver else "none"
        return out

    def close(self):
        if self._s and self.pid == os.getpid():
            s, self._s = self._s, None
            _check(library().ckptfs_session_close(s))
            self._held, self._marked = [], []


# ---- one session per mount and process -------------------------------------

_sessions = {}
_sessions_lock = threading.Lock()
_unavailable = {}


def mount_root(path):
    """The mount point holding path (its nearest existing ancestor's)."""
    p = os.path.abspath(path)
    while not os.path.exists(p):
        p = os.path.dirname(p)
    while not os.path.ismount(p):
        p = os.path.dirname(p)
    return p


def session_for(path, create=True):
    """This process's Session for the mount holding path, or None where that
    mount offers none (not ckptfs, sessions=off, no library).  The reason is
    kept in unavailable_reason(path)."""
    root = mount_root(path)
    with _sessions_lock:
        s = _sessions.get(root)
        if s is not None and s.pid == os.getpid() and s._s:
            return s
        if root in _unavailable and _unavailable[root][0] == os.getpid():
            return None
        if not create:
            return None
        try:
            s = Session(root)  # arena size: $CKPTFS_ARENA_SIZE, or the library's default
        except CkptfsError as e:
            _unavailable[root] = (os.getpid(), e)
            return None
        _sessions[root] = s
        return s


def unavailable_reason(path):
    entry = _unavailable.get(mount_root(path))
    return entry[1] if entry else None


def sessions():
    """This process's open sessions."""
    pid = os.getpid()
    with _sessions_lock:
        return [s for s in _sessions.values() if s.pid == pid and s._s]


def wait(files=False):
    """Block until every tensor captured so far may change (copies done).
    files=True: also until every saved file is closed in the mount, in the
    order saved — do that before writing a marker (e.g. `latest`) that must
    follow the checkpoint on the backend."""
    for s in sessions():
        s.wait_captured()
        if files:
            s.wait_files()


def stream_wait(stream):
    """Make `stream` (a CUstream handle, an int) wait for every capture so far."""
    for s in sessions():
        s.stream_wait(stream)


def commit(path=None):
    """wait(files=True), then wait until the backend holds everything done so
    far through the mount holding `path` (every mount with a session if None)."""
    wait(files=True)
    roots = [mount_root(path)] if path else [s.path for s in sessions()]
    for root in roots:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)  # ckptfs: returns once everything before it is durable
        finally:
            os.close(fd)


def close_all():
    """Finish and close every session (also run at interpreter exit)."""
    with _sessions_lock:
        items = list(_sessions.items())
        _sessions.clear()
    first = None
    for _, s in items:
        try:
            s.close()
        except CkptfsError as e:
            first = first or e
    if first:
        raise first
