"""MkDocs hooks of the documentation site (mkdocs.yml: `hooks:`), run at every build.

- `<!-- generated:configuration -->` on a page becomes the configuration reference made from
  conf/ (linarena.reports.config_reference), so that page cannot fall behind the configs.
- Every module a page renders with mkdocstrings (a `::: module` line) is checked: each public
  object of it (its `__all__`, else what it defines without a leading underscore) and each
  public method of those classes must have a docstring (its own or the one it overrides). A
  missing one is a warning, which `mkdocs build --strict` turns into a failed build.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import re
from typing import Any

from linarena.reports.config_reference import reference_markdown

log = logging.getLogger("mkdocs.plugins.linarena")
CONFIGURATION = "<!-- generated:configuration -->"
RENDERED = re.compile(r"^::: ([\w.]+)", re.MULTILINE)


def public_names(module: Any) -> list[str]:
    """The names a module exports: its `__all__`, else what it defines without a `_`."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    return [name for name, value in vars(module).items() if not name.startswith("_")
            and getattr(value, "__module__", None) == module.__name__]


def undocumented(module_name: str) -> list[str]:
    """The public objects of `module_name`, and the public methods of its classes, that have
    no docstring (own or inherited), as dotted names."""
    module = importlib.import_module(module_name)
    missing = []
    for name in public_names(module):
        value = getattr(module, name)
        if not (inspect.isclass(value) or inspect.isroutine(value)):
            continue  # a constant is documented where it is defined, in prose
        if not inspect.getdoc(value):
            missing.append(f"{module_name}.{name}")
        if inspect.isclass(value):
            missing += [f"{module_name}.{name}.{attribute}" for attribute in vars(value)
                        if not attribute.startswith("_")
                        and callable(getattr(value, attribute))
                        and not inspect.getdoc(getattr(value, attribute))]
    return missing


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Fill in the generated configuration reference; warn about undocumented public objects
    of the modules the page renders."""
    if CONFIGURATION in markdown:
        markdown = markdown.replace(CONFIGURATION, reference_markdown())
    for module_name in RENDERED.findall(markdown):
        for name in undocumented(module_name):
            log.warning(f"{page.file.src_uri}: the public object {name} has no docstring")
    return markdown
