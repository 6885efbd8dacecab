"""TransformerClassifier: padding and holes, pooling, pair and token heads, causality, LRA
structure (qkv_dim, no attention biases, init, CLS), gradients, errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from linarena.attention import SoftmaxAttention
from linarena.attention.variants import load_variant, variant_names
from linarena.models import SequenceTooLongError, TransformerClassifier

# The model keys the variant files interpolate, as make_model sets them.
ATTENTIONS = {name: load_variant(name, {"max_length": 24, "d_model": 16, "num_heads": 2})
              for name in variant_names()}
VOCAB = 12


def make_model(attention: str = "softmax", **kwargs) -> TransformerClassifier:
    settings = {
        "vocab_size": VOCAB,
        "num_classes": 5,
        "head_kind": "sequence",
        "attention": ATTENTIONS[attention],
        "d_model": 16,
        "num_heads": 2,
        "num_layers": 2,
        "mlp_dim": 32,
        "dropout": 0.0,
        "max_length": 24,
    }
    torch.manual_seed(0)
    return TransformerClassifier(**(settings | kwargs)).eval()


def right_padded(
    lengths: list[int], total: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """tokens (batch, total) with ids in 1..VOCAB-1 then zeros, and the matching bool mask."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(1, VOCAB, (len(lengths), total), generator=generator)
    mask = torch.arange(total)[None, :] < torch.tensor(lengths)[:, None]
    return tokens * mask, mask


@pytest.mark.parametrize("attention", list(ATTENTIONS))
@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_padding_does_not_change_the_logits(attention: str, pooling: str) -> None:
    model = make_model(attention, pooling=pooling)
    tokens, mask = right_padded([7, 4], total=7)
    padded_tokens = torch.cat([tokens, torch.zeros(2, 9, dtype=torch.long)], dim=1)
    padded_mask = torch.cat([mask, torch.zeros(2, 9, dtype=torch.bool)], dim=1)
    with torch.no_grad():
        short = model(tokens, mask)
        long = model(padded_tokens, padded_mask)
    torch.testing.assert_close(long, short, rtol=1e-4, atol=1e-5)


def test_mean_pooling_ignores_the_states_at_padded_positions() -> None:
    model = make_model(pooling="mean")
    hidden = torch.randn(2, 5, 16)
    mask = torch.tensor([[True, True, False, False, False], [True] * 5])
    pooled = model.pool(hidden, mask)
    torch.testing.assert_close(pooled[0], hidden[0, :2].mean(dim=0))
    torch.testing.assert_close(pooled[1], hidden[1].mean(dim=0))


def test_cls_is_a_zero_initialised_vector_at_position_zero() -> None:
    """As LRA's `cls` parameter: not a vocabulary row; it takes position 0, tokens 1 .. n."""
    model = make_model(pooling="cls", positions="learned")
    assert model.embedding.tokens.num_embeddings == VOCAB
    assert torch.equal(model.embedding.cls, torch.zeros(16))
    tokens, _ = right_padded([5], total=5)
    with torch.no_grad():
        model.embedding.cls.normal_()
        embedded = model.embedding(tokens)
    positions = model.embedding.positions.table.weight
    assert embedded.shape == (1, 6, 16)
    torch.testing.assert_close(embedded[0, 0], model.embedding.cls + positions[0])
    torch.testing.assert_close(embedded[0, 1:], model.embedding.tokens(tokens)[0] + positions[1:6])
    assert make_model(pooling="mean").embedding.cls is None


def test_pair_task_encodes_both_documents_with_one_encoder_and_combines_them() -> None:
    model = make_model(head_kind="pair", num_classes=2, pooling="mean", pair_head="nli")
    first, first_mask = right_padded([6, 3, 8], total=8, seed=1)
    second, second_mask = right_padded([2, 8, 5], total=8, seed=2)
    tokens = torch.stack([first, second], dim=1)  # (3, 2, 8)
    mask = torch.stack([first_mask, second_mask], dim=1)
    with torch.no_grad():
        logits = model(tokens, mask)
        u = model.pool(*model.encode(first, first_mask))
        v = model.pool(*model.encode(second, second_mask))
        expected = model.head.mlp(torch.cat([u, v, u * v, u - v], dim=-1))
    assert logits.shape == (3, 2)
    torch.testing.assert_close(logits, expected)
    widths = [(m.in_features, m.out_features) for m in model.head.modules()
              if isinstance(m, nn.Linear)]
    assert widths == [(4 * 16, 32), (32, 2)]


