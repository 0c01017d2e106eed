#!/usr/bin/env bash
# slurm_scripts.sh — the Slurm prolog and epilog run the way slurmd runs
# them (as root, empty environment but SLURM_* variables), without Slurm:
#  - bad input gives one clear log line and the documented status: missing
#    config file (2), a bad line (2), no job identity (2), backend root
#    missing (1) or not writable by the job's user (1), with the mount point
#    removed; on_prolog_error = skip turns those into 0;
#  - a job that opts out (--comment) or lacks the required feature gets no
#    mount; the epilog then has nothing to do (0);
#  - the normal cycle: the prolog mounts a per-job backend directory owned
#    by the user, a second prolog on the same mount point is refused, the
#    user's files reach the backend with the user's ownership, the epilog
#    drains, unmounts and removes the mount point (0);
#  - a mount point a user could redirect (a directory of theirs on the
#    way, where they planted a symlink to a root directory): the prolog
#    refuses it (1) naming why, makes nothing where the symlink points and
#    mounts nothing; the epilog then removes nothing there either (0);
#  - a backend that refuses every publish: the epilog finds the data in the
#    rescue directory and exits 1 (on_drain_failure = drain) or 0 (keep),
#    logging why either way; and with the mount busy at the epilog
#    (detached lazily) and a rescue directory the epilog does not know,
#    the failed drain still makes it exit 1;
#  - a user or account name that cannot be in a path fails only that job's
#    mount, only where a template uses it (1; an opted-out job 0);
#  - a mount point without %j: another job's epilog leaves the mount of
#    the job that made it alone (0), that job's epilog drains it.
. "$(dirname "$0")/lib.sh"
dt_enter_namespace "$@"
dt_test_user

slurm=$CKPTFS_SOURCE_DIR/packaging/slurm
projects=$DT_SCRATCH/projects
log=$DT_SCRATCH/slurm-scripts.log
conf=$DT_SCRATCH/ckptfs.conf
mkdir -p "$projects/proj1/ckpt" "$projects/rootonly/ckpt"
chown "$DT_UID:$DT_GID" "$projects/proj1/ckpt"

# write_conf [KEY=VALUE...]: the test's ckptfs.conf, with overrides.
write_conf() {
	local kv
	{
		echo "# slurm_scripts.sh test configuration"
		echo "backend_root = $projects/%a/ckpt"
		echo "job_dir = %u/%j"
		echo "mount_point = $DT_SCRATCH/ckpt/%j"
		echo "cache_size = 64M"
		echo "rescue_dir = $DT_SCRATCH/rescue/%j"
		echo "epilog_timeout = 60"
		echo "log_file = $log"
		for kv in "$@"; do
			echo "${kv%%=*} = ${kv#*=}"
		done
	} >"$conf"
}

# run_script prolog|epilog JOB ACCOUNT [VAR=VALUE...]: run it as slurmd
# would; sets out (its stderr) and rc.
run_script() {
	local which=$1 job=$2 account=$3
	shift 3
	out=$(env -i CKPTFS_CONF="$conf" SLURM_JOB_ID="$job" SLURM_JOB_UID="$DT_UID" \
		SLURM_JOB_GID="$DT_GID" SLURM_JOB_USER="$DT_USER" SLURM_JOB_ACCOUNT="$account" \
		SLURM_SCRIPT_CONTEXT="${which}_slurmd" "$@" "$slurm/ckptfs-$which" 2>&1)
	rc=$?
}

# expect WHAT STATUS PATTERN: the last run_script exited STATUS and both its
# output and the log file have a line matching PATTERN.
expect() {
	dt_assert_eq "$2" "$rc" "$1: exit status (output: $out)"
	dt_assert_match "$3" "$out" "$1: message"
	[ ! -f "$log" ] || dt_assert_match "$3" "$(cat "$log")" "$1: log file"
	dt_note "$1: status $rc: $(printf '%s' "$out" | head -n 1)"
}

