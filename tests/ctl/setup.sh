#!/bin/sh
# setup.sh — what the control-interface tests need beyond the build:
# xxhash (xxhsum -H2, an XXH3-128 computed outside ckptfs, to check
# `ckptfs-ctl hash --format 1` against), attr (getfattr/setfattr, for checking by
# hand what the tests check), man-db and groff-base (the man-page test
# renders the pages; without them that part is skipped).  Idempotent: with
# everything installed it only asks dpkg.  Needs root to install (tests/run.sh
# runs it as root); without root it names what is missing and returns 0.
set -eu
missing=$(for p in xxhash attr man-db groff-base; do
	dpkg -s "$p" >/dev/null 2>&1 || printf ' %s' "$p"
done)
[ -n "$missing" ] || exit 0
if [ "$(id -u)" -ne 0 ]; then
	echo "tests/ctl/setup.sh: not root, not installing:$missing" >&2
	exit 0
fi
install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing; }
{ install || { apt-get update -qq && install; }; } >/dev/null ||
	echo "tests/ctl/setup.sh: could not install$missing; xattr checks use libxxhash only" >&2
exit 0
