"""Finished training runs from the W&B API (scripts/compare.py --wandb): each becomes the
RunRecord a local summary.json would (linarena.analysis.runs), with task, attention, seed, sweep
and debug from its config (linarena logs them at the top level), else from group = task and name
``{attention}-s{seed}``, and its metrics from the run summary under summary.json's names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from linarena.analysis.runs import RunRecord, model_setting, read_metrics
from linarena.metrics import SCHEMA_VERSION

WANDB_RUN_NAME = re.compile(r"^(?P<attention>.+)-s(?P<seed>\d+)$")
# Filter keys that are W&B run attributes; any other key is looked up in the run's config.
WANDB_RUN_KEYS = frozenset({"group", "state", "display_name", "name", "job_type"})


def wandb_filters(filters: Mapping[str, Any]) -> dict[str, Any]:
    """The W&B API query for ``filters``: run attributes as they are, ``tags`` as membership,
    anything else a config key (``attention`` -> ``config.attention``). Only finished runs."""
    query: dict[str, Any] = {"state": "finished"}
    for key, value in filters.items():
        if key == "tags":
            query["tags"] = {"$in": [value]}
        elif key in WANDB_RUN_KEYS or key.startswith("config."):
            query[key] = value
        else:
            query[f"config.{key}"] = value
    return query


def record_from_wandb_run(run: Any) -> RunRecord:
    """A RunRecord from a ``wandb.apis.public.Run``: task, attention and seed from its config
    (linarena logs them at the top level), else from group = task and name ``{attention}-s{seed}``;
    metrics from the run summary."""
    where = f"W&B run {'/'.join(run.path)} ({run.name})"
    config = dict(run.config)
    match = WANDB_RUN_NAME.match(run.name or "")
    task = config.get("task") or run.group
    attention = config.get("attention") or (match and match["attention"])
    seed = config.get("seed", match and match["seed"])
    if not task or not attention or seed is None:
        raise ValueError(f"{where}: no task/attention/seed in its config, and not group = task, "
                         "name = '{attention}-s{seed}' (as linarena's training logs runs); "
                         "leave it out with --filter")
    max_steps = (config.get("trainer") or {}).get("max_steps")
    positions = model_setting(config, "positions")
    return RunRecord(
        task=str(task), attention=str(attention), seed=int(seed),
        metrics=read_metrics(dict(run.summary), where, SCHEMA_VERSION),
        source="/".join(run.path), sweep=str(config.get("sweep") or "runs"),
        debug=bool(config.get("debug")) or run.group == "debug",
        max_steps=None if max_steps is None else int(max_steps),
        positions=None if positions is None else str(positions),
    )


def load_wandb_runs(
    project: str, filters: Mapping[str, Any], include_debug: bool = False
) -> list[RunRecord]:
    """Finished runs of ``project`` ("entity/project") that match ``filters``, via wandb.Api();
    debug runs only with ``include_debug``."""
    import wandb

    if project.count("/") != 1:
        raise ValueError(f"--wandb {project!r}: expected ENTITY/PROJECT, e.g. my-team/linarena")
    try:
        runs = list(wandb.Api().runs(project, filters=wandb_filters(filters)))
    except wandb.errors.Error as error:  # no API key, unknown project, network
        raise ValueError(f"W&B API ({project}): {error} (log in with `wandb login` or set "
                         "WANDB_API_KEY; offline runs: `wandb sync <run dir>` first, or use "
                         "--runs on the local output folders)") from error
    records = [record_from_wandb_run(run) for run in runs]
    records = [r for r in records if include_debug or not r.debug]
    if not records:
        raise ValueError(f"no finished W&B run in {project} matches {wandb_filters(filters)}")
    return records
