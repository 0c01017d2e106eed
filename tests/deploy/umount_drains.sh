#!/usr/bin/env bash
# umount_drains.sh — what unmounting guarantees, over a slow backend
# (every fdatasync delayed by CKPTFS_FAULT) so that draining takes seconds:
#  1. `umount` through umount.fuse.ckptfs (the mount carries _netdev, so
#     libmount records it and calls the helper) returns only when every
#     file is on the backend and the daemon has exited — with ckptfs-ctl
#     drain, and with the fsync fallback (CKPTFS_CTL empty); so does
#     `umount -c`, as systemd runs it, for a mount without such options;
#  2. `umount -i` (no helper) returns at once while the daemon is still
#     draining — the caveat the operations guide documents — and the
#     daemon still drains everything before it exits;
#     and the helper given -N (a mount in another mount namespace) drains
#     it there;
#  3. with a backend that fails every publish, the helper unmounts anyway,
#     exits 2 saying the drain failed, and the daemon (drain_timeout=1)
#     leaves the data in its rescue directory;
#  4. a stopped daemon (SIGSTOP): the helper, with CKPTFS_DRAIN_TIMEOUT=3,
#     still returns (exit 2) with the mount detached — its own umount no
#     longer looks at the mount point, which hung until the daemon ran
#     again — and once the daemon runs again it drains everything; a bad
#     option, or a timeout too large to count with, is refused (exit 1)
#     before any drain.
. "$(dirname "$0")/lib.sh"
dt_enter_namespace "$@"

b=$DT_SCRATCH/backend m=$DT_SCRATCH/mnt ref=$DT_SCRATCH/ref
mkdir -p "$b" "$m"
nfiles=10
dt_make_files "$ref" $nfiles 256
slow='op=fdatasync,delay_ms=300'	# 10 files: seconds of flushing

# mount_slow FAULT OPTIONS: mount with the fault rule; prints the pid.
mount_slow() {
	local err
	err=$(CKPTFS_FAULT=$1 mount -t fuse.ckptfs -o "$2" "$b" "$m" 2>&1) || dt_fail "mount failed: $err"
	dt_daemon_for "$m"
}

