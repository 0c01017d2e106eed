# ckptfs-slurm.sh — what the Slurm prolog and epilog share: the site
# configuration (ckptfs.conf), the job's identity from slurmd's
# environment, path templates, opt-out, and running a command as the job's
# user.  POSIX sh, sourced by ckptfs-prolog and ckptfs-epilog, which set
# CKPTFS_PROG first.
#
# slurmd runs both as root with no PATH and only SLURM_* variables: the job's
# own environment never reaches them, which is why opting out goes through
# the job's --comment or --constraint.  The configuration file is
# $CKPTFS_CONF, default /etc/ckptfs/ckptfs.conf (a wrapper script can set
# CKPTFS_CONF before calling the prolog; slurm.conf cannot).
#
# Exit statuses of both scripts (Slurm drains the node and, after a prolog
# failure, requeues the job held, on any non-zero status):
#   0  done: mounted / drained and unmounted / nothing to do for this job;
#   1  a runtime failure (backend not writable, the mount failed, data not
#      confirmed durable), each with one log line saying why;
#   2  configuration error: the file is missing or has a bad line, or the
#      Slurm environment lacks the job's identity.
# shellcheck disable=SC2034  # cfg_*, paths and statuses are for the sourcing scripts
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
umask 022
ckptfs_slurm_dir=$(dirname "$(readlink -f "$0")")
# shellcheck source=../ckptfs-lib.sh
. "$ckptfs_slurm_dir/../ckptfs-lib.sh" || exit 2

CKPTFS_SLURM_CONFIG_ERROR=2
CKPTFS_SLURM_RUNTIME_ERROR=1

# ckptfs_slurm_config_error MESSAGE: log and exit with the config status.
ckptfs_slurm_config_error() {
	ckptfs_log err "job ${SLURM_JOB_ID:-?}: $*"
	exit $CKPTFS_SLURM_CONFIG_ERROR
}

# ckptfs_slurm_set KEY VALUE: one configuration setting, checked.
ckptfs_slurm_set() {
	case $1 in
	backend_root | job_dir | mount_point | rescue_dir | options | cache_size | \
		optout_comment | require_feature | log_file | daemon) ;;
	multinode)
		case $2 in auto | off) ;; *) return 1 ;; esac ;;
	epilog_timeout)
		ckptfs_is_uint "$2" || return 1 ;;
	on_prolog_error)
		case $2 in fail | skip) ;; *) return 1 ;; esac ;;
	on_drain_failure)
		case $2 in drain | keep) ;; *) return 1 ;; esac ;;
	*) return 1 ;;
	esac
	eval "cfg_$1=\$2"
}

# ckptfs_slurm_load_config: read $CKPTFS_CONF into cfg_* variables.
# Format: `key = value` lines, # comments, blank lines; see ckptfs.conf.
ckptfs_slurm_load_config() {
	conf=${CKPTFS_CONF:-/etc/ckptfs/ckptfs.conf}
	cfg_backend_root='' cfg_job_dir=%u/%j cfg_mount_point='' cfg_rescue_dir=''
	cfg_options='' cfg_cache_size='' cfg_optout_comment=ckptfs=off cfg_require_feature=''
	cfg_log_file='' cfg_daemon='' cfg_epilog_timeout=600 cfg_multinode=auto
	cfg_on_prolog_error=fail cfg_on_drain_failure=drain
	[ -r "$conf" ] || ckptfs_slurm_config_error "config file '$conf' is missing or unreadable; install one (example: share/ckptfs/slurm/ckptfs.conf)"
	_n=0
	while IFS= read -r _line || [ -n "$_line" ]; do
		_n=$((_n + 1))
		_line=${_line%%#*}
		case $_line in *[![:space:]]*) ;; *) continue ;; esac
		case $_line in
		*=*) ;;
		*) ckptfs_slurm_config_error "$conf:$_n: expected 'key = value', got '$_line'" ;;
		esac
		_key=$(printf '%s' "${_line%%=*}" | tr -d '[:space:]')
		_val=$(printf '%s' "${_line#*=}" | sed 's/^[[:space:]]*//; s/[[:space:]]*$//')
		ckptfs_slurm_set "$_key" "$_val" ||
			ckptfs_slurm_config_error "$conf:$_n: bad setting '$_key = $_val' (see the example ckptfs.conf)"
	done <"$conf"
	for _key in backend_root mount_point; do
		eval "[ -n \"\$cfg_$_key\" ]" || ckptfs_slurm_config_error "$conf: '$_key' is not set"
	done
	CKPTFS_LOG_FILE=$cfg_log_file
}

# ckptfs_slurm_safe_name VALUE: true if a user or account name may be put
# into a path: letters, digits, . _ - @ + and not . or ..
ckptfs_slurm_safe_name() {
	case $1 in
	'' | . | .. | *[!A-Za-z0-9._@+-]*) return 1 ;;
	esac
}

