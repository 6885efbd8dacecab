"""The experiment=lra/* presets follow the official LRA code: model size (parameter count against
the official configs), the switches they set, and which checkpoint is tested."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.training import build_model, compose_config
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch import Trainer

from linarena.errors import ConfigError
from linarena.training import train


def official_param_count(
    vocab: int, d: int, qkv: int, mlp: int, layers: int, classes: int, *,
    learned_positions: int = 0, cls: bool, dual: bool = False,
) -> int:
    """Parameters of LRA's flax TransformerEncoder / TransformerDualEncoder
    (lra_benchmarks/models/transformer/transformer.py, models/layers/common_layers.py):
    embedding; `cls` (d) with CLS pooling; learned positions (max_len + 1 with CLS) x d; per
    block 2 LayerNorms, q/k/v/out without biases (4 d qkv), MlpBlock with biases; final
    LayerNorm; classifier_head (Dense(mlp) - ReLU - Dense(classes)) or, for the dual encoder,
    classifier_head_dual on [u, v] (Dense(mlp) - ReLU - Dense(mlp // 2) - ReLU - Dense(classes))."""
    count = vocab * d + (d if cls else 0) + learned_positions * d
    block = 2 * d + 4 * d * qkv + 2 * d + (d * mlp + mlp) + (mlp * d + d)
    count += layers * block + 2 * d
    if dual:
        return (count + (2 * d * mlp + mlp) + (mlp * (mlp // 2) + mlp // 2)
                + (mlp // 2 * classes + classes))
    return count + (d * mlp + mlp) + (mlp * classes + classes)


# Official vocabularies: tfds TokenTextEncoder for ListOps (15 symbols + 2 reserved ids + 1 OOV
# bucket = 18), ByteTextEncoder for Text and Retrieval (256 bytes + 2 reserved = 258), pixel
# values for the images (256). Sizes from each task's official config (see docs/lra_protocol.md).
OFFICIAL = {
    "lra/listops": (18, official_param_count(18, 512, 512, 1024, 4, 10, cls=True)),
    "lra/text": (258, official_param_count(258, 256, 256, 1024, 4, 2, cls=True)),
    "lra/retrieval": (258, official_param_count(258, 128, 128, 512, 4, 2, cls=False, dual=True)),
    "lra/image": (
        256, official_param_count(256, 128, 64, 128, 1, 10, learned_positions=1025, cls=True)
    ),
    "lra/pathfinder": (256, official_param_count(256, 32, 16, 32, 4, 2, cls=False)),
    "lra/pathx": (
        256, official_param_count(256, 32, 16, 32, 1, 2, learned_positions=16384, cls=False)
    ),
}


def build_preset(experiment: str, attention: str = "softmax", *overrides: str):
    """A preset's (cfg, datamodule, model), built from its config alone (no data is read)."""
    return build_model([f"experiment={experiment}", f"attention={attention}", *overrides])


def test_the_official_counts_are_the_published_sizes() -> None:
    rounded = {name: count for name, (_, count) in OFFICIAL.items()}
    assert rounded == {
        "lra/listops": 8_949_258, "lra/text": 3_486_978, "lra/retrieval": 1_087_746,
        "lra/image": 248_458, "lra/pathfinder": 26_530, "lra/pathx": 537_954,
    }


@pytest.mark.parametrize("experiment", list(OFFICIAL))
def test_preset_model_has_the_official_parameter_count(experiment: str) -> None:
    """Within the LRA rule of 10%, and exactly the official count but for the vocabulary rows."""
    cfg, datamodule, model = build_preset(experiment)
    official_vocab, official = OFFICIAL[experiment]
    count = sum(p.numel() for p in model.parameters())
    assert abs(count - official) / official < 0.10
    assert count == official - (official_vocab - datamodule.vocab_size) * cfg.model.d_model


@pytest.mark.parametrize("experiment", ["lra/image", "lra/pathfinder", "lra/pathx"])
def test_image_presets_mask_black_pixels_as_lra_does(experiment: str) -> None:
    _, datamodule, _ = build_preset(experiment)
    assert datamodule.token_shift == 0 and datamodule.vocab_size == 256
    _, plain, _ = build_preset(experiment, "softmax", "data.zero_pixel_is_padding=false")
    assert plain.token_shift == 1 and plain.vocab_size == 257


@pytest.mark.parametrize(("experiment", "rate"), [("lra/image", 0.2), ("lra/listops", 0.1)])
def test_attention_dropout_reaches_softmax_and_linear_variants_build(
    experiment: str, rate: float
) -> None:
    _, _, model = build_preset(experiment)
    assert {block.attention.core.dropout for block in model.blocks} == {rate}
    _, _, linear = build_preset(experiment, "elu")
    assert not hasattr(linear.blocks[0].attention.core, "dropout")


@pytest.mark.parametrize("experiment", list(OFFICIAL))
def test_presets_decay_as_lra_and_test_the_last_weights(experiment: str) -> None:
    cfg, _, _ = build_preset(experiment)
    assert cfg.test_checkpoint == "last"
    assert tuple(cfg.optim.betas) == (0.9, 0.98) and cfg.optim.eps == 1e-9
    if cfg.optim.weight_decay > 0:
        assert cfg.optim.weight_decay_scope == "all"


def test_retrieval_preset_is_the_lra_dual_encoder() -> None:
    _, _, model = build_preset("lra/retrieval")
    assert model.pooling == "first" and model.embedding.cls is None
    assert model.head.kind == "lra"


@pytest.mark.parametrize("which", ["best", "last"])
def test_test_checkpoint_picks_the_tested_weights_and_is_recorded(
    which: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    tested = []
    original = Trainer.test

    def recording_test(self, *args, **kwargs):
        tested.append(kwargs.get("ckpt_path"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "test", recording_test)
    output_dir = tmp_path / "run"
    cfg = compose_config(
        ["debug=smoke", "logger=csv", f"paths.data_dir={tmp_path / 'data'}",
         "trainer.enable_progress_bar=false", f"test_checkpoint={which}"],
        output_dir=output_dir,
    )
    try:
        train(cfg)
    finally:
        HydraConfig.instance().cfg = None
    summary = (output_dir / "summary.json").read_text()
    assert f'"tested_checkpoint": "{which}"' in summary
    if which == "last":
        assert tested == [None]  # the weights in memory: those of the last step
    else:
        assert tested[0].endswith(".ckpt") and Path(tested[0]).name != "last.ckpt"


def test_unknown_test_checkpoint_is_refused_before_training(tmp_path: Path) -> None:
    cfg = compose_config(["debug=smoke", "logger=none", "test_checkpoint=final"],
                         output_dir=tmp_path / "run")
    try:
        with pytest.raises(ConfigError, match=r"test_checkpoint=best.*test_checkpoint=last"):
            train(cfg)
    finally:
        HydraConfig.instance().cfg = None
    assert not (tmp_path / "run" / "checkpoints").exists()
