"""Is a run's CPU peak memory its own when one `train.py -m` process trains several runs?

Trains --then alone, and after --first in one multirun process (the default config, --steps
optimizer steps, seed 1), with the train.py of each --code checkout (default: this one; e.g. a
git worktree of an older commit, to measure before and after a change), and writes
<out>/<name>.csv: one row per (code, run) with its perf/peak_memory_mb, with its provenance
record. The runs themselves go to a temporary folder and are removed.

    python scripts/maintainer/multirun_memory.py --out docs/results
    git worktree add /tmp/before 34fa81a
    python scripts/maintainer/multirun_memory.py --code /tmp/before . --out docs/results
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from linarena.analysis.provenance import command_line
from linarena.metrics import PEAK_MEMORY_MB
from linarena.studies.cli import STUDY_ERRORS, add_output_arguments, fail
from linarena.studies.study import write_report
from linarena.system import REPO_ROOT


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--first", default="mamba2_layer",
                        help="the run trained first in the multirun (the largest peak)")
    parser.add_argument("--then", default="squared_relu", help="the run measured")
    parser.add_argument("--steps", type=int, default=30, help="trainer.max_steps of each run")
    parser.add_argument("--code", type=Path, nargs="+", default=[REPO_ROOT],
                        help="checkouts whose train.py trains the runs (default: this one)")
    add_output_arguments(parser, "multirun_memory", REPO_ROOT / "outputs", "outputs/")
    return parser.parse_args(argv)


def peak_mb(code: Path, attentions: list[str], steps: int, folder: Path) -> dict[str, float]:
    """{attention: perf/peak_memory_mb} of `attentions` trained in one `train.py -m` process of
    the checkout `code`, into `folder`."""
    command = [sys.executable, str(code / "train.py"), "-m", f"attention={','.join(attentions)}",
               f"trainer.max_steps={steps}", "seed=1", "logger=none",
               f"hydra.sweep.dir={folder}", "hydra.sweep.subdir=${hydra:runtime.choices.attention}"]
    env = {**os.environ, "PYTHONPATH": str(code / "src")}
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode:
        raise ValueError(f"{' '.join(command)} failed (exit {done.returncode}):\n"
                         + done.stderr[-2000:])
    return {name: json.loads((folder / name / "summary.json").read_text())["metrics"]
            [PEAK_MEMORY_MB.key] for name in attentions}


def commit_of(code: Path) -> str:
    """The commit checked out at `code`, "-dirty" when its tracked files differ from it."""
    head = subprocess.run(["git", "-C", str(code), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(code), "diff", "--quiet", "HEAD"]).returncode
    return head + ("-dirty" if dirty else "")


def measure(codes: list[Path], first: str, then: str, steps: int) -> pd.DataFrame:
    """One row per (checkout, run): --then alone, --first and --then in one process."""
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for index, code in enumerate(codes):
            root = Path(scratch) / str(index)
            alone = peak_mb(code, [then], steps, root / "alone")
            multi = peak_mb(code, [first, then], steps, root / "multi")
            commit = commit_of(code)
            rows += [{"code_commit": commit, "attention": then, "process": "alone",
                      "peak_memory_mb": alone[then]},
                     {"code_commit": commit, "attention": first, "process": "first of -m",
                      "peak_memory_mb": multi[first]},
                     {"code_commit": commit, "attention": then, "process": f"after {first}",
                      "peak_memory_mb": multi[then]}]
    return pd.DataFrame(rows).assign(steps=steps)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        table = measure([code.resolve() for code in args.code], args.first, args.then,
                        args.steps)
    except (*STUDY_ERRORS, subprocess.CalledProcessError) as error:
        return fail("multirun_memory.py", error)
    write_report(args.out, args.name, {".csv": table}, command_line(__file__, argv))
    print(table.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
