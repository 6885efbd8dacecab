#!/usr/bin/env bash
# The published studies' reruns across sittings, on a machine whose outputs/ need not survive
# from one sitting to the next: every stage skips the runs finished in outputs/ and those
# committed in docs/results/in_progress/ (--resume-from), and `snapshot` writes the runs
# finished so far there, to commit before the sitting ends.
#   bash scripts/maintainer/reruns.sh train [study|sweeps|tails|crosskernel ...]   the stages left
#   bash scripts/maintainer/reruns.sh snapshot [study|sweeps|tails|crosskernel ...]
#                                 finished runs -> docs/results/in_progress/ (with the pair tests
#                                 so far); name the stages not yet published (default: all)
# Training runs from a git worktree of one commit (CODE; default /tmp/linarena-reruns, made at
# HEAD if missing), so that edits to this checkout never reach a running job; the runs go to
# this checkout's outputs/, outside the worktree, so every sitting labels a sweep alike. The
# tails and the cross-kernel check read the study as this checkout publishes it
# (docs/results/mqar_state_size_runs.csv), with code of its commit or later: point CODE at a
# worktree of such a commit. The
# sweeps publish tokens/s: run nothing beside them. `nice` alone does not make a command yield
# to them where the kernel groups processes by session (/proc/sys/kernel/sched_autogroup_enabled
# is 1): run `echo 19 > /proc/self/autogroup` in the shell first, so its whole session yields;
# compare.py names a run whose tokens/s fell below half its other seeds'. Publishing the
# finished stages is reproduce_results.sh's job, resumed from these rows:
#   RESUME_FROM=docs/results/in_progress bash scripts/maintainer/reproduce_results.sh <stage>
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="$REPO/outputs"
KEEP="$REPO/docs/results/in_progress"
CODE="${CODE:-/tmp/linarena-reruns}"
STUDY="$OUT/studies/mqar_study_cpu"
RETRAINED="$OUT/studies/mqar_study_cpu_retrained"
stage() { echo "=== $(date -u +%FT%TZ) $*"; }
# --resume-from <file> where the file is there (a first sitting has none).
resume() { if [[ -f "$1" ]]; then echo "--resume-from $1"; fi; }
# The sweeps' commands, shared with reproduce_results.sh.
source "$REPO/scripts/maintainer/sweep_commands.sh"

train_study() {
    stage "state size, every width"
    python scripts/mqar_study.py --preset mqar_study_cpu --root "$STUDY" --jobs 2 \
        $(resume "$KEEP/mqar_state_size_runs.csv")
}

train_sweeps() {
    stage "sweeps: ListOps, then MQAR (one run at a time: tokens/s are each run's own)"
    run_line "$(listops_sweep "$OUT/sweeps" "$(resume "$KEEP/results_runs.csv")")"
    run_line "$(mqar_sweep "$OUT/sweeps" "$(resume "$KEEP/results_runs.csv")")"
}

# The tails continue the published study's runs; where their checkpoints are gone the runs are
# trained again into RETRAINED, apart from the study's folder, so that a run trained again on
# other kernels never stands in for its published row in a report of the study.
train_tails() {
    stage "step budget: the d_model 16 runs with the conv, continued 2,000 steps"
    python scripts/mqar_step_budget.py --preset mqar_study_cpu --widths 16 --short-conv 3 \
        --tail 2000 --tail-lr 0.1 --jobs 2 --study "$REPO/docs/results/mqar_state_size_runs.csv" \
        --study-root "$RETRAINED" --retrain-study --root "$OUT/studies/mqar_step_budget" \
        $(resume "$KEEP/mqar_step_budget_runs.csv") --out "$OUT/studies/report"
}

train_crosskernel() {
    stage "cross-kernel check of the published study: seeds 1-5 of its sample, path by path"
    python scripts/maintainer/cross_kernel_check.py --jobs 2 --seeds 1 2 3 4 5 \
        --runs "$REPO/docs/results/mqar_state_size_runs.csv" --root "$OUT/studies/cross_kernel" \
        $(resume "$KEEP/cross_kernel.csv")
}

snapshot_study() {
    if [[ -d "$STUDY" || -f "$KEEP/mqar_state_size_runs.csv" ]]; then
        python scripts/mqar_study.py --preset mqar_study_cpu --root "$STUDY" --report-only \
            $(resume "$KEEP/mqar_state_size_runs.csv") --out "$KEEP"
        # its pairs (Fisher's test), for readings of the columns already complete
        python scripts/maintainer/study_pairs.py --folder "$KEEP"
    fi
}

snapshot_sweeps() {
    if [[ -d "$OUT/sweeps" || -f "$KEEP/results_runs.csv" ]]; then
        mkdir -p "$OUT/sweeps"
        python scripts/compare.py --runs outputs/sweeps $(resume "$KEEP/results_runs.csv") \
            --published --out "$KEEP" \
            --note "PARTIAL: the runs finished so far (n = seeds so far)"
        python scripts/maintainer/pairwise_tests.py --runs "$KEEP/results_runs.csv" --out "$KEEP"
    fi
}

snapshot_tails() {
    if [[ -d "$OUT/studies/mqar_step_budget" ]]; then
        python scripts/mqar_step_budget.py --preset mqar_study_cpu --widths 16 --short-conv 3 \
            --tail 2000 --tail-lr 0.1 --study docs/results/mqar_state_size_runs.csv \
            --study-root "$RETRAINED" --root "$OUT/studies/mqar_step_budget" \
            $(resume "$KEEP/mqar_step_budget_runs.csv") --report-only --out "$KEEP"
    fi
}

snapshot_crosskernel() {
    if [[ -d "$OUT/studies/cross_kernel" || -f "$KEEP/cross_kernel.csv" ]]; then
        python scripts/maintainer/cross_kernel_check.py --seeds 1 2 3 4 5 --report-only \
            --root "$OUT/studies/cross_kernel" $(resume "$KEEP/cross_kernel.csv") --out "$KEEP"
    fi
}

usage="usage: bash scripts/maintainer/reruns.sh train|snapshot [study|sweeps|tails|crosskernel ...]"
what="${1:-}"
[[ "$what" == train || "$what" == snapshot ]] || { echo "$usage" >&2; exit 2; }
shift
stages=("$@")
[[ $# -gt 0 ]] || stages=(study sweeps tails crosskernel)
for one in "${stages[@]}"; do
    case "$one" in
        study|sweeps|tails|crosskernel) ;;
        *) echo "reruns.sh: unknown stage '$one' (study, sweeps, tails, crosskernel)" >&2; exit 2 ;;
    esac
done
if [[ "$what" == snapshot ]]; then
    cd "$REPO"
    for one in "${stages[@]}"; do "snapshot_$one"; done
    exit 0
fi
[[ -d "$CODE" ]] || git -C "$REPO" worktree add --detach "$CODE" HEAD
cd "$CODE"
export PYTHONPATH="$CODE/src"
for one in "${stages[@]}"; do "train_$one"; done
stage "done"
