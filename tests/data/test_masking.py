"""Self-pretraining's inputs and targets (linarena.data.masking): masks are seeded, drawn from the
real tokens only at the configured fraction, and next-token targets name the next real token."""

from __future__ import annotations

import math

import torch

from linarena.data.batching import IGNORE_INDEX, PAD_ID
from linarena.data.masking import mask_generator, mask_tokens, next_token_targets

MASK_ID = 50


def padded_batch(rows: int = 64, length: int = 40, vocab: int = 50,
                 seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens in [1, vocab) right-padded to random lengths 1..length, and their mask."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(1, vocab, (rows, length), generator=generator)
    lengths = torch.randint(1, length + 1, (rows, 1), generator=generator)
    real = torch.arange(length) < lengths
    return tokens.masked_fill(~real, PAD_ID), real


def test_masks_are_seeded_by_seed_split_and_step() -> None:
    tokens, real = padded_batch()

    def masked(seed: int, split: str, step: int) -> torch.Tensor:
        return mask_tokens(tokens, real, 0.3, MASK_ID, mask_generator(seed, split, step))[0]

    assert torch.equal(masked(1, "train", 7), masked(1, "train", 7))
    for other in (masked(2, "train", 7), masked(1, "val", 7), masked(1, "train", 8)):
        assert not torch.equal(masked(1, "train", 7), other)


def test_only_real_tokens_are_masked_and_scored() -> None:
    tokens, real = padded_batch()
    inputs, targets = mask_tokens(tokens, real, 0.5, MASK_ID, mask_generator(0, "train", 0))
    chosen = inputs == MASK_ID
    assert chosen.any() and not (chosen & ~real).any()
    assert torch.equal(inputs[~real], tokens[~real])  # padding stays padding
    assert torch.equal(inputs[~chosen], tokens[~chosen])
    # Targets: the original token's class where masked, nothing elsewhere (padding included).
    assert torch.equal(targets[chosen], tokens[chosen] - 1)
    assert (targets[~chosen] == IGNORE_INDEX).all()


def test_the_masked_share_of_real_tokens_is_the_fraction() -> None:
    """Each real token is masked independently with probability p: the count over n real tokens
    is Binomial(n, p), so it lies within 5 standard deviations of n p (a false alarm about once
    in 3.5 million draws)."""
    tokens, real = padded_batch(rows=400, length=100)
    n = int(real.sum())
    for fraction in (0.1, 0.15, 0.5):
        inputs, _ = mask_tokens(tokens, real, fraction, MASK_ID, mask_generator(3, "train", 1))
        count = int((inputs == MASK_ID).sum())
        tolerance = 5 * math.sqrt(n * fraction * (1 - fraction))
        assert abs(count - n * fraction) <= tolerance, (fraction, count, n)


def test_next_token_targets_name_the_next_real_token() -> None:
    tokens = torch.tensor([[5, 6, 7, 0, 0], [9, 8, 7, 6, 5]])
    real = tokens != PAD_ID
    targets = next_token_targets(tokens, real)
    no = IGNORE_INDEX
    # Classes are ids - 1; nothing after the last real token, nothing at padding.
    assert targets.tolist() == [[5, 6, no, no, no], [7, 6, 5, 4, no]]
