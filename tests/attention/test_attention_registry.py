"""conf/attention/ is the list of variants: what the registry reads from it, and that every
layer of a model built from a variant's config has its own feature map."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers.attention import FEATURE_MAP_VARIANTS, LINEAR_VARIANTS, VARIANTS
from helpers.training import CONF, REPO, build_model, compose_config
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig

from linarena.attention.variants import (
    CONF_DIR,
    check_variant_names,
    composed_conf_dir,
    is_linear,
    label,
    variant_names,
)
from linarena.training import ConfigError
from linarena.training.build import pattern_attentions
from linarena.training.config_checks import check_config


def test_the_variants_are_the_files_of_conf_attention(tmp_path: Path) -> None:
    # A file added to (or removed from) a conf folder is a variant (or no longer one), with no
    # other registration: checked on a copy, since comparing conf/attention with the function
    # that globs it could not fail.
    copy = tmp_path / "conf"
    shutil.copytree(CONF / "attention", copy / "attention")
    shutil.copy(copy / "attention" / "elu.yaml", copy / "attention" / "elu_copy.yaml")
    (copy / "attention" / "cosformer.yaml").unlink()
    names = variant_names(copy)
    assert "elu_copy" in names and "cosformer" not in names and len(names) == len(variant_names())
    assert VARIANTS[0] == "softmax" and not is_linear("softmax")  # the exact baseline first
    assert {"elu", "performer", "cosformer", "taylor"} <= set(LINEAR_VARIANTS)
    assert label("cosformer") == "cosFormer" and label("elu") == "elu+1"


def test_the_label_is_the_key_the_variant_file_declares(tmp_path: Path) -> None:
    """A variant file declares `attention_label` (read as YAML, not from a comment), and is
    listed without any other registration."""
    (tmp_path / "attention").mkdir()
    (tmp_path / "attention" / "mine.yaml").write_text(
        "# @package _global_\n# mine: a comment is not the label\nattention_label: My map\n"
        "attention:\n  _target_: linarena.attention.EluAttention\n  _partial_: true\n")
    assert variant_names(tmp_path) == ["mine"] and label("mine", tmp_path) == "My map"
    assert is_linear("mine", tmp_path)


@pytest.mark.slow
def test_an_installed_package_lists_the_variants(tmp_path: Path) -> None:
    """A non-editable install (pip install ., here into a target folder) ships conf/ as
    linarena/conf, and the registry, run from another folder, finds every variant there."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE", "src", "conf"):
        if not (REPO / name).exists():
            continue
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy
        copy(REPO / name, source / name)
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--target", str(site), str(source)], check=True,
                   capture_output=True)
    shutil.rmtree(source)  # nothing of the source tree is left to be found
    script = ("from linarena.attention import variants as v; print(v.CONF_DIR); "
              "print(' '.join(v.variant_names())); print(v.label('gla'))")
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                            text=True, check=True, env=os.environ | {"PYTHONPATH": str(site)})
    conf_dir, names, gla = result.stdout.splitlines()
    assert conf_dir == str(site / "linarena" / "conf")
    # Every variant of the checkout's conf/, the whole layers included.
    assert names.split() == variant_names(CONF) and gla == "GLA"


def test_a_run_reads_the_variants_of_the_conf_it_was_composed_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a non-editable install, model.pattern names were checked against the installed
    package's conf/, not the conf/ of the checkout that train.py composed its config from."""
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    shutil.copy(conf / "attention" / "elu.yaml", conf / "attention" / "elu_local.yaml")
    monkeypatch.setattr(HydraConfig.instance(), "cfg", None)  # this test's run only
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose(config_name="config", return_hydra_config=True,
                      overrides=["model.pattern=[elu_local,softmax]", "model.num_layers=2"])
    HydraConfig.instance().set_config(cfg)
    assert composed_conf_dir() == conf
    entries = pattern_attentions(cfg)
    assert [name for name, _ in entries] == ["elu_local", "softmax"]
    assert entries[0][1]._target_ == "linarena.attention.EluAttention"
    monkeypatch.setattr(HydraConfig.instance(), "cfg", None)
    assert composed_conf_dir() == CONF_DIR  # outside a Hydra job: the package's own


def test_unknown_variant_names_are_an_error_listing_the_valid_ones() -> None:
    assert check_variant_names(["elu", "softmax"]) == ["elu", "softmax"]
    with pytest.raises(ValueError, match=r"unknown attention variant\(s\) \['flash'\].*'elu'"):
        check_variant_names(["elu", "flash"])


def model_layers(name: str) -> list[torch.nn.Module]:
    """The attention cores of a 2-layer model built as train.py builds it from the config."""
    _, _, model = build_model([f"attention={name}", "model.num_layers=2", "model.causal=false"])
    return [block.attention.core for block in model.blocks]


@pytest.mark.parametrize("name", FEATURE_MAP_VARIANTS)
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
