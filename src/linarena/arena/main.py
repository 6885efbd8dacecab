"""python -m linarena.arena attention=<name> [--budget quick|standard|full] ...: a variant's
report card against the published field (certificate, cost, MQAR state size, ListOps, the MQAR
mixture beyond the training lengths), one Markdown file and one self-contained HTML page with a
provenance record.

Resumable: the certificate and the cost are kept in <root> (certificate.json, cost.csv) and
reused when asked again with the same settings; the training runs are the studies' (a run with a
summary.json is finished), so the same command continues where it stopped. Every training run
of one card is in the W&B group arena_<name> (--wandb turns the logger on).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from linarena.analysis.bench_args import positive_float, positive_int
from linarena.analysis.provenance import record, with_env
from linarena.arena import budget as budgets
from linarena.arena.card import Card, certificate_section, html_page, markdown
from linarena.arena.certificate import LONG_LENGTH, certify_parts
from linarena.arena.checks import FAIL, Row, summary_line
from linarena.arena.comparisons import (
    listops_comparison,
    machines,
    mixture_comparison,
    published_listops,
    published_mixture,
    published_state_size,
    state_size_comparison,
)
from linarena.arena.cost import state_per_layer, time_variants
from linarena.arena.figures import state_size_figure, throughput_figure
from linarena.arena.sections import (
    cost_section,
    listops_section,
    mixture_section,
    state_size_section,
)
from linarena.arena.subject import Subject, parse_subject
from linarena.arena.training import (
    listops_runs,
    mixture_grid,
    mixture_runs,
    run_listops,
    run_mixture,
    run_state_size,
    state_size_columns,
    state_size_grid,
    state_size_runs,
)
from linarena.attention.patterns import pattern_label
from linarena.attention.variants import CONF_DIR
from linarena.files import write_atomic, write_bytes_atomic, write_text_atomic
from linarena.studies.cli import STUDY_ERRORS, fail
from linarena.studies.seed_sweep import LISTOPS_THREADS
from linarena.studies.state_size_report import summarize
from linarena.system import REPO_ROOT


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m linarena.arena", description=__doc__
                                     .split("\n\n")[0])
    parser.add_argument("overrides", nargs="+", help="attention=<name> or model.pattern=[...], "
                        "then attention.<setting>=<value> if any, and study.* overrides of "
                        "the grids (state size: e.g. study.lrs=[0.01]; mixture: "
                        "study.positions=[none]; both: study.seeds=[1,2])")
    parser.add_argument("--budget", choices=sorted(budgets.BUDGETS), default="quick")
    parser.add_argument("--sections", nargs="+", choices=budgets.SECTIONS,
                        help="these sections instead of the budget's")
    parser.add_argument("--lengths", type=positive_int, nargs="+", help="the cost's lengths")
    parser.add_argument("--widths", type=positive_int, nargs="+", help="state-size d_models")
    parser.add_argument("--short-conv", type=int, nargs="+", dest="short_convs",
                        help="state-size model.short_conv settings (default: the budget's)")
    parser.add_argument("--listops-seeds", type=positive_int, nargs="+")
    parser.add_argument("--long-length", type=positive_int, default=LONG_LENGTH,
                        help="the autocast checks' length")
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed calls per case")
    parser.add_argument("--max-seconds", type=positive_float, default=30.0,
                        help="skip a length whose predicted fwd+bwd call takes longer")
    parser.add_argument("--causal", action="store_true", help="time the causal mode")
    parser.add_argument("--jobs", type=positive_int, default=2,
                        help="state-size and mixture runs at a time")
    parser.add_argument("--max-hours", type=positive_float, default=1.0,
                        help="refuse to start when the training may take more CPU-hours")
    parser.add_argument("--strict", action="store_true",
                        help="stop after the certificate when a check fails")
    parser.add_argument("--plan", action="store_true", help="print the estimate; run nothing")
    parser.add_argument("--wandb", action="store_true", help="log the runs to W&B")
    parser.add_argument("--root", type=Path, help="work folder (outputs/arena/<name>)")
    parser.add_argument("--out", type=Path, help="where the card goes (default --root)")
    return parser.parse_intermixed_args(argv)  # overrides may follow the options


# The study.* keys of each grid a card trains (seeds and more_seeds go to both).
STATE_SIZE_KEYS = ("widths", "short_conv", "lrs", "lr_seeds", "seeds", "more_seeds")
MIXTURE_KEYS = ("positions", "seeds", "more_seeds")


def _key(override: str) -> str:
    return override.partition("=")[0].removeprefix("study.")


def settings(args: argparse.Namespace, subject: Subject) -> argparse.Namespace:
    """The budget's sections and sizes, with the ones given explicitly instead."""
    chosen = budgets.BUDGETS[args.budget]
    study = [o for o in args.overrides if o.startswith("study.")]
    args.study = [o for o in study if _key(o) in STATE_SIZE_KEYS]
    args.mixture_study = [o for o in study if _key(o) in MIXTURE_KEYS]
    unknown = [o for o in study if o not in args.study + args.mixture_study]
    if unknown:
        raise ValueError(f"{unknown[0]}: the state-size grid takes study."
                         f"{{{','.join(STATE_SIZE_KEYS)}}} and the mixture study."
                         f"{{{','.join(MIXTURE_KEYS)}}}")
    args.sections = tuple(args.sections or chosen.sections)
    args.lengths = tuple(args.lengths or chosen.lengths)
    args.widths = tuple(args.widths or chosen.widths)
    args.listops_seeds = tuple(args.listops_seeds or chosen.listops_seeds)
    if args.short_convs is None and chosen.short_convs == "first" and \
            "state_size" in args.sections:
        grid = state_size_grid(subject, args.widths, study=args.study)
        args.short_convs = [next(c for c in grid["short_conv"] if subject.trains_at(c))]
    args.root = args.root or REPO_ROOT / "outputs" / "arena" / subject.name
    args.out = args.out or args.root
    return args


