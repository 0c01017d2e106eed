"""test_dcp_protocol.py — PyTorch DCP's FileSystemWriter protocol through
the mount (fwranks.dcp_worker: four ranks write __K_0.distcp shards and
fsync them, rank 0 writes .metadata.tmp, fsyncs it and renames it to
.metadata; every rank loads its records back through .metadata).

DCP's commit point is the .metadata rename: a reader that finds .metadata
trusts every shard it lists.  A BackendWatcher polls the backend while the
ranks write; in every snapshot where .metadata exists, all four shards must
be there at their final sizes, and no file is ever seen at any other size.
After drain the backend's records load with torch.load to the expected
tensors, no temporary names are left, and `ckptfs-ctl verify` passes.

Two mounts: the default (fsync=durable, where the ranks' fsyncs already
order the shards before the metadata) and fsync=lazy over a slow publisher
(every backend rename delayed), where only ckptfs's ordering keeps
.metadata from reaching the backend before the shards.
"""
import pytest

from fwmodel import assert_same
from fwmount import BackendWatcher, assert_whole_files, backend_listing, temp_names
from fwranks import DCP_METADATA, WORLD, dcp_files, dcp_items, dcp_read, dcp_worker, run_ranks

CKDIR = "dcp/step_100"
MOUNTS = [
    {"opts": "cache_size=512M"},
    {"opts": "cache_size=512M,fsync=lazy", "env": {"CKPTFS_FAULT": "op=rename,delay_ms=100"}},
]


def check_snapshots(snapshots, final):
    files = ["%s/%s" % (CKDIR, f) for f in dcp_files()]
    committed = 0
    for metadata, listing in snapshots:
        assert_whole_files(listing, final)
        if metadata is None:
            continue
        committed += 1
        missing = [f for f in files if f not in listing]
        assert not missing, "backend had %s before %s" % (DCP_METADATA, missing)
    return committed


@pytest.mark.parametrize("ckptfs", MOUNTS, indirect=True, ids=["durable", "lazy-slow-publish"])
def test_dcp_save_load(ckptfs):
    watcher = BackendWatcher(ckptfs.backend, "%s/%s" % (CKDIR, DCP_METADATA))
    watcher.start()
    try:
        run_ranks(dcp_worker, ckptfs.path(CKDIR))
        ckptfs.drain()
    finally:
        snapshots = watcher.finish()

    final = backend_listing(ckptfs.backend)
    assert not temp_names(final), "temporary files left after drain: %s" % temp_names(final)
    assert sorted(final) == sorted("%s/%s" % (CKDIR, f) for f in dcp_files()), sorted(final)
    committed = check_snapshots(snapshots, final)
    print("%d backend snapshots, %d with %s" % (len(snapshots), committed, DCP_METADATA))
    for rank in range(WORLD):
        assert_same(dcp_read(ckptfs.bpath(CKDIR), rank), dcp_items(rank), "backend rank%d" % rank)
    ckptfs.verify(expect=final)
