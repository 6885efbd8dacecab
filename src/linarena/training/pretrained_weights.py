"""Fine-tuning from a self-pretraining checkpoint (pretrain.stage=finetune init_weights=<it>):
every weight of the classifier but its head comes from the checkpoint, the mask token's row of
the token table included; the classifier head starts from this run's own initialisation and the
pretraining's LM head is dropped. The run says which weights it carried and which it
initialised, on the console and in summary.json ("init_weights")."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from torch import nn

from linarena.errors import CheckpointError, ConfigError
from linarena.training.checkpoint_identity import IDENTITY_KEY, check_same_model
from linarena.training.resume import check_finite, model_difference, read_checkpoint

log = logging.getLogger(__name__)
MODEL = "model."
# The heads: the classifier's (fine-tuning's own) and the pretraining's LM head.
CLASSIFIER_HEAD, LM_HEAD = "model.head.", "model.lm_head."


def is_pretraining_checkpoint(checkpoint: dict[str, Any]) -> bool:
    """Whether a checkpoint was written by a pretraining stage (its identity says so)."""
    return (checkpoint.get(IDENTITY_KEY) or {}).get("pretrain.stage") == "pretrain"


def weight_report(module: nn.Module, path: Path | str) -> dict[str, Any]:
    """Which of `module`'s model weights a fine-tuning run from the checkpoint at `path` takes
    from it ("carried": all but the classifier head) and which start fresh ("initialised")."""
    names = [name for name in module.state_dict() if name.startswith(MODEL)]
    return {"checkpoint": str(path),
            "carried": [name for name in names if not name.startswith(CLASSIFIER_HEAD)],
            "initialised": [name for name in names if name.startswith(CLASSIFIER_HEAD)]}


def report_line(report: dict[str, Any]) -> str:
    """The report in one line, weights grouped by module: "carried 12 weights (model.blocks,
    ...) from <path>; initialised 4 (model.head)"."""

    def groups(names: list[str]) -> str:
        return ", ".join(dict.fromkeys(".".join(name.split(".")[:2]) for name in names))

    carried, fresh = report["carried"], report["initialised"]
    return (f"Fine-tuning: carried {len(carried)} weights ({groups(carried)}) from "
            f"{report['checkpoint']}; initialised {len(fresh)} ({groups(fresh)}); the LM head "
            "is dropped.")


def load_pretrained_weights(path: Path, module: nn.Module,
                            identity: dict[str, Any]) -> dict[str, Any]:
    """Copy every model weight but the classifier head from the pretraining checkpoint at
    `path` into `module` (the optimizer, step and schedule stay fresh); returns weight_report.
    CheckpointError for an unreadable file, non-finite weights, a checkpoint not written by a
    pretraining stage, or one of another task, attention or model than the run of `identity`
    (checkpoint_identity.check_same_model, which names the first difference) or of other weight
    shapes (the vocabulary among them)."""
    if not path.is_file():
        raise ConfigError(f"init_weights={path}: no such file; pass a pretraining run's "
                          "checkpoint (<its folder>/checkpoints/last.ckpt)")
    checkpoint = read_checkpoint(path, "init_weights")
    check_finite(path, checkpoint, "init_weights")
    if not is_pretraining_checkpoint(checkpoint):
        raise CheckpointError(
            f"init_weights={path} was not written by a self-pretraining run (pretrain.stage="
            "pretrain), so it has no pretrained body for pretrain.stage=finetune: pass a "
            "pretraining checkpoint, or drop pretrain= to start from any checkpoint's weights.")
    check_same_model(path, checkpoint, identity)
    stored = {name: value for name, value in checkpoint["state_dict"].items()
              if not name.startswith(LM_HEAD)}
    difference = model_difference(stored, module)
    if difference is not None:
        raise CheckpointError(
            f"init_weights={path} holds a different model than this config ({difference}): "
            "fine-tune with the pretraining run's task, attention, width and depth.")
    report = weight_report(module, path)
    module.load_state_dict({name: stored[name] for name in report["carried"]}, strict=False)
    log.info(report_line(report))
    return report
