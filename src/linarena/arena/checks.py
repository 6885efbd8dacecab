"""What a certificate row is, and how a check becomes one: a check measures an error and
compares it with its tolerance; a check that raises is a FAIL row naming the exception, so a
broken variant is reported, never hidden, and the other checks still run."""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch import Tensor

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


@dataclass(frozen=True)
class Row:
    """One check of one variant: its name, PASS / FAIL / SKIP (not applicable, e.g. step() of
    an attention without a fixed state), the measured error and its tolerance (None where the
    check is not a measured difference, e.g. gradcheck), and one line of detail."""

    check: str
    status: str
    error: float | None
    tolerance: float | None
    detail: str

    @property
    def passed(self) -> bool:
        return self.status != FAIL

    def as_dict(self) -> dict:
        return asdict(self)


def measured(check: str, error: float, tolerance: float, detail: str) -> Row:
    """A row from an error and its tolerance: PASS when error <= tolerance (NaN fails)."""
    ok = not math.isnan(error) and error <= tolerance
    return Row(check, PASS if ok else FAIL, error, tolerance, detail)


def max_error(actual: Tensor, expected: Tensor) -> float:
    """max |actual - expected| over the elements (inf where either is not finite, 0 for none)."""
    if actual.shape != expected.shape:
        raise ValueError(f"shapes differ: {tuple(actual.shape)} against {tuple(expected.shape)}")
    if not actual.numel():
        return 0.0
    difference = (actual.detach().double() - expected.detach().double()).abs()
    return float(torch.where(torch.isfinite(difference), difference, math.inf).max())


def run_check(check: str, function: Callable[[], Row]) -> Row:
    """function() as a row; an exception is a FAIL row naming it and where it was raised."""
    try:
        return function()
    except Exception as error:  # a broken variant is a FAIL row, not a crash of the card
        frame = traceback.extract_tb(error.__traceback__)[-1]
        where = f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}"
        message = " ".join(str(error).split())[:200]
        return Row(check, FAIL, None, None, f"raised {type(error).__name__} at {where}: {message}")


def summary_line(rows: list[Row]) -> str:
    """'12 PASS, 1 FAIL (padding-causal), 2 SKIP'."""
    failed = [row.check for row in rows if row.status == FAIL]
    counts = {status: sum(row.status == status for row in rows) for status in (PASS, FAIL, SKIP)}
    fail = f"{counts[FAIL]} FAIL" + (f" ({', '.join(failed)})" if failed else "")
    return f"{counts[PASS]} PASS, {fail}, {counts[SKIP]} SKIP"
