"""ckptfs.torch — a drop-in for torch.save whose CUDA tensors are copied
lazily, while training goes on, and whose file loads with plain torch.load.

    import ckptfs, ckptfs.torch
    ckptfs.torch.wait_before_step(optimizer)   # or call ckptfs.wait() yourself
    for step, batch in enumerate(loader):
        loss = model(batch).sum(); loss.backward()
        optimizer.step(); optimizer.zero_grad()
        if step % 100 == 0:
            ckptfs.torch.save({"model": model.state_dict(),
                               "optim": optimizer.state_dict()}, f"/ckpt/step{step}.pt")
    ckptfs.commit()                            # durable on the backend

save() pickles the object exactly as torch.save does (the same persistent
ids, storage keys, locations and record names), lays the zip out up front
(stored entries on 64-byte boundaries, zip64 end records), hands every
storage's bytes to libckptfs as a capture at its final offset, and returns:
device-to-host copies run on the library's own stream after the work
already queued on the current stream.  The headers, the pickle and the
central directory are written once the captures have landed, with each
entry's CRC-32 computed from the captured host bytes, and the file is
closed and renamed from a temporary name (".~NAME.PID.N" beside it) to its
name: it appears complete or not at all, even if the process dies.

Before the tensors change again (the optimizer step) call ckptfs.wait(), or
ckptfs.stream_wait(...) for a GPU-side wait with no CPU stall
(wait_before_step does either for you).  Before writing a marker that must
follow the checkpoint on the backend (a `latest` file), call
ckptfs.wait(files=True); ckptfs.commit() waits for durability.

Where the path is not on a ckptfs mount offering sessions, save() is
torch.save (strict=True raises instead).  CPU tensors are written with
pwrite(2) at once — except under the mock driver (CKPTFS_LIBCUDA pointing at
libckptfs-cudamock.so), where their memory stands in for device memory.
"""
import functools
import io
import itertools
import logging
import os
import pickle
import sys

import torch
from torch.serialization import DEFAULT_PROTOCOL, location_tag, normalize_storage_type

from . import _lib, _zip

log = logging.getLogger("ckptfs")
_names = itertools.count()
load = torch.load


def _storage_parts(obj):
    """(untyped storage, dtype, storage type, numel) as torch's own _save sees them."""
    if isinstance(obj, torch.storage.TypedStorage):
        storage = obj._untyped_storage if hasattr(obj, "_untyped_storage") else obj._storage
        name = (obj._pickle_storage_type() if hasattr(obj, "_pickle_storage_type")
                else obj.pickle_storage_type())
        numel = obj._size() if hasattr(obj, "_size") else obj.size()
        return storage, obj.dtype, getattr(torch, name), numel
    return obj, torch.uint8, normalize_storage_type(type(obj)), obj.nbytes()


def _pickle(obj, pickle_module, protocol):
    """The data.pkl bytes and the storages they name, by key."""
    storages, id_map, dtypes = {}, {}, {}

    def persistent_id(o):
        if not (isinstance(o, torch.storage.TypedStorage) or torch.is_storage(o)):
            return None
        storage, dtype, stype, numel = _storage_parts(o)
        if storage.data_ptr() != 0 and dtypes.setdefault(storage.data_ptr(), dtype) != dtype:
            raise RuntimeError("Cannot save multiple tensors or storages that view the same "
                               "data as different types")
        key = id_map.setdefault(storage._cdata, str(len(id_map)))
        storages[key] = storage
        return ("storage", stype, key, location_tag(storage), numel)

    buf = io.BytesIO()
    pickler = pickle_module.Pickler(buf, protocol=protocol)
    pickler.persistent_id = persistent_id
    pickler.dump(obj)
    return buf.getvalue(), storages


def _stream_of(storage):
    if storage.device.type == "cuda":
        return torch.cuda.current_stream(storage.device).cuda_stream
    return 0


