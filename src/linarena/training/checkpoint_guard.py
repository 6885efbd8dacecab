"""Refuse to write a checkpoint whose weights or optimizer state are not finite.

Checking every checkpoint instead of every step costs one device-to-host sync per checkpoint
(not two per step, which stall a GPU) and guarantees that every checkpoint on disk is clean: a
diverged run can always be resumed from its last.ckpt with a lower learning rate. Checkpoints
are checked again when read (resume.py), with the same rule (:func:`non_finite_names`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from linarena.errors import NonFiniteStateError

# The LightningModule's weights live under this prefix (ClassificationModule.model); the other
# entries of its state_dict are metric states, which may be infinite (MaxMetric starts at -inf).
WEIGHTS_PREFIX = "model."


def non_finite_names(checkpoint: dict[str, Any]) -> list[str]:
    """Names of the weights and optimizer-state entries holding NaN or inf (one host sync when
    all are finite).

    Returns e.g. ["state_dict/model.head.fc2.weight", "optimizer_states/0/state/3/exp_avg_sq"].
    """
    weights = checkpoint.get("state_dict", {})
    groups = {"state_dict": {k: v for k, v in weights.items() if k.startswith(WEIGHTS_PREFIX)}}
    for index, state in enumerate(checkpoint.get("optimizer_states", [])):
        groups[f"optimizer_states/{index}"] = state
    named = []
    for prefix, tree in groups.items():
        named += [(f"{prefix}/{name}", t) for name, t in _named(tree)]
    if not named:
        return []
    finite = torch.stack([t.isfinite().all().to(named[0][1].device) for _, t in named])
    if bool(finite.all()):  # the one sync
        return []
    return [name for (name, _), ok in zip(named, finite.tolist(), strict=True) if not ok]


def _named(tree: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(tree, torch.Tensor):
        if tree.is_floating_point():
            yield prefix, tree
    elif isinstance(tree, dict):
        for key, value in tree.items():
            yield from _named(value, f"{prefix}/{key}" if prefix else str(key))
    elif isinstance(tree, list | tuple):
        for index, value in enumerate(tree):
            yield from _named(value, f"{prefix}/{index}" if prefix else str(index))


class FiniteCheckpointGuard(Callback):
    """Raises NonFiniteStateError instead of writing a checkpoint with NaN/inf weights or
    optimizer state (e.g. AdamW's exp_avg_sq), so the previous checkpoint stays the last one.

    Args:
        attention_name: named in the error message.
        lr: the learning rate of the run, carried by the error (the advice divides it by 10).
    """

    def __init__(self, attention_name: str, lr: float) -> None:
        self.attention_name = attention_name
        self.lr = lr

    def on_save_checkpoint(
        self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        bad = non_finite_names(checkpoint)
        # Decided together across DDP ranks, so that no rank waits alone in a collective.
        if trainer.strategy.reduce_boolean_decision(bool(bad), all=False):
            shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
            raise NonFiniteStateError(
                f"Training diverged by step {trainer.global_step} with attention="
                f"{self.attention_name}: non-finite values in {shown or 'another rank'}; this "
                "state was not saved.",
                lr=self.lr,
            )
