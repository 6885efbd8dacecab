"""Every shipped variant of conf/attention/ through the card's certificate, as
`python -m linarena.arena attention=<name>` makes it (the subject's parts, certify_parts at
the card's autocast length): no row fails. Slow (the autocast checks at 8192 tokens and the
layers' gradchecks: 2 to 25 s a variant, about 3.5 minutes for all on a busy 2-core machine),
so kept to -m slow."""

from __future__ import annotations

import time

import pytest

from linarena.arena.certificate import LONG_LENGTH, certify_parts
from linarena.arena.checks import FAIL, Row, summary_line
from linarena.arena.subject import parse_subject
from linarena.attention.variants import variant_names


def _failure(name: str, row: Row) -> str:
    """One line a failed row: the variant, the check, the measured error against its
    tolerance (none for gradcheck or a check that raised), and the row's detail."""
    return (f"{name}: {row.check}: error {row.error!r} against tolerance {row.tolerance!r} "
            f"({row.detail})")


@pytest.mark.slow
@pytest.mark.parametrize("name", variant_names())
def test_every_shipped_variant_passes_the_cards_certificate(name: str) -> None:
    subject = parse_subject([f"attention={name}"])
    started = time.monotonic()
    rows = certify_parts(list(subject.parts), subject.conf_dir, LONG_LENGTH)
    print(f"{name}: {summary_line(rows)} in {time.monotonic() - started:.0f} s")
    assert rows
    failed = [_failure(name, row) for row in rows if row.status == FAIL]
    assert not failed, "\n".join(failed)
