"""One document's answers -> one answer: list items found once, scalars by rule, conflicts kept.

A document sent in several chunks (and, with ``passes=N``, several passes per chunk) has one
answer per chunk; ``merge_chunks`` makes them one (pure; no request):

- **Lists** (at any depth outside another list): items are taken chunk by chunk, in the order
  they first occur in the document (within a chunk, the first pass's order; an item a later
  pass added goes where its text fields are in the chunk's text, else after the chunk's other
  items). An item that is one
  already taken is dropped (counted in ``duplicates``):
  - **with spans** (grounding): two items are one when their spans overlap (a text field both
    grounded at the same place in the document: spans sharing at least half the shorter; when
    they ground no text field in common, the range from the first to the last grounded leaf of
    each; an item placed by numbers only is not placed) and their fields agree: a field both
    grounded at the same place agrees whatever the values say (one of them misread it: a
    conflict), a field only one of them grounded is not compared (the other value was made
    up), nor a number grounded at two places;
  - **without spans** (grounding off, or an item not placed): two items are
    one when their fields agree and they could be the same place in the text: two passes of one
    chunk, or neighbouring chunks when the item's agreeing values are in the text the two chunks
    share (their overlap and the line the later chunk is told the earlier one ended with), or,
    with grounding, when one of them is nowhere in its own chunk's text (the other is where the
    item is).
  - items of one answer (one pass of one chunk) are never merged with each other: a list that
    names the same thing twice may mean it (two identical line items);
  - fields **agree** when no field both items give (not null) differs after normalisation
    (text folded: case, width, spacing; numbers by value) and at least one is equal;
    ``dedupe_on`` names the key fields instead (``["sku", "date"]``; ``"items.sku"`` names a
    field of the ``items`` list only): all of them must be given by both and equal. A key
    field of one item absorbs one item of each other answer at most, so two identical items in
    the shared text stay two. ``dedupe_on=[]`` merges nothing (lists are concatenated);
  - the item kept is the one with more grounded fields (without spans: more fields given),
    ties to the earlier; a field where the two still differ is a conflict.
- **Scalars** (fields outside lists), by ``rules`` (field path -> rule; default ``"first"``):
  ``"first"`` / ``"last"``: the first / last value given (chunk order); ``"most_grounded"``:
  the value whose span is best (grounded, then exact before normalized before fuzzy, then
  score), ties to the first; ``"all"``: the list of the distinct values, in order.
- **Conflicts**: two or more distinct values (after normalisation) for one scalar, or for one
  field of a kept item, are listed ``{"path", "values", "pages"}`` (the pages each value was
  read on: its span's page, else its chunk's pages), whatever the rule kept.

Each kept value keeps its span (paths renumbered; a scalar the kept chunk did not ground takes
the span of a chunk that read the same value), so the merged answer's ``kx_spans`` point where
each value was read. The comparisons (normal forms, agreement, key fields) are in
``run.merge_fields``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..ground import fold, leaves_of
from ..ground.align import _child as child_path
from ..records import Span, is_missing
from .merge_fields import (
    agree,
    copies_in,
    has_letters,
    in_shared,
    item_fields,
    jsonable,
    key_fields,
    list_items,
    new_items,
    normal,
    same_place,
)

__all__ = [
    "DEFAULT_RULE",
    "SCALAR_RULES",
    "ChunkAnswer",
    "Merged",
    "list_items",
    "merge_chunks",
    "new_items",
    "normal",
]

#: The scalar merge rules (``run_documents(merge={"path": rule})``).
SCALAR_RULES = ("first", "last", "most_grounded", "all")
DEFAULT_RULE = "first"
_KIND_RANK = {"exact": 3, "normalized": 2, "fuzzy": 1}


@dataclass
class ChunkAnswer:
    """One chunk's answer to merge (its passes' lists already combined).

    ``value``: the answer as plain data (``model_dump()``); ``chunk``: its 0-based number;
    ``pages``: the pages it was sent; ``item_pass``: the pass (1-based) each list item came from,
    by its path (``"items[3]"``; items not named came from pass 1); ``spans``: each leaf's span
    by its path (page offsets), None without grounding; ``shared``: the text it shares with the
    chunk before it; ``text``: its own text.
    """

    value: Mapping[str, Any]
    chunk: int
    pages: tuple[int, ...] = ()
    item_pass: Mapping[str, int] = field(default_factory=dict)
    spans: Mapping[str, Span] | None = None
    shared: str = ""
    #: How many chunks before it share text with it (``media.chunks.reach_back``).
    reach: int = 1
    #: The chunk's text (its pages joined), which places items a later pass added.
    text: str = ""


@dataclass
class Merged:
    """The merged answer of one document (module docstring)."""

    value: dict[str, Any]
    spans: list[Span] | None
    duplicates: int = 0
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    #: Items of the merged lists by the first pass that found them (index 0: pass 1).
    items_by_pass: list[int] = field(default_factory=list)


@dataclass
class _Item:
    value: Any
    answer: ChunkAnswer
    path: str  # where it is in its answer ("items[3]")
    first_pass: int
    sources: set[tuple[int, int]]
    extent: tuple[int, int] | None
    fields: dict[str, Any]
    grounded: set[str]
    #: Where its grounded fields holding a letter are (document offsets), by field.
    places: dict[str, tuple[int, int]] = field(default_factory=dict)
    others: list[tuple[Any, ChunkAnswer, str]] = field(default_factory=list)


class _Merger:
    def __init__(
        self,
        answers: Sequence[ChunkAnswer],
        rules: Mapping[str, str],
        dedupe_on: Sequence[str] | None,
        page_base: Mapping[int, int],
    ) -> None:
        self.answers = answers
        self.rules = rules
        self.dedupe_on = dedupe_on
        self.page_base = page_base
        self.spans: list[Span] = []
        self.duplicates = 0
        self.conflicts: list[dict[str, Any]] = []
        self.by_pass: dict[int, int] = {}
        self.grounding = any(a.spans is not None for a in answers)
        #: Items merged through the text two chunks share, by (answer, pass, agreeing values):
        #: at most as many as that text holds.
        self.through_shared: dict[tuple[int, int, tuple[Any, ...]], int] = {}

    # -- walking the answers ----------------------------------------------------------------

    def node(self, path: str, entries: list[tuple[Any, ChunkAnswer]]) -> Any:
        present = [(v, a) for v, a in entries if not _absent(v)]
        if not present:
            return None
        if all(isinstance(v, Mapping) for v, _ in present):
            keys = list(dict.fromkeys(k for v, _ in present for k in v))
            return {
                key: self.node(_child(path, key), [(v.get(key), a) for v, a in present])
                for key in keys
            }
        if all(isinstance(v, list | tuple) for v, _ in present):
            return self.items(path, present)
        return self.scalar(path, [(v, a) for v, a in present if not isinstance(v, Mapping)])

    def scalar(self, path: str, present: list[tuple[Any, ChunkAnswer]]) -> Any:
        if not present:
            return None
        rule = self.rules.get(_pattern(path), DEFAULT_RULE)
        self.conflict(path, [(v, a, path) for v, a in present])
        if rule == "all":
            distinct: dict[Any, tuple[Any, ChunkAnswer]] = {}
            for value, answer in present:
                distinct.setdefault(normal(value), (value, answer))
            out = []
            for index, (value, answer) in enumerate(distinct.values()):
                self.keep_span(answer, path, f"{path}[{index}]")
                out.append(value)
            return out
        if rule == "last":
            value, answer = present[-1]
        elif rule == "most_grounded":
            value, answer = max(present, key=lambda p: (self.quality(p[1], path), -p[1].chunk))
        else:
            value, answer = present[0]
        # the span of the same value where it is best grounded (another chunk may have read it)
        same = [a for v, a in present if normal(v) == normal(value)]
        where = max(same, key=lambda a: (self.quality(a, path), a is answer))
        self.keep_span(where, path, path)
        return value

    def quality(self, answer: ChunkAnswer, path: str) -> tuple[int, float]:
        span = answer.spans.get(path) if answer.spans is not None else None
        if span is None or not span.grounded:
            return (0, 0.0)
        return (_KIND_RANK.get(span.kind, 0), span.score)

    def conflict(self, path: str, present: list[tuple[Any, ChunkAnswer, str]]) -> None:
        values: dict[Any, tuple[Any, set[int]]] = {}
        for value, answer, where in present:
            key = normal(value)
            if key is None:
                continue
            span = answer.spans.get(where) if answer.spans is not None else None
            pages = {span.page} if span is not None and span.grounded and span.page else None
            seen = values.setdefault(key, (value, set()))
            seen[1].update(pages or answer.pages)
        if len(values) > 1:
            self.conflicts.append(
                {
                    "path": path,
                    "values": [jsonable(v) for v, _ in values.values()],
                    "pages": [sorted(pages) for _, pages in values.values()],
                }
            )

    def keep_span(self, answer: ChunkAnswer, old: str, new: str) -> None:
        if answer.spans is None:
            return
        for path, span in answer.spans.items():
            if path == old or path.startswith(old + ".") or path.startswith(old + "["):
                self.spans.append(replace(span, path=new + path[len(old) :]))

    # -- lists --------------------------------------------------------------------------------

    def items(self, path: str, present: list[tuple[Any, ChunkAnswer]]) -> list[Any]:
        keys = key_fields(_pattern(path), self.dedupe_on)
        kept: list[_Item] = []
        for value, answer in present:
            for item in self.in_order(path, value, answer):
                if keys and not any(name in item.fields for name in keys):
                    keys = None  # key fields of another list: every field decides here
                match = None if keys == () else self.match(kept, item, keys)
                if match is None:
                    kept.append(item)
                    continue
                self.duplicates += 1
                match.first_pass = min(match.first_pass, item.first_pass)
                match.sources |= item.sources
                if self.better(item, match):
                    match.others.append((match.value, match.answer, match.path))
                    match.value, match.answer, match.path = item.value, item.answer, item.path
                    match.fields, match.grounded = item.fields, item.grounded
                    match.extent = item.extent or match.extent
                else:
                    match.others.append((item.value, item.answer, item.path))
        out = []
        for index, item in enumerate(kept):
            where = f"{path}[{index}]"
            self.keep_span(item.answer, item.path, where)
            self.by_pass[item.first_pass] = self.by_pass.get(item.first_pass, 0) + 1
            for name in item.fields if item.others else ():
                self.conflict(
                    _child(where, name) if name else where,
                    [
                        (
                            item.fields[name],
                            item.answer,
                            _child(item.path, name) if name else item.path,
                        )
                    ]
                    + [
                        (item_fields(v).get(name), a, _child(p, name) if name else p)
                        for v, a, p in item.others
                    ],
                )
            out.append(item.value)
        return out

    def in_order(self, path: str, value: Sequence[Any], answer: ChunkAnswer) -> list[_Item]:
        """The chunk's items: the first pass's in order, later passes' by their place."""
        made = []
        for index, item in enumerate(value):
            where = f"{path}[{index}]"
            grounded = self.grounded_fields(answer, where)
            made.append(
                _Item(
                    value=item,
                    answer=answer,
                    path=where,
                    first_pass=answer.item_pass.get(where, 1),
                    sources={(answer.chunk, answer.item_pass.get(where, 1))},
                    extent=self.extent(answer, where),
                    fields=item_fields(item),
                    grounded=grounded,
                    places=self.places(answer, where),
                )
            )
        first = [m for m in made if m.first_pass == 1]
        later = [m for m in made if m.first_pass > 1]
        if not later:
            return first
        folded = fold(answer.text)
        places = {id(m): _position(m.fields, folded) for m in made}
        for item in later:
            at = len(first)
            mine = places[id(item)]
            if mine is not None:
                at = next(
                    (i for i, m in enumerate(first) if _after(places[id(m)], mine)), len(first)
                )
            first.insert(at, item)
        return first

    def grounded_fields(self, answer: ChunkAnswer, where: str) -> set[str]:
        if answer.spans is None:
            return set()
        out = set()
        for path, span in answer.spans.items():
            if span.grounded and (path == where or path.startswith(where + ".")):
                out.add(path[len(where) + 1 :])
        return out

    def places(self, answer: ChunkAnswer, where: str) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for path, span in (answer.spans or {}).items():
            if not path.startswith(where + ".") or not span.grounded or span.page is None:
                continue
            if span.start is None or span.end is None:
                continue
            base = self.page_base.get(span.page, 0)
            out[path[len(where) + 1 :]] = (base + span.start, base + span.end)
        return out

    def extent(self, answer: ChunkAnswer, where: str) -> tuple[int, int] | None:
        """Where the item is in the document: from its first to its last grounded leaf, when
        one of them holds a letter (numbers alone recur too often to place an item)."""
        if answer.spans is None:
            return None
        starts, ends = [], []
        placed = False
        for path, span in answer.spans.items():
            if not (path == where or path.startswith(where + ".") or path.startswith(where + "[")):
                continue
            if not span.grounded or span.start is None or span.end is None or span.page is None:
                continue
            placed = placed or any(c.isalpha() for c in span.value)
            base = self.page_base.get(span.page, 0)
            starts.append(base + span.start)
            ends.append(base + span.end)
        return (min(starts), max(ends)) if placed else None

    def match(self, kept: list[_Item], item: _Item, keys: tuple[str, ...] | None) -> _Item | None:
        chunk = item.answer.chunk
        for candidate in reversed(kept):
            if min(c for c, _ in candidate.sources) < chunk - item.answer.reach:
                break  # kept in first-occurrence order: the rest are farther back
            if self.same(candidate, item, keys):
                return candidate
        return None

    def same(self, a: _Item, b: _Item, keys: tuple[str, ...] | None) -> bool:
        if b.sources & a.sources:
            return False  # one answer's items are not merged with each other
        if a.extent is not None and b.extent is not None:
            both = [n for n in a.places if n in b.places and has_letters(a.fields.get(n))]
            if both:
                if not any(same_place(a.places[n], b.places[n]) for n in both):
                    return False
            elif not _overlap(a.extent, b.extent):
                return False
            return agree(a.fields, b.fields, keys, (a.places, b.places))[0]
        chunk = b.answer.chunk
        chunks = {c for c, _ in a.sources}
        if not any(chunk - b.answer.reach <= c <= chunk for c in chunks):
            return False
        ok, equal = agree(a.fields, b.fields, keys)
        if not ok:
            return False
        if chunk in chunks:  # another pass over the same chunk
            return True
        if self.grounding and not (a.grounded and b.grounded):
            return True  # one of the two is nowhere in its chunk: the other is where it is
        agreeing = {name: b.fields[name] for name in equal}
        if not in_shared(b.answer.shared, agreeing):
            return False
        # identical items: as many merges as the shared text holds copies of the item
        key = (
            id(b.answer),
            b.first_pass,
            tuple(sorted((n, normal(v)) for n, v in agreeing.items())),
        )
        taken = self.through_shared.get(key, 0)
        if taken >= copies_in(b.answer.shared, agreeing):
            return False
        self.through_shared[key] = taken + 1
        return True

    def better(self, item: _Item, kept: _Item) -> bool:
        if self.grounding:
            return len(item.grounded) > len(kept.grounded)
        filled = sum(1 for v in item.fields.values() if not _absent(v))
        return filled > sum(1 for v in kept.fields.values() if not _absent(v))


