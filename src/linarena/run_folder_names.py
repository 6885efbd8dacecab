"""The name of a run's folder says what ran (conf/hydra/default.yaml: hydra.run.dir and
hydra.sweep.subdir): the attention, then the positions when they are not the default; a hybrid
stack (model.pattern) by its pattern instead of the attention= choice it does not use. Without
it a RoPE run or a hybrid sat in a folder named like the plain softmax run. train.py registers
run_folder_name as the resolver RESOLVER."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

RESOLVER = "linarena.run_folder_name"
# conf/model/transformer.yaml's model.positions (a test keeps the two equal): named only when a
# run has other positions, so the default run's folder keeps its name.
DEFAULT_POSITIONS = "sinusoidal"
# A hybrid's name counts repeats as <name>*<count> (attention.patterns.pattern_name); "*" is a
# wildcard in shells (and not allowed on Windows), so a folder has <name>-x<count>.
FOLDER_TIMES = "-x"
# Anything else outside these characters becomes "-": a folder name safe unquoted in a shell
# and on any file system.
UNSAFE = re.compile(r"[^A-Za-z0-9_.+-]")


def run_folder_name(attention: str, positions: str, pattern: Sequence[Any] | None) -> str:
    """The part of a run's folder name that says what ran, e.g. "softmax", "softmax_rope",
    "pattern-gated_deltanet-x2+softmax"."""
    if pattern is None:
        name = str(attention)
    else:
        # Imported here: the attention package loads torch, which a plain run's folder name
        # (resolved before the job starts) does not need.
        from linarena.attention.patterns import PATTERN_TIMES, pattern_entry, pattern_name

        layers = [pattern_entry(entry)[0] for entry in pattern]
        name = "pattern-" + pattern_name(layers).replace(PATTERN_TIMES, FOLDER_TIMES)
    if positions != DEFAULT_POSITIONS:
        name += f"_{positions}"
    return UNSAFE.sub("-", name)
