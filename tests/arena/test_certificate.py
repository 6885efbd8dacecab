"""The certificate: the generic checks as rows, on a variant defined in a test (a feature map,
a recurrence), on a broken one (FAIL rows naming what broke, the other checks still run), and
on softmax; every shipped variant's certificate is test_shipped_certificates.py (slow)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.arena_variants import conf_dir

from linarena.arena.certificate import certify
from linarena.arena.checks import FAIL, PASS, SKIP, summary_line

LONG = 1024  # the autocast checks: at this length every test variant passes them


@pytest.mark.parametrize("name", ["softplus_map", "decay_core"])
def test_a_variant_added_in_a_test_passes_every_check(name: str, tmp_path: Path) -> None:
    rows = certify(name, conf_dir(tmp_path), LONG)
    assert [r.status for r in rows] == [PASS] * len(rows), [r for r in rows if r.status != PASS]
    measured = [r for r in rows if r.error is not None]
    assert len(measured) >= 10 and all(r.error <= r.tolerance for r in measured)


def test_a_broken_variant_gets_fail_rows_and_a_summary_naming_them(tmp_path: Path) -> None:
    """A map whose stabiliser reads the whole sequence: causal leakage, padding and step()
    fail, with their measured errors; the other checks still run (gradients pass)."""
    rows = {r.check: r for r in certify("leaky_map", conf_dir(tmp_path), LONG)}
    for check in ("causal leakage", "padding (causal)", "step()"):
        assert rows[check].status == FAIL and rows[check].error > rows[check].tolerance, check
    assert rows["gradcheck (causal)"].status == PASS
    line = summary_line(list(rows.values()))
    assert "FAIL (" in line and "causal leakage" in line


def test_a_check_that_raises_is_a_fail_row(tmp_path: Path) -> None:
    """An exception inside a check is reported as its row, not a crash of the card."""
    folder = conf_dir(tmp_path)
    (folder / "attention" / "no_such_class.yaml").write_text(
        "# @package _global_\nattention_label: x\nattention:\n"
        "  _target_: linarena.attention.LinearAttention\n  _partial_: true\n"
        "  feature_map:\n    _target_: helpers.arena_variants.NoSuchMap\n")
    rows = certify("no_such_class", folder, 64)
    assert all(r.status == FAIL for r in rows) and "raised" in rows[0].detail


def test_softmax_skips_the_fixed_state_checks() -> None:
    rows = {r.check: r for r in certify("softmax")}  # 8192 tokens: the tests' length
    assert rows["step()"].status == SKIP and rows["continued state"].status == SKIP
    assert all(r.status != FAIL for r in rows.values())

