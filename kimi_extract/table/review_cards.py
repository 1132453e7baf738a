"""One review card: the rows of one document (or one row) -> the JSON the page's script draws.

A card holds its source ``sections`` (page texts, or one text; page images), its ``spans`` (each
located in a section with UTF-16 offsets, or flagged as unusable in ``bad``), its ``rows`` (the
item rows of an exploded frame, each with the columns that differ between them; one row
otherwise), the columns they share (``fields``), the error, notes from reading the sources, value
counts per class and the accounting summed over its rows.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Protocol

from ..records import is_missing
from ..run.inputs import TextSpec
from . import columns as kx
from .review_sources import ReadDocument, page_fractions
from .review_spans import (
    SpanView,
    clean_span,
    field_key,
    float_or_none,
    int_or_none,
    read_spans,
    text_of,
    utf16_offsets,
)

#: At most this many other columns are shown per row.
MAX_COLUMNS = 60
#: An error or note longer than this is cut.
MAX_ERROR_CHARS = 20_000


@dataclass
class Row:
    """One row of the frame: its index label, its cells, its rendered text (``text_column`` /
    ``template``) or why that failed."""

    label: Any
    record: dict[str, Any]
    text: str | None
    note: str | None

    @property
    def item(self) -> int | None:
        """The item number of an exploded row (``kx_item``), else None."""
        return int_or_none(self.record.get(kx.ITEM))

    @property
    def error(self) -> str | None:
        """The row's ``kx_error``, as text."""
        error = self.record.get(kx.ERROR)
        return None if is_missing(error) else text_of(error, MAX_ERROR_CHARS)


class Context(Protocol):
    """What a card needs from the page being built (``review._Builder``)."""

    spec: TextSpec | None
    id_column: str | None
    texts: list[str]
    images: Any

    def text_id(self, text: str) -> int: ...

    def document(self, source: str) -> ReadDocument | None: ...


def card_of(ctx: Context, rows: list[Row]) -> dict[str, Any]:
    """The card of ``rows`` (one row, or the item rows of one document)."""
    first = rows[0]
    raw_source = first.record.get(kx.SOURCE)
    source = None if is_missing(raw_source) else text_of(raw_source, 4_000)
    page = int_or_none(first.record.get(kx.PAGE))
    notes = _unique(row.note for row in rows)
    document = ctx.document(source) if source else None
    page_texts: dict[int, str] = {}
    if document is not None and document.error is None:
        numbers = [page] if page is not None else sorted(document.texts)
        page_texts = {n: document.texts[n] for n in numbers if n in document.texts}
    elif document is not None and document.error:
        notes.append(document.error)
    views: list[tuple[int, SpanView]] = []
    skipped = 0
    for number, row in enumerate(rows):
        records, bad, problem = read_spans(row.record.get(kx.SPANS))
        skipped += bad
        if problem and problem not in notes:
            notes.append(problem)
        views.extend((number, clean_span(record)) for record in records)
    # Which text the offsets index: a page's text (spans carry their page), or one text (the
    # row's, or a document's pages joined as run_documents' text_column). For a document the
    # reading under which more exact spans read back their value wins (pages on a tie).
    text = first.text
    by_page = bool(page_texts)
    if by_page:
        flat = text if text is not None else "\n\n".join(t for t in page_texts.values() if t)
        if _verified(views, lambda _: flat) > _verified(views, page_texts.get):
            by_page, text = False, flat
    sections: list[dict[str, Any]] = []
    section_of_page: dict[int, int] = {}
    if by_page:
        for number, page_text in page_texts.items():
            section_of_page[number] = len(sections)
            # A page without a text layer (a scan) was sent as an image: show that instead.
            scan = document is not None and not page_text.strip()
            image = ctx.images.page(document, number) if document and scan else None
            text_id = ctx.text_id(page_text) if page_text.strip() else None
            sections.append({"page": number, "text": text_id, "image": image})
    plain: int | None = None
    if not by_page and text is not None:
        plain = len(sections)
        sections.append({"page": None, "text": ctx.text_id(text), "image": None})
    spans = _place(ctx, views, sections, section_of_page, plain, by_page, document)
    counts: dict[str, int] = {}
    for span in spans:
        counts[span["cls"]] = counts.get(span["cls"], 0) + 1
    counts["bad"] = skipped + sum(1 for span in spans if span["bad"])
    errors = [(row.item, row.error) for row in rows if row.error is not None]
    distinct = _unique(error for _, error in errors)
    if len(distinct) > 1:
        error: str | None = "\n".join(f"item {item}: {text}" for item, text in errors)
    else:
        error = distinct[0] if distinct else None
    shared, per_row = _columns(ctx, rows, views)
    return {
        "label": _label(ctx, rows, source, page),
        "row": text_of(first.label, 200),
        "source": source,
        "page": page,
        "sections": sections,
        "spans": spans,
        "rows": [
            {"item": row.item, "fields": fields} for row, fields in zip(rows, per_row, strict=True)
        ],
        "fields": shared,
        "error": error,
        "note": "\n".join(text_of(n, MAX_ERROR_CHARS) for n in notes) or None,
        "counts": counts,
        "unsupported": counts.get("none", 0) + counts.get("near", 0),
        "grounded": _grounded(rows, views),
        "cost": _sum(float_or_none(row.record.get(kx.COST)) for row in rows),
        "usage": _usage(rows),
    }


