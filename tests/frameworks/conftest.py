"""conftest.py — pytest fixtures for the framework fidelity tests.

  scratch   a fresh directory (backend/, mnt/, daemon.log) under $TMPDIR,
            removed at the end unless something is still mounted in it.
  ckptfs    a started Mount (fwmount.py) over scratch, -o cache_size=512M by
            default; a test parametrizes it indirectly with
            {"opts": ..., "env": {...}} for other options or a fault rule.
            At teardown a test that passed must also unmount cleanly (the
            daemon drains and exits 0, else the test errors); after a
            failure the daemon log is printed and the mount taken down.

Tests skip where /dev/fuse or fusermount3 is missing.  tests/frameworks/
run_pytest.sh turns "everything skipped" into ctest's exit 77.
"""
import os
import shutil
import tempfile

import pytest

from fwmount import Mount, daemon_bin, mounted_fstype


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def _require_mountable():
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        pytest.skip("/dev/fuse is not available")
    if not shutil.which("fusermount3"):
        pytest.skip("fusermount3 is not installed")
    if not os.access(daemon_bin(), os.X_OK):
        if os.environ.get("CKPTFS_BIN"):
            pytest.fail("CKPTFS_BIN=%s is not executable" % daemon_bin())
        pytest.skip("no daemon at %s: build first or set CKPTFS_BIN" % daemon_bin())


@pytest.fixture
def scratch():
    _require_mountable()
    root = tempfile.mkdtemp(prefix="ckptfs-fw-", dir=os.environ.get("TMPDIR") or "/tmp")
    yield root
    if mounted_fstype(os.path.join(root, "mnt")) is None:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def ckptfs(request, scratch):
    params = getattr(request, "param", None) or {}
    m = Mount(scratch, opts=params.get("opts", "cache_size=512M"), env=params.get("env"))
    m.start()
    yield m
    rep = getattr(request.node, "rep_call", None)
    if rep is None or not rep.failed:
        if m.running:
            m.stop()
        return
    print(m.log_text())
    try:
        if m.running:
            m.stop()
    except AssertionError as e:
        print("teardown after failure: %s" % e)
    finally:
        m.kill()
