"""AttentionLayer: a whole token-mixing layer as its paper publishes it (its own projections,
short convolutions, gates, norms and output projection), in place of the block's q/k/v/out
projections around an attention core.

A core (linarena.attention: softmax, the feature maps, linarena.attention.recurrent) maps
q, k, v (batch, heads, n, head_dim) to (batch, heads, n, head_dim) and the Transformer block
projects around it. A layer maps the token representation x (batch, n, d_model) to
(batch, n, d_model) itself, so the arena compares GLA, Mamba-2, DeltaNet, ... as published, not
only their recurrences. A variant is one subclass plus one YAML file in conf/attention/; the
model (linarena.models.blocks.TransformerBlock) uses a layer as it is built.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from linarena.attention.backends import check_backend, fla_installed
from linarena.attention.ops import fla
from linarena.attention.rotation import Rotation, ScoreBias
from linarena.attention.validation import check_state_kind


@dataclass
class LayerState:
    """What a causal layer keeps after `position` tokens to continue the sequence: named tensors
    (the recurrent state, the short convolutions' last inputs, a sliding window's keys and
    values), and made_by, the layer that made it, so a state is never continued by another."""

    tensors: dict[str, Tensor] = field(default_factory=dict)
    position: int = 0
    made_by: str = ""


class AttentionLayer(nn.Module):
    """x (batch, n, d_model) -> (batch, n, d_model), with a bool mask (batch, n), True = real.

    Subclasses implement `forward` (with `initial_state` / `return_state` in causal mode, so
    that `step` is forward on one token) and `state_size`. Padded tokens must reach no real
    output and no gradient: zero them (validation.zero_padding) before every mixing step,
    convolutions included.

    Class attributes:
        linear_in_length: cost linear in the length (a recurrence, a window); False: quadratic.
        own_short_conv: the layer has its own short convolutions, so model.short_conv (one more
            before the block) is refused.
        fla_kernel: the layer runs fla's kernels with backend="fla" (and "auto" on CUDA); a
            layer without one refuses backend="fla" when built.

    Args:
        d_model, num_heads: the model's width and heads (model.d_model, model.num_heads).
        causal: position i sees positions <= i only.
        backend: "auto", "torch" or "fla" for the layer's recurrence (linarena.attention.backends).
        rotary: relative positions (model.positions=rope), applied to the q and k the layer's
            recurrence or attention sees; None: no rotation.
    """

    linear_in_length = True
    own_short_conv = False
    fla_kernel = False

    def __init__(self, d_model: int, num_heads: int, causal: bool, backend: str = "auto",
                 rotary: Rotation | None = None) -> None:
        super().__init__()
        name = type(self).__name__
        if d_model < 1 or num_heads < 1 or d_model % num_heads:
            raise ValueError(f"{name}: d_model ({d_model}) must be a positive multiple of "
                             f"num_heads ({num_heads}).")
        check_backend(backend, name, causal,
                      None if self.fla_kernel else f"{name} has no fla kernel wired in")
        self.d_model = d_model
        self.num_heads = num_heads
        self.causal = causal
        self.backend = backend
        self.rotary = rotary
        self.backend_used: str | None = None  # of the last forward call (see backends.py)
        # backend="auto": whether a call may run fla's kernels (its device and dtype then say).
        self._auto_fla = backend == "auto" and causal and fla_installed()

    def runs_fla(self, dtype: torch.dtype, device: torch.device, *, delta: bool) -> bool:
        """Whether a forward call whose recurrence inputs are of `dtype` (the projections'
        output: the autocast dtype in a mixed-precision run) on `device` runs fla's kernels
        (fla.runs_fla, the rule of the cores too)."""
        return fla.runs_fla(type(self).__name__, self.backend, self._auto_fla, dtype, device,
                            delta=delta)

    def forward(self, x: Tensor, mask: Tensor | None = None, *,
                initial_state: LayerState | None = None, return_state: bool = False
                ) -> Tensor | tuple[Tensor, LayerState]:
        """x: (batch, n, d_model); mask: bool (batch, n). Causal mode only: initial_state
        continues a sequence, return_state also returns the state after these tokens."""
        raise NotImplementedError

    def step(self, x: Tensor, state: LayerState | None = None) -> tuple[Tensor, LayerState]:
        """One token of causal mode: x (batch, d_model) -> (output (batch, d_model), new state),
        the same output forward() gives that token in the whole sequence."""
        if not self.causal:
            raise RuntimeError(f"{type(self).__name__}.step() is the recurrent form of causal "
                               "attention; build the layer with causal=True.")
        if x.dim() != 2 or x.shape[-1] != self.d_model:
            raise ValueError(f"{type(self).__name__}.step() takes one token x of shape "
                             f"(batch, d_model={self.d_model}), got {tuple(x.shape)}.")
        out, new = self.forward(x.unsqueeze(1), initial_state=state, return_state=True)
        return out[:, 0], new

    def state_size(self, length: int) -> int:
        """Numbers the layer keeps per sequence to decode the next token after `length` tokens
        (all heads): a recurrence's states and its convolutions' last inputs; a window's keys
        and values."""
        raise NotImplementedError

    def check_call(self, x: Tensor, mask: Tensor | None, initial_state: LayerState | None,
                   return_state: bool) -> None:
        """Refuse a wrong x, mask or state with a message saying what was expected."""
        name = type(self).__name__
        if x.dim() != 3 or x.shape[-1] != self.d_model or not x.is_floating_point():
            raise ValueError(f"{name}: x must be a float tensor (batch, length, d_model="
                             f"{self.d_model}), got {tuple(x.shape)} of {x.dtype}.")
        if mask is not None and (mask.dtype != torch.bool or tuple(mask.shape) != x.shape[:2]):
            raise ValueError(f"{name}: mask must be bool (batch, length) = "
                             f"{tuple(x.shape[:2])}, got {tuple(mask.shape)} of {mask.dtype}.")
        if (initial_state is not None or return_state) and not self.causal:
            raise ValueError(f"{name}: initial_state and return_state are for causal mode; "
                             "build the layer with causal=True.")
        if initial_state is not None:
            check_state_kind(initial_state, LayerState, name)
        if initial_state is not None and initial_state.made_by != self.made_by():
            raise ValueError(f"{name}: this state was made by {initial_state.made_by!r}, not by "
                             f"this layer ({self.made_by()!r}); a state continues only the layer "
                             "kind and sizes that made it.")

    def made_by(self) -> str:
        """The layer kind and sizes a state of this layer records."""
        return f"{type(self).__name__}(d_model={self.d_model}, num_heads={self.num_heads})"


def attention_target(factory: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
    """The class (or function) an attention factory (`_partial_`) calls."""
    target = factory
    while hasattr(target, "func"):  # a partial of a partial (e.g. a benchmark's backend=)
        target = target.func
    return target


def takes_score_bias(factory: Callable[..., nn.Module]) -> bool:
    """Whether the attention a factory builds adds a bias to its scores (score_bias=): only a
    core that computes them (softmax, sliding window) says so; no feature map, recurrence or
    whole layer has a score matrix."""
    return bool(getattr(attention_target(factory), "takes_score_bias", False))


def build_attention(factory: Callable[..., nn.Module], head_dim: int, causal: bool,
                    rotary: Rotation | None = None, score_bias: ScoreBias | None = None
                    ) -> nn.Module:
    """One attention of a model from the factory an attention config builds (`_partial_`): a
    core gets the model's head_dim, a layer (AttentionLayer) sizes itself from its own config;
    `rotary` (model.positions=rope) and `score_bias` (model.positions=alibi, only for an
    attention that takes_score_bias) are passed only when given."""
    positions = {} if rotary is None else {"rotary": rotary}
    if score_bias is not None:
        positions["score_bias"] = score_bias
    target = attention_target(factory)
    if isinstance(target, type) and issubclass(target, AttentionLayer):
        return factory(causal=causal, **positions)
    return factory(head_dim=head_dim, causal=causal, **positions)
