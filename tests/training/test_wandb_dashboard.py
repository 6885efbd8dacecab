"""scripts/wandb_dashboard.py's views, offline: every key a panel or pinned column reads is one
that training (or the benchmark upload) actually logs; the views serialise for the W&B API."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import wandb
from helpers.training import REPO, compose_config
from hydra.core.hydra_config import HydraConfig

from linarena.analysis import dashboard
from linarena.training import train


@pytest.fixture
def logged_by_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, set[str]]:
    """The summary and config keys of a real (tiny, offline) training's W&B run."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_home"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    seen: dict[str, set[str]] = {}
    original_finish = wandb.finish

    def inspecting_finish(*args, **kwargs):
        seen["summary"] = set(dict(wandb.run.summary))
        seen["config"] = set(dict(wandb.run.config))
        return original_finish(*args, **kwargs)

    monkeypatch.setattr(wandb, "finish", inspecting_finish)
    cfg = compose_config(["debug=smoke", f"paths.data_dir={tmp_path / 'data'}",
                          "trainer.enable_progress_bar=false"], output_dir=tmp_path / "run")
    try:
        train(cfg)
    finally:
        HydraConfig.instance().cfg = None
    return seen


def test_task_view_reads_only_keys_that_training_logs(logged_by_training) -> None:
    view = dashboard.task_view("entity", "project", "listops_small")
    keys = dashboard.panel_keys(view)
    assert {"test/acc", "perf/tokens_per_sec", "val/acc", "comparison"} <= keys
    assert keys <= logged_by_training["summary"], keys - logged_by_training["summary"]
    configs = {c.split(":", 1)[1] for c in view.runset_settings.pinned_columns
               if c.startswith("config:")}
    assert configs == {"task", "attention", "seed"} <= logged_by_training["config"]
    view._to_model()  # what save() sends; builds without network


def test_benchmark_view_reads_the_keys_the_upload_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    logged: set[str] = set()
    runs = []

    def fake_init(**kwargs):
        run = SimpleNamespace(define_metric=lambda *a, **k: None, finish=lambda: None,
                              log=lambda row: logged.update(row), kwargs=kwargs)
        runs.append(run)
        return run

    monkeypatch.setattr(wandb, "init", fake_init)
    count = dashboard.upload_benchmarks("e", "p", [REPO / "docs/results/benchmark_model.csv"])
    assert count == len(runs) > 0
    assert {run.kwargs["group"] for run in runs} == {dashboard.BENCHMARK_GROUP}
    view = dashboard.benchmark_view("e", "p")
    assert dashboard.panel_keys(view) == logged
    view._to_model()


def test_an_attention_benchmark_csv_is_refused_with_its_name() -> None:
    with pytest.raises(ValueError, match=r"not a scripts/benchmark_model\.py CSV"):
        list(dashboard.benchmark_rows(REPO / "docs/results/benchmark_attention.csv"))
