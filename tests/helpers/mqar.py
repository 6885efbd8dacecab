"""A finished MQAR study run folder without training, for the study and step-budget tests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from omegaconf import OmegaConf

from helpers.training import compose_config
from linarena.studies.study import StudyPoint

PRESET = "mqar_study_cpu"
# The grid key the lr choice reads (state_size.lr_basis), for fixtures whose lr was chosen on
# seed 1 alone.
LR_ON_SEED_1 = {"lr_seeds": [1]}


def fake_run(root: Path, attention: str, d_model: int, conv: int, lr: float,
             val: float | None, test: float | None, seed: int = 1,
             overrides: Sequence[str] = ()) -> Path:
    """A finished run folder as the study writes it: the real composed config, fake metrics."""
    point = StudyPoint(d_model, conv, lr, seed)
    folder = root / point.folder_name / attention
    run_overrides = [f"experiment={PRESET}", f"attention={attention}", f"seed={seed}",
                     f"model.d_model={d_model}", f"model.short_conv={conv}", f"optim.lr={lr}",
                     *overrides]
    cfg = compose_config(run_overrides)
    (folder / ".hydra").mkdir(parents=True)
    OmegaConf.save(cfg, folder / ".hydra" / "config.yaml")
    OmegaConf.save(OmegaConf.create(run_overrides), folder / ".hydra" / "overrides.yaml")
    OmegaConf.save({"hydra": {"runtime": {"choices": {"attention": attention}}}},
                   folder / ".hydra" / "hydra.yaml")
    metrics = {"test/acc": test, "val/acc_best": val}
    # summary.json names the class: "linear" for every LinearAttention variant.
    name = "linear" if attention == "taylor" else attention
    (folder / "summary.json").write_text(json.dumps(
        {"task": "mqar", "attention": name, "seed": seed, "metrics": metrics, "global_step": 300,
         "commit": "c0ffee", "machine": {"cpu": "Test CPU", "cpu_kernels": "AVX2"}}))
    (folder / "checkpoints").mkdir()
    if val is not None:  # a diverged run (val None) has no best checkpoint
        (folder / "checkpoints" / f"best-step{200 + seed}-acc{val:.4f}.ckpt").touch()
    return folder
