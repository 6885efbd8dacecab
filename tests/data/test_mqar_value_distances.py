"""data.mqar.value_distances and scripts/maintainer/mqar_window_reach.py: how far back each
query's answer sits, which is what a sliding window must reach to recall it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from helpers.paths import load_script

from linarena.data.batching import IGNORE_INDEX
from linarena.data.mqar import generate_mqar, value_distances


def test_a_hand_made_sequence() -> None:
    # pairs (5 -> 9) (6 -> 8); the query region asks 6 at position 5 and 5 at position 7.
    tokens = np.array([[5, 9, 6, 8, 1, 6, 2, 5]])
    labels = np.full_like(tokens, IGNORE_INDEX)
    labels[0, 5], labels[0, 7] = 8, 9
    assert value_distances(tokens, labels, 2).tolist() == [[5 - 3, 7 - 1]]


def test_each_distance_points_at_the_queried_value_in_generated_sequences() -> None:
    tokens, labels = generate_mqar(300, 64, 128, 16, np.random.default_rng(3))
    distances = value_distances(tokens, labels, 16)
    queries = np.nonzero(labels != IGNORE_INDEX)[1].reshape(300, 16)
    answers = np.take_along_axis(labels, queries, axis=1)
    values = np.take_along_axis(tokens, queries - distances, axis=1)
    assert (values == answers).all() and (distances >= 1).all()
    assert distances.max() > 64  # some answers lie beyond a window of 64


def test_the_script_writes_the_share_within_each_window(tmp_path: Path) -> None:
    script = load_script("scripts/maintainer/mqar_window_reach.py")
    assert script.main(["--windows", "64", "256", "--examples", "200",
                        "--out", str(tmp_path)]) == 0
    table = pd.read_csv(tmp_path / "mqar_window_reach.csv").set_index(["length", "window"])
    assert (table.xs(256, level="window")["within_window"] == 1.0).all()  # whole sequences
    assert table.loc[(64, 64), "within_window"].min() == 1.0  # a 64-token sequence fits
    assert 0.3 < table.loc[(128, 64), "within_window"] < 0.7
    assert table.loc[(256, 64), "within_window"] < table.loc[(128, 64), "within_window"]
    assert script.main(["--preset", "mqar_cpu", "--out", str(tmp_path)]) == 2
