"""Which code runs an attention call: the `backend` setting every variant takes
(`attention.backend=auto|torch|fla` in a config).

  auto   fla-core's Triton kernels for causal calls on CUDA when fla is installed and has a
         kernel for the variant and the call's dtype; linarena's PyTorch code otherwise.
  torch  linarena's PyTorch code, always: the reference every other backend is tested against.
  fla    fla-core's kernels. Refused when the layer is built (so a config check fails at once)
         if the variant has no fla kernel, the layer is bidirectional (fla has no bidirectional
         kernels), fla is not installed or there is no CUDA device.

The recurrences have fla kernels (attention/ops/fla.py: RetNet and Mamba-2 on chunk_simple_gla,
GLA on chunk_gla, DeltaNet and Gated DeltaNet on chunk_delta_rule / chunk_gated_delta_rule). The
feature maps have none: fla's linear-attention kernels know neither the log-scales that keep
Performer's features finite nor eps on the true denominator, so linarena's chunked kernels run
them on every device. Softmax always runs PyTorch's scaled_dot_product_attention (flash or
memory-efficient kernels on CUDA) and takes auto or torch only.

Every attention module records the backend its last forward call ran on in `backend_used`
("torch" or "fla"; None before its first call), for a run's summary to report.
"""

from __future__ import annotations

import importlib.util

import torch

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
