"""The inputs and targets of self-pretraining (training/pretrain.py): masked-token prediction for
bidirectional models, next-token prediction for causal ones. Only real tokens (mask True) are
ever masked or predicted; padding never is.

Targets are real token ids minus one (class c is id c + 1; id 0 is padding and never a target),
IGNORE_INDEX where nothing is predicted, so an LM head has vocab_size - 1 outputs: for the pixel
tasks, with pixel + 1 as the token, the 256 intensities.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from linarena.data.batching import IGNORE_INDEX, PAD_ID

# Which split a mask is drawn for: part of its seed, so validation masks are not training's.
SPLIT_INDEX = {"train": 0, "val": 1, "test": 2}


def mask_generator(seed: int, split: str, step: int, rank: int = 0) -> torch.Generator:
    """A CPU generator seeded from (seed, split, step, rank) alone: the masks of a step are the
    same whether the run was interrupted or not, and on any device. `step`: the optimizer step
    in training, the batch index in evaluation (the same masks at every validation)."""
    entropy = [int(seed), SPLIT_INDEX[split], int(step), int(rank)]
    state = np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint64)[0]
    return torch.Generator().manual_seed(int(state))


def token_targets(tokens: Tensor) -> Tensor:
    """The class of each token id: id - 1 (id 0, padding, gives -1; callers never score it)."""
    return tokens - 1


def mask_tokens(
    tokens: Tensor, real: Tensor, fraction: float, mask_id: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Replace each real token by `mask_id` with probability `fraction`, independently (a
    Bernoulli draw per token, as not-from-scratch's masking), drawn from `generator` (CPU).

    Args:
        tokens: (..., length) int64 token ids, PAD_ID at padding.
        real: (..., length) bool, True at real tokens.
        fraction: probability of masking a real token, in (0, 1).
        mask_id: the mask token's id (the model's vocab_size - 1 under pretrain=mlm).
        generator: the draw's source (mask_generator).

    Returns:
        inputs (..., length): tokens with the chosen real tokens replaced by mask_id;
        targets (..., length): the original token's class (token_targets) where masked,
        IGNORE_INDEX elsewhere (unmasked and padded positions).
    """
    draw = torch.rand(tokens.shape, generator=generator).to(tokens.device)
    chosen = (draw < fraction) & real
    inputs = torch.where(chosen, torch.full_like(tokens, mask_id), tokens)
    targets = torch.where(chosen, token_targets(tokens), torch.full_like(tokens, IGNORE_INDEX))
    return inputs, targets


def next_token_targets(tokens: Tensor, real: Tensor) -> Tensor:
    """The next-token targets of causal pretraining: at position i the class of token i + 1
    when both i and i + 1 are real, IGNORE_INDEX elsewhere (the last real token, padding).

    Args:
        tokens: (..., length) int64 token ids, PAD_ID at padding.
        real: (..., length) bool, True at real tokens.

    Returns:
        targets (..., length) int64.
    """
    following = torch.full_like(tokens, PAD_ID)
    following[..., :-1] = tokens[..., 1:]
    following_real = torch.zeros_like(real)
    following_real[..., :-1] = real[..., 1:]
    scored = real & following_real
    return torch.where(scored, token_targets(following), torch.full_like(tokens, IGNORE_INDEX))
