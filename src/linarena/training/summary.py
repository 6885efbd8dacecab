"""summary.json: the one file per run that scripts/compare.py reads."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

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
# Overrides that vary within one comparison (its rows and seeds), or do not change the run.
NOT_SETTINGS = ("attention", "seed", "ckpt_path", "debug", "hydra", "logger", "tags")

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
    block.update({key: finite_or_none(value) for key, value in metrics.items()
                  if key.startswith("test/acc_")})
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


def sweep_label(cfg: DictConfig) -> str:
    """Which comparison a run belongs to, for scripts/compare.py: its multirun folder (relative
    to paths.log_dir) or "runs" for a single run, then the command-line overrides other than
    the attention and the seed, e.g. "multiruns/2025-01-01_10-00-00: trainer.max_steps=300"."""
    if not HydraConfig.initialized():
        return "runs"
    hydra_cfg = HydraConfig.get()
    where = "runs"
    if hydra_cfg.mode == RunMode.MULTIRUN:
        sweep_dir = Path(hydra_cfg.sweep.dir).resolve()
        log_dir = Path(cfg.paths.log_dir).resolve()
        where = str(sweep_dir.relative_to(log_dir) if sweep_dir.is_relative_to(log_dir)
                    else sweep_dir)
    settings = [
        override for override in hydra_cfg.overrides.task
        if override.lstrip("+~").split("=", 1)[0].split(".")[0].split("/")[0] not in NOT_SETTINGS
    ]
    return ": ".join([where, " ".join(sorted(settings))]) if settings else where


def run_names(cfg: DictConfig) -> dict[str, Any]:
    """The names a run is compared by: task and attention (the data and attention choices),
    seed, whether it is a debug run (debug presets; compare.py leaves them out) and its sweep."""
    return {
        "task": str(cfg.task_name),
        "attention": str(cfg.attention_name),
        "seed": int(cfg.seed),
        "debug": cfg.run_group == "debug",
        "sweep": sweep_label(cfg),
    }


def results_line(summary: dict[str, Any]) -> str:
    """The run's headline numbers in one line: test accuracy, throughput, peak memory."""
    metrics = summary["metrics"]

    def number(key: str, spec: str) -> str:
        value = metrics.get(key)
        return "n/a" if value is None else format(value, spec)

    ranks = summary.get("world_size", 1)
    over = f" over {ranks} processes" if ranks > 1 else ""
    return (f"test/acc={number('test/acc', '.4f')}, val/acc_best="
            f"{number('val/acc_best', '.4f')}, {number('perf/tokens_per_sec', ',.0f')} tokens/s"
            f"{over}, peak memory {number('perf/peak_memory_mb', ',.0f')} MB, "
            f"{summary['duration_s']} s")
