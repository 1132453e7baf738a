"""Document rows -> DataFrame: one row per document (or page), merged from its chunks.

The columns: ``kx_source`` (the path), ``kx_page`` (``<NA>`` on document rows), the text column
when asked, the source DataFrame's columns, one column per output field, the accounting columns;
when the documents were chunked ``kx_chunks``, ``kx_duplicates_removed`` and ``kx_conflicts``;
with ``passes`` above 1, ``kx_passes`` and ``kx_items_by_pass``. See
``kimi_extract.run.documents``.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from pydantic import BaseModel

from ..exceptions import InputError
from ..records import RowResult
from ..run.documents import DocumentPlan, check_merge_options
from . import columns as kx
from .explode import check_explode
from .explode import explode as explode_frame
from .frame import build_frame, output_columns

#: Columns every document frame may carry besides the source's and the output's.
DOCUMENT_COLUMNS = (
    kx.SOURCE,
    kx.PAGE,
    kx.CHUNKS,
    kx.DUPLICATES_REMOVED,
    kx.CONFLICTS,
    kx.PASSES,
    kx.ITEMS_BY_PASS,
)


def check_document_columns(
    plan: DocumentPlan,
    model: type[BaseModel],
    *,
    prefix: str,
    text_column: str | None,
    explode: str | None,
    item_prefix: str,
) -> None:
    """Output columns may not take a document column's name; ``explode`` must name a list
    field; ``merge``, ``dedupe_on`` and ``passes`` must fit the model
    (``run.documents.check_merge_options``). ``InputError`` / ``ConfigurationError`` before
    anything is read."""
    check_merge_options(plan, model)
    fixed = [*DOCUMENT_COLUMNS, *([text_column] if text_column else [])]
    source_columns = list(plan.documents[0].record) if plan.documents else []
    taken = set(output_columns(model, prefix).values())
    clashes = sorted(taken & set(fixed + source_columns))
    if clashes:
        raise InputError(
            f"output column(s) {clashes} already name document columns; pass column_prefix='out_'"
        )
    if explode is not None:
        check_explode(
            model, explode, prefix=prefix, item_prefix=item_prefix, columns=fixed + source_columns
        )


def document_frame(
    plan: DocumentPlan,
    merged: list[RowResult],
    *,
    model: type[BaseModel],
    prefix: str,
    web_search: bool,
    source_dtypes: dict[str, Any] | None,
    grounding: bool = False,
    text_column: str | None = None,
    explode: str | None = None,
    item_prefix: str = "",
) -> pd.DataFrame:
    """The output frame: one row per unit of ``plan`` (``merged``: ``DocumentPlan.merge``).

    ``source_dtypes``: the source DataFrame's column dtypes (None when sources were paths; the
    index is then 0, 1, 2, ... rather than the source's labels).
    """
    units = plan.units
    if source_dtypes is not None:
        index: pd.Index = pd.Index([u.document.label for u in units])
    else:
        index = pd.RangeIndex(len(units))
    data: dict[str, Any] = {
        kx.SOURCE: pd.Series([str(u.document.path) for u in units], index=index, dtype=object),
        kx.PAGE: pd.Series([u.page for u in units], index=index, dtype="Int64"),
    }
    if text_column:
        texts = ["\n\n".join(p.text for p in u.pages() if p.text) for u in units]
        data[text_column] = pd.Series(texts, index=index, dtype=object)
    for column, dtype in (source_dtypes or {}).items():
        cells = [u.document.record.get(column) for u in units]
        data[column] = pd.Series(cells, index=index, dtype=dtype)
    out = build_frame(
        model=model,
        results=merged,
        index=index,
        input_frame=pd.DataFrame(data, index=index),
        prefix=prefix,
        web_search=web_search,
        grounding=grounding,
    )
    outcomes = plan.outcomes if len(plan.outcomes) == len(units) else None
    if plan.chunked:
        out[kx.CHUNKS] = pd.Series([len(u.chunks) for u in units], index=index, dtype="int64")
        removed = [o.duplicates for o in outcomes] if outcomes else [0] * len(units)
        out[kx.DUPLICATES_REMOVED] = pd.Series(removed, index=index, dtype="int64")
        conflicts = [o.conflicts for o in outcomes] if outcomes else [[] for _ in units]
        out[kx.CONFLICTS] = pd.Series(conflicts, index=index, dtype=object)
    if plan.passes > 1:
        passes = [o.passes for o in outcomes] if outcomes else [0] * len(units)
        out[kx.PASSES] = pd.Series(passes, index=index, dtype="int64")
        by_pass = [o.items_by_pass for o in outcomes] if outcomes else [[] for _ in units]
        out[kx.ITEMS_BY_PASS] = pd.Series(by_pass, index=index, dtype=object)
    if explode is not None:
        out = explode_frame(out, model, explode, prefix=prefix, item_prefix=item_prefix)
    return out
