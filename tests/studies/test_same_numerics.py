"""scripts/maintainer/same_numerics.py: the check that a study's runs, trained at an older
commit, stand for the current code (the same weights, bit for bit)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers.paths import load_script

SCRIPT = load_script("scripts/maintainer/same_numerics.py")


def test_one_ulp_anywhere_in_the_weights_is_a_difference() -> None:
    weights = {"w": torch.ones(3), "extra": {"features": torch.zeros(2), "step": 4}}
    assert SCRIPT.compare(weights, {"w": torch.ones(3),
                                    "extra": {"features": torch.zeros(2), "step": 4}}) == (True, 0)
    nudged = torch.ones(3)
    nudged[1] = torch.nextafter(torch.tensor(1.0), torch.tensor(2.0))
    same, diff = SCRIPT.compare(weights, {**weights, "w": nudged})
    assert not same and 0 < diff < 1e-6
    hidden = {"w": torch.ones(3), "extra": {"features": torch.tensor([0.0, 1e-30]), "step": 4}}
    assert not SCRIPT.compare(weights, hidden)[0]  # inside a module's extra state too
    assert not SCRIPT.compare(weights, {**weights, "w": torch.ones(3, dtype=torch.float64)})[0]
    assert not SCRIPT.compare(weights, {"w": torch.ones(3)})[0]  # a missing entry


@pytest.mark.slow
def test_the_checkout_trains_the_same_bits_as_its_own_head(tmp_path: Path) -> None:
    assert SCRIPT.main(["--base", "HEAD", "--attention", "elu", "--steps", "2",
                        "--out", str(tmp_path)]) == 0
    table = pd.read_csv(tmp_path / "same_numerics.csv")
    assert table["identical"].all() and "elu" in set(table["attention"])


def test_a_mixture_preset_is_checked_as_the_mixture_trains_it(tmp_path: Path) -> None:
    """Each variant at each kind of positions of the preset's study block (a layer with its own
    convolutions without the preset's), each run in its own folder."""
    args = SCRIPT.parse_args(["--base", "HEAD", "--preset", "mqar_mixture_cpu",
                              "--attention", "elu", "deltanet_layer"])
    checks = SCRIPT.mixture_checks(args, tmp_path)
    assert [entry for entry, _, _ in checks] == [
        {"attention": name, "positions": positions, "d_model": 64,  # the preset's width
         "lr": 0.01, "threads": 1}
        for positions in ("none", "rope") for name in ("elu", "deltanet_layer")]
    assert len({folder for _, _, folder in checks}) == 4
    for entry, command, _ in checks:
        assert "experiment=mqar_mixture_cpu" in command
        assert f"attention={entry['attention']}" in command
        assert f"model.positions={entry['positions']}" in command
        assert {"model.d_model=64", "optim.lr=0.01", "seed=2"} <= set(command)
        assert ("model.short_conv=0" in command) == (entry["attention"] == "deltanet_layer")


@pytest.mark.slow
def test_the_mixture_check_trains_the_same_bits_as_its_own_head(tmp_path: Path) -> None:
    assert SCRIPT.main(["--base", "HEAD", "--preset", "mqar_mixture_cpu", "--attention", "elu",
                        "--steps", "2", "--out", str(tmp_path)]) == 0
    table = pd.read_csv(tmp_path / "same_numerics.csv")
    assert table["identical"].all() and set(table["positions"]) == {"none", "rope"}


def test_several_bases_share_the_checkouts_runs(tmp_path: Path, monkeypatch) -> None:
    """--base A B trains each entry once in this checkout and once at each base, and writes a
    row per base and entry: a study trained at several commits is checked in one pass."""
    found = SCRIPT.subprocess.run(["git", "rev-parse", "HEAD~1"], cwd=SCRIPT.REPO_ROOT,
                                  capture_output=True, text=True)
    if found.returncode != 0:
        pytest.skip("a clone without HEAD~1 (shallow)")
    older = found.stdout.strip()
    trained = []

    def fake_weights(tree: Path, command: list[str], folder: Path, threads: int) -> dict:
        trained.append(tree)
        return {"w": torch.ones(2) if tree.name == older else torch.zeros(2)}

    monkeypatch.setattr(SCRIPT, "final_weights", fake_weights)
    # HEAD~1 named twice (once by its hash): one worktree, one row per entry
    assert SCRIPT.main(["--base", "HEAD", "HEAD~1", older, "--attention", "elu", "softmax",
                        "--out", str(tmp_path)]) == 1  # HEAD~1 "differs"
    table = pd.read_csv(tmp_path / "same_numerics.csv")
    entries = table["attention"].nunique()
    assert {"elu", "softmax"} <= set(table["attention"])
    assert trained.count(SCRIPT.REPO_ROOT) == entries  # once per entry, not once per base
    assert len(trained) == 3 * entries
    assert len(table) == 2 * entries and table["base_commit"].nunique() == 2
    assert list(table.groupby("base_commit")["identical"].all()[[older]]) == [False]
    assert table.loc[table["base_commit"] != older, "identical"].all()


