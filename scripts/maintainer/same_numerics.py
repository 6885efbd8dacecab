"""Does this checkout train a study's models to the same bits as an older commit?

A study that spans sessions trains its runs at the commit it started from (its runs CSV names
it), while the code moves on. This check is what lets those runs stand for the current code:
for every entry of the study's protocol, train.py trains `--steps` steps at each --base commit
(a git worktree each, made for the check, removed after) and once in this checkout, with the
threads the study's runs had (the bits depend on them), same settings and seed; the final
weights (last.ckpt's state_dict) are compared bit for bit. The entries: for a state-size preset
(mqar_study_cpu) conf/attention/ and the preset's hybrid entries, each at a short-conv setting
the study trains it at; for a mixture preset (mqar_mixture_cpu) every variant at each kind of
positions of its study block, as the mixture trains it; for a self-pretraining preset
(spt/listops_small) and for the published small-budget ListOps sweep (--listops-sweep), the
entries of studies.same_numerics_listops. All at one thread, except the ListOps sweep's.
<out>/<name>.csv has one row per base and entry: identical (True/False) and the largest
absolute weight difference, with its provenance record; an entry whose preset or variant a base
does not have is not comparable there (its `not_at_base` names the missing config, identical
is blank).

    python scripts/maintainer/same_numerics.py --base 6231bfb --out docs/results
    python scripts/maintainer/same_numerics.py --base 6231bfb b74ac1b --name same_numerics_both \
        --out docs/results
    python scripts/maintainer/same_numerics.py --base b74ac1b --preset mqar_mixture_cpu \
        --name same_numerics_mixture --out docs/results
    python scripts/maintainer/same_numerics.py --base 272ec9e --listops-sweep \
        --name same_numerics_listops_272ec9e --out docs/results
    python scripts/maintainer/same_numerics.py --base 253aca9 07bc4f6 --preset spt/listops_small \
        --steps 10 --name same_numerics_spt_listops --out docs/results
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from linarena.analysis.provenance import command_line
from linarena.attention.variants import check_variant_names, variant_names
from linarena.studies.cli import STUDY_ERRORS, add_output_arguments, fail
from linarena.studies.mixture_study import MixturePoint, load_mixture_grid, own_conv_entries
from linarena.studies.preset import compose_preset, load_grid
from linarena.studies.same_numerics_listops import Check, listops_sweep_checks, spt_checks
from linarena.studies.state_size import study_names, trains_at
from linarena.studies.study import TRAIN_PY, StudyPoint, write_report
from linarena.system import REPO_ROOT, current_commit
from linarena.training import pretrain_config

MQAR_LR = 1e-2  # the MQAR checks' lr, the one their published CSVs (same_numerics_*.csv) had


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, nargs="+",
                        help="the commits the study's runs were trained at (this checkout "
                             "trains each entry once for all of them)")
    protocol = parser.add_mutually_exclusive_group()
    protocol.add_argument("--preset", default="mqar_study_cpu",
                          help="the study's preset: a state-size, mixture or self-pretraining "
                               "one (default mqar_study_cpu)")
    protocol.add_argument("--listops-sweep", action="store_true",
                          help="the published small-budget ListOps sweep instead (the default "
                               "config, trainer.max_steps=300, two threads a run)")
    parser.add_argument("--attention", nargs="+", default=None,
                        help="only these variants (default: every file of conf/attention/; "
                             "for --listops-sweep, those with published rows)")
    parser.add_argument("--steps", type=int, default=30,
                        help="optimizer steps per run (of each stage of a self-pretraining run)")
    parser.add_argument("--width", type=int, default=None,
                        help="model.d_model of the runs (default: 16 for a state-size preset, "
                             "a mixture preset's own, so that every code path it trains runs; "
                             "the ListOps protocols' own)")
    parser.add_argument("--lr", type=float, default=None,
                        help=f"optim.lr of the runs (default: {MQAR_LR:g} for the MQAR presets, "
                             "the ListOps protocols' own)")
    parser.add_argument("--seed", type=int, default=2, help="seed of the runs")
    add_output_arguments(parser, "same_numerics", REPO_ROOT / "outputs" / "same_numerics",
                         "outputs/same_numerics")
    return parser.parse_args(argv)


def final_weights(tree: Path, command: list[str], folder: Path, threads: int) -> dict[str, Any]:
    """Run a study command (this checkout's train.py swapped for `tree`'s) with `tree`'s code
    on `threads` threads; the state_dict of the last.ckpt under `folder`."""
    env = os.environ | {"PYTHONPATH": str(tree / "src"), "OMP_NUM_THREADS": str(threads),
                        "MKL_NUM_THREADS": str(threads)}
    command = [command[0], str(tree / TRAIN_PY.relative_to(REPO_ROOT)), *command[2:]]
    done = subprocess.run(command, env=env, cwd=tree, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed in {tree}:\n{done.stderr[-2000:]}")
    checkpoint = next(folder.rglob("last.ckpt"))
    return torch.load(checkpoint, map_location="cpu", weights_only=False)["state_dict"]


def compare(a: Any, b: Any) -> tuple[bool, float]:
    """(bit-identical, largest absolute difference of the float tensors) of two state_dicts,
    nested dicts (a module's extra state) included."""
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return False, float("inf")
        diff = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
        return torch.equal(a, b), diff
    if isinstance(a, dict):
        if not isinstance(b, dict) or a.keys() != b.keys():
            return False, float("inf")
        pairs = [compare(a[key], b[key]) for key in a]
        return all(same for same, _ in pairs), max((d for _, d in pairs), default=0.0)
    return a == b, 0.0


def missing_at(tree: Path, check: Check) -> str:
    """The configs the check trains that `tree` (a base's checkout) does not have: its preset
    and the variants its entry names (each part of a hybrid's), as conf/ paths; "" if none
    (the base can train it)."""
    command, name = check[1], check[0]["attention"]
    wanted = [f"experiment/{arg.partition('=')[2]}" for arg in command
              if arg.startswith("experiment=")]
    wanted += [f"attention/{part.partition('*')[0]}" for part in name.split("+")]
    return " ".join(f"conf/{path}.yaml" for path in wanted
                    if not (tree / "conf" / f"{path}.yaml").is_file())


def state_size_checks(args: argparse.Namespace, folder: Path) -> list[Check]:
    """Every entry of a state-size preset at the largest short conv the study trains it at,
    at --width, --lr and --seed, each under `folder`/<entry>, one thread each."""
    grid = load_grid(args.preset)
    lr = MQAR_LR if args.lr is None else args.lr
    checks = []
    for name in study_names(grid, args.attention):
        conv = max(c for c in grid["short_conv"] if trains_at(name, c))
        point = StudyPoint(args.width or 16, conv, lr, args.seed)
        command, = point.commands(args.preset, [name], folder / name, grid["entries"])
        checks.append(({"attention": name, "short_conv": conv, "d_model": args.width or 16,
                        "lr": lr, "threads": 1}, command, folder / name))
    return checks


def mixture_checks(args: argparse.Namespace, folder: Path) -> list[Check]:
    """Every variant of a mixture preset at each kind of positions of its study block, with
    the mixture's settings (a layer with its own convolutions without model.short_conv), at
    --lr and --seed, and the preset's width unless --width is given (Taylor reads fewer
    components than a head has only at its width), each under `folder`/<positions>_<variant>,
    one thread each."""
    grid = load_mixture_grid(args.preset)
    width = args.width or int(compose_preset(args.preset).model.d_model)
    lr = MQAR_LR if args.lr is None else args.lr
    names = check_variant_names(args.attention) if args.attention else variant_names()
    entries = own_conv_entries(names)
    checks = []
    for positions in grid["positions"]:
        point = MixturePoint(positions, args.seed)
        for name in names:
            root = folder / f"{positions}_{name}"
            command, = point.commands(args.preset, [name], root, entries)
            checks.append(({"attention": name, "positions": positions, "d_model": width,
                            "lr": lr, "threads": 1},
                           [*command, f"model.d_model={width}", f"optim.lr={lr}"], root))
    return checks


def protocol_checks(args: argparse.Namespace) -> Callable[[argparse.Namespace, Path], list[Check]]:
    """The entry builder of the protocol asked for: --listops-sweep's, or the preset's by its
    kind (two-stage self-pretraining, mixture, state size)."""
    if args.listops_sweep:
        return listops_sweep_checks
    cfg = compose_preset(args.preset)
    if pretrain_config.stage(cfg) == pretrain_config.BOTH:
        return spt_checks
    return mixture_checks if "positions" in (cfg.get("study") or {}) else state_size_checks


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        plan = protocol_checks(args)
        plan(args, Path("/nonexistent"))  # a bad preset or attention fails before any training
        bases = list(dict.fromkeys(  # one row per commit, however many names it was given
            subprocess.run(["git", "rev-parse", base], cwd=REPO_ROOT, check=True,
                           capture_output=True, text=True).stdout.strip()
            for base in args.base))
    except (*STUDY_ERRORS, subprocess.CalledProcessError) as error:
        return fail("same_numerics.py", error)
    head, dirty = current_commit()
    head = f"{head}-dirty" if dirty else head
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        trees = {"head": REPO_ROOT}
        try:
            for base in bases:
                trees[base] = Path(scratch) / base
                subprocess.run(["git", "worktree", "add", "--detach", str(trees[base]), base],
                               cwd=REPO_ROOT, check=True, capture_output=True)
            plans = {label: plan(args, Path(scratch) / f"run-{label}") for label in trees}
            for index, (entry, _, _) in enumerate(plans["head"]):
                missing = {base: missing_at(trees[base], plans[base][index]) for base in bases}
                weights = {}
                for label, tree in trees.items():
                    check = plans[label][index]
                    # the checkout's run is wasted where no base can train the entry
                    if not missing.get(label, "") and not all(missing.values()):
                        weights[label] = final_weights(
                            tree, [*check[1], f"trainer.max_steps={args.steps}"], check[2],
                            entry["threads"])
                for base in bases:
                    same, diff = (None, None) if missing[base] else \
                        compare(weights[base], weights["head"])
                    verdict = (f"not comparable ({missing[base]} not there)" if missing[base]
                               else "identical" if same else f"differs by up to {diff:.3g}")
                    print(f"{', '.join(f'{k} {v}' for k, v in entry.items())}, base "
                          f"{base[:10]}: {verdict}", flush=True)
                    rows.append({**entry, "seed": args.seed, "steps": args.steps,
                                 "base_commit": base, "head_commit": head, "identical": same,
                                 "max_abs_diff": diff, "not_at_base": missing[base]})
        finally:
            for label, tree in trees.items():
                if label != "head":
                    subprocess.run(["git", "worktree", "remove", "--force", str(tree)],
                                   cwd=REPO_ROOT, capture_output=True)
    table = pd.DataFrame(rows)
    write_report(args.out, args.name, {".csv": table}, command_line(__file__, argv))
    compared = table[table["not_at_base"] == ""]
    identical = compared["identical"].astype(bool)
    print(f"{int(identical.sum())} of {len(compared)} identical, {len(table) - len(compared)} "
          f"not comparable -> {args.out}")
    return 0 if identical.all() else 1


if __name__ == "__main__":
    sys.exit(main())
