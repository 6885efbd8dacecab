"""One training run, top to bottom: restore (a resumed run's own config), check (keys and
values, launch, memory; nothing of the run is built), build (data module and model, then, once
the data and any checkpoint to start from are known to fit, loggers, callbacks and trainer;
building checks nothing), fit, test, summarise (summary.json, the loggers, where things are)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig

from linarena.attention.engine.backend import backend_used
from linarena.errors import NonFiniteStateError
from linarena.metrics import (
    PRETRAIN_TEST_ACC,
    PRETRAIN_TEST_LOSS,
    PRETRAIN_VAL_ACC_BEST,
    TEST_ACC,
    TEST_LOSS,
    VAL_ACC_BEST,
    Metric,
    finite_or_none,
)
from linarena.system import code_version, machine
from linarena.training import pretrain_config
from linarena.training.build import build_module, build_trainer
from linarena.training.checkpoint_identity import checkpoint_run_folder, run_identity
from linarena.training.config_checks import check_config, fit_validation_interval
from linarena.training.launch import check_launch
from linarena.training.memory import check_memory
from linarena.training.pretrain import TokenCount
from linarena.training.pretrained_weights import load_pretrained_weights, weight_report
from linarena.training.resume import (
    append_history,
    check_checkpoint_fits,
    load_initial_weights,
    restore_run_config,
)
from linarena.training.run_report import logger_fields, send_summary
from linarena.training.summary import (
    SUMMARY_FILE,
    build_summary,
    comparison_row,
    logged_config,
    read_summary,
    results_line,
    write_summary,
)
from linarena.training.wandb_run import location_message

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> float:
    """Train, validate and test one configuration; returns val/acc_best, the value
    hyperparameter searches maximise (check_config makes sure validation runs)."""
    started = time.monotonic()
    # This process's CPU time (all its threads), against the wall time: what the run had of the
    # machine, so a comparison can tell a slow run from one starved by other processes.
    started_cpu = time.process_time()
    output_dir = Path(cfg.paths.output_dir).resolve()
    commit = code_version()

    # Restore: a resumed run continues with its own saved config plus the allowed changes.
    cfg, resume = restore_run_config(cfg, output_dir)
    if pretrain_config.stage(cfg) == pretrain_config.PRETRAIN:
        pretrain_config.use_pretraining_monitor(cfg)  # it logs no val/acc
    if resume is not None and resume.finished:
        # Nothing left to train, but a checkpoint of another run is still refused.
        _, module = build_module(cfg)
        check_checkpoint_fits(resume.checkpoint, module, run_identity(cfg, commit), resume)
        return report_finished(cfg, checkpoint_run_folder(resume.checkpoint), resume.checkpoint,
                               resume.step)

    # Check everything that can be checked before anything is built or read.
    overrides = HydraConfig.get().overrides.task if HydraConfig.initialized() else []
    replaced = fit_validation_interval(cfg, overrides)
    if replaced is not None:
        log.info("Validating every %d steps (trainer.max_steps) instead of every %d: set "
                 "trainer.val_check_interval to choose.", cfg.trainer.max_steps, replaced)
    check_config(cfg, resumed=resume is not None)
    precision = check_launch(cfg.trainer)
    check_memory(cfg, str(cfg.trainer.accelerator))

    # Build the data module and the model (no data is read yet); the run's identity is the
    # config as built (build_model writes what it resolves into cfg).
    seed_everything(cfg.seed, workers=True)
    datamodule, module = build_module(cfg)
    identity = run_identity(cfg, commit)
    # Missing data that will not be downloaded or generated, and a checkpoint that is not this
    # run's (ckpt_path) or not this model's (init_weights): said now, before loggers start a
    # W&B run for a training that cannot happen.
    datamodule.check_available()
    if resume is not None:
        check_checkpoint_fits(resume.checkpoint, module, identity, resume)
    elif pretrain_config.stage(cfg) == pretrain_config.FINETUNE:
        # Every weight but the heads, from a pretraining checkpoint (a resumed run's weights come
        # from its own checkpoint).
        load_pretrained_weights(Path(cfg.init_weights), module, identity)
    elif cfg.get("init_weights"):
        load_initial_weights(Path(cfg.init_weights), module, identity)
    # Then the loggers, callbacks and trainer around them.
    parts = build_trainer(cfg, module, output_dir, precision, identity)
    trainer = parts.trainer
    for logger in trainer.loggers:
        logger.log_hyperparams(logged_config(cfg, precision))
    ckpt_path = None if resume is None else str(resume.checkpoint)
    history = [] if resume is None else append_history(output_dir, resume)

    def run_fields() -> dict[str, Any]:
        """summary.json's facts about this run, finished or diverged."""
        return {"output_dir": str(output_dir), "device": module.device.type,
                "attention_backend": backend_used(module), "commit": commit,
                "machine": machine(module.device.type),
                "world_size": parts.perf.world_size,
                "global_step": trainer.global_step,
                "duration_s": round(time.monotonic() - started, 1),
                "cpu_s": round(time.process_time() - started_cpu, 1), "resumes": history,
                **pretrain_fields(cfg, module, trainer)}

    # Fit, then test the best (or last) weights.
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
        # Read before testing: loading the best checkpoint would restore an older maximum.
        best_val = module.val_acc_best.compute().item()
        tested_ckpt = checkpoint_to_test(trainer, str(cfg.get("test_checkpoint", "best")))
        tested = trainer.test(
            module, datamodule=datamodule, ckpt_path=tested_ckpt, weights_only=True
        )
    except SIGTERMException:  # SIGTERM or SIGINT, while training or testing (signals.py)
        raise parts.signals.stopped(trainer, output_dir) from None
    except NonFiniteStateError as err:
        # A diverged run is a result (this lr fails), not a missing one: its summary.json says
        # so, with no accuracy, so studies and comparisons count it instead of rerunning it.
        if trainer.is_global_zero:
            write_summary(output_dir, build_summary(cfg, precision, {}, {
                **run_fields(), "tested_checkpoint": None, "diverged": str(err)}))
        raise

    # Summarise: summary.json, the loggers' summaries, where things are.
    metrics = {
        **{key: tested[0].get(key) for key in (TEST_ACC.key, TEST_LOSS.key)},
        VAL_ACC_BEST.key: best_val,
        **parts.perf.final_metrics(),
        # Per test setting (MQARMixtureDataModule): test/acc_<setting>.
        **{key: value for key, value in tested[0].items() if key.startswith("test/acc_")},
    }
    if trainer.is_global_zero:
        summary = build_summary(cfg, precision, metrics, {
            **run_fields(), "tested_checkpoint": "last" if tested_ckpt is None else "best"})
        if pretrain_config.stage(cfg) == pretrain_config.PRETRAIN:
            summary["pretrain"]["metrics"] = metrics_block_of(
                PRETRAIN_RESULTS, {**tested[0], PRETRAIN_VAL_ACC_BEST.key: best_val})
        summary |= logger_fields(trainer.loggers)
        write_summary(output_dir, summary)
        send_summary(trainer.loggers, summary, comparison_row(summary))
        print_locations(summary, output_dir)
    return best_val


