"""MQAR on a mixture of (length, pairs) settings, tested per setting (MQARMixtureDataModule,
experiment=mqar_mixture and mqar_mixture_cpu): generation, statistics, training end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers.training import compose_config

from linarena.data import MQARMixtureDataModule
from linarena.data.batching import IGNORE_INDEX, PAD_ID
from linarena.training.run import train

TRAIN = [{"length": 16, "pairs": 2, "examples": 12}, {"length": 32, "pairs": 8, "examples": 6}]
TEST = [{"length": 32, "pairs": 8, "examples": 5}, {"length": 128, "pairs": 32, "examples": 3}]


def tensors(seed: int = 0, data_dir: str = "unused") -> dict[str, torch.Tensor]:
    return MQARMixtureDataModule(data_dir, TRAIN, TEST, batch_size=4, seed=seed, max_length=128,
                                 vocab_size=128, num_val=2).build()


def test_generation_is_deterministic_and_depends_on_the_seed() -> None:
    first, again, other = tensors(0), tensors(0), tensors(1)
    assert all(torch.equal(first[key], again[key]) for key in first)
    assert not torch.equal(first["train/tokens"], other["train/tokens"])


def test_each_setting_has_its_length_and_pairs() -> None:
    built = tensors()
    tokens, labels = built["train/tokens"].long(), built["train/labels"].long()
    assert tokens.shape == (18, 32)  # shorter settings right-padded to the longest
    short, long = slice(0, 12), slice(12, 18)
    assert (tokens[short, 16:] == PAD_ID).all() and (labels[short, 16:] == IGNORE_INDEX).all()
    assert (tokens[short, :16] != PAD_ID).all() and (tokens[long] != PAD_ID).all()
    assert ((labels[short] != IGNORE_INDEX).sum(1) == 2).all()
    assert ((labels[long] != IGNORE_INDEX).sum(1) == 8).all()
    assert built["val/tokens"].shape == (4, 32)  # num_val of each training setting
    for name, (count, length, pairs) in {"L32_P8": (5, 32, 8), "L128_P32": (3, 128, 32)}.items():
        test_tokens = built[f"test/{name}/tokens"].long()
        test_labels = built[f"test/{name}/labels"].long()
        assert test_tokens.shape == (count, length)
        assert ((test_labels != IGNORE_INDEX).sum(1) == pairs).all()
        # The label at a queried key is the value that followed that key among the pairs.
        row = 0
        pairs_of = dict(zip(test_tokens[row, 0:2 * pairs:2].tolist(),
                            test_tokens[row, 1:2 * pairs:2].tolist(), strict=True))
        queried = (test_labels[row] != IGNORE_INDEX).nonzero().flatten()
        assert all(pairs_of[int(test_tokens[row, i])] == int(test_labels[row, i]) for i in queried)


def test_test_batches_hold_one_setting_each(tmp_path: Path) -> None:
    module = MQARMixtureDataModule(tmp_path, TRAIN, TEST, batch_size=4, max_length=128,
                                   vocab_size=128, num_val=2)
    batches = list(module.test_dataloader())
    assert [int(b["setting"]) for b in batches] == [0, 0, 1]
    assert [tuple(b["tokens"].shape) for b in batches] == [(4, 32), (1, 32), (3, 128)]
    assert module.test_setting_names == ["L32_P8", "L128_P32"]


def test_bad_settings_are_one_line_errors() -> None:
    with pytest.raises(ValueError, match=r"data.max_length=64 is shorter .* data.max_length=128"):
        MQARMixtureDataModule("unused", TRAIN, TEST, max_length=64, vocab_size=128)
    with pytest.raises(ValueError, match=r"data\.train: each entry needs length, pairs"):
        MQARMixtureDataModule("unused", [{"length": 16, "pairs": 2}], TEST, max_length=128)
    with pytest.raises(ValueError, match=r"too short for data\.num_pairs=8"):
        MQARMixtureDataModule("unused", [{"length": 16, "pairs": 8, "examples": 1}], TEST,
                              max_length=128, vocab_size=128)


def test_presets_test_up_to_four_times_the_longest_training_length() -> None:
    for preset in ("mqar_mixture", "mqar_mixture_cpu"):
        cfg = compose_config([f"experiment={preset}", "attention=performer"])
        longest_train = max(item.length for item in cfg.data.train)
        assert max(item.length for item in cfg.data.test) == 4 * longest_train
        assert cfg.model.max_length == cfg.data.max_length == 4 * longest_train
        assert cfg.attention.redraw_interval == 0  # no Performer redraw, as Zoology
        assert cfg.callbacks.early_stopping.stopping_threshold == 0.99


def test_a_short_run_reports_accuracy_per_test_setting(tmp_path: Path) -> None:
    settings = ("data.train=[{length:16,pairs:2,examples:16}]",
                "data.test=[{length:16,pairs:2,examples:4},{length:64,pairs:16,examples:4}]")
    cfg = compose_config(["experiment=mqar_mixture_cpu", "attention=elu", "logger=none",
                          *settings, "data.max_length=64", "data.num_val=4",
                          "trainer.max_steps=2", "trainer.val_check_interval=2",
                          f"paths.data_dir={tmp_path / 'data'}"], output_dir=tmp_path / "run")
    train(cfg)
    metrics = json.loads((tmp_path / "run" / "summary.json").read_text())["metrics"]
    assert {"test/acc", "test/acc_L16_P2", "test/acc_L64_P16"} <= set(metrics)
    assert all(0 <= metrics[key] <= 1 for key in ("test/acc_L16_P2", "test/acc_L64_P16"))


def test_cpu_preset_fast_dev_run(tmp_path: Path) -> None:
    cfg = compose_config(["experiment=mqar_mixture_cpu", "attention=taylor", "logger=none",
                          "debug=fdr", f"paths.data_dir={tmp_path / 'data'}"],
                         output_dir=tmp_path / "run")
    train(cfg)
    assert (tmp_path / "run" / "summary.json").is_file()
