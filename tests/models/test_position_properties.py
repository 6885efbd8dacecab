"""Properties every relative kind of model.positions (one that rotates q and k, or biases the
attention scores) must have, generic over the registry, so that a new kind is tested unedited
(test_position_kinds_defined_here.py runs these tests on kinds written there): its scores depend
on the distance i - j only; padding (NaN included) changes no real output or gradient; step()
continues the whole causal forward; and, in every attention that takes it, it matches a float64
reference written here from the formulas. Plus ALiBi's own: the paper's slopes and bias, and
the one-line refusal of every attention that computes no scores."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from helpers.attention import (
    LAYER_VARIANTS,
    VARIANTS,
    TokenFromQ,
    assert_close_float64,
    inputs,
    padding_mask,
)
from helpers.training import compose_config
from torch import Tensor, nn

from linarena.attention.layers.base import attention_target, takes_score_bias
from linarena.attention.variants import load_variant, variant_names
from linarena.models import TransformerClassifier
from linarena.models.positions import (
    POSITIONS,
    SCORE_BIAS_ATTENTIONS,
    Positions,
    ScoreBiasRefusedError,
    alibi_slopes,
    build_positions,
)
from linarena.training.config_checks import check_config

RELATIVE = [kind for kind, cls in POSITIONS.items() if cls.rotates or cls.biases]
HEADS, HEAD_DIM, WINDOW = 3, 16, 7  # WINDOW: small, so that a windowed core's band bites


def positions(kind: str) -> Positions:
    return build_positions(kind, HEADS * HEAD_DIM, 64)


def accepts(name: str, kind: str) -> bool:
    """Whether attention=<name> takes model.positions=<kind> (a rotation: all; a bias: the
    attentions that compute scores)."""
    return not POSITIONS[kind].biases or takes_score_bias(factory(name))


def factory(name: str):
    return load_variant(name, {"max_length": 64, "num_heads": HEADS, "d_model": HEADS * HEAD_DIM})


def build(name: str, causal: bool, kind: str) -> nn.Module:
    """The core attention=<name> builds, with the kind's object passed as the model passes it
    (rotary=, score_bias=) and a window of WINDOW keys where the core has one."""
    made = factory(name)
    options = {"window": WINDOW} if "window" in inspect.signature(
        attention_target(made)).parameters else {}
    positions_of_kind = positions(kind)
    if positions_of_kind.rotates:
        options["rotary"] = positions_of_kind
    if positions_of_kind.biases:
        options["score_bias"] = positions_of_kind
    torch.manual_seed(0)
    attn = made(head_dim=HEAD_DIM, causal=causal, **options)
    return TokenFromQ(attn) if getattr(attn, "reads_token", False) else attn


def pairs(names: list[str]) -> list[tuple[str, str]]:
    return [(name, kind) for kind in RELATIVE for name in names if accepts(name, kind)]


def kind_scores(made: Positions, q: Tensor, k: Tensor, at: Tensor) -> Tensor:
    """Softmax's scores of q, k (batch, heads, n, d) at the positions `at` (n,) under a kind:
    q and k rotated, q . k / sqrt(d), the score bias added (the base class does neither)."""
    rotated_q, rotated_k = made.rotate(q, k, at)
    scores = rotated_q @ rotated_k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return scores + made.score_bias(at, at, q.shape[1], q.dtype)


@pytest.mark.parametrize("kind", RELATIVE)
def test_scores_depend_only_on_the_distance(kind: str) -> None:
    """The score of (i, j) equals that of (i + s, j + s), and the kind moves the scores."""
    q, k = torch.randn(2, 2, HEADS, 12, HEAD_DIM, dtype=torch.float64)
    made, at = positions(kind), torch.arange(12)
    scores = kind_scores(made, q, k, at)
    for shift in (1, 37, 1000):
        torch.testing.assert_close(kind_scores(made, q, k, at + shift), scores)
    assert not torch.allclose(scores, kind_scores(Positions(HEAD_DIM, 64), q, k, at))


def reference_slopes(heads: int) -> list[float]:
    """get_slopes of ofirpress/attention_with_linear_biases, as written there."""
    def power_of_2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]
    if math.log2(heads).is_integer():
        return power_of_2(heads)
    closest = 2 ** math.floor(math.log2(heads))
    return power_of_2(closest) + reference_slopes(2 * closest)[0::2][: heads - closest]


@pytest.mark.parametrize("heads", [1, 2, 3, 4, 5, 6, 8, 12, 16])
def test_alibi_slopes_and_bias_are_the_papers(heads: int) -> None:
    # The reference's start * start^i rounds a few times where 2^(-8h / n) rounds once: a few
    # units in the last place of float64 (2^-52 = 2.2e-16 relative) apart.
    ulps = 16 * 2.0**-52
    torch.testing.assert_close(torch.tensor(alibi_slopes(heads), dtype=torch.float64),
                               torch.tensor(reference_slopes(heads), dtype=torch.float64),
                               rtol=ulps, atol=0)
    at = torch.arange(9)
    bias = positions("alibi").score_bias(at, at, heads, torch.float64)
    distance = (at[:, None] - at[None, :]).abs().double()
    expected = torch.stack([-m * distance for m in reference_slopes(heads)])
    torch.testing.assert_close(bias, expected, rtol=ulps, atol=0)
    assert alibi_slopes(8) == [2.0 ** -h for h in range(1, 9)]  # the paper's 1/2 .. 1/256


def reference_bias(kind: str, length: int, heads: int) -> Tensor:
    """The bias a kind adds to the scores in float64: ALiBi's written from its paper (-m_h
    |i - j|, the slopes of the reference code); another kind's as it computes it in float64
    (its values are its own test's business: this checks how an attention applies a bias,
    so a new kind passes unedited); 0 for a kind that only rotates."""
    if not POSITIONS[kind].biases:
        return torch.zeros(heads, length, length, dtype=torch.float64)
    at = torch.arange(length)
    if kind != "alibi":
        return positions(kind).score_bias(at, at, heads, torch.float64)
    distance = (at[:, None] - at[None, :]).abs().double()
    return torch.stack([-m * distance for m in reference_slopes(heads)])


def biased_reference(attn: nn.Module, kind: str, q, k, v, mask) -> Tensor:
    """softmax(q' k'^T / sqrt(d) + B) v in float64, q' and k' rotated by the kind (RoPE's
    rotation is tested against its matrices in test_positions.py), B its bias, under the
    padding, causal and window masks."""
    q, k, v = q.double(), k.double(), v.double()
    batch, heads, length, _ = q.shape
    at = torch.arange(length)
    q, k = positions(kind).rotate(q, k, at)
    allowed = torch.ones(batch, 1, length, length, dtype=torch.bool)
    if mask is not None:
        allowed &= mask[:, None, None, :]
    if attn.causal:
        allowed &= at[:, None] >= at[None, :]
    if getattr(attn, "window", None) is not None:
        allowed &= (at[:, None] - at[None, :]).abs() < attn.window
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + reference_bias(kind, length,
                                                                               heads)
    return torch.softmax(scores.masked_fill(~allowed, -math.inf), dim=-1) @ v


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("name", "kind"), [pair for pair in pairs(VARIANTS)
                                            if POSITIONS[pair[1]].biases])
def test_a_biased_attention_matches_the_float64_quadratic_reference(name, kind, causal, masked):
    q, k, v = inputs(length=37, heads=HEADS, head_dim=HEAD_DIM)
    mask = padding_mask([37, 23], 37) if masked else None
    attn = build(name, causal, kind)
    out = attn(q, k, v, mask)
    expected = biased_reference(attn, kind, q, k, v, mask)
    real = mask[:, None, :, None].expand_as(out) if masked else torch.ones_like(out, dtype=bool)
    # Each output: a sum of 37 weights times values after one of 37 scores of 16 products.
    assert_close_float64(out[real], expected[real], 37 * HEAD_DIM)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("name", "kind"), pairs(VARIANTS))
def test_padding_changes_no_real_output_or_gradient(name: str, kind: str, causal: bool) -> None:
    """Each sequence of a right-padded batch gives the outputs it gives alone, unpadded; and
    padding of NaN gives the outputs of padding of zeros, bit for bit, and finite gradients
    equal to theirs."""
    attn = build(name, causal, kind)
    lengths = [19, 11]
    mask = padding_mask(lengths, 19)
    clean = [t.masked_fill(~mask[:, None, :, None], 0.0)
             for t in inputs(length=19, heads=HEADS, head_dim=HEAD_DIM)]
    poisoned = [t.masked_fill(~mask[:, None, :, None], float("nan")) for t in clean]

    def run(tensors: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        tensors = [t.detach().requires_grad_(True) for t in tensors]
        out = attn(*tensors, mask)
        out[mask[:, None, :, None].expand_as(out)].sum().backward()
        # A core may ignore an input (HGRN-like cores tie the key to the gate): zero gradient.
        return out.detach(), [torch.zeros_like(t) if t.grad is None else t.grad
                              for t in tensors]

    (expected, expected_grads), (out, grads) = run(clean), run(poisoned)
    real = mask[:, None, :, None].expand_as(out)
    assert torch.equal(out[real], expected[real])
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        assert torch.isfinite(grad).all()
        assert_close_float64(grad, expected_grad, 19 * 300)
    q, k, v = poisoned
    for b, n in enumerate(lengths):
        with torch.no_grad():
            alone = attn(q[b:b + 1, :, :n], k[b:b + 1, :, :n], v[b:b + 1, :, :n])
        assert_close_float64(out[b:b + 1, :, :n], alone, 19 * 300)


@pytest.mark.parametrize(("name", "kind"), [(name, kind) for name, kind in pairs(VARIANTS)
                                            if hasattr(attention_target(factory(name)), "step")])
def test_stepping_equals_the_whole_causal_forward(name: str, kind: str) -> None:
    """step() from the state of the first tokens, token by token, gives the forward pass's
    outputs at those positions."""
    q, k, v = inputs(length=30, heads=HEADS, head_dim=HEAD_DIM)
    attn = build(name, True, kind)
    whole = attn(q, k, v)
    _, state = attn(q[:, :, :9], k[:, :, :9], v[:, :, :9], return_state=True)
    stepped = []
    for t in range(9, 30):
        out, state = attn.step(q[:, :, t], k[:, :, t], v[:, :, t], state)
        stepped.append(out)
    assert_close_float64(torch.stack(stepped, dim=2), whole[:, :, 9:], 30 * 300)


def test_the_score_bias_attentions_are_those_that_take_it() -> None:
    """The names the refusal lists are the conf/attention/ files whose class takes a bias."""
    assert sorted(SCORE_BIAS_ATTENTIONS) == sorted(
        name for name in variant_names() if takes_score_bias(factory(name)))


def make_model(attention: str, kind: str, **kwargs) -> TransformerClassifier:
    torch.manual_seed(0)
    settings = {"vocab_size": 12, "num_classes": 5, "head_kind": "sequence", "d_model": 16,
                "num_heads": 2, "num_layers": 1, "mlp_dim": 32, "dropout": 0.0,
                "max_length": 24, "positions": kind, "pooling": "mean"}
    attention_factory = load_variant(attention, {"max_length": 24, "d_model": 16,
                                                 "num_heads": 2})
    return TransformerClassifier(attention=attention_factory, **(settings | kwargs)).eval()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("name", "kind"), pairs(VARIANTS + LAYER_VARIANTS))
def test_the_model_hands_the_kind_to_its_attention_and_padding_stays_exact(name, kind, causal):
    model = make_model(name, kind, causal=causal)
    attention = model.blocks[0].attention
    attention = getattr(attention, "core", attention)
    made = model.embedding.positions
    assert (getattr(attention, "rotary", None) is made) == made.rotates
    assert (getattr(attention, "score_bias", None) is made) == made.biases
    tokens = torch.randint(1, 12, (2, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.arange(7)[None, :] < torch.tensor([[7], [4]])
    tokens = tokens * mask
    padded = (torch.cat([tokens, torch.zeros(2, 5, dtype=torch.long)], 1),
              torch.cat([mask, torch.zeros(2, 5, dtype=torch.bool)], 1))
    with torch.no_grad():
        torch.testing.assert_close(model(*padded), model(tokens, mask), rtol=1e-4, atol=1e-5)


REFUSING = [(name, kind) for kind in RELATIVE for name in VARIANTS + LAYER_VARIANTS
            if not accepts(name, kind)]


@pytest.mark.parametrize(("name", "kind"), REFUSING)
def test_an_attention_without_scores_refuses_a_score_bias_in_one_line(name, kind) -> None:
    with pytest.raises(ScoreBiasRefusedError) as refused:
        check_config(compose_config([f"attention={name}", f"model.positions={kind}"]))
    message = str(refused.value)
    assert "\n" not in message and f"model.positions={kind}" in message
    assert all(f"attention={accepted}" in message for accepted in SCORE_BIAS_ATTENTIONS)
    with pytest.raises(ScoreBiasRefusedError, match=attention_target(factory(name)).__name__):
        make_model(name, kind)


@pytest.mark.parametrize("kind", [kind for kind in RELATIVE if POSITIONS[kind].biases])
def test_a_hybrid_takes_a_score_bias_only_if_every_entry_does(kind: str) -> None:
    check_config(compose_config([f"model.positions={kind}", "model.pattern=[softmax,swa]",
                                 "model.num_layers=2"]))
    with pytest.raises(ScoreBiasRefusedError, match=r"model\.pattern entry gated_deltanet"):
        check_config(compose_config([f"model.positions={kind}",
                                     "model.pattern=[softmax,gated_deltanet]",
                                     "model.num_layers=2"]))
