"""What a card is about: a variant of conf/attention/ (`attention=<name>`, a core or a whole
layer) or a hybrid (`model.pattern=[...]`), named as the studies name its runs, with the
train.py overrides that select it and the conf folder its file is in."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from linarena.attention.patterns import pattern_entry, pattern_name
from linarena.attention.variants import CONF_DIR, check_variant_names, owns_short_conv


@dataclass(frozen=True)
class Subject:
    """name: the attention name of its runs (a variant's, or patterns.pattern_name of a
    hybrid's blocks); parts: its distinct variants; overrides: train.py overrides every run of
    it takes beyond attention=<name> (a hybrid's model.pattern, a setting); conf_dir: the
    conf folder its variants' files are in (searched after conf/ by its train.py runs)."""

    name: str
    parts: tuple[str, ...]
    overrides: tuple[str, ...] = ()
    conf_dir: Path = CONF_DIR

    def trains_at(self, short_conv: int) -> bool:
        """Whether the state-size study trains it at `short_conv` (a model with a layer that
        owns its short convolutions only without the model's, state_size.trains_at)."""
        return short_conv == 0 or not any(owns_short_conv(p, self.conf_dir) for p in self.parts)


def parse_subject(overrides: Sequence[str], conf_dir: Path = CONF_DIR) -> Subject:
    """The subject of `overrides`: exactly one of attention=<name> or model.pattern=[...],
    and optionally attention.* settings of the variant (study.* ones are the grid's, left
    out here); a ValueError saying what to write."""
    chosen = [o for o in overrides if o.startswith(("attention=", "model.pattern="))]
    others = [o for o in overrides if o not in chosen and not o.startswith("study.")]
    if len(chosen) != 1:
        raise ValueError("name the variant once: attention=<a file of conf/attention/> or "
                         "model.pattern='[gated_deltanet,softmax]' (a hybrid), got "
                         f"{chosen or 'neither'}")
    unknown = [o for o in others if not o.startswith("attention.")]
    if unknown:
        raise ValueError(f"{unknown[0]}: only attention.<setting>=<value> (and study.* of the "
                         "state-size grid) may follow the variant; the card's protocols set "
                         "everything else")
    key, _, value = chosen[0].partition("=")
    if key == "attention":
        check_variant_names([value], conf_dir)
        return Subject(value, (value,), tuple(others), conf_dir)
    entries = OmegaConf.create({"pattern": OmegaConf.to_object(
        OmegaConf.from_dotlist([f"pattern={value}"]))["pattern"]})["pattern"]
    if not entries:
        raise ValueError(f"{chosen[0]}: an empty pattern; list at least one variant")
    names = [pattern_entry(entry)[0] for entry in entries]
    check_variant_names(names, conf_dir)
    return Subject(pattern_name(names), tuple(dict.fromkeys(names)), (chosen[0], *others),
                   conf_dir)
