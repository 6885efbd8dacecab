"""TransformerClassifier's refusals of inputs it would otherwise read wrongly or crash on deep
inside: a mask that is not bool (an additive mask would invert the padding) and token ids
outside the vocabulary, each a one-line ValueError saying what to pass."""

from __future__ import annotations

import pytest
import torch

from linarena.attention import SoftmaxAttention
from linarena.models import TransformerClassifier

VOCAB = 12


def make_model(head_kind: str = "sequence") -> TransformerClassifier:
    torch.manual_seed(0)
    return TransformerClassifier(vocab_size=VOCAB, num_classes=3, head_kind=head_kind,
                                 attention=SoftmaxAttention, d_model=16, num_heads=2,
                                 num_layers=1, mlp_dim=16, dropout=0.0, max_length=8).eval()


@pytest.mark.parametrize("mask", [
    torch.tensor([[0.0, 0.0, 0.0, -1e9]]),  # additive: 0 keep, -1e9 pad
    torch.tensor([[1, 1, 1, 0]]),
], ids=["additive", "int"])
def test_a_mask_that_is_not_bool_is_refused(mask: torch.Tensor) -> None:
    tokens = torch.tensor([[3, 4, 5, 0]])
    with pytest.raises(ValueError, match=r"mask must be a bool tensor \(True for real tokens\), "
                                         rf"got dtype {mask.dtype}") as error:
        make_model()(tokens, mask)
    assert "mask == 0" in str(error.value) and "\n" not in str(error.value)


def test_a_pair_mask_that_is_not_bool_is_refused() -> None:
    tokens = torch.tensor([[[3, 4, 0], [5, 6, 7]]])
    with pytest.raises(ValueError, match="mask must be a bool tensor"):
        make_model("pair")(tokens, torch.ones(1, 2, 3))


@pytest.mark.parametrize("bad", [-1, VOCAB, VOCAB + 100])
def test_token_ids_outside_the_vocabulary_are_refused(bad: int) -> None:
    tokens = torch.tensor([[3, bad, 5, 0]])
    mask = torch.tensor([[True, True, True, False]])
    with pytest.raises(ValueError, match=rf"token ids must lie in \[0, {VOCAB - 1}\] \(vocab_size="
                                         rf"{VOCAB}\), got ids from {min(bad, 0)} to "
                                         rf"{max(bad, 5)}") as error:
        make_model()(tokens, mask)
    assert "\n" not in str(error.value)


def test_ids_of_the_whole_vocabulary_are_taken() -> None:
    tokens = torch.tensor([[0, 1, VOCAB - 1, 0]])
    logits = make_model()(tokens, torch.tensor([[False, True, True, False]]))
    assert logits.shape == (1, 3) and torch.isfinite(logits).all()
