"""test_cold_restore.py — a checkpoint loads correctly after a remount, when
the data can only come from the backend.

Save a trained TinyGPT's model and optimizer state through the mount,
unmount (the daemon drains and exits 0), mount a new daemon on the same
backend and torch.load through it.  The new daemon's cache starts empty
(stats: cache_used_bytes 0, read_bytes 0), so the bytes torch.load gets
were read from the backend: through the daemon (its read_bytes grow by at
least the tensor bytes loaded), or, where the kernel offers FUSE
passthrough, by the kernel from the backend file (each file's read-only
open counted in passthrough_opens).  The loaded state equals the in-memory state, and
`ckptfs-ctl verify` passes on the backend.
"""
import os

import torch

from fwmodel import assert_same, tensor_bytes, trained_state

FILES = ("ckpt/step-3/model.pt", "ckpt/step-3/optimizer.pt")


def test_load_after_remount(ckptfs):
    torch.set_num_threads(1)
    model_sd, opt_sd = trained_state(seed=1, steps=3)
    os.makedirs(ckptfs.path("ckpt", "step-3"))
    torch.save(model_sd, ckptfs.path(FILES[0]))
    torch.save(opt_sd, ckptfs.path(FILES[1]))
    ckptfs.stop()
    sizes = [os.path.getsize(ckptfs.bpath(f)) for f in FILES]

    ckptfs.start()
    before = ckptfs.stats()
    assert before["cache_used_bytes"] == 0, "fresh mount has %d bytes cached" % before["cache_used_bytes"]
    for f, size in zip(FILES, sizes):
        assert os.path.getsize(ckptfs.path(f)) == size, "%s: size through the mount" % f
    assert_same(torch.load(ckptfs.path(FILES[0])), model_sd, "model.pt")
    assert_same(torch.load(ckptfs.path(FILES[1])), opt_sd, "optimizer.pt")
    after = ckptfs.stats()
    grew = after["read_bytes"] - before["read_bytes"]
    need = tensor_bytes(model_sd) + tensor_bytes(opt_sd)
    pt = after.get("passthrough_opens", 0) - before.get("passthrough_opens", 0)
    if after.get("passthrough"):
        assert pt >= len(FILES), "passthrough on, but %d passthrough opens for %d files" % (pt, len(FILES))
    else:
        assert grew >= need, "read_bytes grew by %d, the tensors alone are %d bytes" % (grew, need)
    ckptfs.verify(expect=FILES)
