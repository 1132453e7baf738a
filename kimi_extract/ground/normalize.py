"""The normalised form grounding compares in, with a map back to the original offsets.

``fold(text)`` is the comparison form of a short string; ``normalize(text)`` folds a whole source
text and keeps, for every character of the folded text, the index of the original character it
came from, so a match found in the folded text maps back to ``text[start:end]``.

Folding, character by character (each original character becomes zero or more folded ones):

- Unicode compatibility normalisation (NFKC's equivalences: full-width Latin letters, digits and
  punctuation become ASCII, ``ﬁ`` -> ``fi``, the ideographic space becomes a space, half-width
  katakana become full-width), in its decomposed form (NFKD), because it is applied character
  by character: ``é`` and ``e`` + U+0301, ``プ`` and half-width ``ﾌﾟ`` fold the same;
- ``str.casefold`` (``ß`` -> ``ss``);
- punctuation width and shape: dashes and minus signs -> ``-``, curly and CJK quotes and corner
  brackets -> ``'`` / ``"``, ``、`` -> ``,``, ``。`` -> ``.``, wave dashes -> ``~``;
- every whitespace character and zero-width / soft-hyphen character is dropped, so spacing
  (runs, line breaks, a space added or missing, spaces between CJK characters of a PDF text
  layer) never decides a match. Nothing here splits text into words, so scripts written without
  spaces (Chinese, Japanese, Thai) fold the same way as the others.

Not folded: accents and other combining marks are kept (``が`` is not ``か``, ``é`` is not ``e``).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import numpy as np

#: Characters dropped like whitespace: zero-width space/joiners, word joiner, BOM, soft hyphen.
_INVISIBLE = frozenset("\u200b\u200c\u200d\u2060\ufeff\u00ad")
#: Punctuation shapes folded to one ASCII form (applied after NFKC and casefold).
_PUNCTUATION = str.maketrans(
    {
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63", "-"),
        **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032\u300c\u300d\uff62\uff63", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033\u00ab\u00bb\u300e\u300f", '"'),
        "\u3001": ",",
        "\uff64": ",",
        "\u3002": ".",
        "\uff61": ".",
        "\u301c": "~",
        "\u3030": "~",
    }
)


def _fold_char(char: str) -> str:
    if char.isspace() or char in _INVISIBLE:
        return ""
    folded = unicodedata.normalize("NFKD", char).casefold()
    folded = unicodedata.normalize("NFKD", folded).translate(_PUNCTUATION)
    if any(c.isspace() for c in folded):  # NFKC spells some marks with a space ("¨" -> " ̈")
        folded = "".join(c for c in folded if not c.isspace())
    return folded


class _FoldTable(dict[int, str]):
    """``str.translate`` table filled on first sight of each code point."""

    def __missing__(self, code: int) -> str:
        folded = self[code] = _fold_char(chr(code))
        return folded


_TABLE = _FoldTable()


def fold(text: str) -> str:
    """The comparison form of ``text`` (see the module docstring)."""
    return text.translate(_TABLE)


@dataclass(frozen=True)
class Normalized:
    """A folded text and, per folded character, the index of its original character."""

    #: The folded text.
    text: str
    #: ``origin[i]``: index in the original text of the character that folded into ``text[i]``
    #: (non-decreasing).
    origin: np.ndarray
    #: Length of the original text.
    source_length: int

    def to_original(self, start: int, end: int) -> tuple[int, int]:
        """The original span ``[start', end')`` a non-empty folded span ``[start, end)`` covers."""
        return int(self.origin[start]), int(self.origin[end - 1]) + 1

    def from_original(self, index: int) -> int:
        """The first folded index at or after original ``index``."""
        # the index in the array's own dtype: no converted copy of the array per call
        return int(np.searchsorted(self.origin, self.origin.dtype.type(index), side="left"))


def normalize(text: str) -> Normalized:
    """Fold ``text`` and keep the map back to its offsets (vectorised: no per-character loop;
    about 13 bytes of memory per character of ``text`` at its peak)."""
    folded = text.translate(_TABLE)
    if not text:
        return Normalized(folded, np.zeros(0, dtype=np.int32), 0)
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    present = np.flatnonzero(np.bincount(codes))
    table = np.zeros(int(present[-1]) + 1, dtype=np.int8)
    table[present] = [len(_TABLE[int(c)]) for c in present]
    lengths = table[codes]
    del codes
    kind = np.int32 if len(text) < 2**31 else np.int64
    origin = np.repeat(np.arange(len(text), dtype=kind), lengths)
    return Normalized(folded, origin, len(text))
