"""The attention variants a config can pick: the files of conf/attention/.

`conf/attention/<name>.yaml` is the one list of variants; tests, benchmarks, scripts and the
comparison tables read it through these functions, and nothing else names them. A variant file
builds a factory `(head_dim=..., causal=...) -> nn.Module` (`_partial_: true`); its first line
is a comment `# <display label>: <description>`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path

from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf
from torch import nn

from linarena.attention.linear import LinearAttention

CONF_DIR = Path(__file__).resolve().parents[3] / "conf"


def variant_names(conf_dir: Path = CONF_DIR) -> list[str]:
    """Every variant: exact (quadratic) attentions first, the baseline, then the linear ones,
    each group alphabetically."""
    names = sorted(path.stem for path in (Path(conf_dir) / "attention").glob("*.yaml"))
    return sorted(names, key=lambda name: (is_linear(name, conf_dir), name))


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
    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)


def _load(name: str, conf_dir: Path) -> DictConfig:
    return OmegaConf.create(_read(name, conf_dir))


def is_linear(name: str, conf_dir: Path = CONF_DIR) -> bool:
    """Whether the variant's cost grows linearly with length (a LinearAttention)."""
    return issubclass(get_class(_load(name, Path(conf_dir))._target_), LinearAttention)


def label(name: str, conf_dir: Path = CONF_DIR) -> str:
    """The display label: the first line of the file, `# <label>: ...`, or the name."""
    first = (Path(conf_dir) / "attention" / f"{name}.yaml").read_text().splitlines()[:1]
    if first and first[0].startswith("#") and ":" in first[0]:
        return first[0].lstrip("# ").split(":", 1)[0].strip()
    return name


def load_variant(
    name: str, model: dict | None = None, conf_dir: Path = CONF_DIR
) -> Callable[..., nn.Module]:
    """The factory `(head_dim=..., causal=...) -> nn.Module` that `attention=<name>` gives in
    training. `model`: the values of `model.*` keys the file interpolates (cosFormer's
    max_length)."""
    config = OmegaConf.create({"model": model or {}, "attention": _load(name, Path(conf_dir))})
    return instantiate(config.attention)
