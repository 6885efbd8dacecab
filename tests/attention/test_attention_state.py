"""The causal state across calls: a sequence split in two (the second part started from the
first's state, by forward or by step()) gives the outputs of the whole, and a state that does
not belong to the layer or the batch is refused with a message saying what differs."""

from __future__ import annotations

import pytest
import torch
from helpers.attention import (
    FEATURE_MAP_VARIANTS,
    LINEAR_VARIANTS,
    assert_close_float64,
    build,
    inputs,
    padding_mask,
)

from linarena.attention import (
    CosformerAttention,
    EluAttention,
    PerformerAttention,
    SlidingWindowAttention,
)
from linarena.attention.engine.common import lowest
from linarena.attention.recurrent import RetNetAttention


def _width(attn) -> int:
    """Products summed into one state entry per token: the feature width (head_dim + 1 for a
    recurrence, whose state may carry a denominator column)."""
    core = getattr(attn, "core", attn)
    if hasattr(core, "feature_map"):
        return core.feature_map.num_features(core.head_dim)
    return core.head_dim + 1


def _state_tensors(state) -> tuple:
    """The tensors of a LinearAttentionState (kv, z) or a RecurrentState (state)."""
    return (state.kv, state.z) if hasattr(state, "kv") else (state.state,)


@pytest.mark.parametrize("split", [13, 16])  # inside a chunk and on a chunk boundary
@pytest.mark.parametrize("name", LINEAR_VARIANTS)
def test_split_forward_with_state_equals_whole(name, split):
    q, k, v = inputs(length=30, scale=2.0)
    attn = build(name, causal=True, max_length=30, chunk_size=8)
    whole = attn(q, k, v)
    first, state = attn(q[:, :, :split], k[:, :, :split], v[:, :, :split], return_state=True)
    assert state.position == split
    second, final = attn(q[:, :, split:], k[:, :, split:], v[:, :, split:],
                         initial_state=state, return_state=True)
    assert final.position == 30
    assert_close_float64(torch.cat([first, second], dim=2), whole, 30 * _width(attn))

    stepped = []
    for t in range(split, 30):
        out, state = attn.step(q[:, :, t], k[:, :, t], v[:, :, t], state)
        stepped.append(out)
    assert_close_float64(torch.stack(stepped, dim=2), whole[:, :, split:], 30 * _width(attn))


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("name", FEATURE_MAP_VARIANTS)
def test_gradients_flow_through_the_carried_state(name, padded):
    """Training over segments backpropagates through the state: gradcheck from q, k, v to both
    segments' outputs and the final state, over several chunks with a partial last one, with and
    without padding (keys with and without weights)."""
    attn = build(name, causal=True, max_length=16, chunk_size=4, heads=1)
    mask = padding_mask([11, 7], 11) if padded else None

    def two_segments(q, k, v):
        first, state = attn(q[:, :, :5], k[:, :, :5], v[:, :, :5], return_state=True)
        second, end = attn(q[:, :, 5:], k[:, :, 5:], v[:, :, 5:], mask, initial_state=state,
                           return_state=True)
        # The state is stored relative to exp(top), a detached stabiliser (top is the lowest
        # float for maps without log-scales): compare the true sums.
        scale = torch.exp(torch.where(end.top == lowest(end.top.dtype), 0.0, end.top))
        return first, second, end.kv * scale[..., None, None], end.z * scale[..., None]

    q, k, v = (x.requires_grad_(True) for x in inputs(batch=2, heads=1, length=16))
    assert torch.autograd.gradcheck(two_segments, (q, k, v), fast_mode=True, atol=1e-7,
                                    rtol=1e-5)


@pytest.mark.parametrize("name", LINEAR_VARIANTS)
def test_returned_state_leaves_padded_tokens_out(name):
    q, k, v = inputs(batch=2, length=20)
    attn = build(name, causal=True, max_length=40)
    mask = padding_mask([20, 12], 20)
    _, padded = attn(q, k, v, mask, return_state=True)
    _, bare = attn(q[1:, :, :12], k[1:, :, :12], v[1:, :, :12], return_state=True)
    for of_padded, of_bare in zip(_state_tensors(padded), _state_tensors(bare), strict=True):
        assert_close_float64(of_padded[1:], of_bare, 20 * _width(attn))


