"""A hybrid stack's model.pattern, as config: each entry's attention settings, read from its
conf/attention/<name>.yaml. Config only, nothing is built: the check step (config_checks) and the
build step (build) both read the pattern through `pattern_attentions`."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf, open_dict

from linarena.attention.patterns import pattern_entry
from linarena.attention.variants import check_variant_names, composed_conf_dir
from linarena.errors import ConfigError


def pattern_attentions(cfg: DictConfig) -> list[tuple[str, DictConfig]] | None:
    """(variant name, attention config) of each entry of model.pattern; None without a pattern.

    An entry's config is the `attention` of its conf/attention/<name>.yaml with the entry's own
    settings merged over it, written back into `cfg` as {name: config}: its interpolations
    (${model.d_model}, ${oc.select:attention_dropout,...}) resolve in the run's config, the run
    records every setting it built with, and a second call gives the same."""
    pattern = cfg.model.get("pattern")
    if pattern is None:
        return None
    entries = [pattern_entry(entry, f"model.pattern[{i}]") for i, entry in enumerate(pattern)]
    conf_dir = composed_conf_dir()
    try:
        check_variant_names((name for name, _ in entries), conf_dir)
    except ValueError as err:
        raise ConfigError(f"model.pattern: {err}") from err
    with open_dict(cfg.model):
        cfg.model.pattern = [
            {name: OmegaConf.merge(OmegaConf.load(conf_dir / "attention" / f"{name}.yaml")
                                   .attention, settings)}
            for name, settings in entries]
    return [(name, cfg.model.pattern[i][name]) for i, (name, _) in enumerate(entries)]
