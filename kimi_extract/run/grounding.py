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
- ``grounding="quotes"``: the schema also asked for a supporting quote per field
  (``schema.quotes``); ``ground_quoted`` aligns each quote and looks for the value inside its
  evidence (kind "quote" when only the quote is found, "none" when the quote is not).
  Documents: each chunk's answer is checked through its quotes as it comes back, and the
  merged row's leaves take their chunks' quotes (``merged_quotes``) before ``ground_pages``.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from pydantic import BaseModel

from ..ground import align, leaves_of
from ..ground.align import _child as child_path
from ..media.documents import Page
from ..records import Content, Span

#: ``CompiledSchema.quotes_of``: each object's ``kx_quotes``, by its path in the answer as sent.
Quotes = Mapping[tuple[str | int, ...], Mapping[str, Any]]
#: Rows whose text is longer than this are aligned in a worker thread (about 10 ms inline).
INLINE_CHARS = 20_000
_INDEX = re.compile(r"\[\d+\]")
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


def ground_row(
    content: Content | None,
    value: BaseModel | Mapping[str, Any],
    quotes: Quotes | None = None,
) -> list[Span]:
    """One span per leaf of ``value``, offsets into the row's text (``content_text``); with
    ``quotes`` (``CompiledSchema.quotes_of``), each quoted leaf is checked through its quote
    (``ground_quoted``)."""
    text = content_text(content)
    if quotes is not None:
        return ground_quoted(text, value, quotes)
    return align(text, leaves_of(value))


async def aground_row(
    content: Content | None,
    value: BaseModel | Mapping[str, Any],
    quotes: Quotes | None = None,
) -> list[Span]:
    """``ground_row``, in a worker thread when the text is longer than ``INLINE_CHARS``."""
    if len(content_text(content)) <= INLINE_CHARS:
        return ground_row(content, value, quotes)
    return await asyncio.to_thread(ground_row, content, value, quotes)


def quotes_by_leaf(value: BaseModel | Mapping[str, Any], quotes: Quotes) -> dict[str, str]:
    """Each leaf's quote, by its ``leaves_of`` path: ``""`` when its field asks for a quote and
    the answer gave none; leaves whose field asks for none (booleans, dicts, ``Any``, tuples)
    are absent.

    ``quotes`` is keyed by the path of each object in the answer as sent (aliases, renamed
    reserved names); the walk follows the validated model and finds each field's sent name.
    """
    known: set[tuple[str | int, ...]] = set()
    for path in quotes:
        known.update(path[:i] for i in range(len(path) + 1))
    out: dict[str, str] = {}

    def sent_name(info: Any, name: str, here: tuple[str | int, ...], own: Mapping[str, Any]) -> str:
        alias = info.validation_alias if isinstance(info.validation_alias, str) else None
        candidates = [c for c in (alias, info.alias, name) if c]
        for base in candidates:
            for key in (base, f"{base}_", f"{base}__"):
                if key in own or (*here, key) in known:
                    return key
        return candidates[0]

    def walk(node: Any, here: tuple[str | int, ...], path: str) -> None:
        if not isinstance(node, BaseModel):
            return
        own = quotes.get(here) or {}
        for name, info in type(node).model_fields.items():
            child = getattr(node, name)
            key = sent_name(info, name, here, own)
            leaf = child_path(path, name)
            if isinstance(child, BaseModel):
                walk(child, (*here, key), leaf)
            elif isinstance(child, list | tuple):
                given = own.get(key)
                for i, item in enumerate(child):
                    if isinstance(item, BaseModel):
                        walk(item, (*here, key, i), child_path(leaf, i))
                    elif key in own:
                        quote = given[i] if isinstance(given, list) and i < len(given) else ""
                        out[child_path(leaf, i)] = quote if isinstance(quote, str) else ""
            elif not isinstance(child, Mapping) and key in own:
                quote = own[key]
                out[leaf] = quote if isinstance(quote, str) else ""

    walk(value, (), "")
    return out


