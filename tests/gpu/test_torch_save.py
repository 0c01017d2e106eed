"""test_torch_save.py — ckptfs.torch.save through a real mount, with the mock
driver standing in for the GPU (CPU tensors' data_ptr() are its "device"
pointers), judged by plain torch.load and by the backend:

  - a realistic state dict (TinyGPT's model and Adam states, fwmodel.py)
    saved with ckptfs.torch.save loads with torch.load to exactly what
    torch.save's file loads to, and to the in-memory truth; the zip has the
    same records as torch.save's, and every CRC-32 checks (zipfile); after
    the drain the backend file loads the same and verify says OK;
  - big tensors spanning chunks and shared storages; overwriting a file in
    place (the old version stays until the new one is complete);
  - wait semantics: after ckptfs.wait() changing the tensors does not
    change the file; wait_before_step runs the wait before optimizer.step();
    after stream_wait the captured storages are released once (and only
    once) the driver says their copies are done;
  - the DeepSpeed engine: save, commit, then `latest`, load;
  - a save interrupted once the library has the file hands its descriptor
    over once (a second ckptfs_file_close closed the fd twice);
  - a mount with sessions=off: save falls back to torch.save; strict=True
    raises EOPNOTSUPP.
"""
import copy
import errno
import gc
import os
import time
import weakref
import zipfile

import pytest
import torch

import ckptfs
import ckptfs.torch
from ckptfs.deepspeed import CkptfsCheckpointEngine
from fwmodel import assert_same, make_optimizer, train, trained_model, trained_state


@pytest.fixture(autouse=True)
def fresh_sessions():
    yield
    ckptfs.close_all()  # sessions end before the mount does


def _records(path):
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None, "a CRC-32 does not match in %s" % path
        return [(i.filename, i.file_size, i.compress_type) for i in z.infolist()]


def test_state_dict_loads_like_torch_save(mount, tmp_path):
    torch.set_num_threads(1)
    model_sd, opt_sd = trained_state(seed=1, steps=2)
    state = {"model": model_sd, "optimizer": opt_sd, "step": 2, "note": "ckptfs"}
    truth = copy.deepcopy(state)
    os.makedirs(mount.path("run"))
    ckptfs.torch.save(state, mount.path("run", "ckpt.pt"))
    ref = str(tmp_path / "ckpt.pt")
    torch.save(state, ref)
    ckptfs.wait(files=True)
    sess = ckptfs.sessions()[0]
    st = sess.stats()
    assert st["driver"] == "mock"
    assert st["rejected"] == 0 and st["adopted_bytes"] > 40 << 20

    loaded = torch.load(mount.path("run", "ckpt.pt"))
    assert_same(loaded, torch.load(ref))
    assert_same(loaded, truth)
    assert _records(mount.path("run", "ckpt.pt")) == _records(ref)
    assert os.listdir(mount.path("run")) == ["ckpt.pt"]  # no temporary left
    ckptfs.close_all()
    mount.drain()
    assert_same(torch.load(mount.bpath("run", "ckpt.pt")), truth)
    mount.verify(expect=["run/ckpt.pt"])


def test_big_and_shared_tensors_and_overwrite(mount):
    big = torch.arange(9 * (1 << 20) + 123, dtype=torch.float32)  # 36 MiB: 10 chunks
    state = {"big": big, "view": big[5:1000], "half": torch.ones(7, dtype=torch.float16),
             "empty": torch.zeros(0), "i64": torch.arange(100)}
    path = mount.path("over.pt")
    torch.save({"old": torch.ones(3)}, path)  # a published older version
    ckptfs.torch.save(state, path)
    # Until the new file lands whole, the name holds the old one (a rename replaces it).
    assert set(torch.load(path)) in ({"old"}, set(state))
    ckptfs.wait(files=True)
    loaded = torch.load(path)
    assert_same(loaded, state)
    assert loaded["view"].storage().data_ptr() == loaded["big"].storage().data_ptr()
    state2 = {"big": big * 2}
    ckptfs.torch.save(state2, path)
    ckptfs.wait(files=True)
    assert_same(torch.load(path), state2)
    assert [n for n in os.listdir(mount.mnt) if n.startswith(".~")] == []
    ckptfs.close_all()
    mount.drain()
    assert_same(torch.load(mount.bpath("over.pt")), state2)
    mount.verify(expect=["over.pt"])


