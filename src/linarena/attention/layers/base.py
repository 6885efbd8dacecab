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

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from linarena.attention.engine import (
    delta_rule,
    delta_rule_step,
    gated_linear_attention,
    gated_linear_attention_step,
)
from linarena.attention.engine.backend import check_backend, fla_installed, runs_fla
from linarena.attention.engine.common import compute_dtype, lowest
from linarena.attention.engine.linear import LinearAttentionState
from linarena.attention.recurrent.core import linear
from linarena.attention.rotation import Rotation, ScoreBias
from linarena.attention.sliding_window import WindowState
from linarena.attention.validation import (
    check_right_padded,
    check_state,
    check_state_kind,
    zero_padding,
)


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

    The seam: a subclass declares its parts, the base runs them (`forward`, `step`).

        project(x, call) -> parts: a dict of the recurrence's inputs, q, k, v (batch, heads, n,
            dim) and where the op takes them log_gate, beta, scale, plus anything `output`
            needs. x: the input with its padded tokens zeroed.
        recurrence: "gated" (ops.gated_linear_attention) or "delta" (ops.delta_rule), the op
            the default `mix` runs on the parts, carrying the state "recurrent"; a layer of
            other parts (Based) overrides `mix` and runs call.kernel_sums / call.window.
        output(o, parts, call) -> (batch, n, d_model): its norm, gate and out projection.
        state_shapes(batch): each carried tensor's sizes, named; state_size follows.

    The base checks x, mask and state (check_call: the layer kind that made the state, each
    tensor's shape and dtype), zeroes padded tokens before the projections and, in
    call.conv, before every convolution, picks the backend (fla's kernels or torch) and casts
    the recurrence's inputs for it, runs the op causal or bidirectional, carries each named
    state tensor in and out of LayerState, and returns the output in x's dtype.

    Dtypes (full_precision, the default): project, mix and output run with autocast off in
    call.dtype (float64 for float64 inputs, else float32); call.linear runs a projection in the
    caller's dtype and autocast, as the block's projections would (GLA, RetNet, Mamba-2), plain
    linear in call.dtype (DeltaNet). full_precision False (Based): everything in the caller's
    dtype and autocast, its parts choosing theirs.

    Class attributes:
        linear_in_length: cost linear in the length (a recurrence, a window); False: quadratic.
        own_short_conv: the layer has its own short convolutions, so model.short_conv (one more
            before the block) is refused.
        fla_kernel: the layer runs fla's kernels with backend="fla" (and "auto" on CUDA); a
            layer without one refuses backend="fla" when built.

    Args:
        d_model, num_heads: the model's width and heads (model.d_model, model.num_heads).
        causal: position i sees positions <= i only.
        backend: "auto", "torch" or "fla" for the layer's recurrence
            (linarena.attention.engine.backend).
        rotary: relative positions (model.positions=rope), applied to the q and k the layer's
            recurrence or attention sees; None: no rotation.
    """

    linear_in_length = True
    own_short_conv = False
    fla_kernel = False
    full_precision = True
    recurrence = "gated"

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
        self.backend_used: str | None = None  # of the last forward call (see engine/backend.py)
        # backend="auto": whether a call may run fla's kernels (its device and dtype then say).
        self._auto_fla = backend == "auto" and causal and fla_installed()

    # What a subclass declares.

    def project(self, x: Tensor, call: LayerCall) -> dict:
        """x (batch, n, d_model), padded tokens zeroed -> the parts (see the class docstring)."""
        raise NotImplementedError

    def mix(self, parts: dict, call: LayerCall):
        """The token mixing: the declared recurrence on the parts (batch, heads, n, v_dim)."""
        inputs = {key: parts[key] for key in ("log_gate", "beta", "scale") if key in parts}
        return call.recurrence(self.recurrence, parts["q"], parts["k"], parts["v"], **inputs)

    def output(self, o, parts: dict, call: LayerCall) -> Tensor:
        """mix's result -> (batch, n, d_model)."""
        raise NotImplementedError

    def state_shapes(self, batch: int) -> dict[str, dict[str, int]]:
        """Each carried tensor's name -> its sizes by name (batch first)."""
        raise NotImplementedError

    def state_size(self, length: int) -> int:
        """Numbers the layer keeps per sequence to decode the next token after `length` tokens
        (all heads): a recurrence's states and its convolutions' last inputs; a window's keys
        and values. By default those of state_shapes, whatever the length."""
        return sum(math.prod(list(sizes.values())[1:]) for sizes in self.state_shapes(1).values())

    # What the base does.

    def forward(self, x: Tensor, mask: Tensor | None = None, *,
                initial_state: LayerState | None = None, return_state: bool = False
                ) -> Tensor | tuple[Tensor, LayerState]:
        """x: (batch, n, d_model); mask: bool (batch, n), True = real. Causal mode only:
        initial_state continues a sequence, return_state also returns the state after these
        tokens (that of each row's real tokens: right padding)."""
        self.check_call(x, mask, initial_state, return_state)
        call = LayerCall(self, x, mask, initial_state, return_state)
        padded = zero_padding(x, mask)
        with (torch.autocast(device_type=x.device.type, enabled=False) if self.full_precision
              else contextlib.nullcontext()):
            parts = self.project(padded, call)
            out = self.output(self.mix(parts, call), parts, call)
        if self.full_precision:
            out = out.to(x.dtype)
        if not return_state:
            return out
        return out, LayerState(call.state, call.position + x.shape[1], self.made_by())

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

    def runs_fla(self, dtype: torch.dtype, device: torch.device, *, delta: bool) -> bool:
        """Whether a forward call whose recurrence inputs are of `dtype` (the projections'
        output: the autocast dtype in a mixed-precision run) on `device` runs fla's kernels
        (runs_fla, the rule of the cores too)."""
        return runs_fla(type(self).__name__, self.backend, self._auto_fla, dtype, device,
                            delta=delta)

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
        if initial_state is None:
            return
        check_state_kind(initial_state, LayerState, name)
        if initial_state.made_by != self.made_by():
            raise ValueError(f"{name}: this state was made by {initial_state.made_by!r}, not by "
                             f"this layer ({self.made_by()!r}); a state continues only the layer "
                             "kind and sizes that made it.")
        dtype = compute_dtype(x) if self.full_precision else None
        for key, sizes in self.state_shapes(x.shape[0]).items():
            tensor = initial_state.tensors[key]
            check_state(initial_state.made_by, tensor, self.made_by(), sizes,
                        dtype or tensor.dtype, name)

    def made_by(self) -> str:
        """The layer kind and sizes a state of this layer records."""
        return f"{type(self).__name__}(d_model={self.d_model}, num_heads={self.num_heads})"


class LayerCall:
    """One forward call as a layer's parts see it: its mask, the position of its first token,
    its dtypes, and the state tensors carried in (`carried`) and out (`state`) by name.

    Attributes:
        mask: bool (batch, n) or None; position: tokens before this call (causal state).
        dtype: what the parts compute in (full_precision: float32, float64 for float64 x).
        kernel_dtype: the projections' dtype in the caller's autocast, the one fla's kernels
            take (bf16-mixed: bfloat16).
    """

    def __init__(self, layer: AttentionLayer, x: Tensor, mask: Tensor | None,
                 initial_state: LayerState | None, return_state: bool) -> None:
        self.layer, self.mask, self.return_state = layer, mask, return_state
        self.device = x.device
        self.position = 0 if initial_state is None else initial_state.position
        self.carried = {} if initial_state is None else initial_state.tensors
        self.state: dict[str, Tensor] = {}
        self.dtype = compute_dtype(x) if layer.full_precision else x.dtype
        self.autocast_enabled = torch.is_autocast_enabled(x.device.type)
        self.autocast_dtype = torch.get_autocast_dtype(x.device.type)
        self.kernel_dtype = (self.autocast_dtype if self.autocast_enabled
                             and x.dtype != torch.float64 else x.dtype)
        layer.backend_used = "torch"

    def linear(self, x: Tensor, proj: nn.Linear) -> Tensor:
        """proj(x) in the caller's dtype and autocast (as the block's projections run)."""
        with torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype,
                            enabled=self.autocast_enabled):
            return linear(x, proj)

    def keep(self, key: str, result):
        """An op's (output, state) with return_state: keeps the state as `key`."""
        if not self.return_state:
            return result
        out, self.state[key] = result
        return out

    def conv(self, key: str, conv: nn.Module, x: Tensor) -> Tensor:
        """conv (layers.conv.CausalConv) on x (batch, n, channels), padding zeroed, continuing
        from the inputs carried as `key` and carrying those of each row's real tokens."""
        lengths = None
        if self.mask is not None and self.return_state:  # the cache is the real tokens'
            check_right_padded(self.mask, type(self.layer).__name__)
            lengths = self.mask.sum(-1)
        out, cache = conv(zero_padding(x, self.mask), self.carried.get(key), lengths)
        if self.return_state:
            self.state[key] = cache
        return out

    def recurrence(self, kind: str, q: Tensor, k: Tensor, v: Tensor, *,
                   log_gate: Tensor | None = None, beta: Tensor | None = None,
                   scale: float | None = None) -> Tensor:
        """The gated linear recurrence ("gated") or the delta rule ("delta", with beta) on the
        backend the layer's setting, device and kernel_dtype pick, causal or both ways, carrying
        "recurrent"; the output in call.dtype. One causal token on the torch backend (a
        decoding step) runs the op's closed-form step, O(1) small ops, not a chunked pass."""
        layer, delta = self.layer, kind == "delta"
        use_fla = layer.runs_fla(self.kernel_dtype, self.device, delta=delta)
        layer.backend_used = "fla" if use_fla else "torch"
        if use_fla:  # fla's kernels take the projections' dtype, accumulate in float32
            q, k, v = (t.to(self.kernel_dtype) for t in (q, k, v))
            beta = None if beta is None else beta.to(self.kernel_dtype)
        inputs = (q, k, v, beta, log_gate) if delta else (q, k, v, log_gate)
        start = self.carried.get("recurrent")
        if layer.causal and not use_fla and q.shape[2] == 1:
            step = delta_rule_step if delta else gated_linear_attention_step
            out, state = step(*inputs, scale=scale, mask=self.mask, initial_state=start)
            if self.return_state:
                self.state["recurrent"] = state
            return out.to(self.dtype)
        op = delta_rule if delta else gated_linear_attention
        out = self.keep("recurrent", op(
            *inputs, causal=layer.causal, scale=scale, mask=self.mask, backend=layer.backend_used,
            initial_state=start, return_state=self.return_state))
        return out.to(self.dtype)

    def kernel_sums(self, key: str, attention: nn.Module, q: Tensor, k: Tensor, v: Tensor
                    ) -> Tensor:
        """A LinearAttention (kernel-map sums) carrying its sums as key_kv and key_z. Its
        stabiliser `top` is not carried: a map without log-scales leaves it at the lowest
        float."""
        start = None
        if f"{key}_kv" in self.carried:
            kv = self.carried[f"{key}_kv"]
            top = kv.new_full(kv.shape[:2], lowest(kv.dtype))
            start = LinearAttentionState(kv, self.carried[f"{key}_z"], top, self.position,
                                         attention.state_key())
        result = attention(q, k, v, self.mask, start, self.return_state)
        if not self.return_state:
            return result
        out, state = result
        self.state[f"{key}_kv"], self.state[f"{key}_z"] = state.kv, state.z
        return out

    def window(self, key: str, attention: nn.Module, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """A SlidingWindowAttention carrying its last keys and values as key_k, key_v and its
        count of real entries as key_filled."""
        start = None
        if f"{key}_k" in self.carried:
            t = self.carried
            start = WindowState(t[f"{key}_k"], t[f"{key}_v"], t[f"{key}_filled"], self.position,
                                attention.made_by())
        result = attention(q, k, v, self.mask, start, self.return_state)
        if not self.return_state:
            return result
        out, state = result
        self.state.update({f"{key}_k": state.k, f"{key}_v": state.v,
                           f"{key}_filled": state.filled})
        return out


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