def test_lra_pair_head_pools_the_first_byte_and_classifies_u_v_with_two_hidden_layers() -> None:
    """LRA's TransformerDualEncoder: no CLS token, position 0's output, [u, v] -> Dense(mlp) -
    ReLU - Dense(mlp // 2) - ReLU - Dense(classes)."""
    model = make_model(head_kind="pair", num_classes=2, pooling="first", pair_head="lra")
    assert model.embedding.cls is None
    first, first_mask = right_padded([6, 3], total=6, seed=1)
    second, second_mask = right_padded([2, 6], total=6, seed=2)
    with torch.no_grad():
        logits = model(torch.stack([first, second], 1), torch.stack([first_mask, second_mask], 1))
        u = model.encode(first, first_mask)[0][:, 0]
        v = model.encode(second, second_mask)[0][:, 0]
        fc1, fc2, fc3 = (m for m in model.head.modules() if isinstance(m, nn.Linear))
        expected = fc3(torch.relu(fc2(torch.relu(fc1(torch.cat([u, v], dim=-1))))))
    torch.testing.assert_close(logits, expected)
    assert ([(m.in_features, m.out_features) for m in (fc1, fc2, fc3)]
            == [(32, 32), (32, 16), (16, 2)])


def test_pair_task_rejects_single_documents() -> None:
    model = make_model(head_kind="pair", num_classes=2)
    tokens, mask = right_padded([3, 4], total=4)
    with pytest.raises(ValueError, match=r"\(batch, 2, length\)"):
        model(tokens, mask)


@pytest.mark.parametrize("attention", list(ATTENTIONS))
def test_token_task_gives_per_position_logits_and_causal_mode_hides_the_future(
    attention: str,
) -> None:
    model = make_model(attention, head_kind="token", num_classes=VOCAB, causal=True)
    tokens, mask = right_padded([10, 6], total=10)
    changed = tokens.clone()
    changed[0, 7:] = (changed[0, 7:] % (VOCAB - 1)) + 1  # different real tokens after position 6
    with torch.no_grad():
        logits = model(tokens, mask)
        logits_changed = model(changed, mask)
    assert logits.shape == (2, 10, VOCAB)
    torch.testing.assert_close(logits_changed[0, :7], logits[0, :7], rtol=1e-4, atol=1e-5)
    assert not torch.allclose(logits_changed[0, 7:], logits[0, 7:])


@pytest.mark.parametrize("head_kind", ["sequence", "pair", "token"])
def test_gradients_reach_every_parameter(head_kind: str) -> None:
    pooling = "mean" if head_kind == "pair" else "cls"
    model = make_model(head_kind=head_kind, pooling=pooling).train()
    tokens, mask = right_padded([9, 5], total=9)
    if head_kind == "pair":
        tokens, mask = (torch.stack([tokens, tokens.flip(0)], 1),
                        torch.stack([mask, mask.flip(0)], 1))
    logits = model(tokens, mask)
    labels = torch.randint(0, logits.shape[-1], logits.shape[:-1])
    torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                      labels.reshape(-1)).backward()
    for name, param in model.named_parameters():
        assert param.grad is not None, name
        assert torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, name


def test_learned_positions_are_an_embedding_table() -> None:
    model = make_model(positions="learned")
    assert model.embedding.positions.table.num_embeddings == 24 + 1  # + the CLS position
    tokens, mask = right_padded([5], total=5)
    assert model(tokens, mask).shape == (1, 5)


def test_too_long_input_names_both_lengths_and_the_key() -> None:
    model = make_model()
    tokens, mask = right_padded([30], total=30)
    with pytest.raises(SequenceTooLongError, match=r"30 tokens.*model\.max_length=24"):
        model(tokens, mask)


def test_d_model_not_divisible_by_heads_is_a_clear_error() -> None:
    with pytest.raises(ValueError,
                       match=r"model\.d_model=18 must be divisible by model\.num_heads=4"):
        make_model(d_model=18, num_heads=4)


def test_causal_with_cls_pooling_is_refused() -> None:
    with pytest.raises(ValueError, match=r"model\.pooling=mean"):
        make_model(causal=True, pooling="cls")
    assert make_model(causal=True, pooling="mean").uses_cls is False


def holes_mask(total: int) -> torch.Tensor:
    """(2, total) masks with interior holes (as black pixels give), not right padding."""
    mask = torch.ones(2, total, dtype=torch.bool)
    mask[0, [1, 2, 5, 9, 10, 11, 12]] = False
    mask[1, ::3] = False
    mask[1, -1] = True
    return mask