def test_the_listops_sweep_is_checked_as_its_rows_were_trained(tmp_path: Path) -> None:
    """Every variant with rows of the published 300-step ListOps sweep (hgrn2_layer has none),
    the default config as seed_sweep.py trains it, a run per process on the two threads the
    rows had; the sweep's step budget is the check's (--steps) alone."""
    args = SCRIPT.parse_args(["--base", "HEAD", "--listops-sweep"])
    assert SCRIPT.protocol_checks(args) is SCRIPT.listops_sweep_checks
    checks = SCRIPT.listops_sweep_checks(args, tmp_path)
    runs = pd.read_csv(SCRIPT.REPO_ROOT / "docs/results/results_runs.csv")
    rows = runs[(runs["task"] == "listops_small") & (runs["max_steps"] == 300)]
    names = [entry["attention"] for entry, _, _ in checks]
    assert sorted(names) == sorted(set(rows["attention"])) and "hgrn2_layer" not in names
    for entry, command, folder in checks:
        assert entry == {"attention": entry["attention"], "d_model": 128, "lr": 0.001,
                         "threads": 2}
        assert f"attention={entry['attention']}" in command and "seed=2" in command
        assert not any(arg.startswith(("experiment=", "trainer.max_steps=", "optim.lr="))
                       for arg in command)
        assert folder == tmp_path / "seed2" / entry["attention"]


def test_the_spt_preset_is_checked_through_both_stages(tmp_path: Path) -> None:
    """Every variant in the spt arm, pretraining cut to --steps too (the script cuts the
    fine-tuning), one thread, the fine-tuning stage's checkpoint compared."""
    args = SCRIPT.parse_args(["--base", "HEAD", "--preset", "spt/listops_small",
                              "--steps", "4"])
    assert SCRIPT.protocol_checks(args) is SCRIPT.spt_checks
    checks = SCRIPT.spt_checks(args, tmp_path)
    assert [entry["attention"] for entry, _, _ in checks] == SCRIPT.variant_names()
    for entry, command, folder in checks:
        assert entry["threads"] == 1
        assert {"experiment=spt/listops_small", f"attention={entry['attention']}", "seed=2",
                "pretrain.max_steps=4"} <= set(command)
        assert not any(arg.startswith(("pretrain=", "~pretrain")) for arg in command)
        assert folder == tmp_path / "spt" / "seed2" / entry["attention"] / "finetune"


def test_a_base_without_the_preset_or_variant_cannot_train_the_entry(tmp_path: Path) -> None:
    (tmp_path / "conf" / "attention").mkdir(parents=True)
    (tmp_path / "conf" / "attention" / "elu.yaml").touch()
    args = SCRIPT.parse_args(["--base", "HEAD", "--preset", "spt/listops_small",
                              "--attention", "elu", "hgrn2_layer"])
    elu, hgrn2 = SCRIPT.spt_checks(args, tmp_path)
    assert SCRIPT.missing_at(tmp_path, elu) == "conf/experiment/spt/listops_small.yaml"
    (tmp_path / "conf" / "experiment" / "spt").mkdir(parents=True)
    (tmp_path / "conf" / "experiment" / "spt" / "listops_small.yaml").touch()
    assert SCRIPT.missing_at(tmp_path, elu) == ""
    assert SCRIPT.missing_at(tmp_path, hgrn2) == "conf/attention/hgrn2_layer.yaml"
    hybrid = ({"attention": "elu+softmax*2"}, ["train.py"], tmp_path)
    assert SCRIPT.missing_at(tmp_path, hybrid) == "conf/attention/softmax.yaml"


def test_an_entry_a_base_predates_is_not_comparable_there(tmp_path: Path, monkeypatch) -> None:
    """The published sweep's commit predates hgrn2_layer: its row says so, the others are
    compared, and the check passes on them."""
    base = "272ec9e"
    if SCRIPT.subprocess.run(["git", "cat-file", "-e", f"{base}^{{commit}}"],
                             cwd=SCRIPT.REPO_ROOT).returncode != 0:
        pytest.skip(f"a clone without {base}")
    trained = []

    def fake_weights(tree: Path, command: list[str], folder: Path, threads: int) -> dict:
        trained.append((tree == SCRIPT.REPO_ROOT, command[3], threads))
        return {"w": torch.ones(2)}

    monkeypatch.setattr(SCRIPT, "final_weights", fake_weights)
    assert SCRIPT.main(["--base", base, "--listops-sweep", "--attention", "elu", "hgrn2_layer",
                        "--out", str(tmp_path)]) == 0
    table = pd.read_csv(tmp_path / "same_numerics.csv", keep_default_na=False)
    by_name = table.set_index("attention")
    assert by_name.loc["elu", "identical"] == "True" and by_name.loc["elu", "not_at_base"] == ""
    assert by_name.loc["hgrn2_layer", "identical"] == ""
    assert by_name.loc["hgrn2_layer", "not_at_base"] == "conf/attention/hgrn2_layer.yaml"
    # hgrn2_layer trained nowhere (no base to compare with), every run on the sweep's 2 threads
    assert sorted(trained) == [(False, "attention=elu", 2), (True, "attention=elu", 2)]
