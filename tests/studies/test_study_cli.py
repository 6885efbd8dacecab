"""What every study script shares on its command line (linarena.studies.cli): a bad --jobs,
--threads, --seeds or --preset is refused at once, before any run starts or folder is made."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.paths import load_script

from linarena.studies import study

# Each study script with the arguments it needs besides the one under test (and --root).
SCRIPTS = {
    "scripts/mqar_study.py": ["--out", "out"],
    "scripts/seed_sweep.py": [],
    "scripts/mqar_mixture.py": ["--out", "out"],
    "scripts/mqar_step_budget.py": ["--study", "runs.csv", "--widths", "16", "--max-steps", "10",
                                    "--study-root", "study", "--out", "out"],
    "scripts/maintainer/cross_kernel_check.py": ["--out", "out"],
}
BAD = [("--jobs", "0"), ("--threads", "0"), ("--preset", "nope")]
BAD_SEEDS = [("--seeds", "-1"), ("--more-seeds", "-1")]
CASES = [(script, bad) for script in SCRIPTS for bad in BAD] + [
    ("scripts/seed_sweep.py", bad) for bad in BAD_SEEDS] + [
    ("scripts/maintainer/cross_kernel_check.py", BAD_SEEDS[0])]


@pytest.mark.parametrize(("script", "bad"), CASES)
def test_a_bad_argument_is_refused_before_anything_runs(
        script: str, bad: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    def no_run(*_: object, **__: object) -> int:
        raise AssertionError("a run was started")

    monkeypatch.setattr(study.Children, "call", no_run)
    monkeypatch.chdir(tmp_path)
    argv = [*SCRIPTS[script], "--root", "root", *bad]
    with pytest.raises(SystemExit) as stopped:
        load_script(script).main(argv)
    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"argument {bad[0]}" in error and bad[1] in error, error
    assert list(tmp_path.iterdir()) == []
