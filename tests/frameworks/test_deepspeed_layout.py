"""test_deepspeed_layout.py — four ranks save and load DeepSpeed's ZeRO
checkpoint layout through the mount (fwranks.ds_worker), two steps.

In the workers: every shard and the model states load back equal through
the mount, in every rank, right after `latest` names them (files written by
other processes included).  Meanwhile a BackendWatcher polls the backend:
whenever `latest` is there it must name global_step1 or global_step2 exactly
(never empty or torn, although DeepSpeed rewrites it in place), and every
file of the checkpoint it names must already be on the backend, at its
final size.  After `ckptfs-ctl drain`: `latest` on the backend says
global_step2, both checkpoints are complete, load equal to the expected
state, no temporary names are left, and `ckptfs-ctl verify` passes.
"""
import os

import torch

from fwmodel import assert_same
from fwmount import BackendWatcher, assert_whole_files, backend_listing, temp_names
from fwranks import (LATEST, MODEL_STATES, WORLD, ds_files, ds_model_state, ds_optim_name,
                     ds_optim_state, ds_tag, ds_worker, run_ranks)

STEPS = (1, 2)


def check_snapshots(snapshots, final):
    tags = {ds_tag(s).encode(): s for s in STEPS}
    seen_latest = 0
    for latest, listing in snapshots:
        assert_whole_files(listing, final)
        if latest is None:
            continue
        assert latest in tags, "backend `latest` held %r" % latest
        seen_latest += 1
        missing = [f for f in ds_files(tags[latest]) if f not in listing]
        assert not missing, "backend `latest` named %s before %s were there" % (latest, missing)
    return seen_latest


def test_deepspeed_two_steps(ckptfs):
    watcher = BackendWatcher(ckptfs.backend, LATEST)
    watcher.start()
    try:
        run_ranks(ds_worker, ckptfs.mnt, STEPS)
        ckptfs.drain()
    finally:
        snapshots = watcher.finish()

    final = backend_listing(ckptfs.backend)
    assert not temp_names(final), "temporary files left after drain: %s" % temp_names(final)
    with open(ckptfs.bpath(LATEST)) as f:
        assert f.read() == ds_tag(STEPS[-1])
    seen = check_snapshots(snapshots, final)
    print("%d backend snapshots, %d with `latest`" % (len(snapshots), seen))

    for step in STEPS:
        ckdir = ckptfs.bpath(ds_tag(step))
        assert_same(torch.load(os.path.join(ckdir, MODEL_STATES)), ds_model_state(WORLD, step),
                    "backend %s/%s" % (ds_tag(step), MODEL_STATES))
        for rank in range(WORLD):
            assert_same(torch.load(os.path.join(ckdir, ds_optim_name(rank))),
                        ds_optim_state(rank, WORLD, step),
                        "backend %s/%s" % (ds_tag(step), ds_optim_name(rank)))
    ckptfs.verify(expect=[LATEST] + [f for s in STEPS for f in ds_files(s)])
