"""The one checker of config keys: a key a config node does not accept is a ConfigError that names
it as <group>.<key> with the closest accepted key, before anything is built. Used by the config
checks (config_checks), the pretrain node's (pretrain_config) and the W&B logger's (wandb_run).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from linarena.errors import ConfigError


def check_known_keys(
    keys: Iterable[str],
    accepted: Iterable[str],
    group: str,
    whose: str,
    shown: Iterable[str] | None = None,
) -> None:
    """The one key checker: ConfigError naming each key of `keys` not in `accepted` as
    `<group>.<key>`, with the closest of the `shown` keys (default: all accepted) as "did you
    mean ...?"; `whose` introduces their list, e.g. "lightning.pytorch.Trainer accepts"."""
    valid = list(accepted if shown is None else shown)
    unknown = sorted(set(keys) - set(accepted))
    if unknown:
        hints = [_did_you_mean(key, valid) for key in unknown]
        listed = "; ".join(f"{group}.{key}{hint}" for key, hint in zip(unknown, hints, strict=True))
        raise ConfigError(f"Unknown config key(s): {listed}. {whose}: {', '.join(valid)}.")


def _did_you_mean(key: str, valid: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(valid), n=1)
    return f" (did you mean {close[0]}?)" if close else ""