def ground_quoted(text: str, value: BaseModel | Mapping[str, Any], quotes: Quotes) -> list[Span]:
    """``grounding="quotes"``: one span per leaf of ``value``, checked through its quote.

    A leaf's quote is aligned to ``text`` like a value (exact, normalized, fuzzy at
    ``DEFAULT_MIN_SCORE``). No quote, or one that does not align: the leaf is unsupported (kind
    "none", no offsets, ``quote`` kept). A quote that aligns: the value is looked for inside the
    quote's evidence; found, the span is the value's own (its kind and score); not found (the
    model paraphrased or inferred it, e.g. an enum), the span is the quote's evidence with kind
    "quote" and the quote's score. Leaves whose field asks for no quote are aligned as values
    (``grounding=True``). Every span of a quoted leaf carries ``quote`` (``""`` when the answer
    gave none), the others None.
    """
    return ground_leaves(text, leaves_of(value), quotes_by_leaf(value, quotes))


def ground_leaves(
    text: str, leaves: Sequence[tuple[str, str]], by_leaf: Mapping[str, str]
) -> list[Span]:
    """``ground_quoted`` for ``leaves`` (``leaves_of``) and their quotes by path."""
    quoted = [(path, by_leaf[path]) for path, _ in leaves if by_leaf.get(path)]
    plain = [(path, leaf) for path, leaf in leaves if path not in by_leaf]
    found = {span.path: span for span in align(text, quoted)}
    found_plain = {span.path: span for span in align(text, plain)}
    out: list[Span] = []
    for path, leaf in leaves:
        if path not in by_leaf:
            out.append(found_plain[path])
            continue
        quote = by_leaf[path]
        evidence = found.get(path)
        if evidence is None or evidence.start is None or evidence.end is None:
            out.append(Span(path=path, value=leaf, quote=quote))
            continue
        if not evidence.grounded:
            out.append(replace(evidence, value=leaf, quote=quote))
            continue
        inner = align(text[evidence.start : evidence.end], [(path, leaf)])[0]
        if inner.grounded and inner.start is not None and inner.end is not None:
            start, end = evidence.start + inner.start, evidence.start + inner.end
            out.append(replace(inner, start=start, end=end, quote=quote))
        else:
            out.append(
                Span(
                    path=path,
                    value=leaf,
                    start=evidence.start,
                    end=evidence.end,
                    kind="quote",
                    score=evidence.score,
                    quote=quote,
                )
            )
    return out


def ground_pages(
    pages: Sequence[Page],
    value: BaseModel | Mapping[str, Any],
    quotes: Mapping[str, str] | None = None,
) -> list[Span]:
    """One span per leaf of ``value``, found in ``pages`` (see the module docstring); with
    ``quotes`` (each leaf's quote by its path, ``merged_quotes``), checked through them."""
    texts = [page for page in pages if page.text]
    starts: list[int] = []
    offset = 0
    for page in texts:
        starts.append(offset)
        offset += len(page.text) + len(PAGE_SEPARATOR)
    joined = PAGE_SEPARATOR.join(page.text for page in texts)
    leaves = leaves_of(value)
    spans = align(joined, leaves) if quotes is None else ground_leaves(joined, leaves, quotes)
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


def _pattern(path: str) -> str:
    """A leaf path with its list indexes blanked (``lines[2].item`` -> ``lines[].item``)."""
    return _INDEX.sub("[]", path)


def merged_quotes(
    parts: Sequence[tuple[BaseModel | Mapping[str, Any], Sequence[Span]]],
    merged: BaseModel | Mapping[str, Any],
) -> dict[str, str]:
    """The quotes of a document's merged answer, from its chunks' answers and their spans.

    Chunks are grounded with their quotes (``ground_quoted``, one span per leaf, in ``leaves_of``
    order); a merged leaf takes the quote of a chunk leaf with the same field (list indexes
    aside, as merging concatenates lists) and the same text, a non-empty quote first. A merged
    leaf no chunk quoted is absent (aligned as a value).
    """
    pool: dict[tuple[str, str], str] = {}
    for value, spans in parts:
        for (path, text), span in zip(leaves_of(value), spans, strict=False):
            if span.quote is None:
                continue
            key = (_pattern(path), text)
            if not pool.get(key):
                pool[key] = span.quote
    out: dict[str, str] = {}
    for path, text in leaves_of(merged):
        quote = pool.get((_pattern(path), text))
        if quote is not None:
            out[path] = quote
    return out
