"""Where the time of one small-model training step goes (the MQAR study's runs, on CPU).

For one case (attention, d_model, threads) the study's config is composed as a study run
composes it (`experiment=mqar_study_cpu attention=<name> model.d_model=<w> logger=none`, plus
`model.short_conv=0` for layers with their own convolutions; a hybrid by its preset entry's
model.pattern) and its datamodule, module and trainer are built as train.py builds them
(training.build.build_components: the same callbacks and plugins). Then, with validation off:

- whole_step: `trainer.fit` of warmup + steps + 1 steps; the time between consecutive
  on_train_batch_end calls, i.e. one full loop iteration (fetch, hooks, training step,
  backward, optimizer, scheduler, callbacks, Lightning's handling of the logged values);
- its parts, timed directly on the same module, optimizer and train loader right after that
  fit (on_train_end, still inside the fit so that the module's self.log works):
  data (next batch of the train loader), forward (the module's loss: ClassificationModule._loss),
  metrics_logging (the rest of training_step: train accuracy and the self.log calls),
  backward (loss.backward()), optimizer (optimizer.step, zero_grad and the lr schedule's step);
- loop_overhead = whole_step minus the sum of the parts: what Lightning's loop and the
  callbacks add around them.

Every figure is a median over the timed steps (time.perf_counter; CPU only, so nothing needs a
synchronisation). Start-up (startup_rows): the wall time of `python train.py --help` and of
importing what a run imports, and the largest imports of `python -X importtime train.py --help`.
"""

from __future__ import annotations

import itertools
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch import Callback, LightningModule, Trainer
from omegaconf import DictConfig, open_dict

from linarena.attention.variants import variant_names
from linarena.quiet import silence_library_noise
from linarena.studies.preset import compose_preset, load_grid
from linarena.studies.state_size import trains_at
from linarena.system import REPO_ROOT
from linarena.training.build import build_components
from linarena.training.config_checks import check_config
from linarena.training.launch import check_launch

PRESET = "mqar_study_cpu"
DEFAULT_ATTENTIONS = ("softmax", "elu", "gla", "mamba2_layer", "gated_deltanet+softmax")
DEFAULT_WIDTHS = (16, 64)
DEFAULT_THREADS = (1, 2)
PARTS = ("data", "forward", "backward", "optimizer", "metrics_logging")
WHOLE, OVERHEAD = "whole_step", "loop_overhead"
# ms: median milliseconds per step (start-up rows: milliseconds once); share: of whole_step
# (start-up rows: of the wall time of `python train.py --help`); steps: how many steps the
# median is over (start-up: runs).
COLUMNS = ("attention", "d_model", "threads", "part", "ms", "share", "steps")
STARTUP = "startup"


@dataclass(frozen=True)
class Case:
    """One profiled configuration: a variant name or a hybrid entry of the preset (its
    pattern name, e.g. gated_deltanet+softmax), the model width and torch's thread count."""

    attention: str
    d_model: int
    threads: int


def case_overrides(attention: str, d_model: int, preset: str = PRESET) -> list[str]:
    """The train.py overrides a study run of `attention` at `d_model` has (studies.study:
    attention=, the preset's entry for it, logger=none; model.short_conv=0 for a model with a
    layer that owns its short convolutions, as the study trains those only at 0)."""
    entries = load_grid(preset)["entries"]
    if attention not in variant_names() and attention not in entries:
        raise ValueError(f"{attention!r} is neither a conf/attention/ variant nor an entry of "
                         f"experiment={preset} ({', '.join(entries)})")
    variant = [f"attention={attention}"] if attention in variant_names() else []
    conv = [] if trains_at(attention, 1) else ["model.short_conv=0"]
    return [*variant, f"model.d_model={d_model}", *conv, *entries.get(attention, []),
            "logger=none"]


