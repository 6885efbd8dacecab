"""The README's result tables: a short caption (command, commit, machine, date) once per
record, the full record left in provenance.json, the benchmarks' grid flags shown, and a
one-run command reproducing one published point with its time where the data has it
(issue #29)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pandas as pd
import pytest
from helpers.mqar import PRESET, fake_run
from helpers.paths import load_script
from helpers.training import compose_config

from linarena.analysis.attention_benchmark import parse_args as attention_parse_args
from linarena.analysis.provenance import PUBLISHED_DIR, load
from linarena.analysis.results_captions import shown_command
from linarena.reports.results_tables import TABLES, render

CAPTION = re.compile(r"^<sub>.*</sub>$", re.MULTILINE)



@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A copy of docs/results, to change."""
    copy = tmp_path / "results"
    shutil.copytree(PUBLISHED_DIR, copy)
    return copy


@pytest.mark.parametrize("name", list(TABLES))
def test_every_table_has_one_short_caption_per_record_and_a_one_run_command(name: str) -> None:
    text = render(name)
    captions = CAPTION.findall(text)
    sources = TABLES[name][0]
    records = load(PUBLISHED_DIR)
    commits = {records[source]["commit"][:10] for source in sources}
    assert len(captions) == len({records[s]["command"] for s in sources}), captions
    for caption in captions:
        assert len(caption) < 500, caption
        assert re.search(r"`python scripts/[\w/]+\.py[^`]*`", caption), caption
        assert any(commit in caption for commit in commits)
        # the machine and the date of the record the caption cites
        cited = [records[s] for s in sources if records[s]["commit"][:10] in caption]
        assert any(r["recorded"][:10] in caption and "(cpu, 2 threads)" in caption
                   for r in cited), caption
    for source in sources:  # the long runs commands stay in provenance.json only
        if "; then " in records[source]["command"]:
            assert records[source]["command"] not in text
            assert "--runs-command" not in text and "docs/results/provenance.json" in text
    if name != "default_run":  # that table is one run: the command of its caption
        assert re.search(r"^One run: `([A-Z_]+=\S* )*python (train|scripts/\w+)\.py [^`]+` "
                         r"\(.+\)\.$", text,
                         re.MULTILINE), text


@pytest.mark.parametrize(("name", "lengths"), [
    ("attention", "256,512,1024,2048,4096,8192,16384"),
    ("attention_causal", "256,512,1024,2048,4096,8192,16384"),
    ("model", "1024,2048,4096,8192,16384"),
])
def test_benchmark_captions_show_the_grid_flags(name: str, lengths: str) -> None:
    caption = CAPTION.findall(render(name))[0]
    # the variants the run timed, spelled out, the exact baseline first
    assert re.search(r"--attentions softmax,[a-z0-9_,]+,taylor ", caption), caption
    assert f"--lengths {lengths} " in caption
    assert "einsum_elu" not in caption  # the references are not --attentions


def test_shown_command_keeps_the_report_step_and_inserts_missing_flags() -> None:
    recorded = ("python train.py -m a=1; then python scripts/compare.py --runs r "
                "--runs-command 'python train.py -m a=1' --out d")
    assert shown_command(recorded) == ("python scripts/compare.py --runs r --out d", True)
    flags = ["--attentions", "elu,taylor", "--lengths", "256"]
    assert shown_command("python scripts/benchmark_attention.py --causal", flags) == (
        "python scripts/benchmark_attention.py --attentions elu,taylor --lengths 256 --causal",
        False)
    assert shown_command("python scripts/benchmark_attention.py --variants elu --lengths 64",
                         flags)[0] == "python scripts/benchmark_attention.py --variants elu " \
                                      "--lengths 64"


def test_the_time_of_one_run_is_that_runs_own_on_the_machine_its_row_names(
    folder: Path,
) -> None:
    runs = pd.read_csv(folder / "mqar_state_size_runs.csv")
    runs.drop(columns="duration_s").to_csv(folder / "mqar_state_size_runs.csv", index=False)
    assert "this run took" not in render("mqar_state_size", folder)  # a CSV before durations
    # Each run its own duration: the line gives the shown run's, not a median of others.
    runs.assign(duration_s=[30.0 + i for i in range(len(runs))]).to_csv(
        folder / "mqar_state_size_runs.csv", index=False)
    text = render("mqar_state_size", folder)
    shown = ONE_RUN.search(text)[1]
    row = runs[runs["command"] == shown.replace("seed=", "logger=none seed=", 0)]
    took = re.search(r"this run took (\d+) s on ([^;]+?) \((\w+) kernels\)", text)
    assert took, text
    at = runs.index[runs["command"].str.replace(" logger=none", "") == shown]
    assert len(at) == 1 and int(took[1]) == 30 + at[0], (shown, took[0], row)
    assert (took[2], took[3]) == (runs.loc[at[0], "cpu"], runs.loc[at[0], "cpu_kernels"])
    # ... and says what another CPU reproduces: the point's rate.
    assert re.search(r"what reproduces is the point's rate, \d+/\d+ seeds", text)


