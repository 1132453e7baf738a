"""Align the leaves of an answer to the text they were extracted from (pure; no model calls).

``leaves_of(answer)`` lists the leaves to ground as ``(path, text)``; ``align(text, leaves)``
returns one ``records.Span`` per leaf, in order. Each leaf goes through three stages and stops at
the first that finds it:

1. **exact**: the leaf's text, or one of its ``forms.surface_forms`` (numbers and dates as they
   are written in text), found verbatim with ``str.find``;
2. **normalized**: the same forms found in the folded text (``normalize``: NFKC, casefold,
   punctuation shapes, whitespace dropped), the match mapped back to original offsets;
3. **fuzzy**: strings (not numbers or dates) of at least ``MIN_FUZZY_CHARS`` folded characters,
   located with RapidFuzz (``fuzz.partial_ratio_alignment``) inside candidate windows picked by a
   character-bigram index of the folded text (no tokenisation, so it works for scripts without
   spaces), the ends moved to whole words of spaced scripts, and scored as
   ``100 * (1 - Levenshtein distance / longer length)`` (RapidFuzz
   ``Levenshtein.normalized_similarity``, on the folded, composed text): the share of
   characters kept, so one typo in 10 characters scores 90. Kept when the score reaches
   ``min_score`` (default ``DEFAULT_MIN_SCORE`` = 85: at most one edit in 7 characters, two in
   14...). Below it the leaf gets no span.

A match must not cut a word of a spaced script (Latin, Greek, Cyrillic...: ``art`` is not found
inside ``start``) nor a number (``200`` is not found inside ``1,200`` or ``2005``); Chinese,
Japanese, Thai and Hangul text has no such boundary. When a form occurs several times, the
occurrence chosen is the first one not already used by an earlier leaf, nearest to the end of
the previous grounded leaf (looking forward first: a backward distance counts four times, as
answers mostly follow the text's order), else the first one.
Scores: 100 for exact and normalized, the Levenshtein similarity (0..100) for fuzzy, 0 for none.
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import date, datetime, time
from decimal import Decimal
from enum import Enum
from typing import Any

import numpy as np
from pydantic import BaseModel
from rapidfuzz import fuzz
from rapidfuzz.distance import Levenshtein

from ..records import Span
from .forms import is_numeric, surface_forms
from .normalize import Normalized, fold, normalize

#: Fuzzy matches scoring below this (Levenshtein similarity, 0..100) give no span.
DEFAULT_MIN_SCORE = 85.0
#: Strings shorter than this (folded characters) are grounded only exactly or normalized: one
#: edit in a short string is as likely another word as a typo.
MIN_FUZZY_CHARS = 6
#: Occurrences examined per form before taking the best seen.
_MAX_OCCURRENCES = 64
#: Folded texts up to this length are searched whole by the fuzzy stage (no index).
_INDEX_FROM = 20_000
#: Candidate windows the fuzzy stage scores per leaf.
_CANDIDATES = 48

#: How much farther a match behind the previous leaf counts than one after it: answers usually
#: list values in the order the text gives them.
_BACKWARD = 4
# accept() results
_REJECT, _USED, _FREE = 0, 1, 2


def _spaced(char: str) -> bool:
    """A word character of a script that separates words with spaces."""
    if not char.isalnum():
        return False
    code = ord(char)
    return code < 0x0E00 or 0x1E00 <= code < 0x2000 or 0xFF10 <= code <= 0xFF5A


def _bounded(text: str, start: int, end: int, numeric: bool) -> bool:
    """Whether ``text[start:end]`` cuts no word (spaced scripts) and no number."""
    before = text[start - 1] if start > 0 else ""
    after = text[end] if end < len(text) else ""
    if numeric:
        if before.isdigit() or after.isdigit():
            return False
        if before in ".,'" and before and start > 1 and text[start - 2].isdigit():
            return False
        return not (after in ".,'" and after and end + 1 < len(text) and text[end + 1].isdigit())
    if before and _spaced(before) and _spaced(text[start]):
        return False
    return not (after and _spaced(after) and _spaced(text[end - 1]))


def _occurrences(haystack: str, needle: str, anchor: int | None) -> Iterator[int]:
    """Start indices of ``needle``: from the first on without an anchor, else by distance from
    ``anchor`` (a backward step counts ``_BACKWARD`` times)."""
    size = len(needle)
    if anchor is None:
        found = haystack.find(needle)
        while found != -1:
            yield found
            found = haystack.find(needle, found + 1)
        return
    forward = haystack.find(needle, anchor)
    # backward occurrences start before ``anchor``: searched in ``haystack[:bound]``, and only as
    # far back as could still beat the next forward one (a whole-text rfind per leaf is slow)
    bound = anchor + size - 1
    while True:
        if forward != -1:
            lowest = max(0, anchor - (forward - anchor) // _BACKWARD)
            backward = haystack.rfind(needle, lowest, bound) if bound > lowest else -1
            if backward != -1 and _BACKWARD * (anchor - backward) < forward - anchor:
                yield backward
                bound = backward + size - 1
                continue
            yield forward
            forward = haystack.find(needle, forward + 1)
            continue
        backward = haystack.rfind(needle, 0, bound) if bound > 0 else -1
        if backward == -1:
            return
        yield backward
        bound = backward + size - 1


def _pick(
    haystack: str, needle: str, anchor: int | None, accept: Callable[[int, int], int]
) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """(the first free acceptable occurrence, the first used one), each (start, end) or None."""
    used = None
    for count, start in enumerate(_occurrences(haystack, needle, anchor)):
        if count >= _MAX_OCCURRENCES:
            break
        verdict = accept(start, start + len(needle))
        if verdict == _FREE:
            return (start, start + len(needle)), used
        if verdict == _USED and used is None:
            used = (start, start + len(needle))
    return None, used


class _Source:
    """The text being aligned to, with its folded form and bigram index built on first use."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._normalized: Normalized | None = None
        self._index: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def normalized(self) -> Normalized:
        if self._normalized is None:
            self._normalized = normalize(self.text)
        return self._normalized

    def index(self) -> tuple[np.ndarray, np.ndarray]:
        """(sorted bigram keys, their start positions) of the folded text."""
        if self._index is None:
            keys = _bigram_keys(self.normalized.text)
            order = np.argsort(keys, kind="stable")
            self._index = (keys[order], order)
        return self._index