def compose_case(case: Case, output_dir: Path, preset: str = PRESET,
                 extra: Sequence[str] = ()) -> DictConfig:
    """The checked config of a study run of `case`, its Hydra runtime installed with
    `output_dir` as the run's folder (paths.output_dir resolves to it)."""
    cfg = compose_preset(preset, [*case_overrides(case.attention, case.d_model, preset), *extra],
                         hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(output_dir)
        cfg.hydra.job.num = 0
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    check_config(cfg)
    return cfg


class StepTimer(Callback):
    """Records when each training batch ends (whole steps), then at the end of training times
    the parts of `steps` more steps on the same module (time_parts)."""

    def __init__(self, warmup: int, steps: int) -> None:
        self.warmup, self.steps = warmup, steps
        self.ends: list[float] = []
        self.parts: dict[str, list[float]] = {}

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        self.ends.append(time.perf_counter())

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.parts = time_parts(trainer, pl_module, self.warmup, self.steps)

    def whole_steps(self) -> list[float]:
        """Seconds of each loop iteration after the warm-up steps."""
        ends = self.ends[self.warmup:]
        return [b - a for a, b in itertools.pairwise(ends)]


def time_parts(trainer: Trainer, module: LightningModule, warmup: int,
               steps: int) -> dict[str, list[float]]:
    """Seconds of each part (PARTS) of `steps` training steps after `warmup` untimed ones, run
    by hand on the trainer's module, optimizer, lr schedule and train loader."""
    optimizer = trainer.optimizers[0]
    schedulers = [config.scheduler for config in trainer.lr_scheduler_configs]
    batches = iter(trainer.train_dataloader)
    loss_fn = module._loss
    forward_seconds = [0.0]

    def timed_loss(batch: dict[str, torch.Tensor]) -> Any:
        start = time.perf_counter()
        result = loss_fn(batch)
        forward_seconds[0] = time.perf_counter() - start
        return result

    # training_step is called whole, so that metrics_logging is exactly what it does beyond the
    # loss (no copy of its body to drift): its time minus that of _loss, timed by the wrapper.
    # self.log needs the hook's name, which Lightning sets around the hooks it calls itself.
    module._loss = timed_loss
    previous_fx = module._current_fx_name
    module._current_fx_name = "training_step"
    times: dict[str, list[float]] = {part: [] for part in PARTS}
    try:
        for index in range(warmup + steps):
            t0 = time.perf_counter()
            try:
                batch = next(batches)
            except StopIteration:  # an epoch's end: a new one, as the loop would start
                batches = iter(trainer.train_dataloader)
                batch = next(batches)
            t1 = time.perf_counter()
            loss = module.training_step(batch, index)
            t2 = time.perf_counter()
            loss.backward()
            t3 = time.perf_counter()
            optimizer.step()
            optimizer.zero_grad()
            for scheduler in schedulers:
                scheduler.step()
            t4 = time.perf_counter()
            if index < warmup:
                continue
            times["data"].append(t1 - t0)
            times["forward"].append(forward_seconds[0])
            times["metrics_logging"].append(t2 - t1 - forward_seconds[0])
            times["backward"].append(t3 - t2)
            times["optimizer"].append(t4 - t3)
    finally:
        del module._loss  # the instance attribute; the class's method shows again
        module._current_fx_name = previous_fx
    return times


def profile_case(case: Case, steps: int, warmup: int, preset: str = PRESET,
                 extra: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The rows (COLUMNS) of one case: whole_step, each part and loop_overhead, in ms per step
    (medians over `steps` steps after `warmup`). `extra`: more train.py overrides (tests)."""
    silence_library_noise()
    threads, hydra = torch.get_num_threads(), HydraConfig.instance().cfg
    torch.set_num_threads(case.threads)
    try:
        with tempfile.TemporaryDirectory(prefix="step_profile_") as folder:
            cfg = compose_case(case, Path(folder), preset, extra)
            with open_dict(cfg):
                # After check_config, which refuses a run without validation: the profile
                # trains warmup + steps + 1 steps (steps intervals after the warm-up) and
                # validates never, so no iteration holds a validation.
                cfg.trainer.max_steps = warmup + steps + 1
                cfg.trainer.limit_val_batches = 0
                cfg.trainer.num_sanity_val_steps = 0
            parts = build_components(cfg, Path(folder), None, check_launch(cfg.trainer))
            timer = StepTimer(warmup, steps)
            parts.trainer.callbacks.append(timer)
            parts.trainer.fit(parts.module, datamodule=parts.datamodule)
    finally:  # the caller's threads and Hydra runtime (none, outside train.py) again
        torch.set_num_threads(threads)
        HydraConfig.instance().cfg = hydra
    return case_rows(case, timer.whole_steps(), timer.parts)


def case_rows(case: Case, whole: list[float], parts: dict[str, list[float]]
              ) -> list[dict[str, Any]]:
    """COLUMNS rows from seconds per step: medians in ms, loop_overhead the rest of whole_step,
    each share of whole_step."""
    ms = {part: 1e3 * statistics.median(parts[part]) for part in PARTS}
    whole_ms = 1e3 * statistics.median(whole)
    ms[OVERHEAD] = whole_ms - sum(ms.values())
    ms[WHOLE] = whole_ms
    return [{"attention": case.attention, "d_model": case.d_model, "threads": case.threads,
             "part": part, "ms": value, "share": value / whole_ms, "steps": len(whole)}
            for part, value in ms.items()]


def profile(cases: Sequence[Case], steps: int, warmup: int, preset: str = PRESET,
            on_case: Callable[[list[dict[str, Any]]], None] | None = None
            ) -> list[dict[str, Any]]:
    """profile_case of every case in turn; `on_case` gets the rows so far after each."""
    rows: list[dict[str, Any]] = []
    for case in cases:
        rows.extend(profile_case(case, steps, warmup, preset))
        if on_case is not None:
            on_case(rows)
    return rows


TRAIN_PY = REPO_ROOT / "train.py"
# What a run imports before it trains (train.py imports it in main; --help does not).
RUN_IMPORT = "linarena.training.entry"
# A line of -X importtime: "import time:      self [us] | cumulative | imported package".
_IMPORT_LINE = re.compile(r"^import time:\s*(\d+)\s*\|\s*(\d+)\s*\|(\s*)(\S+)\s*$")


def wall_seconds(command: list[str], repeats: int) -> float:
    """Median wall time of running `command` from the repository root, `repeats` times."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, cwd=REPO_ROOT, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def largest_imports(importtime: str, top: int) -> list[tuple[str, float]]:
    """(module, cumulative ms) of the `top` largest cumulative import times in the stderr of
    `python -X importtime` (a module's cumulative time holds the imports it made)."""
    found = []
    for line in importtime.splitlines():
        match = _IMPORT_LINE.match(line)
        if match:
            found.append((match.group(4), int(match.group(2)) / 1e3))
    return sorted(found, key=lambda item: -item[1])[:top]


def startup_rows(repeats: int = 3, top: int = 10) -> list[dict[str, Any]]:
    """COLUMNS rows of start-up (attention "startup"): the wall time of `python train.py
    --help` and of `python -c "import linarena.training.entry"` (medians of `repeats`), and the
    `top` largest cumulative imports of `python -X importtime train.py --help`, each with its
    share of the --help wall time."""
    python = sys.executable
    help_s = wall_seconds([python, str(TRAIN_PY), "--help"], repeats)
    run_import_s = wall_seconds([python, "-c", f"import {RUN_IMPORT}"], repeats)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    traced = subprocess.run([python, "-X", "importtime", str(TRAIN_PY), "--help"], cwd=REPO_ROOT,
                            env=env, check=True, capture_output=True, text=True)
    row = {"attention": STARTUP, "d_model": "", "threads": ""}
    rows = [{**row, "part": "python train.py --help", "ms": 1e3 * help_s, "share": 1.0,
             "steps": repeats},
            {**row, "part": f"python -c 'import {RUN_IMPORT}'", "ms": 1e3 * run_import_s,
             "share": None, "steps": repeats}]
    rows += [{**row, "part": f"import {module}", "ms": ms, "share": ms / (1e3 * help_s),
              "steps": 1} for module, ms in largest_imports(traced.stderr, top)]
    return rows


def step_table(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """ms per step, one row per (attention, d_model, threads), one column per part (whole_step,
    the parts, loop_overhead), in the order the cases were profiled."""
    table = pd.DataFrame([row for row in rows if row["attention"] != STARTUP],
                         columns=list(COLUMNS))
    keys = ["attention", "d_model", "threads"]
    order = list(dict.fromkeys(map(tuple, table[keys].itertuples(index=False))))
    wide = table.pivot_table(index=keys, columns="part", values="ms", sort=False)
    wide = wide.reindex(pd.MultiIndex.from_tuples(order, names=keys))
    return wide[[WHOLE, *PARTS, OVERHEAD]]


def format_report(rows: Sequence[dict[str, Any]]) -> str:
    """The printed summary: ms per step per part of each case, then start-up."""
    lines = ["ms per step (median):", step_table(rows).round(2).to_string()]
    startup = [row for row in rows if row["attention"] == STARTUP]
    if startup:
        lines.append("start-up (ms once; share of `python train.py --help`):")
        lines += [f"  {row['ms']:8.0f}  {row['part']}" for row in startup]
    return "\n".join(lines)
