"""Variants a contributor might add, defined here rather than in conf/attention/ (which every
generic test reads): a feature map, a recurrence and a broken map, with conf_dir(), a conf
folder holding one YAML file for each, for the arena's tests. train.py runs find this module
on PYTHONPATH (tests/) and the folder through hydra.searchpath."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor
from torch.nn import functional as F

from linarena.attention.feature_map import FeatureMap
from linarena.attention.recurrent.core import Recurrence, RecurrentAttention


class SoftplusMap(FeatureMap):
    """phi(x) = softplus(x), head_dim features: positive, as a kernel map must be."""

    def num_features(self, head_dim: int) -> int:
        return head_dim

    def forward(self, x: Tensor) -> Tensor:
        return F.softplus(x)


class DecayCore(RecurrentAttention):
    """S_t = 0.9 S_{t-1} + k_t v_t^T per head; o_t = RMSNorm(S_t^T q_t / sqrt(head_dim))."""

    reads_token = False

    def __init__(self, head_dim: int, causal: bool) -> None:
        super().__init__(head_dim, causal)

    def recurrence(self, q, k, v, x):
        return Recurrence(q, k, v, torch.full(q.shape[:3], -0.1054, dtype=q.dtype,
                                              device=q.device), None, None)


class LeakyMap(FeatureMap):
    """Broken on purpose: phi(x) = exp(x - max over the whole sequence), a stabiliser that
    reads every token, the future and the padding included."""

    def num_features(self, head_dim: int) -> int:
        return head_dim

    def forward(self, x: Tensor) -> Tensor:
        return torch.exp(x - x.amax(dim=(-2, -1), keepdim=True))


FILES = {
    "softplus_map": ("softplus map", "linarena.attention.LinearAttention",
                     "  feature_map:\n    _target_: helpers.arena_variants.SoftplusMap\n"),
    "decay_core": ("decay core", "helpers.arena_variants.DecayCore", ""),
    "leaky_map": ("leaky map", "linarena.attention.LinearAttention",
                  "  feature_map:\n    _target_: helpers.arena_variants.LeakyMap\n"),
}


def conf_dir(folder: Path) -> Path:
    """<folder>/attention/<name>.yaml for each of FILES; returns `folder`."""
    (folder / "attention").mkdir(parents=True, exist_ok=True)
    for name, (label, target, extra) in FILES.items():
        (folder / "attention" / f"{name}.yaml").write_text(
            f"# @package _global_\nattention_label: {label}\nattention:\n  _target_: {target}\n"
            f"  _partial_: true\n{extra}")
    return folder
