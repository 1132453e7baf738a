"""One row per list item: turn a list field of the output into table rows.

``explode(frame, Model, "rows")`` works on any ``run`` / ``run_documents`` output. Each source row
becomes one row per item of its ``rows`` list:

- the item's fields become columns, in place of the list column (a list of plain values becomes a
  column of those values, under the list's name); nested models inside an item stay dicts;
- the source row's index label and every other column are repeated, and ``kx_item`` numbers the
  items from 0;
- accounting columns are not double-counted: a source's tokens, cost, attempts, latency and web
  searches sit on its first item row and the other item rows hold 0, so column sums stay equal to
  what the server reported; ``kx_error`` is repeated;
- a source whose list is empty or missing (a failed row) keeps one row with empty item columns and
  ``kx_item`` ``<NA>``, so no source disappears;
- grounded outputs (``kx_spans``): each item row carries the spans of its own item (paths kept as
  they are in the answer, ``items[2].name``), and the spans of the fields outside the list sit on
  the first item row, like the accounting columns, so no span is repeated or lost;
  ``kx_grounded`` is recomputed per row over the spans it carries.

Item column names are the item's field names; when one is already a column, pass ``item_prefix``.
"""

from __future__ import annotations

import json
import re
import types
import typing
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel

from ..exceptions import InputError
from ..records import is_missing
from .columns import ACCOUNTING_COLUMNS, ADDITIVE_COLUMNS, GROUNDED, SPANS
from .columns import ITEM as ITEM_COLUMN
from .frame import _dtype_for, grounded_share

__all__ = ["explode"]


def _unwrap(annotation: Any) -> Any:
    """Strip ``Annotated`` and ``X | None`` from an annotation."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return annotation


def list_item_type(model: type[BaseModel], field: str) -> Any:
    """The item type of ``model``'s list field ``field``; ``InputError`` if it is not a list."""
    if field not in model.model_fields:
        raise InputError(
            f"explode={field!r}: {model.__name__} has no field {field!r}; its fields: "
            f"{list(model.model_fields)}"
        )
    annotation = _unwrap(model.model_fields[field].annotation)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is list and args:
        return _unwrap(args[0])
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _unwrap(args[0])
    raise InputError(
        f"explode={field!r}: {model.__name__}.{field} is {annotation!r}, not a list; name a list "
        "field (e.g. rows: list[Row])"
    )


def item_columns(
    model: type[BaseModel], field: str, *, prefix: str = "", item_prefix: str = ""
) -> dict[str | None, tuple[str, str]]:
    """Item field -> (column name, dtype) of the exploded columns; key None for plain items."""
    item = list_item_type(model, field)
    if isinstance(item, type) and issubclass(item, BaseModel):
        return {
            name: (f"{item_prefix}{name}", _dtype_for(info.annotation))
            for name, info in item.model_fields.items()
        }
    return {None: (f"{item_prefix}{prefix}{field}", _dtype_for(item))}


def check_explode(
    model: type[BaseModel],
    field: str,
    *,
    prefix: str = "",
    item_prefix: str = "",
    columns: Sequence[str] = (),
) -> None:
    """Raise ``InputError`` before a run when ``explode=field`` cannot work or names would clash.

    ``columns``: the other columns the frame will have besides the model's fields.
    """
    new = [
        name
        for name, _ in item_columns(model, field, prefix=prefix, item_prefix=item_prefix).values()
    ]
    others = [f"{prefix}{name}" for name in model.model_fields if name != field]
    _check_clashes(new, [*others, *columns, *ACCOUNTING_COLUMNS, ITEM_COLUMN], field)


def _check_clashes(new: Sequence[str], existing: Sequence[str], field: str) -> None:
    clashes = sorted(set(new) & set(existing))
    if clashes:
        raise InputError(
            f"exploding {field!r} would create column(s) {clashes} that already exist; pass "
            "item_prefix='item_' (or another prefix)"
        )


def _as_list(value: Any, label: Any, column: str) -> list[Any]:
    if isinstance(value, list | tuple):
        return list(value)
    if isinstance(value, np.ndarray):  # a list cell read back from parquet
        return value.tolist()
    if is_missing(value):
        return []
    raise InputError(f"row {label!r}: {column} holds a {type(value).__name__}, not a list")