def _unique(values: Iterable[str | None]) -> list[str]:
    out: list[str] = []
    for value in values:
        if value and value not in out:
            out.append(value)
    return out


def _verified(views: list[tuple[int, SpanView]], text_of_page: Callable[[Any], Any]) -> int:
    """How many exact spans read back their value from ``text_of_page(page)``."""
    count = 0
    for _, view in views:
        if view.kind != "exact" or view.start is None or view.end is None:
            continue
        text = text_of_page(view.page)
        count += text is not None and text[view.start : view.end] == view.value
    return count


def _place(
    ctx: Context,
    views: list[tuple[int, SpanView]],
    sections: list[dict[str, Any]],
    section_of_page: dict[int, int],
    plain: int | None,
    by_page: bool,
    document: ReadDocument | None,
) -> list[dict[str, Any]]:
    """The spans as the page's script reads them: ``sec`` is the section whose text a span
    highlights (-1: none), ``s``/``e`` UTF-16 offsets there, ``boxes`` fractions of the page
    image of section ``bsec``. Offsets are converted once per section (one sweep of its text)."""
    out: list[dict[str, Any]] = []
    wanted: dict[int, list[int]] = {}
    for k, (row, view) in enumerate(views):
        out.append(
            {
                "k": k,
                "r": row,
                "path": view.path,
                "field": field_key(view.path),
                "value": text_of(view.value),
                "kind": view.kind,
                "cls": view.css,
                "score": view.score,
                "page": view.page,
                "quote": view.quote,
                "diff": view.diff,
                "sec": -1,
                "s": None,
                "e": None,
                "bsec": -1,
                "boxes": [],
                "bad": view.problem,
            }
        )
        if not view.located:
            continue
        page = view.page
        section = (section_of_page.get(page) if page is not None else None) if by_page else plain
        if section is not None and sections[section]["text"] is not None:
            wanted.setdefault(section, []).append(k)
        if not view.boxes or document is None or page is None or page not in document.texts:
            continue
        image = ctx.images.page(document, page)
        if image is None:
            continue
        target = section_of_page.get(page)
        if target is None:  # the text is shown as one piece: the page image gets its own section
            target = section_of_page[page] = len(sections)
            sections.append({"page": page, "text": None, "image": None})
        sections[target]["image"] = image
        out[k]["bsec"] = target
        out[k]["boxes"] = page_fractions(view.boxes, document.sizes[page])
    for section, numbers in wanted.items():
        text = ctx.texts[sections[section]["text"]]
        inside = []
        for k in numbers:
            view = views[k][1]
            if view.end is not None and view.end <= len(text):
                inside.append(k)
            else:
                problem = f"offsets {view.start}..{view.end} outside the text ({len(text):,} chars)"
                out[k]["bad"] = f"{out[k]['bad']}; {problem}" if out[k]["bad"] else problem
        offsets = [o for k in inside for o in (views[k][1].start or 0, views[k][1].end or 0)]
        converted = utf16_offsets(text, offsets)
        for n, k in enumerate(inside):
            out[k]["sec"], out[k]["s"], out[k]["e"] = (
                section,
                converted[2 * n],
                converted[2 * n + 1],
            )
    return out