def _bigram_keys(text: str) -> np.ndarray:
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    codes = codes.astype(np.uint64)
    return (codes[:-1] << np.uint64(21)) | codes[1:]


def _windows(source: _Source, needle: str) -> list[tuple[int, int]]:
    """Folded-text windows where many of ``needle``'s bigrams line up (a q-gram filter).

    Each occurrence of a bigram of the needle votes for the diagonal (text position minus its
    position in the needle) it lies on; diagonals are counted in cells of half the needle's
    length, and the ``_CANDIDATES`` best pairs of adjacent cells become windows. Bigrams more
    frequent than 2 % of the text are left out (unless fewer than two others remain).
    """
    folded = source.normalized.text
    size = len(needle)
    if len(folded) <= _INDEX_FROM:
        return [(0, len(folded))]
    keys, positions = source.index()
    wanted = _bigram_keys(needle)
    low = np.searchsorted(keys, wanted, side="left")
    high = np.searchsorted(keys, wanted, side="right")
    counts = high - low
    present = np.flatnonzero(counts)
    if len(present) == 0:
        return []
    keep = present[counts[present] <= max(1_000, len(folded) // 50)]
    if len(keep) < 2:
        keep = present[np.argsort(counts[present], kind="stable")[:2]]
    diagonals = np.concatenate([positions[low[j] : high[j]] - j for j in keep])
    diagonals = diagonals[diagonals >= 0]
    bucket = max(4, size // 2)
    votes = np.bincount(diagonals // bucket)
    if len(votes) < 2:
        votes = np.append(votes, 0)
    pairs = votes[:-1] + votes[1:]
    need = max(2, math.ceil(0.3 * len(keep)))
    count = min(_CANDIDATES, len(pairs))
    best = np.argpartition(-pairs, count - 1)[:count]
    found = []
    for cell in sorted(best.tolist(), key=lambda c: -int(pairs[c])):
        if pairs[cell] < need:
            break
        first = cell * bucket
        found.append((max(0, first - 2), min(len(folded), first + 2 * bucket + size + 2)))
    return found


def _fuzzy(
    source: _Source, value: str, anchor: int | None, used: set[tuple[int, int]], min_score: float
) -> tuple[int, int, float] | None:
    """The best fuzzy match of ``value`` as (start, end, score) in original offsets, or None."""
    needle = fold(value)
    if len(needle) < MIN_FUZZY_CHARS:
        return None
    normalized = source.normalized
    folded = normalized.text
    text = source.text
    composed = unicodedata.normalize("NFC", needle)
    best: tuple[float, int, int, int] | None = None  # (score, -free, distance, start), end
    best_span: tuple[int, int] | None = None
    for low, high in _windows(source, needle):
        window = folded[low:high]
        if not window:
            continue
        if len(window) <= len(needle):
            a, b = low, high
        else:
            found = fuzz.partial_ratio_alignment(needle, window, score_cutoff=min_score - 15)
            if found is None:
                continue
            a, b = low + found.dest_start, low + found.dest_end
        a, b = _refine(needle, folded, a, b)
        if b <= a:
            continue
        start, end = normalized.to_original(a, b)
        start, end = _snap(text, start, end)
        score = _similarity(composed, unicodedata.normalize("NFC", fold(text[start:end])))
        if score < min_score:
            continue
        distance = abs(start - anchor) if anchor is not None else start
        rank = (score, int((start, end) not in used), -distance, -start)
        if best is None or rank > best:
            best, best_span = rank, (start, end)
    if best is None or best_span is None:
        return None
    return best_span[0], best_span[1], best[0]


def _similarity(needle: str, found: str) -> float:
    """100 x (1 - Levenshtein distance / the longer length): the share of characters kept.

    Scored on composed text (NFC), so that a kana with its voicing mark or an accented letter
    (two folded characters) counts as one character.
    """
    return round(100.0 * Levenshtein.normalized_similarity(needle, found), 2)


def _refine(needle: str, folded: str, a: int, b: int) -> tuple[int, int]:
    """Move each end of a folded window by up to 2 characters to maximise the similarity."""
    best = (Levenshtein.normalized_similarity(needle, folded[a:b]), a, b)
    for da in (-2, -1, 0, 1, 2):
        for db in (-2, -1, 0, 1, 2):
            x, y = max(0, a + da), min(len(folded), b + db)
            if y > x:
                score = Levenshtein.normalized_similarity(needle, folded[x:y])
                if score > best[0]:
                    best = (score, x, y)
    return best[1], best[2]


def _snap(text: str, start: int, end: int) -> tuple[int, int]:
    """Widen a span so that it cuts no word of a spaced script; trim whitespace at its ends."""
    while start > 0 and _spaced(text[start - 1]) and _spaced(text[start]):
        start -= 1
    while end < len(text) and _spaced(text[end]) and _spaced(text[end - 1]):
        end += 1
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _align_one(
    source: _Source,
    path: str,
    value: str,
    anchor: int | None,
    used: set[tuple[int, int]],
    min_score: float,
) -> Span:
    stripped = value.strip()
    if not stripped:
        return Span(path, value)
    text = source.text
    numeric = is_numeric(stripped)
    forms = surface_forms(stripped)

    def accept(start: int, end: int) -> int:
        if not _bounded(text, start, end, numeric):
            return _REJECT
        return _USED if (start, end) in used else _FREE

    # free occurrences first (exact, then normalized), then ones an earlier leaf already holds
    fallback: Span | None = None
    for form in forms:
        free, taken = _pick(text, form, anchor, accept)
        if free is not None:
            return Span(path, form, free[0], free[1], "exact", 100.0)
        if taken is not None and fallback is None:
            fallback = Span(path, form, taken[0], taken[1], "exact", 100.0)
    normalized = source.normalized
    folded_anchor = None if anchor is None else normalized.from_original(anchor)

    def accept_folded(a: int, b: int) -> int:
        return accept(*normalized.to_original(a, b))

    for form in forms:
        needle = fold(form)
        if not needle:
            continue
        free, taken = _pick(normalized.text, needle, folded_anchor, accept_folded)
        if free is not None:
            start, end = normalized.to_original(*free)
            return Span(path, form, start, end, "normalized", 100.0)
        if taken is not None and fallback is None:
            start, end = normalized.to_original(*taken)
            fallback = Span(path, form, start, end, "normalized", 100.0)
    if fallback is not None:
        return fallback
    if not numeric:
        fuzzy = _fuzzy(source, stripped, anchor, used, min_score)
        if fuzzy is not None:
            return Span(path, stripped, fuzzy[0], fuzzy[1], "fuzzy", round(fuzzy[2], 2))
    return Span(path, value)


def align(
    text: str, leaves: Sequence[tuple[str, str]], *, min_score: float = DEFAULT_MIN_SCORE
) -> list[Span]:
    """One ``Span`` per leaf, in order: where ``text[start:end]`` holds the leaf, or kind "none".

    ``leaves``: ``(path, text)`` pairs (``leaves_of``). ``min_score``: the lowest fuzzy score
    (0..100) that still grounds a leaf. Offsets are ``str`` indices into ``text``.
    """
    source = _Source(text)
    used: set[tuple[int, int]] = set()
    anchor: int | None = None
    spans = []
    for path, value in leaves:
        span = _align_one(source, path, value, anchor, used, min_score)
        if span.start is not None and span.end is not None:
            used.add((span.start, span.end))
            anchor = span.end
        spans.append(span)
    return spans


def _leaf_text(value: Any) -> str | None:
    """A leaf's text, or None for what is not grounded (None, booleans, NaN)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, Enum):
        return _leaf_text(value.value)
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


def leaves_of(answer: BaseModel | Mapping[str, Any]) -> list[tuple[str, str]]:
    """The leaves of an answer to ground, in field order, as ``(path, text)``.

    Strings, numbers (``1200.5``; never in exponent form), dates and times (ISO), enums (their
    value) and other scalars (``str()``), through nested models, dicts (``a.key``, or
    ``a["odd key"]``), lists and tuples (``items[2].name``). None, booleans and non-finite
    numbers are not leaves.
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
            leaf = _leaf_text(node)
            if leaf is not None:
                found.append((path, leaf))
            continue
        stack.extend(reversed(children))
    return found