def _coalesce(patches):
    """Merge byte patches that touch, so each region is one write."""
    out = []
    for off, data in sorted(patches, key=lambda p: p[0]):
        if out and out[-1][0] + len(out[-1][1]) == off:
            out[-1] = (out[-1][0], out[-1][1] + data)
        else:
            out.append((off, data))
    return out


def save(obj, f, pickle_module=pickle, pickle_protocol=DEFAULT_PROTOCOL,
         _use_new_zipfile_serialization=True, *, strict=False):
    """torch.save(obj, f) with lazy capture of tensor data (see the module doc)."""
    if not isinstance(f, (str, bytes, os.PathLike)) or not _use_new_zipfile_serialization:
        return torch.save(obj, f, pickle_module, pickle_protocol, _use_new_zipfile_serialization)
    path = os.path.abspath(os.fsdecode(f))
    s = _lib.session_for(os.path.dirname(path))
    if s is None:
        reason = _lib.unavailable_reason(os.path.dirname(path))
        if strict:
            raise reason or _lib.CkptfsError(95, "no ckptfs session for " + path)
        log.debug("ckptfs.torch.save(%s): plain torch.save (%s)", path, reason)
        return torch.save(obj, path, pickle_module, pickle_protocol)

    data_pkl, storages = _pickle(obj, pickle_module, pickle_protocol)
    prefix = os.path.splitext(os.path.basename(path))[0] or "archive"
    entries = [_zip.Entry(prefix + "/data.pkl", len(data_pkl), data_pkl)]
    if int(torch.__version__.split(".")[0]) >= 2:
        entries.append(_zip.Entry(prefix + "/byteorder", len(sys.byteorder), sys.byteorder.encode()))
    captured = []
    for key in sorted(storages):
        st = storages[key]
        n = st.nbytes()
        e = _zip.Entry(prefix + "/data/" + key, n, None if n else b"")
        entries.append(e)
        if n:
            captured.append((e, st))
    entries.append(_zip.Entry(prefix + "/version", 2, b"3\n"))
    total, central, cd_offset = _zip.layout(entries)

    d, base = os.path.split(path)
    tmp = os.path.join(d, ".~%s.%d.%d" % (base, os.getpid(), next(_names)))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        s.bind(fd, total)
        crcs = []
        for e, st in captured:
            cap = s.capture(fd, e.data_offset, st.data_ptr(), e.size, _stream_of(st),
                            crc=True, keep=st)
            crcs += [(e.local_crc_at, "crc", cap), (e.central_crc_at, "crc", cap)]
        regions = [(e.header_offset, e.local + (e.data or b"")) for e in entries]
        regions.append((cd_offset, central))
        # Headers first, then the CRCs that go into them.
        patches = _coalesce(regions) + crcs
    except BaseException:
        try:
            s.file_close(fd)  # the library owns fd once it has seen it: it drops the file
        except _lib.CkptfsError:
            pass
        _unlink(tmp)
        raise
    # fd is the library's from this call on, even if it raises (or we are
    # interrupted after it): handing it over twice would close it twice.
    try:
        s.file_close(fd, patches, tmp, path)
    except BaseException:
        _unlink(tmp)
        raise
    return None


def _unlink(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def wait_before_step(optimizer, stream=False):
    """Run ckptfs.wait() before every optimizer.step() (stream=True: make the
    current CUDA stream wait for the copies instead — no CPU stall).  Returns
    a handle whose remove() undoes it."""
    def before():
        if stream and torch.cuda.is_available():
            _lib.stream_wait(torch.cuda.current_stream().cuda_stream)
        else:
            _lib.wait()

    if hasattr(optimizer, "register_step_pre_hook"):
        return optimizer.register_step_pre_hook(lambda opt, args, kwargs: before())
    orig = optimizer.step

    @functools.wraps(orig)
    def step(*args, **kwargs):
        before()
        return orig(*args, **kwargs)

    optimizer.step = step

    class _Handle:
        def remove(self):
            optimizer.step = orig
    return _Handle()
