"""What made a checkpoint: the run's identity, stored in every checkpoint and compared on load.

Weight shapes alone cannot tell two runs apart (an elu+1 and a softmax model of one size have
the same weights), so a checkpoint carries the resolved settings that define its run: the task
and attention names, the attention, model, data and optimizer settings, the seed, and the code
version. Resuming from a checkpoint whose identity differs from the config in a setting that a
resume may not change (resume.MUTABLE) is refused with the differences listed; a difference in
a mutable setting (lr, validation interval, ...) is allowed and recorded in the resume's
changes. Checkpoints written before identities existed still load, with a note. A checkpoint
that only starts a new run's weights (init_weights) must share what its weights mean: the task,
the attention and the model (SAME_MODEL).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from omegaconf import DictConfig, OmegaConf

from linarena.errors import CheckpointError

IDENTITY_KEY = "linarena_identity"
# The config nodes that define a run; `trainer` only for the settings a resume may change, so
# that they are recorded as changes.
IDENTITY_NODES = ("task_name", "attention_name", "seed", "attention_dropout", "attention",
                  "model", "data", "optim")
TRAINER_KEYS = ("max_steps", "val_check_interval")
PRETRAIN_KEYS = ("objective", "stage", "mask_fraction")
# Where the data live, how many processes build or load them and whether the model is compiled:
# a machine's choice, not the run's (a run resumed on another machine reads the same data from
# another folder, and compiled or not has the same weights).
MACHINE_KEYS = ("data.data_dir", "data.num_workers", "data.generator_workers", "model.compile")
# What an init_weights checkpoint must share with the run it starts, so that its weights mean the
# same there: the task (its vocabulary and labels), the attention and the model, but for the
# settings below them that change no weight (MODEL_MAY_DIFFER). The rest is the new run's own:
# optimizer, schedule, training length, seed, data sizes. A fine-tune from another task's
# pretraining would compare the body only (embedding and blocks), not the task and head.
SAME_MODEL = ("task_name", "attention_name", "attention", "model", "data.vocab_size")
MODEL_MAY_DIFFER = ("attention.dropout", "attention.backend", "model.dropout")


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """A nested dict as {dotted key: leaf}; an empty dict is a leaf."""
    if isinstance(node, dict) and node:
        flat: dict[str, Any] = {}
        for key, value in node.items():
            flat |= flatten(value, f"{prefix}.{key}" if prefix else str(key))
        return flat
    return {prefix: node}


def run_identity(cfg: DictConfig, code_version: str | None) -> dict[str, Any]:
    """The settings that define the run of `cfg`, resolved and flattened to dotted keys, e.g.
    {"attention_name": "elu", "model.d_model": 128, ..., "code_version": "5f661cc"}."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    picked = {key: resolved.get(key) for key in IDENTITY_NODES}
    picked["trainer"] = {key: resolved.get("trainer", {}).get(key) for key in TRAINER_KEYS}
    # Under pretrain=mlm or lm, which objective and stage wrote the checkpoint (a pretraining
    # checkpoint is not a fine-tuning run's to continue); absent under pretrain=none, so the
    # checkpoints of runs from before self-pretraining existed still match their configs.
    pretrain = resolved.get("pretrain") or {}
    if pretrain.get("objective", "none") != "none":
        picked["pretrain"] = {key: pretrain.get(key) for key in PRETRAIN_KEYS if key in pretrain}
    flat = {k: v for k, v in flatten(picked).items() if k not in MACHINE_KEYS}
    return {**flat, "code_version": code_version}


