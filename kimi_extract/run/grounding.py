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
- Inferred fields: enums, ``Literal`` fields, booleans and fields marked
  ``Field(json_schema_extra={"kx_ground": False})`` hold a label the model chose, not a copy
  of the text: their leaves get kind "inferred" (booleans are listed too, as ``"true"`` /
  ``"false"``), are not aligned, count nowhere in ``kx_grounded`` and are never unsupported.
  ``kx_ground: True`` grounds such a field anyway; ``grounding_fields={"path": bool}`` (the
  ``Extractor`` setting) does either for fields named by their path without list indexes
  (``"sentiment"``, ``"lines.kind"``; a path covers what is below it).
- ``grounding="quotes"``: the schema also asked for a supporting quote per field
  (``schema.quotes``); ``ground_quoted`` checks each quoted leaf through its quote. A quote
  vouches only when it is found in the text (exact, normalized or fuzzy) and is at most
  ``QUOTE_FACTOR`` times the value's length plus ``QUOTE_SLACK`` characters long (a sentence);
  a value is then supported only when it is itself found inside the quote's evidence, with the
  same rules as ``grounding=True`` (its own kind, or "near"); otherwise it is "none". An
  inferred field whose quote vouches gets kind "quote" with the quote's evidence as its span.
  Documents: each chunk's answer is checked through its quotes as it comes back, and the
  merged row's leaves take their chunks' quotes (``merged_quotes``) before ``ground_pages``.
- Time: the aligner's work per leaf is bounded (``kimi_extract.ground.match``), so a row's
  grounding is linear in its text. ``aground_row`` runs a long row in a worker thread that
  stops at its next step when the row's task is cancelled (Ctrl-C): nothing waits for it.
"""

from __future__ import annotations

import asyncio
import bisect
import enum
import math
import re
import signal
import threading
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel

from ..exceptions import ConfigurationError
from ..ground import Work, align, leaves_of
from ..ground.align import _child as child_path
from ..media.documents import Page
from ..records import Content, Span

#: ``CompiledSchema.quotes_of``: each object's ``kx_quotes``, by its path in the answer as sent.
Quotes = Mapping[tuple[str | int, ...], Mapping[str, Any]]
#: Rows whose text is longer than this, or with more leaves than ``INLINE_LEAVES``, are aligned
#: in a worker thread (about 10 ms inline).
INLINE_CHARS = 20_000
INLINE_LEAVES = 200
_INDEX = re.compile(r"\[\d+\]")
#: What joins a unit's pages into the one text its leaves are aligned to.
PAGE_SEPARATOR = "\n\n"
#: A quote vouches only when at most this many times its value's length...
QUOTE_FACTOR = 3
#: ... plus this many characters (about a sentence).
QUOTE_SLACK = 200
R = TypeVar("R")
#: ``grounding_fields``: field path (no list indexes) -> ground it (True) or infer it (False).
GroundingFields = Mapping[str, bool]


def _unwrap(annotation: Any) -> list[Any]:
    """The types a field's annotation allows (Optional, unions, lists and tuples opened)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list, tuple, set, frozenset, Sequence):
        return [t for arg in typing.get_args(annotation) for t in _unwrap(arg)]
    return [annotation]


def _is_label(annotation: Any) -> bool:
    """An enum, a Literal or a bool (None aside): a value the model chooses."""
    kinds = [t for t in _unwrap(annotation) if t is not type(None) and t is not Ellipsis]
    if not kinds:
        return False
    for kind in kinds:
        if typing.get_origin(kind) is typing.Literal or kind is bool:
            continue
        if isinstance(kind, type) and issubclass(kind, enum.Enum):
            continue
        return False
    return True


def field_paths(model: type[BaseModel]) -> dict[str, bool]:
    """Every field path of ``model`` (nested models, list items; no indexes) -> whether its
    leaves are inferred by default (module docstring)."""
    out: dict[str, bool] = {}

    def walk(kind: type[BaseModel], prefix: str, depth: int) -> None:
        if depth > 16:
            return
        for name, info in kind.model_fields.items():
            path = f"{prefix}.{name}" if prefix else name
            extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
            marked = extra.get("kx_ground")
            out[path] = (not marked) if isinstance(marked, bool) else _is_label(info.annotation)
            for sub in _unwrap(info.annotation):
                if isinstance(sub, type) and issubclass(sub, BaseModel):
                    walk(sub, path, depth + 1)

    walk(model, "", 0)
    return out


