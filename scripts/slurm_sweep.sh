#!/usr/bin/env bash
# One shard of an expertsim sweep per Slurm array task (docs/cluster.md).
#
#   sbatch --array=1-8 scripts/slurm_sweep.sh scenarios/caps/evaluation.toml results/caps-evaluation
#   target/release/expertsim merge results/caps-evaluation      # once every task has finished
#
# Arguments: SCENARIO OUT_DIR [more `expertsim run` options, e.g. --set key=value].
# Task K of an array 1-N runs `--shard K/N` into OUT_DIR (a folder every node sees); the shards'
# file names never collide, so they can all write there. N is the array's highest task id unless
# SHARDS is set: set it when resubmitting some tasks only (SHARDS=8 sbatch --array=3,5 ...).
# Task ids count from 1 like --shard's K. A requeued or resubmitted task resumes from the cells
# it had finished. EXPERTSIM names the binary (default target/release/expertsim).
#SBATCH --job-name=expertsim-sweep
#SBATCH --cpus-per-task=8
#SBATCH --time=02:00:00
#SBATCH --requeue
#SBATCH --output=slurm-%A_%a.out
set -euo pipefail

usage="usage: sbatch --array=1-N $0 SCENARIO OUT_DIR [expertsim run options]"
scenario=${1:?$usage}
out=${2:?$usage}
shift 2
task=${SLURM_ARRAY_TASK_ID:?not an array task; $usage}
count=${SHARDS:-${SLURM_ARRAY_TASK_MAX:?}}
if ((task < 1 || task > count)); then
    echo "task $task is not in 1..$count: submit with --array=1-N (shards count from 1)" >&2
    exit 2
fi

# rayon sizes its pool from the CPUs the job may use; say it explicitly where Slurm knows it.
export RAYON_NUM_THREADS=${SLURM_CPUS_PER_TASK:-${RAYON_NUM_THREADS:-0}}
exec "${EXPERTSIM:-target/release/expertsim}" run "$scenario" \
    --shard "$task/$count" --out "$out" --no-figures "$@"
