"""attention=swa (linarena.attention.SlidingWindowAttention): float64 equality with plain
quadratic softmax under a banded mask, both modes, padding, the full-window limit, the causal
state (step(), continued calls, RoPE offsets), memory that grows as N x window and not N^2, and
a smoke run of train.py with it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from helpers.attention import build, inputs, padding_mask
from helpers.data_fixtures import write_imdb_folder
from helpers.training import compose_config
from hydra.core.hydra_config import HydraConfig

from linarena.attention import SlidingWindowAttention
from linarena.attention.engine.linear.naive import softmax_reference
from linarena.models.positions import RotaryPositions
from linarena.training import train

# float64 softmax over at most a few dozen keys of size ~1: rounding ~1e-15; 1e-12 leaves room
# for any summation order and catches any band or mask error (which moves outputs by ~0.1).
ATOL = 1e-12


def banded_reference(q, k, v, window: int, causal: bool, mask=None):
    """softmax(q k^T / sqrt(d)) v over the band (causal: i - window < j <= i; bidirectional:
    |i - j| < window) and the real keys, as one full length x length matrix."""
    length = q.shape[2]
    distance = torch.arange(length)[:, None] - torch.arange(length)[None, :]  # i - j
    allowed = (distance >= 0) & (distance < window) if causal else distance.abs() < window
    allowed = allowed[None, None]
    if mask is not None:
        allowed = allowed & mask[:, None, None, :]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return torch.softmax(scores.masked_fill(~allowed, -math.inf), dim=-1) @ v


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [1, 4, 7, 16])
def test_matches_the_banded_quadratic_reference_with_padding(causal: bool, window: int) -> None:
    """Lengths that are not multiples of the window, windows shorter than both rows: block
    edges, the band and the key mask all matter. Padded queries' outputs are 0."""
    q, k, v = inputs(length=37)
    mask = padding_mask([37, 23], 37)
    attn = SlidingWindowAttention(16, causal, window=window)
    for m in (None, mask):
        out = attn(q, k, v, m)
        expected = banded_reference(q, k, v, window, causal, m)
        real = torch.ones_like(out, dtype=torch.bool) if m is None \
            else m[:, None, :, None].expand_as(out)
        torch.testing.assert_close(out[real], expected[real], atol=ATOL, rtol=0)
        assert (out[~real] == 0).all()


@pytest.mark.parametrize("causal", [False, True])
def test_a_window_as_long_as_the_sequence_is_full_softmax(causal: bool) -> None:
    q, k, v = inputs(length=29)
    mask = padding_mask([29, 17], 29)
    real = mask[:, None, :, None].expand(2, 3, 29, 16)
    expected = softmax_reference(q, k, v, mask, causal)
    for window in (29, 100):
        out = SlidingWindowAttention(16, causal, window=window)(q, k, v, mask)
        torch.testing.assert_close(out[real], expected[real], atol=ATOL, rtol=0)


def test_step_and_continued_calls_give_the_whole_sequence() -> None:
    q, k, v = inputs(length=30)
    attn = SlidingWindowAttention(16, causal=True, window=6)
    whole = attn(q, k, v)
    state, steps = None, []
    for t in range(30):
        out, state = attn.step(q[:, :, t], k[:, :, t], v[:, :, t], state)
        steps.append(out)
    torch.testing.assert_close(torch.stack(steps, dim=2), whole, atol=ATOL, rtol=0)
    assert state.position == 30 and state.k.shape == (2, 3, 5, 16)
    assert state.filled.tolist() == [5, 5]
    for split in (3, 13):  # shorter than the window's keys, and longer
        first, state = attn(q[:, :, :split], k[:, :, :split], v[:, :, :split],
                            return_state=True)
        rest = attn(q[:, :, split:], k[:, :, split:], v[:, :, split:], initial_state=state)
        torch.testing.assert_close(torch.cat([first, rest], dim=2), whole, atol=ATOL, rtol=0)


def test_the_state_of_a_padded_row_is_that_of_its_real_tokens() -> None:
    q, k, v = inputs(length=12)
    attn = SlidingWindowAttention(16, causal=True, window=8)
    _, padded = attn(q, k, v, padding_mask([12, 4], 12), return_state=True)
    _, alone = attn(q[1:, :, :4], k[1:, :, :4], v[1:, :, :4], return_state=True)
    for got, expected in ((padded.k[1:], alone.k), (padded.v[1:], alone.v),
                          (padded.filled[1:], alone.filled)):
        assert torch.equal(got, expected)
    assert padded.filled.tolist() == [7, 4]
    assert attn.state_size() == 2 * 7 * 16


