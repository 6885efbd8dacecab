"""Published files are checked before they are published: a damaged CSV or provenance.json is
refused with one line naming the file (and line) and how to fix it, by every reader (issue #29)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from helpers.paths import REPO_ROOT, load_script

from linarena.analysis.provenance import PUBLISHED_DIR, load, record
from linarena.analysis.result_files import ResultFileError, read_csv_checked
from linarena.errors import LinarenaError
from linarena.reports.results_tables import write_tables
from linarena.studies.runs import RUN_COLUMNS, load_archive

BENCH = "benchmark_attention.csv"



@pytest.fixture
def published(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of docs/results and of the results page (which holds the tables), as committed."""
    folder = tmp_path / "results"
    shutil.copytree(PUBLISHED_DIR, folder)
    page = tmp_path / "results.md"
    page.write_text((REPO_ROOT / "docs" / "results.md").read_text())
    return folder, page


def cut_mid_row(path: Path) -> int:
    """Cut the file in the middle of its third line, as an interrupted copy leaves it; returns
    that line's number."""
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:2]) + lines[2][: len(lines[2]) // 2])
    return 3


def test_results_tables_refuses_a_csv_cut_mid_row_and_leaves_the_page(
        published: tuple[Path, Path], capsys: pytest.CaptureFixture) -> None:
    folder, readme = published
    before = readme.read_text()
    line = cut_mid_row(folder / BENCH)
    script = load_script("scripts/maintainer/results_tables.py")
    assert script.main(["--page", str(readme), "--folder", str(folder)]) != 0
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert f"{folder / BENCH}:{line}:" in error and "cut" in error
    assert readme.read_text() == before
    assert script.main(["--page", str(readme), "--folder", str(folder), "--check"]) != 0
    assert f"{folder / BENCH}:{line}:" in capsys.readouterr().err


@pytest.mark.parametrize(("text", "where", "what"), [
    ("a,b\n1,2\n3,4,5\n", ":3:", "3 fields where the header has 2"),
    ("a,b\n1,2\n3\n", ":3:", "1 field where the header has 2"),
    ("a,b\n1,2\n3,4", ":3:", "no newline"),
    ("a,b\n1,x\n", ":2:", "column 'b' is 'x', not a number"),
    ("", "", "empty"),
    ("a\n1\n", ":1:", "no column 'b'"),
])
def test_a_damaged_csv_is_refused_naming_file_and_line(
        tmp_path: Path, text: str, where: str, what: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(ResultFileError, match="restore") as caught:
        read_csv_checked(path, required_columns=["a", "b"], numeric_columns=["a", "b"])
    assert isinstance(caught.value, LinarenaError)
    message = str(caught.value)
    assert message.startswith(f"{path}{where}") and what in message
    assert "damaged" in message or "no column" in message
    assert "\n" not in message


def test_a_csv_read_whole_keeps_blank_cells_as_missing(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("a,b,c\n1,,x\n2,3.5,y\n")
    table = read_csv_checked(path, ["a", "b"], ["a", "b"])
    assert table["a"].tolist() == [1, 2] and pd.isna(table["b"][0]) and table["b"][1] == 3.5


def test_rows_the_provenance_promises_must_be_there(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("a\n1\n2\n3\n")
    record([path], "python make_t.py")
    assert load(tmp_path)["t.csv"]["rows"] == 3
    assert len(read_csv_checked(path, ["a"])) == 3
    path.write_text("a\n1\n2\n")  # cut at a line end: it still parses
    with pytest.raises(ResultFileError, match=r"t\.csv: damaged, 2 rows, but its provenance "
                                              r"record .* promises 3"):
        read_csv_checked(path, ["a"])


def test_a_truncated_provenance_file_names_the_position_and_the_fix(
        published: tuple[Path, Path], capsys: pytest.CaptureFixture) -> None:
    folder, readme = published
    path = folder / "provenance.json"
    path.write_text(path.read_text()[:500])
    with pytest.raises(ResultFileError, match=rf"{path}:\d+:\d+: .*git restore"):
        load(folder)
    script = load_script("scripts/maintainer/results_tables.py")
    assert script.main(["--page", str(readme), "--folder", str(folder), "--check"]) != 0
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and f"{path}:" in error
    assert load_script("scripts/maintainer/provenance.py").main(["--folder", str(folder)]) == 2
    assert capsys.readouterr().err.strip().startswith(f"provenance.py: error: {path}:")
    path.write_text("[1, 2]\n")
    with pytest.raises(ResultFileError, match="not a provenance file"):
        load(folder)


def test_write_tables_refuses_every_kind_of_damaged_source(published: tuple[Path, Path]) -> None:
    folder, readme = published
    (folder / "results.csv").write_text("")
    with pytest.raises(ResultFileError, match=r"results\.csv: damaged, an empty file"):
        write_tables(readme, folder)
    shutil.copyfile(PUBLISHED_DIR / "results.csv", folder / "results.csv")
    study = folder / "mqar_state_size.csv"
    lines = study.read_text().splitlines(keepends=True)
    lines[3] = lines[3].replace(",", ",x,", 1)  # one field too many on line 4
    study.write_text("".join(lines))
    with pytest.raises(ResultFileError, match=r"mqar_state_size\.csv:4: .* fields"):
        write_tables(readme, folder)


def damaged_archive(tmp_path: Path) -> tuple[Path, int]:
    """The committed study runs CSV, cut in the middle of a row."""
    path = tmp_path / "runs.csv"
    shutil.copyfile(PUBLISHED_DIR / "mqar_state_size_runs.csv", path)
    return path, cut_mid_row(path)


def test_a_damaged_study_csv_is_called_damaged_not_another_study(tmp_path: Path) -> None:
    path, line = damaged_archive(tmp_path)
    protocol = {"num_layers": 2, "max_steps": 2000, "vocab_size": 64, "seq_len": 64,
                "num_pairs": 8}
    with pytest.raises(ResultFileError, match=rf"{path}:{line}: damaged, ") as caught:
        load_archive(path, protocol)
    assert "another study" not in str(caught.value)
    runs = pd.read_csv(PUBLISHED_DIR / "mqar_state_size_runs.csv")
    runs.loc[3, "max_steps"] = None  # a blank cell where the protocol needs a value
    runs.to_csv(path, index=False)
    with pytest.raises(ResultFileError,
                       match=rf"{path}:5: damaged, no value in column 'max_steps'"):
        load_archive(path, protocol)
    assert set(RUN_COLUMNS) <= set(runs.columns)


def test_study_scripts_say_a_resumed_csv_is_damaged(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path, line = damaged_archive(tmp_path)
    study = load_script("scripts/mqar_study.py")
    assert study.main(["--report-only", "--root", str(tmp_path / "none"),
                       "--resume-from", str(path)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and f"{path}:{line}: damaged" in error
    assert "another study" not in error
    budget = load_script("scripts/mqar_step_budget.py")
    assert budget.main(["--study", str(path), "--widths", "16", "--max-steps", "4000",
                        "--report-only", "--root", str(tmp_path / "none")]) == 2
    assert f"{path}:{line}:" in capsys.readouterr().err


def test_an_unknown_preset_is_one_line_listing_the_presets(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for name in ("mqar_study", "mqar_step_budget"):
        script = load_script(f"scripts/{name}.py")
        extra = ["--study", "x.csv", "--widths", "16", "--max-steps", "10"] \
            if name == "mqar_step_budget" else []
        # Refused when the arguments are parsed (argparse: its usage line, then one error).
        with pytest.raises(SystemExit) as stopped:
            script.main(["--preset", "nonexistent", "--report-only", "--root", str(tmp_path),
                         *extra])
        assert stopped.value.code == 2
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert "nonexistent" in error and "mqar_study_cpu, mqar_study_gpu" in error
        assert not any(tmp_path.iterdir())  # nothing was written
    study = load_script("scripts/mqar_study.py")
    assert study.main(["--report-only", "--root", str(tmp_path), "study.widths=[16"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "study.widths=[16" in error


def test_replot_refuses_a_damaged_benchmark_csv(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    shutil.copyfile(PUBLISHED_DIR / "benchmark_model.csv", tmp_path / "benchmark_model.csv")
    line = cut_mid_row(tmp_path / "benchmark_model.csv")
    script = load_script("scripts/benchmark_model.py")
    assert script.main(["--replot", "--out", str(tmp_path)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert f"{tmp_path / 'benchmark_model.csv'}:{line}:" in error
    assert not (tmp_path / "benchmark_model.png").exists()


def test_every_committed_csv_reads_whole() -> None:
    for path in sorted(PUBLISHED_DIR.glob("*.csv")):
        assert len(read_csv_checked(path)) > 0, path
    assert json.loads((PUBLISHED_DIR / "provenance.json").read_text()) == load(PUBLISHED_DIR)
