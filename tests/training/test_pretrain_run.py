"""Self-pretraining through train.py (tiny generated ListOps, CPU): one command pretrains, then
fine-tunes, each stage in its own subfolder with one summary at the top; a run stopped after
pretraining continues with fine-tuning; fine-tuning carries every weight but the heads; a
pretraining checkpoint of another model is refused, naming the first difference."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers.training import compose_config, run_train

from linarena.errors import CheckpointError, ConfigError
from linarena.training.build import build_module
from linarena.training.checkpoint_identity import run_identity
from linarena.training.pretrained_weights import load_pretrained_weights
from linarena.training.resume import load_initial_weights

SMOKE = ["debug=smoke", "logger=csv", "trainer.enable_progress_bar=false"]
# The pretraining learns (lr 1e-3); the fine-tuning cannot move a float32 weight (lr 1e-30,
# AdamW's decay scaled by it too), so its weights are those it started from.
TWO_STAGES = [*SMOKE, "pretrain=mlm", "pretrain.max_steps=3", "+pretrain.optim.lr=0.001",
              "optim.lr=1e-30", "optim.schedule=constant", "trainer.max_steps=2"]


def summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


def weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)["state_dict"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def two_stage_run(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    tmp = tmp_path_factory.mktemp("spt")
    run = tmp / "run"
    done = run_train([*TWO_STAGES, f"hydra.run.dir={run}"], tmp, data_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Fine-tuning: carried 14 weights" in done.stdout + done.stderr
    return run


def test_one_command_writes_both_stages_and_one_summary(two_stage_run: Path) -> None:
    pretrain, finetune = two_stage_run / "pretrain", two_stage_run / "finetune"
    assert (pretrain / "checkpoints" / "last.ckpt").is_file()
    assert (finetune / "checkpoints" / "last.ckpt").is_file()
    top = summary(two_stage_run)
    assert top["pretrain"] == {"objective": "mlm", "stage": "both", "mask_fraction": 0.1}
    stages = top["stages"]
    assert [stages[s]["global_step"] for s in ("pretrain", "finetune")] == [3, 2]
    assert top["global_step"] == 5 and top["tokens"] == sum(s["tokens"] for s in stages.values())
    assert all(s["tokens"] > 0 and s["duration_s"] > 0 for s in stages.values())
    assert 0 <= stages["pretrain"]["metrics"]["pretrain/test_acc"] <= 1
    assert top["metrics"]["test/acc"] == summary(finetune)["metrics"]["test/acc"]
    assert summary(pretrain)["part_of_run"] == str(two_stage_run)
    # The pretraining checkpoint: the mask token's row and the LM head.
    stored = weights(pretrain / "checkpoints" / "last.ckpt")
    assert stored["model.embedding.tokens.weight"].shape[0] == 17  # ListOps' 16 ids + mask
    assert stored["model.lm_head.proj.weight"].shape[0] == 15  # the 15 real ids


def test_fine_tuning_carries_every_weight_but_the_heads(two_stage_run: Path) -> None:
    pretrained = weights(two_stage_run / "pretrain" / "checkpoints" / "last.ckpt")
    tuned = weights(two_stage_run / "finetune" / "checkpoints" / "last.ckpt")
    report = summary(two_stage_run / "finetune")["init_weights"]
    body = [name for name in tuned if name.startswith("model.")
            and not name.startswith("model.head.")]
    assert report["carried"] == body and "model.embedding.tokens.weight" in body
    assert report["initialised"] == [n for n in tuned if n.startswith("model.head.")]
    for name in body:  # the mask token's row too
        assert torch.equal(tuned[name], pretrained[name]), name
    assert not any(name.startswith("model.lm_head.") for name in tuned)
    assert summary(two_stage_run)["stages"]["finetune"]["init_weights"] == report


def test_the_heads_are_the_fine_tuning_runs_own(tmp_path: Path, two_stage_run: Path) -> None:
    """Loading leaves the classifier head as the fine-tuning run initialised it (from another
    random state here, so that it differs from the pretraining run's untrained head)."""
    checkpoint = two_stage_run / "pretrain" / "checkpoints" / "last.ckpt"
    torch.manual_seed(2)
    module, identity = stage_module(["pretrain=mlm", "pretrain.stage=finetune",
                                     f"init_weights={checkpoint}"], tmp_path)
    fresh = {name: value.clone() for name, value in module.state_dict().items()}
    report = load_pretrained_weights(checkpoint, module, identity)
    pretrained, loaded = weights(checkpoint), module.state_dict()
    for name in report["carried"]:
        assert torch.equal(loaded[name], pretrained[name]), name
    for name in report["initialised"]:
        assert torch.equal(loaded[name], fresh[name]), name
    assert not all(torch.equal(fresh[n], pretrained[n]) for n in report["initialised"])


def test_a_run_stopped_after_pretraining_continues_with_fine_tuning(
    tmp_path: Path, data_dir: Path, two_stage_run: Path
) -> None:
    """As a run killed between the stages leaves it: the pretraining stage finished, no
    fine-tuning yet. The resume command trains the fine-tuning stage only."""
    run = tmp_path / "run"
    shutil.copytree(two_stage_run, run, ignore=shutil.ignore_patterns("finetune", "summary.json"))
    shutil.copy(two_stage_run / "pretrain" / "summary.json", run / "pretrain" / "summary.json")
    before = (run / "pretrain" / "checkpoints" / "last.ckpt").read_bytes()
    resumed = run_train(["ckpt_path=last", f"hydra.run.dir={run}"], tmp_path, data_dir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "The pretrain stage already finished" in resumed.stdout
    assert "Starting the finetune stage" in resumed.stdout
    assert (run / "pretrain" / "checkpoints" / "last.ckpt").read_bytes() == before
    assert summary(run)["stages"]["finetune"]["global_step"] == 2


def stage_module(overrides: list[str], tmp_path: Path):
    cfg = compose_config([*SMOKE, *overrides], output_dir=tmp_path)
    _, module = build_module(cfg)
    return module, run_identity(cfg, None)


def test_a_pretraining_checkpoint_of_another_model_is_refused(
    tmp_path: Path, two_stage_run: Path
) -> None:
    checkpoint = two_stage_run / "pretrain" / "checkpoints" / "last.ckpt"
    finetune = ["pretrain=mlm", "pretrain.stage=finetune", f"init_weights={checkpoint}"]
    module, identity = stage_module([*finetune, "attention=elu"], tmp_path)
    with pytest.raises(CheckpointError, match=r"model than this config \(attention\._target_: "
                       r"'linarena\.attention\.SoftmaxAttention' there, '.*EluAttention' here"):
        load_pretrained_weights(checkpoint, module, identity)
    module, identity = stage_module([*finetune, "model.d_model=64"], tmp_path)
    with pytest.raises(CheckpointError, match=r"\(model\.d_model: 32 there, 64 here"):
        load_pretrained_weights(checkpoint, module, identity)
    # Without pretrain=, the checkpoint's mask-token row would not fit: said in one line.
    module, identity = stage_module([f"init_weights={checkpoint}"], tmp_path)
    with pytest.raises(ConfigError, match=r"pretrain=mlm pretrain\.stage=finetune init_weights="):
        load_initial_weights(checkpoint, module, identity)
    # A fine-tuning stage's own checkpoint holds no pretrained body to start from.
    tuned = two_stage_run / "finetune" / "checkpoints" / "last.ckpt"
    module, identity = stage_module(finetune, tmp_path)
    with pytest.raises(CheckpointError, match=r"not written by a self-pretraining run"):
        load_pretrained_weights(tuned, module, identity)


def test_a_run_stopped_while_fine_tuning_resumes_that_stage(
    tmp_path: Path, data_dir: Path, two_stage_run: Path
) -> None:
    """As a run killed in the fine-tuning stage leaves it (a checkpoint, no summary): the resume
    command continues that stage from its checkpoint; the fine-tuning may be made longer."""
    run = tmp_path / "run"
    shutil.copytree(two_stage_run, run, ignore=shutil.ignore_patterns("summary.json"))
    shutil.copy(two_stage_run / "pretrain" / "summary.json", run / "pretrain" / "summary.json")
    resumed = run_train(["ckpt_path=last", f"hydra.run.dir={run}", "trainer.max_steps=3"],
                        tmp_path, data_dir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Resuming the finetune stage" in resumed.stdout
    finetune = summary(run)["stages"]["finetune"]
    assert finetune["global_step"] == 3 and finetune["resumes"][0]["from_step"] == 2
    assert finetune["init_weights"]["initialised"]  # still says where its weights came from
