#!/bin/sh
# ensure-packages.sh [--required] AREA PKG... — install the Debian packages
# a test area needs, if any are missing.  Idempotent: when all are installed
# it only asks dpkg.  Packages' own daemons are not started on install (the
# tests start what they need, with their own configuration).
#
# Without root, or if apt-get fails, it says what is missing; with
# --required it then exits 2, otherwise 0 and the area's tests skip (77).
set -eu
required=0
if [ "${1:-}" = "--required" ]; then
	required=1
	shift
fi
area=$1
shift
missing=""
for p in "$@"; do
	dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
fail() {
	echo "tests/$area: $1:$missing" >&2
	exit $((required ? 2 : 0))
}
[ "$(id -u)" -eq 0 ] || fail "missing packages (run as root to install them)"
export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d
added_policy=0
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	added_policy=1
fi
rc=0
apt-get install -y -qq --no-install-recommends $missing >/dev/null 2>&1 ||
	{ apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing >/dev/null; } ||
	rc=$?
[ $added_policy -eq 1 ] && rm -f "$policy"
[ $rc -eq 0 ] || fail "could not install"
exit 0
