# lib.sh — what bench/gpu/run and bench/gpu/h200.sh share (bash, sourced).

# gb_mount DAEMON WORK OPTS: mount a ckptfs of WORK/backend on WORK/mnt in the
# foreground (log WORK/daemon.log), set $pid, and return once it is mounted.
gb_mount() {
	mkdir -p "$2/backend" "$2/mnt"
	"$1" "$2/backend" "$2/mnt" -f -o "$3" >"$2/daemon.log" 2>&1 &
	pid=$!
	for _ in $(seq 1200); do
		grep -qs " $2/mnt fuse.ckptfs " /proc/self/mounts && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	echo "the daemon did not mount $2/mnt:" >&2
	cat "$2/daemon.log" >&2
	exit 1
}
