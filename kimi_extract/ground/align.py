"""Align the leaves of an answer to the text they were extracted from (pure; no model calls).

``leaves_of(answer)`` lists the leaves to ground as ``(path, text)``; ``align(text, leaves)``
returns one ``records.Span`` per leaf, in order. Each leaf goes through the stages of
``match.Matcher`` (exact, normalized, fuzzy / near) and stops at the first that finds it.

Which occurrence: a value found more than once takes the one nearest its context. Leaves are
grouped by the object they belong to (``items[2].name`` and ``items[2].price``; the items of a
list of scalars form one group), groups taken in order. An object's place is the middle
(median) of its leaves found exactly once in the text, and each repeated leaf takes its
occurrence nearest that place, a verbatim one before a normalized one (``NORMALIZED_PENALTY``).
An object with no such leaf lies between its neighbours (the objects of a list follow the
text's order): its prior place is midway between the previous object's position and the next
one's, or forward from the previous one (a backward step counts ``BACKWARD`` times); one of 2 to
``CLUSTER_LEAVES`` leaves then takes the place its fields cluster around (``_center``: the
occurrence nearest to one occurrence of every leaf, each distance counted up to
``CLUSTER_REACH``, pulled towards the prior place). "Nearest" counts line breaks and blank
lines between an occurrence and its object's other fields as extra distance (``_nearest``): a
record of a list or a table mostly keeps to its line or paragraph. A list of scalars goes item
after item, each looking forward from the one before. An occurrence already given to another
leaf (the same span) is passed over for a free one when there is one.

Bounds (``match``'s module docstring; counted by ``work.Work``): per leaf, a fixed number of
searches of the text per written form (two passes) and a fixed number of fuzzy comparisons of
bounded size, so a row's grounding is linear in its text for a given answer. ``align(...,
work=Work(stop_event))`` stops with ``work.Interrupted`` soon after the event is set.
Scores are calibrated (``calibrate``): the share of such spans that were right on the grounding
benchmark.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from datetime import date, datetime, time
from decimal import Decimal
from enum import Enum
from typing import Any

from pydantic import BaseModel

from ..records import Span
from .calibrate import calibrated
from .match import DEFAULT_MIN_SCORE, MIN_FUZZY_CHARS, Found, LeafValue, Matcher, Taken
from .source import SourceText
from .work import Work

__all__ = ["BACKWARD", "DEFAULT_MIN_SCORE", "MIN_FUZZY_CHARS", "align", "leaves_of"]

#: How much farther a match behind the anchor counts than one after it, when looking forward
#: from the previous group.
BACKWARD = 4
#: Objects of up to this many leaves place their repeated leaves by clustering (``_center``),
#: from up to ``CLUSTER_OCCURRENCES`` occurrences of each (a leaf with more tells nothing).
CLUSTER_LEAVES = 12
CLUSTER_OCCURRENCES = 16
#: How far (characters) a leaf's distance counts in ``_center``: about an object's extent.
CLUSTER_REACH = 600
#: When choosing between occurrences, a normalized one counts this many characters farther,
#: and so does each line break (``LINE_PENALTY``) and blank line (``PARAGRAPH_PENALTY``) between
#: an occurrence and its object's other fields.
NORMALIZED_PENALTY = 200
LINE_PENALTY = 20
PARAGRAPH_PENALTY = 300
_LAST_STEP = re.compile(r"(\[\d+\]|\.[^.\[\]]+|\[\"(?:[^\"\\]|\\.)*\"\])$")


def _group(path: str) -> tuple[str, bool]:
    """(the path of the object or list a leaf belongs to, whether it is a list of scalars)."""
    match = _LAST_STEP.search(path)
    if match is None:
        return "", False
    return path[: match.start()], match.group(1).startswith("[") and match.group(1)[1:2].isdigit()


def _center(options: list[list[Found]], prior: int | None) -> int | None:
    """Where one object's fields sit: the occurrence that minimises the sum, over its leaves,
    of the distance to each leaf's nearest occurrence (plus half the distance to ``prior``,
    the object's place between its neighbours)."""
    if not options or (len(options) < 2 and prior is None):
        return None
    best: tuple[int, int] | None = None
    for candidate in {hit.start for hits in options for hit in hits}:
        # each leaf's distance counts up to ``CLUSTER_REACH``: one stray leaf (a wrong unique
        # match) must not drag the object away from where its other fields are
        cost = sum(
            min(CLUSTER_REACH, min(abs(hit.start - candidate) for hit in hits)) for hits in options
        )
        if prior is not None:
            cost += min(CLUSTER_REACH, abs(candidate - prior)) // 2
        if best is None or cost < best[0]:
            best = (cost, candidate)
    return None if best is None else best[1]


