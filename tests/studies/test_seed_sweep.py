"""The small-budget sweeps as a study (linarena.studies.seed_sweep, scripts/seed_sweep.py): every
attention at each seed, more seeds only where the outcomes split, resumable, and every seed's
runs in one sweep for compare.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers.paths import REPO_ROOT, load_script
from helpers.training import compose_config

from linarena.analysis.runs import RunRecord
from linarena.studies import seed_sweep
from linarena.studies.main import study_parser
from linarena.studies.preset import sweep_protocol
from linarena.studies.seed_sweep import SweepPoint, run_sweep, split_attentions
from linarena.training.summary import sweep_label


def finished(root: Path, seed: int, attention: str, test_acc: float) -> None:
    folder = root / SweepPoint(seed).folder_name / attention
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({"metrics": {"test/acc": test_acc}}))


def test_every_seed_of_a_sweep_is_labelled_as_the_one_sweep(tmp_path: Path) -> None:
    """compare.py groups runs by sweep label: seeds in seed<s>/ folders must not be sweeps of
    their own. Each run has a process of its own: its peak memory is its own (training.perf)."""
    root = tmp_path / "sweeps" / "mqar"
    labels = set()
    for seed in (1, 3):
        command, other = SweepPoint(seed).commands("mqar_cpu", ["elu", "softmax"], root)
        assert command[3:5] == ["experiment=mqar_cpu", "attention=elu"]
        assert "attention=softmax" in other
        overrides = [arg for arg in command[3:] if not arg.startswith("hydra.")]
        subdir = next(a for a in command if a.startswith("hydra.sweep.subdir=")).split("=", 1)[1]
        assert f"hydra.sweep.dir={root}" in command
        assert subdir == f"'seed{seed}/elu'"  # quoted for Hydra's override parser
        subdir = subdir.strip("'")
        job = root / f"seed{seed}" / "elu"  # where Hydra puts the run: sweep dir / subdir
        (job / ".hydra").mkdir(parents=True)
        (job / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {
            "mode": "MULTIRUN", "sweep": {"dir": str(root), "subdir": subdir},
            "overrides": {"task": overrides}}}))
        labels.add(sweep_label(compose_config(overrides, output_dir=job)))
    assert labels == {f"{root}: experiment=mqar_cpu"}


def test_without_a_preset_the_sweep_trains_the_default_config(tmp_path: Path) -> None:
    command, = SweepPoint(2).commands(None, ["elu"], tmp_path)
    assert not any(arg.startswith("experiment=") for arg in command)
    assert {"attention=elu", "seed=2"} <= set(command)


def test_only_the_attentions_whose_seeds_split_get_more_seeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcomes = {"softmax": (0.99, 0.99, 0.99), "elu": (0.13, 0.95, 0.12),
                "taylor": (0.12, 0.12, 0.13)}
    trained: list[tuple[int, list[str]]] = []

    def fake_training(tasks, *args, **kwargs) -> None:
        for point, names in tasks:
            trained.append((point.seed, names))
            for name in names:
                finished(tmp_path, point.seed, name, outcomes[name][point.seed - 1]
                         if point.seed <= 3 else 0.5)

    monkeypatch.setattr(seed_sweep, "run_tasks", fake_training)
    finished(tmp_path, 1, "softmax", 0.99)  # a finished run is not trained again
    run_sweep("mqar_cpu", tmp_path, list(outcomes), seeds=[1, 2, 3], more_seeds=[4, 5])
    assert trained == [(1, ["elu", "taylor"]), (2, list(outcomes)), (3, list(outcomes)),
                       (4, ["elu"]), (5, ["elu"])]
    assert split_attentions(tmp_path, list(outcomes), [1, 2, 3]) == ["elu"]
    trained.clear()
    run_sweep("mqar_cpu", tmp_path, list(outcomes), seeds=[1, 2, 3], more_seeds=[4, 5])
    assert trained == []  # resumed: nothing left


def test_more_seeds_that_repeat_seeds_are_refused(capsys: pytest.CaptureFixture) -> None:
    script = load_script("scripts/seed_sweep.py")
    with pytest.raises(SystemExit):
        script.main(["--root", "unused", "--seeds", "1", "2", "--more-seeds", "2", "3"])
    assert "--more-seeds [2, 3] repeats seeds of --seeds [1, 2]" in capsys.readouterr().err


def test_an_unknown_attention_is_a_one_line_error(capsys: pytest.CaptureFixture) -> None:
    script = load_script("scripts/seed_sweep.py")
    assert script.main(["--root", "unused", "--attention", "elu", "performr"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("seed_sweep.py: error: unknown attention variant(s) ['performr']")


def test_an_override_after_attention_is_refused_with_the_fix(
    capsys: pytest.CaptureFixture
) -> None:
    script = load_script("scripts/seed_sweep.py")
    with pytest.raises(SystemExit):
        script.main(["--root", "unused", "--attention", "elu", "trainer.max_steps=20"])
    assert "put the overrides before --attention (or after --)" in capsys.readouterr().err


def archived(seed: int, attention: str, acc: float | None, task: str = "mqar",
             max_steps: int = 1500, sweep: str = "mqar") -> RunRecord:
    """A row of a runs CSV compare.py wrote of a sweep in <...>/<sweep>/ (runs_archive)."""
    return RunRecord(task=task, attention=attention, seed=seed, metrics={"test/acc": acc},
                     source=f"elsewhere/{sweep}/seed{seed}/{attention}/summary.json",
                     max_steps=max_steps)


def test_a_sweep_resumed_from_its_runs_csv_trains_only_what_it_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another session's runs, read back from the runs CSV, count as finished: their accuracies
    decide which attentions split, and only the rest is trained."""
    root = tmp_path / "mqar"
    trained: list[tuple[int, list[str]]] = []

    def fake_training(tasks, *args, **kwargs) -> None:
        for point, names in tasks:
            trained.append((point.seed, names))
            for name in names:
                finished(root, point.seed, name, 0.99 if name == "softmax" else 0.12)

    monkeypatch.setattr(seed_sweep, "run_tasks", fake_training)
    rows = [archived(1, "softmax", 0.99), archived(2, "softmax", 0.99),
            archived(1, "elu", 0.95), archived(2, "elu", None),  # diverged: finished, no recall
            archived(1, "taylor", 0.12, sweep="listops")]  # another sweep's folder: not this one
    runs = seed_sweep.archived_runs(rows, root, "mqar", 1500)
    assert runs == {(1, "softmax"): 0.99, (2, "softmax"): 0.99, (1, "elu"): 0.95,
                    (2, "elu"): None}
    finished(root, 3, "elu", 0.12)
    run_sweep("mqar_cpu", root, ["softmax", "elu", "taylor"], seeds=[1, 2, 3], more_seeds=[4],
              archived=runs)
    assert trained == [(1, ["taylor"]), (2, ["taylor"]), (3, ["softmax", "taylor"]),
                       (4, ["elu"])]  # elu: 0.95 archived against 0.12 trained here, split


