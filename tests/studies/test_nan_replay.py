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
from linarena.attention.engine.linear import chunk as linear_chunk
from linarena.attention.performer import PerformerAttention


class Ended(Exception):
    """Raised in place of os._exit, so the test goes on."""


def inputs(scale: float) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=generator) for _ in range(3))
    log_gate = -torch.rand(1, 2, 6, 4, generator=generator)
    return [x.requires_grad_(True) for x in (q * scale, k * scale, v, log_gate)]


def check(monkeypatch: pytest.MonkeyPatch, op: str):
    """The op's backward checked (restored after the test), os._exit raising Ended."""
    script = load_script("scripts/maintainer/nan_replay.py")
    for function in (chunk.GatedChunks, linear_chunk._ChunkedCausal):
        monkeypatch.setattr(function, "backward", inspect.getattr_static(function, "backward"))

    def end(code: int) -> None:
        raise Ended(code)

    monkeypatch.setattr(script.os, "_exit", end)
    script.CHECKS[op]()
    return script


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch):
    return check(monkeypatch, "gated")


def finding(script, out: str) -> dict:
    line = next(line for line in out.splitlines() if line.startswith(script.MARK))
    return json.loads(line[len(script.MARK):])


def test_a_float32_overflow_is_replayed_in_float64(checked, capsys) -> None:
    # q . k near 1e40: past float32's range (its gradients NaN), within float64's.
    q, k, v, log_gate = inputs(1e20)
    out = gated_linear_attention(q, k, v, log_gate, causal=True)
    with pytest.raises(Ended):
        out.sum().backward()
    found = finding(checked, capsys.readouterr().out)
    assert found["nan_found"] and found["inputs_finite"] and found["float64_grads_finite"]
    assert found["nonfinite_grads"] != "[]" and found["float64_grad_absmax"] > 1e30
    assert "6 tokens in chunks of 6" in found["detail"]


def test_a_finite_backward_passes_through(checked, monkeypatch: pytest.MonkeyPatch) -> None:
    args = inputs(1.0)
    grads = torch.autograd.grad(gated_linear_attention(*args, causal=True).sum(), args)
    monkeypatch.undo()  # the op's own backward again
    unchecked = torch.autograd.grad(gated_linear_attention(*args, causal=True).sum(), args)
    assert all(torch.equal(a, b) for a, b in zip(grads, unchecked, strict=True))


def test_a_performer_normaliser_underflow_is_replayed_in_float64(monkeypatch, capsys) -> None:
    # |q|, |k| near 80: the FAVOR+ normalisers of some queries underflow in float32 and the
    # causal backward turns NaN; the replay recomputes the features in float64 (its own buffers,
    # not the float32 call's).
    script = check(monkeypatch, "linear")
    performer = PerformerAttention(16, num_features=32, seed=0, causal=True)
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 64, 16, generator=generator) for _ in range(3))
    q, k = (x.mul(20).requires_grad_(True) for x in (q, k))
    with pytest.raises(Ended):
        performer(q, k, v.requires_grad_(True)).sum().backward()
    found = finding(script, capsys.readouterr().out)
    assert found["nan_found"] and found["inputs_finite"] and found["float64_grads_finite"]
    assert "below 1e-30" in found["detail"]
