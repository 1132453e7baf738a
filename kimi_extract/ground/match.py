"""One leaf's match stages: exact, normalized (folded text, rewrites), fuzzy and near (pure).

``Matcher(source).find(leaf, anchor, backward, used)`` returns the best ``Found`` for a leaf,
looked for around ``anchor`` (``align`` picks the anchor; see there), or None:

1. **exact**: the value or one of its written forms (``forms.surface_forms``) verbatim;
2. **normalized**: the same forms in the folded text (``normalize``), then the rewrites
   (``forms.rewrite_forms``: dates and numbers written otherwise, names in the other order),
   numbers written in words or with a scale in the text (``numbers.mentions``: ``3`` finds
   ``three``, ``1200000`` finds ``120万``), abbreviations (``Found.`` for ``Foundation``;
   ``FSF`` for ``Free Software Foundation`` and back), and a last word cut short (``stated ab``
   for ``stated above``);
3. **fuzzy** / **near**: strings of ``MIN_FUZZY_CHARS`` or more folded characters (not numbers
   or dates) located with RapidFuzz in candidate windows (a bigram index of the folded text
   votes for them), the ends moved to whole words of spaced scripts, scored as the similarity
   (0..100: 100 x (1 - edits / the longer length), two neighbours swapped counting as one edit;
   RapidFuzz ``OSA``) of the folded, composed texts. A match that changes no number, negation
   or content word (``nearmiss.difference``) and scores ``min_score`` or more is "fuzzy"; one
   that does change one and scores ``NEAR_MIN_SCORE`` or more is "near" (with its ``diff``).

Bounds per leaf (what makes a row's grounding linear in its text): at most ``MAX_OCCURRENCES``
occurrences examined per form; at most ``MAX_VOTES`` bigram occurrences voting for at most
``CANDIDATES`` fuzzy windows, each at most two needle
lengths plus 8 characters, of which the ``REFINED`` best are refined; a needle longer than
``MAX_PARTIAL_CHARS`` is located by exact pieces of it instead (at most ``PIECES`` pieces and
``PIECE_HITS`` occurrences each, one comparison per window); a span is widened by at most
``SNAP_CHARS`` characters to whole words (a longer "word", such as ``"a" * 200_000``, is no
match). Every search reports its work (``work.Work``) and checks for a stop between steps.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal

import numpy as np
from rapidfuzz import fuzz
from rapidfuzz.distance import OSA, Levenshtein

from .forms import is_numeric, rewrite_forms, surface_forms
from .nearmiss import difference
from .normalize import fold
from .source import SourceText, bigram_keys, bounded, spaced
from .source import letter as _letter
from .work import Work

#: Strings shorter than this (folded characters) are matched only exactly or normalized.
MIN_FUZZY_CHARS = 6
#: Fuzzy matches scoring below this (OSA similarity, 0..100) give no fuzzy span.
DEFAULT_MIN_SCORE = 85.0
#: A close match that changes the meaning is reported as "near" from this similarity on.
NEAR_MIN_SCORE = 70.0
MAX_OCCURRENCES = 64
CANDIDATES = 48
REFINED = 4
MAX_PARTIAL_CHARS = 256
PIECES = 16
PIECE_HITS = 8
SNAP_CHARS = 40
#: Values of at most this many folded characters whose first ``MAX_OCCURRENCES`` occurrences all
#: sit inside longer words ("a" in "patch") are looked for as whole words by a pattern.
SHORT_WORD = 4
#: Folded texts up to this length are searched whole by the fuzzy stage (no index).
INDEX_FROM = 20_000
#: Occurrences of a needle's bigrams that vote for its fuzzy windows, at most (the rarest
#: bigrams first).
MAX_VOTES = 100_000

_REJECT, _USED, _FREE = 0, 1, 2
BACKWARD_CUT = 4
_CJK_END = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]$")
_ACRONYM = re.compile(r"^[A-Z]{2,6}$")
_SMALL_WORDS = r"(?:(?:of|and|the|for|de|du|des|der|für|&)\s+)?"
#: The lower-case words an acronym leaves out (``Free Software Foundation`` -> ``FSF``,
#: ``Bank of America`` -> ``BA``); any other word (a negation) means no acronym.
_JOINERS = frozenset({"of", "and", "the", "for", "de", "du", "des", "der", "für", "&"})


@dataclass(frozen=True)
class LeafValue:
    """A value to align: its forms (value first), rewrites and the number it stands for."""

    path: str
    value: str
    stripped: str
    forms: tuple[str, ...]
    rewrites: tuple[str, ...]
    number: Decimal | None
    numeric: bool
    #: Numbers and dates: strings of which the folded text must hold one for any form but the
    #: value's own to be looked for (the digits every form of it has).
    required: tuple[str, ...] = ()

    @classmethod
    def of(cls, path: str, value: str) -> LeafValue:
        stripped = value.strip()
        numeric = is_numeric(stripped)
        forms = tuple(surface_forms(stripped)) if stripped else ()
        rewrites, number = rewrite_forms(stripped) if stripped else ([], None)
        required: tuple[str, ...] = ()
        if numeric and re.search(r"\d-\d", stripped):  # a date: its year, or an era's name
            required = (stripped[:4], *{form[:2] for form in forms if "年" in form[:4]})
        elif numeric:
            number = Decimal(stripped) if number is None else number
            digits = stripped.lstrip("+-").split(".")[0].lstrip("0") or "0"
            required = (digits[-3:],)
        return cls(path, value, stripped, forms, tuple(rewrites), number, numeric, required)


@dataclass(frozen=True)
class Found:
    """A match: offsets in the text, kind, raw score (100 or the similarity), the rule."""

    start: int
    end: int
    kind: str
    raw: float
    rule: str
    diff: str | None = None


def occurrences(
    haystack: str, needle: str, anchor: int | None, backward: int, work: Work | None = None
) -> Iterator[int]:
    """Start indices of ``needle``: from the first on without an anchor, else by distance from
    ``anchor`` (a backward step counts ``backward`` times). Each stretch of the text is
    searched once (``work`` counts the characters searched)."""
    size = len(needle)
    count = work.scan if work is not None else (lambda chars: None)
    if anchor is None:
        found = haystack.find(needle)
        count(len(haystack) if found == -1 else found + size)
        while found != -1:
            yield found
            start = found + 1
            found = haystack.find(needle, start)
            count(len(haystack) - start if found == -1 else found + size - start)
        return
    forward = haystack.find(needle, anchor)
    count(len(haystack) - anchor if forward == -1 else forward + size - anchor)
    # backward searches look in [searched, bound): ``searched`` only moves down, so no stretch
    # is searched twice
    bound = anchor + size - 1
    searched = bound
    while True:
        if forward != -1:
            lowest = max(0, anchor - (forward - anchor) // backward)
            back = -1
            if lowest < searched:
                back = haystack.rfind(needle, lowest, min(bound, searched + size - 1))
                count(min(bound, searched + size - 1) - (lowest if back == -1 else back))
                searched = lowest if back == -1 else back
            if back != -1 and backward * (anchor - back) < forward - anchor:
                yield back
                bound = back + size - 1
                searched = back
                continue
            if back != -1:
                searched = back + 1  # found but farther than the forward one: look again later
            yield forward
            start = forward + 1
            forward = haystack.find(needle, start)
            count(len(haystack) - start if forward == -1 else forward + size - start)
            continue
        back = haystack.rfind(needle, 0, bound) if bound > 0 else -1
        count(bound if back == -1 else bound - back)
        if back == -1:
            return
        yield back
        bound = back + size - 1


class Taken:
    """The spans already given to leaves (an occurrence equal to one is "used"; one inside
    another leaf's span is not: a city inside an address is the right one)."""

    def __init__(self) -> None:
        self._spans: set[tuple[int, int]] = set()

    def add(self, start: int, end: int) -> None:
        self._spans.add((start, end))

    def __contains__(self, span: object) -> bool:
        return span in self._spans


class Matcher:
    """The match stages over one ``SourceText`` (module docstring)."""

    def __init__(self, source: SourceText, min_score: float = DEFAULT_MIN_SCORE) -> None:
        #: Whether the last ``_pick`` gave up after ``MAX_OCCURRENCES`` rejected occurrences.
        self.capped = False
        self.source = source
        self.min_score = min_score
        self.work = source.work

    # -- exact and normalized ------------------------------------------------------------------

    def _pick(
        self,
        haystack: str,
        needle: str,
        anchor: int | None,
        backward: int,
        accept: Callable[[int, int], int],
        limit: int,
    ) -> list[tuple[int, int, bool]]:
        """Up to ``limit`` free acceptable occurrences (start, end, True) in the order found,
        then the first used one (start, end, False) when fewer were free."""
        free: list[tuple[int, int, bool]] = []
        taken: tuple[int, int, bool] | None = None
        self.capped = False
        for count, start in enumerate(occurrences(haystack, needle, anchor, backward, self.work)):
            if count >= MAX_OCCURRENCES:
                self.capped = not free and taken is None
                break
            verdict = accept(start, start + len(needle))
            if verdict == _FREE:
                free.append((start, start + len(needle), True))
                if len(free) >= limit:
                    break
            elif verdict == _USED and taken is None:
                taken = (start, start + len(needle), False)
        return free + ([taken] if taken is not None and len(free) < limit else [])

    def literal(
        self,
        leaf: LeafValue,
        anchor: int | None,
        backward: int,
        used: Taken,
        limit: int = 1,
    ) -> list[Found]:
        """Exact, then normalized matches of the leaf's forms and rewrites: the first free one
        found around ``anchor`` (else the first used one); with ``limit`` > 1, up to that many
        acceptable occurrences of the first form that has any (``align`` counts them)."""
        text = self.source.text

        def accept(start: int, end: int) -> int:
            if not bounded(text, start, end):
                return _REJECT
            return _USED if (start, end) in used else _FREE

        taken: Found | None = None
        forms = leaf.forms
        if len(forms) > 1 and leaf.required:
            # numbers and dates: their other forms only when the text has their digits
            folded = self.source.normalized.text
            self.work.scan(len(folded) * len(leaf.required))
            if not any(part in folded for part in leaf.required):
                forms = forms[:1]
        stages = (("form", forms), ("rewrite", leaf.rewrites))
        for rule, group in stages:
            for form in group:
                hits = self._search(form, rule, anchor, backward, accept, limit)
                if limit > 1 and hits:
                    return hits
                for hit in hits:
                    if (hit.start, hit.end) not in used:
                        return [hit]
                    taken = taken or hit
        for hit in self._spelled(leaf, anchor, used, limit):
            return [hit]
        if taken is not None:
            return [taken]
        return []

    def _search(
        self,
        form: str,
        rule: str,
        anchor: int | None,
        backward: int,
        accept: Callable[[int, int], int],
        limit: int,
    ) -> list[Found]:
        """Occurrences of ``form`` in the folded text (one search finds the verbatim ones and
        the normalized ones): "exact" when the text reads the form verbatim, else
        "normalized" (rule "folded", or ``rule`` for a rewrite)."""
        needle = fold(form)
        if not needle:
            return []
        normalized = self.source.normalized
        folded_anchor = None if anchor is None else normalized.from_original(anchor)

        folded = normalized.text

        def accept_folded(a: int, b: int) -> int:
            # a match must not split a character from its combining marks (``は`` in ``ば``)
            if unicodedata.combining(folded[a]) or (
                b < len(folded) and unicodedata.combining(folded[b])
            ):
                return _REJECT
            return accept(*normalized.to_original(a, b))

        text = self.source.text
        out = []
        hits = self._pick(normalized.text, needle, folded_anchor, backward, accept_folded, limit)
        spans = [normalized.to_original(a, b) for a, b, _ in hits]
        if not hits and self.capped and len(needle) <= SHORT_WORD:
            # every occurrence examined sat inside a longer word ("a" in "patch"): look for
            # whole words directly
            spans = self._words(form, anchor, accept, limit)
        for start, end in spans:
            if rule == "form" and text[start:end] == form:
                out.append(Found(start, end, "exact", 100.0, "form"))
            else:
                out.append(
                    Found(start, end, "normalized", 100.0, "folded" if rule == "form" else rule)
                )
        return out

    def _words(
        self, form: str, anchor: int | None, accept: Callable[[int, int], int], limit: int
    ) -> list[tuple[int, int]]:
        """Occurrences of ``form`` as a whole word (case aside), nearest ``anchor`` first."""
        text = self.source.text
        lowered = self.source.lowered
        body = r"\s+".join(re.escape(part.lower()) for part in form.split())
        if not body:
            return []
        self.work.scan(len(text))
        # on the lower-cased text when it keeps the offsets: a literal pattern searches fast
        flags = 0 if lowered is not None else re.IGNORECASE
        # the pattern starts with the literal (fast search); the start boundary is checked here
        pattern = re.compile(rf"{body}(?![^\W_])", flags)
        found: list[tuple[int, int]] = []
        for match in pattern.finditer(lowered if lowered is not None else text):
            before = text[match.start() - 1] if match.start() else ""
            if before.isalnum() or before == "_":
                continue
            if accept(match.start(), match.end()) == _FREE:
                found.append((match.start(), match.end()))
                if len(found) >= MAX_OCCURRENCES:
                    break
        if anchor is not None:
            found.sort(key=lambda span: abs(span[0] - anchor))
        return found[:limit]

    def _spelled(self, leaf: LeafValue, anchor: int | None, used: Taken, limit: int) -> list[Found]:
        """Numbers written in words or with a scale in the text; abbreviations."""
        out: list[Found] = []
        if leaf.number is not None:
            spots = self.source.numbers().get(leaf.number.normalize(), [])
            ranked = sorted(spots, key=lambda s: abs(s[0] - anchor) if anchor is not None else 0)
            free = [s for s in ranked if s not in used] or ranked
            out += [Found(s, e, "normalized", 100.0, "spelled") for s, e in free[:limit]]
            return out
        text = self.source.text
        pattern = _abbreviation_pattern(leaf.stripped)
        if pattern is not None:
            self.work.scan(len(text))
            best: tuple[int, int] | None = None
            for count, match in enumerate(pattern.finditer(text)):
                if count >= MAX_OCCURRENCES:
                    break
                span = (match.start(), match.end())
                if not bounded(text, *span) or span in used:
                    continue
                if best is None or (
                    anchor is not None and abs(span[0] - anchor) < abs(best[0] - anchor)
                ):
                    best = span
                if anchor is None:
                    break
            if best is not None:
                return [Found(best[0], best[1], "normalized", 100.0, "abbreviation")]
        acronym = acronym_of(leaf.stripped)
        if acronym is not None:

            def accept(start: int, end: int) -> int:
                if not bounded(text, start, end):
                    return _REJECT
                return _USED if (start, end) in used else _FREE

            hits = self._pick(text, acronym, anchor, BACKWARD_CUT, accept, 1)
            if hits:
                return [Found(hits[0][0], hits[0][1], "normalized", 100.0, "abbreviation")]
        cut = self._cut_word(leaf, anchor, used)
        return [cut] if cut is not None else []

    def _cut_word(self, leaf: LeafValue, anchor: int | None, used: Taken) -> Found | None:
        """A value whose last word was cut short (``stated ab`` for ``stated above``,
        ``generat`` for ``generated``): found in the folded text, its end inside a word of a
        spaced script, the span widened to that word's end (at most ``SNAP_CHARS``). Values of
        5+ characters ending in two letters."""
        value = leaf.stripped
        if len(value) < 5 or not re.search(r"[^\W\d_]{2}$", value) or _CJK_END.search(value):
            return None
        text = self.source.text
        normalized = self.source.normalized
        needle = fold(value)

        def accept(a: int, b: int) -> int:
            start, end = normalized.to_original(a, b)
            if end >= len(text) or not (_letter(text[end]) and _letter(text[end - 1])):
                return _REJECT
            widened = _snap(text, start, end)
            if widened is None or widened[0] != start or not bounded(text, *widened):
                return _REJECT
            return _USED if widened in used else _FREE

        folded_anchor = None if anchor is None else normalized.from_original(anchor)
        hits = self._pick(normalized.text, needle, folded_anchor, BACKWARD_CUT, accept, 1)
        if not hits:
            return None
        start, end = normalized.to_original(hits[0][0], hits[0][1])
        widened = _snap(text, start, end)
        if widened is None:
            return None
        return Found(widened[0], widened[1], "normalized", 100.0, "boundary")

    # -- fuzzy and near ------------------------------------------------------------------------

    def fuzzy(self, leaf: LeafValue, anchor: int | None, used: Taken) -> Found | None:
        """The best fuzzy or near match (module docstring), or None."""
        if leaf.numeric:
            return None
        needle = fold(leaf.stripped)
        if len(needle) < MIN_FUZZY_CHARS:
            return None
        normalized = self.source.normalized
        folded = normalized.text
        if len(needle) > MAX_PARTIAL_CHARS:
            windows = self._pieces(needle)
        else:
            windows = self._located(needle)
        text = self.source.text
        composed = unicodedata.normalize("NFC", needle)
        best: tuple[tuple[float, float, int, int], Found] | None = None
        for low, high in windows:
            a, b = self._refine(needle, folded, low, high)
            if b <= a:
                continue
            start, end = normalized.to_original(a, b)
            snapped = _snap(text, start, end)
            if snapped is None:
                continue
            start, end = snapped
            found = fold(text[start:end])
            self.work.cells(len(needle) * max(1, len(found)))
            score = round(
                100.0 * OSA.normalized_similarity(composed, unicodedata.normalize("NFC", found)),
                2,
            )
            if score < NEAR_MIN_SCORE:
                continue
            diff = difference(leaf.stripped, text[start:end])
            if diff is None and score < self.min_score:
                continue
            kind = "fuzzy" if diff is None else "near"
            distance = abs(start - anchor) if anchor is not None else start
            rank = (float(kind == "fuzzy"), score, int((start, end) not in used), -distance)
            if best is None or rank > best[0]:
                best = (rank, Found(start, end, kind, score, "fuzzy", diff))
        return None if best is None else best[1]

    def _located(self, needle: str) -> list[tuple[int, int]]:
        """Windows (folded offsets) scored by RapidFuzz's partial alignment, best first."""
        folded = self.source.normalized.text
        scored = []
        for low, high in _windows(self.source, needle):
            window = folded[low:high]
            if not window:
                continue
            self.work.cells(len(needle) * len(window))
            if len(window) <= len(needle):
                scored.append((100.0, low, high))
                continue
            found = fuzz.partial_ratio_alignment(needle, window, score_cutoff=NEAR_MIN_SCORE - 15)
            if found is not None:
                scored.append((found.score, low + found.dest_start, low + found.dest_end))
        scored.sort(key=lambda s: -s[0])
        return [(a, b) for _, a, b in scored[:REFINED]]

    def _pieces(self, needle: str) -> list[tuple[int, int]]:
        """Windows for a long needle: where exact pieces of it occur, shifted to its start."""
        folded = self.source.normalized.text
        size = len(needle)
        step = max(16, size // PIECES)
        starts: dict[int, int] = {}
        for offset in range(0, size - 15, step):
            piece = needle[offset : offset + 16]
            found = folded.find(piece)
            hits = 0
            self.work.scan(len(folded))
            while found != -1 and hits < PIECE_HITS:
                self.work.scan(len(folded))
                origin = max(0, found - offset)
                starts[origin // 8] = origin
                hits += 1
                found = folded.find(piece, found + 1)
        ranked = sorted(starts.values())[: REFINED * 2]
        return [(s, min(len(folded), s + size)) for s in ranked]

    def _refine(self, needle: str, folded: str, a: int, b: int) -> tuple[int, int]:
        """Move each end of a folded window by up to 2 characters to maximise the similarity
        (a needle longer than ``MAX_PARTIAL_CHARS``: the ends are kept)."""
        if len(needle) > MAX_PARTIAL_CHARS:
            return a, b
        best = (-1.0, a, b)
        for da in (-2, -1, 0, 1, 2):
            for db in (-2, -1, 0, 1, 2):
                x, y = max(0, a + da), min(len(folded), b + db)
                if y > x:
                    self.work.cells(len(needle) * (y - x))
                    score = Levenshtein.normalized_similarity(needle, folded[x:y])
                    if score > best[0]:
                        best = (score, x, y)
        return best[1], best[2]


def _snap(text: str, start: int, end: int) -> tuple[int, int] | None:
    """Widen a span by at most ``SNAP_CHARS`` on each side so that it cuts no word of a spaced
    script; trim whitespace at its ends. None when a word runs on farther than that."""
    low = start
    while low > 0 and spaced(text[low - 1]) and spaced(text[low]):
        low -= 1
        if start - low > SNAP_CHARS:
            return None
    high = end
    while high < len(text) and spaced(text[high]) and spaced(text[high - 1]):
        high += 1
        if high - end > SNAP_CHARS:
            return None
    while low < high and text[low].isspace():
        low += 1
    while high > low and text[high - 1].isspace():
        high -= 1
    return (low, high) if high > low else None


def _windows(source: SourceText, needle: str) -> list[tuple[int, int]]:
    """Folded-text windows where many of ``needle``'s bigrams line up (a q-gram filter).

    Each occurrence of a bigram of the needle votes for the diagonal (text position minus its
    position in the needle) it lies on; diagonals are counted in cells of half the needle's
    length, and the ``CANDIDATES`` best pairs of adjacent cells become windows. Bigrams more
    frequent than 2 % of the text are left out (unless fewer than two others remain).
    """
    folded = source.normalized.text
    size = len(needle)
    if len(folded) <= INDEX_FROM:
        return [(0, len(folded))]
    keys, positions = source.index()
    wanted = bigram_keys(needle)
    low = np.searchsorted(keys, wanted, side="left")
    high = np.searchsorted(keys, wanted, side="right")
    counts = high - low
    present = np.flatnonzero(counts)
    if len(present) == 0:
        return []
    keep = present[counts[present] <= max(1_000, len(folded) // 50)]
    if len(keep) < 2:
        keep = present[np.argsort(counts[present], kind="stable")[:2]]
    # the rarest bigrams first, at most MAX_VOTES occurrences in all (two bigrams at least)
    keep = keep[np.argsort(counts[keep], kind="stable")]
    total = np.cumsum(counts[keep])
    keep = keep[: max(2, int(np.searchsorted(total, MAX_VOTES, side="right")))]
    source.work.scan(int(counts[keep].sum()))
    diagonals = np.concatenate([positions[low[j] : high[j]].astype(np.int64) - j for j in keep])
    diagonals = diagonals[diagonals >= 0]
    if len(diagonals) == 0:
        return []
    bucket = max(4, size // 2)
    cells, votes = np.unique(diagonals // bucket, return_counts=True)
    # votes of each cell and the next one (cells without a vote count 0)
    following = np.searchsorted(cells, cells + 1)
    has_next = following < len(cells)
    nxt = np.zeros_like(votes)
    nxt[has_next] = votes[following[has_next]]
    nxt[has_next] *= cells[following[has_next]] == cells[has_next] + 1
    pairs = votes + nxt
    need = max(2, math.ceil(0.3 * len(keep)))
    count = min(CANDIDATES, len(pairs))
    best = np.argpartition(-pairs, count - 1)[:count]
    found = []
    for at in sorted(best.tolist(), key=lambda c: -int(pairs[c])):
        if pairs[at] < need:
            break
        first = int(cells[at]) * bucket
        found.append((max(0, first - 2), min(len(folded), first + 2 * bucket + size + 2)))
    return found


def _abbreviation_pattern(value: str) -> re.Pattern[str] | None:
    """A pattern for a value with an abbreviated word (``Found.``), an acronym (``FSF``), or
    whose capitalised words may be written as their acronym in the text; None otherwise."""
    words = value.split()
    if len(value) > 120 or not words:
        return None
    if len(words) == 1 and _ACRONYM.match(words[0]):
        letters = words[0]
        parts = [rf"{c}[\w-]*" for c in letters]
        return re.compile(r"\b" + (r"\s+" + _SMALL_WORDS).join(parts) + r"\b")
    if any(w.endswith(".") and len(w) >= 3 and w[:-1].isalpha() for w in words):
        parts = [
            rf"{re.escape(w[:-1])}\w*\.?" if w.endswith(".") and w[:-1].isalpha() else re.escape(w)
            for w in words
        ]
        return re.compile(r"\s+".join(parts))
    return None


def acronym_of(value: str) -> str | None:
    """The acronym of a value of capitalised words (``Free Software Foundation`` -> ``FSF``;
    ``_JOINERS`` aside), or None."""
    words = value.split()
    if len(words) < 2 or len(value) > 120:
        return None
    capitals = [w for w in words if w[:1].isupper() and w.isalpha()]
    others = [w for w in words if not (w[:1].isupper() and w.isalpha())]
    if len(capitals) >= 2 and all(w.lower() in _JOINERS for w in others):
        return "".join(w[0] for w in capitals)
    return None
