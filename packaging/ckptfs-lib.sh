# ckptfs-lib.sh — shell functions shared by the umount helper
# (umount.fuse.ckptfs) and the Slurm prolog/epilog: logging, finding the
# daemon that serves a mount point, draining, and the drain-first unmount.
# POSIX sh; sourced, never run.  Every function prefixes its names with
# ckptfs_ so a sourcing script keeps its own namespace.
#
# Why a drain-first unmount: umount(2) on a FUSE mount returns as soon as
# the kernel has detached the mount; the daemon then drains its cache to
# the backend and exits on its own time.  A script that must know the data
# is durable (an epilog, a shutdown) drains first, unmounts, then waits for
# the daemon process to go away.  ckptfs_unmount does exactly that, within
# one deadline.
#
# Draining uses `ckptfs-ctl drain MOUNT [--timeout S]` when ckptfs-ctl is on
# PATH (or CKPTFS_CTL names it); otherwise, or with CKPTFS_CTL set empty,
# fsync(2) of the mount root (coreutils `sync DIR`), which the daemon
# answers once everything before it is durable.
#
# Caller sets CKPTFS_PROG (name in log lines) and may set CKPTFS_LOG_FILE
# (a file that gets one timestamped line per message).

: "${CKPTFS_PROG:=ckptfs}"
: "${CKPTFS_LOG_FILE:=}"
: "${CKPTFS_CTL=ckptfs-ctl}"

# ckptfs_log LEVEL MESSAGE...   LEVEL: err, warning or info.
# To stderr, to CKPTFS_LOG_FILE if set, and to syslog where there is one.
ckptfs_log() {
	_lvl=$1
	shift
	printf '%s: %s\n' "$CKPTFS_PROG" "$*" >&2
	if [ -n "$CKPTFS_LOG_FILE" ]; then
		printf '%s %s %s[%s]: %s: %s\n' "$(date '+%Y-%m-%dT%H:%M:%S%z')" \
			"$(uname -n)" "$CKPTFS_PROG" "$$" "$_lvl" "$*" >>"$CKPTFS_LOG_FILE" 2>/dev/null
	fi
	if command -v logger >/dev/null 2>&1; then
		logger -t "$CKPTFS_PROG" -p "daemon.$_lvl" -- "$*" 2>/dev/null || :
	fi
}

# ckptfs_is_uint VALUE: true for a whole number the shell's arithmetic
# holds (at most 12 digits: a larger one would make `[` fail, and a
# deadline computed from it none at all).
ckptfs_is_uint() {
	case $1 in
	'' | *[!0-9]*) return 1 ;;
	esac
	[ ${#1} -le 12 ]
}

# ckptfs_abs_path PATH: PATH absolute, its parent's symlinks resolved,
# PATH itself never looked at (a stuck daemon's mount point would hang
# stat(2)): for `umount -c`, which would otherwise canonicalize it by
# looking.
ckptfs_abs_path() {
	_ap=$(realpath -m -- "$(dirname -- "$1")")
	_ab=$(basename -- "$1")
	case $_ap in
	/) printf '/%s\n' "$_ab" ;;
	*) printf '%s/%s\n' "$_ap" "$_ab" ;;
	esac
}

# ckptfs_mounted PATH: print the file system type mounted at PATH (the top
# one), nothing if PATH is not a mount point.
ckptfs_mounted() {
	findmnt -n -o FSTYPE --mountpoint "$1" 2>/dev/null | tail -n 1
}

# ckptfs_pid_alive PID: true while PID runs (a zombie counts as gone).
ckptfs_pid_alive() {
	_st=$(cut -d ')' -f 2 "/proc/$1/stat" 2>/dev/null) || return 1
	# shellcheck disable=SC2086  # split into fields
	set -- $_st
	case ${1:-Z} in
	Z | X | x) return 1 ;;
	esac
	return 0
}

