"""The configuration reference of the documentation site, generated from conf/ when the site is
built (linarena.reports.site_hooks), so that it lists every config group, every option of each
and every key of each option with the comment the file gives it: a file added to conf/ is on
the page at the next build, with nothing to copy by hand.

A group is a folder of conf/ (`hydra/launcher` is one too); an option is a YAML file in it,
named by its path below the group without `.yaml` (`experiment=lra/text`). An option's
description is its leading comment; a key's note is the comment on its line, or the comment
lines just above it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from linarena.attention.variants import CONF_DIR

# Folders below a group that are groups of their own (Hydra's launcher choice).
NESTED_GROUPS = ("hydra/launcher",)
# What each group chooses, one line each; a group missing here is listed without one.
GROUP_NOTES = {
    "attention": "the token mixer of every block: a core on q, k, v, or a whole published layer",
    "callbacks": "Lightning callbacks: checkpoints, learning-rate monitor, progress",
    "data": "the task: what is read or generated, lengths, sizes, batch size",
    "debug": "presets that shrink a run to check an install or a change",
    "debug_data": "the part of a debug preset for one task (`debug_data: ${debug}/${data}`)",
    "debug_experiment": "the part of a debug preset for one experiment",
    "experiment": "whole presets applied last: the LRA tasks, MQAR, hybrids, the study presets",
    "hparams_search": "hyperparameter searches (Hydra's Optuna sweeper)",
    "hydra": "Hydra's own settings: output folders, job names",
    "hydra/launcher": "how `-m` sweeps start their jobs (Slurm through submitit)",
    "logger": "where metrics go: W&B, CSV, none (a list combines them)",
    "model": "the Transformer: width, depth, heads, positions, pooling",
    "optim": "the optimizer and learning-rate schedule",
    "paths": "where data, outputs and runs live",
    "pretrain": "self-pretraining on the task's own inputs before training the classifier",
    "trainer": "lightning.pytorch.Trainer arguments: steps, devices, precision, DDP",
}
KEY = re.compile(r"^(?P<indent> *)(?:- )?(?P<key>[\w/@.+-]+):(?: (?P<value>.*))?$")


@dataclass
class Option:
    """One YAML file of a group: its name, its leading comment and its keys."""
    group: str
    name: str
    path: Path
    description: str = ""
    keys: list[tuple[str, str, str]] = field(default_factory=list)  # (dotted key, value, note)


def _split_comment(text: str) -> tuple[str, str]:
    """(value, comment) of the text after `key:`, the comment after a ` #` outside quotes."""
    quote = None
    for at, char in enumerate(text):
        if char in "'\"" and quote in (None, char):
            quote = None if quote else char
        elif char == "#" and quote is None and (at == 0 or text[at - 1] == " "):
            return text[:at].strip(), text[at + 1:].strip()
    return text.strip(), ""


def parse_option(path: Path, group: str, name: str) -> Option:
    """The option's description and its keys (dotted, nested mappings flattened), each with its
    value as written (a block list joined into [a, b]) and its comment."""
    option = Option(group, name, path)
    lines = path.read_text().splitlines()
    comments: list[str] = []
    stack: list[tuple[int, str]] = []  # (indent, key) of the mappings above the current line
    leading = True
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#"):
            text = stripped.lstrip("#").strip()
            if text.startswith("@package"):
                continue
            comments.append(text)
            continue
        if not stripped:
            if leading and comments:
                option.description = " ".join(c for c in comments if c)
                comments, leading = [], False
            continue
        match = KEY.match(line)
        if stripped.startswith("- ") and (match is None or line.lstrip().startswith("- ")):
            if option.keys and stack and len(line) - len(line.lstrip()) >= stack[-1][0]:
                key, value, note = option.keys[-1]
                item, item_note = _split_comment(stripped[2:])
                value = value[:-1] + ", " + item + "]" if value.startswith("[") and value \
                    .endswith("]") and value != "[]" else f"[{item}]"
                option.keys[-1] = (key, value, "; ".join(n for n in (note, item_note) if n))
            comments = []
            continue
        if match is None:
            comments = []
            continue
        if leading:
            option.description = " ".join(c for c in comments if c)
            comments, leading = [], False
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        value, note = _split_comment(match["value"] or "")
        dotted = ".".join([*(k for _, k in stack), match["key"]])
        note = " ".join([*(c for c in comments if c), note]).strip()
        comments = []
        if value:
            option.keys.append((dotted, value, note))
        else:  # a mapping (its keys follow, indented) or a block list
            stack.append((indent + 1, match["key"]))
            option.keys.append((dotted, "", note))
    # a mapping key whose children follow is kept only when it carries a note
    option.keys = [(k, v, n) for i, (k, v, n) in enumerate(option.keys)
                   if v or n or not any(other.startswith(k + ".") for other, _, _ in
                                        option.keys[i + 1:])]
    if leading and comments:
        option.description = " ".join(c for c in comments if c)
    return option


def options(conf_dir: Path = CONF_DIR) -> dict[str, list[Option]]:
    """Every group of `conf_dir` (sorted) with its options (sorted by name)."""
    groups: dict[str, list[Option]] = {}
    for path in sorted(conf_dir.rglob("*.yaml")):
        relative = path.relative_to(conf_dir).with_suffix("").as_posix()
        if "/" not in relative:
            group, name = "(top level)", relative
        else:
            group = next((g for g in NESTED_GROUPS if relative.startswith(g + "/")),
                         relative.split("/")[0])
            name = relative[len(group) + 1:]
        groups.setdefault(group, []).append(parse_option(path, group, name))
    return dict(sorted(groups.items(), key=lambda item: (item[0] == "(top level)", item[0])))


def defaults(conf_dir: Path = CONF_DIR) -> dict[str, str]:
    """The option config.yaml's defaults list picks for each group (`null` where none)."""
    picked = {}
    for line in (conf_dir / "config.yaml").read_text().splitlines():
        match = re.match(r"^\s*-\s+(?:optional\s+)?([\w/]+):\s*(\S+)", line)
        if match:
            picked[match[1]] = match[2]
    return picked


