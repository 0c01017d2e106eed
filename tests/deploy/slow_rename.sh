#!/usr/bin/env bash
# slow_rename.sh — on a backend whose metadata operations are slow (a busy
# Lustre MDS, NFS), writes through the mount must still return at memory
# speed (contract 1, Absorb): a write waits for the backend only when the
# cache is full.  The backend's rename is delayed 2 s (CKPTFS_FAULT); three
# files of 256 KiB are written one after another, each while the previous
# one is being published; no write(2) may take 1 s or more (they take
# milliseconds when nothing blocks them).
. "$(dirname "$0")/lib.sh"
dt_require_fuse
dt_scratch
b=$DT_SCRATCH/backend m=$DT_SCRATCH/mnt
mkdir -p "$b" "$m"
CKPTFS_FAULT='op=rename,delay_ms=2000' "$CKPTFS_BIN" "$b" "$m" -o cache_size=64M 2>"$DT_SCRATCH/daemon.log" ||
	dt_fail "mount failed: $(cat "$DT_SCRATCH/daemon.log")"
pid=$(dt_daemon_for "$m")

worst=$(python3 - "$m" <<'EOF'
import os, sys, time
worst = 0.0
for i in range(3):
    fd = os.open(os.path.join(sys.argv[1], "f%d" % i), os.O_CREAT | os.O_WRONLY, 0o644)
    t0 = time.monotonic()
    os.write(fd, b"x" * 262144)
    worst = max(worst, time.monotonic() - t0)
    os.close(fd)
    time.sleep(0.3)     # let the publisher start renaming this file
print("%.3f" % worst)
EOF
)
umount -i "$m"
ckptfs_wait_gone $(($(date +%s) + 60)) "$pid" >/dev/null || dt_fail "daemon still draining after 60 s"
dt_note "slowest write(2) of 256 KiB: $worst s"
python3 -c "import sys; sys.exit(0 if float('$worst') < 1.0 else 1)" ||
	dt_fail "a write(2) took $worst s while the backend was renaming another file: writes wait for backend metadata operations"
exit 0