@pytest.mark.parametrize("attention", list(ATTENTIONS))
@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_tokens_in_the_holes_of_a_mask_do_not_change_the_logits(
    attention: str, pooling: str
) -> None:
    model = make_model(attention, pooling=pooling)
    mask = holes_mask(16)
    tokens = torch.randint(1, VOCAB, (2, 16), generator=torch.Generator().manual_seed(3))
    other = torch.where(mask, tokens, (tokens % (VOCAB - 1)) + 1)  # new tokens in the holes
    with torch.no_grad():
        torch.testing.assert_close(model(other, mask), model(tokens, mask), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attention", ["softmax", "elu", "performer"])
def test_attention_with_holes_equals_attention_on_the_real_tokens_alone(attention: str) -> None:
    """Variants without positions: a holed sequence gives, at its real positions, what the
    sequence of its real tokens alone gives (float64)."""
    core = ATTENTIONS[attention](head_dim=8, causal=False).double().eval()
    q, k, v = (torch.randn(2, 2, 16, 8, dtype=torch.float64) for _ in range(3))
    mask = holes_mask(16)
    out = core(q, k, v, mask=mask)
    for row in range(2):
        keep = mask[row]
        alone = core(q[row : row + 1, :, keep], k[row : row + 1, :, keep],
                     v[row : row + 1, :, keep])
        torch.testing.assert_close(out[row, :, keep], alone[0])


def test_cosformer_with_holes_matches_the_reference_with_positive_weights() -> None:
    """cosFormer keeps each token's position; M must exceed every distance between real tokens,
    or cos(pi/2 (i - j) / M) turns negative (M = the count of real tokens did, with holes)."""
    core = ATTENTIONS["cosformer"](head_dim=8, causal=False, eps=1e-12).double()
    q, k, v = (torch.randn(1, 2, 16, 8, dtype=torch.float64) for _ in range(3))
    mask = torch.zeros(1, 16, dtype=torch.bool)
    mask[0, [0, 1, 13, 14, 15]] = True  # 5 real tokens spread over 16 positions
    out = core(q, k, v, mask=mask)
    position = torch.arange(16, dtype=torch.float64)
    extent = 16  # last real position + 1
    weights = torch.relu(q) @ torch.relu(k).transpose(-1, -2)
    weights = weights * torch.cos(math.pi / 2 * (position[:, None] - position[None, :]) / extent)
    weights = weights * mask[:, None, None, :]
    expected = (weights @ v) / weights.sum(-1, keepdim=True)
    keep = mask[0]
    torch.testing.assert_close(out[..., keep, :], expected[..., keep, :])


def test_a_sequence_with_no_real_token_gives_finite_logits() -> None:
    """An all-black image with black pixels as padding: read as all real, not NaN."""
    model = make_model(pooling="mean")
    tokens = torch.zeros(1, 8, dtype=torch.long)
    logits = model(tokens, tokens > 0)
    assert torch.isfinite(logits).all()


def test_qkv_dim_sets_the_attention_width_apart_from_d_model() -> None:
    """LRA's qkv_dim: Image 128 wide with q/k/v of 64 over 8 heads (head_dim 8)."""
    model = make_model(d_model=16, qkv_dim=8, num_heads=2)
    attention = model.blocks[0].attention
    assert attention.qkv.weight.shape == (3 * 8, 16) and attention.out.weight.shape == (16, 8)
    assert attention.core.head_dim == 4
    tokens, mask = right_padded([5, 3], total=5)
    assert model(tokens, mask).shape == (2, 5)
    with pytest.raises(ValueError,
                       match=r"model\.qkv_dim=6 must be divisible by model\.num_heads=4"):
        make_model(qkv_dim=6, num_heads=4)


def test_blocks_follow_lra_no_attention_biases_xavier_init_layer_norm_eps() -> None:
    model = make_model(d_model=64, mlp_dim=128, qkv_dim=32, num_heads=4)
    block = model.blocks[0]
    assert block.attention.qkv.bias is None and block.attention.out.bias is None
    assert {m.eps for m in model.modules() if isinstance(m, nn.LayerNorm)} == {1e-6}
    q_rows = block.attention.qkv.weight[:32]  # the q projection, (qkv_dim, d_model)
    for weight, fan_sum in ((q_rows, 32 + 64), (block.mlp.fc1.weight, 64 + 128)):
        bound = math.sqrt(6 / fan_sum)  # xavier-uniform
        assert weight.abs().max() <= bound
        assert weight.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.1)
    assert block.mlp.fc1.bias.abs().max() < 1e-4  # N(0, 1e-6)


def test_softmax_attention_dropout_is_on_the_weights_in_training_only() -> None:
    core = SoftmaxAttention(head_dim=4, dropout=0.5)
    q, k, v = (torch.randn(1, 1, 6, 4) for _ in range(3))
    v = torch.ones_like(v)  # without dropout every output is exactly 1
    core.eval()
    torch.testing.assert_close(core(q, k, v), torch.ones(1, 1, 6, 4))
    core.train()
    torch.manual_seed(0)
    dropped = core(q, k, v)
    # rows are sums of kept weights / 0.5: no longer all 1, yet 1 on average over many draws
    assert not torch.allclose(dropped, torch.ones_like(dropped))
    torch.manual_seed(0)
    mean = torch.stack([core(q, k, v) for _ in range(400)]).mean()
    assert mean.item() == pytest.approx(1.0, abs=0.05)