def estimate(args: argparse.Namespace, subject: Subject) -> float:
    """Print the training left per section; return its CPU-hours at most."""
    most_hours = 0.0
    if "state_size" in args.sections:
        grid = state_size_grid(subject, args.widths, args.short_convs, args.study)
        known, most, seconds = budgets.state_size_estimate(
            subject, grid, args.root / "state_size", published_state_size()[1])
        print(budgets.hours_line("state_size", known, most, seconds))
        most_hours += most * seconds / 3600
    if "listops" in args.sections:
        left, seconds = budgets.listops_estimate(subject, args.listops_seeds,
                                                 args.root / "listops", published_listops())
        print(budgets.hours_line("listops", left, left, seconds))
        most_hours += left * seconds / 3600
    if "mixture" in args.sections:
        known, most, seconds = budgets.mixture_estimate(
            subject, mixture_grid(args.mixture_study), args.root / "mixture",
            published_mixture())
        print(budgets.hours_line("mixture", known, most, seconds))
        most_hours += most * seconds / 3600
    print(f"training: at most {most_hours:.2f} CPU-hours (--max-hours {args.max_hours:g}); the "
          "certificate and the cost take minutes")
    return most_hours


def certificate(args: argparse.Namespace, subject: Subject) -> list[Row]:
    """The certificate's rows, from <root>/certificate.json when made with these settings."""
    path = args.root / "certificate.json"
    key = {"parts": list(subject.parts), "long_length": args.long_length}
    if path.is_file():
        kept = json.loads(path.read_text())
        if kept["key"] == key:
            print(f"certificate: finished ({path})")
            return [Row(**row) for row in kept["rows"]]
    print("certificate:", flush=True)
    rows = certify_parts(list(subject.parts), subject.conf_dir, args.long_length)
    write_text_atomic(path, json.dumps({"key": key, "rows": [r.as_dict() for r in rows]},
                                       indent=1))
    return rows


def cost(args: argparse.Namespace, subject: Subject) -> pd.DataFrame:
    """The timings, from <root>/cost.csv when made for these lengths and mode."""
    path = args.root / "cost.csv"
    if path.is_file():
        kept = pd.read_csv(path)
        if sorted(set(kept["length"])) == sorted(args.lengths) and \
                bool(kept["causal"].iloc[0]) == args.causal and "timed_as" in kept:
            print(f"cost: finished ({path})")
            return kept
    times = time_variants(list(subject.parts), args.lengths, args.causal, repeats=args.repeats,
                          max_seconds=args.max_seconds, conf_dir=subject.conf_dir)
    write_atomic(path, lambda f: times.to_csv(f, index=False))
    return times


