"""scripts/compare.py (linarena.analysis.compare) on fake summary.json files with known numbers,
and on a summary.json as the first schema version wrote it."""

from __future__ import annotations

import json
import math
import os
import shlex
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from helpers.paths import FIXTURES
from PIL import Image

from linarena.analysis.compare import main
from linarena.analysis.statistics import wilson_interval
from linarena.analysis.wandb_runs import record_from_wandb_run, wandb_filters

# (task, attention) -> per-seed (test/acc, tokens/s, peak MB); params fixed per attention.
RUNS = {
    ("listops", "softmax"): [(0.30, 100.0, 10.0), (0.35, 200.0, 20.0), (0.40, 300.0, 30.0)],
    ("listops", "performer"): [(0.20, 1000.0, 5.0), (0.22, 1100.0, 5.0), (0.24, 1200.0, 8.0)],
    ("text", "softmax"): [(0.60, 50.0, 100.0), (0.62, 70.0, 100.0), (0.64, 60.0, 130.0)],
    ("text", "performer"): [(0.65, 400.0, 40.0)],  # a single seed: no std
}
PARAMS = {"softmax": 1000, "performer": 1256}


def markdown_rows(markdown: str) -> dict[tuple[str, str], dict[str, str]]:
    """The rows of the first Markdown table in `markdown`, by (task, attention), each a dict
    from column header to cell: a test reads cells by name, not by their order."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    header, body = cells[0], [row for row in cells[2:] if len(row) == len(cells[0])]
    return {(row[0], row[1]): dict(zip(header, row, strict=True)) for row in body}


def summary(task: str, attention: str, seed: int, acc: float, tps: float, mem: float) -> dict:
    return {
        "task": task, "attention": attention, "seed": seed,
        "hparams": {"d_model": 64, "num_heads": 2, "num_layers": 1},
        "metrics": {"test/acc": acc, "test/loss": 1.0, "val/acc_best": acc,
                    "perf/tokens_per_sec": tps, "perf/samples_per_sec": tps / 100,
                    "perf/peak_memory_mb": mem, "model/params": PARAMS[attention]},
        "wandb": {"id": None, "dir": None, "url": None, "mode": "disabled"},
        "output_dir": "x", "device": "cpu", "duration_s": 1.0,
    }


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    """multirun/<date>/<job>/summary.json, one sweep nested like Hydra's output folders (as
    written before summaries named their sweep: the folder says which)."""
    job = 0
    for (task, attention), seeds in RUNS.items():
        for seed, (acc, tps, mem) in enumerate(seeds, start=1):
            folder = tmp_path / "multirun" / "2025-01-01" / str(job)
            folder.mkdir(parents=True)
            (folder / "summary.json").write_text(
                json.dumps(summary(task, attention, seed, acc, tps, mem), indent=2))
            job += 1
    (tmp_path / "multirun" / "unrelated.json").write_text("{}")
    return tmp_path / "multirun"


def run_compare(*argv: str) -> int:
    return main([str(a) for a in argv])


def test_table_has_seed_means_and_sample_std(runs_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run_compare("--runs", runs_dir, "--out", out,
                       "--runs-command", "python train.py -m") == 0
    table = pd.read_csv(out / "results.csv").set_index(["task", "attention"])
    assert len(table) == 4
    records = json.loads((out / "provenance.json").read_text())
    assert {"results.csv", "results.md"} <= set(records)
    assert records["results.csv"]["command"].startswith("python train.py -m; then python "
                                                        "scripts/compare.py")
    row = table.loc[("listops", "softmax")]
    assert row["n"] == 3
    assert row["test_acc_pct_mean"] == pytest.approx(35.0)
    assert row["test_acc_pct_std"] == pytest.approx(5.0)  # sample std (ddof=1), in percent
    assert row["tokens_per_sec_mean"] == pytest.approx(200.0)
    assert row["tokens_per_sec_std"] == pytest.approx(100.0)
    assert row["peak_memory_mb_std"] == pytest.approx(10.0)
    assert row["params_mean"] == 1000 and row["params_std"] == 0
    performer = table.loc[("listops", "performer")]
    assert performer["peak_memory_mb_mean"] == pytest.approx(6.0)
    assert performer["peak_memory_mb_std"] == pytest.approx(math.sqrt(3.0))
    single = table.loc[("text", "performer")]
    assert single["n"] == 1 and single["test_acc_pct_mean"] == pytest.approx(65.0)
    assert math.isnan(single["test_acc_pct_std"]) and math.isnan(single["tokens_per_sec_std"])

    markdown = (out / "results.md").read_text()
    rows = markdown_rows(markdown)
    softmax = rows[("listops", "softmax")]
    assert (softmax["n (seeds)"], softmax["test acc (%)"]) == ("3", "35.00 ± 5.00")
    assert (softmax["tokens/s"], softmax["peak memory (MB)"]) == ("200 ± 100", "20.0 ± 10.0")
    # the attention's display label, as in the plots' legends
    performer = rows[("text", "Performer")]
    assert (performer["test acc (%)"], performer["tokens/s"]) == ("65.00", "400")
    assert (performer["peak memory (MB)"], performer["params"]) == ("40.0", "1,256")
    assert "published" not in markdown
    umask = os.umask(0)
    os.umask(umask)
    for name in ("results.csv", "results.md", "scatter_text.png"):  # not tempfile's private 0600
        assert (out / name).stat().st_mode & 0o777 == 0o666 & ~umask
    assert not list(out.glob(".*.tmp"))
    for task in ("listops", "text"):
        with Image.open(out / f"scatter_{task}.png") as image:
            assert image.format == "PNG" and image.width > 100


def test_every_run_is_a_row_and_every_row_a_rate_with_its_interval(
    runs_dir: Path, tmp_path: Path,
) -> None:
    """Issue #26: per-seed numbers have a committed source (results_runs.csv, with the commit
    and machine of each run), and each row of results.csv the seeds at 90% with the rate's
    Wilson interval."""
    first = next(runs_dir.rglob("summary.json"))
    data = json.loads(first.read_text())
    first.write_text(json.dumps(data | {"commit": "c0ffee", "machine": {
        "cpu": "Test CPU", "cpu_kernels": "AVX2"}}))
    out = tmp_path / "out"
    assert run_compare("--runs", runs_dir, "--out", out) == 0
    runs = pd.read_csv(out / "results_runs.csv")
    assert len(runs) == sum(len(seeds) for seeds in RUNS.values())
    assert "results_runs.csv" in json.loads((out / "provenance.json").read_text())
    row = runs.set_index("source").loc[str(first)]
    assert (row["commit"], row["cpu"], row["cpu_kernels"]) == ("c0ffee", "Test CPU", "AVX2")
    assert row["test_acc_pct"] == pytest.approx(100 * data["metrics"]["test/acc"])  # as named
    text = pd.read_csv(out / "results.csv").set_index(["task", "attention"]).loc[
        ("text", "softmax")]
    assert (text["n_seeds"], text["successes"]) == (3, 0)  # 60-64% < 90%
    assert (text["success_ci_low"], text["success_ci_high"]) == pytest.approx(
        wilson_interval(0, 3))
    assert (text["median_acc"], text["min_acc"], text["max_acc"]) == pytest.approx(
        (0.62, 0.60, 0.64))


def test_published_accuracies_are_separate_and_marked(runs_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run_compare("--runs", runs_dir, "--out", out, "--published") == 0
    table = pd.read_csv(out / "results.csv").set_index(["task", "attention"])
    assert table.loc[("listops", "softmax"), "published_test_acc_pct"] == pytest.approx(36.37)
    assert table.loc[("text", "performer"), "published_test_acc_pct"] == pytest.approx(65.40)
    assert "LRA paper" in table.loc[("text", "performer"), "published_source"]
    # the measured numbers are untouched by the published column
    assert table.loc[("listops", "softmax"), "test_acc_pct_mean"] == pytest.approx(35.0)
    assert "published (LRA paper), not measured here" in (out / "results.md").read_text()


def test_filter_selects_runs(runs_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run_compare("--runs", runs_dir, "--out", out, "--filter", "task=text") == 0
    table = pd.read_csv(out / "results.csv")
    assert set(table["task"]) == {"text"}
    assert not (out / "scatter_listops.png").exists()
    assert (out / "scatter_text.png").exists()


def test_a_rerun_of_the_same_setting_keeps_the_last_and_says_so(
    runs_dir: Path, tmp_path: Path, capsys
) -> None:
    copy = runs_dir / "zz-rerun" / "0"
    copy.mkdir(parents=True)
    (copy / "summary.json").write_text(json.dumps(
        {**summary("text", "performer", 1, 0.5, 1, 1), "sweep": "runs"}))
    for folder in runs_dir.glob("2025-01-01/*"):  # the fixture's runs: one sweep, "runs"
        path = folder / "summary.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "sweep": "runs"}))
    assert run_compare("--runs", runs_dir, "--out", tmp_path / "out") == 0
    assert "text/performer/seed 1 in 'runs' ran twice" in capsys.readouterr().out
    table = pd.read_csv(tmp_path / "out" / "results.csv").set_index(["task", "attention"])
    assert table.loc[("text", "performer"), "test_acc_pct_mean"] == pytest.approx(50.0)


def test_malformed_summary_names_file_and_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "summary.json").write_text('{\n  "task": "text",\n  oops\n}')
    assert run_compare("--runs", tmp_path, "--out", tmp_path / "out") == 2
    assert f"{tmp_path / 'summary.json'}:3: malformed JSON" in capsys.readouterr().err


def test_missing_metric_and_missing_folder_are_explained(tmp_path: Path, capsys) -> None:
    broken = summary("text", "softmax", 1, 0.5, 1.0, 1.0)
    del broken["metrics"]["test/acc"]
    (tmp_path / "summary.json").write_text(json.dumps(broken))
    assert run_compare("--runs", tmp_path, "--out", tmp_path / "out") == 2
    assert ("metric 'test/acc' is absent although schema version 1 always has it"
            in capsys.readouterr().err)
    assert run_compare("--runs", tmp_path / "nope", "--out", tmp_path / "out") == 2
    assert "no such folder" in capsys.readouterr().err


def test_wandb_runs_map_to_records_and_filters() -> None:
    run = SimpleNamespace(
        path=["team", "linarena", "abc123"], name="cosformer-s2", group="listops", config={},
        summary={"test/acc": 0.37, "perf/tokens_per_sec": 5000.0, "perf/peak_memory_mb": 300.0,
                 "model/params": 4321},
    )
    record = record_from_wandb_run(run)
    assert (record.task, record.attention, record.seed) == ("listops", "cosformer", 2)
    assert record.metrics["test/acc"] == pytest.approx(0.37)
    assert record.metrics["model/params"] == 4321
    renamed = SimpleNamespace(**{**vars(run), "name": "sweep-7"})
    with pytest.raises(ValueError, match="no task/attention/seed"):
        record_from_wandb_run(renamed)
    renamed.config = {"task": "text", "attention": "elu", "seed": 3}  # as training logs them
    record = record_from_wandb_run(renamed)
    assert (record.task, record.attention, record.seed) == ("text", "elu", 3)
    query = wandb_filters({"group": "text", "tags": "final", "attention": "elu", "seed": 1})
    assert query == {"state": "finished", "group": "text", "tags": {"$in": ["final"]},
                     "config.attention": "elu", "config.seed": 1}


def test_debug_runs_are_left_out_unless_asked_for(runs_dir: Path, tmp_path: Path, capsys) -> None:
    debug = runs_dir / "debug-run"
    debug.mkdir()
    (debug / "summary.json").write_text(json.dumps(
        {**summary("mqar", "softmax", 1, 0.9, 10.0, 1.0), "debug": True}))
    out = tmp_path / "out"
    assert run_compare("--runs", runs_dir, "--out", out) == 0
    assert "mqar" not in set(pd.read_csv(out / "results.csv")["task"])
    assert run_compare("--runs", runs_dir, "--out", out, "--debug") == 0
    assert "mqar" in set(pd.read_csv(out / "results.csv")["task"])
    assert run_compare("--runs", debug, "--out", out) == 2
    assert "debug runs are left out; --debug includes them" in capsys.readouterr().err


def test_published_numbers_only_beside_the_task_they_were_published_for(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "runs"
    for task in ("listops", "listops_small"):
        (runs / task).mkdir(parents=True)
        (runs / task / "summary.json").write_text(json.dumps(
            {**summary(task, "softmax", 1, 0.4, 10.0, 1.0), "sweep": "runs"}))
    out = tmp_path / "out"
    assert run_compare("--runs", runs, "--out", out, "--published") == 0
    table = pd.read_csv(out / "results.csv").set_index("task")
    assert table.loc["listops", "published_test_acc_pct"] == pytest.approx(36.37)
    assert math.isnan(table.loc["listops_small", "published_test_acc_pct"])


def test_a_summary_of_the_first_schema_version_is_read(tmp_path: Path) -> None:
    """tests/fixtures/summary_v1.json was written by train.py before schema_version existed."""
    fixture = json.loads((FIXTURES / "summary_v1.json").read_text())
    assert "schema_version" not in fixture
    run = tmp_path / "runs" / "old"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps(fixture))
    out = tmp_path / "out"
    assert run_compare("--runs", tmp_path / "runs", "--out", out, "--debug") == 0
    row = pd.read_csv(out / "results.csv").iloc[0]
    assert (row["task"], row["attention"], row["n"]) == ("listops_small", "softmax", 1)
    assert row["test_acc_pct_mean"] == pytest.approx(100 * fixture["metrics"]["test/acc"])
    assert row["params_mean"] == fixture["metrics"]["model/params"]


def test_a_diverged_run_is_counted_as_failed_not_dropped(
    runs_dir: Path, tmp_path: Path, capsys
) -> None:
    diverged = runs_dir / "2025-01-01" / "99"
    diverged.mkdir()
    broken = summary("listops", "softmax", 4, 0.0, 1.0, 1.0)
    broken["metrics"]["test/acc"] = None  # NaN, as summary.json writes it
    (diverged / "summary.json").write_text(json.dumps(broken))
    out = tmp_path / "out"
    assert run_compare("--runs", runs_dir, "--out", out) == 0
    printed = capsys.readouterr().out
    assert "1 run(s) failed" in printed and str(diverged / "summary.json") in printed
    table = pd.read_csv(out / "results.csv").set_index(["task", "attention"])
    row = table.loc[("listops", "softmax")]
    assert (row["n"], row["n_failed"]) == (3, 1)
    assert row["test_acc_pct_mean"] == pytest.approx(35.0)  # the mean of the finished runs
    assert table.loc[("text", "softmax"), "n_failed"] == 0
    row = markdown_rows((out / "results.md").read_text())[("listops", "softmax")]
    assert (row["n (seeds)"], row["test acc (%)"]) == ("3", "35.00 ± 5.00")
    assert [value for key, value in row.items() if "failed" in key] == ["1"]


def test_a_metric_is_one_registry_entry(
    runs_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new metric declared once is written to summary.json, compared (column, digits) and
    in the W&B comparison row; summaries older than it still compare when it is optional."""
    from linarena import metrics
    from linarena.training.summary import comparison_row

    new = metrics.Metric("perf/ms_per_step", in_summary=True, name="ms_per_step",
                         column="ms/step", digits=1)
    monkeypatch.setattr(metrics, "METRICS", (*metrics.METRICS, new))
    block = metrics.metrics_block({"perf/ms_per_step": 12.34, "test/acc": 0.5})
    assert block["perf/ms_per_step"] == 12.34
    assert comparison_row({"task": "t", "attention": "a", "seed": 1, "metrics": block}) \
        ["perf/ms_per_step"] == 12.34
    path = runs_dir / "2025-01-01" / "0" / "summary.json"
    one = json.loads(path.read_text())
    one["metrics"]["perf/ms_per_step"] = 12.34
    path.write_text(json.dumps(one))
    out = tmp_path / "out"
    assert run_compare("--runs", runs_dir, "--out", out) == 0
    table = pd.read_csv(out / "results.csv").set_index(["task", "attention"])
    assert table.loc[("listops", "softmax"), "ms_per_step_mean"] == pytest.approx(12.34)
    assert math.isnan(table.loc[("text", "softmax"), "ms_per_step_mean"])  # older summaries
    rows = markdown_rows((out / "results.md").read_text())
    assert rows[("listops", "softmax")]["ms/step"] == "12.3"


