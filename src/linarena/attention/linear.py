"""LinearAttention: one module for every kernelised variant, composed of a FeatureMap (the
variant) and the kernels (the algorithm, attention/engine/linear/), which apply the map chunk by
chunk (attention/features.py)."""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from linarena.attention.engine.backend import check_backend
from linarena.attention.engine.common import compute_dtype
from linarena.attention.engine.linear import TORCH, LinearAttentionState
from linarena.attention.feature_map import FeatureMap
from linarena.attention.features import ChunkFeatures, MapFeaturesCall
from linarena.attention.recurrent.output_norm import OutputNorm
from linarena.attention.rotation import Rotation, rotate_from
from linarena.attention.validation import (
    check_attention_inputs,
    check_head_dim,
    check_state,
    check_state_kind,
    empty_output,
    zero_padding,
)


class LinearAttention(nn.Module):
    """out_i = phi(q_i) S / (phi(q_i) . z + eps) with S = sum_j phi(k_j) v_j^T, z = sum_j phi(k_j).

    Inputs of any floating dtype are computed in float32 (float64 stays float64) with autocast
    off, so the state and the normaliser accumulate in full precision; the output is cast back.

    Args:
        head_dim: size of each head's q and k vectors.
        causal: position i attends to positions <= i only.
        feature_map: phi. The module keeps its own deep copy and calls its setup(head_dim,
            causal), so layers built from one map object (as Hydra builds a nested config
            inside a `_partial_`) never share a projection or parameters.
        eps: added to the true normaliser (whatever stabilisers the map uses); can be 0 only
            for maps whose features never all vanish.
        chunk_size: tokens per chunk of the causal algorithm (exact attention inside a chunk,
            a carried state across chunks).
        backend: "auto" or "torch": linarena's chunked kernels (attention/engine/linear/) on every
            device; "fla" is refused, fla-core has no kernel for feature maps (see
            linarena.attention.engine.backend).
        output_norm: "denominator" (the division above, only) or "rms" / "group": that
            division, then an RMS or group norm of each head's output, as the gated variants
            use (linarena.attention.recurrent.output_norm).
        rotary: relative positions (linarena.attention.rotation), or None. q and k are rotated
            by their positions before the map, not RoFormer's linear form (phi(q), phi(k)
            rotated after it in the numerator only): the kernels get numerator and denominator
            from one product with the augmented state [S | z] (and one score matrix per chunk),
            so both share one set of features; RoFormer's form needs a second set, i.e. a
            second state and score matrix, and their backward passes, in all three kernels.
            Rotating phi in both instead makes the denominator a sum of signed terms that can
            reach 0. Before the map, the denominator stays the map's own positive sum and every
            kernel is unchanged; the weights then depend on i - j only for maps that are
            functions of q . k (Based's Taylor map exactly; Performer's in expectation), not
            for elementwise maps (elu+1, relu^2, cosFormer's relu), whose q, k then also carry
            each token's absolute position. Only the components the map reads
            (FeatureMap.input_dim: Taylor's first feature_dim) are rotated, as q, k of that
            width, so they get the whole spectrum of angles, slow pairs included.
    """

    def __init__(
        self,
        head_dim: int,
        causal: bool = False,
        *,
        feature_map: FeatureMap,
        eps: float = 1e-6,
        chunk_size: int = 64,
        backend: str = "auto",
        output_norm: str = "denominator",
        rotary: Rotation | None = None,
    ) -> None:
        super().__init__()
        if output_norm == "none":
            raise ValueError("LinearAttention always divides by its denominator: output_norm "
                             "must be denominator, rms or group, got none.")
        if not isinstance(feature_map, FeatureMap):
            raise TypeError(
                "LinearAttention needs feature_map=<a linarena.attention.FeatureMap>, got "
                f"{type(feature_map).__name__}."
            )
        check_head_dim(head_dim, type(self).__name__)
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}.")
        if eps < 0:
            raise ValueError(f"eps must be >= 0, got {eps}.")
        check_backend(backend, type(self).__name__, causal,
                      "fla-core has no kernel for feature-map attention (linarena's chunked "
                      "kernels run it on every device)")
        self.backend = backend
        self.backend_used: str | None = None  # "torch" once called (see engine/backend.py)
        self.kernels = TORCH
        self.head_dim = head_dim
        self.causal = causal
        self.eps = eps
        self.chunk_size = chunk_size
        self.feature_map = copy.deepcopy(feature_map)
        self.feature_map.setup(head_dim, causal)
        # Not a registered submodule: it holds feature_map, whose parameters must appear once in
        # parameters() and state_dict(); built here, outside any compiled region (features.py).
        object.__setattr__(self, "map_call", MapFeaturesCall(self.feature_map))
        self.output_norm = OutputNorm(output_norm, head_dim)
        self.rotary = rotary
        # The components of q and k the map reads, rotated as a RoPE of that width.
        self.rotated_dim = self.feature_map.input_dim(head_dim)

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
        initial_state: LinearAttentionState | None = None, return_state: bool = False,
    ) -> Tensor | tuple[Tensor, LinearAttentionState]:
        """q, k, v: (batch, heads, length, head_dim); mask: bool (batch, length), True = real.

        Causal mode only: `initial_state` continues a sequence from the state of its earlier
        tokens (from forward(..., return_state=True) or step()), at the positions after them;
        `return_state=True` also returns the state after these tokens (padded ones excluded),
        which step() or the next segment's forward continue from.

        Returns (batch, heads, length, head_dim), or (that, state) with return_state; length 0
        gives an empty output and the state unchanged.
        """
        name = type(self).__name__
        check_attention_inputs(q, k, v, mask, self.head_dim, name)
        if (initial_state is not None or return_state) and not self.causal:
            raise ValueError(f"{name}: initial_state and return_state are for causal mode; "
                             "build the module with causal=True.")
        if self.training:
            self.feature_map.on_training_call()
        batch, _, length, _ = q.shape
        dtype = compute_dtype(q)
        if initial_state is not None:
            self._check_state(initial_state, q, v, dtype)
        start = 0 if initial_state is None else initial_state.position
        self.feature_map.check_length(start + length)
        self.backend_used = "torch"
        if length == 0:  # nothing to compute; the kernels and some maps need a token
            return self._no_tokens(q, v, dtype, initial_state, return_state)
        out_dtype = v.dtype
        with torch.autocast(device_type=q.device.type, enabled=False):
            context = self.feature_map.context(mask, batch, start + length, q.device)
            q, k, v = (zero_padding(t.to(dtype), mask) for t in (q, k, v))
            q, k = rotate_from(self.rotary, q, k, start, self.rotated_dim)
            positions = torch.arange(start, start + length, device=q.device)
            features = ChunkFeatures(self.map_call, context, positions)
            if self.causal:
                state = self._zero_state(q, v) if initial_state is None else initial_state
                out, state = self.kernels.causal(q, k, v, mask, features, self.eps,
                                                 self.chunk_size, state)
            else:
                out = self.kernels.bidirectional(q, k, v, mask, features, self.eps)
            out = self.output_norm(out)
        if return_state:
            return out.to(out_dtype), state
        return out.to(out_dtype)

    def step(
        self, q: Tensor, k: Tensor, v: Tensor, state: LinearAttentionState | None = None
    ) -> tuple[Tensor, LinearAttentionState]:
        """Recurrent form of causal mode: one token at a time, same outputs as forward().

        q, k: (batch, heads, head_dim); v: (batch, heads, head_dim); state: None for the first
        token, then the state returned by the previous call (or by forward(...,
        return_state=True)). Returns (output (batch, heads, head_dim), new state).
        """
        name = type(self).__name__
        if not self.causal:
            raise RuntimeError(
                f"{name}.step() is the recurrent form of causal attention; build the module "
                "with causal=True."
            )
        if q.dim() != 3 or k.shape != q.shape or v.dim() != 3 or v.shape[:2] != q.shape[:2]:
            raise ValueError(
                "step() takes one token: q, k, v of shape (batch, heads, head_dim), got "
                f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}."
            )
        check_attention_inputs(q[:, :, None], k[:, :, None], v[:, :, None], None,
                               self.head_dim, f"{name}.step()")
        dtype = compute_dtype(q)
        if state is not None:
            self._check_state(state, q, v, dtype)
        position = 0 if state is None else state.position
        self.feature_map.check_length(position + 1)
        out_dtype = v.dtype
        with torch.autocast(device_type=q.device.type, enabled=False):
            context = self.feature_map.context(None, q.shape[0], position + 1, q.device)
            q, k, v = (x.to(dtype)[:, :, None] for x in (q, k, v))
            q, k = rotate_from(self.rotary, q, k, position, self.rotated_dim)
            positions = torch.arange(position, position + 1, device=q.device)
            features = ChunkFeatures(self.map_call, context, positions)
            if state is None:
                state = self._zero_state(q, v)
            out, state = self.kernels.step(q, k, v, features, state, self.eps)
            out = self.output_norm(out)
        return out[:, :, 0].to(out_dtype), state

    def _no_tokens(
        self, q: Tensor, v: Tensor, dtype: torch.dtype,
        initial_state: LinearAttentionState | None, return_state: bool,
    ) -> Tensor | tuple[Tensor, LinearAttentionState]:
        """forward() of length 0: the empty output (batch, heads, 0, d_v), and with return_state
        the state unchanged (initial_state, or the state before any token)."""
        out = empty_output(v)
        if not return_state:
            return out
        if initial_state is None:
            initial_state = self._zero_state(q.to(dtype), v)
        return out, initial_state

    def state_key(self) -> str:
        """What a state of this attention records as its maker (feature map and head_dim): a
        state is continued only by an attention with the same key."""
        return f"{self.feature_map.state_key()} at head_dim={self.head_dim}"

    def _zero_state(self, like: Tensor, v: Tensor) -> LinearAttentionState:
        """The state before any token, for a batch shaped like `like` (batch, heads, ...)."""
        num_features = self.feature_map.num_features(self.head_dim)
        return LinearAttentionState.zeros(like, num_features, v.shape[-1], self.state_key())

    def _check_state(self, state: LinearAttentionState, q: Tensor, v: Tensor,
                     dtype: torch.dtype) -> None:
        check_state_kind(state, LinearAttentionState, type(self).__name__)
        expected = {"batch": q.shape[0], "heads": q.shape[1],
                    "num_features": self.feature_map.num_features(self.head_dim),
                    "value dim": v.shape[-1]}
        check_state(state.feature_map, state.kv, self.state_key(), expected, dtype,
                    type(self).__name__)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, causal={self.causal}"
