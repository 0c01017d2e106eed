"""fwranks.py — multi-rank checkpoint writers, as the frameworks lay them out.

Each layout is a worker run in WORLD processes (torch.multiprocessing.spawn,
torch.distributed with gloo on 127.0.0.1 and a free port), writing into a
ckptfs mount with nothing but the calls the framework itself makes, then
loading back what it wrote and comparing it with the deterministic expected
state.  The expected-state functions are pure (seeded by step, rank and
name), so the parent process rebuilds them to check the backend.

DeepSpeed (ZeRO-2 layout, per step N):
  every rank   makedirs(global_stepN, exist_ok=True)   (concurrently)
  every rank   torch.save -> global_stepN/zero_pp_rank_K_mp_rank_00_optim_states.pt
  rank 0       torch.save -> global_stepN/mp_rank_00_model_states.pt
  barrier; rank 0 overwrites `latest` in place with "global_stepN"; barrier;
  every rank reads `latest`, loads its shard and the model states.

PyTorch DCP (FileSystemWriter's protocol, reproduced: torch 1.13's module
does not import on this Python):
  every rank   mkdir(parents, exist_ok); writes __K_0.distcp as consecutive
               torch.save records, notes (offset, length) of each, fsyncs it
  all_gather_object of the storage records to every rank
  rank 0       pickles the metadata to .metadata.tmp, fsyncs it, renames it
               to .metadata
  barrier; every rank reads .metadata and torch.loads its records back.

Any mismatch raises in the worker; spawn re-raises it in the test.
"""
import datetime
import io
import os
import pickle
import socket
import zlib

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fwmodel import TinyGPT, assert_same

WORLD = 4


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(worker, *args, world=WORLD):
    """Run worker(rank, world, port, *args) in `world` processes; raise if any fails."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    mp.spawn(worker, args=(world, free_port()) + args, nprocs=world, join=True)


def _init(rank, world, port):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=90))


def _seeded(*key):
    return torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))


# ---- DeepSpeed ------------------------------------------------------------

PARTITION_NUMEL = 1 << 20  # fp32 elements per rank: 4 MiB per tensor, 3 tensors
MODEL_STATES = "mp_rank_00_model_states.pt"
LATEST = "latest"


def ds_tag(step):
    return "global_step%d" % step


def ds_optim_name(rank):
    return "zero_pp_rank_%d_mp_rank_00_optim_states.pt" % rank


def ds_files(step, world=WORLD):
    """Backend-relative paths of one complete DeepSpeed checkpoint."""
    return [os.path.join(ds_tag(step), MODEL_STATES)] + [
        os.path.join(ds_tag(step), ds_optim_name(r)) for r in range(world)]


def ds_optim_state(rank, world, step):
    gen = _seeded("ds-optim", rank, step)
    part = torch.randn(PARTITION_NUMEL, generator=gen)
    return {
        "optimizer_state_dict": {
            "loss_scaler": {"cur_scale": 65536.0 / step, "cur_iter": step},
            "dynamic_loss_scale": True,
            "overflow": False,
            "clip_grad": 1.0,
            "base_optimizer_state": {
                "state": {0: {"step": torch.tensor(float(step)),
                              "exp_avg": torch.randn(PARTITION_NUMEL, generator=gen),
                              "exp_avg_sq": torch.rand(PARTITION_NUMEL, generator=gen)}},
                "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8,
                                  "weight_decay": 0.01, "amsgrad": False, "params": [0]}],
            },
            "single_partition_of_fp32_groups": [part],
            "zero_stage": 2,
            "partition_count": [world],
        },
        "ds_config": {"train_batch_size": 8 * world, "zero_optimization": {"stage": 2}},
        "ds_version": "0.9.0",
    }


def ds_model_state(world, step):
    torch.manual_seed(1000 + step)
    module = TinyGPT().state_dict()
    return {"module": module, "global_steps": step, "global_samples": 8 * world * step,
            "dp_world_size": world, "mp_world_size": 1, "ds_version": "0.9.0",
            "lr_scheduler": {"last_epoch": step}, "skipped_steps": 0}


def ds_worker(rank, world, port, mnt, steps):
    _init(rank, world, port)
    latest = os.path.join(mnt, LATEST)
    for step in steps:
        ckdir = os.path.join(mnt, ds_tag(step))
        os.makedirs(ckdir, exist_ok=True)
        torch.save(ds_optim_state(rank, world, step), os.path.join(ckdir, ds_optim_name(rank)))
        if rank == 0:
            torch.save(ds_model_state(world, step), os.path.join(ckdir, MODEL_STATES))
        dist.barrier()
        if rank == 0:
            with open(latest, "w") as f:
                f.write(ds_tag(step))
        dist.barrier()
        with open(latest) as f:
            tag = f.read()
        assert tag == ds_tag(step), "rank %d read latest %r, expected %r" % (rank, tag, ds_tag(step))
        assert_same(torch.load(os.path.join(mnt, tag, ds_optim_name(rank))),
                    ds_optim_state(rank, world, step), "rank%d:%s" % (rank, ds_optim_name(rank)))
        assert_same(torch.load(os.path.join(mnt, tag, MODEL_STATES)),
                    ds_model_state(world, step), "rank%d:%s" % (rank, MODEL_STATES))
        dist.barrier()  # nobody starts the next step while another still loads
    dist.destroy_process_group()


# ---- DCP --------------------------------------------------------------------

DCP_METADATA = ".metadata"
DCP_TENSORS = ("model.tok.weight", "model.blocks.0.fc1.weight", "optim.exp_avg", "optim.exp_avg_sq")
DCP_ROWS, DCP_COLS = 512, 1024  # rows per rank of each sharded tensor: 2 MiB


def dcp_shard_name(rank):
    return "__%d_0.distcp" % rank


def dcp_files(world=WORLD):
    return [DCP_METADATA] + [dcp_shard_name(r) for r in range(world)]


def dcp_items(rank):
    """The rank's local shards: fqn -> tensor (rank 0 also holds a scalar)."""
    items = {fqn: torch.randn(DCP_ROWS, DCP_COLS, generator=_seeded("dcp", fqn, rank))
             for fqn in DCP_TENSORS}
    if rank == 0:
        items["step"] = torch.tensor(100)
    return items


