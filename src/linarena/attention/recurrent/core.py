"""RecurrentAttention: the base of the attentions whose state decays, is gated or is rewritten
by the delta rule (RetNet, GLA, Mamba-2, DeltaNet, Gated DeltaNet), on the functional ops of
linarena.attention.engine.

A variant is one subclass that says how its recurrence's inputs come from q, k, v and the token:
`recurrence(q, k, v, x)` returns the q, k, v the state sees, the log gates (<= 0) and, for the
delta rule, beta. The gates and beta are computed from the token representation x (batch,
length, d_model): a core that needs it sets the class attribute `reads_token = True`, and the
Transformer block (linarena.models.blocks.MultiHeadAttention) then calls it with the keyword
`x=`, the same input its q, k, v projections read. Nothing else in the model changes, so a new
gated variant is this one module plus one YAML file in conf/attention/.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from linarena.attention.engine import (
    delta_rule,
    delta_rule_step,
    gated_linear_attention,
    gated_linear_attention_step,
)
from linarena.attention.engine.backend import check_backend, fla_installed, runs_fla
from linarena.attention.engine.common import compute_dtype
from linarena.attention.recurrent.output_norm import EPS, OutputNorm
from linarena.attention.rotation import Rotation, rotate_from
from linarena.attention.validation import (
    check_attention_inputs,
    check_head_dim,
    check_state,
    check_state_kind,
    zero_padding,
)


class Recurrence(NamedTuple):
    """What the op gets: q, k (batch, heads, n, k_dim), v (batch, heads, n, v_dim), log_gate
    None, (batch, heads, n) or (batch, heads, n, k_dim), beta None (additive update) or
    (batch, heads, n) (delta rule), scale None (k_dim ** -0.5) or a number."""

    q: Tensor
    k: Tensor
    v: Tensor
    log_gate: Tensor | None
    beta: Tensor | None
    scale: float | None


@dataclass
class RecurrentState:
    """The state after `position` tokens: (batch, heads, k_dim, v_dim), float32 (float64 for
    float64 inputs); one column more with output_norm="denominator" (the sum of decayed keys).
    made_by names the layer kind that made it, so a state is never continued by another."""

    state: Tensor
    position: int
    made_by: str = ""


def linear(x: Tensor, layer: nn.Linear) -> Tensor:
    """layer(x) in x's dtype (float64 inputs keep float64 with float32 parameters)."""
    bias = None if layer.bias is None else layer.bias.to(x.dtype)
    return F.linear(x, layer.weight.to(x.dtype), bias)


