#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine, in one command (as root):
#
#   packaging/demo.sh
#
# installs the build dependencies, builds ckptfs, mounts it over a default
# backend directory, writes a sample DeepSpeed-style checkpoint (shards, then
# the `latest` marker) from data made beforehand in memory, times those
# writes beside the same writes to tmpfs, shows the cache at work with
# ckptfs-stat, waits until it is durable, verifies the backend against the
# manifest and unmounts.
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
names=(mp_rank_00_model_states.pt zero_pp_rank_{0,1,2,3}_mp_rank_00_optim_states.pt)

# The data is made first, in memory, so that what is timed is the writes
# alone, as a trainer's save writes tensors it already holds.
shm=/dev/shm
[ -d "$shm" ] && [ -w "$shm" ] || shm=$demo
src=$(mktemp -d "$shm/ckptfs-demo-src.XXXXXX")
ref=$(mktemp -d "$shm/ckptfs-demo-tmpfs.XXXXXX")
trap 'rm -rf "$src" "$ref"' EXIT
say "making ${size_mib} MiB of sample data in memory ($src), untimed"
head -c $(( shard_mib * 1048576 )) /dev/urandom > "$src/shard"

# Five writers at once (the model states and four optimizer shards), 1 MiB
# writes from data in memory; prints the seconds until the last close().
write_ckpt() {
  local dir=$1 start end
  start=$EPOCHREALTIME
  for n in "${names[@]}"; do
    dd if="$src/shard" of="$dir/$n" bs=1M status=none &
  done
  wait
  echo "global_step$step" > "$2"
  end=$EPOCHREALTIME
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }'
}

say "writing a ${size_mib} MiB checkpoint: $ckpt (model states + 4 optimizer shards, then 'latest')"
mkdir "$ckpt"
t_ckptfs=$(write_ckpt "$ckpt" "$mnt/latest")
t_tmpfs=$(write_ckpt "$ref" "$ref/latest")
echo "the writers were blocked for $t_ckptfs s: each close() returned once its data was in the cache"
echo "the same writes to tmpfs ($ref, a plain memory copy) took $t_tmpfs s"
rm -rf "$ref"

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
