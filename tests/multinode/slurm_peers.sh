#!/bin/sh
# slurm_peers.sh — the Slurm prolog gives each node's daemon its peers: the
# job's node list (SLURM_JOB_NODELIST, a Slurm hostlist) read into node
# names (ckptfs_slurm_hostnames: scontrol where the cluster's configuration
# is there, else the common forms read by the script itself), this node's
# name (SLURMD_NODENAME) as node=, and the job id (SLURM_JOB_ID) as job=; a list it cannot read falls back
# to the node count; one node, or multinode = off, adds nothing; a bad
# multinode value is a configuration error.  And the daemon accepts what
# the prolog builds.
set -u
: "${CKPTFS_SOURCE_DIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
if [ -z "${SLURM_PEERS_INNER:-}" ]; then
	# ckptfs-slurm.sh finds its neighbours through $0: source it as its own $0.
	export SLURM_PEERS_INNER=1 CKPTFS_SOURCE_DIR CKPTFS_PROG=slurm_peers
	exec sh -c '. "$0" || exit 1; . "$1"' "$CKPTFS_SOURCE_DIR/packaging/slurm/ckptfs-slurm.sh" \
		"$(readlink -f "$0")"
fi
fails=0
check() {	# WHAT EXPECTED ACTUAL
	if [ "$2" = "$3" ]; then
		echo "ok: $1: $3"
	else
		echo "FAIL: $1: expected '$2', got '$3'" >&2
		fails=$((fails + 1))
	fi
}
names() { ckptfs_slurm_hostnames "$1" | paste -sd' ' -; }
scontrol() { return 1; }	# the script's own reading, whatever this machine has
check "ranges and lists" "gpu01 gpu02 gpu03 gpu07 login2" "$(names 'gpu[01-03,07],login2')"
check "zero padding" "n001 n002 n010" "$(names 'n[001-002,010]')"
check "a suffix" "a1b a2b c" "$(names 'a[1-2]b,c')"
check "one name" "node7" "$(names node7)"
ckptfs_slurm_hostnames 'x[1-2]y[3-4]' >/dev/null 2>&1
check "two bracket groups are refused" 1 "$?"

cfg_multinode=auto
check "peers of a 3-node job" "node=gpu02,peers=gpu01:gpu02:gpu03,job=771" \
	"$(SLURM_JOB_ID=771 SLURM_JOB_NODELIST='gpu[01-03]' SLURMD_NODENAME=gpu02 ckptfs_slurm_peer_opts)"
check "an unreadable list: the count, and the job" "node=x13,peers=4,job=771_3" \
	"$(SLURM_JOB_ID=771_3 SLURM_JOB_NODELIST='x[1-2]y[3-4]' SLURM_JOB_NUM_NODES=4 SLURMD_NODENAME=x13 ckptfs_slurm_peer_opts)"
check "no job id: none passed" "node=x13,peers=4" \
	"$(SLURM_JOB_ID= SLURM_JOB_NODELIST='x[1-2]y[3-4]' SLURM_JOB_NUM_NODES=4 SLURMD_NODENAME=x13 ckptfs_slurm_peer_opts)"
check "a one-node job" "" "$(SLURM_JOB_NODELIST=gpu05 SLURMD_NODENAME=gpu05 ckptfs_slurm_peer_opts)"
cfg_multinode=off
check "multinode = off" "" "$(SLURM_JOB_NODELIST='gpu[01-03]' SLURMD_NODENAME=gpu02 ckptfs_slurm_peer_opts)"
ckptfs_slurm_set multinode sometimes
check "a bad multinode value" 1 "$?"

# The daemon takes the options the prolog makes (parsed, then refused for the
# missing paths with exit 2 naming the backend, not an option).
if [ -n "${CKPTFS_BIN:-}" ]; then
	out=$("$CKPTFS_BIN" /nonexistent/backend /nonexistent/mnt -o "allow_other,node=gpu02,peers=gpu01:gpu02:gpu03,job=771_3" 2>&1)
	check "the daemon parses node=, peers= and job=" "2 backend" "$? $(printf '%s' "$out" | grep -o backend | head -n 1)"
fi
[ $fails -eq 0 ]
