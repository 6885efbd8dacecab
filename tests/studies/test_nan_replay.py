"""scripts/maintainer/nan_replay.py: at the first backward of the checked op whose gradients are
not finite, the call is repeated in float64 from its saved inputs and the finding printed, the
process ended; a call whose gradients are finite passes through unchanged."""

from __future__ import annotations

import inspect
import json

import pytest
import torch
from helpers.paths import load_script

from linarena.attention.engine import gated_linear_attention
from linarena.attention.engine.gated import chunk


class Ended(Exception):
    """Raised in place of os._exit, so the test goes on."""


def inputs(scale: float) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=generator) for _ in range(3))
    log_gate = -torch.rand(1, 2, 6, 4, generator=generator)
    return [x.requires_grad_(True) for x in (q * scale, k * scale, v, log_gate)]


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch):
    """The gated op's backward checked (restored after the test), os._exit raising Ended."""
    script = load_script("scripts/maintainer/nan_replay.py")
    monkeypatch.setattr(chunk.GatedChunks, "backward",
                        inspect.getattr_static(chunk.GatedChunks, "backward"))

    def end(code: int) -> None:
        raise Ended(code)

    monkeypatch.setattr(script.os, "_exit", end)
    script.CHECKS["gated"]()
    return script


def test_a_float32_overflow_is_replayed_in_float64(checked, capsys) -> None:
    # q . k near 1e40: past float32's range (its gradients NaN), within float64's.
    q, k, v, log_gate = inputs(1e20)
    out = gated_linear_attention(q, k, v, log_gate, causal=True)
    with pytest.raises(Ended):
        out.sum().backward()
    line = next(line for line in capsys.readouterr().out.splitlines()
                if line.startswith(checked.MARK))
    found = json.loads(line[len(checked.MARK):])
    assert found["nan_found"] and found["inputs_finite"] and found["float64_grads_finite"]
    assert found["nonfinite_grads"] != "[]" and found["float64_grad_absmax"] > 1e30
    assert "6 tokens in chunks of 6" in found["detail"]


def test_a_finite_backward_passes_through(checked, monkeypatch: pytest.MonkeyPatch) -> None:
    args = inputs(1.0)
    grads = torch.autograd.grad(gated_linear_attention(*args, causal=True).sum(), args)
    monkeypatch.undo()  # the op's own backward again
    unchecked = torch.autograd.grad(gated_linear_attention(*args, causal=True).sum(), args)
    assert all(torch.equal(a, b) for a, b in zip(grads, unchecked, strict=True))