def test_a_required_metric_missing_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from linarena import metrics

    new = metrics.Metric("perf/ms_per_step", in_summary=True, required=True,
                         name="ms_per_step", column="ms/step", since=3)
    monkeypatch.setattr(metrics, "METRICS", (*metrics.METRICS, new))
    monkeypatch.setattr("linarena.analysis.runs.SCHEMA_VERSION", 3)
    (tmp_path / "summary.json").write_text(json.dumps(summary("text", "softmax", 1, 0.5, 1.0, 1.0)))
    assert run_compare("--runs", tmp_path, "--out", tmp_path / "out") == 2
    assert ("metric 'perf/ms_per_step' is absent: this summary has schema version 1, older "
            "than the metric (version 3)") in capsys.readouterr().err


def test_a_summary_that_is_not_an_object_is_a_clear_error(tmp_path: Path, capsys) -> None:
    (tmp_path / "summary.json").write_text("[]")
    assert run_compare("--runs", tmp_path, "--out", tmp_path / "out") == 2
    assert "not a linarena summary.json (a JSON list, not an object)" in capsys.readouterr().err


def test_scatter_names_are_numbered_only_for_a_task_several_sweeps_share(tmp_path: Path) -> None:
    """outputs/sweeps/{listops,mqar} (one task each) keep scatter_<task>.png, the names the
    README and the golden cases use; two sweeps of one task get scatter_<number>_<task>.png."""
    sweeps = {"a-listops": "listops", "b-text": "text", "c-listops-again": "listops"}
    for sweep, task in sweeps.items():
        for seed, attention in enumerate(("softmax", "performer"), start=1):
            folder = tmp_path / "sweeps" / sweep / str(seed)
            folder.mkdir(parents=True)
            (folder / "summary.json").write_text(
                json.dumps(summary(task, attention, seed, 0.5, 100.0, 10.0)))
    out = tmp_path / "out"
    assert run_compare("--runs", tmp_path / "sweeps", "--out", out) == 0
    assert sorted(p.name for p in out.glob("scatter_*.png")) == [
        "scatter_1_listops.png", "scatter_3_listops.png", "scatter_text.png"]


