"""Transformer classifier for the LRA tasks, with the attention core passed in."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from linarena.models.blocks import TransformerBlock
from linarena.models.embedding import TokenPositionEmbedding

TASKS = ("sequence", "pair", "token")
POOLINGS = ("cls", "mean")


class SequenceTooLongError(ValueError):
    """An input is longer than the model's position table (model.max_length)."""


class ClassifierHead(nn.Module):
    """Dense(hidden) - ReLU - Dense(num_classes), the LRA classifier head."""

    def __init__(self, in_features: int, hidden: int, num_classes: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        """x: (..., in_features) -> (..., num_classes)."""
        return self.fc2(torch.relu(self.fc1(x)))


class TransformerClassifier(nn.Module):
    """Embedding, num_layers pre-LN blocks, final LayerNorm, pooling and a classifier head.

    Args:
        vocab_size: token ids are 0 .. vocab_size - 1, 0 being padding. With CLS pooling the
            model adds its own CLS id, vocab_size, so the embedding has vocab_size + 1 rows.
        num_classes: output classes.
        task: "sequence" (one label per sequence), "pair" (one label per pair of documents,
            dual encoder with head on [u, v, u*v, u-v]) or "token" (a label per position).
        attention: builds one attention core per layer: attention(head_dim=..., causal=...).
        d_model, num_heads, num_layers, mlp_dim, dropout: Transformer sizes.
        max_length: longest input accepted (tokens per sequence or per document, CLS excluded).
        pooling: "cls" (a CLS token in front) or "mean" (mean over real tokens); unused for
            task "token".
        positions: "sinusoidal" or "learned".
        causal: position i attends to positions <= i only (needs mean pooling or task "token").
        short_conv: taps of a causal depthwise convolution before each block's attention
            (Zoology/Based; 3 there), 0 for none.
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        task: str,
        attention: Callable[..., nn.Module],
        d_model: int = 128,
        num_heads: int = 4,
        num_layers: int = 2,
        mlp_dim: int = 256,
        dropout: float = 0.1,
        max_length: int = 512,
        pooling: str = "cls",
        positions: str = "sinusoidal",
        causal: bool = False,
        short_conv: int = 0,
    ) -> None:
        super().__init__()
        check_model_args(task, d_model, num_heads, pooling, causal)
        self.task = task
        self.max_length = max_length
        self.pooling = pooling
        self.uses_cls = task != "token" and pooling == "cls"
        self.cls_id = vocab_size
        extra = int(self.uses_cls)
        self.embedding = TokenPositionEmbedding(
            vocab_size + extra, d_model, max_length + extra, positions, dropout
        )
        head_dim = d_model // num_heads
        self.blocks = nn.ModuleList(
            TransformerBlock(
                d_model, num_heads, mlp_dim, dropout, attention(head_dim=head_dim, causal=causal),
                short_conv,
            )
            for _ in range(num_layers)
        )
        self.final_norm = nn.LayerNorm(d_model)
        head_in = 4 * d_model if task == "pair" else d_model
        self.head = ClassifierHead(head_in, mlp_dim, num_classes)

    def forward(self, tokens: Tensor, mask: Tensor) -> Tensor:
        """tokens, mask: (batch, length), or (batch, 2, length) for task "pair"; mask is bool,
        True for real tokens, right-padded.

        Returns logits (batch, num_classes), or (batch, length, num_classes) for task "token".
        """
        if self.task == "pair":
            if tokens.dim() != 3 or tokens.shape[1] != 2:
                raise ValueError(
                    f"task 'pair' expects tokens of shape (batch, 2, length), got {tuple(tokens.shape)}."
                )
            batch = tokens.shape[0]
            # One encoder pass over both documents: (2 * batch, length) -> (2 * batch, d_model).
            pooled = self.pool(*self.encode(tokens.flatten(0, 1), mask.flatten(0, 1)))
            u, v = pooled.view(batch, 2, -1).unbind(1)
            return self.head(torch.cat([u, v, u * v, u - v], dim=-1))
        hidden, hidden_mask = self.encode(tokens, mask)
        if self.task == "token":
            return self.head(hidden)
        return self.head(self.pool(hidden, hidden_mask))

    def encode(self, tokens: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """tokens, mask: (batch, length) -> hidden states (batch, length', d_model) and their mask
        (batch, length'), length' = length + 1 when a CLS token is put in front."""
        if tokens.shape[1] > self.max_length:
            raise SequenceTooLongError(
                f"An input has {tokens.shape[1]} tokens but the model accepts at most "
                f"model.max_length={self.max_length}. Set model.max_length={tokens.shape[1]} "
                f"or larger, or shorten the inputs with data.max_length={self.max_length}."
            )
        mask = mask.bool()
        if self.uses_cls:
            cls = torch.full_like(tokens[:, :1], self.cls_id)
            tokens = torch.cat([cls, tokens], dim=1)
            mask = torch.cat([torch.ones_like(mask[:, :1]), mask], dim=1)
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x, mask)
        return self.final_norm(x), mask

    def pool(self, hidden: Tensor, mask: Tensor) -> Tensor:
        """hidden: (batch, length, d_model), mask: (batch, length) -> (batch, d_model)."""
        if self.uses_cls:
            return hidden[:, 0]
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)


def check_model_args(task: str, d_model: int, num_heads: int, pooling: str, causal: bool) -> None:
    """Raise ValueError with the config key to change for inconsistent model settings."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {list(TASKS)}, got {task!r}.")
    if pooling not in POOLINGS:
        raise ValueError(f"model.pooling must be one of {list(POOLINGS)}, got {pooling!r}.")
    if num_heads < 1 or d_model % num_heads != 0:
        raise ValueError(
            f"model.d_model={d_model} must be divisible by model.num_heads={num_heads} "
            f"(each head gets d_model // num_heads dimensions). Change model.num_heads to a "
            f"divisor of {d_model}, or model.d_model to a multiple of {num_heads}."
        )
    if causal and pooling == "cls" and task != "token":
        raise ValueError(
            "model.causal=true with model.pooling=cls: under a causal mask the CLS token in "
            "front sees only itself. Set model.pooling=mean (or use a per-token task)."
        )
