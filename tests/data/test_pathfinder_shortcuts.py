"""No simple image statistic predicts the Pathfinder label: the model has to trace the contours.

A rule is fitted on one half of the images and scored on the other half. With 200 held-out
images, chance accuracy has a standard deviation of about 3.5 points, so 0.6 is about three of
them above 0.5. The original generator (Linsley et al. 2018, LRA settings) scores chance on both
cues; the generator before version 2 scored 68.5% (threshold) and 76.5% (interval) on the marker
distance here.
"""

from __future__ import annotations

import numpy as np
import pytest

from linarena.data.pathfinder_cues import (
    cue_accuracies,
    interval_rule_accuracy,
    threshold_rule_accuracy,
)
from linarena.data.pathfinder_generator import render_sample

NUM_IMAGES = 400
CHANCE_BOUND = 0.6


def test_fitted_rules_find_a_planted_cue() -> None:
    """The rules themselves work: a cue that carries the label is found on held-out data."""
    rng = np.random.default_rng(0)
    labels = rng.integers(2, size=400)
    distance = rng.normal(10, 2, size=400) + 3 * labels
    split = (distance[:200], labels[:200], distance[200:], labels[200:])
    assert threshold_rule_accuracy(*split) > 0.7
    middle = np.abs(distance - 11.5) < 1.5
    assert interval_rule_accuracy(distance[:200], middle[:200], distance[200:], middle[200:]) > 0.8


def check_no_cue(resolution: int, difficulty: str, num_images: int) -> None:
    samples = [render_sample(i, resolution, difficulty, seed=11) for i in range(num_images)]
    results = cue_accuracies(samples)
    report = ", ".join(f"{name} {accuracy:.1%}" for name, accuracy in results.items())
    assert max(results.values()) < CHANCE_BOUND, f"{resolution}px {difficulty}: {report}"


def test_marker_distance_and_ink_do_not_predict_the_label() -> None:
    check_no_cue(32, "curv_contour_length_14", NUM_IMAGES)


# Not curv_baseline: with 6 paddles, the distance between the two ends of one contour spreads
# less than the distance to the other contour's end, in the original generator as here
# (docs/pathfinder/README.md), so a fitted interval scores about 55-60% there on both.
@pytest.mark.slow
@pytest.mark.parametrize(
    ("resolution", "difficulty"), [(32, "curv_contour_length_9"), (128, "curv_contour_length_14")]
)
def test_no_cue_at_other_settings(resolution: int, difficulty: str) -> None:
    check_no_cue(resolution, difficulty, NUM_IMAGES)
