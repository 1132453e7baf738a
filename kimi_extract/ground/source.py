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
from decimal import Decimal

import numpy as np

from .normalize import Normalized, normalize
from .numbers import mentions
from .work import Work

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


class SourceText:
    """The text being aligned to, with its folded form, bigram index and number mentions."""

    def __init__(self, text: str, work: Work) -> None:
        self.text = text
        self.work = work
        self._normalized: Normalized | None = None
        self._index: tuple[np.ndarray, np.ndarray] | None = None
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

    def numbers(self) -> dict[Decimal, list[tuple[int, int]]]:
        """Where the text writes a number in words or with a scale, by its value."""
        if self._mentions is None:
            self.work.scan(len(self.text))
            found: dict[Decimal, list[tuple[int, int]]] = {}
            for start, end, number in mentions(self.text):
                found.setdefault(number.normalize(), []).append((start, end))
            self._mentions = found
        return self._mentions