# backend_count: how many of the reference files are on the backend.
backend_count() {
	local n=0 f
	for f in "$ref"/*; do
		[ -f "$b/$(basename "$f")" ] && n=$((n + 1))
	done
	echo $n
}

# how: CTL OPTIONS UMOUNT-FLAGS
for how in "ckptfs-ctl|cache_size=64M,_netdev|" "|cache_size=64M,_netdev|" "ckptfs-ctl|cache_size=64M|-c"; do
	IFS='|' read -r ctl opts flags <<<"$how"
	what="umount${flags:+ $flags} via the helper (-o $opts, drain with ${ctl:-fsync of the mount root})"
	[ -n "$ctl" ] && ! command -v ckptfs-ctl >/dev/null && continue
	pid=$(mount_slow "$slow" "$opts")
	cp "$ref"/* "$m/"
	dt_note "$what: $(backend_count) of $nfiles files on the backend before umount"
	err=$(CKPTFS_CTL=$ctl umount $flags "$m" 2>&1) || dt_fail "$what: umount failed: $err"
	dt_assert_same_files "$ref" "$b" "$what: backend when umount returns"
	dt_assert_unmounted_and_gone "$m" "$pid" "$what: when umount returns"
	rm -f "$b"/f*
	dt_note "$what: ok"
done

what="the helper with -N (the mount in another mount namespace)"
unshare -m --propagation private sleep 600 &
holder=$!
sleep 0.3
inns() { nsenter --mount="/proc/$holder/ns/mnt" -- "$@"; }
err=$(CKPTFS_FAULT=$slow inns mount -t fuse.ckptfs -o cache_size=64M "$b" "$m" 2>&1) ||
	dt_fail "$what: mount in the namespace failed: $err"
inns sh -c "cp '$ref'/* '$m/'" || dt_fail "$what: writing in the namespace failed"
err=$(umount.fuse.ckptfs "$m" -N "$holder" 2>&1) || dt_fail "$what: the helper failed: $err"
dt_assert_same_files "$ref" "$b" "$what: backend when umount returns"
[ -z "$(inns findmnt -n --mountpoint "$m")" ] || dt_fail "$what: still mounted in the namespace"
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null
rm -f "$b"/f*
dt_note "$what: ok"

what="umount -i (no helper)"
pid=$(mount_slow "$slow" cache_size=64M,_netdev)
cp "$ref"/* "$m/"
umount -i "$m" || dt_fail "$what: umount -i failed"
ckptfs_pid_alive "$pid" ||
	dt_fail "$what: the daemon had already exited; this test needs a backend slow enough to show the early return"
dt_note "$what: returned with $(backend_count) of $nfiles files on the backend, daemon still draining"
ckptfs_wait_gone $(($(date +%s) + 90)) "$pid" >/dev/null || dt_fail "$what: daemon still running after 90 s"
dt_assert_same_files "$ref" "$b" "$what: backend once the daemon has exited"
rm -f "$b"/f*
dt_note "$what: ok"

what="umount via the helper, failing backend"
rescue=$DT_SCRATCH/rescue
pid=$(mount_slow 'op=rename,err=EIO' "cache_size=64M,_netdev,drain_timeout=1,rescue_dir=$rescue")
cp "$ref/f0" "$m/f0"
err=$(CKPTFS_DRAIN_TIMEOUT=60 umount "$m" 2>&1)
rc=$?
dt_assert_eq 2 "$rc" "$what: exit status (message: $err)"
dt_assert_match "drain of $m failed" "$err" "$what: message"
dt_assert_unmounted_and_gone "$m" "$pid" "$what: when umount returns"
[ ! -e "$b/f0" ] || dt_fail "$what: f0 reached a backend that refuses every rename"
saved=$(find "$rescue" -type f -name f0 2>/dev/null | head -n 1)
[ -n "$saved" ] || dt_fail "$what: f0 is not in the rescue directory $rescue"
cmp -s "$ref/f0" "$saved" || dt_fail "$what: rescued copy $saved differs from what was written"
dt_note "$what: ok (rescued as $saved)"

what="the helper's bad input"
pid=$(mount_slow "$slow" cache_size=64M)
cp "$ref"/* "$m/"
err=$(umount.fuse.ckptfs "$m" -x 2>&1)
dt_assert_eq 1 "$?" "$what: an unknown option's exit status (message: $err)"
dt_assert_match "unknown option '-x'" "$err" "$what: message"
err=$(CKPTFS_DRAIN_TIMEOUT=99999999999999999999 umount.fuse.ckptfs "$m" 2>&1)
dt_assert_eq 1 "$?" "$what: a huge CKPTFS_DRAIN_TIMEOUT's exit status (message: $err)"
[ "$(ckptfs_mounted "$m")" = fuse.ckptfs ] || dt_fail "$what: the mount is gone after a refused call"
dt_note "$what: ok"

what="the helper over a stopped daemon"
kill -STOP "$pid"
t0=$(date +%s)
err=$(CKPTFS_DRAIN_TIMEOUT=3 timeout 60 umount.fuse.ckptfs "$m" 2>&1)
rc=$?
took=$(($(date +%s) - t0))
kill -CONT "$pid"
dt_assert_eq 2 "$rc" "$what: exit status after ${took} s (message: $err)"
[ "$took" -lt 40 ] || dt_fail "$what: took $took s"
[ -z "$(findmnt -n --mountpoint "$m")" ] || dt_fail "$what: still mounted"
ckptfs_wait_gone $(($(date +%s) + 60)) "$pid" >/dev/null || dt_fail "$what: daemon still running 60 s after it went on"
dt_assert_same_files "$ref" "$b" "$what: backend once the daemon went on and exited"
dt_note "$what: ok (returned in $took s)"
exit 0