def test_wait_and_the_optimizer_hook(mount):
    torch.set_num_threads(1)
    model, opt = trained_model(seed=2, steps=1)
    before = copy.deepcopy(model.state_dict())
    handle = ckptfs.torch.wait_before_step(opt)
    calls = []
    real_wait = ckptfs._lib.wait
    ckptfs.torch._lib.wait = lambda files=False: (calls.append(files), real_wait(files))
    try:
        ckptfs.torch.save(model.state_dict(), mount.path("w.pt"))
        train(model, opt, steps=1, seed=3)  # optimizer.step: the hook waits first
    finally:
        ckptfs.torch._lib.wait = real_wait
        handle.remove()
    assert calls, "wait_before_step did not wait before optimizer.step()"
    ckptfs.wait(files=True)
    assert_same(torch.load(mount.path("w.pt")), before)  # the step came after the copy

    t = torch.full((1 << 20,), 7.0)
    ckptfs.torch.save({"t": t}, mount.path("after.pt"))
    ckptfs.wait()
    t.fill_(-1.0)  # after wait: the file must not see this
    ckptfs.wait(files=True)
    assert torch.equal(torch.load(mount.path("after.pt"))["t"], torch.full((1 << 20,), 7.0))


def test_stream_wait_releases_storages_once_copied(mount, monkeypatch):
    state = {"a": torch.full((1 << 20,), 5.0), "b": torch.arange(1 << 18)}
    truth = copy.deepcopy(state)
    ckptfs.torch.save(state, mount.path("sw.pt"))
    sess = ckptfs.sessions()[0]
    held = [weakref.ref(x) for x in sess._held]
    assert len(held) == 2
    # While the driver says the copies run, the storages stay held.
    monkeypatch.setattr(ckptfs.library(), "ckptfs_stream_wait_done", lambda s: 0)
    ckptfs.stream_wait(0)
    gc.collect()
    assert all(r() is not None for r in held), "released before the copies were done"
    monkeypatch.undo()
    # Once they are done, the next look releases them (no CPU wait anywhere).
    deadline = time.monotonic() + 10
    while any(r() is not None for r in held) and time.monotonic() < deadline:
        time.sleep(0.01)
        ckptfs.stream_wait(0)
        gc.collect()
    assert all(r() is None for r in held), "stream_wait kept the captured storages alive"
    assert sess._held == [] and sess._marked == []
    ckptfs.wait(files=True)
    assert_same(torch.load(mount.path("sw.pt")), truth)


def test_deepspeed_engine(mount):
    torch.set_num_threads(1)
    model, opt = trained_model(seed=4, steps=1)
    truth = copy.deepcopy({"module": model.state_dict(), "optimizer": opt.state_dict()})
    eng = CkptfsCheckpointEngine()
    tag = "global_step1"
    d = mount.path("ds", tag)
    eng.create(tag)
    eng.makedirs(d, exist_ok=True)
    eng.save({"module": model.state_dict()}, os.path.join(d, "mp_rank_00_model_states.pt"))
    eng.save({"optimizer": opt.state_dict()},
             os.path.join(d, "zero_pp_rank_0_mp_rank_00_optim_states.pt"))
    assert eng.commit(tag) is True
    with open(mount.path("ds", "latest"), "w") as f:  # DeepSpeed writes it after commit
        f.write(tag)
    got = {"module": eng.load(os.path.join(d, "mp_rank_00_model_states.pt"))["module"],
           "optimizer": eng.load(os.path.join(d, "zero_pp_rank_0_mp_rank_00_optim_states.pt"))
           ["optimizer"]}
    assert_same(got, truth)
    ckptfs.close_all()
    mount.drain()
    mount.verify(expect=["ds/latest", "ds/%s/mp_rank_00_model_states.pt" % tag])


def test_interrupted_save_hands_fd_over_once(mount, monkeypatch):
    handed = []
    real = ckptfs.Session.file_close

    def interrupted(self, fd, *args, **kw):
        handed.append(fd)
        real(self, fd, *args, **kw)
        raise KeyboardInterrupt  # after the library took fd over

    monkeypatch.setattr(ckptfs.Session, "file_close", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ckptfs.torch.save({"t": torch.ones(1 << 16)}, mount.path("int.pt"))
    monkeypatch.undo()
    assert len(handed) == 1, "fd %d handed to ckptfs_file_close %d times" % (handed[0], len(handed))
    try:
        ckptfs.wait(files=True)  # the rename may meet the temporary name unlinked
    except ckptfs.CkptfsError:
        pass
    assert [n for n in os.listdir(mount.mnt) if n.startswith(".~")] == []


@pytest.mark.parametrize("mount", [{"opts": "cache_size=128M,sessions=off"}], indirect=True)
def test_sessions_off_falls_back(mount):
    state = {"x": torch.arange(1000)}
    ckptfs.torch.save(state, mount.path("plain.pt"))  # plain torch.save: there at once
    assert_same(torch.load(mount.path("plain.pt")), state)
    with pytest.raises(ckptfs.CkptfsError) as e:
        ckptfs.torch.save(state, mount.path("strict.pt"), strict=True)
    assert e.value.errno == errno.EOPNOTSUPP and "sessions=off" in str(e.value)
    assert ckptfs.sessions() == []