def _columns(
    ctx: Context, rows: list[Row], views: list[tuple[int, SpanView]]
) -> tuple[list[list[str]], list[list[list[str]]]]:
    """(the columns shown once for the card, the columns of each row that differ between its
    rows): the other columns (inputs, fields without leaves), not those the spans show."""
    hidden = {kx.SPANS, *(ctx.spec.columns if ctx.spec else ())}
    for row, view in views:
        parts = [p for p in _SEGMENT.split(view.path) if p]
        if parts:
            hidden.add(parts[0])
        if rows[row].item is not None and "]" in view.path:
            after = [p for p in _SEGMENT.split(view.path.partition("]")[2]) if p]
            if after:
                hidden.add(after[0])
    cells = [
        {
            name: text_of(value)
            for name, value in row.record.items()
            if not name.startswith(kx.RESERVED_PREFIX) and name not in hidden
        }
        for row in rows
    ]
    if len(rows) == 1:
        return [[n, v] for n, v in cells[0].items()][:MAX_COLUMNS], [[]]
    names = list(dict.fromkeys(n for row in cells for n in row))
    same = [n for n in names if all(n in row and row[n] == cells[0].get(n) for row in cells)]
    shared = [[n, cells[0][n]] for n in same][:MAX_COLUMNS]
    per_row = [[[n, v] for n, v in row.items() if n not in same][:MAX_COLUMNS] for row in cells]
    return shared, per_row


_SEGMENT = re.compile(r"[.\[\]]")


def _label(ctx: Context, rows: list[Row], source: str | None, page: int | None) -> str:
    """``id=``'s column (when the row has a value there), else the document's file name (and
    page), else the index label; with the item number or the number of items."""
    first = rows[0]
    chosen = first.record.get(ctx.id_column) if ctx.id_column is not None else None
    if not is_missing(chosen) and chosen is not None:
        label = text_of(chosen, 200)
    elif source:
        label = PurePosixPath(source.replace("\\", "/")).name or source
        label = text_of(label, 200) + (f" · page {page}" if page is not None else "")
    else:
        label = text_of(first.label, 200)
    if len(rows) > 1:
        return f"{label} · {len(rows)} items"
    return label + (f" · item {first.item}" if first.item is not None else "")


def _grounded(rows: list[Row], views: list[tuple[int, SpanView]]) -> float | None:
    """The row's ``kx_grounded``; for several rows, their shares weighted by the leaves each
    one counts (inferred values are not counted)."""
    shares = [float_or_none(row.record.get(kx.GROUNDED)) for row in rows]
    if len(rows) == 1 or all(s is None for s in shares):
        return shares[0]
    weights = [0] * len(rows)
    for row, view in views:
        weights[row] += view.css != "inferred"
    total = sum(w for s, w in zip(shares, weights, strict=True) if s is not None)
    if not total:
        return next((s for s in shares if s is not None), None)
    return sum(s * w for s, w in zip(shares, weights, strict=True) if s is not None) / total


def _sum(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _usage(rows: list[Row]) -> dict[str, Any]:
    def ints(column: str) -> int | None:
        present = [int_or_none(row.record.get(column)) for row in rows]
        numbers = [n for n in present if n is not None]
        return sum(numbers) if numbers else None

    return {
        "prompt": ints(kx.PROMPT_TOKENS),
        "cached": ints(kx.CACHED_TOKENS),
        "completion": ints(kx.COMPLETION_TOKENS),
        "reasoning": ints(kx.REASONING_TOKENS),
        "attempts": ints(kx.ATTEMPTS),
        "latency": _sum(float_or_none(row.record.get(kx.LATENCY_S)) for row in rows),
        "from_store": any(row.record.get(kx.FROM_STORE) is True for row in rows),
    }
