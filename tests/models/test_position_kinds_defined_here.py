"""Kinds of positions written in this file run the generic property tests, unedited, as the kinds
of the registry do:

- HalfRotary, a partial RoPE (GPT-NeoX's rotary_pct = 0.5): the first half of each head's
  dimensions rotated as a RoPE of that width, the other half as it is.
- BucketedBias, a T5-like bias: the distance i - j falls into a bucket (its sign, then one
  bucket per distance up to 4 and log-spaced buckets up to 32), and each head adds a value of
  its own per bucket (T5 learns them; a kind the layers share holds no parameters, so these are
  fixed).

Each kind is registered in POSITIONS (for this test only), then test_position_properties.py is
loaded by path, so that its lists of kinds include it, and every test of it that takes a `kind`
is called at each of its parametrize points for that kind.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch import Tensor

from linarena.models.positions import POSITIONS, Positions, rotary_cos_sin, rotate_pairs

PROPERTIES = Path(__file__).resolve().parent / "test_position_properties.py"


class HalfRotary(Positions):
    """q and k (batch, heads, n, head_dim): the first head_dim // 2 dimensions rotated by RoPE's
    angles for that width, p * 10000^(-2i / (head_dim // 2)); the rest left as they are."""

    rotates = True

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        cos, sin = rotary_cos_sin(positions, q.shape[-1] // 2, q.dtype)
        return rotate_pairs(q, cos, sin), rotate_pairs(k, cos, sin)


BUCKETS, EXACT, MAX_DISTANCE = 8, 4, 32  # per sign; T5's are 16, 8 and 128


def t5_bucket(distance: Tensor) -> Tensor:
    """T5's bidirectional bucket of each distance i - j (any shape, int64): BUCKETS per sign,
    distances below EXACT a bucket each, then log-spaced up to MAX_DISTANCE, the last bucket
    beyond."""
    n = distance.abs()
    spaced = EXACT + (torch.log(n.clamp(min=1).double() / EXACT) / math.log(MAX_DISTANCE / EXACT)
                      * (BUCKETS - EXACT)).long()
    within_sign = torch.where(n < EXACT, n, spaced.clamp(max=BUCKETS - 1))
    return (distance < 0).long() * BUCKETS + within_sign


class BucketedBias(Positions):
    """Head h adds values[h, t5_bucket(i - j)] to the score of query i and key j, the values
    drawn once, N(0, 1), from a fixed seed."""

    biases = True

    def score_bias(self, queries: Tensor, keys: Tensor, heads: int, dtype: torch.dtype
                   ) -> Tensor:
        values = torch.randn(heads, 2 * BUCKETS, dtype=torch.float64,
                             generator=torch.Generator().manual_seed(0))
        buckets = t5_bucket(queries[:, None] - keys[None, :]).cpu()  # (n_q, n_k)
        return values[:, buckets].to(device=queries.device, dtype=dtype)


KINDS = {"half_rope": HalfRotary, "t5_buckets": BucketedBias}


def load_properties() -> ModuleType:
    """test_position_properties.py, loaded by path under its own name (its functions unedited)."""
    spec = importlib.util.spec_from_file_location("generic_position_properties", PROPERTIES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def points(function: Callable, kind: str) -> Iterator[dict]:
    """The keyword arguments of each parametrize point of `function` at which kind == `kind`."""
    axes = []
    for mark in getattr(function, "pytestmark", []):
        if mark.name == "parametrize":
            names, values = mark.args
            names = names.split(",") if isinstance(names, str) else names
            axes.append([dict(zip(names, value if len(names) > 1 else (value,), strict=True))
                         for value in values])
    for combination in itertools.product(*axes):
        kwargs = {key: value for point in combination for key, value in point.items()}
        if kwargs.get("kind") == kind:
            yield kwargs


def test_the_bucketed_bias_is_t5s_bucketing() -> None:
    """The buckets the bias kind reads: exact near, log-spaced far, one per sign."""
    distance = torch.tensor([0, 1, 3, 4, 7, 8, 15, 16, 31, 32, 1000])
    assert t5_bucket(distance).tolist() == [0, 1, 3, 4, 5, 5, 6, 6, 7, 7, 7]
    assert t5_bucket(-distance).tolist() == [0, 9, 11, 12, 13, 13, 14, 14, 15, 15, 15]


# Tests each kind must go through, at least (so that a renamed test is noticed here).
EXPECTED = {
    "half_rope": {"test_scores_depend_only_on_the_distance",
                  "test_padding_changes_no_real_output_or_gradient",
                  "test_stepping_equals_the_whole_causal_forward",
                  "test_the_model_hands_the_kind_to_its_attention_and_padding_stays_exact"},
    "t5_buckets": {"test_scores_depend_only_on_the_distance",
                   "test_a_biased_attention_matches_the_float64_quadratic_reference",
                   "test_padding_changes_no_real_output_or_gradient",
                   "test_stepping_equals_the_whole_causal_forward",
                   "test_the_model_hands_the_kind_to_its_attention_and_padding_stays_exact",
                   "test_an_attention_without_scores_refuses_a_score_bias_in_one_line",
                   "test_a_hybrid_takes_a_score_bias_only_if_every_entry_does"},
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_kind_written_here_passes_the_generic_property_tests(kind: str, monkeypatch) -> None:
    monkeypatch.setitem(POSITIONS, kind, KINDS[kind])
    module = load_properties()
    ran = set()
    for name, function in vars(module).items():
        if not name.startswith("test_"):
            continue
        for kwargs in points(function, kind):
            try:
                function(**kwargs)
            except Exception as error:
                raise AssertionError(f"{name}({kwargs}) failed: {error}") from error
            ran.add(name)
    assert EXPECTED[kind] <= ran
