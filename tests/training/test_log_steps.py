"""The per-step values (train/*, perf/*) reach the loggers every log_every_n_steps steps, each
the value of its own step, and the training step pays for logging only on those steps."""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from lightning.pytorch import Callback, Trainer
from lightning.pytorch.loggers import Logger
from torch.utils.data import DataLoader

from linarena.attention import SoftmaxAttention
from linarena.metrics import TOKENS_PER_SEC, TRAIN_ACC, TRAIN_LOSS, TRAIN_LR
from linarena.models import TransformerClassifier
from linarena.training import ClassificationModule
from linarena.training.optim import OptimSettings
from linarena.training.perf import PerfMonitor

STEPS, EVERY = 25, 10


class Recorder(Logger):
    """Keeps every log_metrics call: {step: metrics}."""

    def __init__(self) -> None:
        super().__init__()
        self.logged: dict[int, dict[str, float]] = {}

    @property
    def name(self) -> str:
        return "recorder"

    @property
    def version(self) -> str:
        return "0"

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.logged.setdefault(step, {}).update(metrics)

    def log_hyperparams(self, *args: Any, **kwargs: Any) -> None:
        pass


class StepLosses(Callback):
    """The loss of every training step, as the step returned it."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer: Trainer, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self.losses.append(float(outputs["loss"]))


def batches(count: int) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [{"tokens": torch.randint(1, 10, (4, 12), generator=generator),
             "mask": torch.ones(4, 12, dtype=torch.bool),
             "label": torch.randint(0, 3, (4,), generator=generator)} for _ in range(count)]


def train(module: ClassificationModule) -> tuple[Recorder, StepLosses]:
    recorder, losses = Recorder(), StepLosses()
    trainer = Trainer(accelerator="cpu", max_steps=STEPS, log_every_n_steps=EVERY,
                      logger=recorder, callbacks=[losses, PerfMonitor()], limit_val_batches=0,
                      enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False)
    loader = DataLoader(batches(STEPS), batch_size=None)
    trainer.fit(module, train_dataloaders=loader)
    return recorder, losses


def tiny_module() -> ClassificationModule:
    torch.manual_seed(0)
    model = TransformerClassifier(vocab_size=10, num_classes=3, head_kind="sequence",
                                  attention=partial(SoftmaxAttention), d_model=8, num_heads=2,
                                  num_layers=1, mlp_dim=16, max_length=12)
    return ClassificationModule(model, OptimSettings(warmup_steps=5), 3, "sequence")


def test_every_logged_step_gets_its_own_loss_accuracy_lr_and_throughput() -> None:
    recorder, losses = train(tiny_module())
    steps = sorted(step for step, metrics in recorder.logged.items() if TRAIN_LOSS.key in metrics)
    assert steps == list(range(EVERY - 1, STEPS, EVERY)), steps
    for step in steps:
        metrics = recorder.logged[step]
        assert metrics[TRAIN_LOSS.key] == losses.losses[step]
        assert 0.0 <= metrics[TRAIN_ACC.key] <= 1.0
        assert metrics[TRAIN_LR.key] > 0 and metrics[TOKENS_PER_SEC.key] > 0


def test_the_training_step_logs_only_on_the_steps_a_logger_receives() -> None:
    # Each self.log costs Lightning's bookkeeping (hundreds of microseconds: more than a study
    # model's forward pass); a value logged on another step would be overwritten unread.
    module = tiny_module()
    calls: list[int] = []
    log = module.log

    def counting_log(name: str, *args: Any, **kwargs: Any) -> None:
        if name.startswith("train/"):
            calls.append(module.global_step)
        log(name, *args, **kwargs)

    module.log = counting_log
    train(module)
    assert sorted(set(calls)) == list(range(EVERY - 1, STEPS, EVERY)), calls
