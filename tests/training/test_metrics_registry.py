"""The metric registry (linarena.metrics) drives the writing side too: what the training module
logs and what the callbacks monitor are registry keys, so renaming or adding a metric is one entry
there, and a literal key elsewhere fails here."""

from __future__ import annotations

import re

import yaml
from helpers.training import CONF, REPO

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
