"""Simple image cues that must not predict the Pathfinder label, and rules fitted on them.

A rule is fitted on one half of a set of images and scored on the other half: an accuracy near
0.5 means the cue carries no label information that such a rule can use. Used by the shortcut
test and by ``scripts/maintainer/pathfinder_statistics.py``.
"""

from __future__ import annotations

import numpy as np

from linarena.data.pathfinder_render import PathfinderSample


def threshold_rule_accuracy(
    train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray
) -> float:
    """Fit 'label = [x > t]' or its opposite on (train_x, train_y), all (n,); held-out accuracy."""
    cuts = np.unique(train_x)
    above = train_x[None, :] > cuts[:, None]  # (cuts, n)
    accuracy = (above == train_y[None, :].astype(bool)).mean(axis=1)
    best = int(np.argmax(np.maximum(accuracy, 1 - accuracy)))
    flip = accuracy[best] < 0.5
    predicted = (test_x > cuts[best]) != flip
    return float(np.mean(predicted == test_y.astype(bool)))


def interval_rule_accuracy(
    train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray
) -> float:
    """Fit 'label = [lo <= x <= hi]' or its opposite (bounds among 41 quantiles); held-out acc."""
    bounds = np.unique(np.quantile(train_x, np.linspace(0, 1, 41)))
    best_accuracy, best_rule = -1.0, (bounds[0], bounds[-1], False)
    for i, low in enumerate(bounds):
        for high in bounds[i:]:
            inside = (train_x >= low) & (train_x <= high)
            accuracy = float(np.mean(inside == train_y.astype(bool)))
            for flip, score in ((False, accuracy), (True, 1 - accuracy)):
                if score > best_accuracy:
                    best_accuracy, best_rule = score, (low, high, flip)
    low, high, flip = best_rule
    predicted = ((test_x >= low) & (test_x <= high)) != flip
    return float(np.mean(predicted == test_y.astype(bool)))


def pixel_shares(images: np.ndarray) -> dict[str, float]:
    """Shares of the pixels of uint8 images (n, height, width) that are non-zero ("ink"),
    faint (1 to 6: the filter's anti-aliasing tails) and above 128."""
    return {
        "ink_fraction": float(np.mean(images > 0)),
        "faint_fraction": float(np.mean((images >= 1) & (images <= 6))),
        "above_128_fraction": float(np.mean(images > 128)),
    }


def cues(samples: list[PathfinderSample]) -> dict[str, np.ndarray]:
    """Per image: the distance between the two markers (px) and the ink (non-zero pixels)."""
    return {
        "marker distance": np.array([np.linalg.norm(s.dots[0] - s.dots[1]) for s in samples]),
        "ink count": np.array([np.count_nonzero(s.image) for s in samples], dtype=float),
    }


def cue_accuracies(samples: list[PathfinderSample]) -> dict[str, float]:
    """Held-out accuracy of each rule on each cue, fitted on the first half of ``samples``.

    Returns {'<cue> threshold': accuracy, '<cue> interval': accuracy} for each cue.
    """
    labels = np.array([s.label for s in samples])
    half = len(samples) // 2
    results = {}
    for name, values in cues(samples).items():
        split = (values[:half], labels[:half], values[half:], labels[half:])
        results[f"{name} threshold"] = threshold_rule_accuracy(*split)
        results[f"{name} interval"] = interval_rule_accuracy(*split)
    return results
