"""Transformer classifier for the LRA tasks, with the attention core passed in."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
from torch import Tensor, nn

from linarena.attention.layers.base import attention_target, build_attention, takes_score_bias
from linarena.attention.validation import check_mask_dtype
from linarena.errors import ConfigError
from linarena.models.blocks import LAYER_NORM_EPS, TransformerBlock
from linarena.models.embedding import TokenPositionEmbedding
from linarena.models.heads import ClassifierHead, PairHead
from linarena.models.positions import check_takes_score_bias

HEAD_KINDS = ("sequence", "pair", "token")
POOLINGS = ("cls", "mean", "first")
T = TypeVar("T")


class SequenceTooLongError(ConfigError, ValueError):
    """An input is longer than the model's position table (model.max_length)."""


class TransformerClassifier(nn.Module):
    """Embedding, num_layers pre-LN blocks, final LayerNorm, pooling and a classifier head.

    Args:
        vocab_size: token ids are 0 .. vocab_size - 1, 0 being padding.
        num_classes: output classes.
        head_kind: "sequence" (one label per sequence), "pair" (one label per pair of documents,
            dual encoder: one encoder for both, then `pair_head`) or "token" (a label per
            position). Given by the data (the datamodule's `head_kind`), not by the model config.
        attention: builds each block's attention (layers.build_attention): a core on the
            block's q, k, v (attention(head_dim=..., causal=...)) or a whole layer
            (linarena.attention.layers, attention(causal=...)), plus rotary=<the positions
            object> when the positions kind rotates q and k, or score_bias=<it> when it biases
            the scores (refused, ScoreBiasRefusedError, for an attention that computes no
            scores: every one of a hybrid stack must). A sequence of such factories makes
            a hybrid stack (model.pattern): one per block, or a shorter pattern repeated
            (repeat_pattern).
        d_model, num_heads, num_layers, mlp_dim, dropout: Transformer sizes.
        qkv_dim: total q/k/v width over the heads (LRA's qkv_dim), so head_dim = qkv_dim //
            num_heads; None means d_model.
        max_length: longest input accepted (tokens per sequence or per document, CLS excluded).
        pooling: "cls" (a learned CLS vector in front), "mean" (mean over real tokens, i.e.
            where the mask is True) or "first" (the first position's output, no CLS: LRA's dual
            encoder); unused for head_kind "token".
        positions: a kind of linarena.models.positions.POSITIONS: "none", "sinusoidal" or
            "learned" (added to the embedding), "rope" (q and k rotated in every attention
            layer, each family at its own place: see linarena.attention.rotation), "alibi" (a
            bias on the scores of softmax and sliding-window attention).
        causal: position i attends to positions <= i only (needs mean pooling or head "token").
        pair_head: for head_kind "pair": "lra" ([u, v], two hidden layers) or "nli"
            ([u, v, u*v, u-v], one hidden layer).
        short_conv: taps of a causal depthwise convolution before each block's attention
            (Zoology/Based; 3 there), 0 for none.
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        head_kind: str,
        attention: Callable[..., nn.Module] | Sequence[Callable[..., nn.Module]],
        d_model: int = 128,
        num_heads: int = 4,
        num_layers: int = 2,
        mlp_dim: int = 256,
        dropout: float = 0.1,
        qkv_dim: int | None = None,
        max_length: int = 512,
        pooling: str = "cls",
        positions: str = "sinusoidal",
        causal: bool = False,
        pair_head: str = "nli",
        short_conv: int = 0,
    ) -> None:
        super().__init__()
        width_key = "d_model" if qkv_dim is None else "qkv_dim"
        qkv_dim = d_model if qkv_dim is None else qkv_dim
        check_model_args(head_kind, qkv_dim, width_key, num_heads, pooling, causal)
        self.head_kind = head_kind
        self.max_length = max_length
        self.pooling = pooling
        self.uses_cls = head_kind != "token" and pooling == "cls"
        self.embedding = TokenPositionEmbedding(
            vocab_size, d_model, max_length, positions, dropout, cls=self.uses_cls
        )
        head_dim = qkv_dim // num_heads
        # One positions object, applied once: by the embedding, or (rope, alibi) by every
        # attention, which gets it here; they share it (a relative kind holds no parameters).
        made = self.embedding.positions
        rotary = made if made.rotates else None
        score_bias = made if made.biases else None
        factories = (repeat_pattern(attention, num_layers) if isinstance(attention, Sequence)
                     else [attention] * num_layers)
        for factory in factories:  # before any block is built: the first refusal is the message
            check_takes_score_bias(positions, takes_score_bias(factory),
                                   getattr(attention_target(factory), "__name__", "this attention"))
        self.blocks = nn.ModuleList(
            TransformerBlock(
                d_model,
                num_heads,
                mlp_dim,
                dropout,
                build_attention(factory, head_dim, causal, rotary, score_bias),
                qkv_dim,
                short_conv,
            )
            for factory in factories
        )
        self.final_norm = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)
        if head_kind == "pair":
            self.head: nn.Module = PairHead(d_model, mlp_dim, num_classes, pair_head)
        else:
            self.head = ClassifierHead(d_model, [mlp_dim], num_classes)

    def forward(self, tokens: Tensor, mask: Tensor) -> Tensor:
        """tokens, mask: (batch, length), or (batch, 2, length) for head_kind "pair"; mask is
        bool, True for real tokens (any pattern: right padding or holes, e.g. black pixels).

        Returns logits (batch, num_classes), or (batch, length, num_classes) for "token".
        """
        if self.head_kind == "pair":
            if tokens.dim() != 3 or tokens.shape[1] != 2:
                raise ValueError(
                    "head_kind 'pair' expects tokens of shape (batch, 2, length), got "
                    f"{tuple(tokens.shape)}."
                )
            batch = tokens.shape[0]
            # One encoder pass over both documents: (2 * batch, length) -> (2 * batch, d_model).
            pooled = self.pool(*self.encode(tokens.flatten(0, 1), mask.flatten(0, 1)))
            u, v = pooled.view(batch, 2, -1).unbind(1)
            return self.head(u, v)
        hidden, hidden_mask = self.encode(tokens, mask)
        if self.head_kind == "token":
            return self.head(hidden)
        return self.head(self.pool(hidden, hidden_mask))

    def encode(self, tokens: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """tokens, mask: (batch, length) -> hidden states (batch, length', d_model) and their mask
        (batch, length'), length' = length + 1 when a CLS vector is put in front."""
        if tokens.shape[1] > self.max_length:
            raise SequenceTooLongError(
                f"An input has {tokens.shape[1]} tokens but the model accepts at most "
                f"model.max_length={self.max_length}. Set model.max_length={tokens.shape[1]} "
                f"or larger, or shorten the inputs with data.max_length={self.max_length}."
            )
        check_mask_dtype(mask, type(self).__name__)
        # A sequence with no real token at all (e.g. an all-black image when black pixels are
        # padding) is read as all real: softmax over zero keys is undefined.
        mask = mask | ~mask.any(dim=1, keepdim=True)
        if self.uses_cls:
            mask = torch.cat([torch.ones_like(mask[:, :1]), mask], dim=1)  # CLS is real
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x, mask)
        return self.final_norm(x), mask

    def pool(self, hidden: Tensor, mask: Tensor) -> Tensor:
        """hidden: (batch, length, d_model), mask: (batch, length) -> (batch, d_model)."""
        if self.pooling in ("cls", "first"):
            return hidden[:, 0]
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)


def repeat_pattern(pattern: Sequence[T], num_layers: int) -> list[T]:
    """The entry of each of num_layers blocks: `pattern` itself (one per block) or repeated,
    e.g. [a, a, b] over 6 layers -> [a, a, b, a, a, b]; ConfigError unless num_layers is a
    multiple of its length."""
    if not pattern:
        raise ConfigError("model.pattern=[] names no attention: give conf/attention/ names, e.g. "
                          "model.pattern=[gated_deltanet,softmax], or null (attention= in every "
                          "layer).")
    if num_layers < 1 or num_layers % len(pattern):
        raise ConfigError(
            f"model.pattern has {len(pattern)} entries, so model.num_layers={num_layers} must be "
            f"a multiple of {len(pattern)} (the pattern repeats over the layers): set "
            f"model.num_layers={len(pattern)} or {2 * len(pattern)}, or give one entry per layer.")
    return list(pattern) * (num_layers // len(pattern))


def check_model_args(
    head_kind: str, width: int, width_key: str, num_heads: int, pooling: str, causal: bool
) -> None:
    """Raise ValueError with the config key to change for inconsistent model settings."""
    if head_kind not in HEAD_KINDS:
        raise ValueError(f"head_kind must be one of {list(HEAD_KINDS)}, got {head_kind!r}.")
    if pooling not in POOLINGS:
        raise ValueError(f"model.pooling must be one of {list(POOLINGS)}, got {pooling!r}.")
    if num_heads < 1 or width % num_heads != 0:
        raise ValueError(
            f"model.{width_key}={width} must be divisible by model.num_heads={num_heads} "
            f"(each head gets {width_key} // num_heads dimensions). Change model.num_heads to a "
            f"divisor of {width}, or model.{width_key} to a multiple of {num_heads}."
        )
    if causal and pooling in ("cls", "first") and head_kind != "token":
        raise ValueError(
            f"model.causal=true with model.pooling={pooling}: under a causal mask the first "
            "position sees only itself. Set model.pooling=mean (or use a per-token task)."
        )
