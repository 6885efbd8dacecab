"""backend="fla": the adapter's layout, scale, gate and state conventions, checked on CPU with
fla's own pure-PyTorch references standing in for its Triton kernels; on CUDA, fla's kernels
themselves against backend="torch" (run by scripts/maintainer/gpu_check.sh)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers.fla_reference import reference_kernels

from linarena.attention.engine import backend as fla
from linarena.attention.engine import delta_rule, gated_linear_attention

pytest.importorskip("fla")

# Distinct sizes, so that a transposed layout cannot pass.
BATCH, HEADS, LENGTH, K_DIM, V_DIM = 2, 3, 13, 8, 6


@pytest.fixture
def with_references(monkeypatch):
    monkeypatch.setattr(fla, "load_kernels", lambda device: reference_kernels())


def tensors(seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(BATCH, HEADS, LENGTH, K_DIM, generator=g) for _ in range(2))
    v = torch.randn(BATCH, HEADS, LENGTH, V_DIM, generator=g)
    state = torch.randn(BATCH, HEADS, K_DIM, V_DIM, generator=g)
    beta = torch.rand(BATCH, HEADS, LENGTH, generator=g)
    gates = {"none": None,
             "head": F.logsigmoid(torch.randn(BATCH, HEADS, LENGTH, generator=g)),
             "feature": F.logsigmoid(torch.randn(BATCH, HEADS, LENGTH, K_DIM, generator=g))}
    mask = torch.arange(LENGTH)[None, :] < torch.tensor([[LENGTH], [9]])
    return q, F.normalize(k, dim=-1), v, beta, gates, state, mask


def assert_same(fla_result, torch_result):
    for a, b in zip(fla_result, torch_result, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["none", "head", "feature"])
def test_gated_adapter_follows_our_conventions(with_references, kind):
    q, k, v, _, gates, state, mask = tensors()
    kwargs = {"causal": True, "scale": 0.3, "mask": mask, "initial_state": state,
              "return_state": True}
    assert_same(gated_linear_attention(q, k, v, gates[kind], backend="fla", **kwargs),
                gated_linear_attention(q, k, v, gates[kind], **kwargs))


@pytest.mark.parametrize("kind", ["none", "head"])
def test_delta_adapter_follows_our_conventions(with_references, kind):
    q, k, v, beta, gates, state, mask = tensors()
    kwargs = {"causal": True, "scale": 0.3, "mask": mask, "initial_state": state,
              "return_state": True}
    assert_same(delta_rule(q, k, v, beta, gates[kind], backend="fla", **kwargs),
                delta_rule(q, k, v, beta, gates[kind], **kwargs))


def test_fla_backend_refuses_what_it_cannot_run(with_references):
    q, k, v, beta, _, _, _ = tensors()
    with pytest.raises(ValueError, match="causal=True only"):
        delta_rule(q, k, v, beta, causal=False, backend="fla")
    with pytest.raises(ValueError, match="no float64 kernels"):
        gated_linear_attention(q.double(), k.double(), v.double(), causal=True, backend="fla")


def test_fla_backend_needs_cuda():
    q, k, v, _, _, _, _ = tensors()
    with pytest.raises(ValueError, match="need a CUDA device"):
        gated_linear_attention(q, k, v, causal=True, backend="fla")


def relative_error(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="fla's Triton kernels need CUDA")
def test_fla_kernels_match_torch_backend_on_cuda():
    g = torch.Generator(device="cuda").manual_seed(0)
    shape = (2, 4, 1000, 64)  # 1000: not a multiple of the chunks

    def rand(*size):
        return torch.randn(*size, generator=g, device="cuda")

    q, k, v = rand(*shape), F.normalize(rand(*shape), dim=-1), rand(*shape)
    beta = torch.sigmoid(rand(*shape[:3]))
    cases = {
        "gla head": (gated_linear_attention, (q, k, v, F.logsigmoid(rand(*shape[:3])) / 4)),
        "gla feature": (gated_linear_attention, (q, k, v, F.logsigmoid(rand(*shape)) / 16)),
        "delta": (delta_rule, (q, k, v, beta)),
        "gated delta": (delta_rule, (q, k, v, beta, F.logsigmoid(rand(*shape[:3])) / 4)),
    }
    for name, (op, args) in cases.items():
        args = [x.bfloat16().requires_grad_(True) for x in args]
        results = []
        for backend in ("fla", "torch"):
            out, state = op(*args, causal=True, return_state=True, backend=backend)
            grads = torch.autograd.grad((out.float() * torch.cos(out.float())).sum(), args)
            results.append((out, state, *grads))
        errors = [relative_error(a, b) for a, b in zip(*results, strict=True)]
        # bf16 inside fla's kernels: ~1e-2; a wrong layout, scale or gate convention: ~1.
        assert max(errors) < 5e-2, f"{name}: relative errors (out, state, grads) {errors}"
