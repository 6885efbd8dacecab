"""The `pretrain` group's settings (conf/pretrain/): which objective and stage a run is, its
masking fraction, the checks made before anything is built, and the config of each stage of a
two-stage run (training/stages.py).

A config without a `pretrain` node (a run started before the group existed) is pretrain=none.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from linarena.errors import ConfigError
from linarena.metrics import PRETRAIN_VAL_ACC, VAL_ACC
from linarena.training.known_keys import check_known_keys

NONE, MLM, LM = "none", "mlm", "lm"
OBJECTIVES = (NONE, MLM, LM)
BOTH, PRETRAIN, FINETUNE = "both", "pretrain", "finetune"
STAGES = (BOTH, PRETRAIN, FINETUNE)
# The stages of a two-stage run, in order; each trains in <run folder>/<stage>.
STAGE_ORDER = (PRETRAIN, FINETUNE)
STAGE_KEYS = ("objective", "stage", "max_steps", "val_check_interval", "optim")
KEYS = {NONE: ("objective",), MLM: (*STAGE_KEYS, "mask_fraction", "mask_fractions"),
        LM: STAGE_KEYS}
# What the fine-tuning stage starts from: the pretraining's final weights.
PRETRAINED_CHECKPOINT = Path(PRETRAIN) / "checkpoints" / "last.ckpt"


def objective(cfg: DictConfig) -> str:
    """pretrain.objective: none, mlm or lm (none where the config has no pretrain node)."""
    node = cfg.get("pretrain")
    return NONE if node is None else str(node.get("objective", NONE))


def stage(cfg: DictConfig) -> str | None:
    """pretrain.stage (both, pretrain or finetune); None under pretrain=none."""
    return None if objective(cfg) == NONE else str(cfg.pretrain.stage)


def adds_mask_token(cfg: DictConfig) -> bool:
    """Whether the model's token table has the mask token's row (id vocab_size) appended: in
    both stages of masked-token pretraining, so that fine-tuning keeps the pretrained table."""
    return objective(cfg) == MLM


def mask_fraction(cfg: DictConfig) -> float:
    """pretrain.mask_fraction, or the task's from pretrain.mask_fractions (by data= name)."""
    node = cfg.pretrain
    if node.get("mask_fraction") is not None:
        return float(node.mask_fraction)
    task = OmegaConf.select(cfg, "task_name", throw_on_resolution_failure=False)
    fractions = node.get("mask_fractions") or {}
    if task not in fractions:
        raise ConfigError(
            f"pretrain=mlm: no masking fraction is known for task {task!r} (pretrain."
            f"mask_fractions lists {', '.join(map(str, fractions)) or 'none'}); set "
            "pretrain.mask_fraction, e.g. pretrain.mask_fraction=0.15.")
    return float(fractions[task])


def check_pretrain(cfg: DictConfig) -> None:
    """The pretrain node's keys and values, and that the objective suits the model: masked-token
    prediction needs bidirectional attention, next-token prediction causal attention."""
    goal = objective(cfg)
    if goal not in OBJECTIVES:
        raise ConfigError(f"pretrain.objective={goal!r}: use pretrain=none, mlm or lm.")
    node = cfg.get("pretrain")
    if node is None:
        return
    check_known_keys(node.keys(), KEYS[goal], "pretrain", f"pretrain={goal} takes")
    if goal == NONE:
        return
    if node.stage not in STAGES:
        raise ConfigError(f"pretrain.stage={node.stage!r}: use both (pretrain, then fine-tune), "
                          "pretrain or finetune.")
    steps = node.max_steps
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ConfigError(f"pretrain.max_steps={steps!r}: it must be a whole number >= 1, e.g. "
                          "pretrain.max_steps=1000.")
    check_known_keys(node.optim.keys(), cfg.optim.keys(), "pretrain.optim",
                     f"{cfg.optim._target_} takes")
    check_objective_fits_model(cfg, goal)
    if goal == MLM:
        fraction = mask_fraction(cfg)
        if not 0 < fraction < 1:
            raise ConfigError(f"pretrain.mask_fraction={fraction!r}: the fraction of each "
                              "input's real tokens to mask lies in (0, 1), e.g. 0.15.")
    if node.stage == FINETUNE and not cfg.get("init_weights"):
        raise ConfigError("pretrain.stage=finetune starts from a pretraining run's weights: set "
                          "init_weights=<its folder>/checkpoints/last.ckpt (or pretrain.stage="
                          "both to pretrain first).")
    if node.stage != FINETUNE and cfg.get("init_weights"):
        raise ConfigError(f"init_weights={cfg.init_weights} with pretrain.stage={node.stage}: "
                          "self-pretraining starts from fresh weights. Drop init_weights, or set "
                          "pretrain.stage=finetune to fine-tune from a pretraining checkpoint.")


