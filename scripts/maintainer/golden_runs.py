"""Pin the golden losses: run every golden case and write tests/golden/golden_losses.json.

    python scripts/maintainer/golden_runs.py                       # rewrite the pinned file
    python scripts/maintainer/golden_runs.py --out /tmp/here.json  # elsewhere (compare machines)
    python scripts/maintainer/golden_runs.py --missing-only        # pin only the unpinned cases

Run it only after the results that depend on a changed case were rerun or marked stale
(tests/training/test_golden_runs.py names them): the pinned losses say which code the published
numbers came from. Cases: linarena.reports.golden.published_cases, over the attentions each
published result holds (its CSV in docs/results/), so a rerun that adds attentions adds theirs
(tests/training/test_golden_runs.py fails until they are pinned). `--missing-only` computes
only those and keeps every pinned value as it is, so adding cases on another CPU re-pins nothing;
each added case records the machine it was pinned on.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import warnings
from pathlib import Path

from linarena.analysis.provenance import environment
from linarena.files import write_text_atomic
from linarena.reports.golden import (
    BATCH,
    GOLDEN_FILE,
    SEED,
    STEPS,
    GoldenCase,
    case_key,
    published_cases,
    run_case,
)
from linarena.system import machine

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


def pinned_environment() -> dict:
    """The environment record of a pin, with the CPU kernel path the values came from."""
    return {**environment(), "cpu_kernels": machine("cpu")["cpu_kernels"]}


def pin(case: GoldenCase) -> dict:
    """Run one golden case and return its entry in the pinned file."""
    values = run_case(case)
    print(f"{case_key(case)}: {' '.join(f'{value:.6f}' for value in values)}", flush=True)
    return {"preset": case.preset, "attention": case.attention,
            "overrides": list(case.overrides), "values": values,
            "results": list(case.results), "rerun": case.rerun}


def kept_document(path: Path) -> dict:
    """The pinned file to add cases to; refused when its golden settings are not the current
    ones (then every case must be pinned again)."""
    document = json.loads(path.read_text())
    if (document["steps"], document["batch"], document["seed"]) != (STEPS, BATCH, SEED):
        raise SystemExit(f"{path} was pinned with other golden settings (steps, batch, seed "
                         f"{document['steps']}, {document['batch']}, {document['seed']}; now "
                         f"{STEPS}, {BATCH}, {SEED}): pin every case, without --missing-only")
    return document


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=GOLDEN_FILE, help="where the losses go")
    parser.add_argument("--missing-only", action="store_true",
                        help="keep the values pinned in --out and compute only the published "
                             "cases it lacks (cases no longer published are dropped)")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    started = time.monotonic()
    if args.missing_only:
        document = kept_document(args.out)
        old = document["cases"]
        pinned = {}
        for case in published_cases():
            key = case_key(case)
            pinned[key] = old[key] if key in old else {**pin(case),
                                                       "environment": pinned_environment()}
        dropped = sorted(set(old) - set(pinned))
        added = sorted(set(pinned) - set(old))
        document["cases"] = pinned
        print(f"{len(added)} cases added, {len(dropped)} no longer published dropped"
              + (f" ({', '.join(dropped)})" if dropped else ""))
    else:
        pinned = {case_key(case): pin(case) for case in published_cases()}
        document = {"steps": STEPS, "batch": BATCH, "seed": SEED,
                    "relative_tolerance": RELATIVE_TOLERANCE,
                    "environment": pinned_environment(), "cases": pinned}
    write_text_atomic(args.out, json.dumps(document, indent=1) + "\n")
    print(f"{len(pinned)} cases in {time.monotonic() - started:.1f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