# ---- bad input
write_conf
run_script prolog 100 proj1 CKPTFS_CONF=$DT_SCRATCH/missing.conf
expect "missing config file" 2 "config file '$DT_SCRATCH/missing.conf' is missing"
write_conf "bogus_key=1"
run_script prolog 101 proj1
expect "unknown key" 2 "ckptfs.conf:[0-9]+: bad setting 'bogus_key = 1'"
write_conf "epilog_timeout=soon"
run_script epilog 101 proj1
expect "bad number" 2 "bad setting 'epilog_timeout = soon'"
write_conf
run_script prolog "" proj1
expect "no job identity" 2 "SLURM_JOB_ID, SLURM_JOB_UID and SLURM_JOB_USER must be set"
run_script prolog 102 nosuchproject
expect "missing backend root" 1 "job 102: backend root '$projects/nosuchproject/ckpt' is not a directory"
[ ! -e "$DT_SCRATCH/ckpt/102" ] || dt_fail "mount point left behind after a failed prolog"
run_script prolog 103 rootonly
expect "unwritable backend root" 1 "job 103: user $DT_USER cannot create or write the job's backend directory '$projects/rootonly/ckpt/$DT_USER/103'"
[ ! -e "$DT_SCRATCH/ckpt/103" ] || dt_fail "mount point left behind after a failed prolog"
write_conf "on_prolog_error=skip"
run_script prolog 104 rootonly
expect "unwritable backend root, on_prolog_error = skip" 0 "job 104: runs without a checkpoint mount"
[ ! -e "$DT_SCRATCH/ckpt/104" ] || dt_fail "mount point left behind after a skipped prolog"

# ---- opting out
write_conf
run_script prolog 110 proj1 SLURM_JOB_COMMENT="nightly run ckptfs=off"
expect "opt-out by comment" 0 "job 110: no ckptfs mount"
[ -z "$(ckptfs_mounted "$DT_SCRATCH/ckpt/110")" ] || dt_fail "opted-out job got a mount"
run_script epilog 110 proj1
dt_assert_eq 0 "$rc" "epilog of an opted-out job (output: $out)"
write_conf "require_feature=ckptfs"
run_script prolog 111 proj1 SLURM_JOB_CONSTRAINTS="gpu"
expect "job without the required feature" 0 "job 111: no ckptfs mount"

# ---- the normal cycle
run_script prolog 112 proj1 SLURM_JOB_CONSTRAINTS="gpu&ckptfs"
expect "prolog" 0 "job 112: mounted $projects/proj1/ckpt/$DT_USER/112 on $DT_SCRATCH/ckpt/112"
mnt=$DT_SCRATCH/ckpt/112 backend=$projects/proj1/ckpt/$DT_USER/112
dt_assert_eq fuse.ckptfs "$(ckptfs_mounted "$mnt")" "type of the job's mount"
dt_assert_eq "$DT_UID" "$(stat -c %u "$backend")" "owner of the job's backend directory"
run_script prolog 112 proj1 SLURM_JOB_CONSTRAINTS="ckptfs"
expect "second prolog on a mounted mount point" 1 "mount point '$mnt' is already mounted"
dt_assert_eq fuse.ckptfs "$(ckptfs_mounted "$mnt")" "the first mount survives a refused second prolog"
dt_make_files "$DT_SCRATCH/ref" 3 512
chmod -R a+rX "$DT_SCRATCH/ref"
runuser -u "$DT_USER" -- sh -c "mkdir '$mnt/step1' && cp '$DT_SCRATCH/ref'/* '$mnt/step1/'" ||
	dt_fail "the job's user cannot write its mount"
