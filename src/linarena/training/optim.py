"""AdamW with decoupled weight decay and a warmup-then-decay learning-rate schedule."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

SCHEDULES = ("rsqrt", "cosine", "constant")
# "matrices": weight matrices decay; norms, biases and embedding tables do not (usual practice).
# "all": every parameter decays, as flax.optim.Adam(weight_decay=...) does in the LRA code. Its
#   update, p -= lr * (adam_step + weight_decay * p), is torch AdamW's with one group.
DECAY_SCOPES = ("matrices", "all")


@dataclass(frozen=True)
class OptimSettings:
    """The `optim` config group.

    Args:
        lr: peak learning rate, reached at the end of warmup.
        weight_decay: decoupled weight decay, scaled by the scheduled lr (AdamW and flax Adam).
        weight_decay_scope: which parameters decay: "matrices" or "all" (see DECAY_SCOPES).
        betas, eps: AdamW moments and epsilon.
        schedule: after warmup, "rsqrt" (lr * sqrt(warmup / step)), "cosine" (to 0 at the last
            step) or "constant".
        warmup_steps: linear warmup from lr / warmup_steps to lr.
    """

    lr: float = 1e-3
    weight_decay: float = 0.01
    weight_decay_scope: str = "matrices"
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    schedule: str = "rsqrt"
    warmup_steps: int = 1000

    def __post_init__(self) -> None:
        for name in ("lr", "weight_decay", "eps", "warmup_steps"):
            _check_number(f"optim.{name}", getattr(self, name), integer=name == "warmup_steps")
        for beta in self.betas:
            _check_number("optim.betas", beta)
        object.__setattr__(self, "betas", tuple(float(b) for b in self.betas))
        if self.schedule not in SCHEDULES:
            raise ValueError(
                f"optim.schedule must be one of {list(SCHEDULES)}, got {self.schedule!r}."
            )
        if self.weight_decay_scope not in DECAY_SCOPES:
            raise ValueError(
                f"optim.weight_decay_scope must be one of {list(DECAY_SCOPES)}, got "
                f"{self.weight_decay_scope!r}."
            )
        if not self.lr > 0:
            raise ValueError(f"optim.lr must be positive, got {self.lr}.")
        if self.weight_decay < 0:
            raise ValueError(f"optim.weight_decay must be >= 0, got {self.weight_decay}.")
        if self.warmup_steps < 0:
            raise ValueError(f"optim.warmup_steps must be >= 0, got {self.warmup_steps}.")
        if len(self.betas) != 2:
            raise ValueError(f"optim.betas must be two numbers, got {list(self.betas)}.")


def _check_number(key: str, value: object, integer: bool = False) -> None:
    kind = int if integer else int | float
    if isinstance(value, bool) or not isinstance(value, kind):
        what = "an integer" if integer else "a number"
        raise ValueError(f"{key} must be {what}, got {value!r}.")


def parameter_groups(model: nn.Module, weight_decay: float, scope: str = "matrices") -> list[dict]:
    """AdamW groups. scope "matrices": weight matrices decay; norms, biases and embedding tables
    do not. scope "all": one group, everything decays."""
    if scope == "all":
        params = [p for p in model.parameters() if p.requires_grad]
        return [{"params": params, "weight_decay": weight_decay}]
    no_decay_ids = set()
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            no_decay_ids.update(id(p) for p in module.parameters(recurse=False))
    decay, no_decay = [], []
    for param in model.parameters():
        if not param.requires_grad:
            continue
        # ndim < 2 covers biases and LayerNorm gains/shifts.
        if param.ndim < 2 or id(param) in no_decay_ids:
            no_decay.append(param)
        else:
            decay.append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(model: nn.Module, settings: OptimSettings) -> torch.optim.AdamW:
    """AdamW over parameter_groups(model).

    The foreach implementation (one kernel per operation over all parameters) rather than the
    per-parameter loop that torch picks for CPU tensors: the same arithmetic in the same order,
    so the same numbers (tests/training/test_train_optim.py), in a fraction of the time for the
    studies' small models, whose optimizer step is a loop over ~30 tiny tensors. (CUDA tensors
    get foreach by default already; fused=True would be faster still but rounds differently.)
    """
    return torch.optim.AdamW(
        parameter_groups(model, settings.weight_decay, settings.weight_decay_scope),
        lr=settings.lr,
        betas=settings.betas,
        eps=settings.eps,
        foreach=True,
    )


def lr_multiplier(step: int, schedule: str, warmup_steps: int, total_steps: int) -> float:
    """Factor applied to the peak lr at optimizer step `step` (0-based)."""
    done = step + 1
    if warmup_steps > 0 and done <= warmup_steps:
        return done / warmup_steps
    if schedule == "constant":
        return 1.0
    if schedule == "rsqrt":
        return math.sqrt(max(warmup_steps, 1) / done)
    decay_steps = max(total_steps - warmup_steps, 1)
    progress = min((done - warmup_steps) / decay_steps, 1.0)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def build_scheduler(
    optimizer: torch.optim.Optimizer, settings: OptimSettings, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """LambdaLR to be stepped once per optimizer step."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: lr_multiplier(step, settings.schedule, settings.warmup_steps, total_steps),
    )
