"""Rows -> DataFrame: output columns with the right dtypes, and the accounting columns.

The output keeps the input's index and row order: the input columns, then one column per
top-level field of the output model (nested models and lists stay Python dicts/lists), then the
accounting columns (then ``kx_web_searches`` with web search, and ``kx_spans`` / ``kx_grounded``
with grounding). Integer and boolean fields use pandas nullable dtypes (``Int64``, ``boolean``)
so failed rows hold ``<NA>`` without turning integers into floats.

``kx_spans`` holds, per row, a list of span dicts (``records.Span.to_dict``), one per leaf of the
answer, grounded or not (None for a row without a value); ``kx_grounded`` the share of leaves
grounded, inferred fields left out (NaN for a failed row or an answer without other leaves).
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Sequence
from typing import Any

import pandas as pd
from pydantic import BaseModel

from ..exceptions import ConfigurationError, InputError
from ..records import GROUNDED_KINDS, INFERRED_KINDS, RowResult
from . import columns as kx
from .columns import ACCOUNTING_COLUMNS, RESERVED_PREFIX

#: The columns ``grounding=`` adds, in order.
GROUNDING_COLUMNS = (kx.SPANS, kx.GROUNDED)


def output_columns(model: type[BaseModel], prefix: str) -> dict[str, str]:
    """Field name -> output column name for the model's top-level fields."""
    return {name: f"{prefix}{name}" for name in model.model_fields}


def check_output_names(model: type[BaseModel], prefix: str) -> None:
    """Raise ``ConfigurationError`` when an output column would take a reserved ``kx_`` name."""
    columns = output_columns(model, prefix).values()
    taken = [col for col in columns if col.startswith(RESERVED_PREFIX)]
    if taken:
        raise ConfigurationError(
            f"output field column(s) {taken} would clash with kimi_extract's accounting columns "
            f"(every {RESERVED_PREFIX}* name is reserved); pass column_prefix='out_' (or another "
            "prefix not starting with kx_) or rename the field(s)"
        )


def check_clashes(
    input_columns: Sequence[str], model: type[BaseModel], prefix: str, *, grounding: bool = False
) -> None:
    """Raise ``InputError`` when an output column would overwrite an input column."""
    taken = set(input_columns)
    clashes = [col for col in output_columns(model, prefix).values() if col in taken]
    clashes += [col for col in ACCOUNTING_COLUMNS if col in taken]
    if grounding:
        clashes += [col for col in GROUNDING_COLUMNS if col in taken]
    if clashes:
        hint = (
            "drop the kx_ columns from the input (it looks like an earlier output)"
            if all(c.startswith(RESERVED_PREFIX) for c in clashes)
            else "pass column_prefix='out_' (or another prefix) to name the output columns apart"
        )
        raise InputError(f"output column(s) {clashes} already exist in the input; {hint}")


