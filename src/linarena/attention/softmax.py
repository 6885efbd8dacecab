"""Exact softmax attention through PyTorch's fused scaled_dot_product_attention (flash or
memory-efficient kernels on GPU), so the quadratic baseline is the fast one."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from linarena.attention.engine.backend import check_backend
from linarena.attention.rotation import Rotation, ScoreBias, rotate_from
from linarena.attention.validation import (
    check_attention_inputs,
    check_head_dim,
    check_right_padded,
    zero_padding,
)


class ExactAttention(nn.Module):
    """What the exact attentions (softmax, sliding window) share: the checks of head_dim,
    backend and dropout, and the settings they keep. A subclass says why fla cannot serve it
    (`no_fla_kernel`) and implements forward.

    Both compute the scores q_i . k_j, so both take a score bias (model.positions=alibi):
    `takes_score_bias`, which the model asks before it passes one (models/positions/)."""

    no_fla_kernel = "fla-core has no kernel for it"
    takes_score_bias = True

    def __init__(self, head_dim: int, causal: bool = False, dropout: float = 0.0,
                 backend: str = "auto", rotary: Rotation | None = None,
                 score_bias: ScoreBias | None = None) -> None:
        super().__init__()
        name = type(self).__name__
        check_head_dim(head_dim, name)
        check_backend(backend, name, causal, self.no_fla_kernel)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"{name}: attention dropout must be in [0, 1), got {dropout}.")
        self.head_dim = head_dim
        self.causal = causal
        self.dropout = dropout
        self.backend = backend
        self.backend_used: str | None = None  # "torch" once called (see engine/backend.py)
        self.rotary = rotary
        self.score_bias = score_bias


class SoftmaxAttention(ExactAttention):
    """softmax(q k^T / sqrt(head_dim)) v.

    Args:
        head_dim: size of each head's q and k vectors.
        causal: position i attends to positions <= i only.
        dropout: dropout probability on the attention weights (after the softmax, as in LRA),
            in training mode only.
        backend: "auto" or "torch", which are the same here: PyTorch's fused kernels on every
            device (the flash or memory-efficient ones on CUDA). "fla" is refused: fla-core has
            no softmax kernel, and running SDPA under that name would make a run's record lie.
        rotary: relative positions (linarena.attention.rotation): q and k rotated by their
            positions before the scores, so that q_i . k_j depends on i - j (RoPE); None: none.
        score_bias: relative positions added to the scores before the softmax (ALiBi:
            -m_h |i - j|); None: none. SDPA takes one mask, so the bias goes in as a float
            attn_mask with -inf where a key is masked (padding, or after the query when
            causal): a (batch or 1, heads, length, length) tensor, and on CUDA the
            memory-efficient kernel rather than flash, which takes no mask. Without a bias the
            calls are the ones they were (flash stays usable).
    """

    no_fla_kernel = ("softmax always runs PyTorch's scaled_dot_product_attention (flash or "
                     "memory-efficient kernels on CUDA), fla-core has no kernel for it")

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
        """q, k, v: (batch, heads, length, head_dim); mask: bool (batch, length), True = real.

        Returns (batch, heads, length, head_dim).
        """
        check_attention_inputs(q, k, v, mask, self.head_dim, type(self).__name__)
        if self.causal and mask is not None:
            check_right_padded(mask, type(self).__name__)
        self.backend_used = "torch"
        dropout_p = self.dropout if self.training else 0.0
        # torch.where, not a product (0 * NaN is NaN); a padded query too, or its NaN would
        # reach the keys' and values' gradients through the backward pass.
        q, k, v = (zero_padding(t, mask) for t in (q, k, v))
        q, k = rotate_from(self.rotary, q, k, 0)
        if self.score_bias is not None:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=self._biased_mask(q, mask),
                                                 dropout_p=dropout_p)
        elif self.causal or mask is None:
            # Right padding: under a causal mask a real query never sees a padded key, so the
            # key mask is redundant and the flash kernel (which takes no explicit mask)
            # stays usable.
            out = F.scaled_dot_product_attention(
                q, k, v, is_causal=self.causal, dropout_p=dropout_p
            )
        else:
            key_mask = mask[:, None, None, :]  # (batch, 1, 1, length): over heads and queries
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask,
                                                 dropout_p=dropout_p)
        # PyTorch's CPU flash kernel returns zeros for a query holding NaN, where the reference
        # and every other core return NaN. 0 * (the query's sum) is 0 for a finite query and
        # NaN for one holding NaN or inf: added to its output row, on the device (no sync, and
        # ~100x cheaper on CPU than a torch.where). Summed in float32 or wider, so that a large
        # finite half-precision query does not overflow to inf.
        wide = torch.promote_types(q.dtype, torch.float32)
        return out + (q.sum(-1, keepdim=True, dtype=wide) * 0).to(out.dtype)

    def _biased_mask(self, q: Tensor, mask: Tensor | None) -> Tensor:
        """The float attn_mask of a call with a score bias, for q (batch, heads, length, .):
        (batch or 1, heads, length, length), the bias where query i may use key j and -inf
        where it may not, so that a masked key keeps weight 0 whatever its bias. The masking is
        the fast path's: causal, the causal mask alone (right padding: a real query sees no
        padded key); bidirectional, the padded keys."""
        _, heads, length, _ = q.shape
        positions = torch.arange(length, device=q.device)
        bias = self.score_bias.score_bias(positions, positions, heads, q.dtype)[None]
        if self.causal:
            allowed = positions[:, None] >= positions[None, :]  # (length, length), j <= i
        elif mask is not None:
            allowed = mask[:, None, None, :]  # (batch, 1, 1, length): over heads and queries
        else:
            return bias
        return bias.masked_fill(~allowed, -torch.inf)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, causal={self.causal}, dropout={self.dropout}"
