"""The text being aligned to: its folded form, bigram index and number mentions, built on first
use, and the boundary rules of a match (pure).

A match must not cut a word of a spaced script (Latin, Greek, Cyrillic...: ``art`` is not found
inside ``start``); Chinese, Japanese, Thai and Hangul text has no such boundary. An end of a
match that is a digit must be a whole number's end: no digit, letter, ``#`` or ``№`` before it,
no ``.5`` / ``,500`` continuing it, no digit after it, no single letter after it (``3D``, ``W3C``;
a unit of two letters or more, ``3kg``, ``5th``, is fine) and no scale word after it (``1.2
million``, ``120万``: a different number). So ``11`` is not found in ``X11``, ``2`` not in
``#2``, ``3`` not in ``W3C``, ``2.1`` not in ``2.1.3``.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from decimal import Decimal

import numpy as np

from .nearmiss import english_word
from .normalize import Normalized, fold, normalize
from .numbers import mentions
from .work import Work

#: Words of four letters or more of spaced scripts (``SourceText.written``).
_LONG_WORD = re.compile(
    r"[^\W\d_\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]{4,}"
)
_SCALE_AFTER = re.compile(r"\s?(?:thousand|million|billion|trillion|万|萬|亿|億|兆)", re.IGNORECASE)


def spaced(char: str) -> bool:
    """A word character of a script that separates words with spaces."""
    if not char.isalnum():
        return False
    code = ord(char)
    return code < 0x0E00 or 0x1E00 <= code < 0x2000 or 0xFF10 <= code <= 0xFF5A


def letter(char: str) -> bool:
    """A letter of a spaced script."""
    return char.isalpha() and spaced(char)


def _digit_start_ok(text: str, start: int) -> bool:
    before = text[start - 1] if start > 0 else ""
    if not before:
        return True
    if before.isdigit() or letter(before) or before in "#№＃":
        return False
    return not (before in ".,'" and start > 1 and text[start - 2].isdigit())


def _digit_end_ok(text: str, end: int) -> bool:
    after = text[end] if end < len(text) else ""
    if not after:
        return True
    if after.isdigit():
        return False
    nxt = text[end + 1] if end + 1 < len(text) else ""
    if after in ".,'" and nxt.isdigit():
        return False
    if letter(after) and not letter(nxt):
        return False
    return not _SCALE_AFTER.match(text, end)


def bounded(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` cuts no word of a spaced script and no number (module
    docstring)."""
    if end <= start:
        return False
    first, last = text[start], text[end - 1]
    before = text[start - 1] if start > 0 else ""
    after = text[end] if end < len(text) else ""
    if first.isdigit():
        if not _digit_start_ok(text, start):
            return False
    elif before and spaced(before) and spaced(first):
        return False
    if last.isdigit():
        return _digit_end_ok(text, end)
    return not (after and spaced(after) and spaced(last))


def bigram_keys(text: str) -> np.ndarray:
    """One 32-bit key per pair of neighbouring characters (a hash: two pairs may share a key,
    which only adds a candidate window that the comparison then rejects)."""
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    return (codes[:-1] * np.uint32(0x9E3779B1)) ^ codes[1:]


#: The folded text's literal searches use its bigram index (``SourceText.candidates``) once
#: plain searches of it have read this many times its length: building the index costs about
#: as much as 40 plain searches of the whole text, and then a search costs about as much as
#: the occurrences of the needle's rarest bigram.
INDEX_AFTER = 16
#: A needle whose rarest bigram occurs more than ``COMMON_FROM`` + ``COMMON`` x the text's
#: length times is searched plainly (checking one candidate costs about as much as a plain
#: search reading 500 characters).
COMMON = 1 / 500
COMMON_FROM = 64


