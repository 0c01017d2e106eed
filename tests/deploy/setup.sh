#!/bin/sh
# What the deployment tests need beyond the build: Slurm (slurmctld, slurmd,
# sbatch) and munge for the real-Slurm job test, rpm for checking the spec.
exec sh "$(dirname "$0")/../ensure-packages.sh" deploy slurm-wlm munge rpm
