"""Classifier heads: an MLP on a pooled vector, the pair (dual-encoder) head, and the LM head of
self-pretraining."""

from __future__ import annotations

import torch
from torch import Tensor, nn

# "lra": LRA's classifier_head_dual (interaction None): [u, v] -> Dense(mlp_dim) - ReLU -
#   Dense(mlp_dim // 2) - ReLU - Dense(classes).
# "nli": [u, v, u * v, u - v] -> Dense(mlp_dim) - ReLU - Dense(classes).
PAIR_HEADS = ("lra", "nli")


class ClassifierHead(nn.Module):
    """Dense(hidden[0]) - ReLU - ... - Dense(hidden[-1]) - ReLU - Dense(num_classes).

    With one hidden width this is LRA's classifier_head.
    """

    def __init__(self, in_features: int, hidden: list[int], num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for width in hidden:
            layers += [nn.Linear(in_features, width), nn.ReLU()]
            in_features = width
        layers.append(nn.Linear(in_features, num_classes))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        """x: (..., in_features) -> (..., num_classes)."""
        return self.layers(x)


class PairHead(nn.Module):
    """Combines the pooled vectors u, v of two documents and classifies the pair.

    Args:
        d_model: width of u and v.
        mlp_dim: first hidden width.
        num_classes: output classes.
        kind: "lra" or "nli" (see PAIR_HEADS).
    """

    def __init__(self, d_model: int, mlp_dim: int, num_classes: int, kind: str) -> None:
        super().__init__()
        if kind not in PAIR_HEADS:
            raise ValueError(f"model.pair_head must be one of {list(PAIR_HEADS)}, got {kind!r}.")
        self.kind = kind
        if kind == "lra":
            self.mlp = ClassifierHead(2 * d_model, [mlp_dim, mlp_dim // 2], num_classes)
        else:
            self.mlp = ClassifierHead(4 * d_model, [mlp_dim], num_classes)

    def forward(self, u: Tensor, v: Tensor) -> Tensor:
        """u, v: (batch, d_model) -> (batch, num_classes)."""
        if self.kind == "lra":
            return self.mlp(torch.cat([u, v], dim=-1))
        return self.mlp(torch.cat([u, v, u * v, u - v], dim=-1))

    def extra_repr(self) -> str:
        return f"kind={self.kind}"


class LMHead(nn.Module):
    """Self-pretraining's output layer (training/pretrain.py): one logit per real token id of
    the task, Dense(num_classes) on each position's final hidden state. Fine-tuning drops it.

    Args:
        d_model: width of the hidden states.
        num_classes: the task's real token ids, vocab_size - 1 (padding is never predicted).
    """

    def __init__(self, d_model: int, num_classes: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model, num_classes)

    def forward(self, hidden: Tensor) -> Tensor:
        """hidden: (batch, length, d_model) -> logits (batch, length, num_classes)."""
        return self.proj(hidden)
