"""The card's cost section compares like with like: beside a whole layer (its own projections
included) softmax and elu+1 run inside the block's projections; beside a core, as bare cores on
q, k, v, as the published attention benchmark times them. And the crossover is the shortest
length from which the variant stays faster."""

from __future__ import annotations

import pandas as pd
import pytest

from linarena.arena.cost import build_timed, crossover, time_variants
from linarena.arena.sections import cost_section
from linarena.models.blocks import MultiHeadAttention


@pytest.mark.parametrize(("part", "timed_as"), [("hgrn2_layer", "layer"), ("gla", "core")])
def test_the_baselines_are_timed_as_the_subject_is(part: str, timed_as: str) -> None:
    times = time_variants([part], [32], heads=2, head_dim=8, repeats=1)
    assert set(times["variant"]) == {"softmax", "elu", part}
    assert (times["timed_as"] == timed_as).all() and (times["status"] == "ok").all()


def test_a_baseline_beside_a_layer_has_the_block_projections() -> None:
    module = build_timed("softmax", False, heads=2, head_dim=8, max_length=32, as_layer=True)
    assert isinstance(module, MultiHeadAttention)
    assert sum(p.numel() for p in module.parameters()) == 4 * 16 * 16  # q, k, v, out
    assert not isinstance(build_timed("softmax", False, 2, 8, 32), MultiHeadAttention)


def test_the_crossover_is_where_the_variant_stays_faster() -> None:
    rows = [("softmax", n, ms) for n, ms in [(1, 1.0), (2, 4.0), (4, 16.0), (8, 64.0)]]
    rows += [("x", n, ms) for n, ms in [(1, 3.0), (2, 3.0), (4, 20.0), (8, 40.0)]]
    times = pd.DataFrame(rows, columns=["variant", "length", "fwd_bwd_ms"]).assign(status="ok")
    assert crossover(times, "x") == 8  # faster at 2, slower at 4, faster from 8 on
    assert crossover(times.assign(fwd_bwd_ms=1.0), "x") is None


def test_the_opening_line_reads_the_longest_length_where_all_three_were_timed() -> None:
    rows = [(name, n, ms, "ok") for name, n, ms in [
        ("softmax", 1024, 10.0), ("elu", 1024, 2.0), ("x", 1024, 4.0),
        ("elu", 2048, 4.0), ("x", 2048, 8.0)]] + [("softmax", 2048, None, "skipped")]
    times = pd.DataFrame(rows, columns=["variant", "length", "fwd_bwd_ms", "status"]).assign(
        peak_memory_mb=1.0, heads=2, head_dim=8, threads=1, timed_as="core")
    _, line = cost_section(times, "x", [], causal=False)
    assert "at N=1024 softmax takes 2.5x its time and it takes 2x elu+1's" in line
