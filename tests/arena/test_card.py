"""The card end to end: python -m linarena.arena on a variant added in a test writes the
Markdown and the self-contained HTML with its provenance record, a second call reuses the
finished work, a bad command is one line, and (slow) the training sections run on a tiny grid
through train.py and are compared with the published rows."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers.arena_variants import conf_dir
from helpers.paths import REPO_ROOT as REPO

from linarena.arena import main as arena

QUICK = ["--sections", "certificate", "cost", "--lengths", "64", "128", "--repeats", "1",
         "--long-length", "1024"]


def card(tmp_path: Path, name: str, *options: str) -> int:
    return arena.main([f"attention={name}", *QUICK, *options, "--root",
                       str(tmp_path / "work")], conf_dir(tmp_path / "conf"))


def test_the_card_of_a_test_variant_is_markdown_and_one_html_page(tmp_path: Path) -> None:
    assert card(tmp_path, "softplus_map") == 0
    work = tmp_path / "work"
    text = (work / "softplus_map_card.md").read_text()
    first = text.splitlines()[2]
    assert first.startswith("What it shows: certificate, cost of `softplus_map`")
    assert "Certificate: 13 PASS, 0 FAIL" in first and "Cost:" in first
    assert "| float64 reference (bidirectional) | PASS |" in text
    assert "| N | fwd+bwd ms | softmax ms | elu+1 ms |" in text
    page = (work / "softplus_map_card.html").read_text()
    assert "<table>" in page and "http" not in page.replace("http-equiv", "")
    records = json.loads((work / "provenance.json").read_text())
    # the command, led by the threads' settings the cost was timed with
    environment, _, command = records["softplus_map_card.md"]["command"].partition("python ")
    assert command.startswith("-m linarena.arena attention=softplus_map")
    assert all("=" in setting for setting in environment.split())


def test_a_broken_variant_gets_a_card_that_says_so(tmp_path: Path) -> None:
    """The certificate's FAIL rows and the summary in the first lines; exit status 1; the other
    sections still run unless --strict."""
    assert card(tmp_path, "leaky_map") == 1
    text = (tmp_path / "work" / "leaky_map_card.md").read_text()
    assert "FAIL (" in text.splitlines()[2] and "causal leakage" in text.splitlines()[2]
    assert "| causal leakage | **FAIL** |" in text and "## Cost" in text
    assert card(tmp_path, "leaky_map", "--strict") == 1
    text = (tmp_path / "work" / "leaky_map_card.md").read_text()
    assert "## Cost" not in text and "--strict" in text


def test_a_second_call_reuses_the_finished_work(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    assert card(tmp_path, "decay_core") == 0

    def refuse(*args, **kwargs):
        raise AssertionError("finished work was done again")

    monkeypatch.setattr(arena, "certify_parts", refuse)
    monkeypatch.setattr(arena, "time_variants", refuse)
    assert card(tmp_path, "decay_core") == 0


def test_a_bad_command_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert arena.main(["data=mqar", "--root", str(tmp_path)]) == 2
    assert "name the variant once" in capsys.readouterr().err
    assert arena.main(["attention=hgrn2_layer", "--budget", "full", "--max-hours", "0.1",
                       "--root", str(tmp_path)]) == 2
    assert "more than --max-hours 0.1" in capsys.readouterr().err
    assert arena.main(["attention=elu", "study.lr=[0.1]", "--root", str(tmp_path)]) == 2
    assert "study.lr=[0.1]: the state-size grid takes study.{widths," in capsys.readouterr().err


def test_the_plan_counts_the_mixture_runs_and_their_more_seeds(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert arena.main(["attention=elu", "--sections", "mixture", "--plan", "--root",
                       str(tmp_path)]) == 0
    # none and rope at seeds 1-5, and at most seeds 6-10 of each where they split
    assert "mixture: 10 to 20 runs, about " in capsys.readouterr().out
    assert arena.main(["attention=elu", "--sections", "mixture", "--plan", "--root",
                       str(tmp_path), "study.positions=[none]", "study.seeds=[1]",
                       "study.more_seeds=[]"]) == 0
    assert "mixture: 1 runs, about " in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("name", ["softplus_map", "decay_core"])
def test_the_training_sections_run_and_resume(name: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture) -> None:
    """One state-size run (d_model 16, no conv, one lr, one seed), one ListOps seed and one
    mixture run (no positions), through train.py; the card compares them with the published
    rows; a second call trains nothing."""
    import linarena.studies.runs as study_runs

    label = study_runs.pattern_label
    monkeypatch.setattr(study_runs, "pattern_label",
                        lambda a: a if a == name else label(a))  # its label is in the test conf
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO / "tests"), str(REPO / "src")]))
    options = ["--sections", "state_size", "listops", "mixture", "--widths", "16",
               "--short-conv", "0", "--listops-seeds", "1", "--jobs", "1", "study.lrs=[0.01]",
               "study.seeds=[1]", "study.lr_seeds=[1]", "study.more_seeds=[]",
               "study.positions=[none]"]
    assert arena.main([f"attention={name}", *options, "--root", str(tmp_path / "work")],
                      conf_dir(tmp_path / "conf")) == 0
    text = (tmp_path / "work" / f"{name}_card.md").read_text()
    assert "### d_model 16, short conv off: " in text and "| softmax |" in text
    assert "## Small-budget ListOps" in text and "| elu+1 | 10 |" in text
    assert "### Beyond the training lengths, positions none: this variant L128 P32 †" in text
    assert ("study.lrs=[0.01] study.seeds=[1] study.lr_seeds=[1] study.more_seeds=[] "
            "study.positions=[none]),") in text  # each once
    for run in ("state_size/d16_conv0_lr1.00e-02_seed1", "listops/seed1", "mixture/none_seed1"):
        overrides = (tmp_path / "work" / run / name / ".hydra" / "overrides.yaml").read_text()
        assert f"attention={name}" in overrides, run
    capsys.readouterr()
    assert arena.main([f"attention={name}", *options, "--root", str(tmp_path / "work")],
                      conf_dir(tmp_path / "conf")) == 0
    out = capsys.readouterr().out
    assert "listops: 0 runs to go" in out and "every lr: 0 runs to go" in out
    assert "mixture: 0 runs to go" in out