class SourceText:
    """The text being aligned to, with its folded form, bigram index and number mentions."""

    def __init__(self, text: str, work: Work) -> None:
        self.text = text
        self.work = work
        #: Characters of the folded text read by plain searches (``read``).
        self.searched = 0
        self._normalized: Normalized | None = None
        self._index: tuple[np.ndarray, np.ndarray] | None = None
        self._candidates: dict[str, np.ndarray | None] = {}
        self._whole: dict[int, int] = {}
        self._words: Counter[str] | None = None
        self._mentions: dict[Decimal, list[tuple[int, int]]] | None = None
        self._lowered: str | None = None

    @property
    def normalized(self) -> Normalized:
        """The folded text and its map back (built on first use)."""
        if self._normalized is None:
            self.work.scan(len(self.text))
            self._normalized = normalize(self.text)
        return self._normalized

    @property
    def lowered(self) -> str | None:
        """The text lower-cased, or None when lower-casing changes its length (offsets)."""
        if self._lowered is None:
            self.work.scan(len(self.text))
            lowered = self.text.lower()
            self._lowered = lowered if len(lowered) == len(self.text) else ""
        return self._lowered or None

    def index(self) -> tuple[np.ndarray, np.ndarray]:
        """(sorted bigram keys, their start positions) of the folded text."""
        if self._index is None:
            folded = self.normalized.text
            self.work.scan(len(folded))
            keys = bigram_keys(folded)
            order = np.argsort(keys)
            small = order.astype(np.int32) if len(folded) < 2**31 else order
            del order
            self._index = (keys[small], small)
        return self._index

    def whole(self, start: int, end: int) -> tuple[int, int] | None:
        """The original span of the folded span ``[start, end)``, or None when it splits a
        character from its combining marks (``は`` in ``ば``) or its original cuts a word or a
        number (``bounded``); remembered, as the same occurrence is looked at again (as
        numbers: no objects for the garbage collector to count)."""
        folded = self.normalized.text
        size = len(self.text) + 1
        key = start * (len(folded) + 1) + end
        known = self._whole.get(key)
        if known is not None:
            return None if known < 0 else divmod(known, size)
        span: tuple[int, int] | None = None
        if not (
            unicodedata.combining(folded[start])
            or (end < len(folded) and unicodedata.combining(folded[end]))
        ):
            span = self.normalized.to_original(start, end)
            if not bounded(self.text, *span):
                span = None
        self._whole[key] = -1 if span is None else span[0] * size + span[1]
        return span

    def english(self, word: str) -> bool:
        """Whether a folded word is an English one (``nearmiss.english_word``)."""
        return english_word(word)

    def written(self, word: str) -> int:
        """How often the text writes a folded word of four letters or more (its words counted
        on first use)."""
        if self._words is None:
            self.work.scan(len(self.text))
            counted: Counter[str] = Counter()
            for written, count in Counter(_LONG_WORD.findall(self.text)).items():
                counted[unicodedata.normalize("NFC", fold(written))] += count
            self._words = counted
        return self._words[word]

    def read(self, chars: int) -> None:
        """Count ``chars`` characters of the folded text read by a plain search."""
        self.searched += chars
        self.work.scan(chars)

    def contains(self, needle: str) -> bool:
        """Whether the folded text holds ``needle`` (folded)."""
        folded = self.normalized.text
        found = self.candidates(needle)
        if found is None:
            at = folded.find(needle)
            self.read(len(folded) if at == -1 else at + len(needle))
            return at != -1
        for start in found.tolist():
            self.work.scan(len(needle))
            if folded.startswith(needle, start):
                return True
        return False

    def candidates(self, needle: str) -> np.ndarray | None:
        """Where ``needle`` (folded) may start in the folded text, ascending: every occurrence
        is among them (a candidate is one once checked), found with the bigram index (the
        occurrences of the needle's rarest bigram); None when the needle is shorter than two
        characters, the index is not worth building yet (``INDEX_AFTER``), or its rarest
        bigram is so common (more than ``COMMON`` of the text's bigrams) that checking its
        occurrences one by one costs more than a plain search."""
        folded = self.normalized.text
        if len(needle) < 2 or len(needle) > len(folded):
            return None
        if self._index is None and self.searched < INDEX_AFTER * len(folded):
            return None
        if needle in self._candidates:
            return self._candidates[needle]
        keys, positions = self.index()
        wanted = bigram_keys(needle)
        low = keys.searchsorted(wanted, side="left")
        counts = keys.searchsorted(wanted, side="right") - low
        rarest = int(counts.argmin())
        self.work.scan(len(wanted))
        found: np.ndarray | None = None
        if counts[rarest] <= COMMON_FROM + len(folded) * COMMON:
            self.work.scan(int(counts[rarest]))
            found = np.sort(positions[low[rarest] : low[rarest] + counts[rarest]])
            found -= rarest
            # (sorted: those in range are one slice)
            found = found[
                found.searchsorted(0) : found.searchsorted(len(folded) - len(needle), "right")
            ]
        self._candidates[needle] = found
        return found

    def numbers(self) -> dict[Decimal, list[tuple[int, int]]]:
        """Where the text writes a number in words or with a scale, by its value."""
        if self._mentions is None:
            found: dict[Decimal, list[tuple[int, int]]] = {}
            for start, end, number in mentions(self.text, self.work.scan):
                found.setdefault(number.normalize(), []).append((start, end))
            self._mentions = found
        return self._mentions