def check_grounding_fields(model: type[BaseModel], fields: GroundingFields | None) -> None:
    """``ConfigurationError`` naming ``grounding_fields`` when it names no field of ``model``."""
    if not fields:
        return
    known = field_paths(model)
    for path in fields:
        if path not in known:
            raise ConfigurationError(
                f"grounding_fields names {path!r}, which is not a field of "
                f"{model.__name__} (fields: {', '.join(sorted(known)[:20])})"
            )


def inferred_paths(
    value: BaseModel | Mapping[str, Any], fields: GroundingFields | None = None
) -> frozenset[str]:
    """The field paths of ``value``'s model whose leaves are inferred (defaults, marks, then
    ``fields``, the longest matching path winning)."""
    if not isinstance(value, BaseModel):
        return frozenset()
    paths = field_paths(type(value))
    if fields:
        for path in paths:
            named = [p for p in fields if path == p or path.startswith(p + ".")]
            if named:
                paths[path] = not fields[max(named, key=len)]
    return frozenset(path for path, inferred in paths.items() if inferred)


_DICT_KEY = re.compile(r"\[\"(?:[^\"\\]|\\.)*\"\].*$")


def field_of(path: str) -> str:
    """A leaf path's field path: list indexes dropped (``lines[2].kind`` -> ``lines.kind``), a
    dict's keys cut off (``extra["a b"]`` -> ``extra``)."""
    return _INDEX.sub("", _DICT_KEY.sub("", path))


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
    *,
    fields: GroundingFields | None = None,
    work: Work | None = None,
) -> list[Span]:
    """One span per leaf of ``value`` (booleans included), offsets into the row's text
    (``content_text``); inferred fields (module docstring; ``fields``: ``grounding_fields``)
    get kind "inferred"; with ``quotes`` (``CompiledSchema.quotes_of``), each quoted leaf is
    checked through its quote (``ground_quoted``). ``work``: counts and can stop the work."""
    text = content_text(content)
    by_leaf = quotes_by_leaf(value, quotes) if quotes is not None else {}
    return ground_leaves(
        text,
        leaves_of(value, booleans=True),
        by_leaf,
        inferred=inferred_paths(value, fields),
        work=work,
    )


async def aground_row(
    content: Content | None,
    value: BaseModel | Mapping[str, Any],
    quotes: Quotes | None = None,
    *,
    fields: GroundingFields | None = None,
) -> list[Span]:
    """``ground_row``, in a worker thread when the text is longer than ``INLINE_CHARS`` or the
    answer has more than ``INLINE_LEAVES`` leaves; a cancel (Ctrl-C) stops the thread at its
    next step (``ground.Work``) rather than waiting for it."""
    small = len(content_text(content)) <= INLINE_CHARS
    if small and len(leaves_of(value, booleans=True)) <= INLINE_LEAVES:
        return ground_row(content, value, quotes, fields=fields)
    work = Work(threading.Event())
    try:
        return await threaded(_ground_row_with, content, value, quotes, fields, work)
    except asyncio.CancelledError:
        work.stop()
        raise


#: How often (seconds) the event loop wakes while a worker thread grounds: a Ctrl-C is handled
#: by the main thread only when it runs, and a signal that did not wake it waits for that.
POLL_S = 0.1


async def threaded(func: Callable[..., R], /, *args: Any) -> R:
    """``await asyncio.to_thread(in_worker, func, *args)``, waking every ``POLL_S`` seconds
    (so that a pending Ctrl-C is handled at once and cancels the caller)."""
    future = asyncio.ensure_future(asyncio.to_thread(in_worker, func, *args))
    try:
        while not future.done():
            await asyncio.wait({future}, timeout=POLL_S)
    except asyncio.CancelledError:
        future.cancel()
        raise
    return future.result()


def _ground_row_with(
    content: Content | None,
    value: BaseModel | Mapping[str, Any],
    quotes: Quotes | None,
    fields: GroundingFields | None,
    work: Work,
) -> list[Span]:
    return ground_row(content, value, quotes, fields=fields, work=work)