# ckptfs_daemon_pids MOUNTPOINT: print the pids of ckptfs daemons whose
# command line (`ckptfs BACKEND MOUNTPOINT ...`, as mount.fuse3, mount.ckptfs,
# the prolog or a service start it) names MOUNTPOINT.  Paths are compared
# lexically: stat(2) on the mount of a stuck daemon could hang.
ckptfs_daemon_pids() {
	_want=$(realpath -s -m -- "$1")
	for _d in /proc/[0-9]*; do
		_comm=
		{ read -r _comm <"$_d/comm"; } 2>/dev/null
		[ "$_comm" = ckptfs ] || continue
		_mp=$(tr '\0' '\n' <"$_d/cmdline" 2>/dev/null | awk '
			NR == 1 { next }
			skip { skip = 0; next }
			$0 == "-o" { skip = 1; next }
			/^-/ { next }
			{ if (++n == 2) { print; exit } }')
		[ -n "$_mp" ] || continue
		case $_mp in
		/*) _mp=$(realpath -s -m -- "$_mp") ;;
		*) continue ;;	# relative to a cwd the daemon has left
		esac
		[ "$_mp" = "$_want" ] && printf '%s\n' "${_d#/proc/}"
	done
}

# ckptfs_wait_gone DEADLINE PID...: wait until every PID has exited or the
# clock passes DEADLINE (epoch seconds; 0 waits for ever).  Prints the pids
# still running; true when none is.
ckptfs_wait_gone() {
	_deadline=$1
	shift
	while :; do
		_left=
		for _p in "$@"; do
			ckptfs_pid_alive "$_p" && _left="$_left $_p"
		done
		[ -z "$_left" ] && return 0
		if [ "$_deadline" -ne 0 ] && [ "$(date +%s)" -ge "$_deadline" ]; then
			echo $_left
			return 1
		fi
		sleep 0.2
	done
}

# ckptfs_drain MOUNTPOINT TIMEOUT: wait until everything written to the
# mount before the call is durable on the backend; TIMEOUT seconds, 0 for
# no limit.  0 when durable; otherwise non-zero with the reason on stderr.
ckptfs_drain() {
	if [ -n "$CKPTFS_CTL" ] && command -v "$CKPTFS_CTL" >/dev/null 2>&1; then
		if [ "$2" -gt 0 ]; then
			"$CKPTFS_CTL" drain "$1" --timeout "$2"
		else
			"$CKPTFS_CTL" drain "$1"
		fi
		return
	fi
	if [ "$2" -gt 0 ]; then
		timeout -k 5 "$2" sync -- "$1"
	else
		sync -- "$1"
	fi
	_rc=$?
	[ $_rc -eq 124 ] || [ $_rc -eq 137 ] && echo "drain timed out after $2 s" >&2
	return $_rc
}

# ckptfs_unmount MOUNTPOINT TIMEOUT [umount options...]: drain, unmount,
# and wait for the daemon to exit, all within TIMEOUT seconds (0: no
# limit).  If the drain fails the mount is still unmounted: the daemon
# keeps retrying after the unmount while the backend makes progress, and
# once it has made none for the daemon's own drain_timeout it saves what
# is left in its rescue directory and exits.  Returns
#   0   everything durable, unmounted, daemon gone;
#   2   unmounted, but the drain failed or timed out, or the daemon was
#       still running at the deadline: data may be at risk (logged);
#   32  the unmount itself failed (busy, not mounted): still mounted.
# ckptfs_drain_failed is 1 afterwards if the drain failed or timed out
# (whatever the return: a caller that detaches a busy mount needs it).
ckptfs_unmount() {
	_mnt=$1
	_timeout=$2
	shift 2
	_start=$(date +%s)
	_deadline=0
	[ "$_timeout" -gt 0 ] && _deadline=$((_start + _timeout))
	_pids=$(ckptfs_daemon_pids "$_mnt")
	_status=0
	# shellcheck disable=SC2034  # read by the callers (ckptfs-epilog)
	ckptfs_drain_failed=0
	if ! _err=$(ckptfs_drain "$_mnt" "$_timeout" 2>&1); then
		ckptfs_log warning "drain of $_mnt failed: ${_err:-no reason given}; unmounting anyway, the daemon keeps retrying and rescues what it cannot persist"
		_status=2
		# shellcheck disable=SC2034
		ckptfs_drain_failed=1
	fi
	if ! _err=$(umount -i -c "$@" -- "$(ckptfs_abs_path "$_mnt")" 2>&1); then
		ckptfs_log err "cannot unmount $_mnt: $_err"
		return 32
	fi
	[ -n "$_pids" ] || return $_status
	# shellcheck disable=SC2086  # a list of pids
	if ! _left=$(ckptfs_wait_gone "$_deadline" $_pids); then
		ckptfs_log err "daemon $_left for $_mnt still draining after ${_timeout} s: its data is not yet durable; it goes on in the background"
		return 2
	fi
	return $_status
}