def report_finished(cfg: DictConfig, output_dir: Path, checkpoint: Path, step: int) -> float:
    """Say that the resumed run had nothing left to train; its val/acc_best (nan if unknown)."""
    print(
        f"The run in {output_dir} already finished: its checkpoint {checkpoint} is at step "
        f"{step} and trainer.max_steps={cfg.trainer.max_steps}. Nothing was changed. To train "
        "longer, resume with a larger trainer.max_steps."
    )
    previous = read_summary(output_dir)
    return float((previous or {}).get("metrics", {}).get(VAL_ACC_BEST.key) or "nan")


def checkpoint_to_test(trainer: Trainer, which: str) -> str | None:
    """"best": the best checkpoint of the first ModelCheckpoint (callbacks/default.yaml: by
    val/acc). "last", or no best checkpoint (fast_dev_run saves none): None, i.e. the weights in
    memory, which after fit are the final ones."""
    if which == "last":
        return None
    return getattr(trainer.checkpoint_callback, "best_model_path", None) or None


# The results of a pretraining stage, in its summary.json's "pretrain" block.
PRETRAIN_RESULTS = (PRETRAIN_TEST_ACC, PRETRAIN_TEST_LOSS, PRETRAIN_VAL_ACC_BEST)


def metrics_block_of(metrics: tuple[Metric, ...], values: dict[str, Any]) -> dict[str, Any]:
    """{key: value} of `metrics` (None where missing or not finite)."""
    return {metric.key: finite_or_none(values.get(metric.key)) for metric in metrics}


def pretrain_fields(cfg: DictConfig, module: Any, trainer: Trainer) -> dict[str, Any]:
    """summary.json's fields of a run under pretrain=mlm or lm, none under pretrain=none:
    "pretrain" (objective, stage, masking fraction, the real tokens trained on) and, for a
    fine-tuning stage, "init_weights" (which weights came from the pretraining checkpoint and
    which were initialised: pretrained_weights.weight_report)."""
    if pretrain_config.objective(cfg) == pretrain_config.NONE:
        return {}
    counter = next((c for c in trainer.callbacks if isinstance(c, TokenCount)), None)
    record = {**pretrain_config.pretrain_record(cfg),
              "tokens": None if counter is None else counter.tokens}
    if pretrain_config.stage(cfg) != pretrain_config.FINETUNE:
        return {"pretrain": record}
    return {"pretrain": record, "init_weights": weight_report(module, cfg.init_weights)}


def print_locations(summary: dict[str, Any], output_dir: Path) -> None:
    """The last lines of a run: where the results, checkpoints and W&B run are."""
    print(f"\nResults: {results_line(summary)}\n  in {output_dir / SUMMARY_FILE}")
    if (output_dir / "checkpoints").is_dir():
        print(f"Checkpoints: {output_dir / 'checkpoints'}")
    if summary["wandb"] is not None:
        print(location_message(summary["wandb"]))
