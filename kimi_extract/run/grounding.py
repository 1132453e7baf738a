"""Grounding in a run (``grounding=True``): each answer's leaves aligned to the text that was sent.

No request and no token is spent: the aligner (``kimi_extract.ground``) runs on the answer the row
already validated.

- Rows of ``run`` / ``extract``: ``ground_row(content, value)`` aligns the leaves to the row's text
  as it was sent (a text row's content; the text part of a row with images or videos; a
  template's rendering), so ``text[start:end]`` is the evidence. The conversation calls it once
  the answer validated, also for an answer served from the result store: spans are recomputed,
  not stored (they follow from the text and the answer alone, take milliseconds, and a rerun
  after the aligner improves gets the better spans). Texts longer than ``INLINE_CHARS`` are
  aligned in a worker thread (``aground_row``), so a huge row does not hold up the event loop.
- Documents (``run_documents``): ``ground_pages(pages, value)`` aligns the leaves of the merged
  answer to the unit's pages (their texts joined by a blank line, as ``text_column=`` writes
  them; the chunk headers and page labels the model also saw are not evidence). Each span
  carries its 1-based ``page`` and offsets into that page's text (``page_text[start:end]`` is the
  evidence); a match that runs past its page's end is cut there. On PDF pages with a text layer
  the span also carries ``boxes``: one ``(left, top, right, bottom)`` box in PDF points from the
  page's top-left corner per line the evidence covers (the union of its characters' boxes).
"""

from __future__ import annotations

import asyncio
import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from pydantic import BaseModel

from ..ground import align, leaves_of
from ..media.documents import Page
from ..records import Content, Span

#: Rows whose text is longer than this are aligned in a worker thread (about 10 ms inline).
INLINE_CHARS = 20_000
#: What joins a unit's pages into the one text its leaves are aligned to.
PAGE_SEPARATOR = "\n\n"


def content_text(content: Content | None) -> str:
    """The text a row sent: its content, or the text parts of a multimodal content joined by a
    blank line (the rows ``run`` makes have at most one)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = [str(part.get("text") or "") for part in content if part.get("type") == "text"]
    return PAGE_SEPARATOR.join(texts)


def ground_row(content: Content | None, value: BaseModel | Mapping[str, Any]) -> list[Span]:
    """One span per leaf of ``value``, offsets into the row's text (``content_text``)."""
    return align(content_text(content), leaves_of(value))


async def aground_row(content: Content | None, value: BaseModel | Mapping[str, Any]) -> list[Span]:
    """``ground_row``, in a worker thread when the text is longer than ``INLINE_CHARS``."""
    text = content_text(content)
    if len(text) <= INLINE_CHARS:
        return align(text, leaves_of(value))
    return await asyncio.to_thread(align, text, leaves_of(value))


def ground_pages(pages: Sequence[Page], value: BaseModel | Mapping[str, Any]) -> list[Span]:
    """One span per leaf of ``value``, found in ``pages`` (see the module docstring)."""
    texts = [page for page in pages if page.text]
    starts: list[int] = []
    offset = 0
    for page in texts:
        starts.append(offset)
        offset += len(page.text) + len(PAGE_SEPARATOR)
    joined = PAGE_SEPARATOR.join(page.text for page in texts)
    spans = align(joined, leaves_of(value))
    out = []
    for span in spans:
        if span.start is None or span.end is None or not texts:
            out.append(span)
            continue
        which = bisect.bisect_right(starts, span.start) - 1
        page = texts[which]
        start = span.start - starts[which]
        end = min(span.end - starts[which], len(page.text))
        boxes = line_boxes(page.boxes[start:end]) if page.boxes is not None else ()
        out.append(replace(span, start=start, end=end, page=page.number, boxes=boxes))
    return out


def line_boxes(chars: np.ndarray) -> tuple[tuple[float, float, float, float], ...]:
    """Character boxes (rows of left, top, right, bottom; NaN rows skipped) -> one box per run of
    characters on the same line, rounded to 0.01 pt."""
    merged: list[list[float]] = []
    for left, top, right, bottom in chars.tolist():
        if math.isnan(left) or right <= left or bottom <= top:
            continue
        if merged:
            last = merged[-1]
            # the same line: the glyph overlaps the line's vertical extent at all (glyph boxes
            # are tight: a comma hangs below the digits, a space is a sliver on the baseline)
            # and starts within a line height of its right end (a new line starts far left)
            overlap = min(bottom, last[3]) - max(top, last[1])
            height = max(last[3] - last[1], bottom - top)
            if overlap > 0 and -height <= left - last[2] <= height:
                last[0], last[1] = min(last[0], left), min(last[1], top)
                last[2], last[3] = max(last[2], right), max(last[3], bottom)
                continue
        merged.append([left, top, right, bottom])
    return tuple((round(b[0], 2), round(b[1], 2), round(b[2], 2), round(b[3], 2)) for b in merged)
