"""A hybrid stack's attentions (model.pattern): one entry per block or a repeated unit, each a
conf/attention/ name or {name: {setting: value}}; the name a run of it is compared by and its
display label."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

from linarena.attention.variants import label, variant_names
from linarena.errors import ConfigError

# A hybrid's name and label: runs of one variant as <name>*<count>, joined by "+", e.g.
# "gated_deltanet*2+softmax" and "Gated DeltaNet ×2 + softmax".
PATTERN_JOIN, PATTERN_TIMES = "+", "*"


def pattern_entry(entry: Any, where: str = "model.pattern") -> tuple[str, dict[str, Any]]:
    """(variant name, settings) of one model.pattern entry: a conf/attention/ name, or a
    one-key mapping {name: {setting: value}} (that variant's file with these settings changed);
    ConfigError for anything else."""
    if isinstance(entry, str):
        return entry, {}
    if isinstance(entry, DictConfig):
        entry = OmegaConf.to_container(entry, resolve=False)
    if isinstance(entry, dict) and len(entry) == 1:
        (name, settings), = entry.items()
        if settings is None or isinstance(settings, dict):
            return str(name), settings or {}
    raise ConfigError(f"{where}={entry!r}: an entry is a conf/attention/ name or one name with "
                      "its settings, e.g. "
                      "model.pattern='[gated_deltanet,{softmax:{dropout:0.1}}]'.")


def pattern_name(layers: Sequence[str]) -> str:
    """The attention name of a model whose blocks use the variants `layers` (one name a block),
    from its shortest repeating unit, e.g. [g, g, s, g, g, s] -> "g*2+s"; one variant in every
    block is that variant's own name."""
    period = next(p for p in range(1, len(layers) + 1)
                  if len(layers) % p == 0 and list(layers[:p]) * (len(layers) // p) == list(layers))
    runs: list[list[Any]] = []
    for name in layers[:period]:
        if runs and runs[-1][0] == name:
            runs[-1][1] += 1
        else:
            runs.append([name, 1])
    return PATTERN_JOIN.join(name if count == 1 else f"{name}{PATTERN_TIMES}{count}"
                             for name, count in runs)


def pattern_label(name: str) -> str:
    """The display label of an attention name: a variant's own (`attention_label`), and for a
    hybrid's (pattern_name) its variants' labels, e.g. "Gated DeltaNet ×2 + softmax"."""
    parts = []
    for part in name.split(PATTERN_JOIN):
        variant, _, count = part.partition(PATTERN_TIMES)
        parts.append(label(variant) + (f" ×{count}" if count else ""))
    return " + ".join(parts)


def is_pattern_name(name: str) -> bool:
    """Whether `name` is a variant's or a hybrid's name made of known variants."""
    known = set(variant_names())
    return all(part.partition(PATTERN_TIMES)[0] in known for part in name.split(PATTERN_JOIN))
