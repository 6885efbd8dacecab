"""One training run: fit, test with the best checkpoint, write summary.json, say where things are."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from lightning.pytorch import Trainer
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig

from linarena.analysis.provenance import code_version
from linarena.metrics import TEST_ACC, TEST_LOSS, VAL_ACC_BEST
from linarena.training.build import build_components
from linarena.training.checkpoint_identity import run_identity
from linarena.training.checks import fit_validation_interval
from linarena.training.errors import ConfigError, NonFiniteStateError
from linarena.training.resume import (
    append_history,
    check_checkpoint_fits,
    finished,
    restore_run_config,
)
from linarena.training.run_report import logger_fields, send_summary
from linarena.training.summary import (
    SUMMARY_FILE,
    build_summary,
    comparison_row,
    read_summary,
    results_line,
    write_summary,
)
from linarena.training.wandb_run import location_message

log = logging.getLogger(__name__)


def hydra_context() -> tuple[bool, str | None]:
    """(is this job part of a multirun, the launcher's _target_) or (False, None) outside
    Hydra (e.g. the compose API in tests)."""
    if not HydraConfig.initialized():
        return False, None
    hydra_cfg = HydraConfig.get()
    return hydra_cfg.mode == RunMode.MULTIRUN, hydra_cfg.launcher.get("_target_")


TEST_CHECKPOINTS = ("best", "last")


def read_test_checkpoint(cfg: DictConfig) -> str:
    """The `test_checkpoint` setting, checked before training starts."""
    which = str(cfg.get("test_checkpoint", "best"))
    if which not in TEST_CHECKPOINTS:
        raise ConfigError(
            f"test_checkpoint={which!r}: use test_checkpoint=best (best val/acc checkpoint) or "
            "test_checkpoint=last (the weights at the end of training, as the LRA scripts)."
        )
    return which


def checkpoint_to_test(trainer: Trainer, which: str) -> str | None:
    """"best": the best checkpoint of the first ModelCheckpoint (callbacks/default.yaml: by
    val/acc). "last", or no best checkpoint (fast_dev_run saves none): None, i.e. the weights in
    memory, which after fit are the final ones."""
    if which == "last":
        return None
    return getattr(trainer.checkpoint_callback, "best_model_path", None) or None


def train(cfg: DictConfig) -> float:
    """Train, validate and test one configuration; returns val/acc_best, the value
    hyperparameter searches maximise (check_config makes sure validation runs)."""
    started = time.monotonic()
    output_dir = Path(cfg.paths.output_dir).resolve()
    cfg, resume = restore_run_config(cfg, output_dir)
    if finished(cfg, resume):
        print(
            f"The run in {output_dir} already finished: its checkpoint {resume.checkpoint} is at "
            f"step {resume.step} and trainer.max_steps={cfg.trainer.max_steps}. Nothing was "
            "changed. To train longer, resume with a larger trainer.max_steps."
        )
        previous = read_summary(output_dir)
        return float((previous or {}).get("metrics", {}).get(VAL_ACC_BEST.key) or "nan")
    multirun, launcher = hydra_context()
    which_checkpoint = read_test_checkpoint(cfg)
    overrides = HydraConfig.get().overrides.task if HydraConfig.initialized() else []
    replaced = fit_validation_interval(cfg, overrides)
    if replaced is not None:
        log.info("Validating every %d steps (trainer.max_steps) instead of every %d: set "
                 "trainer.val_check_interval to choose.", cfg.trainer.max_steps, replaced)
    commit = code_version()
    identity = run_identity(cfg, commit)
    parts = build_components(cfg, output_dir, multirun, launcher, identity)
    if parts.ckpt_path is not None and resume is not None:
        check_checkpoint_fits(Path(parts.ckpt_path), parts.module, identity, resume)
    trainer = parts.trainer
    history = append_history(output_dir, resume) if resume is not None else []

    def run_fields() -> dict[str, Any]:
        """summary.json's facts about this run, finished or diverged."""
        return {"output_dir": str(output_dir), "device": parts.module.device.type,
                "commit": commit, "world_size": parts.perf.world_size,
                "global_step": trainer.global_step,
                "duration_s": round(time.monotonic() - started, 1), "resumes": history}

    try:
        trainer.fit(
            parts.module, datamodule=parts.datamodule, ckpt_path=parts.ckpt_path, weights_only=True
        )
        # Read before testing: loading the best checkpoint would restore an older maximum.
        best_val = parts.module.val_acc_best.compute().item()
        tested_ckpt = checkpoint_to_test(trainer, which_checkpoint)
        tested = trainer.test(
            parts.module, datamodule=parts.datamodule, ckpt_path=tested_ckpt, weights_only=True
        )
    except SIGTERMException:  # SIGTERM or SIGINT, while training or testing (signals.py)
        raise parts.signals.stopped(trainer, output_dir) from None
    except NonFiniteStateError as err:
        # A diverged run is a result (this lr fails), not a missing one: its summary.json says
        # so, with no accuracy, so studies and comparisons count it instead of rerunning it.
        if trainer.is_global_zero:
            write_summary(output_dir, build_summary(cfg, parts.precision, {}, {
                **run_fields(), "tested_checkpoint": None, "diverged": str(err)}))
        raise
    metrics = {
        **{key: tested[0].get(key) for key in (TEST_ACC.key, TEST_LOSS.key)},
        VAL_ACC_BEST.key: best_val,
        **parts.perf.final_metrics(),
        # Per test setting (MQARMixtureDataModule): test/acc_<setting>.
        **{key: value for key, value in tested[0].items() if key.startswith("test/acc_")},
    }
    if trainer.is_global_zero:
        summary = build_summary(cfg, parts.precision, metrics, {
            **run_fields(), "tested_checkpoint": "last" if tested_ckpt is None else "best"})
        summary |= logger_fields(trainer.loggers)
        write_summary(output_dir, summary)
        send_summary(trainer.loggers, summary, comparison_row(summary))
        print_locations(summary, output_dir)
    return best_val


def print_locations(summary: dict[str, Any], output_dir: Path) -> None:
    """The last lines of a run: where the results, checkpoints and W&B run are."""
    print(f"\nResults: {results_line(summary)}\n  in {output_dir / SUMMARY_FILE}")
    if (output_dir / "checkpoints").is_dir():
        print(f"Checkpoints: {output_dir / 'checkpoints'}")
    if summary["wandb"] is not None:
        print(location_message(summary["wandb"]))


