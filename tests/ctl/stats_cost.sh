#!/usr/bin/env bash
# stats_cost.sh — what reading MOUNT/.ckptfs/stats once a second costs a
# checkpoint write.  A measurement for the issue's closing note, not a test:
# it asserts nothing about speed and is not registered with ctest.
#
# One mount (cache larger than the checkpoint, so the writes are absorbed,
# not throttled by the backend).  A "checkpoint" is FILES files of FILE_MB
# MiB each (default 8 x 256 MiB = 2 GiB), written with 1 MiB writes by dd;
# its absorb throughput is its bytes over the time until the last close
# returns.  Rounds alternate without and with a reader that runs
# `cat MOUNT/.ckptfs/stats` every INTERVAL seconds (default 1) during the
# write, the order flipping each round so drift cancels; between
# checkpoints the mount is drained and emptied.  Prints each run, the
# median throughput of each kind and their ratio (with / without).
#
#   tests/ctl/stats_cost.sh [BUILD_DIR]       (default: ./build)
#   env: ROUNDS=3 FILES=8 FILE_MB=256 INTERVAL=1 WORK_DIR=/dev/shm (the
#        backend's parent; the default is tmpfs so that draining between
#        rounds is quick) CKPTFS_BIN (overrides BUILD_DIR/fs/ckptfs)
#        READ_FILE (what the reader reads instead of stats: a control run
#        with READ_FILE=/proc/loadavg shows the cost of the reader alone)
# Needs /dev/fuse and fusermount3; run as root or a user allowed to mount.
set -euo pipefail

build=${1:-build}
bin=${CKPTFS_BIN:-$build/fs/ckptfs}
ctl=$(dirname "$bin")/ckptfs-ctl
rounds=${ROUNDS:-3} files=${FILES:-8} file_mb=${FILE_MB:-256} interval=${INTERVAL:-1}
work=${WORK_DIR:-/dev/shm}
[ -x "$bin" ] && [ -x "$ctl" ] || { echo "stats_cost.sh: build ckptfs first ($bin)" >&2; exit 2; }

root=$(mktemp -d "$work/ckptfs-statcost.XXXXXX")
mnt=$root/mnt
mkdir "$root/backend" "$mnt"
mounted() { grep -qs " $mnt " /proc/self/mountinfo; }
cleanup() {
	for _ in $(seq 100); do	# busy while a last release is in flight
		mounted && ! fusermount3 -u "$mnt" 2>/dev/null || break
		sleep 0.1
	done
	mounted || rm -rf "$root"
}
trap cleanup EXIT
"$bin" "$root/backend" "$mnt" -o "cache_size=$((files * file_mb + 512))M"

now() { date +%s%N; }

# One checkpoint; prints "<seconds> <stats reads during it>".
checkpoint() {
	local with_reader=$1 reads=$root/reads reader=
	: >"$reads"
	if [ "$with_reader" = 1 ]; then
		(while :; do cat "${READ_FILE:-$mnt/.ckptfs/stats}" >/dev/null && echo >>"$reads"; sleep "$interval"; done) &
		reader=$!
	fi
	local t0 t1
	t0=$(now)
	for i in $(seq "$files"); do
		dd if=/dev/zero of="$mnt/ckpt$i" bs=1M count="$file_mb" status=none
	done
	t1=$(now)
	[ -n "$reader" ] && kill "$reader" && wait "$reader" 2>/dev/null || true
	echo "$(( (t1 - t0) / 1000000 )) $(wc -l <"$reads")"
	"$ctl" drain "$mnt" >/dev/null
	rm -f "$mnt"/ckpt*
	"$ctl" drain "$mnt" >/dev/null
}

checkpoint 0 >/dev/null	# warm-up: first touch of the cache and the backend
mb=$((files * file_mb))
declare -a without with
for r in $(seq "$rounds"); do
	order="0 1"
	[ $((r % 2)) -eq 0 ] && order="1 0"
	for kind in $order; do
		read -r ms reads <<<"$(checkpoint "$kind")"	# waits for its drain too
		rate=$(awk -v mb="$mb" -v ms="$ms" 'BEGIN { printf "%.0f", mb * 1000 / ms }')
		if [ "$kind" = 1 ]; then
			with+=("$rate")
			label="with stats reader   "
		else
			without+=("$rate")
			label="without stats reader"
		fi
		printf 'round %d %s: %d MiB in %5d ms = %5d MiB/s  (%d stats reads)\n' \
			"$r" "$label" "$mb" "$ms" "$rate" "$reads"
	done
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
m0=$(median "${without[@]}")
m1=$(median "${with[@]}")
awk -v a="$m0" -v b="$m1" -v n="$rounds" 'BEGIN {
	printf "median absorb throughput over %d rounds: without %.0f MiB/s, with %.0f MiB/s\n", n, a, b
	printf "ratio with/without: %.3f (cost of reading stats once per second: %.1f%%)\n", b / a, (1 - b / a) * 100
}'
# The same cost from the other side: one read of stats (open, read whole,
# close, by one awk process: no fork each), averaged over 1000, idle mount.
t0=$(now)
awk -v f="$mnt/.ckptfs/stats" 'BEGIN { for (i = 0; i < 1000; i++) { while ((getline l < f) > 0); close(f) } }'
t1=$(now)
echo "one read of .ckptfs/stats: $(( (t1 - t0) / 1000 / 1000 )) us (mean of 1000, idle mount)"
