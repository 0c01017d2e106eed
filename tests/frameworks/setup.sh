#!/bin/sh
# setup.sh — what the framework fidelity tests need beyond the build:
# Debian's PyTorch (CPU) and pytest for /usr/bin/python3.  The python3 on a
# developer's PATH may be another build without torch; these tests always
# use /usr/bin/python3.  Idempotent: when both packages are installed it
# only asks dpkg and returns.  Run as root (tests/run.sh does); without root
# it says what is missing and leaves the tests to skip (exit 77).
set -eu
packages="python3-torch python3-pytest"
missing=""
for p in $packages; do
	dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
	echo "tests/frameworks/setup.sh: missing packages:$missing (run as root to install)" >&2
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends $missing >/dev/null ||
	{ apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing >/dev/null; } ||
	echo "tests/frameworks/setup.sh: could not install$missing; the framework tests will skip" >&2
exit 0
