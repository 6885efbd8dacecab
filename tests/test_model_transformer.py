"""TransformerClassifier: padding, pooling, pair and token heads, causality, gradients, errors."""

from __future__ import annotations

import pytest
import torch

from linarena.attention.variants import load_variant, variant_names
from linarena.models import SequenceTooLongError, TransformerClassifier

ATTENTIONS = {name: load_variant(name, {"max_length": 24}) for name in variant_names()}
VOCAB = 12


def make_model(attention: str = "softmax", **kwargs) -> TransformerClassifier:
    settings = {
        "vocab_size": VOCAB,
        "num_classes": 5,
        "task": "sequence",
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


def right_padded(lengths: list[int], total: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
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


def test_cls_token_is_vocab_size_and_gets_its_own_embedding_row() -> None:
    model = make_model(pooling="cls")
    assert model.embedding.tokens.num_embeddings == VOCAB + 1
    assert make_model(pooling="mean").embedding.tokens.num_embeddings == VOCAB
    assert model.cls_id == VOCAB


def test_pair_task_encodes_both_documents_with_one_encoder_and_combines_them() -> None:
    model = make_model(task="pair", num_classes=2, pooling="mean")
    first, first_mask = right_padded([6, 3, 8], total=8, seed=1)
    second, second_mask = right_padded([2, 8, 5], total=8, seed=2)
    tokens = torch.stack([first, second], dim=1)  # (3, 2, 8)
    mask = torch.stack([first_mask, second_mask], dim=1)
    with torch.no_grad():
        logits = model(tokens, mask)
        u = model.pool(*model.encode(first, first_mask))
        v = model.pool(*model.encode(second, second_mask))
        expected = model.head(torch.cat([u, v, u * v, u - v], dim=-1))
    assert logits.shape == (3, 2)
    torch.testing.assert_close(logits, expected)
    assert model.head.fc1.in_features == 4 * 16


def test_pair_task_rejects_single_documents() -> None:
    model = make_model(task="pair", num_classes=2)
    tokens, mask = right_padded([3, 4], total=4)
    with pytest.raises(ValueError, match=r"\(batch, 2, length\)"):
        model(tokens, mask)


@pytest.mark.parametrize("attention", list(ATTENTIONS))
def test_token_task_gives_per_position_logits_and_causal_mode_hides_the_future(
    attention: str,
) -> None:
    model = make_model(attention, task="token", num_classes=VOCAB, causal=True)
    tokens, mask = right_padded([10, 6], total=10)
    changed = tokens.clone()
    changed[0, 7:] = (changed[0, 7:] % (VOCAB - 1)) + 1  # different real tokens after position 6
    with torch.no_grad():
        logits = model(tokens, mask)
        logits_changed = model(changed, mask)
    assert logits.shape == (2, 10, VOCAB)
    torch.testing.assert_close(logits_changed[0, :7], logits[0, :7], rtol=1e-4, atol=1e-5)
    assert not torch.allclose(logits_changed[0, 7:], logits[0, 7:])


@pytest.mark.parametrize("task", ["sequence", "pair", "token"])
def test_gradients_reach_every_parameter(task: str) -> None:
    model = make_model(task=task, pooling="mean" if task == "pair" else "cls").train()
    tokens, mask = right_padded([9, 5], total=9)
    if task == "pair":
        tokens, mask = torch.stack([tokens, tokens.flip(0)], 1), torch.stack([mask, mask.flip(0)], 1)
    logits = model(tokens, mask)
    labels = torch.randint(0, logits.shape[-1], logits.shape[:-1])
    torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)).backward()
    for name, param in model.named_parameters():
        assert param.grad is not None, name
        assert torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, name


def test_learned_positions_are_an_embedding_table() -> None:
    model = make_model(positions="learned")
    assert model.embedding.learned_positions.num_embeddings == 24 + 1  # + the CLS position
    tokens, mask = right_padded([5], total=5)
    assert model(tokens, mask).shape == (1, 5)


def test_too_long_input_names_both_lengths_and_the_key() -> None:
    model = make_model()
    tokens, mask = right_padded([30], total=30)
    with pytest.raises(SequenceTooLongError, match=r"30 tokens.*model\.max_length=24"):
        model(tokens, mask)


def test_d_model_not_divisible_by_heads_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"model\.d_model=18 must be divisible by model\.num_heads=4"):
        make_model(d_model=18, num_heads=4)


def test_causal_with_cls_pooling_is_refused() -> None:
    with pytest.raises(ValueError, match=r"model\.pooling=mean"):
        make_model(causal=True, pooling="cls")
    assert make_model(causal=True, pooling="mean").uses_cls is False
