"""The metric registry (linarena.metrics) drives the writing side too: what the training module
logs and what the callbacks monitor are registry keys, so renaming or adding a metric is one entry
there, and a literal key elsewhere fails here."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
import yaml
from helpers.training import CONF, REPO

import linarena.metrics as metrics_module
from linarena.metrics import METRICS


def registry_key(key: str) -> bool:
    return any(key == m.key or (m.prefix and key.startswith(m.key)) for m in METRICS)


def test_every_monitored_metric_is_a_registry_key() -> None:
    monitors = []
    for path in (CONF / "callbacks").glob("*.yaml"):
        for node in (yaml.safe_load(path.read_text()) or {}).values():
            if isinstance(node, dict) and node.get("monitor"):
                monitors.append(node["monitor"])
    assert monitors, "no callback monitors a metric: the test would check nothing"
    assert [m for m in monitors if not registry_key(m)] == []


def test_the_training_module_logs_registry_keys_only() -> None:
    source = (REPO / "src" / "linarena" / "training" / "module.py").read_text()
    literal = re.findall(r"self\.log\(\s*f?[\"']", source)
    assert literal == [], "log with the registry's Metric.key, not a literal"
    logged = re.findall(r"self\.log\(\s*([A-Z_]+)\.key", source)
    assert {"TRAIN_LOSS", "VAL_ACC", "TEST_ACC"} <= set(logged)


def test_a_new_metric_is_its_declaration_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A contributor declares `Metric(...)` beside the others and every reader sees it: no
    second list to add it to (a metric left out of one was silently dropped)."""
    source = Path(metrics_module.__file__).read_text()
    at = source.index("# Every Metric declared above")
    added = 'TRAIN_SECONDS = Metric("perf/train_seconds", in_summary=True, measured=True)\n'
    (tmp_path / "metrics_copy.py").write_text(source[:at] + added + source[at:])
    spec = importlib.util.spec_from_file_location("metrics_copy", tmp_path / "metrics_copy.py")
    copy = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "metrics_copy", copy)  # dataclasses look their module up
    spec.loader.exec_module(copy)
    assert "perf/train_seconds" in [metric.key for metric in copy.METRICS]
    assert [m.key for m in copy.METRICS if m.key != "perf/train_seconds"] == \
        [m.key for m in metrics_module.METRICS]