def _position(fields: Mapping[str, Any], folded: str) -> int | None:
    """Where an item's text fields first appear in a chunk's folded text (None: nowhere)."""
    found = [
        folded.find(fold(value))
        for value in fields.values()
        if isinstance(value, str) and any(c.isalpha() for c in value)
    ]
    found = [f for f in found if f >= 0]
    return min(found) if found else None


def _after(position: int | None, other: int) -> bool:
    return position is not None and position > other


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def merge_chunks(
    answers: Sequence[ChunkAnswer],
    *,
    rules: Mapping[str, str] | None = None,
    dedupe_on: Sequence[str] | None = None,
    page_base: Mapping[int, int] | None = None,
) -> Merged:
    """One answer from a document's chunk answers, in chunk order (module docstring).

    ``rules``: scalar field path (no list indexes) -> rule; ``dedupe_on``: key fields of list
    items (None: every field; ``[]``: no merging); ``page_base``: each page's offset in the
    document's text (its pages joined), which places spans from different pages."""
    merger = _Merger(answers, rules or {}, dedupe_on, page_base or {})
    value = merger.node("", [(a.value, a) for a in answers]) or {}
    spans = None
    if merger.grounding:
        by_path = {span.path: span for span in merger.spans}
        spans = [
            by_path.get(path) or Span(path=path, value=text)
            for path, text in leaves_of(value, booleans=True)
        ]
    passes = max(merger.by_pass, default=1)
    return Merged(
        value=value,
        spans=spans,
        duplicates=merger.duplicates,
        conflicts=merger.conflicts,
        items_by_pass=[merger.by_pass.get(p, 0) for p in range(1, passes + 1)],
    )


def _absent(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip()) or is_missing(value)


def _child(path: str, key: Any) -> str:
    return child_path(path, key)


def _pattern(path: str) -> str:
    """A path without list indexes (``items[2].sku`` -> ``items.sku``)."""
    out, depth = [], 0
    for char in path:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif depth == 0:
            out.append(char)
    return "".join(out)