def dcp_write_shard(path, items):
    """Consecutive torch.save records in one file; fsync; storage records."""
    records = []
    with open(path, "wb") as f:
        for fqn, t in items.items():
            offset = f.tell()
            torch.save(t, f)
            records.append((fqn, os.path.basename(path), offset, f.tell() - offset))
        f.flush()
        os.fsync(f.fileno())
    return records


def dcp_write_metadata(ckdir, gathered):
    """The coordinator's finish(): .metadata.tmp written, fsynced, renamed."""
    storage = {}
    for rank, records in enumerate(gathered):
        for fqn, fname, offset, length in records:
            storage[(fqn, rank)] = (fname, offset, length)
    metadata = {"version": 1, "world_size": len(gathered), "storage_data": storage}
    tmp = os.path.join(ckdir, DCP_METADATA + ".tmp")
    with open(tmp, "wb") as f:
        pickle.dump(metadata, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, os.path.join(ckdir, DCP_METADATA))


def dcp_read(ckdir, rank):
    """Load rank's items back through .metadata: fqn -> tensor."""
    with open(os.path.join(ckdir, DCP_METADATA), "rb") as f:
        metadata = pickle.load(f)
    out = {}
    for (fqn, r), (fname, offset, length) in metadata["storage_data"].items():
        if r != rank:
            continue
        with open(os.path.join(ckdir, fname), "rb") as f:
            f.seek(offset)
            blob = f.read(length)
        assert len(blob) == length, "%s: short read at %d: %d of %d" % (fname, offset, len(blob), length)
        out[fqn] = torch.load(io.BytesIO(blob))
    return out


def dcp_worker(rank, world, port, ckdir):
    _init(rank, world, port)
    os.makedirs(ckdir, exist_ok=True)
    records = dcp_write_shard(os.path.join(ckdir, dcp_shard_name(rank)), dcp_items(rank))
    gathered = [None] * world
    dist.all_gather_object(gathered, records)
    if rank == 0:
        dcp_write_metadata(ckdir, gathered)
    dist.barrier()
    assert_same(dcp_read(ckdir, rank), dcp_items(rank), "rank%d" % rank)
    dist.barrier()
    dist.destroy_process_group()
