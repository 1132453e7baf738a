"""One document unit's chunk results -> its row: passes combined, chunks grounded, then merged.

``merge_unit`` is ``DocumentPlan.merge``'s work for one unit (``run.documents``):

1. each chunk's passes become one answer (``combined``): the first pass's answer, each of its
   outermost lists extended by the items later passes added (each item remembers its pass);
2. with grounding, that answer is aligned to the pages the chunk was sent (``ground_chunk``:
   ``grounding.ground_pages`` on the chunk's pieces, offsets moved into the whole pages), so
   identical items of two passes take two occurrences when the text has two;
3. the chunks' answers are merged (``run.merge.merge_chunks``) and the unit's ``UnitOutcome``
   records what was removed, the conflicts, and what each pass added and cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel

from ..ground import Interrupted, Work
from ..media.chunks import ChunkContext, reach_back
from ..media.documents import Page
from ..records import RowResult, Span, Usage
from .grounding import PAGE_SEPARATOR, ground_pages
from .merge import ChunkAnswer, list_items, merge_chunks


@dataclass
class UnitOutcome:
    """What merging one unit's chunks did (the ``kx_duplicates_removed``, ``kx_conflicts``,
    ``kx_passes`` and ``kx_items_by_pass`` cells)."""

    duplicates: int = 0
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    #: The most passes one of its chunks ran.
    passes: int = 1
    #: Merged list items by the first pass that found them (index 0: pass 1).
    items_by_pass: list[int] = field(default_factory=list)
    #: The usage of each pass, summed over the unit's chunks.
    pass_usage: list[Usage] = field(default_factory=list)


def combined(result: RowResult) -> tuple[dict[str, Any], dict[str, int], dict[str, str]]:
    """A chunk's passes as one answer: (its value as plain data, the pass of each item added by
    a later pass by its path, each leaf's quote by its path when its spans carry quotes)."""
    assert result.value is not None
    value = result.value.model_dump()
    quotes = _quotes(result.spans, {})
    item_pass: dict[str, int] = {}
    lists = {path: _list_at(value, path) for path in list_items(value)}
    for number, later in enumerate((result.passes or [])[1:], start=2):
        dump = later.value.model_dump()
        for path, items in list_items(dump).items():
            target = lists.get(path)
            if target is None:
                continue
            for index, item in enumerate(items):
                new = f"{path}[{len(target)}]"
                item_pass[new] = number
                target.append(item)
                quotes.update(_quotes(later.spans, {f"{path}[{index}]": new}))
    return value, item_pass, quotes


def _list_at(value: dict[str, Any], path: str) -> list[Any]:
    node: Any = value
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[part]
    if not isinstance(node[parts[-1]], list):
        node[parts[-1]] = list(node[parts[-1]])
    return node[parts[-1]]


def _quotes(spans: Sequence[Span] | None, moved: Mapping[str, str]) -> dict[str, str]:
    """Each quoted leaf's quote by its path; with ``moved``, only the leaves under those item
    paths, renamed (``items[0].sku`` -> ``items[7].sku``)."""
    out: dict[str, str] = {}
    for span in spans or ():
        if span.quote is None:
            continue
        if not moved:
            out[span.path] = span.quote
            continue
        for old, new in moved.items():
            if span.path == old or span.path.startswith((old + ".", old + "[")):
                out[new + span.path[len(old) :]] = span.quote
    return out


def ground_chunk(
    chunk: Sequence[Page],
    value: Mapping[str, Any],
    quotes: Mapping[str, str] | None,
    *,
    fields: Mapping[str, bool] | None = None,
    work: Work | None = None,
) -> list[Span]:
    """One span per leaf of ``value``, found in the chunk's pieces; offsets into each page's
    whole text (a piece starts ``Page.offset`` characters into its page)."""
    spans = ground_pages(chunk, value, quotes, fields=fields, work=work)
    offsets = {page.number: page.offset for page in chunk if page.text and page.offset}
    out = []
    for span in spans:
        shift = offsets.get(span.page) if span.page is not None else None
        if shift and span.start is not None and span.end is not None:
            span = replace(span, start=span.start + shift, end=span.end + shift)
        out.append(span)
    return out


def page_bases(pages: Sequence[Page]) -> dict[int, int]:
    """Each page's offset in the unit's pages joined by ``PAGE_SEPARATOR``."""
    bases: dict[int, int] = {}
    offset = 0
    for page in pages:
        if page.text:
            bases[page.number] = offset
            offset += len(page.text) + len(PAGE_SEPARATOR)
    return bases


def merge_unit(
    chunks: Sequence[Sequence[Page]],
    contexts: Sequence[ChunkContext],
    pages: Sequence[Page],
    results: Sequence[RowResult],
    result: RowResult,
    outcome: UnitOutcome,
    model: type[BaseModel],
    *,
    rules: Mapping[str, str],
    dedupe_on: Sequence[str] | None,
    grounding: bool | str = False,
    grounding_fields: Mapping[str, bool] | None = None,
    work: Work | None = None,
) -> None:
    """Fill ``result`` (value, spans) and ``outcome`` from one unit's chunk ``results`` (the
    module docstring). A stop of ``work`` (Ctrl-C) while grounding leaves the unit without
    spans."""
    answers: list[ChunkAnswer] = []
    stopped = False
    for index, (chunk, context, chunk_result) in enumerate(
        zip(chunks, contexts, results, strict=True)
    ):
        passes = chunk_result.passes or []
        outcome.passes = max(outcome.passes, len(passes))
        usages = [p.usage for p in passes] or [chunk_result.usage]
        for number, usage in enumerate(usages):
            if number == len(outcome.pass_usage):
                outcome.pass_usage.append(Usage())
            outcome.pass_usage[number] = outcome.pass_usage[number] + usage
        if chunk_result.value is None:
            continue
        value, item_pass, quotes = combined(chunk_result)
        answer = ChunkAnswer(
            value=value,
            chunk=index,
            pages=tuple(dict.fromkeys(p.number for p in chunk)),
            item_pass=item_pass,
            shared=context.shared,
            reach=reach_back(chunks, index),
            text=PAGE_SEPARATOR.join(p.text for p in chunk if p.text) if item_pass else "",
        )
        answers.append(answer)
        if grounding and not stopped:
            try:
                spans = ground_chunk(
                    chunk,
                    value,
                    quotes if grounding == "quotes" else None,
                    fields=grounding_fields,
                    work=work,
                )
            except Interrupted:
                stopped = True
            else:
                answer.spans = {span.path: span for span in spans}
    if not answers:
        return
    if stopped:  # Ctrl-C: the unit is merged without spans
        for answer in answers:
            answer.spans = None
    merged = merge_chunks(answers, rules=rules, dedupe_on=dedupe_on, page_base=page_bases(pages))
    # Not validated: a merge of valid chunks (e.g. a longer list) may break a constraint no
    # single chunk broke; the frame reads the attributes only.
    fields = {name: merged.value.get(name) for name in model.model_fields}
    result.value = model.model_construct(**fields)
    result.spans = merged.spans
    outcome.duplicates = merged.duplicates
    outcome.conflicts = merged.conflicts
    by_pass = merged.items_by_pass
    outcome.items_by_pass = by_pass + [0] * (max(outcome.passes, 1) - len(by_pass))
