"""Optimizer parameter groups, learning-rate schedules and the LightningModule's guards."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
from lightning.pytorch import Trainer
from torch import nn

from linarena.attention import SoftmaxAttention
from linarena.models import TransformerClassifier
from linarena.training import ClassificationModule, NonFiniteStateError
from linarena.training.checkpoint_guard import FiniteCheckpointGuard
from linarena.training.optim import (
    OptimSettings,
    build_optimizer,
    build_scheduler,
    lr_multiplier,
    parameter_groups,
)


def tiny_model(positions: str = "learned") -> TransformerClassifier:
    return TransformerClassifier(
        vocab_size=10,
        num_classes=3,
        head_kind="sequence",
        attention=partial(SoftmaxAttention),
        d_model=8,
        num_heads=2,
        num_layers=1,
        mlp_dim=16,
        max_length=12,
        positions=positions,
    )


def test_weight_decay_applies_to_weight_matrices_only() -> None:
    model = tiny_model()
    decay, no_decay = parameter_groups(model, weight_decay=0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    decayed = {id(p) for p in decay["params"]}
    names = {name: id(p) in decayed for name, p in model.named_parameters()}
    assert names["blocks.0.attention.qkv.weight"] and names["head.layers.0.weight"]
    for name, is_decayed in names.items():
        if name.endswith("bias") or "norm" in name or name.startswith("embedding."):
            assert not is_decayed, name
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_weight_decay_scope_all_decays_every_parameter_in_one_group() -> None:
    model = tiny_model()
    (group,) = parameter_groups(model, weight_decay=0.1, scope="all")
    assert group["weight_decay"] == 0.1
    assert {id(p) for p in group["params"]} == {id(p) for p in model.parameters()}


def test_scope_all_step_is_flax_adam_with_decoupled_decay() -> None:
    """flax.optim.Adam(weight_decay=wd) (LRA): p <- p - lr * (m_hat / (sqrt(v_hat) + eps) + wd * p),
    for every parameter, LayerNorm and embeddings included."""
    model = nn.Sequential(nn.Embedding(4, 3), nn.LayerNorm(3))
    settings = OptimSettings(
        lr=0.1, weight_decay=0.5, weight_decay_scope="all", betas=(0.9, 0.98), eps=1e-9
    )
    optimizer = build_optimizer(model, settings)
    before = [p.detach().clone() for p in model.parameters()]
    model(torch.tensor([1, 2])).square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    optimizer.step()
    for p, p0, g in zip(model.parameters(), before, grads, strict=True):
        m_hat, v_hat = g, g.square()  # first step: bias-corrected moments are g and g^2
        expected = p0 - 0.1 * (m_hat / (v_hat.sqrt() + 1e-9) + 0.5 * p0)
        torch.testing.assert_close(p.detach(), expected)


def test_warmup_is_linear_and_reaches_the_peak() -> None:
    values = [lr_multiplier(step, "rsqrt", warmup_steps=4, total_steps=100) for step in range(4)]
    assert values == [0.25, 0.5, 0.75, 1.0]


def test_rsqrt_decays_as_inverse_square_root_after_warmup() -> None:
    assert lr_multiplier(15, "rsqrt", warmup_steps=4, total_steps=100) == pytest.approx(0.5)
    assert lr_multiplier(99, "rsqrt", warmup_steps=0, total_steps=100) == pytest.approx(0.1)


def test_cosine_ends_at_zero_and_constant_stays() -> None:
    assert lr_multiplier(9, "cosine", warmup_steps=0,
                         total_steps=10) == pytest.approx(0.0, abs=1e-12)
    middle = lr_multiplier(54, "cosine", warmup_steps=10, total_steps=100)
    assert middle == pytest.approx(0.5 * (1 + math.cos(math.pi * 45 / 90)))
    assert lr_multiplier(50, "constant", warmup_steps=10, total_steps=100) == 1.0


def test_scheduler_steps_the_optimizer_lr() -> None:
    settings = OptimSettings(lr=0.01, warmup_steps=2, schedule="constant")
    optimizer = build_optimizer(tiny_model(), settings)
    scheduler = build_scheduler(optimizer, settings, total_steps=10)
    seen = []
    for _ in range(3):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert seen == pytest.approx([0.005, 0.01, 0.01])
    assert optimizer.defaults["betas"] == (0.9, 0.98)


def test_unknown_weight_decay_scope_names_the_key() -> None:
    with pytest.raises(ValueError, match=r"optim\.weight_decay_scope"):
        OptimSettings(weight_decay_scope="some")


def test_bad_optim_settings_name_the_key() -> None:
    with pytest.raises(ValueError, match=r"optim\.schedule"):
        OptimSettings(schedule="linear")
    with pytest.raises(ValueError, match=r"optim\.lr"):
        OptimSettings(lr=0.0)
    # A word where a number belongs: a one-line message, not a TypeError from a comparison.
    with pytest.raises(ValueError, match=r"optim\.lr must be a number, got 'fast'"):
        OptimSettings(lr="fast")
    with pytest.raises(ValueError, match=r"optim\.warmup_steps must be an integer"):
        OptimSettings(warmup_steps="many")


def test_a_checkpoint_with_non_finite_optimizer_state_is_never_written() -> None:
    module = ClassificationModule(tiny_model(), OptimSettings(), 3, "sequence")
    trainer = Trainer(
        accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False,
    )
    optimizer = torch.optim.AdamW(module.parameters())
    for param in module.parameters():
        param.grad = torch.ones_like(param)
    optimizer.step()
    guard = FiniteCheckpointGuard("elu", lr=1e-3)
    checkpoint = {"state_dict": module.state_dict(), "optimizer_states": [optimizer.state_dict()]}
    guard.on_save_checkpoint(trainer, module, checkpoint)  # finite: nothing happens
    # Finite weights, infinite second moment: the state the old per-step checks let through.
    next(iter(optimizer.state.values()))["exp_avg_sq"].fill_(float("inf"))
    checkpoint["optimizer_states"] = [optimizer.state_dict()]
    with pytest.raises(NonFiniteStateError, match=r"optimizer_states/0/state/0/exp_avg_sq"):
        guard.on_save_checkpoint(trainer, module, checkpoint)


class NaNModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3))

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.weight.expand(tokens.shape[0], 3) * float("nan")


def test_the_training_step_does_not_wait_for_the_device_to_check_the_loss() -> None:
    # Finiteness is checked once per checkpoint (FiniteCheckpointGuard), not with a
    # device-to-host sync every step: a NaN loss is returned, not inspected.
    module = ClassificationModule(NaNModel(), OptimSettings(), 3, "sequence")
    module.trainer = Trainer(
        accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False,
    )
    module.log = lambda *args, **kwargs: None
    module.trainer.optimizers = [torch.optim.SGD(module.parameters(), lr=1.0)]
    batch = {
        "tokens": torch.ones(2, 4, dtype=torch.long),
        "mask": torch.ones(2, 4, dtype=torch.bool),
        "label": torch.zeros(2, dtype=torch.long),
    }
    assert torch.isnan(module.training_step(batch, 0))


def test_the_optimizer_gives_the_numbers_of_the_per_parameter_loop() -> None:
    # build_optimizer takes torch's foreach implementation for its speed on small models; the
    # published runs trained with the per-parameter loop torch picks for CPU tensors, and the
    # two must give the same parameters, bit for bit, step after step.
    settings = OptimSettings(lr=1e-2, weight_decay=0.1)
    finals = []
    for foreach in (True, False):
        torch.manual_seed(0)
        model = tiny_model()
        optimizer = build_optimizer(model, settings)
        if not foreach:
            optimizer = torch.optim.AdamW(parameter_groups(model, settings.weight_decay),
                                          lr=settings.lr, betas=settings.betas,
                                          eps=settings.eps, foreach=False)
        assert optimizer.defaults["foreach"] is foreach
        generator = torch.Generator().manual_seed(1)
        for _ in range(20):
            for param in model.parameters():
                param.grad = torch.randn(param.shape, generator=generator)
            optimizer.step()
        finals.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.equal(finals[0], finals[1])
