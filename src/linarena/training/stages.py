"""One command for both stages of self-pretraining (pretrain=mlm or lm, pretrain.stage=both):
pretrain, then fine-tune from the pretraining's last checkpoint, each an ordinary single-stage
run (run.train) in its own subfolder of the run folder, <run>/pretrain and <run>/finetune; then
one summary.json at <run> with both stages' steps, tokens, time and results.

A stage whose summary.json says it finished is skipped and one stopped after a checkpoint
resumes from it, so a stopped run continues in the stage it was in: `python train.py
ckpt_path=last hydra.run.dir=<run>` (the command a stopped stage prints), or a -m sweep run again
with its own command (linarena.training.sweep_resume restarts the job, which finds its stages).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from linarena.commands import resume_command
from linarena.errors import ConfigError, NonFiniteStateError, ResumeError
from linarena.metrics import TEST_ACC, VAL_ACC_BEST
from linarena.training import pretrain_config
from linarena.training.pretrain_config import FINETUNE, PRETRAIN, STAGE_ORDER
from linarena.training.resume import has_saved_config, restore_saved_config
from linarena.training.run import train
from linarena.training.signals import RunStopped
from linarena.training.summary import (
    SUMMARY_FILE,
    read_summary,
    results_line,
    sweep_label,
    write_summary,
)

# Written into each stage's summary.json: the run it is part of. Comparisons read the run's own
# summary.json, not its stages' (analysis.runs).
PART_OF_RUN = "part_of_run"
# Of a stage's summary.json, what the run's summary lists for it.
STAGE_FIELDS = ("output_dir", "global_step", "duration_s", "cpu_s", "tested_checkpoint",
                "resumes", "wandb", "diverged", "init_weights")


def is_two_stage(cfg: DictConfig) -> bool:
    """Whether `cfg` runs both stages: pretrain.stage=both, or a resume (ckpt_path) of a run
    folder whose saved config says so."""
    output_dir = Path(cfg.paths.output_dir).resolve()
    if cfg.get("ckpt_path") is not None and has_saved_config(output_dir):
        cfg = OmegaConf.load(output_dir / ".hydra" / "config.yaml")
    return pretrain_config.stage(cfg) == pretrain_config.BOTH


def train_stages(cfg: DictConfig) -> float:
    """Pretrain, then fine-tune, each in <run>/<stage>; writes <run>/summary.json. Returns the
    fine-tuning's val/acc_best (what a hyperparameter search maximises)."""
    run_dir = Path(cfg.paths.output_dir).resolve()
    if cfg.get("ckpt_path") is not None:
        cfg = restored_config(cfg, run_dir)
    summaries: dict[str, dict[str, Any]] = {}
    for which in STAGE_ORDER:
        try:
            summaries[which] = run_stage(pretrain_config.stage_config(cfg, which, run_dir),
                                         run_dir)
        except NonFiniteStateError as err:
            # A diverged stage is a result (this setting fails): the run's summary says so.
            stopped = read_summary(run_dir / which)
            if stopped is not None:
                summaries[which] = stopped
                write_summary(run_dir, run_summary(cfg, run_dir, summaries, f"{which}: {err}"))
            raise
    summary = run_summary(cfg, run_dir, summaries)
    write_summary(run_dir, summary)
    print(f"\nResults of both stages: {results_line(summary)}\n  in {run_dir / SUMMARY_FILE}")
    value = summary["metrics"].get(VAL_ACC_BEST.key)
    return float("nan") if value is None else float(value)


def restored_config(cfg: DictConfig, run_dir: Path) -> DictConfig:
    """The config of the two-stage run in `run_dir` to continue with: its saved one, with the
    changes a resume may make (resume.MUTABLE); each stage then finds its own checkpoint."""
    if str(cfg.ckpt_path) != "last":
        raise ConfigError(f"ckpt_path={cfg.ckpt_path}: a two-stage run continues from its folder, "
                          f"each stage from its own last checkpoint: {resume_command(run_dir)}")
    restored, _, _ = restore_saved_config(run_dir)
    with open_dict(restored):
        restored.paths.output_dir = str(run_dir)
    return restored


def run_stage(staged: DictConfig, run_dir: Path) -> dict[str, Any]:
    """Train one stage (its config: pretrain_config.stage_config) unless its summary.json says
    it finished; resume it from its last checkpoint when it has one. Returns its summary."""
    which = str(staged.pretrain.stage)
    folder = Path(staged.paths.output_dir)
    done = read_summary(folder)
    if done is not None and not done.get("diverged") and (
            done.get("global_step", 0) >= staged.trainer.max_steps):
        print(f"The {which} stage already finished in {folder}: skipped.", flush=True)
        return done
    resuming = (folder / "checkpoints" / "last.ckpt").is_file()
    with open_dict(staged):
        staged.ckpt_path = "last" if resuming else None
    print(f"\n{'Resuming' if resuming else 'Starting'} the {which} stage in {folder}", flush=True)
    try:
        train(staged)
    except RunStopped as err:
        # The stage's own resume command would compose a default config: the run's resumes it.
        err.args = (str(err).replace(resume_command(folder), resume_command(run_dir)),)
        raise
    summary = read_summary(folder)
    if summary is None:  # its checkpoint was at the last step, but it stopped before testing
        raise ResumeError(
            f"The {which} stage in {folder} reached its last step but wrote no {SUMMARY_FILE} "
            f"(stopped while testing): remove {folder} to train that stage again, then "
            f"{resume_command(run_dir)}")
    summary[PART_OF_RUN] = str(run_dir)
    write_summary(folder, summary)
    return summary


def stage_record(summary: dict[str, Any]) -> dict[str, Any]:
    """What the run's summary lists of one stage: its folder, steps, tokens, time, results."""
    record = {key: summary[key] for key in STAGE_FIELDS if key in summary}
    pretrain = summary.get("pretrain") or {}
    record["tokens"] = pretrain.get("tokens")
    record["metrics"] = pretrain.get("metrics") or summary.get("metrics")
    return record


def run_summary(cfg: DictConfig, run_dir: Path, summaries: dict[str, dict[str, Any]],
                diverged: str | None = None) -> dict[str, Any]:
    """The run's summary.json: the fine-tuning stage's (its names, hparams and metrics are the
    run's result, which comparisons read), then "pretrain" (objective, masking fraction) and
    "stages" (stage_record of each); steps, tokens and time are the sums of the stages'. A run
    whose stage diverged has the diverging stage's message and no metrics."""
    stages = {which: stage_record(summary) for which, summary in summaries.items()}
    fine = summaries.get(FINETUNE) or summaries[PRETRAIN]  # no accuracy: the pretraining's
    summary = {key: value for key, value in fine.items()
               if key not in (PART_OF_RUN, "pretrain", "init_weights", "diverged")}
    summary.pop("config", None)
    summary.update({
        "sweep": sweep_label(cfg),
        "output_dir": str(run_dir),
        "global_step": sum(s.get("global_step") or 0 for s in stages.values()),
        "tokens": sum(s.get("tokens") or 0 for s in stages.values()),
        "duration_s": round(sum(s.get("duration_s") or 0 for s in stages.values()), 1),
        "cpu_s": round(sum(s.get("cpu_s") or 0 for s in stages.values()), 1),
        "pretrain": pretrain_config.pretrain_record(cfg),
        "stages": stages,
        "config": OmegaConf.to_container(cfg, resolve=True),
    })
    if diverged is not None:
        summary["diverged"] = diverged
        summary["metrics"] = {**summary["metrics"], TEST_ACC.key: None}
    return summary
