"""Hybrid stacks (model.pattern): the attention of each block, padding and causality through a
mixed stack, the presets of conf/experiment/hybrid/ train, wrong patterns fail in one line, the
run's name and label, and the state of a hybrid is the sum of its layers'."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
import torch
from helpers.paths import FIXTURES
from helpers.training import build_model, compose_config, config_names
from omegaconf import OmegaConf

from linarena.attention import SoftmaxAttention
from linarena.attention.patterns import pattern_label, pattern_name
from linarena.attention.recurrent import GatedDeltaNetAttention
from linarena.attention.variants import load_variant
from linarena.errors import ConfigError
from linarena.models import TransformerClassifier
from linarena.studies.runs import attention_state, model_state, state_size
from linarena.training.config_checks import check_config
from linarena.training.run import train

PRESETS = [name for name in config_names("experiment") if name.startswith("hybrid/")]
VOCAB = 12
MODEL_KEYS = {"max_length": 24, "d_model": 16, "num_heads": 2}
# Mixed kinds of attention: a gated recurrence, exact softmax, a 4-key window, a feature map.
PATTERNS = {
    "gated_deltanet*2+softmax": ["gated_deltanet", "gated_deltanet", "softmax"],
    "elu+swa": ["elu", "swa"],
}


def factory(name: str):
    built = load_variant(name, MODEL_KEYS)
    return partial(built, window=4) if name == "swa" else built  # a window shorter than inputs


def hybrid_model(names: list[str], **kwargs) -> TransformerClassifier:
    settings = {"vocab_size": VOCAB, "num_classes": 5, "head_kind": "sequence", "d_model": 16,
                "num_heads": 2, "num_layers": len(names), "mlp_dim": 32, "dropout": 0.0,
                "max_length": 24}
    torch.manual_seed(0)
    return TransformerClassifier(attention=[factory(n) for n in names],
                                 **(settings | kwargs)).eval()


def tokens_and_mask(lengths: list[int], total: int) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(1, VOCAB, (len(lengths), total),
                           generator=torch.Generator().manual_seed(0))
    mask = torch.arange(total)[None, :] < torch.tensor(lengths)[:, None]
    return tokens * mask, mask


def test_a_pattern_builds_its_attention_in_each_block_and_repeats() -> None:
    cfg, _, model = build_model(["model.pattern=[gated_deltanet,gated_deltanet,softmax]",
                                 "model.num_layers=6"])
    kinds = [type(block.attention.core) for block in model.blocks]
    assert kinds == [GatedDeltaNetAttention, GatedDeltaNetAttention, SoftmaxAttention] * 2
    assert cfg.attention_name == "gated_deltanet*2+softmax"  # the run is filed under it
    assert pattern_label(cfg.attention_name) == "Gated DeltaNet ×2 + softmax"
    _, _, plain = build_model(["model.pattern=null", "attention=elu"])
    assert len(plain.blocks) == 2  # null: attention= in every block


def test_an_entry_takes_its_own_settings_and_the_run_records_them() -> None:
    cfg, _, model = build_model(["model.pattern=[softmax,{softmax:{dropout:0.1}}]",
                                 "attention_dropout=0.2"])
    assert [block.attention.core.dropout for block in model.blocks] == [0.2, 0.1]
    assert cfg.model.pattern[1].softmax.dropout == 0.1  # every setting, as built
    assert cfg.attention_name == "softmax"  # one variant's name; its settings: in hparams


def test_names_come_from_the_shortest_repeating_unit() -> None:
    assert pattern_name(["a", "a", "b", "a", "a", "b"]) == "a*2+b"
    assert pattern_name(["a", "b", "a"]) == "a+b+a"
    assert pattern_name(["a", "a"]) == "a"


@pytest.mark.parametrize("names", list(PATTERNS.values()), ids=list(PATTERNS))
@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_padding_does_not_change_the_logits_of_a_hybrid(names: list[str], pooling: str) -> None:
    model = hybrid_model(names, pooling=pooling)
    tokens, mask = tokens_and_mask([7, 4], total=7)
    pad = torch.zeros(2, 9, dtype=torch.long)
    with torch.no_grad():
        short = model(tokens, mask)
        long = model(torch.cat([tokens, pad], 1), torch.cat([mask, pad.bool()], 1))
    torch.testing.assert_close(long, short, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("names", list(PATTERNS.values()), ids=list(PATTERNS))
def test_a_causal_hybrid_hides_the_future(names: list[str]) -> None:
    model = hybrid_model(names, head_kind="token", num_classes=VOCAB, causal=True)
    tokens, mask = tokens_and_mask([12, 6], total=12)
    changed = tokens.clone()
    changed[0, 9:] = (changed[0, 9:] % (VOCAB - 1)) + 1
    with torch.no_grad():
        logits, logits_changed = model(tokens, mask), model(changed, mask)
    torch.testing.assert_close(logits_changed[0, :9], logits[0, :9], rtol=1e-4, atol=1e-5)
    assert not torch.allclose(logits_changed[0, 9:], logits[0, 9:])


@pytest.mark.parametrize("overrides, message", [
    (["model.pattern=[gated_deltanet,gdn]"],
     r"model\.pattern: unknown attention variant\(s\) \['gdn'\]: valid names are \[.*'softmax'"),
    (["model.pattern=[gated_deltanet,softmax]", "model.num_layers=3"],
     r"model\.pattern has 2 entries, so model\.num_layers=3 must be a multiple of 2"),
    (["model.pattern=[]"], r"model\.pattern=\[\] names no attention"),
    (["model.pattern=[{softmax:{dropot:0.1}}]"], r"model\.pattern\.softmax\.dropot \(did you mean"),
    (["model.pattern=[{softmax:1}]"], r"model\.pattern\[0\]=.*an entry is a conf/attention/ name"),
])
def test_a_wrong_pattern_is_a_one_line_config_error(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        check_config(compose_config(overrides))
    assert "\n" not in str(error.value)


def test_the_state_of_a_hybrid_is_the_sum_of_its_layers() -> None:
    def config(*overrides: str) -> dict:
        return OmegaConf.to_container(compose_config(["model.d_model=32", *overrides]),
                                      resolve=False)

    gdn, _ = state_size(config("attention=gated_deltanet", "model.num_layers=2"))
    softmax, _ = state_size(config("attention=softmax", "model.num_layers=1"))
    swa, _ = state_size(config("attention=swa", "model.num_layers=1"))
    hybrid = config("model.pattern=[gated_deltanet,gated_deltanet,softmax]", "model.num_layers=3")
    assert state_size(hybrid) == (gdn + softmax, "kv_cache")  # a KV cache grows with the length
    one_each = config("model.pattern=[gated_deltanet,swa]", "model.num_layers=2")
    assert state_size(one_each) == (gdn // 2 + swa, "recurrent")
    model = hybrid_model(["elu", "softmax", "swa"])
    per_layer = [attention_state(block.attention, 24)[0] for block in model.blocks]
    assert per_layer == [8 * 9 * 2, 2 * 24 * 16, 2 * 3 * 8 * 2]  # S and z; K, V; window - 1
    assert model_state(model, 24) == (sum(per_layer), "kv_cache")


def test_there_are_hybrid_presets() -> None:
    assert {"hybrid/gated_deltanet_softmax", "hybrid/gated_deltanet_swa"} <= set(PRESETS)


@pytest.mark.parametrize("preset", PRESETS)
def test_a_preset_composes_and_trains_with_fast_dev_run(preset: str, tmp_path: Path) -> None:
    cfg = compose_config([f"experiment={preset}", "debug=fdr", "data=sequences",
                          f"data.path={FIXTURES / 'sequences'}", "data.batch_size=4",
                          f"paths.data_dir={tmp_path / 'data'}"], output_dir=tmp_path / "run")
    train(cfg)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    pattern = [next(iter(entry)) for entry in cfg.model.pattern]
    assert summary["attention"] == pattern_name(pattern)
    assert summary["hparams"]["pattern"] == pattern
    assert len(summary["hparams"]["attention"]) == len(pattern)  # each entry's settings
    assert 0 <= summary["metrics"]["test/acc"] <= 1
