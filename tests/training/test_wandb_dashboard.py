"""scripts/wandb_dashboard.py's views, offline: every key a panel or pinned column reads is one
that training (or the benchmark upload) actually logs; the views serialise for the W&B API."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import wandb
from helpers.paths import load_script
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


# A loopback port nothing listens on (the discard port): connections are refused at once.
CLOSED_PORT_URL = "http://127.0.0.1:9"


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """scripts/wandb_dashboard.py with no W&B settings, an empty netrc and a W&B API that fails
    the test if it is called."""
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "netrc").write_text("")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))

    def no_network(*_: object, **__: object) -> None:
        raise AssertionError("the W&B API was called")

    monkeypatch.setattr(wandb, "Api", no_network)
    monkeypatch.setattr(wandb, "init", no_network)
    return load_script("scripts/wandb_dashboard.py")


def dashboard_error(script, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line of the script, which must exit 2 within seconds."""
    started = time.monotonic()
    assert script.main(["--entity", "e", "--project", "p", *argv]) == 2
    assert time.monotonic() - started < 15
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_missing_benchmarks_file_is_refused_before_the_network(
        script, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    missing = tmp_path / "nope.csv"
    assert str(missing) in dashboard_error(script, ["--benchmarks", str(missing)], capsys)
    other = str(REPO / "docs/results/benchmark_attention.csv")
    assert "not a scripts/benchmark_model.py CSV" in dashboard_error(
        script, ["--benchmarks", other], capsys)


def test_no_api_key_is_said_at_once(script, capsys: pytest.CaptureFixture[str]) -> None:
    error = dashboard_error(script, [], capsys)
    assert "API key" in error and "wandb login" in error


def test_an_unreachable_server_is_said_within_seconds(
        script, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", CLOSED_PORT_URL)
    assert "unreachable" in dashboard_error(script, [], capsys)


def test_a_server_that_does_not_answer_in_time_is_one_line(
        script, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setattr(script, "server_unreachable", lambda url: None)
    monkeypatch.setattr(script, "NETWORK_TIMEOUT_S", 1)
    monkeypatch.setattr(script, "project_tasks", lambda entity, project: time.sleep(30))
    assert "did not answer within 1 s" in dashboard_error(script, [], capsys)
