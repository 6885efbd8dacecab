"""Self-pretraining (SPT; Amos, Berant & Gupta, "Never Train from Scratch", ICLR 2024): the
LightningModule of the pretraining stage, which trains the classifier's body on the task's own
training inputs (never its labels) with an LM head, and counts the real tokens trained on.

Masked-token prediction (pretrain=mlm, bidirectional models) or next-token prediction
(pretrain=lm, causal models); inputs and targets: linarena.data.masking. The LM head rides on the
model as `model.lm_head`, so the optimizer, the checkpoints and the finiteness checks see it; the
fine-tuning stage drops it with the classifier head (training/pretrained_weights.py).
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch import Tensor
from torch.nn import functional as F

from linarena.data.batching import IGNORE_INDEX
from linarena.data.masking import mask_generator, mask_tokens, next_token_targets
from linarena.metrics import (
    PRETRAIN_ACC,
    PRETRAIN_LOSS,
    PRETRAIN_TEST_ACC,
    PRETRAIN_TEST_LOSS,
    PRETRAIN_VAL_ACC,
    PRETRAIN_VAL_ACC_BEST,
    PRETRAIN_VAL_LOSS,
    TRAIN_LR,
)
from linarena.models.heads import LMHead
from linarena.models.transformer import TransformerClassifier
from linarena.training.log_steps import logs_this_step
from linarena.training.module import ClassificationModule
from linarena.training.optim import OptimSettings
from linarena.training.pretrain_config import MLM, OBJECTIVES

LM_HEAD = "lm_head"


class PretrainModule(ClassificationModule):
    """Trains `model`'s embedding and blocks to predict tokens of the task's inputs; logs
    pretrain/loss and pretrain/acc (training steps), pretrain/val_loss, pretrain/val_acc,
    pretrain/val_acc_best and pretrain/test_* (linarena.metrics), each over the predicted
    positions only. Its accuracy metrics, optimizer, schedule and random-state handling are the
    ClassificationModule's, with one class per real token id.

    Args:
        model: the classifier, built with the mask token's row under mlm (vocab_size + 1 rows);
            its `head` stays as built, frozen.
        optim: optimizer and schedule settings.
        vocab_size: the task's token ids, padding included, mask token excluded.
        objective: "mlm" or "lm".
        mask_fraction: mlm: probability of masking each real token.
        seed: the masks' seed (data.masking.mask_generator).
    """

    def __init__(
        self,
        model: TransformerClassifier,
        optim: OptimSettings,
        vocab_size: int,
        objective: str,
        mask_fraction: float | None,
        seed: int,
    ) -> None:
        if objective not in OBJECTIVES[1:]:
            raise ValueError(f"objective must be mlm or lm, got {objective!r}")
        super().__init__(model, optim, vocab_size - 1, "token")
        # Built after the model, so the model's weights are those a run of the same seed without
        # pretraining starts from.
        model.add_module(LM_HEAD, LMHead(model.final_norm.normalized_shape[0], vocab_size - 1))
        # The classifier head gets no gradient here (fine-tuning initialises its own): frozen, so
        # that DDP does not wait for its gradients.
        model.head.requires_grad_(False)
        self.objective = objective
        self.mask_fraction = mask_fraction
        self.mask_id = vocab_size  # the row appended to the token table
        self.seed = seed

    def predict_tokens(self, batch: dict[str, Tensor], split: str,
                       index: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The objective on one batch: (mean loss over the predicted positions, predicted class
        and target at every position (flat; IGNORE_INDEX where nothing is predicted), number of
        predicted positions). `index` seeds the masks: the step in training, else the batch."""
        tokens, real = batch["tokens"], batch["mask"]
        if tokens.dim() == 3:  # pairs (batch, 2, length): each document on its own
            tokens, real = tokens.flatten(0, 1), real.flatten(0, 1)
        if self.objective == MLM:
            generator = mask_generator(self.seed, split, index, self.global_rank)
            inputs, targets = mask_tokens(tokens, real, self.mask_fraction, self.mask_id,
                                          generator)
        else:
            inputs, targets = tokens, next_token_targets(tokens, real)
        hidden, _ = self.model.encode(inputs, real)
        if self.model.uses_cls:  # the CLS vector in front predicts nothing
            hidden = hidden[:, 1:]
        return token_loss(getattr(self.model, LM_HEAD)(hidden), targets)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss, preds, targets, _ = self.predict_tokens(batch, "train", self.global_step)
        # Per-step values: computed and logged only on the steps a logger receives (log_steps).
        if logs_this_step(self.trainer):
            self.train_acc(preds, targets)
            self.log(PRETRAIN_LOSS.key, loss, on_step=True, on_epoch=False, prog_bar=True)
            self.log(PRETRAIN_ACC.key, self.train_acc, on_step=True, on_epoch=False)
            lr = self.trainer.optimizers[0].param_groups[0]["lr"]
            self.log(TRAIN_LR.key, lr, on_step=True, on_epoch=False)
        return loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        loss, preds, targets, scored = self.predict_tokens(batch, "val", batch_idx)
        self.val_loss.update(loss, weight=scored)
        self.val_acc.update(preds, targets)

    def on_validation_epoch_end(self) -> None:
        # Once per validation, from the batches' accumulated state, as ClassificationModule.
        acc = self.val_acc.compute()
        self.log(PRETRAIN_VAL_LOSS.key, self.val_loss.compute(), sync_dist=True)
        self.log(PRETRAIN_VAL_ACC.key, acc, prog_bar=True, sync_dist=True)
        self.val_loss.reset()
        self.val_acc.reset()
        if self.trainer.sanity_checking:
            return
        self.val_acc_best(acc)
        self.log(PRETRAIN_VAL_ACC_BEST.key, self.val_acc_best.compute(), prog_bar=True,
                 sync_dist=True)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        loss, preds, targets, scored = self.predict_tokens(batch, "test", batch_idx)
        self.test_loss(loss, weight=scored)
        self.test_acc(preds, targets)
        self.log(PRETRAIN_TEST_LOSS.key, self.test_loss, on_step=False, on_epoch=True)
        self.log(PRETRAIN_TEST_ACC.key, self.test_acc, on_step=False, on_epoch=True)


