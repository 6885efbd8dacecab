"""The card's figures label the published points readably: a label overlaps no other label nor
the text it is told to avoid where the axes leave room, stays inside the axes, and points that
coincide on the page share one label."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from linarena.arena.figures import label_points, state_size_figure, throughput_figure


def _labels(ax) -> list:
    return [text for text in ax.texts if text.get_color() == "0.4"]


def test_labels_of_nearby_points_do_not_overlap_and_avoid_the_given_text() -> None:
    figure, ax = plt.subplots(figsize=(6, 4))
    xs, ys = [1.0, 1.05, 1.1, 2.0], [10.0, 10.2, 10.4, 20.0]
    ax.scatter(xs, ys)
    ax.set_xlim(0, 3)
    ax.set_ylim(0, 30)
    subject = ax.annotate("5/5", (1.0, 10.0), xytext=(3, 2), textcoords="offset points")
    label_points(ax, xs, ys, ["first", "second", "third", "fourth"], [subject])
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    boxes = [text.get_window_extent(renderer) for text in _labels(ax)]
    assert len(boxes) == 4
    inside = ax.get_window_extent(renderer)
    for i, box in enumerate(boxes):
        assert inside.x0 <= box.x0 and box.x1 <= inside.x1
        assert inside.y0 <= box.y0 and box.y1 <= inside.y1
        assert not box.overlaps(subject.get_window_extent(renderer))
        assert not any(box.overlaps(other) for other in boxes[i + 1:])
    plt.close(figure)


def test_points_that_coincide_on_the_page_share_one_label() -> None:
    figure, ax = plt.subplots(figsize=(6, 4))
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 100)
    label_points(ax, [50.0, 50.01, 80.0], [50.0, 50.0, 20.0], ["softmax", "swa", "elu"])
    assert sorted(text.get_text() for text in _labels(ax)) == ["elu", "softmax, swa"]
    plt.close(figure)


def test_the_card_figures_are_png() -> None:
    published = pd.DataFrame({"d_model": [16, 16], "short_conv": [0, 0],
                              "state_size": [512, 1024], "median_acc": [0.2, 0.9],
                              "label": ["elu", "softmax"]})
    ours = pd.DataFrame({"d_model": [16], "short_conv": [0], "state_size": [1024],
                         "median_acc": [0.5], "successes": [2], "n_seeds": [5]})
    listops = pd.DataFrame({"tokens_per_sec": [4e3, 5e3], "mean_acc": [0.36, 0.38],
                            "std_acc": [0.01, 0.01], "label": ["elu", "softmax"]})
    runs = pd.DataFrame({"tokens_per_sec": [4.5e3, 4.6e3], "test_acc": [0.35, 0.37]})
    for png in (state_size_figure(ours, published, "subject"),
                throughput_figure(runs, listops, "subject")):
        assert png.startswith(b"\x89PNG")
