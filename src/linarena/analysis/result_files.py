"""The one reader of the files results are published from: a CSV is read whole or refused.

Every reader of a results CSV (scripts/maintainer/results_tables.py, the report scripts'
--resume-from and --study files, benchmark_model.py --replot, the W&B dashboard, the golden runs)
goes through :func:`read_csv_checked`, and provenance.json through :func:`read_provenance`. A
file that does not parse completely (a row with the wrong number of fields, a last line cut
without its newline, a word where a number belongs, an empty file) or that holds fewer or more
rows than its provenance record promises is a :class:`ResultFileError`: one line naming the file
and line and saying how to get a whole copy back.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from linarena.errors import LinarenaError

PROVENANCE_FILE = "provenance.json"


class ResultFileError(LinarenaError, ValueError):
    """A results file is damaged or is not what its reader needs; the message names the file
    (and line) and how to fix it. A ValueError too, for callers that catch bad input as one."""


def _restore(path: Path) -> str:
    """How to get a whole copy of `path` back."""
    return (f"restore it (`git restore {path}` for a committed file) or rerun the command that "
            f"wrote it (`python scripts/maintainer/provenance.py --folder {path.parent}` lists "
            "them)")


def read_provenance(folder: Path) -> dict[str, dict[str, Any]]:
    """The records of `folder`/provenance.json ({} when there is none): an object of one object
    per file, each with its "command"."""
    path = folder / PROVENANCE_FILE
    if not path.is_file():
        return {}
    fix = (f"restore it with `git restore {path}` (the scripts that write results add their "
           "records again when rerun: bash scripts/maintainer/reproduce_results.sh)")
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ResultFileError(f"{path}:{error.lineno}:{error.colno}: damaged JSON ({error.msg}; "
                              f"cut while being written?): {fix}") from error
    except UnicodeDecodeError as error:
        raise ResultFileError(f"{path}: not text (byte {error.start}): {fix}") from error
    if not isinstance(records, dict) or not all(
            isinstance(entry, dict) and isinstance(entry.get("command"), str)
            for entry in records.values()):
        raise ResultFileError(f"{path}: not a provenance file (an object of records, each with "
                              f"its command): {fix}")
    return records


def _parse(path: Path) -> tuple[str, list[str], list[tuple[int, list[str]]]]:
    """(text, header, [(line number, fields)] of the data rows); blank lines are skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as error:
        raise ResultFileError(f"{path}: no such file; check the path, or make it with the "
                              "script that writes it") from error
    except UnicodeDecodeError as error:
        raise ResultFileError(f"{path}: not a text CSV (byte {error.start}): "
                              f"{_restore(path)}") from error
    if not text.strip():
        raise ResultFileError(f"{path}: damaged, an empty file: {_restore(path)}")
    reader = csv.reader(io.StringIO(text, newline=""))
    records: list[tuple[int, list[str]]] = []
    try:
        for fields in reader:
            if fields:
                records.append((reader.line_num, fields))
    except csv.Error as error:
        raise ResultFileError(f"{path}:{reader.line_num}: damaged, not CSV ({error}): "
                              f"{_restore(path)}") from error
    (_, header), rows = records[0], records[1:]
    for number, fields in rows:
        if len(fields) != len(header):
            plural = "" if len(fields) == 1 else "s"
            raise ResultFileError(f"{path}:{number}: damaged, {len(fields)} field{plural} "
                                  f"where the header has {len(header)} (cut or edited?): "
                                  f"{_restore(path)}")
    if not text.endswith(("\n", "\r")):
        raise ResultFileError(f"{path}:{records[-1][0]}: damaged, the last line has no newline: "
                              f"the file was cut while being written: {_restore(path)}")
    return text, header, rows


def count_rows(path: Path) -> int:
    """The data rows of a CSV that parses whole (what its provenance record promises)."""
    return len(_parse(path)[2])


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_csv_checked(path: Path, required_columns: Iterable[str] = (),
                     numeric_columns: Iterable[str] = (),
                     filled_columns: Iterable[str] = ()) -> pd.DataFrame:
    """The CSV at `path` as a DataFrame, after checking that it parses whole, has the
    `required_columns`, a number (or nothing) in every cell of the `numeric_columns` it has, a
    value in every cell of the `filled_columns` it has, and as many rows as the record of its
    folder's provenance.json promises (when the record says). Raises ResultFileError."""
    path = Path(path)
    text, header, rows = _parse(path)
    absent = [column for column in required_columns if column not in header]
    if absent:
        raise ResultFileError(f"{path}:1: no column {absent[0]!r} (it has {', '.join(header)}): "
                              f"not the file this reads, or {_restore(path)}")
    index = {column: position for position, column in enumerate(header)}
    numeric = [column for column in numeric_columns if column in index]
    filled = [column for column in filled_columns if column in index]
    for number, fields in rows:
        for column in filled:
            if not fields[index[column]].strip():
                raise ResultFileError(f"{path}:{number}: damaged, no value in column {column!r}: "
                                      f"{_restore(path)}")
        for column in numeric:
            value = fields[index[column]]
            if value.strip() and not _is_number(value):
                raise ResultFileError(f"{path}:{number}: damaged, column {column!r} is {value!r}, "
                                      f"not a number: {_restore(path)}")
    promised = read_provenance(path.parent).get(path.name, {}).get("rows")
    if promised is not None and promised != len(rows):
        raise ResultFileError(f"{path}: damaged, {len(rows)} rows, but its provenance record "
                              f"({path.parent / PROVENANCE_FILE}) promises {promised}: the file "
                              f"changed after it was written: {_restore(path)}")
    return pd.read_csv(io.StringIO(text))
