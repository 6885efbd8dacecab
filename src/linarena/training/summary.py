"""summary.json: the one file per run that scripts/compare.py reads, and the comparison row every
logger is sent (linarena.training.run_report)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from linarena.attention.patterns import pattern_entry
from linarena.files import write_text_atomic
from linarena.metrics import (
    PEAK_MEMORY_MB,
    SCHEMA_VERSION,
    TEST_ACC,
    TOKENS_PER_SEC,
    VAL_ACC_BEST,
    metrics_block,
    row_metrics,
)

SUMMARY_FILE = "summary.json"
# Overrides that vary within one comparison (its rows and seeds), or do not change the run.
NOT_SETTINGS = ("attention", "seed", "ckpt_path", "debug", "hydra", "logger", "tags")
# Overrides of other groups that pick the attention, so vary within a comparison as attention=
# does: a hybrid stack's pattern (its name is the run's attention, pattern_name).
ATTENTION_SETTINGS = ("model.pattern",)
# The names a comparison row starts with; its metrics follow (linarena.metrics).
NAME_COLUMNS = ("task", "attention", "seed")
_FLOAT = re.compile(r"(?<![\w.])-?\d+\.\d{5,}(?:[eE][-+]?\d+)?(?![\w.])")


def write_summary(output_dir: Path, summary: dict[str, Any]) -> Path:
    """Write summary.json (schema in the README) atomically; returns its path."""
    path = output_dir / SUMMARY_FILE
    write_text_atomic(path, json.dumps(summary, indent=2) + "\n")
    return path


def read_summary(output_dir: Path) -> dict[str, Any] | None:
    """The run's summary.json, or None when it has none (yet) or it cannot be parsed."""
    try:
        return json.loads((output_dir / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return None


def round_floats(text: str) -> str:
    """Long decimals (an Optuna trial's 0.0031622776601683794) to 4 significant digits."""
    return _FLOAT.sub(lambda match: f"{float(match.group()):.4g}", text)


def _started_hydra(output_dir: Path) -> Any | None:
    """The Hydra config the run started with: its `.hydra/hydra.yaml` (a resumed job writes its
    own to .hydra/resume/, so this file is always the start's), else this job's, else None."""
    saved = output_dir / ".hydra" / "hydra.yaml"
    if saved.is_file():
        return OmegaConf.load(saved).hydra
    return HydraConfig.get() if HydraConfig.initialized() else None


def sweep_label(cfg: DictConfig) -> str:
    """Which comparison a run belongs to, as it started (a resume keeps it): its multirun folder
    (relative to paths.log_dir) or "runs" for a single run, then the command-line overrides
    other than the attention and the seed, e.g. "multiruns/2025-01-01_10-00-00:
    trainer.max_steps=300"; long decimals rounded to 4 significant digits."""
    output_dir = Path(cfg.paths.output_dir).resolve()
    hydra_cfg = _started_hydra(output_dir)
    if hydra_cfg is None:
        return "runs"
    where = "runs"
    if str(hydra_cfg.mode) in ("MULTIRUN", "RunMode.MULTIRUN"):
        # The job folder is <sweep dir>/<subdir>; the saved sweep dir is unresolved (${now:...}).
        depth = len(Path(str(OmegaConf.to_container(hydra_cfg.sweep)["subdir"])).parts)
        sweep_dir = output_dir.parents[depth - 1]
        log_dir = Path(cfg.paths.log_dir).resolve()
        where = str(sweep_dir.relative_to(log_dir) if sweep_dir.is_relative_to(log_dir)
                    else sweep_dir)
    keys = {override: override.lstrip("+~").split("=", 1)[0]
            for override in hydra_cfg.overrides.task}
    settings = [
        round_floats(override) for override, key in keys.items()
        if key.split(".")[0].split("/")[0] not in NOT_SETTINGS and key not in ATTENTION_SETTINGS
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


# Data settings that say where the data live or how they are loaded, not what they are.
MACHINE_DATA_KEYS = ("data_dir", "num_workers", "generator_workers")


def _settings(node: DictConfig, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The scalar settings of a config group (no _target_-style keys, no nested objects)."""
    values = OmegaConf.to_container(node, resolve=True)
    return {key: value for key, value in values.items()
            if not key.startswith("_") and key not in skip
            and (value is None or isinstance(value, bool | int | float | str))}


def hparams(cfg: DictConfig, precision: str) -> dict[str, Any]:
    """The settings most comparisons filter on, at the top of summary.json (the whole resolved
    config is under "config"): the model's shape and training settings by name, and every
    scalar setting of the attention and data groups under "attention" and "data" (so a new
    variant's or task's settings are there without being named here). A hybrid stack
    (model.pattern) has its entries' variant names under "pattern" and, under "attention", the
    scalar settings of each entry (as built: pattern_config.pattern_attentions writes them in)."""
    pattern = cfg.model.get("pattern")
    entries = ([pattern_entry(entry) for entry in OmegaConf.to_container(pattern, resolve=True)]
               if pattern else None)
    return {
        "d_model": cfg.model.d_model,
        "qkv_dim": cfg.model.get("qkv_dim") or cfg.model.d_model,
        "num_heads": cfg.model.num_heads,
        "num_layers": cfg.model.num_layers,
        "mlp_dim": cfg.model.mlp_dim,
        "dropout": cfg.model.dropout,
        "max_length": cfg.model.max_length,
        "pooling": cfg.model.pooling,
        "positions": cfg.model.get("positions"),
        "pattern": None if entries is None else [name for name, _ in entries],
        "pair_head": cfg.model.get("pair_head"),
        "attention_dropout": cfg.get("attention_dropout"),
        "causal": cfg.model.causal,
        "batch_size": cfg.data.batch_size,
        "lr": cfg.optim.lr,
        "weight_decay": cfg.optim.weight_decay,
        "weight_decay_scope": cfg.optim.get("weight_decay_scope"),
        "max_steps": cfg.trainer.max_steps,
        "precision": precision,
        "attention": _settings(cfg.attention) if entries is None
        else [_settings(OmegaConf.create(settings)) for _, settings in entries],
        "data": _settings(cfg.data, skip=MACHINE_DATA_KEYS),
    }


def build_summary(cfg: DictConfig, precision: str, metrics: dict[str, Any],
                  run: dict[str, Any]) -> dict[str, Any]:
    """The summary.json content (schema in the README): names, hparams, the metrics of
    linarena.metrics, the whole resolved config, then `run` (output_dir, device, steps, ...).
    Logger-specific fields (e.g. "wandb") are added by the loggers' hooks."""
    return {
        "schema_version": SCHEMA_VERSION,
        **run_names(cfg),
        "hparams": hparams(cfg, precision),
        "metrics": metrics_block(metrics),
        "wandb": None,
        **run,
        "config": OmegaConf.to_container(cfg, resolve=True),
    }


def comparison_row(summary: dict[str, Any]) -> dict[str, Any]:
    """The run's comparison row: task, attention, seed, then linarena.metrics.row_metrics."""
    return {**{key: summary[key] for key in NAME_COLUMNS},
            **{m.key: summary["metrics"].get(m.key) for m in row_metrics()}}


def results_line(summary: dict[str, Any]) -> str:
    """The run's headline numbers in one line: test accuracy, throughput, peak memory."""
    metrics = summary["metrics"]

    def number(key: str, spec: str) -> str:
        value = metrics.get(key)
        return "n/a" if value is None else format(value, spec)

    ranks = summary.get("world_size", 1)
    over = f" over {ranks} processes" if ranks > 1 else ""
    # A pretraining stage's results are its objective's (summary["pretrain"]["metrics"]).
    results = (summary.get("pretrain") or {}).get("metrics")
    accuracy = (", ".join(f"{key}={'n/a' if value is None else format(value, '.4f')}"
                          for key, value in results.items() if "acc" in key) if results
                else f"{TEST_ACC.key}={number(TEST_ACC.key, '.4f')}, {VAL_ACC_BEST.key}="
                     f"{number(VAL_ACC_BEST.key, '.4f')}")
    return (f"{accuracy}, {number(TOKENS_PER_SEC.key, ',.0f')} tokens/s"
            f"{over}, peak memory {number(PEAK_MEMORY_MB.key, ',.0f')} MB, "
            f"{summary['duration_s']} s")


def logged_config(cfg: DictConfig, precision: str) -> dict[str, Any]:
    """The resolved config as loggers get it when the run starts, with the names a run is
    compared by at the top level (run_names: `task`, `attention`, `seed`, `debug`, `sweep`;
    scripts/compare.py --wandb reads them); the attention group's settings move to
    `attention_config`, and trainer.precision is the one actually used."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    resolved["attention_config"] = resolved.pop("attention")
    resolved["trainer"]["precision"] = precision
    return {**resolved, **run_names(cfg)}
