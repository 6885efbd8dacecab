"""The contributor's tour of a whole layer (linarena.attention.layers.base.AttentionLayer): an
HGRN2-like layer (Qin et al. 2024, "HGRN2: Gated Linear RNNs with State Expansion"; fla's
fla/layers/hgrn2.py) written as a contributor would, declaring only its parts: q, forget and
input projections, k = 1 - forget gate (g = logsigmoid of the forget logits), the gated linear
recurrence, a per-head RMSNorm times swish of an output gate, an output projection, and its
state's sizes. The base runs it: checks, padding, causal or bidirectional mode, step(), the
state carried in and out, the backend. It then passes every generic layer check
(tests/attention/test_layers.py GENERIC_CHECKS) with no check edited for it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from test_layers import GENERIC_CHECKS, layer_from_class
from torch import nn
from torch.nn import functional as F

from linarena.attention.layers import AttentionLayer
from linarena.attention.layers.norm import GatedRMSNorm
from linarena.attention.recurrent.core import per_head
from linarena.attention.rotation import rotate_from


class HGRN2Like(AttentionLayer):
    """o_t = S_t^T q_t, S_t = diag(f_t) S_{t-1} + (1 - f_t) i_t^T, f_t = sigmoid(x_t W_f);
    out = W_o (RMSNorm(o_t) * swish(x_t W_g)) per head."""

    fla_kernel = True  # the gated recurrence has one (recurrence = "gated", the default)

    def __init__(self, d_model, num_heads, causal, backend="auto", rotary=None):
        super().__init__(d_model, num_heads, causal, backend, rotary)
        self.head_dim = d_model // num_heads
        self.q_proj, self.f_proj, self.i_proj, self.g_proj, self.o_proj = (
            nn.Linear(d_model, d_model, bias=False) for _ in range(5))
        self.g_norm = GatedRMSNorm(self.head_dim)

    def project(self, x, call):
        q, f, i = (per_head(call.linear(x, p).to(call.dtype), self.num_heads)
                   for p in (self.q_proj, self.f_proj, self.i_proj))
        g = F.logsigmoid(f)  # log forget gate, per head and key feature
        q, k = rotate_from(self.rotary, F.silu(q), 1 - g.exp(), call.position)
        return {"q": q, "k": k, "v": i, "log_gate": g, "gate": call.linear(x, self.g_proj)}

    def output(self, o, parts, call):
        gate = parts["gate"].to(call.dtype).unflatten(-1, (self.num_heads, self.head_dim))
        return call.linear(self.g_norm(o.transpose(1, 2), gate).flatten(2), self.o_proj)

    def state_shapes(self, batch):
        d = self.head_dim
        return {"recurrent": {"batch": batch, "heads": self.num_heads, "k_dim": d, "v_dim": d}}


@pytest.mark.parametrize(("check", "causal"), GENERIC_CHECKS)
def test_the_contributors_layer_passes_every_generic_check(check: Callable, causal: bool) -> None:
    check(layer_from_class(HGRN2Like), causal)


def test_the_base_carries_and_checks_the_contributors_state() -> None:
    """The state the contributor declared (state_shapes) is carried, counted (state_size) and
    checked against a call of another batch or dtype, with nothing written for it."""
    layer = HGRN2Like(16, 2, causal=True).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    _, state = layer(x, return_state=True)
    assert set(state.tensors) == {"recurrent"} and state.position == 5
    assert layer.state_size(5) == state.tensors["recurrent"][0].numel() == 2 * 8 * 8
    with pytest.raises(ValueError, match="batch 2 != 1"):
        layer(x[:1], initial_state=state)
    with pytest.raises(ValueError, match="float64"):
        layer.float()(x[:, :1].float(), initial_state=state)
    assert layer.backend_used == "torch"
