"""fla's own pure-PyTorch references standing in for its Triton kernels on CPU (fla.ops imports
Triton; its naive.py files do not), for the tests of backend="fla"; and, for the tests of our
layers against fla's, its GLA recurrence written out in the input's dtype (gla_in_dtype) and the
float64 comparison of two layers (assert_same_in_float64)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from linarena.attention.engine import backend as fla


def naive(module: str):
    """fla/ops/<module>/naive.py, loaded by path: fla.ops itself imports Triton."""
    path = Path(importlib.util.find_spec("fla").origin).parent / "ops" / module / "naive.py"
    spec = importlib.util.spec_from_file_location(f"fla_naive_{module}", path)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def reference_kernels() -> fla.FlaKernels:
    """fla's references in the signatures of the chunk kernels they stand for."""
    simple, gla, gated_delta = naive("simple_gla"), naive("gla"), naive("gated_delta_rule")

    def simple_gla(q, k, v, g, **kwargs):  # chunk_simple_gla(g=None) is the ungated case
        g = torch.zeros(q.shape[:3]) if g is None else g
        return simple.naive_recurrent_simple_gla(q, k, v, g, **kwargs)

    def chunk_gla(q, k, v, g, scale, initial_state, output_final_state):
        # naive_recurrent_gla has the default scale built in: rescale q to get `scale`.
        q = q * (scale * q.shape[-1] ** 0.5)
        return gla.naive_recurrent_gla(q, k, v, g, initial_state, output_final_state)

    def delta(q, k, v, beta, **kwargs):  # the gated reference with log gate 0
        return gated_delta.naive_recurrent_gated_delta_rule(
            q, k, v, beta, torch.zeros_like(beta), **kwargs)

    return fla.FlaKernels(simple_gla, chunk_gla, delta,
                          gated_delta.naive_recurrent_gated_delta_rule)


def gla_in_dtype(q, k, v, gk=None, g=None, scale=None, initial_state=None,
                 output_final_state=False, **_):
    """fla's GLA recurrence (naive_recurrent_gla, which rounds to float32) in the input's dtype,
    in the signature of its chunk_gla and fused_recurrent_gla: S_t = diag(exp(gk_t)) S_{t-1} +
    k_t v_t^T, o_t = scale S_t^T q_t, fla's default scale 1/sqrt(k_dim)."""
    assert initial_state is None and not output_final_state
    gk = g if gk is None else gk
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    state = q.new_zeros(q.shape[0], q.shape[2], q.shape[3], v.shape[3])
    outputs = []
    for t in range(q.shape[1]):
        state = state * gk[:, t].exp()[..., None] + k[:, t, :, :, None] * v[:, t, :, None]
        outputs.append((q[:, t, :, :, None] * scale * state).sum(-2))
    return torch.stack(outputs, 1), None


def assert_same_in_float64(theirs: torch.nn.Module, ours: torch.nn.Module,
                           generator: torch.Generator, length: int,
                           mapping: dict[str, str] | None = None) -> None:
    """fla's layer `theirs` and our `ours` (the same weights) in float64 on the same x (2 rows
    of `length` tokens, drawn from `generator`, then the cotangent): the outputs, the gradient
    of x and that of every parameter of theirs (ours' named by `mapping`, else the same name)
    agree to float64 rounding, rtol 1e-9 and atol 1e-11, far below float32's 1e-6."""
    theirs.double()
    ours.double()
    x = torch.randn(2, length, ours.d_model, generator=generator, dtype=torch.float64)
    cotangent = torch.randn(x.shape, generator=generator, dtype=torch.float64)
    x_theirs, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_theirs, out_ours = theirs(x_theirs)[0], ours(x_ours)
    assert out_ours.dtype == torch.float64 and out_ours.abs().max() > 0.1
    torch.testing.assert_close(out_ours, out_theirs, rtol=1e-9, atol=1e-11)
    (out_theirs * cotangent).sum().backward()
    (out_ours * cotangent).sum().backward()
    torch.testing.assert_close(x_ours.grad, x_theirs.grad, rtol=1e-9, atol=1e-11)
    ours_params = dict(ours.named_parameters())
    for key, param in theirs.named_parameters():
        name = mapping[key] if mapping is not None else key
        torch.testing.assert_close(ours_params[name].grad, param.grad, rtol=1e-9, atol=1e-11,
                                   msg=lambda m, key=key: f"{key}: {m}")
