#!/usr/bin/env bash
# second_mount.sh — a second mount on a mount point that ckptfs already
# serves is refused clearly, whichever way it is attempted (the daemon
# directly, mount -t fuse.ckptfs, mount -t ckptfs): a non-zero status and
# a message that names the mount point and says it is already mounted.
# The first mount keeps working, and nothing is stacked on top of it.
. "$(dirname "$0")/lib.sh"
dt_enter_namespace "$@"

b=$DT_SCRATCH/backend b2=$DT_SCRATCH/backend2 m=$DT_SCRATCH/mnt
mkdir -p "$b" "$b2" "$m"
mount -t fuse.ckptfs -o cache_size=64M "$b" "$m" || dt_fail "first mount failed"
echo first >"$m/marker"

# refused WHAT EXPECTED-STATUS COMMAND...: the command fails with the status
# and says the mount point is already mounted.
refused() {
	local what=$1 want=$2 err rc
	shift 2
	err=$("$@" 2>&1)
	rc=$?
	dt_assert_eq "$want" "$rc" "$what: exit status (message: $err)"
	dt_assert_match "$m.*already mounted" "$err" "$what: message"
	dt_assert_eq 1 "$(findmnt -n -o TARGET --mountpoint "$m" | wc -l)" "$what: mounts on $m"
	dt_note "$what: refused: $err"
}
refused "the daemon directly" 2 "$CKPTFS_BIN" "$b2" "$m" -o cache_size=64M
refused "mount -t fuse.ckptfs" 2 mount -t fuse.ckptfs -o cache_size=64M "$b2" "$m"
refused "mount -t ckptfs" 1 mount -t ckptfs -o cache_size=64M "$b2" "$m"

dt_assert_eq first "$(cat "$m/marker")" "the first mount still serves its files"
umount "$m" || dt_fail "umount of the first mount failed"
dt_assert_eq first "$(cat "$b/marker")" "the first mount's file on its backend"
[ -z "$(ls -A "$b2")" ] || dt_fail "the refused mounts wrote to their backend: $(ls -A "$b2")"
exit 0
