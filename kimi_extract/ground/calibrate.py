"""Calibrated scores: what share of spans of a kind and raw score were right (pure).

A span's ``score`` is not the raw similarity but the share (0..100) of spans with that kind,
rule and raw score that were right on the grounding benchmark's corpus (real Debian and Python
package text in English, Chinese and Japanese; ``benchmarks/bench_grounding.py``, which prints
the table below as measured), so that a threshold means "at least this share right":
``score >= 95`` keeps spans of which at least 95 % were right there.

- "exact" and "normalized": one figure per rule (a written form, the folded text, a rewrite of
  a date or number, a number spelled out in the text, an abbreviation);
- "fuzzy" and "near": by raw similarity, in bands (``FUZZY_BANDS``: the lowest raw score of each
  band and the share right in it);
- "quote", "inferred", "none": 0 ("quote" spans are evidence for an inference, not a match).
"""

from __future__ import annotations

# Measured by the grounding benchmark (section 9 of benchmarks/RESULTS.md: 80 documents; 1,850
# values as a model writes them, and the fuzzy sample's 1,711 values one slip from a phrase):
# right / all spans of each kind and rule. Rules with few spans keep the figure of the rule they
# fall back on.
#: Share right (0..100) of exact and normalized spans, by rule.
RULES: dict[tuple[str, str], float] = {
    ("exact", "form"): 100.0,  # 1,116 of 1,116
    ("normalized", "folded"): 100.0,  # 187 of 187
    ("normalized", "rewrite"): 100.0,  # dates 18, names 21, numbers 24: all right
    ("normalized", "spelled"): 100.0,  # (numbers, counted with the rewrites)
    ("normalized", "boundary"): 100.0,  # 83 of 83
    ("normalized", "abbreviation"): 100.0,  # 18 of 18
}
#: (lowest raw similarity of the band, share right) of fuzzy spans, highest band first: 900 of
#: 901 right (raw 85-90: 136 of 136; 90-95: 291 of 292; 95-100: 473 of 473): no band differs
#: measurably from another, so one figure.
FUZZY_BANDS: tuple[tuple[float, float], ...] = ((85.0, 99.9),)
#: (lowest raw similarity of the band, share right) of near spans, from the values written as a
#: model writes them: 1 of 197 was right (the value was in the text after all). (The fuzzy
#: sample's near spans are not counted: a third of its values are drawn to be shown as near
#: although they stand for the phrase, a wrong Chinese or Japanese character, so its share
#: right, 132 of 514, is the generator's mix.)
NEAR_BANDS: tuple[tuple[float, float], ...] = ((70.0, 0.5),)


def calibrated(kind: str, raw: float, rule: str) -> float:
    """The calibrated score of a span (module docstring)."""
    if kind in ("exact", "normalized"):
        return RULES.get((kind, rule), RULES.get((kind, "folded"), 100.0))
    bands = FUZZY_BANDS if kind == "fuzzy" else NEAR_BANDS if kind == "near" else ()
    for low, share in bands:
        if raw >= low:
            return share
    return 0.0
