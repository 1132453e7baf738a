"""Settings written down once: the docstring under each field, and the pages made from them.

A settings group is a frozen dataclass whose every field has, on the line below it, a docstring
(PEP 257's "attribute docstrings", as pydantic's ``use_attribute_docstrings`` reads them).
``field_docs`` reads those; ``settings_table`` turns a group's fields into the Markdown table of
a generated settings page (docs/configuration.md from ``kimi_extract.config.docs``,
docs/simulator-settings.md from ``kimi_extract.simulator.docs``), and ``write_page`` is both
pages' command line. It sits at the bottom of the package, so the client's settings and the
simulator (an island) share it.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
import sys
from collections.abc import Sequence
from dataclasses import MISSING, Field
from pathlib import Path
from typing import Any

__all__ = ["default_cell", "field_docs", "markdown", "settings_table", "write_page"]

MIB = 1024 * 1024


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """``{field: docstring}`` of a dataclass: the string literal under each annotated field,
    read from the class's source; a field without one is absent."""
    tree = ast.parse(inspect.cleandoc("\n" + inspect.getsource(cls)))
    body = next(node for node in tree.body if isinstance(node, ast.ClassDef)).body
    docs: dict[str, str] = {}
    for node, following in zip(body, body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[node.target.id] = inspect.cleandoc(following.value.value)
    return docs


def markdown(docstring: str) -> str:
    """A docstring as one Markdown paragraph: RST ``code`` as `code`, lines joined."""
    text = " ".join(line.strip() for line in docstring.strip().splitlines() if line.strip())
    return re.sub(r"``(.+?)``", r"`\1`", text)


def default_cell(spec: Field[Any]) -> str:
    """A default as a table shows it: ``16``, ``1,048,576``, ``32 MiB`` (a ``_bytes`` setting),
    ``"auto"``, None, ``("a", "b")``, ``time.monotonic``."""
    value = spec.default_factory() if spec.default_factory is not MISSING else spec.default
    if value is None or isinstance(value, bool):
        return str(value)
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, tuple):
        return "`(" + ", ".join(f'"{item}"' for item in value) + ")`"
    if callable(value):
        return f"`{value.__module__}.{value.__name__}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        if spec.name.endswith("_bytes") and value and value % MIB == 0:
            return f"{value // MIB} MiB"
        return f"{value:,}"
    return str(value)


def settings_table(cls: type, specs: Sequence[Field[Any]]) -> str:
    """The Markdown table of ``specs`` (fields of ``cls``): name, default, what it does."""
    docs = field_docs(cls)
    rows = ["| setting | default | what it does |", "|---|---|---|"]
    for spec in specs:
        text = markdown(docs[spec.name]).replace("|", "\\|")  # a pipe would end the cell
        rows.append(f"| `{spec.name}=` | {default_cell(spec)} | {text} |")
    return "\n".join(rows) + "\n"


def write_page(page: str, argv: list[str] | None = None) -> int:
    """A generated page's command line: write ``page`` to the path given, or print it."""
    args = sys.argv[1:] if argv is None else argv
    if args:
        Path(args[0]).write_text(page, encoding="utf-8")
    else:
        sys.stdout.write(page)
    return 0
