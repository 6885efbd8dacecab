"""linarena.analysis.runs is the one reader of summary.json: the studies' rows (studies.runs,
studies.mixture) take a run's fields from its RunRecord, and no module of the package parses a
summary.json of its own."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import pytest

from linarena.analysis.runs import read_run
from linarena.metrics import SCHEMA_VERSION

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "linarena"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "summary_v1.json"


def test_a_study_reads_what_a_comparison_would_refuse(tmp_path: Path) -> None:
    """A study needs accuracies only: required=False reads a summary without the comparison's
    required metrics, with the fields the study rows use."""
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(
        {"schema_version": 2, "task": "mqar_mixture", "attention": "elu", "seed": 3,
         "metrics": {"test/acc_L64_P8": 0.5, "test/acc_L32_P4": None, "val/acc_best": 0.7},
         "config": {"model": {"positions": "rope"}}, "global_step": 40, "duration_s": 12.5,
         "commit": "c0ffee", "machine": {"cpu": "Test CPU", "env": {"OMP_NUM_THREADS": "1"}}}))
    with pytest.raises(ValueError, match="test/acc"):
        read_run(path)
    record = read_run(path, required=False)
    assert (record.attention, record.seed, record.steps, record.duration_s) == ("elu", 3, 40, 12.5)
    assert record.val_acc_best == 0.7 and record.env == {"OMP_NUM_THREADS": "1"}
    assert record.config == {"model": {"positions": "rope"}} and record.positions == "rope"
    assert record.setting_accuracies[64, 8] == 0.5
    assert math.isnan(record.setting_accuracies[32, 4])


def test_every_schema_version_is_read_and_a_newer_one_refused(tmp_path: Path) -> None:
    record = read_run(FIXTURE, required=False)
    assert record.steps == json.loads(FIXTURE.read_text())["global_step"]
    assert record.config is None and record.setting_accuracies == {}
    newer = tmp_path / "summary.json"
    newer.write_text(json.dumps(json.loads(FIXTURE.read_text())
                                | {"schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(ValueError, match=f"{newer}: schema version"):
        read_run(newer, required=False)


def test_no_other_module_parses_a_summary_json() -> None:
    """No json.load(s) of a summary (an argument naming SUMMARY_FILE or a summary), but in
    analysis/runs.py and training/ (which writes it)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative == "analysis/runs.py" or relative.startswith("training/"):
            continue
        found += [f"{relative}:{node.lineno}"
                  for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                  if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr in ("load", "loads")
                  and isinstance(node.func.value, ast.Name) and node.func.value.id == "json"
                  and any(name in ast.unparse(node) for name in ("SUMMARY_FILE", "summary"))]
    assert not found, f"read summary.json with linarena.analysis.runs.read_run: {found}"
