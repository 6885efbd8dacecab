"""The attention variants a config can pick: the files of conf/attention/.

`conf/attention/<name>.yaml` is the one list of variants; tests, benchmarks, scripts and the
comparison tables read it through these functions, and nothing else names them. A variant file
(`# @package _global_`) declares two keys: `attention`, which builds a factory
`(head_dim=..., causal=...) -> nn.Module` (`_partial_: true`), and `attention_label`, its display
label in tables and figures.

The conf directory is found next to the code: in an installed package it is linarena/conf
(conf/ shipped as package data, see pyproject.toml and setup.py), in a source checkout the
repository's conf/. A training run reads the conf/ its config was composed from instead
(composed_conf_dir): train.py run from a checkout over an installed package uses the checkout's.
Nothing is read at import time; reads are cached.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf
from torch import nn

from linarena.attention.layers import AttentionLayer
from linarena.attention.linear import LinearAttention
from linarena.attention.recurrent import RecurrentAttention

_PACKAGE = Path(__file__).resolve().parents[1]


def find_conf_dir() -> Path:
    """The installed package's linarena/conf if there is one, else the source checkout's conf/
    (next to src/)."""
    installed = _PACKAGE / "conf"
    return installed if installed.is_dir() else _PACKAGE.parents[1] / "conf"


CONF_DIR = find_conf_dir()


def composed_conf_dir() -> Path:
    """The conf folder the running Hydra job composed its config from: the first folder of its
    config search path that holds an attention/ group (train.py's conf/, or --config-dir's);
    CONF_DIR outside a Hydra job or when the configs came from the installed package."""
    if not HydraConfig.initialized():
        return CONF_DIR
    for source in HydraConfig.get().runtime.config_sources:
        if source.schema == "file" and (Path(source.path) / "attention").is_dir():
            return Path(source.path)
    return CONF_DIR


def variant_names(conf_dir: Path = CONF_DIR) -> list[str]:
    """Every variant: exact (quadratic) attentions first, the baseline, then the linear ones,
    each group alphabetically."""
    return list(_names(Path(conf_dir)))


@cache
def _names(conf_dir: Path) -> tuple[str, ...]:
    if not (conf_dir / "attention").is_dir():
        raise FileNotFoundError(
            f"{conf_dir / 'attention'} does not exist: linarena finds its configs in "
            "linarena/conf when installed (pip install .) or in conf/ of a source checkout."
        )
    names = sorted(path.stem for path in (conf_dir / "attention").glob("*.yaml"))
    return tuple(sorted(names, key=lambda name: (is_linear(name, conf_dir), name)))


def check_variant_names(names: Iterable[str], conf_dir: Path = CONF_DIR) -> list[str]:
    """`names` as a list, or a ValueError naming the unknown ones and the valid ones."""
    names, valid = list(names), variant_names(conf_dir)
    unknown = [name for name in names if name not in valid]
    if unknown:
        raise ValueError(f"unknown attention variant(s) {unknown}: valid names are {valid} "
                         f"(the files of {Path(conf_dir) / 'attention'}).")
    return names


@cache
def _read(name: str, conf_dir: Path) -> dict:
    """The file as a plain dict, interpolations unresolved (each caller gets its own copy)."""
    path = Path(conf_dir) / "attention" / f"{name}.yaml"
    if not path.is_file():
        check_variant_names([name], conf_dir)
    content = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    if not isinstance(content.get("attention"), dict) or "attention_label" not in content:
        raise ValueError(f"{path}: a variant file declares `attention_label: <label>` and "
                         "`attention:` (the factory, with _target_ and _partial_: true), under "
                         "the header `# @package _global_`.")
    return content


def _load(name: str, conf_dir: Path) -> DictConfig:
    return OmegaConf.create(_read(name, conf_dir)["attention"])


def is_linear(name: str, conf_dir: Path = CONF_DIR) -> bool:
    """Whether the variant's cost grows linearly with length: a LinearAttention (feature map),
    a RecurrentAttention (decay, gates, delta rule) or a layer that says so."""
    target = get_class(_load(name, Path(conf_dir))._target_)
    if issubclass(target, AttentionLayer):
        return target.linear_in_length
    return issubclass(target, (LinearAttention, RecurrentAttention))


def is_recurrence(name: str, conf_dir: Path = CONF_DIR) -> bool:
    """Whether the variant is a linear recurrence with decay, gates or the delta rule: a
    RecurrentAttention core (RetNet, GLA, Mamba-2, DeltaNet, ...), not a feature map."""
    return issubclass(get_class(_load(name, Path(conf_dir))._target_), RecurrentAttention)


def is_layer(name: str, conf_dir: Path = CONF_DIR) -> bool:
    """Whether the variant is a whole layer (x -> x, linarena.attention.layers), not a core on
    the block's q, k, v."""
    return issubclass(get_class(_load(name, Path(conf_dir))._target_), AttentionLayer)


def owns_short_conv(name: str, conf_dir: Path = CONF_DIR) -> bool:
    """Whether the variant is a layer with its own short convolutions, so a model of it refuses
    model.short_conv > 0 (AttentionLayer.own_short_conv)."""
    return bool(getattr(get_class(_load(name, Path(conf_dir))._target_), "own_short_conv", False))


def label(name: str, conf_dir: Path = CONF_DIR) -> str:
    """The display label the file declares (`attention_label`)."""
    return str(_read(name, Path(conf_dir))["attention_label"])


def load_variant(
    name: str, model: dict | None = None, conf_dir: Path = CONF_DIR
) -> Callable[..., nn.Module]:
    """The factory `(head_dim=..., causal=...) -> nn.Module` that `attention=<name>` gives in
    training (for a layer, is_layer: `(causal=...) -> AttentionLayer`). `model`: the values of
    `model.*` keys the file interpolates (cosFormer's max_length, the gated variants' d_model and
    num_heads)."""
    config = OmegaConf.create({"model": model or {}, "attention": _load(name, Path(conf_dir))})
    return instantiate(config.attention)