def _dtype_for(annotation: Any) -> str:
    """The pandas dtype for a field's annotation: nullable for int/bool, object otherwise."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _dtype_for(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _dtype_for(args[0]) if len(args) == 1 else "object"
    if annotation is bool:
        return "boolean"
    if annotation is int:
        return "Int64"
    if annotation is float:
        return "Float64"
    return "object"


def build_frame(
    *,
    model: type[BaseModel],
    results: Sequence[RowResult],
    index: pd.Index,
    input_frame: pd.DataFrame | None,
    prefix: str = "",
    web_search: bool = False,
    grounding: bool = False,
) -> pd.DataFrame:
    """The output DataFrame for ``results`` (one per input row, in order)."""
    columns = output_columns(model, prefix)
    values: dict[str, list[Any]] = {col: [] for col in columns.values()}
    for result in results:
        value = result.value
        if value is None:
            for col in columns.values():
                values[col].append(None)
            continue
        for name, col in columns.items():
            # The validated attribute, not model_dump's view of it: excluded fields keep their
            # column and a field_serializer does not turn a float column into strings.
            values[col].append(_plain(getattr(value, name)))
    data: dict[str, Any] = {}
    for name, col in columns.items():
        dtype = _dtype_for(model.model_fields[name].annotation)
        series_values = [pd.NA if v is None and dtype != "object" else v for v in values[col]]
        try:
            data[col] = pd.Series(series_values, index=index, dtype=dtype)
        except (TypeError, ValueError, OverflowError):  # values the dtype cannot hold
            data[col] = pd.Series(values[col], index=index, dtype="object")
    data.update(accounting_columns(results, index))
    if web_search:
        data[kx.WEB_SEARCHES] = pd.Series(
            [r.web_searches for r in results], index=index, dtype="int64"
        )
    if grounding:
        data.update(grounding_columns(results, index))
    out = pd.DataFrame(data, index=index)
    if input_frame is not None and len(input_frame.columns):
        out = pd.concat([input_frame, out], axis=1)
    return out


def _plain(value: Any) -> Any:
    """A field's value for a cell: nested models become dicts (``model_dump``), the rest stays."""
    if isinstance(value, BaseModel):
        return value.model_dump()
    if isinstance(value, list):
        return [_plain(v) for v in value] if any(isinstance(v, _NESTED) for v in value) else value
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, dict):
        if any(isinstance(v, _NESTED) for v in value.values()):
            return {k: _plain(v) for k, v in value.items()}
    return value


_NESTED = (BaseModel, list, tuple, dict)


def grounding_columns(results: Sequence[RowResult], index: pd.Index) -> dict[str, pd.Series]:
    """``kx_spans`` (span dicts per row; None without a value) and ``kx_grounded``."""
    spans: list[Any] = []
    shares: list[float] = []
    for result in results:
        found = result.spans if result.value is not None else None
        if found is None and result.value is not None:
            found = []  # grounding failed for this row: no spans rather than a missing cell
        spans.append(None if found is None else [span.to_dict() for span in found])
        shares.append(grounded_share(found))
    return {
        kx.SPANS: pd.Series(spans, index=index, dtype=object),
        kx.GROUNDED: pd.Series(shares, index=index, dtype="float64"),
    }


def grounded_share(spans: Sequence[Any] | None) -> float:
    """The share of leaves grounded (``Span`` objects or span dicts), inferred fields (kinds
    "inferred" and "quote") left out; NaN without any other leaf."""
    if not spans:
        return math.nan
    kinds = [span.kind if hasattr(span, "kind") else span.get("kind", "none") for span in spans]
    starts = [span.start if hasattr(span, "start") else span.get("start") for span in spans]
    counted = [(k, s) for k, s in zip(kinds, starts, strict=True) if k not in INFERRED_KINDS]
    if not counted:
        return math.nan
    return sum(k in GROUNDED_KINDS and s is not None for k, s in counted) / len(counted)


def accounting_columns(results: Sequence[RowResult], index: pd.Index) -> dict[str, pd.Series]:
    """The ``kx_`` columns, per row, summed over every attempt."""
    usages = [r.usage for r in results]
    cells: dict[str, list[Any]] = {
        kx.PROMPT_TOKENS: [u.prompt_tokens for u in usages],
        kx.CACHED_TOKENS: [u.cached_tokens for u in usages],
        kx.CACHE_WRITE_TOKENS: [u.cache_write_tokens for u in usages],
        kx.COMPLETION_TOKENS: [u.completion_tokens for u in usages],
        kx.REASONING_TOKENS: [u.reasoning_tokens for u in usages],
        kx.COST: [u.cost for u in usages],
        kx.ATTEMPTS: [r.attempts for r in results],
        kx.LATENCY_S: [r.latency_s for r in results],
        kx.ERROR: [r.error for r in results],
        kx.FROM_STORE: [r.from_store for r in results],
    }
    return {
        name: pd.Series(cells[name], index=index, dtype=dtype)
        for name, dtype in kx.ACCOUNTING_DTYPES.items()
    }