def _nearest(
    text: str,
    hits: list[Found],
    anchor: int | None,
    region: tuple[int, int] | None,
    used: Taken,
) -> Found | None:
    """The free occurrence nearest its object among a leaf's listed ones, or None when the list
    may be incomplete (``CLUSTER_OCCURRENCES``) or has no free one.

    Nearest: the distance to the object's ``region`` (the span of its leaves found once; else
    to ``anchor``), plus ``LINE_PENALTY`` per line break and ``PARAGRAPH_PENALTY`` per blank line
    in between (a record of a list or table mostly keeps to its line or paragraph), plus
    ``NORMALIZED_PENALTY`` for a normalized occurrence against a verbatim one.
    """
    if not hits or len(hits) >= CLUSTER_OCCURRENCES or (anchor is None and region is None):
        return None
    free = [h for h in hits if (h.start, h.end) not in used]
    if not free:
        return None
    low, high = region if region is not None else (anchor or 0, anchor or 0)

    def cost(hit: Found) -> int:
        if hit.end <= low:
            a, b = hit.end, low
        elif hit.start >= high:
            a, b = high, hit.start
        else:
            a = b = 0
        between = text[a:b] if b - a < 5_000 else ""
        breaks = between.count("\n")
        paragraphs = between.count("\n\n")
        penalty = LINE_PENALTY * breaks + PARAGRAPH_PENALTY * paragraphs
        return (b - a) + penalty + (NORMALIZED_PENALTY if hit.kind != "exact" else 0)

    return min(free, key=cost)


def _span(text: str, leaf: LeafValue, found: Found | None) -> Span:
    if found is None:
        return Span(leaf.path, leaf.value)
    value = text[found.start : found.end] if found.kind == "exact" else leaf.stripped
    score = calibrated(found.kind, found.raw, found.rule)
    return Span(leaf.path, value, found.start, found.end, found.kind, score, diff=found.diff)


