"""``run_documents``' pipeline: documents -> chunks as rows of one run -> one row per document.

``run.documents.plan_documents`` reads the sources and cuts them into chunks (pages, characters);
every chunk is a row of one run; ``DocumentPlan.merge`` folds the chunk results back into one
result per document (its chunks grounded in their pages when grounding is on, in a worker
thread a Ctrl-C stops; list items found once, scalars by rule: ``run.merge``), and
``table.documents.document_frame`` makes the frame: one row per document (or per page, or per
item with ``explode``), with ``kx_source`` / ``kx_page`` and the accounting columns.
``estimate_documents`` prices a ``run_documents`` call without sending anything.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import Sequence
from typing import Any, Literal

import pandas as pd

from ..ground import Work
from ..media.documents import PageSpec, PdfMode
from ..records import RowResult
from ..run.documents import check_merge_options, plan_documents
from ..run.estimate import Estimate
from ..run.grounding import threaded
from ..run.report import not_run_reason
from ..table.documents import check_document_columns, document_frame
from .base import BaseExtractor

__all__ = ["estimate_documents", "extract_documents"]

logger = logging.getLogger("kimi_extract")


async def extract_documents(
    ex: BaseExtractor[Any],
    sources: Any,
    *,
    pdf_mode: PdfMode = "auto",
    pages: PageSpec = None,
    per_page: bool = False,
    chunk_pages: int | None = None,
    chunk_chars: int | None = None,
    chunk_overlap: int | None = None,
    passes: int = 1,
    merge: dict[str, str] | None = None,
    dedupe_on: Sequence[str] | None = None,
    explode: str | None = None,
    item_prefix: str = "",
    path_column: str = "path",
    text_column: str | None = None,
    recursive: bool = False,
    max_image_pixels: int | None | Literal["default"] = "default",
) -> pd.DataFrame:
    """The frame of ``ex.arun_documents(sources, ...)`` (the options are documented there)."""
    config, output = ex.config, ex.output
    plan = plan_documents(
        sources,
        media=ex._media(),
        pdf_mode=pdf_mode,
        pages=pages,
        per_page=per_page,
        chunk_pages=chunk_pages,
        chunk_chars=chunk_chars,
        chunk_overlap=chunk_overlap,
        passes=passes,
        merge=merge,
        dedupe_on=dedupe_on,
        path_column=path_column,
        recursive=recursive,
        max_image_pixels=max_image_pixels,
    )
    check_document_columns(
        plan,
        output,
        prefix=config.column_prefix,
        text_column=text_column,
        explode=explode,
        item_prefix=item_prefix,
    )
    source_dtypes = (
        {str(c): t for c, t in sources.dtypes.items()}
        if isinstance(sources, pd.DataFrame)
        else None
    )
    mode = config.grounding_options.grounding
    grounding = bool(mode)
    await plan.load(char_boxes=grounding)
    kept: list[RowResult] = []
    # grounding the merged documents runs in a worker thread that a Ctrl-C stops (the
    # units not grounded by then have no spans); the partial frame is built without it
    work = Work(threading.Event())

    def frame_of(stop_cause: BaseException | str | None) -> pd.DataFrame:
        return document_frame(
            plan,
            plan.merge(
                kept,
                output,
                not_run_reason(stop_cause),
                grounding=mode,
                grounding_fields=config.grounding_options.grounding_fields,
                work=work,
            ),
            model=output,
            prefix=config.column_prefix,
            web_search=config.web_search,
            grounding=grounding,
            source_dtypes=source_dtypes,
            text_column=text_column,
            explode=explode,
            item_prefix=item_prefix,
        )

    total = plan.chunk_count
    if total == 0:
        return frame_of(None)
    try:
        _, stop_cause, report = await ex._execute(
            plan.rows(),
            total=total,
            progress=config.progress,
            sink=kept.extend,
            lookahead=total,  # the chunks are in memory anyway: never stall on one row
            # documents are grounded after the merge, in their pages; with quotes, each
            # chunk is checked through its own quotes first (the merge reads them)
            ground_rows=mode == "quotes",
        )
    except asyncio.CancelledError:
        work.stop()
        ex.last_partial = frame_of("not run: interrupted")  # RunInterrupted.partial
        raise
    try:
        if grounding:
            frame = await threaded(frame_of, stop_cause)
        else:
            frame = frame_of(stop_cause)
    except asyncio.CancelledError:
        work.stop()
        ex.last_partial = frame_of("not run: interrupted")
        raise
    if plan.passes > 1:  # the summary also says what each pass found and cost
        report = dataclasses.replace(report, passes=plan.pass_stats())
        ex.last_run = report
        logger.info("kimi_extract: %s", report.pass_summary())
    if stop_cause is not None:
        raise ex._stopped(stop_cause, report, frame) from stop_cause
    return frame


async def estimate_documents(ex: BaseExtractor[Any], sources: Any, **options: Any) -> Estimate:
    """``ex.estimate_documents(sources, **options)``: the documents read and cut as a run would
    cut them, priced at every pass (``run.estimate``)."""
    for name in ("explode", "item_prefix", "text_column"):
        options.pop(name, None)
    plan = plan_documents(sources, media=ex._media(), **options)
    check_merge_options(plan, ex.output)
    await plan.load()
    return ex.engine.estimate(plan.rows(), plan.chunk_count, passes=plan.passes)
