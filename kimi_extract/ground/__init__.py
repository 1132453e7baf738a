"""Grounding: where each value of an answer sits in the text it came from (pure, layer 1).

``leaves_of(answer)`` lists an answer's leaves; ``align(text, leaves)`` finds each one (exact,
then normalised or rewritten, then fuzzy with RapidFuzz; a close match that changes a number, a
negation or a content word is "near", never grounded) and returns ``records.Span`` records.
See ``align``, ``match``, ``nearmiss``, ``normalize``, ``forms`` and ``calibrate`` for the rules.
"""

from __future__ import annotations

from .align import DEFAULT_MIN_SCORE, MIN_FUZZY_CHARS, align, leaves_of
from .nearmiss import difference
from .normalize import Normalized, fold, normalize
from .work import Interrupted, Work

__all__ = [
    "DEFAULT_MIN_SCORE",
    "MIN_FUZZY_CHARS",
    "Interrupted",
    "Normalized",
    "Work",
    "align",
    "difference",
    "fold",
    "leaves_of",
    "normalize",
]