def align(
    text: str,
    leaves: Sequence[tuple[str, str]],
    *,
    min_score: float = DEFAULT_MIN_SCORE,
    work: Work | None = None,
) -> list[Span]:
    """One ``Span`` per leaf, in order: where ``text[start:end]`` holds the leaf, or kind "none".

    ``leaves``: ``(path, text)`` pairs (``leaves_of``). ``min_score``: the lowest fuzzy
    similarity (0..100) that still grounds a leaf. Offsets are ``str`` indices into ``text``.
    ``work``: counts the work and carries a stop flag (``work.Work``); ``work.Interrupted`` is
    raised when it is stopped.
    """
    work = work if work is not None else Work()
    source = SourceText(text, work)
    matcher = Matcher(source, min_score)
    items = [LeafValue.of(path, value) for path, value in leaves]
    # pass 1: each leaf's first occurrences (up to two: is it unique?); a leaf not found
    # literally gets its best fuzzy or near match (one place: an anchor for its object too)
    first: list[list[Found]] = []
    fuzzy: dict[int, Found | None] = {}
    for i, leaf in enumerate(items):
        work.leaves += 1
        work.check()
        hits = matcher.literal(leaf, None, BACKWARD, Taken(), limit=2) if leaf.stripped else []
        if not hits and leaf.stripped:
            close = fuzzy[i] = matcher.fuzzy(leaf, None, Taken())
            hits = [close] if close is not None else []
        first.append(hits)
    groups: dict[str, tuple[bool, list[int]]] = {}
    for i, leaf in enumerate(items):
        key, listed = _group(leaf.path)
        groups.setdefault(key, (listed, []))[1].append(i)
    found: list[Found | None] = [None] * len(items)
    used = Taken()
    order = list(groups.values())
    # each object's anchor: the median of its leaves found once; objects without one lie
    # between their neighbours (objects and list items follow the text's order)
    anchors: list[int | None] = []
    for listed, members in order:
        uniques = [first[i][0].start for i in members if len(first[i]) == 1]
        anchors.append(int(statistics.median(uniques)) if uniques and not listed else None)
    previous: int | None = None
    for g, (listed, members) in enumerate(order):
        anchor, backward = anchors[g], 1
        if anchor is None:
            following = next((a for a in anchors[g + 1 :] if a is not None), None)
            if previous is not None and following is not None and following >= previous:
                anchor = (previous + following) // 2
            elif previous is not None:
                anchor, backward = previous, BACKWARD
            elif following is not None and not listed:
                anchor = following
        options: dict[int, list[Found]] = {}
        if listed:
            anchor, backward = previous, BACKWARD
        elif 2 <= len(members) <= CLUSTER_LEAVES:
            for i in members:
                if len(first[i]) > 1:
                    options[i] = matcher.literal(
                        items[i], None, BACKWARD, Taken(), limit=CLUSTER_OCCURRENCES
                    )
                elif first[i]:
                    options[i] = first[i]
            if anchors[g] is None:
                center = _center(
                    [o for o in options.values() if len(o) < CLUSTER_OCCURRENCES], anchor
                )
                if center is not None:
                    anchor, backward = center, 1
        alone = [first[i][0] for i in members if len(first[i]) == 1]
        region = (
            (min(h.start for h in alone), max(h.end for h in alone))
            if alone and not listed
            else None
        )
        chosen: list[Found] = []
        for i in members:
            work.check()
            leaf, hits = items[i], first[i]
            if not leaf.stripped:
                continue
            if i in fuzzy:
                hit: Found | None = fuzzy[i]
            elif len(hits) == 1 and (hits[0].start, hits[0].end) not in used:
                hit = hits[0]
            elif hits:
                hit = _nearest(text, options.get(i, []), anchor, region, used)
                if hit is None:
                    picked = matcher.literal(leaf, anchor, backward, used)
                    hit = picked[0] if picked else hits[0]
            else:
                hit = None
            found[i] = hit
            if hit is None or hit.kind == "near":
                continue
            used.add(hit.start, hit.end)
            chosen.append(hit)
            if listed:
                anchor = hit.end
            elif anchors[g] is None and not options and len(chosen) == 1:
                anchor, backward = hit.start, 1
        if chosen:
            previous = int(statistics.median(h.end for h in chosen))
    return [_span(text, leaf, hit) for leaf, hit in zip(items, found, strict=True)]


def _leaf_text(value: Any, booleans: bool = False) -> str | None:
    """A leaf's text, or None for what is not grounded (None, NaN; booleans unless asked)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return ("true" if value else "false") if booleans else None
    if isinstance(value, Enum):
        return _leaf_text(value.value, booleans)
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format(Decimal(repr(value)), "f") if math.isfinite(value) else None
    if isinstance(value, Decimal):
        return format(value, "f") if value.is_finite() else None
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    return str(value)


def _child(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    name = str(key)
    if name.isidentifier():
        return f"{path}.{name}" if path else name
    return f"{path}[{json.dumps(name, ensure_ascii=False)}]"


def leaves_of(
    answer: BaseModel | Mapping[str, Any], *, booleans: bool = False
) -> list[tuple[str, str]]:
    """The leaves of an answer to ground, in field order, as ``(path, text)``.

    Strings, numbers (``1200.5``; never in exponent form), dates and times (ISO), enums (their
    value) and other scalars (``str()``), through nested models, dicts (``a.key``, or
    ``a["odd key"]``), lists and tuples (``items[2].name``). None and non-finite numbers are not
    leaves; booleans are leaves (``"true"`` / ``"false"``) only with ``booleans=True`` (the run
    lists them as inferred fields).
    """
    found: list[tuple[str, str]] = []
    stack: list[tuple[str, Any]] = [("", answer)]
    while stack:
        path, node = stack.pop()
        children: list[tuple[str, Any]]
        if isinstance(node, BaseModel):
            names = type(node).model_fields
            children = [(_child(path, name), getattr(node, name)) for name in names]
        elif isinstance(node, Mapping):
            children = [(_child(path, key), child) for key, child in node.items()]
        elif isinstance(node, list | tuple):
            children = [(_child(path, i), child) for i, child in enumerate(node)]
        else:
            leaf = _leaf_text(node, booleans)
            if leaf is not None:
                found.append((path, leaf))
            continue
        stack.extend(reversed(children))
    return found
