"""Provenance of docs/results/ (provenance.json) and the README tables made from the CSVs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers.paths import REPO_ROOT, load_script

from linarena import system
from linarena.analysis.provenance import (
    PUBLISHED_DIR,
    command_line,
    load,
    mark_stale,
    problems,
    reads_own_output,
    record,
    trained_by,
    unrecorded,
    with_env,
)
from linarena.reports.results_tables import SUMMARIES, TABLES, default_pages, write_pages
from linarena.system import code_version


def test_every_committed_result_has_a_provenance_record() -> None:
    assert unrecorded(PUBLISHED_DIR) == []
    for name, entry in load(PUBLISHED_DIR).items():
        assert (PUBLISHED_DIR / name).is_file(), f"record for a missing file {name}"
        assert len(entry["commit"]) == 40 and entry["command"], name
        assert {"torch", "device", "threads", "cpu", "gpu"} <= set(entry["environment"]), name


@pytest.mark.skipif(not (REPO_ROOT / ".git").exists(), reason="not a git checkout")
def test_code_version_is_the_checkouts_commit_and_none_outside_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                          text=True, check=True).stdout.strip()
    assert code_version().removesuffix("-dirty") == head
    # An installed copy inside someone else's repository must not claim that repository's commit.
    nested = tmp_path / "site-packages"
    nested.mkdir()
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.setattr(system, "REPO_ROOT", nested)
    assert code_version() is None


def test_record_writes_commit_command_and_environment(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("x\n1\n")
    record([tmp_path / "a.csv"], command_line(REPO_ROOT / "scripts" / "x.py", ["--out", "a b"]))
    entry = load(tmp_path)["a.csv"]
    assert entry["command"] == "python scripts/x.py --out 'a b'"
    assert entry["environment"]["torch"] == torch.__version__
    assert entry["environment"]["threads"] == torch.get_num_threads()
    assert entry["stale"] is None and entry["commit"]
    assert unrecorded(tmp_path) == []
    (tmp_path / "b.png").write_bytes(b"")
    assert unrecorded(tmp_path) == ["b.png"]


def test_a_timing_command_is_led_by_the_threads_settings_it_ran_with(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "ATEN_CPU_CAPABILITY", "MKL_CBWR",
                 "OMP_WAIT_POLICY"):
        monkeypatch.delenv(name, raising=False)
    assert with_env("python x.py") == "python x.py"
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setenv("HOME", "/elsewhere")  # not a setting timings depend on
    assert with_env("python x.py") == "OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE python x.py"


def test_a_stale_mark_needs_a_reason_and_a_record(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("x\n")
    record([tmp_path / "a.csv"], "python make_a.py")
    with pytest.raises(ValueError, match="--reason"):
        mark_stale("a.csv", " ", tmp_path)
    with pytest.raises(ValueError, match="no provenance record"):
        mark_stale("other.csv", "init changed", tmp_path)
    assert mark_stale("a.csv", "init changed", tmp_path)["stale"]["reason"] == "init changed"
    record([tmp_path / "a.csv"], "python make_a.py")  # a rerun clears the mark
    assert load(tmp_path)["a.csv"]["stale"] is None


def test_tables_are_regenerated_with_the_stale_mark(tmp_path: Path) -> None:
    folder = tmp_path / "results"
    shutil.copytree(PUBLISHED_DIR, folder)
    pages = [tmp_path / page.name for page in default_pages()]
    for page, committed in zip(pages, default_pages(), strict=True):
        page.write_text(committed.read_text())
    assert write_pages(pages, folder)  # as committed: nothing changes
    for page, committed in zip(pages, default_pages(), strict=True):
        assert page.read_text() == committed.read_text(), (
            f"{committed} tables differ from docs/results: run "
            "python scripts/maintainer/results_tables.py")
    records = json.loads((folder / "provenance.json").read_text())
    records["results.csv"]["stale"] = {"commit": "f" * 40, "reason": "a new init"}
    (folder / "provenance.json").write_text(json.dumps(records))
    write_pages(pages, folder)
    results = next(page for page in pages if page.name == "results.md").read_text()
    training = results.split("<!-- results:training -->")[1].split("<!-- /results")[0]
    assert "**Stale** (marked at ffffffffff): a new init." in training
    readme = next(page for page in pages if page.name == "README.md").read_text()
    assert "**Stale** (marked at ffffffffff)" in readme  # the summary made from results.csv


def test_every_table_is_on_exactly_one_page_and_the_check_passes() -> None:
    """Each table of TABLES and SUMMARIES has its markers on one page of PAGES, and those pages
    are what docs/results gives (what `results_tables.py --check` runs in CI)."""
    texts = {page: page.read_text() for page in default_pages()}
    for name in [*TABLES, *SUMMARIES]:
        holders = [page for page, text in texts.items() if f"<!-- results:{name} -->" in text]
        assert len(holders) == 1, (name, holders)
    assert "<!-- results:headline -->" in texts[REPO_ROOT / "README.md"]
    script = load_script("scripts/maintainer/results_tables.py")
    assert script.main(["--check"]) == 0


def test_a_table_says_where_its_runs_were_trained_and_names_a_dirty_tree() -> None:
    """Issue #26 item 5: the commits (a dirty one named), the machines, counted per run (a
    mixture run has a row per test setting)."""
    clean, dirty = "a" * 40, "b" * 40 + "-dirty"
    runs = pd.DataFrame({
        "run": ["s1/elu", "s1/elu", "s2/elu", "s3/elu"],
        "commit": [clean, clean, dirty, None],
        "cpu": ["AMD EPYC", "AMD EPYC", "Intel Xeon", None],
        "cpu_kernels": ["AVX512", "AVX512", "AVX2", None]})
    assert trained_by(runs) == (
        "Trained at aaaaaaaaaa (1 run), bbbbbbbbbb-dirty (1 run), an unrecorded commit (1 run); "
        "on AMD EPYC, AVX512 kernels (1 run), Intel Xeon, AVX2 kernels (1 run), an unrecorded "
        "machine (1 run); from a tree with uncommitted changes: bbbbbbbbbb-dirty (1 run).")
    assert trained_by(runs.iloc[:1]).endswith("uncommitted changes: none.")


def provenance_check(folder: Path) -> tuple[int, str]:
    """`provenance.py --check --folder folder`: (exit status, what it printed on stderr)."""
    done = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "maintainer" /
                                               "provenance.py"), "--check", "--folder",
                           str(folder)], capture_output=True, text=True, check=False)
    return done.returncode, done.stderr


def test_the_check_names_a_value_edited_after_the_file_was_recorded(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("attention,acc\nelu,0.51\n")
    record([tmp_path / "a.csv"], "python scripts/make_a.py --out " + str(tmp_path))
    assert provenance_check(tmp_path) == (0, "")
    # Same rows, same columns, one value changed: only a checksum can tell.
    (tmp_path / "a.csv").write_text("attention,acc\nelu,0.61\n")
    status, said = provenance_check(tmp_path)
    assert status == 1 and "a.csv: changed after it was recorded" in said


def test_the_check_refuses_a_record_whose_command_only_reads_its_own_file(tmp_path: Path) -> None:
    (tmp_path / "s_runs.csv").write_text("run,acc\nr1,0.5\n")
    rewrite = f"python scripts/mqar_study.py --report-only --resume-from {tmp_path}/s_runs.csv"
    record([tmp_path / "s_runs.csv"], rewrite)
    status, said = provenance_check(tmp_path)
    assert status == 1 and "s_runs.csv: its record's command only reads the file it made" in said
    # With the command that trained the runs before it, the record leads back to training; a
    # later rewrite from itself keeps that training part.
    trained = "python scripts/mqar_study.py --jobs 2"
    record([tmp_path / "s_runs.csv"], f"{trained}; then {rewrite}")
    assert provenance_check(tmp_path) == (0, "")
    record([tmp_path / "s_runs.csv"], rewrite + " --name s")
    assert load(tmp_path)["s_runs.csv"]["command"] == f"{trained}; then {rewrite} --name s"
    # What a command writes (--out) is not what it reads.
    assert not reads_own_output("b.csv", f"python make.py --out {tmp_path}/b.csv")


def test_every_published_record_leads_back_to_training_and_matches_its_file() -> None:
    assert problems(PUBLISHED_DIR) == []
