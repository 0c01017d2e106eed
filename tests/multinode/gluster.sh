#!/usr/bin/env bash
# gluster.sh — the multi-node tests on a real distributed file system: a
# one-brick GlusterFS volume on loopback, mounted twice with the GlusterFS
# FUSE client (two nodes' views of one parallel file system), and one
# ckptfs daemon per client mount (CKPTFS_MN_BACKENDS, see mn_util.h).
#
# Runs mn_markers (marker ordering and the healthy delay), mn_killed (a
# killed or stopped node holds markers visibly), mn_lost (a node that lost
# files holds later markers until ack-lost), mn_lease (one live daemon
# per node: flock reaches across GlusterFS clients) and mn_visible (what
# one node made durable is visible through the other within 2 x
# attr_timeout plus the GlusterFS client's 1 s entry and attribute cache).
#
# Starts glusterd when none runs (and stops it, by PID, at the end), makes
# the volume, and removes all of it on exit.  Skips (77) without root,
# without glusterfs-server (tests/multinode/setup.sh installs it), or when
# glusterd cannot run here.
set -u
skip() { echo "skip: $*" >&2; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (glusterd, mounts)"
for t in glusterd gluster mount.glusterfs; do
	command -v "$t" >/dev/null 2>&1 || skip "$t is not installed (tests/multinode/setup.sh)"
done
build=${CKPTFS_BUILD_DIR:?CKPTFS_BUILD_DIR is not set}
scratch=$(mktemp -d /var/tmp/ckptfs-gluster.XXXXXX)
vol=ckptfsmn$$
host=$(hostname)
glusterd_pid=
made=0

g() { timeout 60 gluster --mode=script "$@"; }
cleanup() {
	for m in "$scratch/m1" "$scratch/m2"; do
		mountpoint -q "$m" && { umount "$m" 2>/dev/null || umount -l "$m"; }
	done
	if [ $made -eq 1 ]; then
		g volume stop "$vol" force >/dev/null 2>&1
		g volume delete "$vol" >/dev/null 2>&1
	fi
	[ -n "$glusterd_pid" ] && kill "$glusterd_pid" 2>/dev/null
	rm -rf "$scratch"
}
trap cleanup EXIT

if ! g pool list >/dev/null 2>&1; then
	glusterd --pid-file="$scratch/glusterd.pid" >/dev/null 2>&1 || skip "glusterd does not start here"
	for _ in $(seq 100); do
		g pool list >/dev/null 2>&1 && break
		sleep 0.2
	done
	g pool list >/dev/null 2>&1 || skip "glusterd does not answer"
	glusterd_pid=$(cat "$scratch/glusterd.pid" 2>/dev/null)
fi
mkdir -p "$scratch/brick" "$scratch/m1" "$scratch/m2"
g volume create "$vol" "$host:$scratch/brick" force >/dev/null || skip "cannot create a volume"
made=1
g volume start "$vol" >/dev/null || skip "cannot start the volume"
for m in m1 m2; do
	timeout 60 mount -t glusterfs "$host:/$vol" "$scratch/$m" || skip "cannot mount the volume"
done
echo "GlusterFS volume $vol on $scratch/brick, client mounts $scratch/m1 and $scratch/m2" >&2

export CKPTFS_MN_BACKENDS="$scratch/m1:$scratch/m2"
export CKPTFS_MN_CACHE_S=1
rc=0
for t in mn_markers mn_killed mn_lost mn_lease mn_visible; do
	echo "---- $t on GlusterFS" >&2
	"$build/tests/multinode/test_$t" || { echo "FAIL: $t on GlusterFS" >&2; rc=1; }
done
exit $rc
