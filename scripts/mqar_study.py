"""MQAR recall against state size: run the study of a preset, then write its CSV and figure.

Every attention of conf/attention/ at every width, short-conv setting, learning rate and seed
of the preset's `study:` block (or, with its lr_seed set, every lr at that seed and the other
seeds at the lr it chose), one train.py run each in <root>/<run id>/; finished runs are skipped,
so the same command resumes an interrupted study; with --resume-from <the runs CSV it wrote>
the runs listed there count as finished too, so a study spans sessions or machines through its
committed CSV (each row names the commit that trained it). One console line per finished run (result,
ETA); each point's train.py output goes to <root>/<point>/console.log. Then, from the runs'
summary.json files: <out>/<name>_runs.csv (every run), <name>.csv (per attention, short conv and
width: the lr chosen on validation, the median test accuracy over seeds and the seeds that
reached 90%), <name>.md (that table) and <name>.png (the figure, every seed drawn), each with its
provenance record in <out>/provenance.json.

    python scripts/mqar_study.py --preset mqar_study_cpu --jobs 2
    python scripts/mqar_study.py --preset mqar_study_cpu --report-only --out docs/results
    python scripts/mqar_study.py --preset mqar_study_gpu --jobs 8 --threads 2
    python scripts/mqar_study.py --jobs 2 study.short_conv=[3] trainer.max_steps=3000
    python scripts/mqar_study.py --preset mqar_study_cpu --jobs 2 --root results/mqar_study \
        --out docs/results --resume-from docs/results/mqar_state_size_runs.csv

Overrides of the study: block (study.widths=..., study.seeds=..., study.lr_seed=null) change the
grid; the others go to every train.py run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from linarena.analysis.mqar_plot import plot_state_size
from linarena.analysis.mqar_results import (
    RECALL_THRESHOLD,
    accuracy_table,
    load_archive,
    summarize,
)
from linarena.analysis.mqar_study import load_grid, preset_protocol, run_study, study_runs
from linarena.analysis.provenance import command_line, record
from linarena.attention.variants import label, variant_names
from linarena.errors import LinarenaError
from linarena.files import write_atomic, write_text_atomic

REPO_ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="mqar_study_cpu",
                        help="a conf/experiment/ preset with a study: block")
    parser.add_argument("--root", type=Path, default=None,
                        help="folder of the run folders (default outputs/<preset>)")
    parser.add_argument("--attention", nargs="+", default=None,
                        help="only these variants (default: every file of conf/attention/)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--report-only", action="store_true", help="do not train; report only")
    parser.add_argument("--out", type=Path, default=None,
                        help="where the CSV, table and figure go (default <root>)")
    parser.add_argument("--name", default="mqar_state_size", help="file name stem of the outputs")
    parser.add_argument("--resume-from", type=Path, default=None,
                        help="a runs CSV this study wrote (<name>_runs.csv): its runs count as "
                             "finished and go into the report")
    parser.add_argument("overrides", nargs="*", help="extra train.py overrides for every run")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = args.root or REPO_ROOT / "outputs" / args.preset
    out = args.out or root
    try:
        grid = load_grid(args.preset, [o for o in args.overrides if o.startswith("study.")])
        archived = None
        if args.resume_from is not None:
            protocol = preset_protocol(args.preset, args.overrides)
            archived = load_archive(args.resume_from, protocol)
        if not args.report_only:
            counts = run_study(args.preset, root, args.attention, args.jobs, args.threads,
                               args.overrides, archived)
            print(f"outcomes: {counts}", flush=True)
        runs = study_runs(root, archived)
    except (LinarenaError, ValueError, FileNotFoundError) as error:
        print(f"mqar_study.py: error: {error}", file=sys.stderr)
        return 2
    summary = summarize(runs, grid["lr_seed"])
    expected = len(grid["lrs"])
    absent = not_run(summary, grid, args.attention or variant_names())
    partial = bool((summary["lrs_tried"] < expected).any()
                   or (summary["seeds"] < len(grid["seeds"])).any() or absent)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{args.name}{suffix}" for suffix in ("_runs.csv", ".csv", ".md", ".png")]
    write_atomic(paths[0], lambda f: runs.to_csv(f, index=False))
    write_atomic(paths[1], lambda f: summary.to_csv(f, index=False))
    write_text_atomic(paths[2], caption(runs, summary, grid, partial, absent)
                      + accuracy_table(summary))
    first = runs.iloc[0]
    title = (f"MQAR, vocab {first['vocab_size']}, length {first['seq_len']}, "
             f"{first['num_pairs']} pairs; median of {len(grid['seeds'])} seeds (line), "
             "every seed (points)")
    plot_state_size(summary, runs, paths[3], title=title)
    record(paths, command_line(__file__, argv))
    print(f"{len(runs)} runs -> {paths[1]}, {paths[3]}" + (" (partial)" if partial else ""))
    return 0


def not_run(summary, grid: dict, attentions: list[str]) -> list[str]:
    """What the grid has and the study has not finished a point of yet: an attention's label
    when none of its points is, else the label with the short-conv settings (and widths, when
    not every width of one is missing) left."""
    have = set(zip(summary["attention"], summary["short_conv"], summary["d_model"], strict=True))
    absent = []
    for name in attentions:
        left = {conv: [w for w in grid["widths"] if (name, conv, w) not in have]
                for conv in grid["short_conv"]}
        if all(len(widths) == len(grid["widths"]) for widths in left.values()):
            absent.append(label(name))
            continue
        parts = [(f"conv {conv}" if conv else "without conv")
                 + ("" if len(widths) == len(grid["widths"])
                    else " at d=" + ", ".join(map(str, widths)))
                 for conv, widths in left.items() if widths]
        if parts:
            absent.append(f"{label(name)} {' and '.join(parts)}")
    return absent


def caption(runs, summary, grid: dict, partial: bool, absent: list[str]) -> str:
    """What the table shows and how it was chosen, above it in <name>.md."""
    first = runs.iloc[0]
    lr_rule = ("on seed {}'s runs; the other seeds ran at that lr only".format(grid["lr_seed"])
               if grid["lr_seed"] is not None else "on the median over seeds")
    text = (f"MQAR, vocab {first['vocab_size']}, length {first['seq_len']}, "
            f"{first['num_pairs']} pairs, {first['num_layers']} layers, at most "
            f"{first['max_steps']} steps (early stop at val acc 0.99); seeds {grid['seeds']}; "
            f"lrs {grid['lrs']}.\n\nEach cell: median test accuracy (%) over seeds at the lr "
            f"with the best validation accuracy (chosen {lr_rule}; ties to the lower lr; test "
            f"accuracy never read), and (k/n) the seeds whose test accuracy reached "
            f"{100 * RECALL_THRESHOLD:.0f}%. Median step of the best validation accuracy: "
            f"{summary['best_step_median'].median():.0f} of at most {first['max_steps']}.\n\n")
    if partial:
        left = f" Not finished yet: {'; '.join(absent)}." if absent else ""
        text = (f"PARTIAL: the study has not finished. Rows with fewer than "
                f"{len(grid['lrs'])} lrs tried or {len(grid['seeds'])} seeds are incomplete."
                f"{left}\n\n" + text)
    return text

if __name__ == "__main__":
    sys.exit(main())