def _span_records(cell: Any, label: Any) -> list[Any] | None:
    """A ``kx_spans`` cell as a list of span dicts (JSON text read back from a file parsed)."""
    if isinstance(cell, str):
        try:
            cell = json.loads(cell) if cell.strip() else []
        except json.JSONDecodeError:
            raise InputError(f"row {label!r}: {SPANS} holds text that is not JSON") from None
    if isinstance(cell, np.ndarray):
        cell = cell.tolist()
    if isinstance(cell, list | tuple):
        return list(cell)
    if is_missing(cell):
        return None
    raise InputError(f"row {label!r}: {SPANS} holds a {type(cell).__name__}, not a list")


def split_spans(spans: list[Any] | None, field: str, count: int) -> list[list[Any] | None]:
    """The spans of each of a source row's ``max(1, count)`` item rows (module docstring)."""
    if spans is None:
        return [None] * max(1, count)
    under = re.compile(rf"{re.escape(field)}\[(\d+)\](?=$|[.\[])")
    rows: list[list[Any]] = [[] for _ in range(max(1, count))]
    for span in spans:
        path = span.get("path", "") if isinstance(span, dict) else getattr(span, "path", "")
        found = under.match(str(path))
        item = int(found.group(1)) if found else 0
        rows[item if item < len(rows) else 0].append(span)
    return list(rows)


def explode(
    frame: pd.DataFrame,
    model: type[BaseModel] | None,
    field: str,
    *,
    prefix: str = "",
    item_prefix: str = "",
) -> pd.DataFrame:
    """One row per item of the list column ``prefix + field`` (see the module docstring).

    ``model``: the output model, which fixes the item columns and their dtypes even when every list
    is empty; with None they are read from the items (dict keys).
    """
    column = f"{prefix}{field}"
    if column not in frame.columns:
        raise InputError(f"explode: no column {column!r}; columns: {list(frame.columns)}")
    lists = [
        _as_list(v, label, column) for label, v in zip(frame.index, frame[column], strict=True)
    ]
    lists = [[i.model_dump() if isinstance(i, BaseModel) else i for i in items] for items in lists]
    if model is not None:
        spec = item_columns(model, field, prefix=prefix, item_prefix=item_prefix)
    else:
        keys = list(
            dict.fromkeys(k for items in lists for i in items if isinstance(i, dict) for k in i)
        )
        spec = {k: (f"{item_prefix}{k}", "object") for k in keys} or {None: (column, "object")}
    base_columns = [c for c in frame.columns if c != column]
    _check_clashes([name for name, _ in spec.values()], [*base_columns, ITEM_COLUMN], field)

    repeats = [max(1, len(items)) for items in lists]
    positions = np.repeat(np.arange(len(frame)), repeats)
    out = frame.iloc[positions].drop(columns=[column])
    first = np.zeros(len(positions), dtype=bool)
    first[np.cumsum([0, *repeats[:-1]]).astype(int)] = bool(repeats)
    for name in ADDITIVE_COLUMNS:
        if name in out.columns:
            series = out[name]
            out[name] = series.where(first | series.isna().to_numpy(), 0)
    item_numbers: list[Any] = []
    rows: list[Any] = []
    for items in lists:
        item_numbers += list(range(len(items))) or [pd.NA]
        rows += items or [None]
    location = list(frame.columns).index(column)
    index = out.index
    out = out.reset_index(drop=True)  # insert by position: the repeated labels come back below
    out.insert(location, ITEM_COLUMN, pd.Series(item_numbers, dtype="Int64"))
    for offset, (key, (name, dtype)) in enumerate(spec.items(), start=1):
        if key is None:
            cells = rows
        else:
            cells = [row.get(key) if isinstance(row, dict) else None for row in rows]
        if dtype != "object":
            cells = [pd.NA if v is None else v for v in cells]
        out.insert(location + offset, name, pd.Series(cells, dtype=dtype))
    if SPANS in out.columns:
        per_item: list[list[Any] | None] = []
        for label, cell, items in zip(frame.index, frame[SPANS], lists, strict=True):
            per_item += split_spans(_span_records(cell, label), field, len(items))
        out[SPANS] = pd.Series(per_item, dtype=object)
        if GROUNDED in out.columns:
            out[GROUNDED] = pd.Series([grounded_share(s) for s in per_item], dtype="float64")
    out.index = index
    return out
