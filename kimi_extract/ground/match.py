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

Searches (``search``): the forms are looked for in the folded text by plain searches, or, once
those have read the text ``source.INDEX_AFTER`` times, by checking where the form's rarest
bigram occurs (the bigram index): the same occurrences in the same order, at a cost that
follows the occurrences rather than the text's length.

Bounds per leaf (what makes a row's grounding linear in its text): at most ``MAX_OCCURRENCES``
occurrences examined per form; at most ``search.MAX_VOTES`` bigram occurrences voting for at
most ``search.CANDIDATES`` fuzzy windows, each at most two needle
lengths plus 8 characters, of which the ``REFINED`` best are refined; a needle longer than
``MAX_PARTIAL_CHARS`` is located by exact pieces of it instead (at most ``PIECES`` pieces and
``PIECE_HITS`` occurrences each, one comparison per window); a span is widened by at most
``SNAP_CHARS`` characters to whole words (a longer "word", such as ``"a" * 200_000``, is no
match); the pattern of an abbreviation reads a bounded stretch per place it is tried
(``forms.WORD_CHARS``). Every search reports its work (``work.Work``) and checks for a stop
between steps.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import NamedTuple

from rapidfuzz import fuzz
from rapidfuzz.distance import OSA, Levenshtein

from .forms import abbreviation_pattern, acronym_of, is_numeric, rewrite_forms, surface_forms
from .nearmiss import difference
from .normalize import fold
from .search import occurrences, windows
from .source import SourceText, bounded, spaced
from .source import letter as _letter

#: Strings shorter than this (folded characters) are matched only exactly or normalized.
MIN_FUZZY_CHARS = 6
#: Fuzzy matches scoring below this (OSA similarity, 0..100) give no fuzzy span.
DEFAULT_MIN_SCORE = 85.0
#: A close match that changes the meaning is reported as "near" from this similarity on.
NEAR_MIN_SCORE = 70.0
MAX_OCCURRENCES = 64
REFINED = 4
MAX_PARTIAL_CHARS = 256
PIECES = 16
PIECE_HITS = 8
SNAP_CHARS = 40
#: Values of at most this many folded characters whose first ``MAX_OCCURRENCES`` occurrences all
#: sit inside longer words ("a" in "patch") are looked for as whole words by a pattern.
SHORT_WORD = 4
_REJECT, _USED, _FREE = 0, 1, 2
BACKWARD_CUT = 4
_CJK_END = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]$")


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


class Found(NamedTuple):
    """A match: offsets in the text, kind, raw score (100 or the similarity), the rule (a named
    tuple: made by the thousand, it costs less than a frozen dataclass)."""

    start: int
    end: int
    kind: str
    raw: float
    rule: str
    diff: str | None = None


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
        folded: bool = True,
    ) -> list[tuple[int, int, bool]]:
        """Up to ``limit`` free acceptable occurrences (start, end, True) in the order found,
        then the first used one (start, end, False) when fewer were free. ``folded``: the
        haystack is the folded text (its bigram index may find the occurrences)."""
        free: list[tuple[int, int, bool]] = []
        taken: tuple[int, int, bool] | None = None
        self.capped = False
        if folded:
            found = occurrences(
                haystack, needle, anchor, backward, self.source.read, self.source.candidates(needle)
            )
        else:
            found = occurrences(haystack, needle, anchor, backward, self.work.scan)
        for count, start in enumerate(found):
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
        taken: Found | None = None
        forms = leaf.forms
        if len(forms) > 1 and leaf.required:
            # numbers and dates: their other forms only when the text has their digits
            if not any(self.source.contains(part) for part in leaf.required):
                forms = forms[:1]
        stages = (("form", forms), ("rewrite", leaf.rewrites))
        for rule, group in stages:
            for form in group:
                hits = self._search(form, rule, anchor, backward, used, limit)
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
        used: Taken,
        limit: int,
    ) -> list[Found]:
        """Occurrences of ``form`` in the folded text (one search finds the verbatim ones and
        the normalized ones) that cut no word or number (``source.bounded``): "exact" when the
        text reads the form verbatim, else "normalized" (rule "folded", or ``rule`` for a
        rewrite)."""
        needle = fold(form)
        if not needle:
            return []
        source = self.source
        normalized = source.normalized
        folded_anchor = None if anchor is None else normalized.from_original(anchor)

        def accept_folded(a: int, b: int) -> int:
            span = source.whole(a, b)
            if span is None:
                return _REJECT
            return _USED if span in used else _FREE

        text = source.text
        out = []
        hits = self._pick(normalized.text, needle, folded_anchor, backward, accept_folded, limit)
        spans = [normalized.to_original(a, b) for a, b, _ in hits]
        if not hits and self.capped and len(needle) <= SHORT_WORD:
            # every occurrence examined sat inside a longer word ("a" in "patch"): look for
            # whole words directly

            def accept(start: int, end: int) -> int:
                if not bounded(text, start, end):
                    return _REJECT
                return _USED if (start, end) in used else _FREE

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
        pattern = abbreviation_pattern(leaf.stripped)
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

            hits = self._pick(text, acronym, anchor, BACKWARD_CUT, accept, 1, folded=False)
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
            diff = difference(leaf.stripped, text[start:end], self.source)
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
        for low, high in windows(self.source, needle):
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
        ends = [
            (x, y)
            for x in (max(0, a + d) for d in (-2, -1, 0, 1, 2))
            for y in (min(len(folded), b + d) for d in (-2, -1, 0, 1, 2))
            if y > x
        ]
        self.work.cells(len(needle) * sum(y - x for x, y in ends))
        best = (-1.0, a, b)
        similarity = Levenshtein.normalized_similarity
        for x, y in ends:
            score = similarity(needle, folded[x:y])
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