def test_a_sweep_outside_the_log_dir_is_named_as_found_not_by_its_absolute_path(
    tmp_path: Path, monkeypatch
) -> None:
    """hydra.sweep.dir=results/sweeps/mqar records the absolute folder in the summary's sweep
    label; the committed table names it as it was found (results/sweeps/mqar), so it holds no
    machine's paths, and the settings after the folder stay."""
    job = tmp_path / "results" / "sweeps" / "mqar" / "0_softmax_s1"
    job.mkdir(parents=True)
    label = f"{job.parent.resolve()}: experiment=mqar_cpu"
    (job / "summary.json").write_text(
        json.dumps({**summary("mqar", "softmax", 1, 0.5, 100.0, 10.0), "sweep": label}))
    monkeypatch.chdir(tmp_path)
    assert run_compare("--runs", "results/sweeps", "--out", "out") == 0
    table = pd.read_csv(tmp_path / "out" / "results.csv")
    assert list(table["sweep"]) == ["results/sweeps/mqar: experiment=mqar_cpu"]


def test_a_note_heads_the_markdown_and_every_plot_title(
        runs_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep still running is published as such (reruns.sh snapshot): --note tops results.md
    and each scatter's title, so a plot copied alone still says it is partial."""
    from matplotlib.axes import Axes

    titles, set_title = [], Axes.set_title

    def recording(self, label, *args, **kwargs):
        titles.append(label)
        return set_title(self, label, *args, **kwargs)

    monkeypatch.setattr(Axes, "set_title", recording)
    out = tmp_path / "out"
    note = "PARTIAL: the runs finished so far"
    assert run_compare("--runs", runs_dir, "--out", out, "--note", note) == 0
    assert (out / "results.md").read_text().startswith(f"**{note}**\n\n|")
    assert len(titles) == 2 and all(title.startswith(f"{note}\n") for title in titles)
    assert run_compare("--runs", runs_dir, "--out", tmp_path / "plain") == 0
    assert (tmp_path / "plain" / "results.md").read_text().startswith("|")
    assert not any(title.startswith(note) for title in titles[2:])


def test_a_run_far_slower_than_its_other_seeds_is_named(
        runs_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A background job on the machine halves a run's tokens/s without touching its accuracy,
    and the row's mean takes it in silently: the run is named so it can be rerun. Seeds of one
    attention differ by up to about 25% on a shared VM, which is no warning."""
    assert run_compare("--runs", runs_dir, "--out", tmp_path / "out") == 0
    warnings = [line for line in capsys.readouterr().out.splitlines()
                if "was the machine busy?" in line]
    # listops/softmax seed 1: 100 tokens/s against 200 and 300 (median 250), 0.40 x.
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("warning: listops/softmax seed 1 (")
    assert "ran at 100 tokens/s, 0.40 x the median of its other seeds" in warnings[0]
    assert "CPU-seconds" not in warnings[0]  # these summaries do not record cpu_s


def test_a_slow_run_is_named_with_the_cpu_time_its_process_had(
        runs_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Where summary.json records cpu_s, the warning says whether the slow run's process was
    starved of CPU (another process shared its cores) beside its other seeds: a measurement,
    not only the tokens/s ratio; runs_table keeps cpu_s per run."""
    for path in runs_dir.rglob("summary.json"):
        summary = json.loads(path.read_text())
        slow = (summary["task"], summary["attention"], summary["seed"]) == ("listops", "softmax", 1)
        path.write_text(json.dumps({**summary, "duration_s": 10.0, "cpu_s": 4.0 if slow else
                                    9.0 + summary["seed"]}))
    assert run_compare("--runs", runs_dir, "--out", tmp_path / "out") == 0
    warnings = [line for line in capsys.readouterr().out.splitlines()
                if "was the machine busy?" in line]
    assert len(warnings) == 1, warnings
    # its other seeds: 11 and 12 CPU-seconds over 10 s, median 1.15
    assert ("Its process had 0.40 CPU-seconds per second of wall time, its other seeds 1.15 "
            "(median).") in warnings[0]
    runs = pd.read_csv(tmp_path / "out" / "results_runs.csv")
    assert sorted(runs.loc[runs["attention"] == "softmax", "cpu_s"]) == [4.0, 10.0, 11.0, 11.0,
                                                                         12.0, 12.0]


def test_a_killed_run_is_listed_with_the_command_that_resumes_it(
    runs_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run folder with checkpoints but no summary.json (killed, or stopped by a signal) cannot
    be compared: the output says which and how to finish it, instead of leaving it out silently."""
    killed = runs_dir / "multirun" / "2025-01-01" / "killed [x] run"
    (killed / "checkpoints").mkdir(parents=True)
    (killed / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert run_compare("--runs", runs_dir, "--out", tmp_path / "out") == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if str(killed) in line]
    assert len(lines) == 1 and "no summary.json" in lines[0], lines
    command = lines[0].split("resume: ", 1)[1]
    assert shlex.split(command) == ["python", "train.py", "ckpt_path=last",
                                    f"hydra.run.dir={killed}"]
