"""Measuring quality: score an extraction against gold, field by field, with intervals.

``evaluate(pred, gold, model)`` returns an ``Evaluation`` (``kimi_extract.evaluate``). The
matchers below override how a field path is compared (``matchers={"path": ...}``);
``paired_difference(a, b)`` tells whether one setting is better than another on the same rows.
``kimi_extract.compare`` runs several settings on the same rows and returns a ``Comparison``
(``comparison``, with ``pareto_front``; the run itself lives in ``compare``, above the
extractor); ``plot_compare`` (``plot``) draws it.
"""

from __future__ import annotations

from .bootstrap import PairedDifference
from .evaluate import evaluate
from .matching import (
    DateMatcher,
    ExactMatcher,
    FunctionMatcher,
    LeafMatcher,
    ListMatcher,
    NumberMatcher,
    TextMatcher,
    normalize_text,
)
from .report import Evaluation, paired_difference

__all__ = [
    "DateMatcher",
    "Evaluation",
    "ExactMatcher",
    "FunctionMatcher",
    "LeafMatcher",
    "ListMatcher",
    "NumberMatcher",
    "PairedDifference",
    "TextMatcher",
    "evaluate",
    "normalize_text",
    "paired_difference",
]
