"""W&B mode selection (online only with credentials), run-id persistence, summaries."""

from __future__ import annotations

from pathlib import Path

import pytest

from linarena.training.wandb_run import (
    METRIC_SUMMARIES,
    RUN_ID_FILE,
    choose_mode,
    location_message,
    read_or_create_run_id,
)


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No WANDB_* settings and an empty netrc; returns the netrc path."""
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", "https://api.wandb.ai")
    netrc = tmp_path / "netrc"
    netrc.write_text("")
    monkeypatch.setenv("NETRC", str(netrc))
    return netrc


def test_offline_without_credentials(no_credentials: Path) -> None:
    assert choose_mode() == "offline"


def test_online_with_an_api_key_in_the_environment(
    no_credentials: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert choose_mode() == "online"


def test_online_with_a_netrc_entry_for_the_wandb_host(no_credentials: Path) -> None:
    no_credentials.write_text(f"machine api.wandb.ai\n  login user\n  password {'x' * 40}\n")
    assert choose_mode() == "online"
    no_credentials.write_text(f"machine example.org\n  login user\n  password {'x' * 40}\n")
    assert choose_mode() == "offline"


def test_wandb_mode_in_the_environment_wins(
    no_credentials: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "online")
    assert choose_mode() == "online"
    monkeypatch.setenv("WANDB_MODE", "dryrun")
    assert choose_mode() == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert choose_mode() == "disabled"


def test_run_id_is_kept_in_the_output_folder(tmp_path: Path) -> None:
    first = read_or_create_run_id(tmp_path, write=True)
    assert (tmp_path / RUN_ID_FILE).read_text().strip() == first
    assert read_or_create_run_id(tmp_path, write=True) == first
    other = tmp_path / "other"
    assert read_or_create_run_id(other, write=False) != first
    assert not (other / RUN_ID_FILE).exists()


def test_offline_message_gives_the_sync_command() -> None:
    info = {"id": "abc", "dir": "/runs/x/wandb/offline-run-1-abc", "url": None, "mode": "offline"}
    assert location_message(info).endswith("wandb sync /runs/x/wandb/offline-run-1-abc")


def test_summaries_keep_the_best_validation_and_the_last_test_accuracy() -> None:
    assert METRIC_SUMMARIES["val/acc"] == "max"
    assert METRIC_SUMMARIES["test/acc"] == "last"
