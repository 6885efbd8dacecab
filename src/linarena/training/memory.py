"""A lower bound on the memory a config needs, checked before anything large is allocated, so
that a length the machine cannot hold (data.max_length=100000000) fails in a second with the
figure instead of building a 12.8 GB position table for minutes.

The estimate counts only what certainly exists, so it never refuses a config that would fit:
the position table (and its gradient and AdamW moments when learned), the activations each layer
keeps for the backward pass, and softmax's (length x length) attention matrices where PyTorch
materialises them (the math path of scaled_dot_product_attention: on CPU with attention dropout;
the flash and memory-efficient kernels used otherwise keep none).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
from hydra.utils import get_object
from omegaconf import DictConfig

from linarena.attention import SoftmaxAttention
from linarena.errors import ResourceError
from linarena.models.positions import POSITIONS, check_positions_kind
from linarena.training.launch import resolve_precision

FLOAT32 = 4


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes, by part."""

    position_table: int
    activations: int
    attention_matrices: int

    @property
    def total(self) -> int:
        return self.position_table + self.activations + self.attention_matrices


def on_gpu(accelerator: str) -> bool:
    return accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()


def estimate_memory(cfg: DictConfig, accelerator: str) -> MemoryEstimate:
    """The lower bound described in the module docstring, for one device."""
    model, batch, length = cfg.model, int(cfg.data.batch_size), int(cfg.model.max_length)
    d_model, layers = int(model.d_model), int(model.num_layers)
    width = int(model.get("qkv_dim") or d_model)
    table = (length + 1) * d_model * FLOAT32
    position_table = table * POSITIONS[check_positions_kind(model.positions)].table_copies
    precision = resolve_precision(cfg.trainer.precision, accelerator)
    element = 2 if "16" in precision else FLOAT32
    # Per layer and token, kept for the backward pass: the block input, its layer norm, q, k, v,
    # the attention output and the MLP's hidden layer.
    per_token = 2 * d_model + 4 * width + int(model.mlp_dim)
    activations = layers * batch * length * per_token * element
    attention_matrices = 0
    target = get_object(cfg.attention._target_)
    dropout = float(cfg.attention.get("dropout") or 0.0)
    if (
        isinstance(target, type)
        and issubclass(target, SoftmaxAttention)
        and dropout > 0
        and not on_gpu(accelerator)
    ):
        # The attention probabilities of every layer are kept for the backward pass.
        attention_matrices = layers * batch * int(model.num_heads) * length**2 * FLOAT32
    return MemoryEstimate(position_table, activations, attention_matrices)


def device_memory(accelerator: str) -> tuple[int, str]:
    """(bytes, description) of the memory of the device the run trains on."""
    if on_gpu(accelerator):
        properties = torch.cuda.get_device_properties(0)
        return properties.total_memory, f"the memory of the GPU ({properties.name})"
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine's RAM"


def _gb(n_bytes: float) -> str:
    return f"{n_bytes / 1e9:.1f} GB"


def check_memory(cfg: DictConfig, accelerator: str, available: Any = None) -> MemoryEstimate:
    """ResourceError when the estimate exceeds the device's total memory; returns the estimate.
    `available`: (bytes, description), for tests; default device_memory(accelerator)."""
    estimate = estimate_memory(cfg, accelerator)
    total, device = available or device_memory(accelerator)
    if estimate.total > total:
        parts = [
            f"position table {_gb(estimate.position_table)}",
            f"activations {_gb(estimate.activations)}",
        ]
        if estimate.attention_matrices:
            parts.append(f"softmax attention matrices {_gb(estimate.attention_matrices)}")
        raise ResourceError(
            f"This config needs at least {_gb(estimate.total)} ({', '.join(parts)}) at "
            f"model.max_length={cfg.model.max_length}, data.batch_size={cfg.data.batch_size}, "
            f"but {device} is {_gb(total)}. Lower data.max_length (and model.max_length) or "
            "data.batch_size, or train on a device with more memory."
        )
    return estimate
