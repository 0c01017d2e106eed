# lib.sh — what the deployment tests share (bash, sourced).
#
# These tests exercise ckptfs the way an administrator runs it: mount(8),
# fstab, the umount helper, Slurm, packages.  mount(8) resets PATH and looks
# for helpers only in /sbin, so a test must see the daemon and the helpers
# there.  Rather than install into the machine, dt_enter_namespace re-runs
# the test in a private mount namespace (unshare -m) in which an overlay
# puts links to the build's binaries and the source tree's scripts on top
# of /usr/sbin, and a tmpfs hides /run/mount (libmount's utab).  Every mount
# a test makes lives and dies in that namespace; dt_cleanup stops the
# daemons the test started (found by their command line, which names the
# scratch directory).
#
# Tests exit 0 pass, 1 fail, 77 skip (dt_skip: only where the machine
# cannot run the test at all — not root, no FUSE, no namespaces).
# CKPTFS_BIN, CKPTFS_BUILD_DIR and CKPTFS_SOURCE_DIR come from ctest.

# shellcheck shell=bash disable=SC2034  # DT_* variables are for the tests
set -u
: "${CKPTFS_SOURCE_DIR:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
: "${CKPTFS_BUILD_DIR:=$CKPTFS_SOURCE_DIR/build}"
: "${CKPTFS_BIN:=$CKPTFS_BUILD_DIR/fs/ckptfs}"
CKPTFS_PROG=${CKPTFS_PROG:-$(basename "$0" .sh)}
# shellcheck source=../../packaging/ckptfs-lib.sh
. "$CKPTFS_SOURCE_DIR/packaging/ckptfs-lib.sh"

DT_NAME=$(basename "$0" .sh)
DT_SCRATCH=
DT_USER=ckptfs-deploy-test
DT_MADE_USER=0

dt_skip() {
	echo "SKIP $DT_NAME: $*" >&2
	exit 77
}

