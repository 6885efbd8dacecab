#!/usr/bin/env bash
# Reproduce every measured number in the README's Results section, on this machine:
#   bash scripts/reproduce_results.sh            (about two hours on 2 CPU cores)
# Writes everything under results/ (git-ignored); the README quotes the printed tables.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p results
# Every variant of conf/attention/, comma-separated for Hydra's multirun.
ATTENTIONS="$(python -c "from linarena.attention.variants import variant_names; print(','.join(variant_names()))")"

echo "== attention alone, bidirectional and causal"
python scripts/benchmark_attention.py --out results/benchmark_attention.csv
python scripts/benchmark_attention.py --causal --lengths 1024 4096 16384 \
    --out results/benchmark_attention_causal.csv

echo "== full training step of the LRA text model"
python scripts/benchmark_model.py --out results/benchmark_model

echo "== small-budget ListOps: every attention x 3 seeds (listops_small, 300 steps)"
python train.py -m "attention=$ATTENTIONS" seed=1,2,3 \
    trainer.max_steps=300 tags=[readme] hydra.sweep.dir=results/sweeps/listops

echo "== small-budget MQAR: every attention x 3 seeds (experiment=mqar_cpu)"
python train.py -m experiment=mqar_cpu "attention=$ATTENTIONS" seed=1,2,3 \
    tags=[readme] hydra.sweep.dir=results/sweeps/mqar

echo "== MQAR recall against state size, with and without a short conv (about an hour)"
python scripts/mqar_study.py --preset mqar_study_cpu --jobs 2 --root results/mqar_study \
    --out results/mqar_study

echo "== comparison table and plots"
python scripts/compare.py --runs results/sweeps --published --out results/compare