run_script epilog 112 proj1
expect "epilog" 0 "job 112: drained '$backend' and unmounted '$mnt'"
dt_assert_same_files "$DT_SCRATCH/ref" "$backend/step1" "backend after the epilog"
for f in "$backend/step1" "$backend"/step1/*; do
	dt_assert_eq "$DT_UID" "$(stat -c %u "$f")" "owner of $f"
done
[ ! -e "$mnt" ] || dt_fail "the epilog left the mount point $mnt"
[ ! -e "$DT_SCRATCH/rescue/112" ] || dt_fail "the epilog left an empty rescue directory"

# ---- a mount point a user could redirect
mkdir -p "$DT_SCRATCH/users/$DT_USER" "$DT_SCRATCH/victim/131"
chown "$DT_UID:$DT_GID" "$DT_SCRATCH/users/$DT_USER"
runuser -u "$DT_USER" -- ln -s "$DT_SCRATCH/victim" "$DT_SCRATCH/users/$DT_USER/ckpt"
write_conf "mount_point=$DT_SCRATCH/users/%u/ckpt/%j"
run_script prolog 130 proj1
expect "a mount point below a user's directory" 1 \
	"job 130: mount point '$DT_SCRATCH/users/$DT_USER/ckpt/130': $DT_SCRATCH/users/$DT_USER is owned by uid $DT_UID"
[ ! -e "$DT_SCRATCH/victim/130" ] || dt_fail "root made the mount point where the user's symlink points"
[ -z "$(ckptfs_mounted "$DT_SCRATCH/victim/130")" ] || dt_fail "mounted through the user's symlink"
run_script epilog 131 proj1
dt_assert_eq 0 "$rc" "epilog of a job whose mount point was refused (output: $out)"
[ -d "$DT_SCRATCH/victim/131" ] || dt_fail "the epilog removed a directory through the user's symlink"

# ---- a backend that refuses everything
for policy in drain keep; do
	job=120
	[ $policy = keep ] && job=121
	write_conf "options=drain_timeout=1" "on_drain_failure=$policy"
	run_script prolog $job proj1 CKPTFS_FAULT='op=rename,err=EIO'
	expect "prolog, failing backend" 0 "job $job: mounted"
	runuser -u "$DT_USER" -- cp "$DT_SCRATCH/ref/f0" "$DT_SCRATCH/ckpt/$job/f0" ||
		dt_fail "write to the mount failed"
	run_script epilog $job proj1
	want=1
	[ $policy = keep ] && want=0
	expect "epilog, failing backend, on_drain_failure = $policy" $want \
		"job $job: files that could not be written to '.*' are in the rescue directory '$DT_SCRATCH/rescue/$job'"
	[ -z "$(ckptfs_mounted "$DT_SCRATCH/ckpt/$job")" ] || dt_fail "still mounted after the epilog"
	saved=$(find "$DT_SCRATCH/rescue/$job" -type f -name f0 | head -n 1)
	[ -n "$saved" ] && cmp -s "$saved" "$DT_SCRATCH/ref/f0" ||
		dt_fail "f0 is not whole in the rescue directory"
done
dt_assert_match "Slurm drains this node" "$(cat "$log")" "the log says the node is drained"

# ---- a busy mount over a failing backend: the failed drain still counts
# The job's mount is busy at the epilog (a process still in it for a few
# seconds), so it is detached lazily; the daemon then fails to publish,
# rescues the file (into a rescue_dir the epilog does not know: given in
# options) and exits before the deadline.  The drain failed: not durable.
mkdir -p "$DT_SCRATCH/rescue-opt"
write_conf "options=drain_timeout=1,rescue_dir=$DT_SCRATCH/rescue-opt" "rescue_dir="
run_script prolog 150 proj1 CKPTFS_FAULT='op=rename,err=EIO'
expect "prolog, busy and failing" 0 "job 150: mounted"
runuser -u "$DT_USER" -- cp "$DT_SCRATCH/ref/f0" "$DT_SCRATCH/ckpt/150/f0" ||
	dt_fail "write to the mount failed"
runuser -u "$DT_USER" -- sh -c "cd '$DT_SCRATCH/ckpt/150' && exec sleep 8" &
holder=$!
sleep 0.5
run_script epilog 150 proj1
wait $holder
expect "epilog, busy mount, failed drain" 1 "job 150: the drain before the detach failed"
dt_assert_match "detaching it lazily" "$out" "the busy mount was detached lazily"

# ---- names that cannot be in a path: the job's problem, not the site's
write_conf
run_script prolog 160 "bad account"
expect "an account name with a blank" 1 "job 160: account 'bad account' cannot be used in a path"
run_script epilog 160 "bad account"
dt_assert_eq 0 "$rc" "epilog of a job whose account cannot be a path (output: $out)"
run_script prolog 161 "bad account" SLURM_JOB_COMMENT="ckptfs=off"
expect "such a job that opts out" 0 "job 161: no ckptfs mount"
write_conf "backend_root=$projects/proj1/ckpt"	# no %a: the account is not used
run_script prolog 162 "bad account"
expect "an account no template uses" 0 "job 162: mounted"
run_script epilog 162 "bad account"
expect "its epilog" 0 "job 162: drained"

# ---- a mount point without %j: another job's mount is left alone
write_conf "mount_point=$DT_SCRATCH/shared-ckpt"
run_script prolog 170 proj1
expect "prolog of the first job" 0 "job 170: mounted"
run_script epilog 171 proj1
expect "epilog of another job on the same mount point" 0 \
	"job 171: '$DT_SCRATCH/shared-ckpt' mounts '.*/170', not this job's"
dt_assert_eq fuse.ckptfs "$(ckptfs_mounted "$DT_SCRATCH/shared-ckpt")" \
	"the first job's mount survives another job's epilog"
run_script epilog 170 proj1
expect "epilog of the first job" 0 "job 170: drained"
exit 0