def token_loss(logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Cross-entropy over the predicted positions only.

    Args:
        logits: (batch, length, classes), any float dtype (computed in float32).
        targets: (batch, length) classes, IGNORE_INDEX where nothing is predicted.

    Returns:
        (mean loss over the predicted positions, 0 when there are none; predicted class at
        every position, (batch * length,); targets flat, (batch * length,); number of predicted
        positions).
    """
    flat_logits = logits.reshape(-1, logits.shape[-1]).float()
    flat_targets = targets.reshape(-1)
    scored = (flat_targets != IGNORE_INDEX).sum()
    # A sum, then the mean: a batch with no predicted position (short inputs, no token drawn)
    # gives 0, not cross_entropy's 0/0.
    total = F.cross_entropy(flat_logits, flat_targets, ignore_index=IGNORE_INDEX,
                            reduction="sum")
    return total / scored.clamp(min=1), flat_logits.argmax(dim=-1), flat_targets, scored


class TokenCount(Callback):
    """Counts the real tokens of the training batches (batch["mask"].sum(), kept on the device:
    no step waits for it), kept in checkpoints so a resumed run counts on from where it stopped;
    `tokens` is every process's count once training has ended."""

    def __init__(self) -> None:
        self.local: Tensor | int = 0
        self.tokens: int | None = None

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        self.local = self.local + batch["mask"].sum()

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # Every DDP rank gets here: the sum over ranks.
        count = torch.as_tensor(self.local, dtype=torch.float64, device=pl_module.device)
        self.tokens = int(trainer.strategy.reduce(count, reduce_op="sum"))

    def state_dict(self) -> dict[str, Any]:
        return {"tokens": int(self.local)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.local = int(state_dict["tokens"])
