"""stall.py — what saving a checkpoint costs the training loop: torch.save
to tmpfs against ckptfs.torch.save into a ckptfs mount, side by side in each
round (interleaved), with the same state of `--gib` GiB in 16 tensors.

  torch      torch.save(state, TMPFS/x.pt): the trainer waits for all of it
             (device-to-host copies into pageable memory, serialization).
  return     ckptfs.torch.save(...) returning: the trainer waits for this.
  wait       ckptfs.wait() right after: copies done, the tensors may change
             (the worst case: no compute to hide the copy behind).
  hidden     ckptfs.wait() after --compute seconds of work (GPU matmuls on
             CUDA, sleep on CPU): the stall DataStates-style overlap leaves.
  files      ckptfs.wait(files=True): the files closed in the mount.
  durable    ckptfs.commit(): on the backend (not a stall; for reference).

Ratios are per round (ckptfs / torch), the median over rounds is printed.
Device: --device cuda (a GPU) or cpu (the mock driver: CPU tensors stand in).
Prints "key: value" lines; exits 77 if --device cuda and none is usable.
"""
import argparse
import os
import shutil
import statistics
import sys
import time

import torch


def state_of(gib, device):
    n = 16
    per = (gib << 30) // n // 4
    return {"t%02d" % i: torch.full((per,), float(i), device=device) for i in range(n)}


def compute(seconds, device):
    if seconds <= 0:
        return
    if device == "cuda":
        a = torch.randn(8192, 8192, device="cuda")
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
    else:
        time.sleep(seconds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mount", required=True)
    ap.add_argument("--tmpfs", default="/dev/shm")
    ap.add_argument("--gib", type=int, default=2)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compute", type=float, default=1.0)
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("skip: no CUDA device for PyTorch")
        return 77
    import ckptfs
    import ckptfs.torch

    state = state_of(a.gib, a.device)
    if a.device == "cuda":
        torch.cuda.synchronize()
    rows = []
    tmp = os.path.join(a.tmpfs, "ckptfs-stall-%d" % os.getpid())
    os.makedirs(tmp, exist_ok=True)
    try:
        ckptfs.torch.save({"warm": torch.ones(4, device=a.device)}, os.path.join(a.mount, "warm.pt"),
                          strict=True)  # the session opens (arena pinned) outside the rounds
        ckptfs.commit()
        for r in range(a.rounds):
            row = {}
            for which in (("torch", "ckptfs") if r % 2 == 0 else ("ckptfs", "torch")):
                if which == "torch":
                    t0 = time.monotonic()
                    torch.save(state, os.path.join(tmp, "x.pt"))
                    row["torch"] = time.monotonic() - t0
                    os.unlink(os.path.join(tmp, "x.pt"))
                    continue
                path = os.path.join(a.mount, "stall%d.pt" % r)
                t0 = time.monotonic()
                ckptfs.torch.save(state, path, strict=True)
                row["return"] = time.monotonic() - t0
                t1 = time.monotonic()
                ckptfs.wait()
                row["wait"] = row["return"] + time.monotonic() - t1
                t1 = time.monotonic()
                ckptfs.wait(files=True)
                row["files"] = row["wait"] + time.monotonic() - t1
                t1 = time.monotonic()
                ckptfs.commit()
                row["durable"] = row["files"] + time.monotonic() - t1
                # again, now with compute to hide the copies behind
                path2 = os.path.join(a.mount, "stall%d-hidden.pt" % r)
                t0 = time.monotonic()
                ckptfs.torch.save(state, path2, strict=True)
                ret = time.monotonic() - t0
                compute(a.compute, a.device)
                t1 = time.monotonic()
                ckptfs.wait()
                row["hidden"] = ret + time.monotonic() - t1
                ckptfs.commit()
                os.unlink(path)
                os.unlink(path2)
                ckptfs.commit()
            rows.append(row)
            print("round %d: %s" % (r, ", ".join("%s %.3f s" % kv for kv in sorted(row.items()))),
                  file=sys.stderr)
        st = ckptfs.sessions()[0].stats()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print("device: %s\ndriver: %s\nstate_gib: %d\nrounds: %d" % (a.device, st["driver"], a.gib, a.rounds))
    for k in ("torch", "return", "wait", "hidden", "files", "durable"):
        print("%s_s: %.3f" % (k, med[k]))
    for k in ("return", "wait", "hidden", "files"):
        print("ratio_%s_vs_torch: %.4f" % (k, statistics.median(r[k] / r["torch"] for r in rows)))
    print("arena_waits: %d\nadopt_latency_avg_us: %.1f" % (st["arena_waits"], st["adopt_latency_avg_s"] * 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
