"""Position information, one kind per model:
`model.positions=none|sinusoidal|learned|rope|alibi`.

Absolute kinds add a code to the token embedding (`embed`); relative kinds rotate q and k inside
every attention layer (`rotate`) or add a bias to its scores (`score_bias`). The embedding builds
the model's one object of its kind and applies `embed`; the model hands an object whose class
sets `rotates = True` to every attention core at build time (`rotary=`), and each attention
family calls `rotate` once per call, where its docstring says (softmax: before the scores; feature
maps: before the map; recurrences: after their own q, k transforms, before the recurrence). An
object whose class sets `biases = True` goes to every attention as `score_bias=`; only the
attentions that compute the scores q_i . k_j take it (their class sets `takes_score_bias = True`:
softmax and sliding window), and the model refuses any other (check_takes_score_bias).

One file per kind (none.py, sinusoidal.py, learned.py, rope.py, alibi.py), each a subclass of
base.Positions with a `name`; registry.POSITIONS collects every kind of the package, so a new
kind is one such file alone.
"""

from linarena.models.positions.alibi import AlibiPositions, alibi_slopes
from linarena.models.positions.base import Positions
from linarena.models.positions.learned import LearnedPositions
from linarena.models.positions.none import NoPositions
from linarena.models.positions.registry import (
    POSITIONS,
    SCORE_BIAS_ATTENTIONS,
    ScoreBiasRefusedError,
    UnknownPositionsError,
    build_positions,
    check_positions_kind,
    check_takes_score_bias,
)
from linarena.models.positions.rope import ROPE_BASE, RotaryPositions, rotary_cos_sin, rotate_pairs
from linarena.models.positions.sinusoidal import SinusoidalPositions, sinusoidal_table

__all__ = [
    "POSITIONS",
    "ROPE_BASE",
    "SCORE_BIAS_ATTENTIONS",
    "AlibiPositions",
    "LearnedPositions",
    "NoPositions",
    "Positions",
    "RotaryPositions",
    "ScoreBiasRefusedError",
    "SinusoidalPositions",
    "UnknownPositionsError",
    "alibi_slopes",
    "build_positions",
    "check_positions_kind",
    "check_takes_score_bias",
    "rotary_cos_sin",
    "rotate_pairs",
    "sinusoidal_table",
]
