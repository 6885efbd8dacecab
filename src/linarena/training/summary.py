"""summary.json: the one file per run that scripts/compare.py reads."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from linarena.files import write_text_atomic

SUMMARY_FILE = "summary.json"
METRIC_KEYS = (
    "test/acc",
    "test/loss",
    "val/acc_best",
    "perf/tokens_per_sec",
    "perf/samples_per_sec",
    "perf/peak_memory_mb",
    "model/params",
)


def finite_or_none(value: Any) -> float | None:
    """JSON has no NaN/inf: non-finite or missing values are written as null."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def summary_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """The metrics block: floats (null when missing or not finite), model/params an int."""
    block: dict[str, Any] = {key: finite_or_none(metrics.get(key)) for key in METRIC_KEYS}
    if metrics.get("model/params") is not None:
        block["model/params"] = int(metrics["model/params"])
    return block


def write_summary(output_dir: Path, summary: dict[str, Any]) -> Path:
    """Write summary.json (schema in the project docs) atomically; returns its path."""
    path = output_dir / SUMMARY_FILE
    write_text_atomic(path, json.dumps(summary, indent=2) + "\n")
    return path


def read_summary(output_dir: Path) -> dict[str, Any] | None:
    """The run's summary.json, or None when it has none (yet) or it cannot be parsed."""
    try:
        return json.loads((output_dir / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return None
