"""Self-pretraining against fine-tuning: tokens/s of one pretraining step (pretrain_step) beside
one fine-tuning step (model_step) of the same model, round-robin in one process.

For each setting (task, length, batch), objective and attention: the model `python train.py
data=<task>` trains (conf/model's sizes, the task's vocabulary), one step of each case
(linarena.analysis.bench_pretrain: pretrain_step runs the training's PretrainModule, masking
and LM head; model_step is benchmark_model.py's), timed in alternating rounds so that the load
of a shared machine falls on both alike. Writes ``benchmark_pretrain.csv`` to ``--out``: per
case the median and the fastest step, tokens/s (real tokens, batch x length, from the median),
and on the pretrain_step row its tokens/s over model_step's (vs_model_step: the median over the
rounds of the ratio within a round; vs_model_step_min: from the fastest steps).

    OMP_NUM_THREADS=2 python scripts/benchmark_pretrain.py --out docs/results
    python scripts/benchmark_pretrain.py --attentions softmax,elu --settings listops_small:128:32
    python scripts/benchmark_pretrain.py --objectives lm   # causal models, pretrain=lm
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path
from typing import NamedTuple

import torch

from linarena.analysis.bench_args import (
    OUTPUT_DIR,
    REPO_ROOT,
    check_device,
    check_out,
    non_negative_int,
    positive_float,
    positive_int,
)
from linarena.analysis.bench_cases import PRETRAIN_STEP, CaseSpec
from linarena.analysis.bench_pretrain import MIN_ROUNDS, PAIR, task_shape, time_pair
from linarena.analysis.bench_runner import exit_code, write_csv_atomic
from linarena.analysis.provenance import command_line, record, with_env
from linarena.attention.engine.backend import BACKENDS
from linarena.attention.variants import check_variant_names
from linarena.training.pretrain_config import LM, MLM

DEFAULT_ATTENTIONS = "softmax,elu,gla,gated_deltanet_layer,mamba2_layer,hgrn2_layer"
# The default run's task at its length and batch (conf/data/listops_small.yaml), and the longest
# length benchmark_model.csv publishes, with the task of that length (Path-X, 50% masked).
DEFAULT_SETTINGS = ("listops_small:128:32", "pathx:16384:1")
COLUMNS = ["attention", "task", "objective", "mask_fraction", "length", "what", "batch",
           "device", "dtype", "threads", "rounds", "ms", "min_ms", "tokens_per_sec",
           "vs_model_step", "vs_model_step_min", "peak_memory_mb", "backend", "status", "note"]
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


class Setting(NamedTuple):  # not a dataclass: the tests load this script without a module
    task: str
    length: int
    batch: int


def setting_arg(text: str) -> Setting:
    """TASK:LENGTH[:BATCH], e.g. listops_small:128:32 (batch 1 when left out)."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0]:
        raise argparse.ArgumentTypeError(f"expected TASK:LENGTH[:BATCH], got {text!r}")
    return Setting(parts[0], positive_int(parts[1]), positive_int(parts[2]) if parts[2:] else 1)


def names(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attentions", type=names, default=names(DEFAULT_ATTENTIONS),
                        help=f"names of conf/attention/*.yaml (default {DEFAULT_ATTENTIONS})")
    parser.add_argument("--settings", type=setting_arg, nargs="+",
                        default=[setting_arg(s) for s in DEFAULT_SETTINGS],
                        help="TASK:LENGTH[:BATCH] each, a conf/data name (default "
                             f"{' '.join(DEFAULT_SETTINGS)})")
    parser.add_argument("--objectives", type=names, default=[MLM],
                        help="mlm (bidirectional model) and/or lm (causal, mean pooling)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default=None,
                        help="bf16 autocast (default on CUDA) or fp32 (default on CPU)")
    parser.add_argument("--threads", type=positive_int, default=torch.get_num_threads(),
                        help="torch CPU threads (default: torch's)")
    parser.add_argument("--warmup", type=non_negative_int, default=1,
                        help="untimed calls of each case first (at least 1 is made)")
    parser.add_argument("--repeats", type=positive_int, default=9,
                        help="timed rounds, one call of each case per round")
    parser.add_argument("--max-seconds", type=positive_float, default=None,
                        help="stop a pair's rounds once they took this long (at least "
                             f"{MIN_ROUNDS} rounds; the CSV's rounds column says how many)")
    parser.add_argument("--backend", choices=BACKENDS, default="auto",
                        help="attention.backend of every layer")
    parser.add_argument("--tiny", action="store_true",
                        help="the tiny model of the tests, with each task's vocabulary")
    parser.add_argument("--conf-dir", type=Path, default=REPO_ROOT / "conf")
    parser.add_argument("--out", type=Path, default=OUTPUT_DIR,
                        help="folder for benchmark_pretrain.csv (default outputs/benchmarks/)")
    args = parser.parse_args(argv)
    try:
        args.attentions = check_variant_names(args.attentions, args.conf_dir)
    except ValueError as error:
        parser.error(f"--attentions: {error}")
    unknown = sorted(set(args.objectives) - {MLM, LM})
    if unknown or not args.objectives:
        parser.error(f"--objectives: {unknown or 'none given'}; use mlm and/or lm")
    for setting in args.settings:
        if not (args.conf_dir / "data" / f"{setting.task}.yaml").is_file():
            parser.error(f"--settings: no task {setting.task!r} (no "
                         f"{args.conf_dir}/data/{setting.task}.yaml)")
    on_cuda = check_device(parser, args.device).type == "cuda"
    args.dtype = DTYPES[args.dtype or ("bf16" if on_cuda else "fp32")]
    args.out = check_out(parser, args.out)
    return args


def measure(args: argparse.Namespace, setting: Setting, goal: str, attention: str) -> list[dict]:
    """The two rows (model_step, pretrain_step) of one attention in one setting."""
    shape, fraction = task_shape(setting.task, goal == LM, args.conf_dir, args.tiny)
    spec = CaseSpec(attention=attention, length=setting.length, what=PRETRAIN_STEP,
                    batch=setting.batch, device=args.device, dtype=args.dtype,
                    threads=args.threads, warmup=args.warmup, repeats=args.repeats,
                    shape=shape, conf_dir=str(args.conf_dir.resolve()), backend=args.backend,
                    mask_fraction=fraction)
    fields = {"attention": attention, "task": setting.task, "objective": goal,
              "mask_fraction": fraction, "length": setting.length, "batch": setting.batch,
              "device": args.device, "dtype": args.dtype, "threads": args.threads}
    try:
        results = time_pair(spec, args.max_seconds)
    except Exception as error:  # one broken case must not lose the others' results
        traceback.print_exc()
        note = f"{type(error).__name__}: {error}"[:300]
        results = {what: {"rounds": 0, "status": "error", "note": note} for what in PAIR}
    return [fields | {"what": what} | results[what] for what in PAIR]


def describe(rows: list[dict]) -> str:
    base, pre = rows
    head = f"{base['attention']:<22} {base['task']:<14} L={base['length']:<6} {base['objective']}"
    if pre["status"] != "ok" or base["status"] != "ok":
        return f"{head} {base['status']}/{pre['status']}: {base.get('note') or pre.get('note')}"
    return (f"{head} model_step {base['ms']:9.1f} ms (min {base['min_ms']:9.1f})  pretrain_step "
            f"{pre['ms']:9.1f} ms (min {pre['min_ms']:9.1f})  pretrain/fine-tune tokens/s "
            f"{pre['vs_model_step']:.3f} (min {pre['vs_model_step_min']:.3f})")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    csv_path = args.out / "benchmark_pretrain.csv"
    rows: list[dict] = []
    for setting in args.settings:
        for goal in args.objectives:
            for attention in args.attentions:
                pair = measure(args, setting, goal, attention)
                print(describe(pair), flush=True)
                rows += pair
                write_csv_atomic(rows, csv_path, COLUMNS)
    record([csv_path], with_env(command_line(__file__, argv)))
    print(f"wrote {csv_path}")
    return exit_code(rows)


if __name__ == "__main__":
    sys.exit(main())
