"""The kinds model.positions may name, and the checks of a kind against the model: an unknown
kind, or a score bias given to an attention that computes no scores, is refused in one line."""

from __future__ import annotations

import importlib
import pkgutil

import linarena.models.positions as package
from linarena.errors import ConfigError
from linarena.models.positions.base import Positions


class UnknownPositionsError(ConfigError, ValueError):
    """model.positions names no kind of POSITIONS."""


class ScoreBiasRefusedError(ConfigError, ValueError):
    """model.positions adds a bias to the attention scores, and an attention computes none."""


def collect_kinds() -> dict[str, type[Positions]]:
    """Every kind of this package: the Positions subclasses with a `name` defined in its
    modules, by name (none first: the message lists it first). A new kind is its file alone."""
    kinds = {}
    for module in pkgutil.iter_modules(package.__path__):
        namespace = vars(importlib.import_module(f"{package.__name__}.{module.name}"))
        for value in namespace.values():
            if (isinstance(value, type) and issubclass(value, Positions)
                    and value.__module__ == f"{package.__name__}.{module.name}"
                    and "name" in vars(value)):
                kinds[value.name] = value
    return dict(sorted(kinds.items(), key=lambda item: (item[0] != "none", item[0])))


# The kinds model.positions may name. Each is built as kind(d_model, num_positions), so a kind's
# options keep their defaults here.
POSITIONS: dict[str, type[Positions]] = collect_kinds()


def check_positions_kind(kind: object) -> str:
    """`kind` if POSITIONS has it, else UnknownPositionsError listing the kinds."""
    if not isinstance(kind, str) or kind not in POSITIONS:
        raise UnknownPositionsError(
            f"model.positions={kind!r} is not a kind of positions: use one of "
            f"{', '.join(POSITIONS)} ("
            + "; ".join(f"{name}: {cls.description}" for name, cls in POSITIONS.items()) + ")."
        )
    return kind


def build_positions(kind: str, d_model: int, num_positions: int) -> Positions:
    """The object of model.positions=`kind` for an embedding of width d_model over
    num_positions positions."""
    return POSITIONS[check_positions_kind(kind)](d_model, num_positions)


# The attentions (conf/attention/ names) whose class sets takes_score_bias, i.e. that compute the
# scores q_i . k_j; a test checks this list against the conf directory.
SCORE_BIAS_ATTENTIONS = ("softmax", "swa")


def check_takes_score_bias(kind: str, takes: bool, attention: str) -> None:
    """ScoreBiasRefusedError, one line, when model.positions=`kind` biases the attention scores
    and `attention` (as the message names it, e.g. "attention=elu") computes none (`takes`
    False: a feature map, a recurrence or a whole layer has no score matrix to add it to)."""
    if POSITIONS[check_positions_kind(kind)].biases and not takes:
        raise ScoreBiasRefusedError(
            f"model.positions={kind} adds a bias to the attention scores, which {attention} "
            "does not compute (it has no score matrix); only "
            f"{' and '.join(f'attention={name}' for name in SCORE_BIAS_ATTENTIONS)} accept it "
            "(in a model.pattern, every entry must): pick one of those, or "
            "model.positions=rope (q and k rotated in every attention).")