# ckptfs_slurm_job: the job's identity from slurmd's environment.
ckptfs_slurm_job() {
	job_id=${SLURM_JOB_ID:-}
	job_uid=${SLURM_JOB_UID:-}
	job_user=${SLURM_JOB_USER:-}
	ckptfs_is_uint "$job_id" && ckptfs_is_uint "$job_uid" && [ -n "$job_user" ] ||
		ckptfs_slurm_config_error "SLURM_JOB_ID, SLURM_JOB_UID and SLURM_JOB_USER must be set (run from slurmd as Prolog/Epilog)"
	job_gid=${SLURM_JOB_GID:-$(id -g "$job_user" 2>/dev/null)}
	ckptfs_is_uint "$job_gid" || ckptfs_slurm_config_error "no group for user '$job_user'"
	job_account=${SLURM_JOB_ACCOUNT:-}
	if [ -z "$job_account" ]; then	# the group's name, where it can be in a path
		job_account=$(getent group "$job_gid" | cut -d: -f1)
		ckptfs_slurm_safe_name "$job_account" || job_account=$job_gid
	fi
}

# ckptfs_slurm_expand TEMPLATE: %j job id, %u user, %U uid, %g gid,
# %a account (the job's --account, else its group's name), %% a percent.
ckptfs_slurm_expand() {
	printf '%s\n' "$1" | sed -e 's/%%/\x01/g' -e "s/%j/$job_id/g" -e "s/%u/$job_user/g" \
		-e "s/%U/$job_uid/g" -e "s/%g/$job_gid/g" -e "s/%a/$job_account/g" -e 's/\x01/%/g'
}

# ckptfs_slurm_init: configuration, job, and the paths for this job.  A
# user or account name a template uses that cannot be in a path is this
# job's problem, not the site's: name_problem says why (the prolog fails
# the job's mount as on_prolog_error says; the epilog has nothing to do),
# and the paths are left empty.
ckptfs_slurm_init() {
	ckptfs_slurm_load_config
	ckptfs_slurm_job
	name_problem=
	_templates="$cfg_backend_root $cfg_job_dir $cfg_mount_point $cfg_rescue_dir"
	case $_templates in *%u*) ckptfs_slurm_safe_name "$job_user" ||
		name_problem="user name '$job_user' cannot be used in a path" ;; esac
	case $_templates in *%a*) ckptfs_slurm_safe_name "$job_account" ||
		name_problem="account '$job_account' cannot be used in a path" ;; esac
	if [ -n "$name_problem" ]; then
		backend_root="" backend="" mnt="" rescue=""
		return 0
	fi
	backend_root=$(ckptfs_slurm_expand "$cfg_backend_root")
	backend=$backend_root/$(ckptfs_slurm_expand "$cfg_job_dir")
	mnt=$(ckptfs_slurm_expand "$cfg_mount_point")
	rescue=
	[ -n "$cfg_rescue_dir" ] && rescue=$(ckptfs_slurm_expand "$cfg_rescue_dir")
	case $backend_root:$mnt:${rescue:-/} in
	/*:/*:/*) ;;
	*) ckptfs_slurm_config_error "$conf: backend_root, mount_point and rescue_dir must be absolute paths" ;;
	esac
}

# ckptfs_slurm_root_path_problem PATH: why root must not make or mount
# PATH, or nothing.  A user who can change a directory on the way could
# point it elsewhere (a symlink planted for a job id not yet run): root's
# `mkdir -p` would make directories there and the daemon would refuse the
# mount only after.  So every existing component must be reachable only by
# root's choices: each directory looked up in owned by root and writable by
# no one else, or sticky with the entry root's; a symlink root's; and what
# does not exist yet is made only in a directory no one else may write.
# The daemon checks the mount point again (backend/safepath.h), resolved.
ckptfs_slurm_root_path_problem() {
	_rest=${1#/} _p='' _dir=/
	while [ -n "$_rest" ]; do
		_c=${_rest%%/*}
		case $_rest in */*) _rest=${_rest#*/} ;; *) _rest= ;; esac
		case $_c in '' | .) continue ;; ..) echo "it must not contain '..'"; return ;; esac
		_p=$_p/$_c
		_d=$(stat -L -c '%u %a' -- "$_dir") || { echo "$_dir cannot be read"; return; }
		_downer=${_d%% *} _dmode=0${_d#* }
		if [ ! -e "$_p" ] && [ ! -L "$_p" ]; then	# root makes the rest, here first
			[ "$_downer" = 0 ] && [ $((_dmode & 022)) -eq 0 ] && return 0
			echo "$_p does not exist yet in $_dir, which others may write: one of them could make it first"
			return
		fi
		_owner=$(stat -c %u -- "$_p") || { echo "$_p cannot be read"; return; }
		if [ "$_downer" != 0 ]; then
			echo "$_dir is owned by uid $_downer, who could replace what lies below it"
			return
		fi
		if [ $((_dmode & 022)) -ne 0 ]; then
			if [ $((_dmode & 01000)) -eq 0 ]; then
				echo "$_dir is writable by others without the sticky bit"
				return
			fi
			if [ "$_owner" != 0 ]; then
				echo "$_p is owned by uid $_owner in a directory others may write"
				return
			fi
		fi
		if [ -L "$_p" ] && [ "$_owner" != 0 ]; then
			echo "$_p is a symlink owned by uid $_owner"
			return
		fi
		_dir=$_p
	done
}

