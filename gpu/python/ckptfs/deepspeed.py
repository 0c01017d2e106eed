"""ckptfs.deepspeed — a DeepSpeed checkpoint engine that saves through
ckptfs.torch.save, so engine.save_checkpoint() returns while the device
tensors are still being copied.

    engine, optimizer, _, _ = deepspeed.initialize(...)
    from ckptfs.deepspeed import CkptfsCheckpointEngine
    engine.checkpoint_engine = CkptfsCheckpointEngine()
    ckptfs.torch.wait_before_step(optimizer)   # or ckptfs.wait() before engine.step()

DeepSpeed calls commit(tag) after it saved a tag's files and before it writes
`latest`; commit waits until those files are closed in the mount, in order,
so `latest` follows them on the backend — it waits for the copies, not for
the backend.  Works without DeepSpeed installed (then it is a plain class
with the same methods).
"""
import os

import torch

from . import _lib
from . import torch as ckptfs_torch

try:
    from deepspeed.runtime.checkpoint_engine.checkpoint_engine import CheckpointEngine as _Base
except Exception:  # DeepSpeed absent, or a layout this does not know
    _Base = object


class CkptfsCheckpointEngine(_Base):
    def __init__(self, config_params=None):
        if _Base is not object:
            super().__init__(config_params)

    def create(self, tag):
        pass

    def makedirs(self, path, exist_ok=False):
        os.makedirs(path, exist_ok=exist_ok)

    def save(self, state_dict, path):
        ckptfs_torch.save(state_dict, path)

    def load(self, path, map_location=None):
        _lib.wait(files=True)  # a file saved by this process may still be landing
        return torch.load(path, map_location=map_location)

    def commit(self, tag):
        _lib.wait(files=True)
        return True
