"""One registry of ``kx_`` column names (``kimi_extract/table/columns.py``).

Every other module reads the names from it, so a rename (``kx_from_cache`` -> ``kx_from_store``)
is one edit and two lists cannot drift apart (the two ``ADDITIVE_COLUMNS`` once did).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pandas as pd
from pydantic import BaseModel

from kimi_extract.records import RowResult, Usage
from kimi_extract.table import columns
from kimi_extract.table.frame import build_frame

ROOT = Path(__file__).resolve().parents[2] / "kimi_extract"


def _docstring_ids(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


#: ``kx_`` names that are not columns: the schema property ``grounding="quotes"`` adds
#: (``schema.quotes.QUOTES``; the simulator, which imports no client code, mirrors it), and the
#: field marker ``Field(json_schema_extra={"kx_ground": False})`` (``run/grounding.py``).
NOT_COLUMNS = {"kx_quotes", "kx_ground"}


def test_no_module_but_the_registry_spells_a_kx_column():
    stray = []
    for path in sorted(ROOT.rglob("*.py")):
        if path == ROOT / "table" / "columns.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = _docstring_ids(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value.startswith(columns.RESERVED_PREFIX)
                and id(node) not in docstrings
                and node.value not in NOT_COLUMNS
            ):
                stray.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {node.value!r}")
    assert not stray, "kx_ names outside table/columns.py (import them):\n" + "\n".join(stray)


def test_the_registry_groups_agree():
    names = [v for k, v in vars(columns).items() if k.isupper() and isinstance(v, str)]
    names.remove(columns.RESERVED_PREFIX)
    assert all(n.startswith(columns.RESERVED_PREFIX) for n in names)
    assert len(names) == len(set(names)), "two constants name the same column"
    assert set(columns.TOKEN_COLUMNS) <= set(columns.ADDITIVE_COLUMNS)
    assert set(columns.ADDITIVE_COLUMNS) <= {*columns.ACCOUNTING_COLUMNS, columns.WEB_SEARCHES}


def test_a_run_output_carries_exactly_the_registered_accounting_columns():
    class Thing(BaseModel):
        name: str

    result = RowResult(label=0, position=0, value=Thing(name="x"), usage=Usage(prompt_tokens=3))
    for web_search, extra in ((False, ()), (True, (columns.WEB_SEARCHES,))):
        frame = build_frame(
            model=Thing,
            results=[result],
            index=pd.RangeIndex(1),
            input_frame=None,
            web_search=web_search,
        )
        assert frame.columns.tolist() == ["name", *columns.ACCOUNTING_COLUMNS, *extra]
        dtypes = {c: str(frame[c].dtype) for c in columns.ACCOUNTING_COLUMNS}
        assert dtypes == columns.ACCOUNTING_DTYPES
