#!/bin/sh
# run_pytest.sh TEST_FILE [PYTEST_ARGS...] — how ctest runs one pytest file
# of the framework fidelity tests.  Always Debian's /usr/bin/python3 (the
# python3 on PATH may be a build without torch).  Exits 77 (skip) when that
# Python lacks torch or pytest, or /dev/fuse or fusermount3 is missing, and
# when pytest skipped every test it ran (pytest_ctest.py); else pytest's
# status.  Writes no caches or bytecode into the source tree.
set -u
cd "$(dirname "$0")"
py=/usr/bin/python3
skip() {
	echo "skip: $*"
	exit 77
}
[ -c /dev/fuse ] || skip "/dev/fuse is missing"
command -v fusermount3 >/dev/null 2>&1 || skip "fusermount3 is not installed"
[ -x "$py" ] || skip "$py is missing"
"$py" -c 'import torch, pytest' >/dev/null 2>&1 ||
	skip "$py cannot import torch and pytest (tests/frameworks/setup.sh installs them)"
export PYTHONDONTWRITEBYTECODE=1
exec "$py" pytest_ctest.py "$@"