def run(args: argparse.Namespace, subject: Subject, command: str) -> int:
    label = " + ".join(pattern_label(p) if subject.conf_dir == CONF_DIR else p
                       for p in subject.parts)
    card = Card(f"Report card: {label} (`{subject.name}`)")
    extra = [f"run_group=arena_{subject.name}", *(["logger=wandb"] if args.wandb else []),
             *([] if subject.conf_dir == CONF_DIR else
               [f"hydra.searchpath=[file://{subject.conf_dir}]"])]
    asked = list(dict.fromkeys(args.study + args.mixture_study))  # seeds go to both grids
    changed = f" with {' '.join(asked)}" if asked else ""
    opening = [f"What it shows: {', '.join(args.sections)} of `{subject.name}` "
               f"(budget {args.budget}{changed}), against the published rows of "
               "docs/results/ (never retrained here)."]
    rows: list[Row] = []
    if "certificate" in args.sections:
        rows = certificate(args, subject)
        card.sections.append(("Certificate", certificate_section(rows)))
        opening.append(f"Certificate: {summary_line(rows)}.")
        if args.strict and any(r.status == FAIL for r in rows):
            args.sections = ("certificate",)
            opening.append("--strict: the card stops at the failed certificate.")
    if "cost" in args.sections:
        times = cost(args, subject)
        width = 8 * 64
        states = [(f"d_model {width}, 8 heads, {n} tokens",
                   *state_per_layer(subject.parts, width, 8, n, subject.conf_dir))
                  for n in (max(args.lengths),)]
        for name in subject.parts:  # a hybrid: each of its variants, one layer of each kept
            body, line = cost_section(times, name, states, args.causal)
            alone = len(subject.parts) == 1
            card.sections.append((f"Cost{'' if alone else f' ({name})'}", body))
            opening.append(line if alone else line.replace("Cost:", f"Cost of {name}:", 1))
    if "state_size" in args.sections:
        grid = state_size_grid(subject, args.widths, args.short_convs, args.study)
        root = args.root / "state_size"
        run_state_size(subject, grid, root, args.jobs, extra)
        runs = state_size_runs(root)
        if runs is not None:
            runs = runs[runs["attention"] == subject.name]
            keep = set(state_size_columns(subject, grid))
            points = summarize(runs, grid)
            points = points[[(int(p.d_model), int(p.short_conv)) in keep
                             for p in points.itertuples()]]
            published, published_runs = published_state_size()
            found = {(int(p["d_model"]), int(p["short_conv"])):
                     state_size_comparison(p, published, published_runs)
                     for _, p in points.iterrows()}
            card.figures["state_size.png"] = state_size_figure(points, published, label)
            body, line = state_size_section(points, found, "state_size.png", machines(runs))
            card.sections.append(("MQAR recall against state size", body))
            opening.append(line)
    if "listops" in args.sections:
        root = args.root / "listops"
        run_listops(subject, args.listops_seeds, root, extra)
        runs = listops_runs(subject, args.listops_seeds, root)
        if len(runs):
            comparison = listops_comparison(subject.name, list(runs["test_acc"]),
                                            published_listops())
            card.figures["throughput.png"] = throughput_figure(runs, comparison, label)
            body, line = listops_section(runs, comparison, "throughput.png", LISTOPS_THREADS)
            card.sections.append(("Small-budget ListOps", body))
            opening.append(line)
    if "mixture" in args.sections:
        root = args.root / "mixture"
        run_mixture(subject, mixture_grid(args.mixture_study), root, args.jobs, extra)
        runs = mixture_runs(root)
        if runs is not None:
            body, line = mixture_section(runs, mixture_comparison(runs, published_mixture()))
            card.sections.append(("MQAR mixture: recall beyond the training lengths", body))
            opening.append(line)
    card.headline = [" ".join(opening)]
    return write_card(card, args.out, subject.name, command, rows)


def write_card(card: Card, out: Path, name: str, command: str, rows: list[Row]) -> int:
    """<out>/<name>_card.md, .html and the figures, with their provenance record; the exit
    status (1 when a check failed)."""
    out.mkdir(parents=True, exist_ok=True)
    figures = {f"{name}_card_{key}": png for key, png in card.figures.items()}
    text = markdown(card)
    for key in card.figures:
        text = text.replace(f"]({key})", f"]({name}_card_{key})")
    card.figures = figures
    paths = [out / f"{name}_card.md", out / f"{name}_card.html"]
    write_text_atomic(paths[0], text)
    write_text_atomic(paths[1], html_page(card, text))
    for figure, png in figures.items():
        write_bytes_atomic(out / figure, png)
        paths.append(out / figure)
    record(paths, command)
    print(f"card: {paths[0]}, {paths[1]}")
    return 1 if any(r.status == FAIL for r in rows) else 0


def main(argv: Sequence[str] | None = None, conf_dir: Path = CONF_DIR) -> int:
    """The command; `conf_dir`: where the subject's variant files are (a test's own)."""
    args = parse_args(argv)
    command = with_env(" ".join(["python -m linarena.arena",
                                 *map(shlex.quote, sys.argv[1:] if argv is None else argv)]))
    try:
        subject = parse_subject(args.overrides, conf_dir)
        args = settings(args, subject)
        hours = estimate(args, subject)
        if args.plan:
            return 0
        if hours > args.max_hours:
            raise ValueError(f"the training may take {hours:.2f} CPU-hours, more than "
                             f"--max-hours {args.max_hours:g}: raise it, or ask for less "
                             "(--budget quick, --sections, --widths, --listops-seeds)")
        return run(args, subject, command)
    except STUDY_ERRORS as error:
        return fail("python -m linarena.arena", error)


if __name__ == "__main__":
    sys.exit(main())
