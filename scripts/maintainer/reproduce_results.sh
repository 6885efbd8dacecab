#!/usr/bin/env bash
# Reproduce every committed result in docs/results/ (the files the README's tables are made
# from), with the commands, seeds and output paths that made them, then regenerate the tables:
#   bash scripts/maintainer/reproduce_results.sh         everything (CPU: see the README for times)
#   bash scripts/maintainer/reproduce_results.sh bench   only the benchmarks (also: quickstart,
#                                                        sweeps, study, crosskernel, mixture)
# Each script writes its files' provenance records (docs/results/provenance.json: commit,
# command, environment). Run it on a clean checkout: a record notes uncommitted changes. The
# training runs behind the published files go to outputs/ (sweeps/, studies/), as any local run.
# A rerun that spanned sittings (scripts/maintainer/reruns.sh) publishes with
#   RESUME_FROM=docs/results/in_progress bash scripts/maintainer/reproduce_results.sh sweeps
# so that each stage also counts the runs committed there (--resume-from <its runs CSV>).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=docs/results
WHAT="${1:-all}"
RESUME_FROM="${RESUME_FROM:-}"
# --resume-from <RESUME_FROM>/<file> where RESUME_FROM is set and holds the file.
resume() { if [[ -n "$RESUME_FROM" && -f "$RESUME_FROM/$1" ]]; then echo "--resume-from $RESUME_FROM/$1"; fi; }
# The sweeps' commands, shared with reruns.sh.
source scripts/maintainer/sweep_commands.sh
# Every variant of conf/attention/, comma-separated for Hydra's multirun.
ATTENTIONS="$(python -c "from linarena.attention.variants import variant_names; print(','.join(variant_names()))")"

if [[ "$WHAT" == all || "$WHAT" == quickstart ]]; then
    echo "== the Quick start's default run, timed from nothing (run it on an idle machine)"
    python scripts/maintainer/default_run.py --out "$OUT"
fi

if [[ "$WHAT" == all || "$WHAT" == bench ]]; then
    # The attention benchmark times performer-pytorch beside linarena's Performer: without the
    # `bench` extra that column (and the error table's performer-pytorch columns) would be
    # missing from the committed files, so stop instead of writing different files.
    if ! python -c "import performer_pytorch" 2>/dev/null; then
        echo "ERROR: performer-pytorch is not installed, so the attention benchmark would drop" >&2
        echo "its performer-pytorch columns. Install it: pip install -e '.[bench]'" >&2
        exit 1
    fi
    echo "== attention alone, bidirectional and causal"
    python scripts/benchmark_attention.py --out "$OUT/benchmark_attention.csv"
    python scripts/benchmark_attention.py --causal --out "$OUT/benchmark_attention_causal.csv"
    echo "== full training step of the LRA text model"
    python scripts/benchmark_model.py --out "$OUT"
fi

if [[ "$WHAT" == all || "$WHAT" == sweeps ]]; then
    echo "== small-budget sweeps: listops_small 300 steps, every attention x seeds 1-10 (5"
    echo "   against 5 cannot separate any of its 153 pairs); mqar_cpu, seeds 1-5, 6-10 where they"
    echo "   split (resumable; one run at a time, 2 threads: tokens/s and memory each run's alone)"
    LISTOPS="$(listops_sweep outputs/sweeps "$(resume results_runs.csv)")"
    MQAR="$(mqar_sweep outputs/sweeps "$(resume results_runs.csv)")"
    mkdir -p outputs/sweeps
    run_line "$LISTOPS"
    run_line "$MQAR"
    python scripts/compare.py --runs outputs/sweeps $(resume results_runs.csv) --published \
        --out "$OUT" --runs-command "$LISTOPS; $MQAR"
    python scripts/maintainer/pairwise_tests.py --out "$OUT"
fi

if [[ "$WHAT" == all || "$WHAT" == study ]]; then
    echo "== MQAR recall against state size: lr on seeds 1-2, 5 seeds, 10 where split (resumable)"
    python scripts/mqar_study.py --preset mqar_study_cpu --jobs 2 \
        $(resume mqar_state_size_runs.csv) --out "$OUT"
    echo "== was 2,000 steps enough? the d_model 16 runs with the conv continued 2,000 more"
    echo "   steps at a constant 0.1 x their lr, from their own last checkpoints (trained again"
    echo "   where they are gone; each tail is compared with the run it continued)"
    python scripts/mqar_step_budget.py --preset mqar_study_cpu --widths 16 --short-conv 3 \
        --tail 2000 --tail-lr 0.1 --jobs 2 --study "$OUT/mqar_state_size_runs.csv" \
        --retrain-study $(resume mqar_step_budget_runs.csv) --out "$OUT"
fi

if [[ "$WHAT" == all || "$WHAT" == crosskernel ]]; then
    echo "== cross-kernel check of the published state-size study: every split point and the"
    echo "   points nearest 90%, seeds 1-5, under ATen's default and AVX2 kernels (resumable)"
    python scripts/maintainer/cross_kernel_check.py --jobs 2 --seeds 1 2 3 4 5 \
        $(resume cross_kernel.csv) --out "$OUT"
fi

if [[ "$WHAT" == all || "$WHAT" == mixture ]]; then
    echo "== MQAR on a mixture of (length, pairs), tested up to 4x the training length: every"
    echo "   attention with positions none and rope, 5 seeds, 10 where they split (resumable)"
    python scripts/mqar_mixture.py --preset mqar_mixture_cpu --jobs 2 \
        $(resume mqar_mixture_runs.csv) --out "$OUT"
    echo "   the share of each test setting's queries a window of 64 tokens reaches"
    python scripts/maintainer/mqar_window_reach.py --out "$OUT"
fi

echo "== the README's predictions against the state-size and mixture tables"
python scripts/maintainer/check_predictions.py --out "$OUT"
echo "== which pairs of study points the seeds separate (Fisher's exact test)"
python scripts/maintainer/study_pairs.py --out "$OUT"
echo "== README tables from the CSVs"
python scripts/maintainer/results_tables.py
python scripts/maintainer/provenance.py