dt_fail() {
	echo "FAIL $DT_NAME: $*" >&2
	local f
	for f in "${DT_SCRATCH:-/nonexistent}"/*.log; do
		[ -f "$f" ] && { echo "--- $f" >&2; tail -n 40 "$f" >&2; }
	done
	exit 1
}

dt_note() {
	echo "$DT_NAME: $*"
}

# dt_check WHAT COMMAND...: fail with WHAT unless COMMAND succeeds.
dt_check() {
	local what=$1
	shift
	"$@" || dt_fail "$what (command: $*)"
}

# dt_assert_eq EXPECTED ACTUAL WHAT
dt_assert_eq() {
	[ "$1" = "$2" ] || dt_fail "$3: expected '$1', got '$2'"
}

# dt_assert_match PATTERN TEXT WHAT: TEXT contains the extended regex.
dt_assert_match() {
	printf '%s\n' "$2" | grep -Eq -- "$1" || dt_fail "$3: no match for /$1/ in: $2"
}

dt_require_root() {
	[ "$(id -u)" -eq 0 ] || dt_skip "needs root (mounts, mount helpers, users)"
}

dt_require_fuse() {
	dt_require_root
	[ -c /dev/fuse ] || dt_skip "no /dev/fuse"
	command -v fusermount3 >/dev/null && command -v mount.fuse3 >/dev/null ||
		dt_skip "fuse3 (fusermount3, mount.fuse3) not installed"
	[ -x "$CKPTFS_BIN" ] || dt_fail "daemon '$CKPTFS_BIN' not built"
}

# dt_enter_namespace "$@": re-run this test in a private mount namespace with
# the build's ckptfs and the source's helpers overlaid on /usr/sbin.
dt_enter_namespace() {
	if [ -z "${DT_IN_NAMESPACE:-}" ]; then
		dt_require_fuse
		unshare -m --propagation private true 2>/dev/null ||
			dt_skip "cannot create a mount namespace (unshare -m)"
		DT_IN_NAMESPACE=1 exec unshare -m --propagation private "$BASH" "$0" "$@"
	fi
	dt_scratch
	local sbin=$DT_SCRATCH/sbin f
	mkdir -p "$sbin"
	ln -s "$CKPTFS_BIN" "$sbin/ckptfs"
	for f in ckptfs-ctl ckptfs-stat; do
		[ -x "$CKPTFS_BUILD_DIR/fs/$f" ] && ln -s "$CKPTFS_BUILD_DIR/fs/$f" "$sbin/$f"
	done
	for f in mount.ckptfs umount.fuse.ckptfs; do
		ln -s "$CKPTFS_SOURCE_DIR/packaging/$f" "$sbin/$f"
	done
	mount -t overlay overlay -o "lowerdir=$sbin:/usr/sbin" /usr/sbin 2>/dev/null ||
		dt_skip "overlayfs unavailable: cannot put the helpers into /usr/sbin"
	mount -t tmpfs tmpfs /run/mount 2>/dev/null || mkdir -p /run/mount
	PATH=/usr/sbin:$PATH
}

# dt_scratch: a scratch directory, removed (daemons stopped) at exit.
dt_scratch() {
	[ -n "$DT_SCRATCH" ] && return
	DT_SCRATCH=$(mktemp -d "/tmp/ckptfs-$DT_NAME.XXXXXX")
	chmod 755 "$DT_SCRATCH"
	trap dt_cleanup EXIT
}

# dt_daemons_in DIR: pids of ckptfs daemons whose command line names DIR.
dt_daemons_in() {
	local p
	for p in $(pgrep -x ckptfs); do
		tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | grep -q "^$1/" && echo "$p"
	done
}

# DT_EXIT_HOOK: a command a test wants run first at exit (stop its daemons).
DT_EXIT_HOOK=

dt_cleanup() {
	local rc=$? m pids
	[ -n "$DT_EXIT_HOOK" ] && $DT_EXIT_HOOK
	[ -n "$DT_SCRATCH" ] || exit $rc
	for m in $(findmnt -rn -o TARGET | grep "^$DT_SCRATCH/" | sort -r); do
		umount -i -l "$m" 2>/dev/null
	done
	pids=$(dt_daemons_in "$DT_SCRATCH")
	if [ -n "$pids" ]; then
		kill $pids 2>/dev/null
		ckptfs_wait_gone $(($(date +%s) + 10)) $pids >/dev/null || kill -9 $pids 2>/dev/null
	fi
	[ "${DT_KEEP:-0}" = 1 ] || rm -rf "$DT_SCRATCH"
	[ $DT_MADE_USER -eq 1 ] && userdel "$DT_USER" 2>/dev/null
	exit $rc
}

# dt_test_user: make sure the unprivileged test user exists (removed at exit
# if this test made it); sets DT_UID and DT_GID.
dt_test_user() {
	if ! id -u "$DT_USER" >/dev/null 2>&1; then
		useradd -M -N -g nogroup -s /bin/sh "$DT_USER" 2>/dev/null ||
			dt_skip "cannot create the test user $DT_USER"
		DT_MADE_USER=1
	fi
	DT_UID=$(id -u "$DT_USER")
	DT_GID=$(id -g "$DT_USER")
}

# dt_make_files DIR N KIB: N reference files of KIB KiB each (f0 ... f<N-1>).
dt_make_files() {
	local i
	mkdir -p "$1"
	for ((i = 0; i < $2; i++)); do
		head -c $(($3 * 1024)) /dev/urandom >"$1/f$i"
	done
}

# dt_assert_same_files REF DIR WHAT: every file of REF is in DIR, identical.
dt_assert_same_files() {
	local f
	for f in "$1"/*; do
		cmp -s "$f" "$2/$(basename "$f")" ||
			dt_fail "$3: $2/$(basename "$f") is missing or differs from the reference"
	done
}

# dt_daemon_for MNT: the pid of the daemon serving MNT; fails if none.
dt_daemon_for() {
	local pids
	pids=$(ckptfs_daemon_pids "$1")
	[ -n "$pids" ] || dt_fail "no ckptfs daemon found for $1"
	echo "$pids"
}

# dt_mount_cycle WHAT BACKEND MNT REF MOUNT-COMMAND...: run the mount
# command; check MNT is a fuse.ckptfs mount; call the test's dt_cycle_check
# PID if it defines one; copy REF's files in; `umount MNT`; then every file
# must be on BACKEND, whole, and the daemon gone.  Empties BACKEND after.
dt_mount_cycle() {
	local what=$1 b=$2 m=$3 ref=$4 pid err
	shift 4
	err=$("$@" 2>&1) || dt_fail "$what: mount failed: $err"
	dt_assert_eq fuse.ckptfs "$(ckptfs_mounted "$m")" "$what: type of the mount at $m"
	pid=$(dt_daemon_for "$m")
	if declare -F dt_cycle_check >/dev/null; then
		dt_cycle_check "$what" "$pid"
	fi
	cp "$ref"/* "$m/"
	err=$(umount "$m" 2>&1) || dt_fail "$what: umount failed: $err"
	dt_assert_same_files "$ref" "$b" "$what: backend when umount returns"
	dt_assert_unmounted_and_gone "$m" "$pid" "$what: when umount returns"
	rm -rf "${b:?}"/*
	dt_note "$what: ok"
}

# dt_assert_unmounted_and_gone MNT PIDS WHAT: MNT is no mount point and
# none of PIDS runs any more.
dt_assert_unmounted_and_gone() {
	local p
	[ -z "$(ckptfs_mounted "$1")" ] || dt_fail "$3: $1 is still mounted"
	for p in $2; do
		ckptfs_pid_alive "$p" && dt_fail "$3: daemon $p still running"
	done
	return 0
}
