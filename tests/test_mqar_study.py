"""The MQAR state-size study: its grid and resume logic, state sizes, best-lr selection, the
report script and its figure, on a small synthetic study folder (no training)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf
from PIL import Image
from training_helpers import compose_config

from linarena.analysis.mqar_results import best_per_setting, load_study, state_size
from linarena.analysis.mqar_study import StudyPoint, load_grid, missing, plan_points, run_point

REPO_ROOT = Path(__file__).resolve().parents[1]
PRESET = "mqar_study_cpu"


def fake_run(root: Path, attention: str, d_model: int, conv: int, lr: float, val: float,
             test: float) -> Path:
    """A finished run folder as the study writes it: the real composed config, fake metrics."""
    point = StudyPoint(d_model, conv, lr)
    folder = root / point.folder_name / attention
    cfg = compose_config([f"experiment={PRESET}", f"attention={attention}",
                          f"model.d_model={d_model}", f"model.short_conv={conv}", f"optim.lr={lr}"])
    (folder / ".hydra").mkdir(parents=True)
    OmegaConf.save(cfg, folder / ".hydra" / "config.yaml")
    OmegaConf.save({"hydra": {"runtime": {"choices": {"attention": attention}}}},
                   folder / ".hydra" / "hydra.yaml")
    metrics = {"test/acc": test, "val/acc_best": val}
    # summary.json names the class: "linear" for every LinearAttention variant.
    name = "linear" if attention == "taylor" else attention
    (folder / "summary.json").write_text(json.dumps(
        {"task": "mqar", "attention": name, "seed": 1, "metrics": metrics}))
    return folder


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("study")
    fake_run(root, "elu", 16, 3, 1e-3, val=0.50, test=0.48)
    fake_run(root, "elu", 16, 3, 3e-3, val=0.90, test=0.85)  # best on validation
    fake_run(root, "elu", 16, 3, 1e-2, val=0.70, test=0.95)  # best on test: not chosen
    fake_run(root, "softmax", 16, 0, 3e-3, val=0.99, test=0.98)
    fake_run(root, "taylor", 32, 3, 3e-3, val=0.60, test=0.61)
    return root


def config_of(attention: str, d_model: int) -> dict:
    cfg = compose_config([f"experiment={PRESET}", f"attention={attention}",
                          f"model.d_model={d_model}"])
    return OmegaConf.to_container(cfg, resolve=False)


def test_state_size_counts_the_recurrent_state_or_the_kv_cache() -> None:
    layers, length = 2, 64
    # elu+1: phi has head_dim features; S (16 x 16) and z (16) per layer.
    assert state_size(config_of("elu", 16)) == (16 * 17 * layers, "recurrent")
    # Taylor with feature_dim 16: 1 + 16 + 16^2 = 273 features, whatever the width.
    assert state_size(config_of("taylor", 32)) == (273 * 33 * layers, "recurrent")
    assert state_size(config_of("softmax", 16)) == (2 * length * 16 * layers, "kv_cache")


def test_points_put_the_middle_lr_first_and_name_every_override(tmp_path: Path) -> None:
    grid = load_grid(PRESET)
    points = plan_points(grid)
    assert len(points) == len(grid["widths"]) * len(grid["short_conv"]) * len(grid["lrs"])
    middle = grid["lrs"][len(grid["lrs"]) // 2]
    first = [point.lr for point in points[: len(points) // len(grid["lrs"])]]
    assert set(first) == {middle}
    command = StudyPoint(32, 3, 3e-3).command(PRESET, ["elu", "softmax"], tmp_path)
    assert {"-m", f"experiment={PRESET}", "attention=elu,softmax", "model.d_model=32",
            "model.short_conv=3", "optim.lr=0.003"} <= set(command)


def test_finished_runs_are_skipped_and_killed_ones_redone(study: Path) -> None:
    point = StudyPoint(16, 3, 3e-3)
    assert missing(point, study, ["elu", "softmax"]) == ["softmax"]
    # Every attention finished: nothing is launched.
    assert run_point(point, PRESET, study, ["elu"], threads=1) == "done"


def test_best_lr_is_chosen_on_validation_and_the_lrs_tried_are_counted(study: Path) -> None:
    runs = load_study([study])
    assert len(runs) == 5
    best = best_per_setting(runs).set_index(["attention", "short_conv", "d_model"])
    assert best.loc[("taylor", 3, 32), "test_acc"] == 0.61  # named by the config, not the class
    elu = best.loc[("elu", 3, 16)]
    assert (elu["best_lr"], elu["test_acc"], elu["lrs_tried"]) == (3e-3, 0.85, 3)
    assert best.loc[("softmax", 0, 16), "state_kind"] == "kv_cache"


def test_report_writes_csvs_table_and_a_two_panel_figure(study: Path, tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("mqar_study", REPO_ROOT / "scripts" / "mqar_study.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "out"
    assert script.main(["--preset", PRESET, "--root", str(study), "--report-only",
                        "--out", str(out)]) == 0
    best = pd.read_csv(out / "mqar_state_size.csv")
    assert len(best) == 3 and len(pd.read_csv(out / "mqar_state_size_runs.csv")) == 5
    table = (out / "mqar_state_size.md").read_text()
    assert "PARTIAL" in table  # softmax at d16 without conv has 1 of 3 lrs
    assert "| elu+1 | 3 | 85.0 | – |" in table
    assert table.index("| softmax |") < table.index("| elu+1 |")  # registry order
    width, height = Image.open(out / "mqar_state_size.png").size
    assert width > 1.5 * height  # two panels side by side


def test_missing_study_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no summary\.json"):
        load_study([tmp_path])
    with pytest.raises(ValueError, match="no `study:` block"):
        load_grid("mqar_cpu")