def in_worker(func: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
    """``func(*args, **kwargs)`` in a worker thread that never takes a Ctrl-C: SIGINT is
    blocked there, so the system delivers it to the main thread, whose event loop wakes up at
    once and cancels the run (a SIGINT taken by a worker thread leaves the main thread asleep
    until the worker is done)."""
    if threading.current_thread() is not threading.main_thread() and hasattr(
        signal, "pthread_sigmask"
    ):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    return func(*args, **kwargs)


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


def ground_quoted(
    text: str,
    value: BaseModel | Mapping[str, Any],
    quotes: Quotes,
    *,
    fields: GroundingFields | None = None,
) -> list[Span]:
    """``grounding="quotes"``: one span per leaf of ``value``, checked through its quote.

    A quote vouches when it aligns to ``text`` (exact, normalized or fuzzy) and is at most
    ``QUOTE_FACTOR`` x the value's length + ``QUOTE_SLACK`` characters. A quoted leaf is then
    looked for inside the quote's evidence with the aligner's rules: found, the span is the
    value's own (its kind and score, or "near" with its diff); not found, or the quote does not
    vouch (none given, not in the text, too long), the leaf is unsupported (kind "none",
    ``quote`` kept). An inferred field with a vouching quote gets kind "quote" (the span is the
    quote's evidence), else "inferred". Leaves whose field asks for no quote are aligned as
    values (``grounding=True``). Every span of a quoted leaf carries ``quote`` (``""`` when the
    answer gave none), the others None.
    """
    return ground_leaves(
        text,
        leaves_of(value, booleans=True),
        quotes_by_leaf(value, quotes),
        inferred=inferred_paths(value, fields),
    )


def vouches(quote: str, value: str) -> bool:
    """Whether a quote is short enough to vouch for ``value`` (module docstring)."""
    return len(quote.strip()) <= QUOTE_FACTOR * len(value.strip()) + QUOTE_SLACK


def ground_leaves(
    text: str,
    leaves: Sequence[tuple[str, str]],
    by_leaf: Mapping[str, str],
    *,
    inferred: frozenset[str] = frozenset(),
    work: Work | None = None,
) -> list[Span]:
    """``ground_quoted`` for ``leaves`` (``leaves_of``) and their quotes by path; leaves of the
    ``inferred`` field paths are inferred (``ground_row``)."""
    work = work if work is not None else Work()
    is_inferred = {path: field_of(path) in inferred for path, _ in leaves}
    quoted = [(path, by_leaf[path]) for path, _ in leaves if by_leaf.get(path)]
    plain = [(p, leaf) for p, leaf in leaves if p not in by_leaf and not is_inferred[p]]
    found = {span.path: span for span in align(text, quoted, work=work)}
    found_plain = {span.path: span for span in align(text, plain, work=work)}
    out: list[Span] = []
    for path, leaf in leaves:
        quote = by_leaf.get(path)
        evidence = found.get(path)
        vouched = (
            evidence is not None
            and evidence.grounded
            and evidence.start is not None
            and evidence.end is not None
            and quote is not None
            and vouches(quote, leaf)
        )
        if is_inferred[path]:
            if vouched and evidence is not None:
                out.append(replace(evidence, value=leaf, kind="quote", quote=quote, diff=None))
            else:
                out.append(Span(path=path, value=leaf, kind="inferred", quote=quote))
            continue
        if quote is None:
            out.append(found_plain[path])
            continue
        if not vouched or evidence is None or evidence.start is None or evidence.end is None:
            out.append(Span(path=path, value=leaf, quote=quote))
            continue
        inner = align(text[evidence.start : evidence.end], [(path, leaf)], work=work)[0]
        if inner.start is not None and inner.end is not None and inner.kind != "none":
            start, end = evidence.start + inner.start, evidence.start + inner.end
            out.append(replace(inner, start=start, end=end, quote=quote))
        else:
            out.append(Span(path=path, value=leaf, quote=quote))
    return out


def ground_pages(
    pages: Sequence[Page],
    value: BaseModel | Mapping[str, Any],
    quotes: Mapping[str, str] | None = None,
    *,
    fields: GroundingFields | None = None,
    work: Work | None = None,
) -> list[Span]:
    """One span per leaf of ``value``, found in ``pages`` (see the module docstring); with
    ``quotes`` (each leaf's quote by its path, ``merged_quotes``), checked through them;
    ``fields``: ``grounding_fields``; ``work``: counts and can stop the work."""
    texts = [page for page in pages if page.text]
    starts: list[int] = []
    offset = 0
    for page in texts:
        starts.append(offset)
        offset += len(page.text) + len(PAGE_SEPARATOR)
    joined = PAGE_SEPARATOR.join(page.text for page in texts)
    leaves = leaves_of(value, booleans=True)
    spans = ground_leaves(
        joined, leaves, quotes or {}, inferred=inferred_paths(value, fields), work=work
    )
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
        texts = dict(leaves_of(value, booleans=True))
        for span in spans:
            if span.quote is None or span.path not in texts:
                continue
            key = (_pattern(span.path), texts[span.path])
            if not pool.get(key):
                pool[key] = span.quote
    out: dict[str, str] = {}
    for path, text in leaves_of(merged, booleans=True):
        quote = pool.get((_pattern(path), text))
        if quote is not None:
            out[path] = quote
    return out