def _cell(text: str) -> str:
    """Plain text safe in a Markdown table cell: no pipe splits it, no < opens a tag, no
    bracket starts a link."""
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace("|", "\\|")
            .replace("[", "\\[").replace("]", "\\]"))


def _code(text: str) -> str:
    if not text:
        return ""
    ticks = "``" if "`" in text else "`"
    return f"{ticks} {_cell(text)} {ticks}" if ticks == "``" else f"`{_cell(text)}`"


def _first_sentence(text: str, limit: int = 160) -> str:
    """Up to the first full stop or semicolon outside brackets that ends a sentence
    (not "et al." or "e.g."), cut at `limit` characters."""
    end = len(text)
    for match in re.finditer(r"[.;](?=\s|$)", text):
        before = text[:match.start()]
        if before.count("(") > before.count(")") or re.search(r"\b(al|e\.g|i\.e|cf|vs)$", before):
            continue
        end = match.end()
        break
    sentence = text[:end]
    return sentence if len(sentence) <= limit else sentence[:limit - 1].rstrip() + "…"


def _choose(group: str, name: str) -> str:
    if group == "(top level)":
        return f"conf/{name}.yaml"
    return f"{group}={name}"


def reference_markdown(conf_dir: Path = CONF_DIR) -> str:
    """The generated part of the configuration page: per group, its default and a table of its
    options, then each option's keys (value and note) in a collapsed block."""
    picked = defaults(conf_dir)
    out = []
    for group, members in options(conf_dir).items():
        title = "Top-level files" if group == "(top level)" else f"`{group}`"
        out.append(f"### {title}\n")
        note = GROUP_NOTES.get(group)
        default = picked.get(group)
        facts = [note[0].upper() + note[1:] + "." if note else ""]
        if default is not None:
            facts.append(f"Default: `{default}`.")
        facts.append(f"{len(members)} option{'s' * (len(members) != 1)}, in "
                     f"`conf/{group if group != '(top level)' else ''}`.".replace("/`", "`")
                     .replace("conf`", "conf/`"))
        out.append(" ".join(f for f in facts if f) + "\n")
        out.append("| option | what it is |\n|---|---|")
        for option in members:
            out.append(f"| `{_choose(group, option.name)}` | "
                       f"{_cell(_first_sentence(option.description)) or '–'} |")
        out.append("")
        for option in members:
            out.append(f'??? note "{_choose(group, option.name)}"\n')
            if option.description:
                out.append(f"    {_cell(option.description)}\n")
            relative = option.path.relative_to(conf_dir).as_posix()
            out.append(f"    File: `conf/{relative}`.\n")
            if option.keys:
                out.append("    | key | value | note |\n    |---|---|---|")
                for key, value, note in option.keys:
                    out.append(f"    | `{key}` | {_code(value)} | {_cell(note)} |")
                out.append("")
        out.append("")
    return "\n".join(out)