def test_state_arguments_are_for_causal_mode():
    x = torch.randn(1, 1, 4, 8)
    with pytest.raises(ValueError, match="causal mode"):
        EluAttention(8)(x, x, x, return_state=True)


def _state(attn, batch=2, heads=1, head_dim=8):
    """The state of `attn` after one token (made by step(), as a decoding loop makes it)."""
    x = torch.randn(batch, heads, head_dim)
    return attn.step(x, x, x)[1]


STATE_FAULTS = [  # (case, how the state was made, message)
    ("another batch size", lambda: _state(EluAttention(8, causal=True), batch=1),
     r"batch 1 != 2"),
    ("another head count", lambda: _state(EluAttention(8, causal=True), heads=2),
     r"heads 2 != 1"),
    ("another feature map", lambda: _state(CosformerAttention(8, causal=True, max_length=64)),
     r"made by CosformerFeatures\(max_length=64\) at head_dim=8, this layer is EluFeatures"),
    ("another head_dim", lambda: _state(EluAttention(4, causal=True), head_dim=4),
     r"made by EluFeatures\(\) at head_dim=4, this layer is EluFeatures\(\) at head_dim=8"),
]


@pytest.mark.parametrize(("case", "make", "message"), STATE_FAULTS,
                         ids=[c[0] for c in STATE_FAULTS])
def test_step_refuses_a_state_of_another_layer_or_batch(case, make, message):
    attn = EluAttention(8, causal=True)
    x = torch.randn(2, 1, 8)
    with pytest.raises(ValueError, match=message):
        attn.step(x, x, x, make())
    with pytest.raises(ValueError, match=message):
        attn(x[:, :, None], x[:, :, None], x[:, :, None], initial_state=make())


def test_step_refuses_a_state_of_another_cosformer_m_or_performer_draw():
    x = torch.randn(2, 1, 8)
    short = _state(CosformerAttention(8, causal=True, max_length=32))
    with pytest.raises(ValueError, match=r"max_length=32.*this layer is CosformerFeatures\("
                                         r"max_length=64\)"):
        CosformerAttention(8, causal=True, max_length=64).step(x, x, x, short)
    other_seed = _state(PerformerAttention(8, causal=True, num_features=16, seed=1))
    with pytest.raises(ValueError, match=r"seed=1.*seed=2"):
        PerformerAttention(8, causal=True, num_features=16, seed=2).step(x, x, x, other_seed)


def test_one_token_continues_from_a_forward_state_in_its_dtype_only():
    attn = EluAttention(8, causal=True)
    x = torch.randn(2, 1, 3, 8)
    _, state = attn(x, x, x, return_state=True)  # float32
    x = torch.randn(2, 1, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"state is torch\.float32"):
        attn.step(x, x, x, state)


def _other_states() -> dict[str, object]:
    """A state of each kind of causal core, made by step() on (2, 1, 8) tokens."""
    return {
        "linear": _state(EluAttention(8, causal=True)),
        "recurrence": _state(RetNetAttention(8, causal=True)),
        "window": _state(SlidingWindowAttention(8, causal=True, window=4)),
    }


@pytest.mark.parametrize(("attn", "own"), [
    (EluAttention(8, causal=True), "linear"),
    (RetNetAttention(8, causal=True), "recurrence"),
    (SlidingWindowAttention(8, causal=True, window=4), "window"),
], ids=["elu", "retnet", "swa"])
def test_a_state_of_another_kind_of_core_is_refused_by_name(attn, own):
    """An elu step() given a recurrence's state (or any core another core's) says whose state it
    is and what to pass, instead of an AttributeError."""
    x = torch.randn(2, 1, 8)
    for kind, state in _other_states().items():
        if kind == own:
            continue
        with pytest.raises(ValueError, match=rf"the state is a {type(state).__name__}.*"
                                             "pass the state this layer returned"):
            attn.step(x, x, x, state)