def identity_changes(
    stored: dict[str, Any], current: dict[str, Any], mutable: tuple[str, ...]
) -> tuple[dict[str, tuple[Any, Any]], dict[str, tuple[Any, Any]]]:
    """(refused, allowed): the settings in which `current` differs from the checkpoint's
    `stored` identity, {key: (stored, current)}, split by whether a resume may change them (a key
    of `mutable` or below one; the code version may always change)."""
    absent = "<absent>"
    differ = {
        key: (stored.get(key, absent), current.get(key, absent))
        for key in sorted(stored.keys() | current.keys())
        if stored.get(key, absent) != current.get(key, absent)
    }

    def may_change(key: str) -> bool:
        return key == "code_version" or is_below(key, mutable)

    refused = {k: v for k, v in differ.items() if not may_change(k)}
    allowed = {k: v for k, v in differ.items() if may_change(k)}
    return refused, allowed


def is_below(key: str, prefixes: tuple[str, ...]) -> bool:
    """Whether the dotted `key` is one of `prefixes` or below one (model.d_model is below
    model)."""
    return any(key == prefix or key.startswith(prefix + ".") for prefix in prefixes)


def checkpoint_run_folder(path: Any) -> Path:
    """The folder of the run that wrote the checkpoint at `path`: <run>/checkpoints/x.ckpt's
    <run>, else the checkpoint's own folder."""
    folder = Path(path).resolve().parent
    return folder.parent if folder.name == "checkpoints" else folder


def listed_differences(refused: dict[str, tuple[Any, Any]]) -> str:
    """The first differences {key: (stored, current)} as "key: 'a' there, 'b' here; ..."."""
    shown = list(refused.items())[:8]
    listed = "; ".join(f"{key}: {before!r} there, {after!r} here" for key, (before, after) in shown)
    more = f" and {len(refused) - len(shown)} more" if len(refused) > len(shown) else ""
    return listed + more


def refusal_message(path: Any, refused: dict[str, tuple[Any, Any]]) -> str:
    """The CheckpointError message for a checkpoint of another run."""
    return (
        f"ckpt_path: {path} was written by another run than this config describes "
        f"({listed_differences(refused)}). Continuing it would file one model's training under "
        "another's name. Resume that run from its own folder (python train.py ckpt_path=last "
        f"hydra.run.dir={checkpoint_run_folder(path)}), which uses its saved config, or start a "
        "new run without ckpt_path."
    )


def check_identity(
    path: Any, checkpoint: dict[str, Any], current: dict[str, Any], mutable: tuple[str, ...]
) -> dict[str, tuple[Any, Any]] | None:
    """The allowed changes {key: (stored, current)} from the checkpoint's run to `current`;
    None for a checkpoint written before identities were stored (nothing to compare).

    Raises CheckpointError listing the differences when a setting a resume may not change
    differs.
    """
    stored = checkpoint.get(IDENTITY_KEY)
    if stored is None:
        return None
    refused, allowed = identity_changes(stored, current, mutable)
    if refused:
        raise CheckpointError(refusal_message(path, refused))
    return allowed


def check_same_model(path: Any, checkpoint: dict[str, Any], current: dict[str, Any]) -> bool:
    """For init_weights: CheckpointError listing the differences when the checkpoint's run had
    another task, attention or model (SAME_MODEL) than the run of identity `current`; False for
    a checkpoint written before identities were stored (only its weight shapes can be compared),
    else True."""
    stored = checkpoint.get(IDENTITY_KEY)
    if stored is None:
        return False

    def meaning(identity: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in identity.items()
                if is_below(key, SAME_MODEL) and not is_below(key, MODEL_MAY_DIFFER)}

    refused, _ = identity_changes(meaning(stored), meaning(current), ())
    if refused:
        raise CheckpointError(
            f"init_weights: {path} holds a different model than this config "
            f"({listed_differences(refused)}): its weights would start a model they were not "
            "trained for. Start from a checkpoint of the same task, attention and model (the "
            "optimizer, schedule, training length, seed, data sizes and dropout may differ), or "
            "set init_weights=null.")
    return True


class StoreRunIdentity(Callback):
    """Writes the run's identity into every checkpoint it saves (under IDENTITY_KEY)."""

    def __init__(self, identity: dict[str, Any]) -> None:
        self.identity = identity

    def on_save_checkpoint(
        self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        checkpoint[IDENTITY_KEY] = dict(self.identity)
