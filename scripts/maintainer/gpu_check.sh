#!/usr/bin/env bash
# One GPU check in under 8 minutes, for when a GPU is lent:
#   1. attention benchmark (scripts/benchmark_attention.py), bf16, non-causal;
#   2. full-model benchmark (scripts/benchmark_model.py), bf16, batch 32, 1K-16K;
#   3. a 25-second ListOps training of each attention variant in conf/attention/ (train.py
#      data=listops_small trainer=gpu logger=csv; the data generated first), then
#      scripts/compare.py over those runs;
#   4. backend="fla" against backend="torch", for the ops and for every recurrent layer
#      (tests/attention/test_ops_fla.py, tests/attention/test_attention_backend.py; needs `pip install -e .[dev,fla]`,
#      else skipped);
#   5. if time is left: the attention benchmark in causal mode, where --backend auto runs fla's
#      kernels for the recurrences (its `backend` column says which code ran) against SDPA.
# Every stage has its own time limit (timeout) inside an overall budget, and a failing stage
# does not stop the others. Run from anywhere, after `pip install -e .`:
#   bash scripts/maintainer/gpu_check.sh
# Output: $OUT if set, else outputs/gpu_check/: gpu_check.log, the benchmark CSVs and PNG,
# compare_results.md, and gpu_check.tar.gz with everything (training folders included).
# Few files on purpose (some machines return at most 8 files from $OUT).
set -u -o pipefail

if [[ -n "${OUT:-}" ]]; then
    mkdir -p "$OUT" && DEST="$(cd "$OUT" && pwd)"  # absolute: the script changes folder next
fi
cd "$(dirname "$0")/../.."
DEST="${DEST:-$(pwd)/outputs/gpu_check}"
PYTHON="${PYTHON:-python3}"
BUDGET_S="${GPU_CHECK_BUDGET_S:-465}"  # whole script, packing included, stays under 8 minutes
WORK="$(mktemp -d "${TMPDIR:-/tmp}/linarena_gpu_check.XXXXXX")"
LOG="$WORK/gpu_check.log"
START_S=$SECONDS
export PYTHONUNBUFFERED=1 HYDRA_FULL_ERROR=1 WANDB_MODE=offline WANDB_SILENT=true
mkdir -p "$DEST"
STATUS=()

log() { echo "[gpu_check $((SECONDS - START_S))s] $*" | tee -a "$LOG"; }

# run_stage NAME CAP_SECONDS MIN_SECONDS CMD...: runs CMD with a time limit of
# min(CAP, what is left of the budget), or skips it when less than MIN_SECONDS is left.
run_stage() {
    local name=$1 cap=$2 min=$3
    shift 3
    local left=$((BUDGET_S - 20 - (SECONDS - START_S)))  # 20 s kept for packing
    local limit=$((cap < left ? cap : left))
    if ((limit < min)); then
        log "SKIP $name: ${left}s left of the budget, needs ${min}s"
        STATUS+=("$name: skipped (budget)")
        return
    fi
    log "START $name (limit ${limit}s): $*"
    timeout --signal=TERM --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$LOG"
    local code=$?
    case $code in
        0) STATUS+=("$name: ok") ;;
        124 | 137) STATUS+=("$name: TIMED OUT after ${limit}s") ;;
        *) STATUS+=("$name: FAILED (exit $code)") ;;
    esac
    log "END $name: ${STATUS[-1]}"
}

log "repo $(pwd), work folder $WORK, output $DEST"
if ! "$PYTHON" - <<'EOF' 2>&1 | tee -a "$LOG"; then
import importlib.util, sys
missing = [m for m in ("torch", "lightning", "hydra", "omegaconf", "wandb", "matplotlib",
                       "pandas", "linarena") if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"missing Python packages {missing}: run `pip install -e .` in the repo first")
import torch
if not torch.cuda.is_available():
    sys.exit("torch.cuda.is_available() is False: this script needs a CUDA GPU")
print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, "
      f"{torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB")
EOF
    log "environment check failed; nothing was run"
    cp "$LOG" "$DEST/gpu_check.log"
    exit 1
fi
# The variants are the files of conf/attention/, in the registry's order.
read -r -a ATTENTIONS < <("$PYTHON" -c \
    "from linarena.attention.variants import variant_names; print(*variant_names())")
log "attention variants: ${ATTENTIONS[*]}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 \
    | tee -a "$LOG"

run_stage benchmark_attention 45 20 \
    "$PYTHON" scripts/benchmark_attention.py --device cuda --dtype bf16 --batch 8 --heads 4 \
    --head-dim 64 --lengths 1024 2048 4096 8192 16384 --out "$WORK/benchmark_attention.csv"

run_stage benchmark_model 90 30 \
    "$PYTHON" scripts/benchmark_model.py --device cuda --dtype bf16 --batch 32 --warmup 2 \
    --repeats 5 --lengths 1024,2048,4096,8192,16384 --out "$WORK/benchmark_model"

# Generated once into data/ (cached), so that no training spends its minute generating.
run_stage prepare_listops_small 60 15 "$PYTHON" scripts/prepare_data.py data=listops_small

# 25 s of fitting (Lightning's max_time) plus start-up, validation and testing.
for attention in "${ATTENTIONS[@]}"; do
    run_stage "train_$attention" 45 35 \
        "$PYTHON" train.py "attention=$attention" data=listops_small trainer=gpu \
        +trainer.max_time=00:00:00:25 logger=csv seed=1 \
        "hydra.run.dir=$WORK/train/$attention"
done
run_stage compare 30 10 \
    "$PYTHON" scripts/compare.py --runs "$WORK/train" --out "$WORK/compare" --published

run_stage fla_backend 60 20 "$PYTHON" -m pytest -q -rs -n 0 -p no:cacheprovider tests/attention/test_ops_fla.py \
    tests/attention/test_attention_backend.py

run_stage benchmark_attention_causal 40 20 \
    "$PYTHON" scripts/benchmark_attention.py --device cuda --dtype bf16 --batch 8 --heads 4 \
    --head-dim 64 --causal --lengths 1024 2048 4096 8192 16384 \
    --out "$WORK/benchmark_attention_causal.csv"

log "summary:"
for line in "${STATUS[@]}"; do log "  $line"; done
for file in benchmark_attention.csv benchmark_attention_causal.csv \
    benchmark_model/benchmark_model.csv benchmark_model/benchmark_model.png; do
    [[ -f "$WORK/$file" ]] && cp "$WORK/$file" "$DEST/"
done
[[ -f "$WORK/compare/results.md" ]] && cp "$WORK/compare/results.md" "$DEST/compare_results.md"
log "done in $((SECONDS - START_S))s; results in $DEST"
cp "$LOG" "$DEST/gpu_check.log"
tar -czf "$DEST/gpu_check.tar.gz" --exclude="*.ckpt" -C "$WORK" .
