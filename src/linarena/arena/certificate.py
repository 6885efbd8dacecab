"""The certificate of a variant: every generic check the tests make (core_checks for a core,
layer_checks for a whole layer; for a hybrid, each of its distinct variants), run on this
variant alone, one row each with its measured error and tolerance."""

from __future__ import annotations

import time
from pathlib import Path

from linarena.arena.checks import Row, run_check
from linarena.arena.core_checks import core_checks
from linarena.arena.layer_checks import layer_checks
from linarena.attention.variants import CONF_DIR, is_layer

# The long length of the autocast checks: the tests' (8192); a card may ask for a shorter one.
LONG_LENGTH = 8192


def certify(name: str, conf_dir: Path = CONF_DIR, long_length: int = LONG_LENGTH,
            prefix: str = "") -> list[Row]:
    """Every generic check of variant `name` (a file of `conf_dir`/attention/) as a row, the
    check's name after `prefix` (a hybrid's part)."""
    checks = layer_checks(long_length) if is_layer(name, conf_dir) else core_checks(long_length)
    rows = []
    for check, function in checks:
        started = time.monotonic()
        row = run_check(check, lambda function=function: function(name, conf_dir))
        rows.append(Row(prefix + row.check, row.status, row.error, row.tolerance, row.detail))
        print(f"  {row.status} {prefix}{row.check} ({time.monotonic() - started:.1f} s)",
              flush=True)
    return rows


def certify_parts(parts: list[str], conf_dir: Path = CONF_DIR,
                  long_length: int = LONG_LENGTH) -> list[Row]:
    """The rows of each variant of `parts` (one: its own; a hybrid's: prefixed by its name)."""
    if len(parts) == 1:
        return certify(parts[0], conf_dir, long_length)
    return [row for part in parts for row in certify(part, conf_dir, long_length, f"{part}: ")]
