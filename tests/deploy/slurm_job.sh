#!/usr/bin/env bash
# slurm_job.sh — the prolog and epilog under a real Slurm: munged,
# slurmctld and slurmd started here (one node on loopback, configuration,
# state, spool, logs and munge key all in the scratch directory, ports
# picked free), slurm.conf pointing Prolog/Epilog at packaging/slurm.
# A job submitted with sbatch by an unprivileged user writes a checkpoint
# (shards in a step directory, then a `latest` marker) to its mount.
# Asserts: the mount existed during the job (type fuse.ckptfs, seen from
# the job); after the job every file is on the backend, whole, owned by the
# job's user; the mount and its daemon are gone after the epilog; the node
# is idle again (the epilog returned 0).  A second job opts out with
# --comment=ckptfs=off and gets no mount.  Skips (77) only where Slurm or
# munge is not installed or will not start here.
. "$(dirname "$0")/lib.sh"
dt_enter_namespace "$@"
for b in munged munge slurmctld slurmd sbatch scontrol sinfo; do
	command -v $b >/dev/null || dt_skip "$b not installed (tests/deploy/setup.sh installs slurm-wlm and munge)"
done
dt_test_user

s=$DT_SCRATCH/slurm
node=$(hostname -s)
projects=$DT_SCRATCH/projects
jobs=$DT_SCRATCH/jobs
mkdir -p "$s/munge" "$s/key" "$s/state" "$s/spool" "$projects/proj1/ckpt" "$jobs" "$DT_SCRATCH/ckpt"
chmod 700 "$s/key"
chmod 1777 "$jobs"
chown "$DT_UID:$DT_GID" "$projects/proj1/ckpt"
export SLURM_CONF=$s/slurm.conf

stop_daemons() {
	local f pids=
	for f in slurmd.pid slurmctld.pid munged.pid; do
		[ -f "$s/$f" ] && pids="$pids $(cat "$s/$f")"
	done
	[ -n "$pids" ] || return 0
	kill $pids 2>/dev/null
	ckptfs_wait_gone $(($(date +%s) + 15)) $pids >/dev/null
}
DT_EXIT_HOOK=stop_daemons

# ---- munge, with its own key and socket
head -c 1024 /dev/urandom >"$s/key/munge.key"
chmod 600 "$s/key/munge.key"
munged -f --socket="$s/munge/sock" --key-file="$s/key/munge.key" --pid-file="$s/munged.pid" \
	--log-file="$s/munged.log" --seed-file="$s/munge/seed" ||
	dt_skip "munged does not start here: $(tail -n 3 "$s/munged.log" 2>/dev/null)"
munge -S "$s/munge/sock" -n | unmunge -S "$s/munge/sock" >/dev/null ||
	dt_skip "munge does not work here"

# ---- ckptfs configuration and the prolog/epilog wrappers (slurmd cannot
# pass CKPTFS_CONF itself)
cat >"$DT_SCRATCH/ckptfs.conf" <<EOF
backend_root = $projects/%a/ckpt
job_dir = %u/%j
mount_point = $DT_SCRATCH/ckpt/%j
cache_size = 128M
rescue_dir = $DT_SCRATCH/rescue/%j
epilog_timeout = 120
log_file = $DT_SCRATCH/ckptfs-slurm.log
EOF
for which in prolog epilog; do
	printf '#!/bin/sh\nCKPTFS_CONF=%s exec %s\n' "$DT_SCRATCH/ckptfs.conf" \
		"$CKPTFS_SOURCE_DIR/packaging/slurm/ckptfs-$which" >"$s/$which"
	chmod 755 "$s/$which"
done

# ---- slurm.conf: one node on loopback, no cgroups, no accounting
read -r ctld_port slurmd_port < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(2)]
for x in ss: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in ss])')
cat >"$SLURM_CONF" <<EOF
ClusterName=ckptfstest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$s/munge/sock
StateSaveLocation=$s/state
SlurmdSpoolDir=$s/spool
SlurmctldPidFile=$s/slurmctld.pid
SlurmdPidFile=$s/slurmd.pid
SlurmctldLogFile=$s/slurmctld.log
SlurmdLogFile=$s/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
PrologFlags=Alloc
Prolog=$s/prolog
Epilog=$s/epilog
PrologEpilogTimeout=180
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=100 State=UNKNOWN
PartitionName=ckpt Nodes=$node Default=YES MaxTime=10 State=UP
EOF
slurmctld -f "$SLURM_CONF" || dt_skip "slurmctld does not start here: $(tail -n 3 "$s/slurmctld.log")"
slurmd -f "$SLURM_CONF" || dt_skip "slurmd does not start here: $(tail -n 3 "$s/slurmd.log")"

