"""conftest.py — the GPU session Python tests reuse the framework tests'
mount fixtures (tests/frameworks/conftest.py: `scratch`, and `ckptfs`, here
named `mount` so the package keeps its name) and their model (fwmodel.py),
loaded from there rather than copied."""
import importlib.util
import os
import sys

_FW = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "frameworks")
sys.path.insert(0, _FW)
_spec = importlib.util.spec_from_file_location("fw_conftest", os.path.join(_FW, "conftest.py"))
_fw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fw)

scratch = _fw.scratch
mount = _fw.ckptfs
pytest_runtest_makereport = _fw.pytest_runtest_makereport
