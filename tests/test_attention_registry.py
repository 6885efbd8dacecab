"""conf/attention/ is the list of variants: what the registry reads from it, and that every
layer of a model built from a variant's config has its own feature map."""

from __future__ import annotations

import pytest
import torch
from conftest import LINEAR_VARIANTS, VARIANTS
from hydra.utils import instantiate
from training_helpers import CONF, compose_config

from linarena.attention.variants import check_variant_names, is_linear, label
from linarena.training import ConfigError
from linarena.training.checks import check_config


def test_the_variants_are_the_files_of_conf_attention() -> None:
    files = sorted(path.stem for path in (CONF / "attention").glob("*.yaml"))
    assert sorted(VARIANTS) == files
    assert VARIANTS[0] == "softmax" and not is_linear("softmax")  # the exact baseline first
    assert {"elu", "performer", "cosformer", "taylor"} <= set(LINEAR_VARIANTS)
    assert label("cosformer") == "cosFormer" and label("elu") == "elu+1"


def test_unknown_variant_names_are_an_error_listing_the_valid_ones() -> None:
    assert check_variant_names(["elu", "softmax"]) == ["elu", "softmax"]
    with pytest.raises(ValueError, match=r"unknown attention variant\(s\) \['flash'\].*'elu'"):
        check_variant_names(["elu", "flash"])


def model_layers(name: str) -> list[torch.nn.Module]:
    """The attention cores of a 2-layer model built as train.py builds it from the config."""
    cfg = compose_config([f"attention={name}", "model.num_layers=2", "model.causal=false"])
    model = instantiate(cfg.model, vocab_size=10, num_classes=2, head_kind="sequence",
                        attention=instantiate(cfg.attention))
    return [block.attention.core for block in model.blocks]


@pytest.mark.parametrize("name", LINEAR_VARIANTS)
def test_every_layer_gets_its_own_feature_map(name: str) -> None:
    """Hydra builds a nested feature_map config once for every call of the `_partial_`
    factory; each layer must still hold its own map and its own tensors."""
    first, second = (layer.feature_map for layer in model_layers(name))
    assert first is not second
    tensors = [[*m.parameters(), *m.buffers()] for m in (first, second)]
    for a, b in zip(*tensors, strict=True):
        assert a.data_ptr() != b.data_ptr()


def test_seedless_performer_projection_is_drawn_per_layer() -> None:
    """Performer's seedless projection differs between layers, as separately built layers'
    would."""
    first, second = (layer.feature_map.projection for layer in model_layers("performer"))
    assert first.shape == second.shape and not torch.equal(first, second)


def test_feature_map_keys_are_checked_against_its_signature() -> None:
    """A misspelt key of a nested feature map fails at the config check, with a suggestion."""
    cfg = compose_config(["attention=taylor", "+attention.feature_map.feature_dimm=8"])
    with pytest.raises(ConfigError, match=r"attention\.feature_map\.feature_dimm \(did you mean "
                                          r"feature_dim\?\)"):
        check_config(cfg)
    check_config(compose_config(["attention=taylor", "attention.feature_map.feature_dim=8"]))