node_state() {
	sinfo -h -n "$node" -o %T 2>/dev/null
}
for ((i = 0; i < 150; i++)); do
	[ "$(node_state)" = idle ] && break
	sleep 0.2
done
[ "$(node_state)" = idle ] ||
	dt_skip "the Slurm node does not come up (state '$(node_state)'): $(tail -n 3 "$s/slurmd.log")"
dt_note "slurm up: node $node, ports $ctld_port/$slurmd_port"

# ---- the job: a checkpoint step directory, then the marker
ref=$DT_SCRATCH/ref
dt_make_files "$ref" 4 2048
chmod -R a+rX "$ref"
cat >"$DT_SCRATCH/job.sh" <<EOF
#!/bin/sh
m=$DT_SCRATCH/ckpt/\$SLURM_JOB_ID
findmnt -n -o FSTYPE --mountpoint "\$m" >"$jobs/\$SLURM_JOB_ID.type"
[ -d "\$m" ] || exit 0
mkdir "\$m/global_step10" && cp "$ref"/* "\$m/global_step10/" &&
	echo global_step10 >"\$m/latest"
EOF
chmod 755 "$DT_SCRATCH/job.sh"

# submit [sbatch options]: prints the job id
submit() {
	runuser -u "$DT_USER" -- env SLURM_CONF="$SLURM_CONF" \
		sbatch --parsable -A proj1 -D "$jobs" -o "$jobs/%j.out" "$@" "$DT_SCRATCH/job.sh"
}

# wait_job ID: until the job has ended and the node is idle (epilog done).
wait_job() {
	local st
	for ((i = 0; i < 600; i++)); do
		st=$(scontrol -o show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*')
		case $st in
		JobState=PENDING | JobState=RUNNING | JobState=CONFIGURING | JobState=COMPLETING | "") ;;
		*) [ "$(node_state)" = idle ] && { echo "$st"; return 0; } ;;
		esac
		case $(node_state) in *drain*) echo "$st node $(node_state)"; return 1 ;; esac
		sleep 0.2
	done
	echo "$st node $(node_state)"
	return 1
}

job=$(submit) || dt_fail "sbatch failed"
state=$(wait_job "$job") || dt_fail "job $job: did not finish cleanly: $state; $(scontrol show node "$node" | grep -i reason)"
dt_assert_eq JobState=COMPLETED "$state" "job $job state (output: $(cat "$jobs/$job.out" 2>/dev/null))"
dt_assert_eq fuse.ckptfs "$(cat "$jobs/$job.type")" "type of the mount the job saw"
backend=$projects/proj1/ckpt/$DT_USER/$job
dt_assert_same_files "$ref" "$backend/global_step10" "job $job: backend after the epilog"
dt_assert_eq global_step10 "$(cat "$backend/latest")" "job $job: the latest marker"
for f in "$backend" "$backend/global_step10" "$backend"/global_step10/* "$backend/latest"; do
	dt_assert_eq "$DT_UID" "$(stat -c %u "$f")" "owner of $f"
done
dt_assert_unmounted_and_gone "$DT_SCRATCH/ckpt/$job" "$(ckptfs_daemon_pids "$DT_SCRATCH/ckpt/$job")" "job $job after the epilog"
[ ! -e "$DT_SCRATCH/ckpt/$job" ] || dt_fail "job $job: the mount point was left behind"
dt_assert_match "job $job: drained" "$(cat "$DT_SCRATCH/ckptfs-slurm.log")" "the epilog's log line"
dt_note "job $job: checkpoint on the backend, owned by $DT_USER, mount gone"

job=$(submit --comment=ckptfs=off) || dt_fail "sbatch failed"
state=$(wait_job "$job") || dt_fail "job $job (opted out): did not finish cleanly: $state"
dt_assert_eq JobState=COMPLETED "$state" "opted-out job $job state"
dt_assert_eq "" "$(cat "$jobs/$job.type")" "opted-out job $job: mount seen by the job"
[ ! -e "$projects/proj1/ckpt/$DT_USER/$job" ] || dt_fail "opted-out job $job: a backend directory was made"
dt_note "job $job: opted out, no mount"
exit 0
