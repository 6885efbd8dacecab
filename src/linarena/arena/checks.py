"""What a certificate row is, and how a check becomes one: a check measures an error and
compares it with its tolerance; a check that raises is a FAIL row naming the exception, so a
broken variant is reported, never hidden, and the other checks still run. Also the rows a core's
checks and a layer's checks make alike (autocast, gradcheck), so both are judged by one rule."""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial

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


def mode(causal: bool) -> str:
    """The mode a check's name ends with."""
    return "causal" if causal else "bidirectional"


def autocast_row(length: int, causal: bool, out: Tensor, exact_out: Tensor) -> Row:
    """The autocast check's row: `out` (bf16 autocast) against `exact_out` (float32 of the same
    rounded inputs), max error against 2e-2 and mean error against 3e-3 relative to the
    output's magnitude (at least 1); a non-finite `out` is an infinite error."""
    magnitude = max(exact_out.abs().max().item(), 1.0)
    error = (out.float() - exact_out).abs()
    relative = max(error.max().item() / 2e-2, error.mean().item() / 3e-3) / magnitude
    if not torch.isfinite(out).all():
        relative = float("inf")
    return measured(f"autocast bf16, {length} tokens ({mode(causal)})", relative, 1.0,
                    f"max(max error / 2e-2, mean error / 3e-3) / |out| ({magnitude:.3g}) "
                    "against float32")


def gradcheck_row(causal: bool, function: Callable[..., Tensor], inputs: tuple[Tensor, ...],
                  jacobian: str, note: str = "") -> Row:
    """The gradcheck row: torch.autograd.gradcheck of function(*inputs) in float64 along random
    directions (fast mode), atol 1e-7 and rtol 1e-5 as the tests; the detail names `jacobian`
    (which one is checked) and ends with `note` where given."""
    ok = torch.autograd.gradcheck(function, inputs, fast_mode=True, atol=1e-7, rtol=1e-5,
                                  raise_exception=False)
    detail = f"{jacobian} against finite differences, atol 1e-7, rtol 1e-5"
    return Row(f"gradcheck ({mode(causal)})", PASS if ok else FAIL, None, None,
               f"{detail}, {note}" if note else detail)


def long_checks(autocast_long: Callable[..., Row], gradcheck: Callable[..., Row],
                long_length: int) -> list[tuple[str, Callable[..., Row]]]:
    """(check name, function(name, conf_dir) -> Row) of the autocast check at `long_length`
    and of gradcheck, each bidirectional then causal: the last checks of a core and a layer."""
    found: list[tuple[str, Callable[..., Row]]] = []
    for causal in (False, True):
        found += [(f"autocast bf16, {long_length} tokens ({mode(causal)})",
                   partial(autocast_long, causal=causal, length=long_length)),
                  (f"gradcheck ({mode(causal)})", partial(gradcheck, causal=causal))]
    return found


def summary_line(rows: list[Row]) -> str:
    """'12 PASS, 1 FAIL (padding-causal), 2 SKIP'."""
    failed = [row.check for row in rows if row.status == FAIL]
    counts = {status: sum(row.status == status for row in rows) for status in (PASS, FAIL, SKIP)}
    fail = f"{counts[FAIL]} FAIL" + (f" ({', '.join(failed)})" if failed else "")
    return f"{counts[PASS]} PASS, {fail}, {counts[SKIP]} SKIP"