# ckptfs_slurm_has_word LIST WORD: WORD appears in LIST as a whole word
# (separated by blanks, commas or the &|:*[]() of constraint expressions).
ckptfs_slurm_has_word() {
	[ -n "$2" ] && printf '%s\n' "$1" | sed 's/[][ ,&|:*()]/\n/g' | grep -qxF -- "$2"
}

# ckptfs_slurm_wanted: true if this job gets a mount.  A job opts out with
# the word optout_comment in its --comment; where require_feature is set,
# only jobs whose --constraint names that feature get one.
ckptfs_slurm_wanted() {
	ckptfs_slurm_has_word "${SLURM_JOB_COMMENT:-}" "$cfg_optout_comment" && return 1
	[ -z "$cfg_require_feature" ] && return 0
	ckptfs_slurm_has_word "${SLURM_JOB_CONSTRAINTS:-}" "$cfg_require_feature"
}

# ckptfs_slurm_hostnames HOSTLIST: the node names of a Slurm hostlist
# expression ("gpu[01-03,07],login2"), one per line; false if it cannot be
# read.  scontrol where it works (it needs the cluster's configuration),
# else a reading of the common forms: one bracket group per name, holding
# numbers and zero-padded ranges.
ckptfs_slurm_hostnames() {
	scontrol show hostnames "$1" 2>/dev/null && return 0
	printf '%s\n' "$1" | awk '
	function emit(it,   p, rest, q, pre, body, post, n, parts, j, r, w, x) {
		if (it == "") return
		p = index(it, "[")
		if (!p) { if (it ~ /\]/) bad = 1; else print it; return }
		pre = substr(it, 1, p - 1); rest = substr(it, p + 1); q = index(rest, "]")
		body = substr(rest, 1, q - 1); post = substr(rest, q + 1)
		if (!q || post ~ /[][]/ || body !~ /^[0-9,-]+$/) { bad = 1; return }
		n = split(body, parts, ",")
		for (j = 1; j <= n; j++) {
			if (split(parts[j], r, "-") == 2) {
				w = length(r[1])
				for (x = r[1] + 0; x <= r[2] + 0; x++)
					printf "%s%0" w "d%s\n", pre, x, post
			} else {
				print pre parts[j] post
			}
		}
	}
	{
		item = ""; depth = 0
		for (i = 1; i <= length($0); i++) {
			c = substr($0, i, 1)
			if (c == "[") depth++
			if (c == "]") depth--
			if (c == "," && depth == 0) { emit(item); item = "" } else item = item c
		}
		emit(item)
	}
	END { exit bad }'
}

# ckptfs_slurm_peer_opts: the daemon's node=, peers= and job= for a job on
# several nodes (multinode = auto): this node's Slurm name, and the job's
# node list (or, if it cannot be read, their number: then only daemons
# whose records name this job id count).  Empty for a one-node job or with
# multinode = off.
ckptfs_slurm_peer_opts() {
	[ "$cfg_multinode" = auto ] && [ -n "${SLURM_JOB_NODELIST:-}" ] || return 0
	_names=$(ckptfs_slurm_hostnames "$SLURM_JOB_NODELIST") || _names=
	_n=$(printf '%s\n' "$_names" | grep -c .)
	_node=${SLURMD_NODENAME:+node=$SLURMD_NODENAME,}
	_job=
	case ${SLURM_JOB_ID:-} in
	'' | *[!A-Za-z0-9._+-]*) ;;
	*) _job=,job=$SLURM_JOB_ID ;;
	esac
	if [ "$_n" -gt 1 ]; then
		printf '%speers=%s%s\n' "$_node" "$(printf '%s\n' "$_names" | paste -sd: -)" "$_job"
	elif [ -z "$_names" ] && ckptfs_is_uint "${SLURM_JOB_NUM_NODES:-}" &&
		[ "$SLURM_JOB_NUM_NODES" -gt 1 ]; then
		printf '%speers=%s%s\n' "$_node" "$SLURM_JOB_NUM_NODES" "$_job"
	fi
}

# ckptfs_slurm_as_user COMMAND...: run COMMAND as the job's user and group.
ckptfs_slurm_as_user() {
	if id -u "$job_user" >/dev/null 2>&1; then
		setpriv --reuid="$job_uid" --regid="$job_gid" --init-groups -- "$@"
	else
		setpriv --reuid="$job_uid" --regid="$job_gid" --clear-groups -- "$@"
	fi
}