def test_report_scripts_keep_each_runs_duration_and_threads(tmp_path: Path) -> None:
    root = tmp_path / "study"
    for seed, seconds in ((1, 40.0), (2, 50.0)):
        summary = fake_run(root, "elu", 16, 3, 3e-3, val=0.9, test=0.9, seed=seed) / "summary.json"
        recorded = json.loads(summary.read_text())
        recorded["machine"]["env"] = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        summary.write_text(json.dumps(recorded | {"duration_s": seconds}))
    out = tmp_path / "out"
    script = load_script("scripts/mqar_study.py")
    assert script.main(["--preset", PRESET, "--root", str(root), "--report-only", "--out",
                        str(out), "study.widths=[16]", "study.short_conv=[3]",
                        "--runs-command", "python scripts/mqar_study.py"]) == 0
    assert pd.read_csv(out / "mqar_state_size_runs.csv")["duration_s"].tolist() == [40.0, 50.0]
    text = render("mqar_state_size", out)
    assert re.search(r"One run: `OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python train.py "
                     r"experiment=mqar_study_cpu attention=elu seed=1 model.d_model=16 "
                     r"model.short_conv=3 optim.lr=0.003` .*this run took 40 s on Test CPU "
                     r"\(AVX2 kernels\)", text), text


ONE_RUN = re.compile(r"^One run: `([^`]+)`", re.MULTILINE)


def test_every_one_run_command_is_one_the_scripts_take() -> None:
    """train.py commands compose (every key exists); script commands parse to one point."""
    commands = [c for name in TABLES for c in ONE_RUN.findall(render(name))]
    # the training table: one per task; the default run's table: none (it is one run)
    assert len(commands) == len(TABLES)
    for command in commands:
        words = shlex.split(command)
        if "train.py" in words:  # the environment its runner set, then train.py
            at = words.index("train.py")
            assert all(re.fullmatch(r"[A-Z_]+=\S*", word) for word in words[:at - 1]), command
            assert compose_config(words[at + 1:]).seed == 1, command
            continue
        module = load_script(words[1])
        parse = getattr(module, "parse_args", None) or attention_parse_args
        args = parse(words[2:])
        assert len(args.lengths) == 1 and len(getattr(args, "attentions", None) or
                                              args.variants) == 1, command


def test_the_training_one_run_line_gives_what_that_seed_published(folder: Path) -> None:
    """The command trains seed 1: its line gives seed 1's own accuracy from the runs CSV (what
    the command reproduces), beside the statistic the table shows, a median for recall."""
    table = pd.read_csv(folder / "results.csv")
    first = table.groupby("task", sort=False).head(1)
    # The published rows (as many as the file's provenance record promises), every seed of
    # each line's attention set to 41.25 + seed, values no table shows.
    runs = pd.read_csv(folder / "results_runs.csv")
    for _, row in first.iterrows():
        line_runs = ((runs["sweep"] == row["sweep"]) & (runs["task"] == row["task"])
                     & (runs["attention"] == row["attention"]))
        runs.loc[line_runs, "test_acc_pct"] = 41.25 + runs.loc[line_runs, "seed"]
    runs.to_csv(folder / "results_runs.csv", index=False)
    text = render("training", folder)
    lines = [line for line in text.splitlines() if line.startswith("One run:")]
    assert len(lines) == len(first)
    for line, (_, row) in zip(lines, first.iterrows(), strict=True):
        assert "seed 1: test accuracy 42.25% in results_runs.csv" in line, line
        if row["task"] == "mqar" and "median_acc" in table.columns:
            assert f"median {100 * row['median_acc']:.1f}%" in line, line
        else:
            assert f"mean {row['test_acc_pct_mean']:.2f}%" in line, line
    (folder / "results_runs.csv").unlink()  # the published sweeps before issue #26 had none
    assert "as the mean of" in render("training", folder)


def test_a_tail_one_run_line_is_its_own_command_with_the_checkpoint_it_continues(
        folder: Path) -> None:
    """A step-budget tail is not the study's command with more steps: its line gives the
    command that trained it (constant lr, the checkpoint it continues, relative to the
    repository) and the accuracy it started from."""
    runs = pd.read_csv(folder / "mqar_step_budget_runs.csv")
    runs.loc[0, "command"] = (
        "python train.py experiment=mqar_study_cpu attention=elu seed=1 optim.lr=0.001 "
        "optim.schedule=constant trainer.max_steps=2000 logger=none "
        "init_weights=/somewhere/repo/outputs/studies/x/d16/elu/checkpoints/last.ckpt")
    runs.loc[0, "start_test_acc"] = 0.4125
    runs.to_csv(folder / "mqar_step_budget_runs.csv", index=False)
    line, = [line for line in render("mqar_step_budget", folder).splitlines()
             if line.startswith("One run:")]
    assert "optim.schedule=constant" in line and "/somewhere" not in line
    assert "init_weights=outputs/studies/x/d16/elu/checkpoints/last.ckpt`" in line
    assert "continuing the study run of the checkpoint it names (test accuracy 41.2%" in line
