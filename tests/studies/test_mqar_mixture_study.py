"""The MQAR mixture as a study (linarena.studies.mixture_study): its grid (positions none and
rope, seeds, more seeds where they split), one folder per (positions, seed) and attention,
layers with their own convolutions run without the preset's, resumable like every study."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from linarena.studies.mixture import split_rows
from linarena.studies.mixture_study import MixturePoint, load_mixture_grid, own_conv_entries
from linarena.studies.study import missing

PRESET = "mqar_mixture_cpu"


def test_the_grid_is_positions_none_and_rope_five_seeds_ten_where_split() -> None:
    grid = load_mixture_grid(PRESET)
    assert grid == {"positions": ["none", "rope"], "seeds": [1, 2, 3, 4, 5],
                    "more_seeds": [6, 7, 8, 9, 10]}
    with pytest.raises(ValueError, match="no `study:` block with positions and seeds"):
        load_mixture_grid("mqar_cpu")
    with pytest.raises(ValueError, match=r"more_seeds=\[5\] repeats"):
        load_mixture_grid(PRESET, ["study.more_seeds=[5]"])


def test_a_point_trains_its_attentions_with_its_positions_into_their_folders(tmp_path: Path
                                                                            ) -> None:
    point = MixturePoint("rope", 3)
    names = ["elu", "deltanet_layer"]
    plain, layer = point.commands(PRESET, names, tmp_path, own_conv_entries(names))
    assert {f"experiment={PRESET}", "attention=elu", "model.positions=rope", "seed=3",
            f"hydra.sweep.dir={tmp_path / 'rope_seed3'}"} <= set(plain)
    # The layer owns its convolutions: the preset's short conv 3 would be a second one.
    assert {"attention=deltanet_layer", "model.short_conv=0"} <= set(layer)
    assert "model.short_conv=0" not in plain
    (tmp_path / "rope_seed3" / "elu").mkdir(parents=True)
    (tmp_path / "rope_seed3" / "elu" / "summary.json").write_text("{}")
    assert missing(point, tmp_path, names) == ["deltanet_layer"]  # resumable


def test_only_an_attention_and_positions_whose_seeds_split_gets_more_seeds() -> None:
    rows = [{"attention": "elu", "positions": "none", "length": 256, "pairs": 64, "seed": s,
             "acc": acc} for s, acc in zip(range(1, 6), (0.95, 0.2, 0.2, 0.2, 0.2), strict=True)]
    rows += [{"attention": "elu", "positions": "rope", "length": 256, "pairs": 64, "seed": s,
              "acc": 0.2} for s in range(1, 6)]
    rows += [{"attention": "elu", "positions": "rope", "length": 256, "pairs": 64, "seed": 6,
              "acc": 0.99}]  # a later seed does not make the first five split
    assert split_rows(pd.DataFrame(rows), [1, 2, 3, 4, 5]) == {("elu", "none")}
