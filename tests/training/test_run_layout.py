"""The run reads straight through: following the run's config (or a node of it) from
entry.run_job, each module of linarena is entered at most twice, the check step enters no
building module and the build step no checking one (training/run.py: restore, check, build, fit,
test, summarise)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
from helpers.training import compose_config
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import linarena
from linarena.training.entry import run_job

SRC = str(Path(linarena.__file__).resolve().parent)
CHECKS = ("training/config_checks.py", "training/launch.py", "training/memory.py",
          "training/resume.py", "training/checkpoint_identity.py")
BUILDS = ("training/build.py",)


def takes_cfg(frame) -> bool:
    """Whether a call's arguments include the run's config or a node of it."""
    code = frame.f_code
    n_args = code.co_argcount + code.co_kwonlyargcount
    for name in code.co_varnames[:n_args]:
        value = frame.f_locals.get(name)
        if isinstance(value, DictConfig):
            root = value._get_root()
            if "trainer" in root and "model" in root:
                return True
    return False


def cfg_calls(cfg: DictConfig) -> list[tuple[str, str, int | None]]:
    """(module, function, index of the calling entry) of each call of linarena code that gets
    the config, in order, while run_job(cfg) runs; only calls made by such calls (or run_job)
    count, not Lightning's hooks."""
    calls: list[tuple[str, str, int | None]] = []
    active: dict[int, int] = {}

    def profile(frame, event, arg):
        code = frame.f_code
        if event == "return":
            active.pop(id(frame), None)
        elif event == "call" and code.co_filename.startswith(SRC):
            caller = frame.f_back
            parent = active.get(id(caller)) if caller is not None else None
            first = not calls and code.co_name == "run_job"
            if (first or parent is not None) and takes_cfg(frame):
                active[id(frame)] = len(calls)
                module = str(Path(code.co_filename).relative_to(SRC))
                calls.append((module, code.co_name, parent))

    sys.setprofile(profile)
    try:
        run_job(cfg)
    finally:
        sys.setprofile(None)
    return calls


# Reads of one setting, as cfg.get would be (the pretrain node is absent from the saved config of
# a run made before it existed, so it is read through these): not a step of the run.
READS = {("training/pretrain_config.py", name) for name in ("objective", "stage",
                                                             "adds_mask_token")}


def entries(calls: list[tuple[str, str, int | None]]) -> list[str]:
    """The modules entered, in order: a call from another module (or the first), reads of one
    setting (READS) left out."""
    return [module for module, function, parent in calls
            if (module, function) not in READS
            and (parent is None or calls[parent][0] != module)]


def within(calls, index: int) -> list[str]:
    """The modules of the calling chain of call `index`, innermost first."""
    chain = []
    parent = calls[index][2]
    while parent is not None:
        chain.append(calls[parent][0])
        parent = calls[parent][2]
    return chain


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def test_a_smoke_run_enters_each_module_at_most_twice_with_its_config(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    try:
        overrides = ["debug=smoke", "logger=csv", f"paths.data_dir={data_dir}",
                     "trainer.enable_progress_bar=false"]
        calls = cfg_calls(compose_config(overrides, output_dir=tmp_path / "run"))
        resumed = cfg_calls(compose_config([*overrides, "ckpt_path=last",
                                            "trainer.max_steps=6"],
                                           output_dir=tmp_path / "run"))
    finally:
        HydraConfig.instance().cfg = None
    for run in (calls, resumed):
        order = entries(run)
        # entry.run_job asks the stage dispatch (one stage or two: stages.is_two_stage, which
        # reads pretrain_config) first, then runs the one stage.
        assert order[0] == "training/entry.py" and "training/run.py" in order
        dispatch = order[1:order.index("training/run.py")]
        assert set(dispatch) <= {"training/stages.py", "training/pretrain_config.py"}, order
        assert "training/build.py" in order and "training/summary.py" in order
        twice = {module: n for module, n in Counter(order).items() if n > 2}
        assert not twice, f"entered more than twice: {twice} in {order}"
        for index, (module, function, _) in enumerate(run):
            chain = within(run, index)
            assert not (module in BUILDS and any(m in CHECKS for m in chain)), (
                f"the check step builds: {function} of {module} called from {chain}")
            assert not (module in CHECKS and any(m in BUILDS for m in chain)), (
                f"the build step checks: {function} of {module} called from {chain}")
