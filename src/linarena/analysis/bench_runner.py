"""The benchmark harness: runs cases over attentions x lengths, skipping cases predicted to take
too long (one rule for both benchmarks), and writes the CSVs atomically.

Rows are dicts with :data:`CSV_COLUMNS`. ``status`` is one of:
``ok``; ``oom`` (the allocation failed, or the kernel killed the case's process); ``skipped``
(predicted to exceed ``--max-seconds``, or a shorter length already failed); ``timeout`` (the
case's process ran past its time limit and was killed); ``error`` (any other exception: a bug,
reported in ``note``). ``note`` says why for every status but ``ok``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path

import pandas as pd
import torch

import linarena
from linarena.analysis.bench_cases import CaseSpec
from linarena.analysis.bench_measure import run_case
from linarena.analysis.result_files import ResultFileError, read_csv_checked
from linarena.analysis.timing import interleaved_medians, is_out_of_memory
from linarena.attention.variants import is_linear
from linarena.files import write_atomic

CSV_COLUMNS = [
    "attention", "length", "what", "batch", "device", "dtype", "threads",
    "ms", "tokens_per_sec", "peak_memory_mb", "backend", "status", "note",
]
# What a reader of the CSV needs (the plot, the W&B dashboard), and which of it are numbers.
READ_COLUMNS = ("attention", "length", "what", "ms", "peak_memory_mb", "status")
NUMERIC_COLUMNS = ("length", "batch", "threads", "ms", "tokens_per_sec", "peak_memory_mb")
# Seconds a case's process may spend beyond its predicted budget (interpreter start, imports).
PROCESS_STARTUP_S = 120.0


def growth_factor(linear: bool, previous_length: int, length: int) -> float:
    """Upper bound of how much slower a step gets from ``previous_length`` to ``length``: the
    ratio itself for a linear attention, its square for any other (quadratic) one."""
    return (length / previous_length) ** (1 if linear else 2)


def predicted_seconds(
    previous_ms: float, linear: bool, previous_length: int, length: int, calls: int
) -> float:
    """Predicted time of ``calls`` calls at ``length`` from one call's time at a shorter length."""
    return previous_ms / 1000.0 * growth_factor(linear, previous_length, length) * calls


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
    linear = is_linear(spec.attention, Path(spec.conf_dir))
    factor = growth_factor(linear, previous["length"], spec.length)
    predicted_s = predicted_seconds(previous["ms"], linear, previous["length"], spec.length,
                                    spec.warmup + spec.repeats)
    if predicted_s <= max_seconds:
        return None
    return (
        f"predicted {predicted_s:.0f} s > --max-seconds {max_seconds:g} "
        f"({previous['ms']:.0f} ms at length {previous['length']} x {factor:g}, "
        f"{spec.warmup + spec.repeats} steps)"
    )


def _failed(status: str, note: str) -> dict:
    return {"ms": None, "tokens_per_sec": None, "peak_memory_mb": None, "backend": "",
            "status": status, "note": note}


def run_case_in_subprocess(spec: CaseSpec, timeout_s: float | None) -> dict:
    """Measure ``spec`` in a fresh Python process, so that its peak RSS is its own."""
    command = [sys.executable, "-m", "linarena.analysis.bench_measure", spec.to_json()]
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
        return _failed("oom",
                       "process killed by SIGKILL (likely the kernel's out-of-memory killer)")
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


def write_csv_atomic(rows: list[dict], path: Path, columns: list[str] | None = None) -> None:
    """Write the rows to ``path`` atomically, so a reader never sees half a file. ``columns``:
    :data:`CSV_COLUMNS` by default, else the given ones."""
    table = pd.DataFrame(rows, columns=columns or CSV_COLUMNS)
    write_atomic(path, lambda file: table.to_csv(file, index=False))


def exit_code(rows: list[dict]) -> int:
    """A benchmark script's exit status: 1, saying how many, when a case failed with an error
    (a skipped or out-of-memory case is a result, not a failure), else 0."""
    errors = [row for row in rows if row["status"] == "error"]
    if errors:
        print(f"{len(errors)} case(s) failed with an error (see the note column)", file=sys.stderr)
    return 1 if errors else 0


def read_benchmark_csv(path: Path) -> pd.DataFrame:
    """A benchmark_model.py CSV, read whole (result_files.read_csv_checked): a damaged one, or
    another kind of CSV, is a ResultFileError naming the file (and line)."""
    table = read_csv_checked(path, numeric_columns=NUMERIC_COLUMNS,
                             filled_columns=("attention", "length", "what", "status"))
    missing = [column for column in READ_COLUMNS if column not in table.columns]
    if missing:
        raise ResultFileError(f"{path}: not a scripts/benchmark_model.py CSV (no column "
                              f"{', '.join(missing)}); point at the benchmark_model.csv it wrote")
    return table


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


# One case of the round-robin benchmark: name -> (forward, forward_backward, peak_memory_mb),
# built and warmed up by the caller at a given length.
Prepare = Callable[[str, int], tuple[Callable[[], None], Callable[[], None], float]]


def run_round_robin(
    linear: dict[str, bool], lengths: list[int], prepare: Prepare, repeats: int,
    device: torch.device, max_seconds: float, fields: dict,
) -> list[dict]:
    """Every variant (name -> whether its cost is linear in length) at every length, forward and
    forward+backward. The variants of one length are timed round-robin (interleaved_medians),
    so the ratios between them come from the same moments. A variant is skipped from the length
    its predicted forward+backward call exceeds ``max_seconds``, or after an allocation failure.
    Rows: ``fields`` plus variant, length, fwd_ms, fwd_bwd_ms, peak_memory_mb, status."""
    rows, last = [], {}  # last: name -> (length, fwd_bwd ms) of its previous measured length
    for length in lengths:
        cases, length_rows = {}, {}
        for name in linear:
            row = {"variant": name, "length": length, **fields, "fwd_ms": math.nan,
                   "fwd_bwd_ms": math.nan, "peak_memory_mb": math.nan, "status": "ok"}
            length_rows[name] = row
            if name in last:
                if last[name] is None:
                    row["status"] = "skipped (a shorter length ran out of memory)"
                    continue
                previous_length, previous_ms = last[name]
                if predicted_seconds(previous_ms, linear[name], previous_length, length,
                                     1) > max_seconds:
                    row["status"] = f"skipped (predicted > {max_seconds}s)"
                    continue
            try:
                forward, forward_backward, row["peak_memory_mb"] = prepare(name, length)
                cases[name] = (forward, forward_backward)
            except (RuntimeError, MemoryError) as error:
                if not is_out_of_memory(error):
                    raise
                row["status"], last[name] = "oom", None
        calls = {(name, what): call for name, (forward, forward_backward) in cases.items()
                 for what, call in (("fwd_ms", forward), ("fwd_bwd_ms", forward_backward))}
        for (name, what), seconds in interleaved_medians(calls, repeats, device).items():
            length_rows[name][what] = 1e3 * seconds
        for name, row in length_rows.items():
            if name in cases:
                last[name] = (length, row["fwd_bwd_ms"])
            print(f"{name:>18} N={length:>6}  fwd {row['fwd_ms']:9.2f} ms  "
                  f"fwd+bwd {row['fwd_bwd_ms']:9.2f} ms  {row['status']}", flush=True)
        rows.extend(length_rows.values())
        del cases, calls
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows
