"""ckptfs — GPU-aware checkpointing into a ckptfs mount (docs/gpu.md).

    import ckptfs, ckptfs.torch
    ckptfs.torch.save(state, "/ckpt/step100.pt")  # returns while tensors are copied
    ckptfs.wait()          # before the tensors change (the optimizer step)
    ckptfs.wait(files=True)  # the files are closed, in order: write markers now
    ckptfs.commit()        # ... and durable on the backend

The package is pure Python over libckptfs (ctypes); ckptfs.torch needs
PyTorch, ckptfs.deepspeed offers a DeepSpeed checkpoint engine.  Sessions are
opened per mount and process on first use and finished at interpreter exit.
"""
import atexit

from ._lib import (CkptfsError, Session, close_all, commit, library, mock_driver, mount_root,
                   session_for, sessions, stream_wait, unavailable_reason, wait)

__all__ = ["CkptfsError", "Session", "close_all", "commit", "library", "mock_driver",
           "mount_root", "session_for", "sessions", "stream_wait", "unavailable_reason", "wait"]


def _at_exit():
    try:
        close_all()
    except CkptfsError as e:
        import sys
        print("ckptfs: at exit: %s" % e, file=sys.stderr)


atexit.register(_at_exit)
