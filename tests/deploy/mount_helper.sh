#!/usr/bin/env bash
# mount_helper.sh — the mount.ckptfs path: `mount -t ckptfs BACKEND MNT -o
# OPTS` and an fstab entry of type ckptfs run packaging/mount.ckptfs, which
# starts the daemon; the mount is fuse.ckptfs, data written through it is
# on the backend when umount returns.  Also the helper's own contract:
# mount(8)'s exit codes (1 for a bad option, naming it; 32 for a failed
# mount), -f (fake) mounts nothing, -v shows the command.
. "$(dirname "$0")/lib.sh"
dt_enter_namespace "$@"

b=$DT_SCRATCH/backend m=$DT_SCRATCH/mnt ref=$DT_SCRATCH/ref
mkdir -p "$b" "$m"
dt_make_files "$ref" 3 512

dt_cycle_check() {
	dt_assert_match "cache_size=64M" "$(tr '\0' ' ' <"/proc/$2/cmdline")" "$1: options reach the daemon"
}
dt_mount_cycle "mount -t ckptfs" "$b" "$m" "$ref" mount -t ckptfs -o cache_size=64M,_netdev "$b" "$m"
echo "$b $m ckptfs cache_size=64M,noauto,nofail,x-systemd.automount 0 0" >"$DT_SCRATCH/fstab"
dt_mount_cycle "fstab type ckptfs" "$b" "$m" "$ref" mount -T "$DT_SCRATCH/fstab" "$m"

# mount(8) conventions for the helper's exit status.
err=$(mount -t ckptfs -o cache_size=64M,bogus_opt "$b" "$m" 2>&1)
rc=$?
dt_assert_eq 1 "$rc" "exit status for a bad option"
dt_assert_match "bogus_opt" "$err" "message for a bad option"

err=$(mount -t ckptfs -o cache_size=64M "$DT_SCRATCH/no-such-backend" "$m" 2>&1)
rc=$?
[ "$rc" -ne 0 ] || dt_fail "a missing backend was mounted"
dt_assert_match "no-such-backend" "$err" "message for a missing backend"

err=$(mount -f -v -t ckptfs -o cache_size=64M "$b" "$m" 2>&1) || dt_fail "mount -f failed: $err"
dt_assert_match "ckptfs $b $m -o (rw,)?cache_size=64M" "$err" "mount -v shows the daemon's command"
[ -z "$(ckptfs_mounted "$m")" ] || dt_fail "mount -f (fake) mounted"

err=$(mount.ckptfs "$b" 2>&1)
rc=$?
dt_assert_eq 1 "$rc" "exit status of the helper without a mount point"
dt_assert_match "usage" "$err" "usage message"
exit 0
