"""Pin the golden losses: run every golden case and write tests/golden/golden_losses.json.

    python scripts/maintainer/golden_runs.py                       # rewrite the pinned file
    python scripts/maintainer/golden_runs.py --out /tmp/here.json  # elsewhere (compare machines)

Run it only after the results that depend on a changed case were rerun or marked stale
(tests/training/test_golden_runs.py names them): the pinned losses say which code the published
numbers came from. Cases: linarena.analysis.golden.published_cases, over the attentions each
published result holds (its CSV in docs/results/), so a rerun that adds attentions adds theirs
(tests/training/test_golden_runs.py fails until they are pinned).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import warnings
from pathlib import Path

from linarena.analysis.golden import (
    BATCH,
    GOLDEN_FILE,
    SEED,
    STEPS,
    case_key,
    published_cases,
    run_case,
)
from linarena.analysis.provenance import environment
from linarena.files import write_text_atomic

# The golden tolerance, relative to each value (tests/training/test_golden_runs.py reads it from the
# file). Measured on every case: the largest relative difference between the values of
# OMP_NUM_THREADS=1 and 2, each with and without MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=default
# (the unvectorised kernels another x86 CPU may take, so other summation orders). For the
# kernel maps and softmax it was 4.4e-7, about 7 float32 roundings (u = 6e-8). The recurrences
# amplify more through their gates: 4.9e-6 (benchmark_model/mamba2, the loss after 3 AdamW
# steps; 80 u), 1.1e-6 for the delta rule, the parameter norms below 5e-10 everywhere. The
# tolerance is 4 times the largest (330 u); a change of initialisation, data, model or optimizer
# moves the values by far more (xavier gain 1.0 -> 1.01: see the README's Development section).
RELATIVE_TOLERANCE = 2e-5


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=GOLDEN_FILE, help="where the losses go")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    pinned = {}
    started = time.monotonic()
    for case in published_cases():
        values = run_case(case)
        pinned[case_key(case)] = {
            "preset": case.preset, "attention": case.attention,
            "overrides": list(case.overrides), "values": values,
            "results": list(case.results), "rerun": case.rerun,
        }
        print(f"{case_key(case)}: {' '.join(f'{value:.6f}' for value in values)}", flush=True)
    document = {"steps": STEPS, "batch": BATCH, "seed": SEED,
                "relative_tolerance": RELATIVE_TOLERANCE, "environment": environment(),
                "cases": pinned}
    write_text_atomic(args.out, json.dumps(document, indent=1) + "\n")
    print(f"{len(pinned)} cases in {time.monotonic() - started:.1f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
