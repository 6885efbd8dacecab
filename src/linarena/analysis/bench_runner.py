"""Runs benchmark cases over attentions x lengths, skipping cases that would take too long.

Rows are dicts with :data:`CSV_COLUMNS`. ``status`` is one of:
``ok``; ``oom`` (the allocation failed, or the kernel killed the case's process); ``skipped``
(predicted to exceed ``--max-seconds``, or a shorter length already failed); ``timeout`` (the
case's process ran past its time limit and was killed); ``error`` (any other exception: a bug,
reported in ``note``). ``note`` says why for every status but ``ok``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path

import pandas as pd

import linarena
from linarena.analysis.bench_cases import CaseSpec, run_case
from linarena.files import write_atomic

CSV_COLUMNS = [
    "attention", "length", "what", "batch", "device", "dtype", "threads",
    "ms", "tokens_per_sec", "peak_memory_mb", "status", "note",
]
# Attention cost grows linearly with length for these; any other name is assumed quadratic,
# which over-predicts and so errs on the side of skipping.
LINEAR_ATTENTIONS = frozenset({"elu", "performer", "cosformer"})
# Seconds a case's process may spend beyond its predicted budget (interpreter start, imports).
PROCESS_STARTUP_S = 120.0


def growth_factor(attention: str, previous_length: int, length: int) -> float:
    """Upper bound of how much slower a step gets from ``previous_length`` to ``length``."""
    exponent = 1 if attention in LINEAR_ATTENTIONS else 2
    return (length / previous_length) ** exponent


def skip_reason(
    spec: CaseSpec, previous: dict | None, max_seconds: float | None
) -> str | None:
    """Why ``spec`` should not run given the same attention's previous (shorter) row, or None."""
    if previous is None:
        return None
    if previous["status"] != "ok":
        return f"length {previous['length']} was {previous['status']}"
    if max_seconds is None:
        return None
    factor = growth_factor(spec.attention, previous["length"], spec.length)
    predicted_s = previous["ms"] / 1000.0 * factor * (spec.warmup + spec.repeats)
    if predicted_s <= max_seconds:
        return None
    return (
        f"predicted {predicted_s:.0f} s > --max-seconds {max_seconds:g} "
        f"({previous['ms']:.0f} ms at length {previous['length']} x {factor:g}, "
        f"{spec.warmup + spec.repeats} steps)"
    )


def _failed(status: str, note: str) -> dict:
    return {"ms": None, "tokens_per_sec": None, "peak_memory_mb": None,
            "status": status, "note": note}


def run_case_in_subprocess(spec: CaseSpec, timeout_s: float | None) -> dict:
    """Measure ``spec`` in a fresh Python process, so that its peak RSS is its own."""
    command = [sys.executable, "-m", "linarena.analysis.bench_cases", spec.to_json()]
    # The child imports linarena from where this process did, installed or not.
    package_root = str(Path(linarena.__file__).resolve().parents[1])
    python_path = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": python_path}
    try:
        process = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                                 env=env)
    except subprocess.TimeoutExpired:
        return _failed("timeout", f"killed after {timeout_s:.0f} s")
    if process.returncode == -signal.SIGKILL:
        return _failed("oom", "process killed by SIGKILL (likely the kernel's out-of-memory killer)")
    result_lines = [line for line in process.stdout.splitlines() if line.startswith("RESULT ")]
    if process.returncode != 0 or not result_lines:
        last_lines = process.stderr.strip().splitlines()[-1:] or ["no output"]
        print(process.stderr, file=sys.stderr)
        return _failed("error", f"exit code {process.returncode}: {last_lines[0]}")
    return json.loads(result_lines[-1].removeprefix("RESULT "))


def run_case_in_process(spec: CaseSpec) -> dict:
    """Measure ``spec`` here (CUDA: peak memory statistics are reset per case)."""
    try:
        return run_case(spec)
    except Exception as error:  # a bug in one case must not lose the other cases' results
        traceback.print_exc()
        return _failed("error", f"{type(error).__name__}: {error}"[:300])


def write_csv_atomic(rows: list[dict], path: Path) -> None:
    """Write the rows to ``path`` atomically, so a reader never sees half a file."""
    table = pd.DataFrame(rows, columns=CSV_COLUMNS)
    write_atomic(path, lambda file: table.to_csv(file, index=False))


def run_benchmark(
    specs: Iterable[CaseSpec],
    max_seconds: float | None,
    isolate: bool,
    on_row: Callable[[list[dict]], None] = lambda rows: None,
) -> list[dict]:
    """Measure the cases in order and return one row per case.

    ``specs`` must list each (what, attention) group's lengths in increasing order: a case is
    skipped from the previous row of its group. ``isolate`` runs each case in its own process
    (CPU, for RSS); ``on_row`` gets all rows so far after each case (e.g. to save the CSV).
    """
    rows: list[dict] = []
    previous_in_group: dict[tuple[str, str], dict] = {}
    for spec in specs:
        group = (spec.what, spec.attention)
        reason = skip_reason(spec, previous_in_group.get(group), max_seconds)
        if reason is not None:
            result = _failed("skipped", reason)
        elif isolate:
            timeout_s = None if max_seconds is None else 2 * max_seconds + PROCESS_STARTUP_S
            result = run_case_in_subprocess(spec, timeout_s)
        else:
            result = run_case_in_process(spec)
        spec_fields = dataclasses.asdict(spec)
        row = {key: spec_fields[key] for key in CSV_COLUMNS if key in spec_fields} | result
        print(_describe(row), flush=True)
        rows.append(row)
        previous_in_group[group] = row
        on_row(rows)
    return rows


def _describe(row: dict) -> str:
    head = f"{row['what']:<17} {row['attention']:<10} L={row['length']:<6}"
    if row["status"] != "ok":
        return f"{head} {row['status']}: {row['note']}"
    return (f"{head} {row['ms']:10.1f} ms {row['tokens_per_sec']:12.0f} tok/s "
            f"{row['peak_memory_mb']:9.1f} MB")
