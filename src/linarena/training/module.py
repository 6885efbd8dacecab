"""LightningModule: loss, accuracy, optimizer and schedule around a TransformerClassifier."""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch import LightningModule
from torch import Tensor, nn
from torch.nn import functional as F
from torchmetrics import MaxMetric, MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from linarena.data.batching import IGNORE_INDEX
from linarena.metrics import (
    TEST_ACC,
    TEST_ACC_PER_SETTING,
    TEST_LOSS,
    TRAIN_ACC,
    TRAIN_LOSS,
    TRAIN_LR,
    VAL_ACC,
    VAL_ACC_BEST,
    VAL_LOSS,
)
from linarena.training.log_steps import logs_this_step
from linarena.training.optim import OptimSettings, build_optimizer, build_scheduler


class ClassificationModule(LightningModule):
    """Trains `model` with cross-entropy; logs train/val/test loss and accuracy, val/acc_best
    and train/lr, each under its key in the registry (linarena.metrics).

    Args:
        model: maps (tokens, mask) to logits (batch, classes) or (batch, length, classes).
        optim: optimizer and schedule settings.
        num_classes: number of classes.
        head_kind: "sequence", "pair" or "token" (token labels use -100 for unscored positions).
    """

    def __init__(
        self,
        model: nn.Module,
        optim: OptimSettings,
        num_classes: int,
        head_kind: str,
    ) -> None:
        super().__init__()
        self.model = model
        self.optim_settings = optim
        ignore_index = IGNORE_INDEX if head_kind == "token" else None
        metric_args = {"num_classes": num_classes, "average": "micro", "ignore_index": ignore_index}
        self.metric_args = metric_args
        self.train_acc = MulticlassAccuracy(**metric_args)
        self.val_acc = MulticlassAccuracy(**metric_args)
        self.test_acc = MulticlassAccuracy(**metric_args)
        self.val_loss = MeanMetric()
        self.test_loss = MeanMetric()
        self.val_acc_best = MaxMetric()
        # Saved in checkpoints, so a resumed run keeps the best accuracy seen before.
        self.val_acc_best.persistent(True)
        # Random state read from a checkpoint, set again before the first resumed batch.
        self._restored_rng: dict[str, Any] | None = None

    def forward(self, tokens: Tensor, mask: Tensor) -> Tensor:
        return self.model(tokens, mask)

    def _loss(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Returns (mean loss, logits (scored positions, classes) in float32, labels, number of
        scored labels)."""
        logits = self.model(batch["tokens"], batch["mask"])
        labels = batch["label"]
        flat_logits = logits.reshape(-1, logits.shape[-1]).float()
        flat_labels = labels.reshape(-1)
        loss = F.cross_entropy(flat_logits, flat_labels, ignore_index=IGNORE_INDEX)
        scored = (flat_labels != IGNORE_INDEX).sum()
        return loss, flat_logits, flat_labels, scored

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss, logits, labels, _ = self._loss(batch)
        # train/* are per-step values: only the steps a logger receives compute and log them.
        if logs_this_step(self.trainer):
            self.train_acc(logits.detach().argmax(dim=-1), labels)
            self.log(TRAIN_LOSS.key, loss, on_step=True, on_epoch=False, prog_bar=True)
            self.log(TRAIN_ACC.key, self.train_acc, on_step=True, on_epoch=False)
            # The lr this step trains with (the schedule set it after the previous step).
            lr = self.trainer.optimizers[0].param_groups[0]["lr"]
            self.log(TRAIN_LR.key, lr, on_step=True, on_epoch=False)
        return loss

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # The random state of dropout (the data order is in the stateful loader's state), so a
        # resumed run continues exactly as an uninterrupted one would. At the end of an epoch
        # it is the state from before the next epoch's loader iterator is made.
        checkpoint["rng_states"] = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            checkpoint["rng_states"]["cuda"] = torch.cuda.get_rng_state_all()
        batches = self.trainer.fit_loop.epoch_loop.batch_progress.current.ready
        checkpoint["rng_states"]["epoch_end"] = batches >= self.trainer.num_training_batches

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self._restored_rng = checkpoint.get("rng_states")

    def on_train_epoch_start(self) -> None:
        # Making an epoch's loader iterator draws a seed from the global generator: a state saved
        # at the end of an epoch is set before that draw, as an uninterrupted run has it (again
        # at each epoch start until the first batch: Lightning may first finish the saved epoch).
        if self._restored_rng is not None and self._restored_rng.get("epoch_end"):
            set_rng_states(self._restored_rng)

    def on_train_batch_start(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        # A state saved mid-epoch is set here, after the restored loader's iterator was made,
        # just before the first dropout mask.
        states, self._restored_rng = self._restored_rng, None
        if states is not None and not states.get("epoch_end"):
            set_rng_states(states)

    def on_train_start(self) -> None:
        """Apply optim.lr to a restored optimizer and schedule.

        A checkpoint restores the lr it was trained with (the schedule's base_lrs); a run resumed
        with a new optim.lr (e.g. lower, after a divergence) must train with the new one. The
        schedule's shape (optim.schedule, warmup_steps, trainer.max_steps) comes from the current
        settings already, since LambdaLR does not save its functions. A no-op on a fresh run.
        """
        lr = self.optim_settings.lr
        for config in self.trainer.lr_scheduler_configs:
            scheduler = config.scheduler
            scheduler.base_lrs = [lr] * len(scheduler.optimizer.param_groups)
            for group, factor in zip(
                scheduler.optimizer.param_groups, scheduler.lr_lambdas, strict=True
            ):
                group["initial_lr"] = lr
                group["lr"] = lr * factor(scheduler.last_epoch)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        loss, logits, labels, scored = self._loss(batch)
        self.val_loss.update(loss, weight=scored)
        self.val_acc.update(logits.argmax(dim=-1), labels)

    def on_validation_epoch_end(self) -> None:
        # Logged once per validation, from the state the batches accumulated (a self.log per
        # batch would only be read here too, and each costs more than a small model's batch).
        # compute() syncs DDP ranks, so every rank logs the same value and the mean over ranks
        # that sync_dist takes leaves it as it is.
        acc = self.val_acc.compute()
        self.log(VAL_LOSS.key, self.val_loss.compute(), prog_bar=True, sync_dist=True)
        self.log(VAL_ACC.key, acc, prog_bar=True, sync_dist=True)
        self.val_loss.reset()
        self.val_acc.reset()
        if self.trainer.sanity_checking:  # untrained weights: not a candidate for the best
            return
        self.val_acc_best(acc)
        self.log(VAL_ACC_BEST.key, self.val_acc_best.compute(), prog_bar=True, sync_dist=True)

    def on_test_epoch_start(self) -> None:
        # A datamodule with several test settings (MQARMixtureDataModule) names them; batches
        # then carry their setting's index and each setting gets its accuracy, test/acc_<name>.
        names = getattr(self.trainer.datamodule, "test_setting_names", None) or []
        self.setting_acc = nn.ModuleList(
            MulticlassAccuracy(**self.metric_args) for _ in names).to(self.device)
        self.setting_names = names

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        loss, logits, labels, scored = self._loss(batch)
        preds = logits.argmax(dim=-1)
        self.test_loss(loss, weight=scored)
        self.test_acc(preds, labels)
        self.log(TEST_LOSS.key, self.test_loss, on_step=False, on_epoch=True)
        self.log(TEST_ACC.key, self.test_acc, on_step=False, on_epoch=True)
        if "setting" in batch:
            index = int(batch["setting"])
            self.setting_acc[index](preds, labels)
            self.log(TEST_ACC_PER_SETTING.key + self.setting_names[index], self.setting_acc[index],
                     on_step=False, on_epoch=True)

    def configure_optimizers(self) -> dict:
        optimizer = build_optimizer(self.model, self.optim_settings)
        total_steps = int(self.trainer.estimated_stepping_batches)
        scheduler = build_scheduler(optimizer, self.optim_settings, total_steps)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
        }


def set_rng_states(states: dict[str, Any]) -> None:
    """Set the global random state saved in a checkpoint's "rng_states"."""
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
