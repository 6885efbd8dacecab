"""Weights & Biases: online when credentials exist, offline otherwise; one run per job, resumable
from its output folder."""

from __future__ import annotations

import netrc
import os
import secrets
import string
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import wandb
from hydra.utils import instantiate
from lightning.pytorch.loggers import WandbLogger
from omegaconf import DictConfig

from linarena.files import write_text_atomic

RUN_ID_FILE = "wandb_run_id.txt"
STEP_METRIC = "trainer/global_step"
# How each metric is summarised in the runs table. "last" keeps a plain number in the summary
# (what scripts/compare.py reads); running averages, peaks and val/acc_best are already final in
# their last value. min/max summaries are stored as {"min": ...} / {"max": ...}.
METRIC_SUMMARIES = {
    "train/loss": "min",
    "val/loss": "min",
    "val/acc": "max",
    "val/acc_best": "last",
    "test/acc": "last",
    "test/loss": "last",
    "perf/samples_per_sec": "last",
    "perf/tokens_per_sec": "last",
    "perf/peak_memory_mb": "last",
}


def has_credentials() -> bool:
    """True when an API key is configured (env WANDB_API_KEY or an identity token file, or the
    .netrc entry for the W&B host, WANDB_BASE_URL or wandb's default); nothing is sent over the
    network."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    base_url = os.environ.get("WANDB_BASE_URL") or wandb.Settings().base_url
    host = urlsplit(base_url).hostname
    path = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        return netrc.netrc(str(path)).authenticators(host or "") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def choose_mode() -> str:
    """WANDB_MODE when set (dryrun counts as offline), else online with credentials, else
    offline."""
    mode = os.environ.get("WANDB_MODE")
    if mode:
        return "offline" if mode == "dryrun" else mode
    return "online" if has_credentials() else "offline"


def read_or_create_run_id(output_dir: Path, write: bool) -> str:
    """The W&B run id stored in the output folder, so a resumed run continues the same W&B run."""
    path = output_dir / RUN_ID_FILE
    if path.is_file():
        return path.read_text().strip()
    alphabet = string.ascii_lowercase + string.digits
    run_id = "".join(secrets.choice(alphabet) for _ in range(8))
    if write:
        write_text_atomic(path, run_id + "\n")
    return run_id


def build_wandb_logger(
    node: DictConfig,
    output_dir: Path,
    group: str,
    name: str,
    tags: list[str],
    job_type: str,
    is_rank_zero: bool,
) -> WandbLogger:
    """WandbLogger from its config; group/name/job_type are filled in where the config leaves
    them null. The mode is passed to wandb.init rather than as `offline=`, which would set
    WANDB_MODE for the whole process (and for every later job of a multirun)."""
    overrides: dict[str, Any] = {
        "id": read_or_create_run_id(output_dir, write=is_rank_zero),
        "resume": "allow",
        "mode": choose_mode(),
        "tags": sorted({*node.get("tags", []), *tags}),
    }
    for key, value in (("group", group), ("name", name), ("job_type", job_type)):
        if node.get(key) is None:
            overrides[key] = value
    return instantiate(node, **overrides)


def define_metrics(run: Any) -> None:
    """Summaries that make sense in the runs table (best val accuracy, last test accuracy)."""
    for metric, summary in METRIC_SUMMARIES.items():
        run.define_metric(metric, step_metric=STEP_METRIC, summary=summary)


COMPARISON_KEY = "comparison"
COMPARISON_COLUMNS = ("task", "attention", "seed", "test/acc", "val/acc_best",
                      "perf/tokens_per_sec", "perf/peak_memory_mb", "model/params")


def log_comparison_row(run: Any, summary: dict[str, Any]) -> None:
    """Log this run's one-row table under "comparison". A table panel on that key in a W&B
    workspace merges the rows of every run shown: task x attention x seed side by side."""
    row = [summary["task"], summary["attention"], summary["seed"]]
    row += [summary["metrics"].get(key) for key in COMPARISON_COLUMNS[3:]]
    run.log({COMPARISON_KEY: wandb.Table(columns=list(COMPARISON_COLUMNS), data=[row])})


def run_info(run: Any) -> dict[str, Any]:
    """id, local folder, url and mode of a live wandb run (for summary.json)."""
    mode = run.settings.mode
    return {
        "id": run.id,
        "dir": str(Path(run.settings.sync_dir).resolve()),
        "url": run.url if mode == "online" else None,  # offline runs have none (and warn)
        "mode": mode,
    }


def location_message(info: dict[str, Any]) -> str:
    """One line telling the user where the W&B run is."""
    if info["mode"] == "disabled":
        return "W&B is disabled (WANDB_MODE=disabled): nothing was logged to W&B."
    if info["mode"] == "offline":
        return f"W&B run (offline) stored in {info['dir']}; upload it with: wandb sync {info['dir']}"
    return f"W&B run: {info['url'] or info['dir']}"
