#!/usr/bin/env bash
# bench/gpu/h200.sh — the GPU capture path on a machine with an NVIDIA GPU
# (written for the H200 machine the project is lent now and then), one
# command, as root:
#
#     bench/gpu/h200.sh            # GIB=8 ROUNDS=3 by default
#
# It builds what it needs (the tree, Release, into a scratch directory, and
# gpu_bench.c against it), mounts a scratch ckptfs (16 MiB chunks; a cache
# big enough that the arena holds the whole buffer; backend on /var/tmp),
# and measures in the same run:
#   1. capture throughput against the device's pinned cuMemcpyDtoH
#      bandwidth, same buffer (gpu_bench.c)            goal: ratio >= 0.9
#   2. the trainer-visible stall of saving GIB GiB of device tensors with
#      ckptfs.torch.save against torch.save to tmpfs (stall.py, needs
#      PyTorch with CUDA; skipped with a note otherwise)  goal: ratio <= 0.1
# and prints "key: value" lines, then the ratios against the goals.
# Exit 77 without a GPU (no /dev/nvidiactl or no libcuda.so.1); 2 when the
# build cannot be made (missing -dev packages: named); 1 on failure.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
gib=${GIB:-8}
rounds=${ROUNDS:-3}
skip() { echo "h200.sh: skip: $*"; exit 77; }

[ -e /dev/nvidiactl ] || skip "no NVIDIA device (/dev/nvidiactl)"
ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1' || [ -n "${CKPTFS_LIBCUDA:-}" ] ||
	skip "no CUDA driver library (libcuda.so.1)"
[ "$(id -u)" -eq 0 ] || { echo "h200.sh: run as root (it mounts)" >&2; exit 2; }
for t in cmake cc pkg-config fusermount3; do
	command -v $t >/dev/null || { echo "h200.sh: $t is missing" >&2; exit 2; }
done

work=$(mktemp -d /var/tmp/ckptfs-h200.XXXXXX)
pid=
cleanup() {
	if [ -n "$pid" ]; then
		fusermount3 -u "$work/mnt" 2>/dev/null || { kill -9 "$pid" 2>/dev/null; fusermount3 -uz "$work/mnt"; }
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT INT TERM
. "$here/lib.sh"

echo "# building (log: $work/build.log)"
if ! { cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF &&
       cmake --build "$work/build" -j"$(nproc)"; } >"$work/build.log" 2>&1; then
	grep -E "not found|apt-get|Error" "$work/build.log" | head -n 5 >&2
	echo "h200.sh: the build failed (see above)" >&2
	exit 2
fi
b=$work/build
cc -O2 -o "$work/gpu_bench" -I"$src/gpu/include" "$here/gpu_bench.c" -ldl -L"$b/gpu" -lckptfs \
	-Wl,-rpath,"$b/gpu"

# Memory: the arena holds the buffer, the cache is twice the arena; pinned,
# pageable and torch's copies come on top.  Scale down if the machine is short.
avail=$(( $(awk '/^MemAvailable:/ {print $2}' /proc/meminfo) >> 20 ))
while [ "$gib" -gt 1 ] && [ $(( 6 * gib + 8 )) -gt "$avail" ]; do
	gib=$(( gib / 2 ))
done
[ "$gib" = "${GIB:-8}" ] || echo "h200.sh: only ${avail} GiB available: measuring ${gib} GiB"
arena=$(( gib * 1024 + 512 ))
gb_mount "$b/fs/ckptfs" "$work" "cache_size=$(( 2 * arena + 1024 ))M,chunk_size=16M"
nvidia-smi --query-gpu=name,pci.bus_id,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /' || true

echo "# 1. capture throughput vs pinned cuMemcpyDtoH ($gib GiB, $rounds rounds)"
CKPTFS_ARENA_SIZE=${arena}M "$work/gpu_bench" "$work/mnt" "$gib" "$rounds" | tee "$work/bench1.txt"

echo "# 2. trainer-visible stall: ckptfs.torch.save vs torch.save to tmpfs ($gib GiB of CUDA tensors)"
py=${PYTHON:-python3}
st=0
if "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	CKPTFS_LIBRARY=$b/gpu/libckptfs.so.0 PYTHONPATH=$src/gpu/python PYTHONDONTWRITEBYTECODE=1 \
		CKPTFS_ARENA_SIZE=${arena}M "$py" "$here/stall.py" --mount "$work/mnt" --device cuda \
		--gib "$gib" --rounds "$rounds" --compute 1.0 | tee "$work/bench2.txt" || st=$?
else
	echo "skip: $py has no PyTorch with CUDA" | tee "$work/bench2.txt"
fi

echo "# summary"
ratio() { awk -F': ' -v k="$1" '$1 == k {print $2}' "$2"; }
r1=$(ratio ratio_capture_vs_pinned "$work/bench1.txt")
echo "capture/pinned: ${r1:-?} (goal >= 0.9)"
r2=$(ratio ratio_wait_vs_torch "$work/bench2.txt")
r3=$(ratio ratio_hidden_vs_torch "$work/bench2.txt")
echo "stall/torch.save, waiting at once: ${r2:-n/a}; after 1 s of compute: ${r3:-n/a} (goal <= 0.1)"
exit "$st"