def test_an_archived_run_of_another_protocol_is_refused() -> None:
    with pytest.raises(ValueError, match=r"has task mqar, max_steps 300, but the sweep in .* "
                                         r"trains task mqar, max_steps 1500"):
        seed_sweep.archived_runs([archived(1, "elu", 0.9, max_steps=300)], Path("x/mqar"),
                                 "mqar", 1500)


def test_an_archived_run_must_have_the_task_and_budget_a_run_of_the_sweep_records() -> None:
    """summary.json's task is the data choice: what archived_runs compares rows with."""
    assert sweep_protocol(None, ["trainer.max_steps=300", "tags=[readme]"]) == (
        "listops_small", 300)
    assert sweep_protocol("mqar_cpu", ["trainer.max_steps=20"]) == ("mqar", 20)


def sweep_line(function: str, root: str, resume: str) -> list[str]:
    """The command line scripts/maintainer/sweep_commands.sh prints, as run_line splits it."""
    script = REPO_ROOT / "scripts" / "maintainer" / "sweep_commands.sh"
    shown = subprocess.run(["bash", "-c", f'source "{script}"; {function} "$1" "$2"', "-", root,
                            resume], capture_output=True, text=True, check=True).stdout
    return shown.split()


def test_both_maintainer_scripts_train_the_published_sweeps_with_one_definition() -> None:
    """reruns.sh (across sittings) and reproduce_results.sh (publication) must train the same
    runs: both take their command lines from sweep_commands.sh, and those lines are the sweeps
    the README publishes (ListOps at seeds 1-10, MQAR's preset at 1-5 and 6-10 where split)."""
    for name in ("reruns.sh", "reproduce_results.sh"):
        text = (REPO_ROOT / "scripts" / "maintainer" / name).read_text()
        assert "sweep_commands.sh" in text and "run_line" in text and "seed_sweep.py" not in text
    parser = study_parser("seed_sweep", "scripts/seed_sweep.py")
    listops = sweep_line("listops_sweep", "outputs/sweeps", "--resume-from runs.csv")
    assert listops[:2] == ["python", "scripts/seed_sweep.py"]
    args = parser.parse_args(listops[2:])
    assert (args.root, args.preset, args.seeds, args.more_seeds, args.resume_from) == (
        Path("outputs/sweeps/listops"), None, list(range(1, 11)), [], Path("runs.csv"))
    assert args.overrides == ["trainer.max_steps=300", "tags=[readme]"]
    args = parser.parse_args(sweep_line("mqar_sweep", "out", "")[2:])
    assert (args.root, args.preset, args.seeds, args.more_seeds, args.resume_from) == (
        Path("out/mqar"), "mqar_cpu", [1, 2, 3, 4, 5], [6, 7, 8, 9, 10], None)
    assert args.overrides == ["tags=[readme]"]
