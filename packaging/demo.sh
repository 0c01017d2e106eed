#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine, in one command (as root):
#
#   packaging/demo.sh
#
# installs the build dependencies, builds ckptfs, mounts it over a default
# backend directory, writes a sample DeepSpeed-style checkpoint (shards, then
# the `latest` marker), shows the cache at work with ckptfs-stat, waits until
# it is durable, verifies the backend against the manifest and unmounts.
#
#   CKPTFS_DEMO_DIR   where the backend and mount point go (/var/tmp/ckptfs-demo)
#   CKPTFS_DEMO_SIZE  checkpoint size in MiB (1024)
set -euo pipefail
cd "$(dirname "$0")/.."

demo=${CKPTFS_DEMO_DIR:-/var/tmp/ckptfs-demo}
size_mib=${CKPTFS_DEMO_SIZE:-1024}
backend=$demo/backend
mnt=$demo/mnt
build=${CKPTFS_BUILD_DIR:-build}

say() { printf '\n== %s\n' "$*"; }

packages=(build-essential cmake pkg-config libfuse3-dev fuse3 liburing-dev libxxhash-dev)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "demo.sh: missing packages: ${missing[*]} (run as root to install them)" >&2
    exit 2
  fi
  say "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

say "building ckptfs in $build/"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
bin=$build/fs

mkdir -p "$backend" "$mnt"
if grep -q " $mnt fuse.ckptfs " /proc/self/mountinfo; then
  "$bin/ckptfs-ctl" drain "$mnt" >/dev/null || true
  fusermount3 -u "$mnt"
  sleep 1
fi

say "mounting $backend on $mnt"
"$bin/ckptfs" "$backend" "$mnt" -o cache_size=$(( size_mib + 512 ))M

step=$(( $(date +%s) % 100000 ))
ckpt=$mnt/global_step$step
shard_mib=$(( size_mib / 5 ))
say "writing a ${size_mib} MiB checkpoint: $ckpt (model states + 4 optimizer shards, then 'latest')"
start=$EPOCHREALTIME
mkdir "$ckpt"
head -c $(( shard_mib * 1048576 )) /dev/urandom > "$ckpt/mp_rank_00_model_states.pt" &
for r in 0 1 2 3; do
  head -c $(( shard_mib * 1048576 )) /dev/urandom > "$ckpt/zero_pp_rank_${r}_mp_rank_00_optim_states.pt" &
done
wait
echo "global_step$step" > "$mnt/latest"
end=$EPOCHREALTIME
awk -v a="$start" -v b="$end" 'BEGIN { printf "the writers were blocked for %.2f s: each close() returned once its data was in the cache\n", b - a }'

say "ckptfs-stat right after the last close()"
"$bin/ckptfs-stat" "$mnt"

say "waiting until everything is durable on the backend (ckptfs-ctl drain)"
"$bin/ckptfs-ctl" drain "$mnt"
"$bin/ckptfs-stat" "$mnt"

say "the backend holds the checkpoint; verifying it against the manifest"
ls -la "$backend" "$backend/global_step$step"
"$bin/ckptfs-ctl" verify --quiet "$backend/global_step$step" "$backend/latest"

say "unmounting (the daemon drains before it exits)"
fusermount3 -u "$mnt"
echo "done: the checkpoint is in $backend/global_step$step"
