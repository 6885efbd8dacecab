"""Self-pretraining's objective and config, in process (no training): the losses count the
predicted positions only, the pretraining model grows the mask token's row and an LM head, the
objective must suit the model's attention, and pretrain=none changes no existing run's config."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.training import compose_config
from omegaconf import OmegaConf

from linarena.data.batching import IGNORE_INDEX
from linarena.errors import ConfigError
from linarena.training.build import build_module
from linarena.training.checkpoint_identity import run_identity
from linarena.training.config_checks import check_config
from linarena.training.pretrain import PretrainModule, token_loss

SMOKE = ["debug=smoke", "logger=none"]
PRETRAINING = [*SMOKE, "pretrain=mlm", "pretrain.stage=pretrain"]


def test_the_loss_ignores_unpredicted_positions() -> None:
    """Changing the logits of an unmasked or padded position (IGNORE_INDEX) leaves the loss as it
    is; changing a masked position's moves it."""
    torch.manual_seed(0)
    logits = torch.randn(2, 6, 5)
    targets = torch.full((2, 6), IGNORE_INDEX)
    targets[0, 1], targets[1, 4] = 3, 0
    loss, _, _, scored = token_loss(logits, targets)
    assert int(scored) == 2
    ignored = logits.clone()
    ignored[0, 0] += 100.0
    ignored[1, 5] -= 100.0
    assert torch.equal(token_loss(ignored, targets)[0], loss)
    moved = logits.clone()
    moved[0, 1, 3] += 1.0
    assert token_loss(moved, targets)[0] < loss
    expected = torch.nn.functional.cross_entropy(logits[[0, 1], [1, 4]], torch.tensor([3, 0]))
    assert torch.allclose(loss, expected)
    nothing = torch.full((2, 6), IGNORE_INDEX)
    assert token_loss(logits, nothing)[0] == 0  # no 0/0


def composed(overrides: list[str]):
    """The config train.py would see (Hydra's runtime installed: task_name resolves)."""
    return compose_config(overrides, output_dir=Path("unused"))


def pretraining_module(overrides: list[str]) -> tuple:
    cfg = composed(overrides)
    check_config(cfg)
    datamodule, module = build_module(cfg)
    return cfg, datamodule, module


def test_mlm_adds_the_mask_row_and_an_lm_head_over_the_real_ids() -> None:
    cfg, datamodule, module = pretraining_module(PRETRAINING)
    assert isinstance(module, PretrainModule)
    vocab = datamodule.vocab_size
    assert module.model.embedding.tokens.num_embeddings == vocab + 1
    assert module.mask_id == vocab
    assert module.model.lm_head.proj.out_features == vocab - 1
    assert cfg.pretrain.mask_fraction == 0.1  # ListOps' fraction, written into the run's config
    # The body starts from the weights a run of the same seed without pretraining would have.
    torch.manual_seed(1)
    _, plain = build_module(composed([*SMOKE, "pretrain=mlm", "pretrain.stage=both"]))
    torch.manual_seed(1)
    _, pre = build_module(composed(PRETRAINING))
    for name, value in plain.model.state_dict().items():
        assert torch.equal(pre.model.state_dict()[name], value), name


def test_mlm_predicts_masked_real_tokens_and_lm_the_next_ones() -> None:
    _, _, module = pretraining_module(PRETRAINING)
    tokens = torch.tensor([[3, 4, 5, 6, 7, 8, 0, 0]] * 8)
    batch = {"tokens": tokens, "mask": tokens != 0, "label": torch.zeros(8, dtype=torch.long)}
    _, _, targets, scored = module.predict_tokens(batch, "train", 0)
    targets = targets.view(8, -1)
    assert int(scored) > 0
    assert (targets[:, 6:] == IGNORE_INDEX).all()  # never padding
    picked = targets != IGNORE_INDEX
    assert torch.equal(targets[picked], (tokens - 1)[picked])

    _, datamodule, causal = pretraining_module([*SMOKE, "pretrain=lm", "pretrain.stage=pretrain",
                                       "model.causal=true", "model.pooling=mean"])
    # No mask token for lm: the task's vocabulary.
    assert causal.model.embedding.tokens.num_embeddings == datamodule.vocab_size
    _, _, targets, scored = causal.predict_tokens(batch, "train", 0)
    assert int(scored) == 8 * 5
    assert targets.view(8, -1)[0].tolist() == [3, 4, 5, 6, 7, *[IGNORE_INDEX] * 3]


@pytest.mark.parametrize(("overrides", "message"), [
    (["pretrain=mlm", "model.causal=true", "model.pooling=mean"],
     r"^pretrain=mlm with a causal model \(model\.causal=true\).*use pretrain=lm"),
    (["pretrain=lm"], r"^pretrain=lm with a bidirectional model \(task .* is not\)"),
    (["pretrain=mlm", "data=mqar"], r"^pretrain=mlm with a causal model \(task MQAR"),
    (["pretrain=mlm", "pretrain.mask_fraction=1.5"], r"^pretrain\.mask_fraction=1\.5: "),
    (["pretrain=mlm", "data=sequences"], r"^pretrain=mlm: no masking fraction is known"),
    (["pretrain=mlm", "+pretrain.mask_ratio=0.2"], r"pretrain\.mask_ratio"),
    (["pretrain=mlm", "pretrain.stage=finetune"], r"^pretrain\.stage=finetune starts from"),
    (["pretrain=mlm", "pretrain.max_steps=0"], r"^pretrain\.max_steps=0: "),
])
def test_a_wrong_pretraining_setting_is_refused_in_one_line(
    overrides: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as refused:
        check_config(composed([*SMOKE, *overrides]))
    assert "\n" not in str(refused.value)


def test_pretrain_none_changes_nothing_but_its_own_key() -> None:
    """The group's default adds `pretrain: {objective: none}` and nothing else: the composed
    config and the checkpoint identity of every existing run are as they were."""
    for overrides in ([], ["experiment=lra/listops", "attention=elu"], ["data=mqar"]):
        with_group = composed(overrides)
        without = composed([*overrides, "~pretrain"])
        assert OmegaConf.to_container(with_group.pretrain) == {"objective": "none"}
        as_before = OmegaConf.to_container(with_group)
        del as_before["pretrain"]
        assert as_before == OmegaConf.to_container(without)
        assert run_identity(with_group, "c") == run_identity(without, "c")
