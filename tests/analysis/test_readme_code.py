"""The code of the README and of the documentation site's pages (docs/*.md) runs as written:
every Python block executes in a fresh namespace, every `python train.py ...` command composes
and passes the config checks, and every script they name exists. (The commands' end-to-end runs
are tests/analysis/test_readme_sequence.py, marked slow.)"""

from __future__ import annotations

import re
import shlex
import textwrap
from pathlib import Path

import pytest
from helpers.training import REPO, compose_config

from linarena.training.config_checks import check_config, fit_validation_interval

# The README and the site's own pages; docs/results/ holds published files, not pages.
PAGES = [REPO / "README.md", *sorted(p for p in (REPO / "docs").rglob("*.md")
                                     if "results" not in p.relative_to(REPO / "docs").parts)]
README = "\n".join(page.read_text() for page in PAGES)
# ```lang ... ``` blocks, indented or not (a block inside a list item is indented).
BLOCK = re.compile(r"^( *)```(\w+)\n(.*?)^\1```", re.MULTILINE | re.DOTALL)


def _blocks(language: str) -> list[str]:
    return [textwrap.dedent(m.group(3)) for m in BLOCK.finditer(README) if m.group(2) == language]


def _train_commands() -> list[list[str]]:
    """The overrides of every `python train.py` line of the README's shell blocks, a sweep's
    first value standing for its list; lines with a placeholder (<run folder>) are left out."""
    commands = []
    for block in _blocks("bash"):
        for line in block.splitlines():
            command = line.split("#")[0].strip()
            if not command.startswith("python train.py") or "<" in command:
                continue
            words = shlex.split(command)[2:]
            if "--cfg" in words:  # Hydra's own flag and its value: not overrides
                at = words.index("--cfg")
                del words[at:at + 2]
            overrides = [word for word in words if word != "-m"]
            commands.append([_first_value(word) for word in overrides])
    return commands


def _first_value(override: str) -> str:
    key, _, value = override.partition("=")
    return f"{key}={value.split(',')[0]}" if "," in value and "[" not in value else override


PYTHON_BLOCKS = _blocks("python")
TRAIN_COMMANDS = _train_commands()


def test_the_readme_has_the_blocks_these_tests_read() -> None:
    assert len(PYTHON_BLOCKS) >= 2 and len(TRAIN_COMMANDS) >= 10
    readme = (REPO / "README.md").read_text()
    assert "```python" in readme and "python train.py" in readme


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=lambda b: b.splitlines()[0][:40])
def test_every_python_block_runs_as_written(block: str) -> None:
    exec(compile(block, "<README.md or docs python block>", "exec"), {"__name__": "readme_block"})


@pytest.mark.parametrize("overrides", TRAIN_COMMANDS, ids=" ".join)
def test_every_train_command_composes_and_passes_the_checks(overrides: list[str],
                                                             tmp_path: Path) -> None:
    hydra_only = [o for o in overrides if o.startswith(("hydra/", "hydra.", "hparams_search"))]
    # With Hydra's runtime installed, as train.py has it: ${hydra:runtime.choices.data} (the
    # task's name, which e.g. pretrain=mlm reads its masking fraction by) resolves.
    cfg = compose_config([o for o in overrides if o not in hydra_only] + hydra_only, tmp_path)
    fit_validation_interval(cfg, overrides)  # as a run does before its checks (run.py)
    check_config(cfg)


def test_every_script_the_readme_names_exists() -> None:
    scripts = set(re.findall(r"\bscripts/[\w./-]+\.(?:py|sh)\b", README))
    assert scripts, "no scripts named in the README or the docs"
    assert [s for s in sorted(scripts) if not (REPO / s).is_file()] == []