def per_head(values: Tensor, num_heads: int) -> Tensor:
    """(batch, n, heads * m) -> (batch, heads, n, m)."""
    batch, length, width = values.shape
    return values.view(batch, length, num_heads, width // num_heads).transpose(1, 2)


def head_projection(x: Tensor, layer: nn.Linear) -> Tensor:
    """One number per head and token, x (batch, n, d_model) -> (batch, heads, n), heads =
    layer.out_features. W x^T straight into (batch, heads, n): a transposed Linear output (or an
    einsum) makes torch.compile's backward view a non-contiguous gradient, and fail."""
    return torch.matmul(layer.weight.to(x.dtype), x.transpose(1, 2))


_PLUMBING = ("backend", "rotary")  # what RecurrentAttention owns (see __init_subclass__)


class RecurrentAttention(nn.Module):
    """out_t = norm(scale * S_t^T q_t), S_t = exp(g_t) S_{t-1} + k_t v_t^T (or the delta rule);
    bidirectional: plus the same recurrence run backwards (linarena.attention.engine).

    Inputs of any floating dtype are computed in float32 (float64 stays float64) with autocast
    off; the output is cast back.

    Args:
        head_dim: size of each head's q, k and v (k_dim = v_dim = head_dim).
        causal: position i attends to positions <= i only.
        output_norm: "denominator" (divide by scale * q . (decayed sum of k), the linear
            attention normaliser; not for the delta rule, whose state is no such sum), "rms",
            "group" or "none" (linarena.attention.recurrent.output_norm).
        num_heads: heads of the per-head parameters (None: the core has none).
        d_model: the width of the token x the core reads (None: it reads none).
        backend: "auto", "torch" or "fla" (linarena.attention.engine.backend): fla-core's chunked
            kernels for causal forward calls on CUDA, in the inputs' dtype (bf16 / fp16 under
            autocast) with float32 states; "auto" takes them when fla is installed and has a
            kernel for the dtype (no float64; the delta rule's need bf16 / fp16). step() always
            runs the torch op's one-token step (engine.gated_linear_attention_step,
            engine.delta_rule_step), O(1) small ops per token.
        rotary: relative positions (linarena.attention.rotation), or None: the q and k the
            state sees (after the variant's own transforms: DeltaNet's silu and L2 norm, so its
            keys stay unit vectors) are rotated by their positions before the recurrence, as
            RetNet rotates them (its paper's xPos, without xPos's extra per-position scale).
            q_t . k_j then depends on t - j only; under GLA's gates, which differ between the
            two features of a rotated pair, the gated product does not.
    """

    reads_token = True
    # Whether recurrence() gives a beta: the delta rule's state is no sum of decayed keys.
    delta_rule = False

    def __init__(
        self, head_dim: int, causal: bool, output_norm: str = "none", num_heads: int | None = None,
        backend: str = "auto", rotary: Rotation | None = None, d_model: int | None = None,
    ) -> None:
        super().__init__()
        if output_norm == "denominator" and self.delta_rule:
            raise ValueError(f"{type(self).__name__}: output_norm=denominator divides by a sum "
                             "of decayed keys, which the delta rule's state is not; use rms, "
                             "group or none.")
        check_head_dim(head_dim, type(self).__name__)
        self.causal = causal
        self.configure(backend=backend, rotary=rotary)
        self.backend_used: str | None = None  # of the last forward call (see engine/backend.py)
        self.head_dim = head_dim
        self.num_heads = num_heads
        self.d_model = d_model
        self.output_norm = output_norm
        self.norm = OutputNorm(output_norm, head_dim)

    def __init_subclass__(cls, **kwargs) -> None:
        """The base owns `backend` and `rotary`: a core whose __init__ does not take them (it
        declares only its own parameters) is still built with them, as the model builder and the
        configs pass them (backend=..., rotary=... keywords): its __init__ runs without them, then
        configure() sets them. A core that takes them threads them itself, as before."""
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None:
            return
        parameters = inspect.signature(init).parameters
        if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            return  # **kwargs: the core passes everything on to the base
        owned = [name for name in _PLUMBING if name not in parameters]
        if not owned:
            return

        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            plumbing = {name: kwargs.pop(name) for name in owned if name in kwargs}
            init(self, *args, **kwargs)
            if plumbing:
                self.configure(**plumbing)

        # The signature a reader of the class sees (the config check's, Hydra's) takes the
        # plumbing too: a core's YAML may set backend as every shipped core's does.
        signature = inspect.signature(init)
        taken = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None)
                 for name in owned]
        __init__.__signature__ = signature.replace(
            parameters=[*signature.parameters.values(), *taken])
        cls.__init__ = __init__

    def configure(self, *, backend: str | None = None, rotary: Rotation | None = None) -> None:
        """Set the plumbing every core has, after construction or from __init__: `backend`
        ("auto", "torch" or "fla", checked against the core's causal mode and the machine) and
        `rotary` (relative positions, or None). A name not given keeps its value."""
        if backend is not None:
            check_backend(backend, type(self).__name__, self.causal, None)
            self.backend = backend
            # backend="auto": whether a call may run fla's kernels (its device and dtype say).
            self._auto_fla = backend == "auto" and self.causal and fla_installed()
        if rotary is not None or not hasattr(self, "rotary"):
            self.rotary = rotary

    def recurrence(self, q: Tensor, k: Tensor, v: Tensor, x: Tensor | None) -> Recurrence:
        """The op's inputs from q, k, v (batch, heads, n, head_dim) and x (batch, n, d_model)."""
        raise NotImplementedError

    def recurrence_inputs(self, q: Tensor, k: Tensor, v: Tensor, x: Tensor | None,
                          start: int = 0) -> Recurrence:
        """recurrence() of the tokens at positions start .. start + n - 1, its q and k rotated
        with a rotary, and a column of ones appended to v for the denominator."""
        r = self.recurrence(q, k, v, x)
        q, k = rotate_from(self.rotary, r.q, r.k, start)
        r = r._replace(q=q, k=k)
        if self.output_norm == "denominator":
            r = r._replace(v=torch.cat([r.v, torch.ones_like(r.v[..., :1])], dim=-1))
        return r

    def output(self, raw: Tensor) -> Tensor:
        """The op's output (batch, heads, n, v_dim (+1)) -> normalised (batch, heads, n, v_dim)."""
        if self.output_norm == "denominator":
            raw = raw[..., :-1] / (raw[..., -1:] + EPS)
        return self.norm(raw)

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *,
        x: Tensor | None = None, initial_state: RecurrentState | None = None,
        return_state: bool = False,
    ) -> Tensor | tuple[Tensor, RecurrentState]:
        """q, k, v: (batch, heads, length, head_dim); mask: bool (batch, length), True = real;
        x: (batch, length, d_model), the token representation (cores that read it).

        Causal mode only: `initial_state` continues a sequence from the state of its earlier
        tokens (from forward(..., return_state=True) or step()); `return_state=True` also
        returns the state after these tokens (padded ones excluded).

        Returns (batch, heads, length, head_dim), or (that, state) with return_state; length 0
        gives an empty output and the state unchanged (the op returns early).
        """
        name = type(self).__name__
        check_attention_inputs(q, k, v, mask, self.head_dim, name, v_is_head_dim=True)
        self._check_token(q, x)
        if (initial_state is not None or return_state) and not self.causal:
            raise ValueError(f"{name}: initial_state and return_state are for causal mode; "
                             "build the module with causal=True.")
        dtype = compute_dtype(q)
        if initial_state is not None:
            self._check_state(initial_state, q, dtype)
        position = 0 if initial_state is None else initial_state.position
        out_dtype = v.dtype
        use_fla = self._runs_fla(v)
        self.backend_used = "fla" if use_fla else "torch"
        with torch.autocast(device_type=q.device.type, enabled=False):
            # Zeroed before recurrence(), not only in the op: the q, k transforms, Mamba-2's
            # v * dt and the gates computed from x would carry a padded NaN into the gradients
            # of the gate parameters (and of x) through products with a zero gradient.
            q, k, v = (zero_padding(t.to(dtype), mask) for t in (q, k, v))
            x = None if x is None else zero_padding(x.to(dtype), mask)
            r = self.recurrence_inputs(q, k, v, x, position)
            if use_fla:  # fla's kernels take the inputs' own dtype and accumulate in float32
                r = r._replace(**{name: getattr(r, name).to(out_dtype)
                                  for name in ("q", "k", "v", "beta")
                                  if getattr(r, name) is not None})
            start = None if initial_state is None else initial_state.state
            result = self._op(r, mask, self.causal, start, return_state,
                              self.backend_used)
            raw, new = result if return_state else (result, None)
            out = self.output(raw.to(dtype)).to(out_dtype)
        if not return_state:
            return out
        return out, RecurrentState(new, position + q.shape[2], self._made_by())

    def step(
        self, q: Tensor, k: Tensor, v: Tensor, state: RecurrentState | None = None, *,
        x: Tensor | None = None,
    ) -> tuple[Tensor, RecurrentState]:
        """Recurrent form of causal mode: one token at a time, same outputs as forward().

        q, k, v: (batch, heads, head_dim); x: (batch, d_model); state: None for the first token,
        then the state returned by the previous call. Returns (output (batch, heads, head_dim),
        new state).
        """
        if not self.causal:
            raise RuntimeError(f"{type(self).__name__}.step() is the recurrent form of causal "
                               "attention; build the module with causal=True.")
        if q.dim() != 3 or k.shape != q.shape or v.shape[:2] != q.shape[:2]:
            raise ValueError("step() takes one token: q, k, v of shape (batch, heads, head_dim), "
                             f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}.")
        q, k, v = (t.unsqueeze(2) for t in (q, k, v))
        x = None if x is None else x.unsqueeze(1)
        check_attention_inputs(q, k, v, None, self.head_dim, type(self).__name__,
                               v_is_head_dim=True)
        self._check_token(q, x)
        dtype = compute_dtype(q)
        if state is not None:
            self._check_state(state, q, dtype)
        position = 0 if state is None else state.position
        with torch.autocast(device_type=q.device.type, enabled=False):
            r = self.recurrence_inputs(*(t.to(dtype) for t in (q, k, v)),
                                       None if x is None else x.to(dtype), position)
            raw, new = self._step(r, None if state is None else state.state)
            out = self.output(raw)
        return out[:, :, 0].to(v.dtype), RecurrentState(new, position + 1, self._made_by())

    def state_size(self) -> int:
        """Numbers of one head's recurrent state: k_dim x v_dim (plus k_dim for the
        denominator's sum of decayed keys)."""
        return self.head_dim * (self.head_dim + (self.output_norm == "denominator"))

    def _runs_fla(self, v: Tensor) -> bool:
        """Whether a forward call on v (batch, heads, n, head_dim) runs fla's kernels
        (runs_fla)."""
        return runs_fla(type(self).__name__, self.backend, self._auto_fla, v.dtype, v.device,
                            delta=self.delta_rule)

    def _op(self, r: Recurrence, mask: Tensor | None, causal: bool,
            initial_state: Tensor | None = None, return_state: bool = False,
            backend: str = "torch") -> Tensor | tuple[Tensor, Tensor]:
        options = {"causal": causal, "scale": r.scale, "mask": mask, "backend": backend,
                   "initial_state": initial_state, "return_state": return_state}
        if r.beta is None:
            return gated_linear_attention(r.q, r.k, r.v, r.log_gate, **options)
        return delta_rule(r.q, r.k, r.v, r.beta, r.log_gate, **options)

    def _step(self, r: Recurrence, state: Tensor | None) -> tuple[Tensor, Tensor]:
        """_op's one-token step in closed form, from `state` (None: zeros): (raw output
        (batch, heads, 1, v_dim), new state)."""
        options = {"scale": r.scale, "initial_state": state}
        if r.beta is None:
            return gated_linear_attention_step(r.q, r.k, r.v, r.log_gate, **options)
        return delta_rule_step(r.q, r.k, r.v, r.beta, r.log_gate, **options)

    def _made_by(self) -> str:
        return f"{type(self).__name__}(output_norm={self.output_norm}) at head_dim={self.head_dim}"

    def _check_state(self, state: RecurrentState, q: Tensor, dtype: torch.dtype) -> None:
        """Refuse a state of another layer kind, batch, head count or dtype."""
        check_state_kind(state, RecurrentState, type(self).__name__)
        expected = {"batch": q.shape[0], "heads": q.shape[1], "k_dim": self.head_dim,
                    "v_dim": self.head_dim + (self.output_norm == "denominator")}
        check_state(state.made_by, state.state, self._made_by(), expected, dtype,
                    type(self).__name__)

    def _check_token(self, q: Tensor, x: Tensor | None) -> None:
        name = type(self).__name__
        if self.num_heads is not None and q.shape[1] != self.num_heads:
            raise ValueError(f"{name}: built with num_heads={self.num_heads} but q has "
                             f"{q.shape[1]} heads.")
        if not self.reads_token:
            return
        width = "..." if self.d_model is None else self.d_model
        if (x is None or x.dim() != 3 or x.shape[:2] != (q.shape[0], q.shape[2])
                or self.d_model not in (None, x.shape[2])):
            shape = None if x is None else tuple(x.shape)
            raise ValueError(f"{name} computes its gates from the token: call it with "
                             f"x=(batch, length, d_model) = ({q.shape[0]}, {q.shape[2]}, "
                             f"{width}), got {shape}.")

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, causal={self.causal}, output_norm={self.output_norm}"
