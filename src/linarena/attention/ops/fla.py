"""backend="fla": the causal ops on fla-core's Triton kernels (pip install 'linarena[fla]').

fla's layout is (batch, n, heads, dim) and its scale defaults to k_dim ** -0.5 as ours; its
log gates are per step (not cumulative), its state (batch, heads, k_dim, v_dim) in float32. The
ops have checked the inputs and neutralised padded tokens (zero q, k, v, beta; log gate 0)
before they get here, so the kernels see plain sequences. The kernels run in the inputs' dtype
(fp16 / bf16 under autocast; fla's delta-rule kernels refuse float32) and accumulate in float32.

Kernel per call: no gate -> chunk_simple_gla(g=None); per-head gate -> chunk_simple_gla;
per-feature gate -> chunk_gla; delta rule -> chunk_delta_rule, gated -> chunk_gated_delta_rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from linarena.attention.ops.common import OpInputs


@dataclass(frozen=True)
class FlaKernels:
    """fla's chunked kernels, called with fla's keyword names."""

    simple_gla: Callable
    gla: Callable
    delta_rule: Callable
    gated_delta_rule: Callable


def load_kernels(device: torch.device) -> FlaKernels:
    """fla-core's Triton kernels; CUDA only."""
    if device.type != "cuda":
        raise ValueError(f"backend='fla' runs fla-core's Triton kernels, which need a CUDA device; "
                         f"the inputs are on {device.type}. Use backend='torch'.")
    try:
        from fla.ops.delta_rule import chunk_delta_rule
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
        from fla.ops.gla import chunk_gla
        from fla.ops.simple_gla import chunk_simple_gla
    except ImportError as error:
        raise ImportError("backend='fla' needs fla-core and Triton: pip install 'linarena[fla]' "
                          f"on a CUDA machine ({error}).") from error
    return FlaKernels(chunk_simple_gla, chunk_gla, chunk_delta_rule, chunk_gated_delta_rule)


DTYPES_NOTE = ("fla has no float64 kernels, and its delta-rule kernels take float16 or bfloat16 "
               "only: train with trainer.precision=bf16-mixed")


def supports(dtype: torch.dtype, *, delta: bool) -> bool:
    """Whether fla's kernels take inputs of `dtype` (the delta rule's, with delta=True)."""
    if delta:
        return dtype in (torch.float16, torch.bfloat16)
    return dtype in (torch.float16, torch.bfloat16, torch.float32)


def runs_fla(owner: str, backend: str, auto: bool, dtype: torch.dtype, device: torch.device, *,
             delta: bool) -> bool:
    """Whether a forward call runs fla's kernels on inputs of `dtype` on `device`: always with
    backend="fla" (refused for a dtype fla has no kernel for; the op refuses inputs off CUDA),
    with "auto" (`auto`: the layer is causal and fla is installed) for CUDA inputs of a dtype
    fla takes. `owner`: the layer's name, for the message. The one rule of every core and
    layer (RecurrentAttention, linarena.attention.layers)."""
    if backend == "fla":
        if not supports(dtype, delta=delta):
            raise ValueError(f"{owner}: backend='fla' has no kernel for {dtype} inputs "
                             f"({DTYPES_NOTE}). Use backend=auto.")
        return True
    return auto and device.type == "cuda" and supports(dtype, delta=delta)


def _check(name: str, inputs: OpInputs, causal: bool) -> None:
    if not causal:
        raise ValueError(f"{name}: backend='fla' runs causal=True only; use backend='torch' for "
                         "the bidirectional op.")
    if inputs.q.dtype == torch.float64:
        raise ValueError(f"{name}: backend='fla' has no float64 kernels; use backend='torch'.")


def _fla_layout(x: Tensor) -> Tensor:
    """(batch, heads, n, ...) <-> (batch, n, heads, ...)."""
    return x.transpose(1, 2)


def _finish(out: Tensor, state: Tensor | None, v: Tensor, return_state: bool):
    out = _fla_layout(out).to(v.dtype)
    return (out, state) if return_state else out


def _initial_state(inputs: OpInputs) -> Tensor | None:
    state = inputs.initial_state
    return None if state is None else state.float()


def gated_linear_attention_fla(
    inputs: OpInputs, *, gate_given: bool, causal: bool, return_state: bool
) -> Tensor | tuple[Tensor, Tensor]:
    """gated_linear_attention on fla's chunk_simple_gla / chunk_gla (same contract)."""
    _check("gated_linear_attention", inputs, causal)
    kernels = load_kernels(inputs.q.device)
    q, k, v = (_fla_layout(x) for x in (inputs.q, inputs.k, inputs.v))
    gate = _fla_layout(inputs.log_gate.float())  # (batch, n, heads, 1 or k_dim)
    common = {"scale": inputs.scale, "initial_state": _initial_state(inputs),
              "output_final_state": return_state}
    if gate.shape[-1] == 1:
        g = gate[..., 0] if gate_given else None
        out, state = kernels.simple_gla(q=q, k=k, v=v, g=g, **common)
    else:
        out, state = kernels.gla(q=q, k=k, v=v, g=gate, **common)
    return _finish(out, state, inputs.v, return_state)


def delta_rule_fla(
    inputs: OpInputs, *, gate_given: bool, causal: bool, return_state: bool
) -> Tensor | tuple[Tensor, Tensor]:
    """delta_rule on fla's chunk_delta_rule / chunk_gated_delta_rule (same contract)."""
    _check("delta_rule", inputs, causal)
    kernels = load_kernels(inputs.q.device)
    q, k, v = (_fla_layout(x) for x in (inputs.q, inputs.k, inputs.v))
    beta = _fla_layout(inputs.beta)  # (batch, n, heads)
    common = {"scale": inputs.scale, "initial_state": _initial_state(inputs),
              "output_final_state": return_state}
    if gate_given:
        g = _fla_layout(inputs.log_gate[..., 0].float())
        out, state = kernels.gated_delta_rule(q=q, k=k, v=v, g=g, beta=beta, **common)
    else:
        out, state = kernels.delta_rule(q=q, k=k, v=v, beta=beta, **common)
    return _finish(out, state, inputs.v, return_state)
