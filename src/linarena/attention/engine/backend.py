"""Which code runs an attention call: the `backend` setting every variant takes
(`attention.backend=auto|torch|fla` in a config).

  auto   fla-core's Triton kernels for causal calls on CUDA when fla is installed and has a
         kernel for the variant and the call's dtype; linarena's PyTorch code otherwise.
  torch  linarena's PyTorch code, always: the reference every other backend is tested against.
  fla    fla-core's kernels. Refused when the layer is built (so a config check fails at once)
         if the variant has no fla kernel, the layer is bidirectional (fla has no bidirectional
         kernels), fla is not installed or there is no CUDA device.

The recurrences have fla kernels (below: RetNet and Mamba-2 on chunk_simple_gla,
GLA on chunk_gla, DeltaNet and Gated DeltaNet on chunk_delta_rule / chunk_gated_delta_rule). The
feature maps have none: fla's linear-attention kernels know neither the log-scales that keep
Performer's features finite nor eps on the true denominator, so linarena's chunked kernels run
them on every device. Softmax always runs PyTorch's scaled_dot_product_attention (flash or
memory-efficient kernels on CUDA) and takes auto or torch only.

Every attention module records the backend its last forward call ran on in `backend_used`
("torch" or "fla"; None before its first call), for a run's summary to report.

The fla side (backend="fla", and auto's fla calls): the causal ops on fla-core's Triton
kernels (pip install 'linarena[fla]').

fla's layout is (batch, n, heads, dim) and its scale defaults to k_dim ** -0.5 as ours; its
log gates are per step (not cumulative), its state (batch, heads, k_dim, v_dim) in float32. The
ops have checked the inputs and neutralised padded tokens (zero q, k, v, beta; log gate 0)
before they get here, so the kernels see plain sequences. The kernels run in the inputs' dtype
(fp16 / bf16 under autocast; fla's delta-rule kernels refuse float32) and accumulate in float32.

Kernel per call: no gate -> chunk_simple_gla(g=None); per-head gate -> chunk_simple_gla;
per-feature gate -> chunk_gla; delta rule -> chunk_delta_rule, gated -> chunk_gated_delta_rule.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from linarena.attention.engine.recurrence import OpInputs

BACKENDS = ("auto", "torch", "fla")


def fla_installed() -> bool:
    """Whether fla-core and Triton can be imported (looked up, not imported: importing fla.ops
    takes seconds)."""
    return all(importlib.util.find_spec(name) is not None for name in ("fla", "triton"))


def check_backend(backend: str, name: str, causal: bool, no_fla_kernel: str | None) -> None:
    """Refuse a backend a layer cannot honour, when it is built: an unknown name, or "fla" where
    fla cannot run. `no_fla_kernel`: why the variant has no fla kernel, or None if it has one."""
    if backend not in BACKENDS:
        raise ValueError(f"{name}: backend must be one of {', '.join(BACKENDS)}; got {backend!r}.")
    if backend != "fla":
        return
    if no_fla_kernel is not None:
        raise ValueError(f"{name}: backend='fla': {no_fla_kernel}. Use backend=auto or torch.")
    if not causal:
        raise ValueError(f"{name}: backend='fla' has no kernel for bidirectional attention: "
                         "fla-core's kernels are causal only, so bidirectional layers always run "
                         "linarena's torch code. Use backend=auto or torch (or model.causal=true).")
    if not fla_installed():
        raise ValueError(f"{name}: backend='fla' needs fla-core and Triton, which are not "
                         "installed: pip install 'linarena[fla]' on a CUDA machine, or use "
                         "backend=auto or torch.")
    if not torch.cuda.is_available():
        raise ValueError(f"{name}: backend='fla' runs fla-core's Triton kernels, which need a "
                         "CUDA device, and none is available. Use backend=auto or torch.")


def backend_used(module: torch.nn.Module) -> str | None:
    """The code the attention layers in `module` (a model, or one layer) ran on their last
    forward call: "torch", "fla", or "fla+torch" when layers differ (fla takes a layer's causal
    CUDA calls only); None if no attention layer has run yet."""
    used = {m.backend_used for m in module.modules() if getattr(m, "backend_used", None)}
    return "+".join(sorted(used)) or None


# fla-core's kernels: loading, which calls they take, and the calls in fla's layout.


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
