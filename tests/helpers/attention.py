"""Shared attention-test plumbing: the variants of conf/attention/, inputs, and the float64
references applied to a module: quadratic attention with phi from each map's own feature
function, and the token-by-token recurrence (linarena.attention.engine.gated.naive) on the
inputs a RecurrentAttention gives it.

A new file in conf/attention/ gets every generic attention test with no test edited. The
builders and references live in linarena.arena.reference, which the arena's certificate runs
too, so the tests and the certificate check the same thing.
"""

from __future__ import annotations

import torch
from torch import Tensor

from linarena.arena.reference import (  # noqa: F401 (re-exported to the tests)
    HEAD_DIM,
    HEADS,
    LAYER_HEADS,
    LAYER_WIDTH,
    UNIT_ROUNDOFF_64,
    TokenFromQ,
    build,
    build_layer,
    core,
    float64_tolerance,
    inputs,
    padding_mask,
    quadratic_reference,
    recurrence_reference,
)
from linarena.attention import LinearAttention
from linarena.attention.variants import is_layer, is_linear, variant_names

# The cores (modules on the block's q, k, v), which every generic attention test takes; the whole
# layers (x -> x, linarena.attention.layers) have their own generic tests (tests/attention/
# test_layers.py).
VARIANTS = [name for name in variant_names() if not is_layer(name)]
LAYER_VARIANTS = [name for name in variant_names() if is_layer(name)]
LINEAR_VARIANTS = [name for name in VARIANTS if is_linear(name)]
FEATURE_MAP_VARIANTS = [name for name in LINEAR_VARIANTS
                        if isinstance(build(name, causal=False), LinearAttention)]


def assert_close_float64(actual: Tensor, expected: Tensor, terms: int) -> None:
    """Two float64 computations of one quantity agree to what rounding allows
    (linarena.arena.reference.float64_tolerance: each element a sum of at most `terms`
    products)."""
    torch.testing.assert_close(actual, expected, rtol=0,
                               atol=float64_tolerance(expected, terms))
