"""Time the README's Quick start: `python train.py` (the default run), as a new user runs it.

The run starts from nothing: a fresh LINARENA_ROOT and an empty data folder (so its data
generation is timed too), W&B offline, this checkout's train.py and the default thread count.
<out>/<name>.csv has one row: the wall time of the whole process, its peak resident set size
(what `/usr/bin/time` reports as maximum resident set size), the run's own tokens/s, steps and
test accuracy from its summary.json, and the 1-minute load average before the start (a figure
measured beside other jobs is not the idle machine's: run it on an idle machine); with its
provenance record. Extra arguments go to train.py (e.g. debug=smoke for a quick check).

    python scripts/maintainer/default_run.py --out docs/results
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from linarena.analysis.provenance import command_line
from linarena.studies.cli import add_output_arguments
from linarena.studies.study import TRAIN_PY, write_report
from linarena.system import REPO_ROOT


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_output_arguments(parser, "default_run", REPO_ROOT / "outputs" / "default_run",
                         "outputs/default_run")
    parser.add_argument("overrides", nargs="*", help="train.py overrides (default: none)")
    return parser.parse_args(argv)


def timed_run(overrides: list[str], scratch: Path) -> dict[str, object]:
    """Run train.py with `overrides` from nothing in `scratch`; the row of the CSV."""
    env = os.environ | {"LINARENA_ROOT": str(scratch), "LINARENA_DATA_DIR": str(scratch / "data"),
                        "WANDB_MODE": "offline", "WANDB_DIR": str(scratch)}
    command = ["python", "train.py", *overrides]
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(TRAIN_PY), *overrides], env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(command)} failed (exit {done.returncode}):\n"
                           f"{done.stderr[-3000:]}")
    summary_path, = (scratch / "outputs").rglob("summary.json")
    summary = json.loads(summary_path.read_text())
    metrics = summary["metrics"]
    # ru_maxrss of the children is the largest peak of any child, in KiB on Linux.
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"command": shlex.join(command), "task": summary["task"],
            "attention": summary["attention"], "steps": summary["global_step"],
            "wall_s": round(wall, 1), "peak_rss_mb": round(peak_kib / 2**10, 1),
            "tokens_per_sec": metrics["perf/tokens_per_sec"],
            "test_acc_pct": 100 * metrics["test/acc"],
            "load_avg_1min_before": load_before, "cpu_count": os.cpu_count()}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        try:
            row = timed_run(args.overrides, Path(scratch))
        except RuntimeError as error:
            print(f"default_run.py: error: {error}", file=sys.stderr)
            return 1
    write_report(args.out, args.name, {".csv": pd.DataFrame([row])},
                 command_line(__file__, argv))
    print(f"{row['command']}: {row['wall_s']} s wall, peak RSS {row['peak_rss_mb']} MB, "
          f"{row['tokens_per_sec']:,.0f} tokens/s, test accuracy {row['test_acc_pct']:.1f}% "
          f"(load average {row['load_avg_1min_before']:.2f} before) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
