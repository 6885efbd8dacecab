"""The one runner and report of every study (linarena.studies.study): the to-do list from the
grid's tasks, resumed from run folders and from an archive, and the report's files with their
provenance records."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from helpers.mqar import fake_run

from linarena.studies.study import StudyPoint, group_tasks, pending, write_report


def test_attentions_at_one_point_share_a_task_in_first_seen_order() -> None:
    a, b = StudyPoint(16, 3, 1e-2, 1), StudyPoint(32, 0, 1e-3, 2)
    tasks = group_tasks([(a, "elu"), (b, "softmax"), (a, "taylor")])
    assert tasks == [(a, ["elu", "taylor"]), (b, ["softmax"])]


def test_the_to_do_list_skips_finished_and_archived_runs(tmp_path: Path) -> None:
    fake_run(tmp_path, "elu", 16, 3, 1e-2, val=0.5, test=0.5)
    here, other = StudyPoint(16, 3, 1e-2, 1), StudyPoint(32, 3, 1e-2, 1)
    tasks = [(here, ["elu", "softmax"]), (other, ["elu"])]
    assert pending(tasks, tmp_path, frozenset()) == [(here, ["softmax"]), (other, ["elu"])]
    archived = frozenset({f"{other.folder_name}/elu", f"{here.folder_name}/softmax"})
    assert pending(tasks, tmp_path, archived) == []


def test_the_report_writes_each_file_whole_with_its_provenance(tmp_path: Path) -> None:
    table = pd.DataFrame({"attention": ["elu", "softmax"], "n_seeds": [3, 3]})
    paths = write_report(tmp_path / "out", "study", {
        ".csv": table, ".md": "| a |\n", ".txt": lambda path: path.write_text("drawn\n"),
    }, "python scripts/some_study.py --report-only")
    assert [path.name for path in paths] == ["study.csv", "study.md", "study.txt"]
    assert pd.read_csv(paths[0]).equals(table) and paths[2].read_text() == "drawn\n"
    records = json.loads((tmp_path / "out" / "provenance.json").read_text())
    assert set(records) == {"study.csv", "study.md", "study.txt"}
    assert records["study.csv"]["rows"] == 2
    assert records["study.md"]["command"] == "python scripts/some_study.py --report-only"
