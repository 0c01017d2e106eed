#!/usr/bin/env bash
# fstab.sh — the fstab path: an entry of type fuse.ckptfs, mounted by
# mount(8) through libfuse's mount.fuse3, with the options mount(8) and
# systemd put into fstab (defaults, noauto, nofail, _netdev, x-systemd.*,
# comment=) accepted; then `mount -t fuse.ckptfs` given on the command line.
# Each time: the mount is type fuse.ckptfs over the backend, files written
# through it are on the backend, whole, when `umount` returns (the umount
# helper drains first), and the daemon is gone by then.
. "$(dirname "$0")/lib.sh"
dt_enter_namespace "$@"

b=$DT_SCRATCH/backend m=$DT_SCRATCH/mnt ref=$DT_SCRATCH/ref
mkdir -p "$b" "$m"
dt_make_files "$ref" 4 1024

dt_cycle_check() {
	dt_assert_eq "$b" "$(findmnt -n -o SOURCE --mountpoint "$m")" "$1: source of the mount"
}

fstab=$DT_SCRATCH/fstab
cat >"$fstab" <<EOF
# a test-only fstab: what an administrator would write, plus what mount(8)
# and systemd add
$b  $m  fuse.ckptfs  defaults,noauto,nofail,_netdev,cache_size=64M,x-systemd.requires-mounts-for=/,x-systemd.mount-timeout=900,comment=test  0 0
EOF
dt_mount_cycle "fstab entry (mount -T)" "$b" "$m" "$ref" mount -T "$fstab" "$m"
dt_mount_cycle "mount -t fuse.ckptfs" "$b" "$m" "$ref" mount -t fuse.ckptfs -o cache_size=64M,_netdev "$b" "$m"

# A bad option in fstab fails the mount, naming the option.
echo "$b  $m  fuse.ckptfs  cache_size=64M,no_such_option  0 0" >"$fstab"
if err=$(mount -T "$fstab" "$m" 2>&1); then
	dt_fail "a bad fstab option was accepted"
fi
dt_assert_match "no_such_option" "$err" "error for a bad fstab option"
[ -z "$(ckptfs_mounted "$m")" ] || dt_fail "mounted despite a bad option"
exit 0
