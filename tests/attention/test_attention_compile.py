"""torch.compile: every variant (cores and whole layers), both modes, traces as one graph
(fullgraph=True) and gives the eager outputs and gradients, padding included; the recurrent step
compiles too.

The tests use the aot_eager backend: it runs Dynamo's tracing and AOT autograd, which is where
compile support breaks (graph breaks, untraceable ops in a custom backward), without spending
minutes in Inductor's C++ code generation; the slow cases run Inductor itself.
"""

from __future__ import annotations

import copy

import pytest
import torch
from helpers.attention import (
    FEATURE_MAP_VARIANTS,
    HEAD_DIM,
    LAYER_VARIANTS,
    LINEAR_VARIANTS,
    VARIANTS,
    build,
    build_layer,
    inputs,
    padding_mask,
)
from torch import nn
from torch.nn import functional as F

from linarena.attention import FeatureMap, LinearAttention, PerformerAttention


def compiled_and_eager(attn, backend: str, length: int = 29):
    q, k, v = (x.float().requires_grad_(True) for x in inputs(length=length))
    mask = padding_mask([length, length - 9], length)
    results = []
    for module in (torch.compile(attn, backend=backend, fullgraph=True), attn):
        out = module(q, k, v, mask)
        # materialize_grads: a core may ignore an input (HGRN-like cores tie the key to the gate).
        grads = torch.autograd.grad((out * torch.cos(out)).sum(), (q, k, v),
                                    materialize_grads=True)
        results.append((out, *grads))
    return results


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


# Inductor generates its own kernels, whose float32 sums round differently.
TOLERANCES = {"aot_eager": {"rtol": 1e-5, "atol": 1e-6}, "inductor": {"rtol": 1e-4, "atol": 1e-5}}


@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", VARIANTS)
def test_compiled_module_is_one_graph_and_matches_eager(name, causal, backend):
    # eval(): a training module may keep a schedule out of the graph (Performer's redraws, a
    # deliberate graph break tested below), which fullgraph=True refuses.
    compiled, eager = compiled_and_eager(build(name, causal).eval(), backend=backend)
    for c, e in zip(compiled, eager, strict=True):
        torch.testing.assert_close(c, e, **TOLERANCES[backend])


class ProjectedElu(FeatureMap):
    """phi(x) = elu(x W) + 1, W (head_dim, head_dim) trainable: a learned map (Hedgehog-like),
    whose backward recomputes the map through torch.func.functional_call."""

    def num_features(self, head_dim: int) -> int:
        return head_dim

    def setup(self, head_dim: int, causal: bool) -> None:
        self.weight = nn.Parameter(torch.eye(head_dim) + 0.1 * torch.randn(head_dim, head_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.elu(x @ self.weight.to(x.dtype)) + 1


@pytest.mark.parametrize("causal", [False, True])
def test_a_learned_feature_map_compiles_as_one_graph_with_its_weight_gradient(causal):
    torch.manual_seed(0)
    attn = LinearAttention(HEAD_DIM, causal, feature_map=ProjectedElu(), chunk_size=8)
    q, k, v = (x.float().requires_grad_(True) for x in inputs(length=29))
    mask = padding_mask([29, 20], 29)
    results = []
    for module in (torch.compile(attn, backend="aot_eager", fullgraph=True), attn):
        out = module(q, k, v, mask)
        loss = (out * torch.cos(out)).sum()
        results.append((out, *torch.autograd.grad(loss, (q, k, v, attn.feature_map.weight))))
    for c, e in zip(*results, strict=True):
        torch.testing.assert_close(c, e, **TOLERANCES["aot_eager"])


@pytest.mark.parametrize("causal", [pytest.param(False, marks=pytest.mark.slow), True])
@pytest.mark.parametrize("name", LAYER_VARIANTS)
def test_a_compiled_whole_layer_is_one_graph_and_matches_eager(name, causal):
    """The whole layers (x -> x) too: their convolutions, gates, norms and recurrences trace as
    one graph (aot_eager), with eager's outputs and input gradients, padding included."""
    layer = build_layer(name, causal).eval()
    x = torch.randn(2, 29, layer.d_model, requires_grad=True)
    mask = padding_mask([29, 20], 29)
    results = []
    for module in (torch.compile(layer, backend="aot_eager", fullgraph=True), layer):
        out = module(x, mask)
        results.append((out, *torch.autograd.grad((out * torch.cos(out)).sum(), (x,))))
    for c, e in zip(*results, strict=True):
        torch.testing.assert_close(c, e, **TOLERANCES["aot_eager"])


@pytest.mark.parametrize("name", LINEAR_VARIANTS)
def test_compiled_recurrent_step_matches_eager(name):
    attn = build(name, causal=True)
    step = torch.compile(attn.step, backend="aot_eager", fullgraph=True)
    q, k, v = (x.float() for x in inputs(length=5))
    state_c = state_e = None
    for t in range(5):
        out_c, state_c = step(q[:, :, t], k[:, :, t], v[:, :, t], state_c)
        out_e, state_e = attn.step(q[:, :, t], k[:, :, t], v[:, :, t], state_e)
        torch.testing.assert_close(out_c, out_e, rtol=1e-5, atol=1e-6)


def test_compiled_training_redraws_on_schedule_without_recompiling():
    """Performer's redraw schedule is a Python counter kept out of the graph: a compiled
    training loop redraws exactly as eager does and compiles once, not once per step."""
    attn = PerformerAttention(16, num_features=32, redraw_interval=2, seed=0).train()
    eager = copy.deepcopy(attn)
    compiled = torch.compile(attn, backend="aot_eager")
    q, k, v = (x.float() for x in inputs(length=29))
    compiled(q, k, v)
    compiled(q, k, v)  # the first redraw
    with torch._dynamo.config.patch(error_on_recompile=True):
        outs = [compiled(q, k, v) for _ in range(4)]
    refs = [eager(q, k, v) for _ in range(6)][2:]
    assert attn.draws == eager.draws == 3 and attn.training_calls == 6
    assert torch.equal(attn.projection, eager.projection)
    for out, ref in zip(outs, refs, strict=True):
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", FEATURE_MAP_VARIANTS)
def test_compiled_bidirectional_kernel_takes_new_lengths_without_recompiling(name):
    """Batches padded to their own longest sequence have many lengths: after the first
    recompilation (which makes the length dynamic) one graph serves every length with the same
    number of chunks."""
    compiled = torch.compile(build(name, causal=False), backend="aot_eager")
    lengths = [29, 37, 45, 61]
    for length in lengths[:2]:
        compiled(*(x.float() for x in inputs(length=length)))
    with torch._dynamo.config.patch(error_on_recompile=True):
        for length in lengths[2:]:
            compiled(*(x.float() for x in inputs(length=length)))