def test_rotary_positions_rotate_from_the_states_position() -> None:
    """RoPE as softmax applies it (q, k rotated before the scores), and a continued call
    rotates its tokens at their own positions."""
    q, k, v = inputs(length=20)
    rotary = RotaryPositions(16, 64)
    attn = SlidingWindowAttention(16, causal=True, window=5, rotary=rotary)
    whole = attn(q, k, v)
    rotated_q, rotated_k = rotary.rotate(q, k, torch.arange(20))
    expected = banded_reference(rotated_q, rotated_k, v, 5, True)
    torch.testing.assert_close(whole, expected, atol=ATOL, rtol=0)
    _, state = attn(q[:, :, :9], k[:, :, :9], v[:, :, :9], return_state=True)
    rest = attn(q[:, :, 9:], k[:, :, 9:], v[:, :, 9:], initial_state=state)
    torch.testing.assert_close(rest, whole[:, :, 9:], atol=ATOL, rtol=0)


def test_a_state_of_another_window_or_mode_is_refused() -> None:
    x = torch.randn(1, 2, 16)
    _, state = SlidingWindowAttention(16, causal=True, window=4).step(x, x, x)
    with pytest.raises(ValueError, match="made by"):
        SlidingWindowAttention(16, causal=True, window=5).step(x, x, x, state)
    with pytest.raises(ValueError, match="causal"):
        SlidingWindowAttention(16, window=4)(x[:, :, None], x[:, :, None], x[:, :, None],
                                             return_state=True)
    with pytest.raises(ValueError, match="window must be a positive integer"):
        SlidingWindowAttention(16, window=0)


@pytest.mark.parametrize("causal", [False, True])
def test_memory_grows_as_length_times_window_not_length_squared(causal: bool) -> None:
    """Every tensor autograd saves for the backward pass (the scores SDPA keeps included) at
    N = 4096, window 16: none has N^2 / 16 elements (an N x N matrix would have N^2), and all of
    them together at 2N are about twice those at N."""
    attn = SlidingWindowAttention(8, causal, window=16)

    def saved_numels(length: int) -> list[int]:
        q, k, v = (t.requires_grad_(True) for t in inputs(1, 1, length, torch.float32, head_dim=8))
        numels: list[int] = []

        def pack(t: torch.Tensor) -> torch.Tensor:
            numels.append(t.numel())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            attn(q, k, v, padding_mask([length - 5], length))
        return numels

    short, long = saved_numels(4096), saved_numels(8192)
    assert max(short) < 4096**2 / 16 and max(long) < 8192**2 / 16
    assert sum(long) < 2.2 * sum(short)


def test_a_dropout_weight_mask_in_training_only() -> None:
    q, k, v = inputs(length=20)
    attn = build("swa", causal=False)
    assert attn.window == 64 and attn.dropout == 0.0
    attn = SlidingWindowAttention(16, window=4, dropout=0.5)
    assert torch.equal(attn.eval()(q, k, v), attn(q, k, v))
    assert not torch.equal(attn.train()(q, k, v), attn.eval()(q, k, v))


def test_train_py_runs_swa_on_lra_text(tmp_path: Path) -> None:
    """`python train.py attention=swa experiment=lra/text debug=smoke`, in this process, on a
    few IMDb files: a 256-byte sequence, window 64, so the band is really cut."""
    data_dir = tmp_path / "data"
    write_imdb_folder(data_dir)
    output_dir = tmp_path / "run"
    cfg = compose_config(["attention=swa", "experiment=lra/text", "debug=smoke", "logger=csv",
                          f"paths.data_dir={data_dir}", "trainer.enable_progress_bar=false"],
                         output_dir=output_dir)
    try:
        train(cfg)
    finally:
        HydraConfig.instance().cfg = None
    assert '"attention_backend": "torch"' in (output_dir / "summary.json").read_text()


@pytest.mark.parametrize("causal", [False, True])
def test_a_window_far_longer_than_the_sequence_is_the_window_of_its_length(causal: bool) -> None:
    """attention.window=2**40 on 29 tokens: nothing of the window's size is allocated (no
    hundreds of GB), the outputs those of window=29, at once."""
    q, k, v = inputs(length=29)
    mask = padding_mask([29, 17], 29)
    huge = SlidingWindowAttention(16, causal, window=2**40)
    fitted = SlidingWindowAttention(16, causal, window=29)
    for m in (None, mask):
        assert torch.equal(huge(q, k, v, m), fitted(q, k, v, m))


@pytest.mark.parametrize("causal", [False, True])
def test_an_empty_batch_gives_an_empty_output_as_softmax_does(causal: bool) -> None:
    q, k, v = inputs(batch=0, length=9)
    attn = SlidingWindowAttention(16, causal, window=4)
    out = attn(q, k, v, torch.ones(0, 9, dtype=torch.bool))
    assert out.shape == (0, 3, 9, 16) and out.shape == build("softmax", causal)(q, k, v).shape
    if causal:
        out, state = attn(q, k, v, return_state=True)
        assert out.shape == (0, 3, 9, 16) and state.k.shape == (0, 3, 3, 16)
        assert state.position == 9
