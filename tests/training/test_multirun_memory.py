"""scripts/maintainer/multirun_memory.py: the table that says how much of a CPU peak under
`train.py -m` an earlier job left, per checkout (the training itself is the real train.py's)."""

from __future__ import annotations

from pathlib import Path

from helpers.paths import load_script

from linarena.analysis.provenance import load


def test_one_row_per_checkout_and_run_with_provenance(tmp_path: Path, monkeypatch) -> None:
    script = load_script("scripts/maintainer/multirun_memory.py")
    trained: list[tuple[str, list[str]]] = []

    def peak_mb(code: Path, attentions: list[str], steps: int, folder: Path) -> dict:
        trained.append((code.name, attentions))
        return {name: 100.0 * (index + 1) for index, name in enumerate(attentions)}

    monkeypatch.setattr(script, "peak_mb", peak_mb)
    monkeypatch.setattr(script, "commit_of", lambda code: f"{code.name}-commit")
    assert script.main(["--code", str(tmp_path / "old"), str(tmp_path / "new"), "--first", "gla",
                        "--then", "elu", "--out", str(tmp_path / "out")]) == 0
    assert trained == [("old", ["elu"]), ("old", ["gla", "elu"]), ("new", ["elu"]),
                       ("new", ["gla", "elu"])]
    table = (tmp_path / "out" / "multirun_memory.csv").read_text().splitlines()
    assert table[0] == "code_commit,attention,process,peak_memory_mb,steps"
    assert table[1:4] == ["old-commit,elu,alone,100.0,30", "old-commit,gla,first of -m,100.0,30",
                          "old-commit,elu,after gla,200.0,30"]
    assert "multirun_memory.csv" in load(tmp_path / "out")
