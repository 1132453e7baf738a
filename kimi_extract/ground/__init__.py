"""Grounding: where each value of an answer sits in the text it came from (pure, layer 1).

``leaves_of(answer)`` lists an answer's leaves; ``align(text, leaves)`` finds each one (exact,
then normalised, then fuzzy with RapidFuzz) and returns ``records.Span`` records. See ``align``,
``normalize`` and ``forms`` for the rules.
"""

from __future__ import annotations

from .align import DEFAULT_MIN_SCORE, MIN_FUZZY_CHARS, align, leaves_of
from .normalize import Normalized, fold, normalize

__all__ = [
    "DEFAULT_MIN_SCORE",
    "MIN_FUZZY_CHARS",
    "Normalized",
    "align",
    "fold",
    "leaves_of",
    "normalize",
]