def check_objective_fits_model(cfg: DictConfig, goal: str) -> None:
    """ConfigError when the objective needs the other kind of attention than the model's
    (model.causal; null is the task's own, from its datamodule's constructor, which reads no
    data)."""
    causal = cfg.model.get("causal")
    whose = f"model.causal={str(causal).lower()}"
    if causal is None:
        causal = bool(instantiate(cfg.data).causal)
        whose = f"task {cfg.data._target_.rsplit('.', 1)[-1]} is {'causal' if causal else 'not'}"
    if goal == MLM and causal:
        raise ConfigError(f"pretrain=mlm with a causal model ({whose}): masked-token prediction "
                          "needs bidirectional attention; use pretrain=lm for causal models.")
    if goal == LM and not causal:
        raise ConfigError(f"pretrain=lm with a bidirectional model ({whose}): each position "
                          "would see the token it predicts; use pretrain=mlm, or model.causal="
                          "true model.pooling=mean.")


def use_pretraining_monitor(cfg: DictConfig) -> None:
    """The pretraining stage logs no val/acc: its checkpoint callbacks that monitor val/acc
    monitor its masked-token (or next-token) accuracy instead, pretrain/val_acc."""
    for node in (cfg.get("callbacks") or {}).values():
        if isinstance(node, DictConfig) and node.get("monitor") == VAL_ACC.key:
            with open_dict(node):
                node.monitor = PRETRAIN_VAL_ACC.key
                if node.get("filename"):
                    node.filename = str(node.filename).replace(
                        "{" + VAL_ACC.key, "{" + PRETRAIN_VAL_ACC.key)


def stage_config(cfg: DictConfig, which: str, run_dir: Path) -> DictConfig:
    """The config of stage `which` (pretrain or finetune) of the two-stage run in `run_dir`: the
    run's config in <run_dir>/<which>, with pretrain.stage set. The pretraining stage trains
    pretrain.max_steps steps with the optim settings changed by pretrain.optim; the fine-tuning
    stage is the run's own trainer and optim, from the pretraining's last checkpoint. Each
    stage's W&B run is tagged spt-pretrain or spt-finetune."""
    staged = copy.deepcopy(cfg)
    node = staged.pretrain
    with open_dict(staged):
        staged.paths.output_dir = str(run_dir / which)
        staged.ckpt_path = None
        staged.tags = [*staged.get("tags", []), f"spt-{which}"]  # the stages' W&B runs apart
        node.stage = which
        if which == FINETUNE:
            staged.init_weights = str(run_dir / PRETRAINED_CHECKPOINT)
            return staged
        staged.init_weights = None
        trainer = staged.trainer
        interval = node.val_check_interval
        if interval is None and isinstance(trainer.val_check_interval, int):
            interval = min(trainer.val_check_interval, node.max_steps)
        trainer.max_steps = node.max_steps
        trainer.val_check_interval = interval
        for key, value in node.optim.items():
            staged.optim[key] = value
    return staged


def pretrain_record(cfg: DictConfig) -> dict[str, Any]:
    """summary.json's "pretrain" block of a run under pretrain=mlm or lm: its objective and
    stage, and for mlm the masking fraction."""
    node = cfg.pretrain
    record: dict[str, Any] = {"objective": str(node.objective), "stage": str(node.stage)}
    if node.objective == MLM:
        record["mask_fraction"] = mask_fraction(cfg)
    return record
