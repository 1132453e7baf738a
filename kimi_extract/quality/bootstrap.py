"""Bootstrap intervals over rows, and the paired bootstrap for "is A better than B".

Every score ``evaluate`` reports is a ratio of sums over rows (true positives over predicted
values, ...), so a resample of rows is a sum of per-row counts weighted by how often each row
was drawn. Rows with the same counts are interchangeable, so rows are grouped by their count
vector and each resample draws how many of each group it takes (a multinomial draw: exactly
the distribution of drawing N rows with replacement). That makes a resample cost the number of
distinct count vectors, not the number of rows, and makes the draws independent of row order:
the same rows in any order, with the same seed, give the same intervals.

Intervals are percentile intervals (the 2.5th and 97.5th percentiles of the resampled scores for
95 %); resamples where a score is undefined (0 / 0 with errors, see ``ratios``) are left out.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

#: Cells of the (resamples x distinct rows) draw matrix made at once.
_CHUNK_CELLS = 4_000_000


def resample_sums(counts: np.ndarray, n_boot: int, seed: int | None) -> np.ndarray:
    """Column sums of ``counts`` (rows x columns) over ``n_boot`` resamples of its rows."""
    rows = counts.shape[0]
    if rows == 0 or n_boot <= 0:
        return np.zeros((max(n_boot, 0), counts.shape[1]))
    distinct, _, frequency = distinct_rows(counts)
    rng = np.random.default_rng(seed)
    share = frequency / rows
    step = max(1, _CHUNK_CELLS // len(distinct))
    parts = []
    for start in range(0, n_boot, step):
        draws = rng.multinomial(rows, share, size=min(step, n_boot - start))
        parts.append(draws.astype(np.float64) @ distinct)
    return np.concatenate(parts)


def row_keys(matrix: np.ndarray) -> np.ndarray:
    """A 64-bit key per row of a matrix of small non-negative integers (a fixed random linear
    hash: equal rows get equal keys, whatever their order; callers check for collisions)."""
    columns = matrix.shape[1]
    multipliers = np.random.default_rng(20240601).integers(
        1, 2**63, size=columns, dtype=np.uint64
    ) | np.uint64(1)
    with np.errstate(over="ignore"):
        return (matrix.astype(np.uint64) * multipliers).sum(axis=1, dtype=np.uint64)


def distinct_rows(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct rows of ``matrix`` (in an order that does not depend on the row order),
    each row's number among them, and how often each occurs."""
    _, first, inverse, frequency = np.unique(
        row_keys(matrix), return_index=True, return_inverse=True, return_counts=True
    )
    inverse = inverse.reshape(-1)
    distinct = matrix[first]
    if not np.array_equal(distinct[inverse], matrix):  # a key collision: compare whole rows
        distinct, inverse, frequency = np.unique(
            matrix, axis=0, return_inverse=True, return_counts=True
        )
        inverse = inverse.reshape(-1)
    return distinct, inverse, frequency


def ratios(
    tp: np.ndarray, fp: np.ndarray, fn: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Precision, recall and F1 from summed counts.

    precision = tp / (tp + fp), recall = tp / (tp + fn), F1 = 2 tp / (2 tp + fp + fn). A ratio
    whose denominator is 0 is 1.0 when there was no error at all (fp = fn = 0: nothing to find
    and nothing invented) and NaN (undefined) otherwise: precision when nothing was predicted
    but gold values were missed, recall when gold has no value but some were invented. F1 is
    always defined.
    """
    tp, fp, fn = (np.asarray(x, dtype=np.float64) for x in (tp, fp, fn))
    flawless = (fp == 0) & (fn == 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(tp + fp > 0, tp / (tp + fp), np.where(flawless, 1.0, np.nan))
        recall = np.where(tp + fn > 0, tp / (tp + fn), np.where(flawless, 1.0, np.nan))
        f1 = np.where(2 * tp + fp + fn > 0, 2 * tp / (2 * tp + fp + fn), 1.0)
    return precision, recall, f1


def share(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """part / whole; 1.0 where whole is 0 (nothing scored: nothing wrong)."""
    part, whole = np.asarray(part, dtype=np.float64), np.asarray(whole, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(whole > 0, part / np.maximum(whole, 1e-300), 1.0)


def percentile_interval(samples: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) percentiles of ``samples`` along axis 0, NaNs left out."""
    tail = (1.0 - confidence) / 2.0 * 100.0
    if samples.shape[0] == 0:
        nan = np.full(samples.shape[1:], np.nan)
        return nan, nan.copy()
    if not np.isnan(samples).any():
        low, high = np.percentile(samples, [tail, 100.0 - tail], axis=0)
        return low, high
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: NaN interval
        low, high = np.nanpercentile(samples, [tail, 100.0 - tail], axis=0)
    return low, high


@dataclass(frozen=True)
class PairedDifference:
    """``a - b`` of one score on the same rows, with a paired bootstrap interval.

    ``p_value``: the share of resamples where A is not better than B (difference <= 0), doubled
    for a two-sided test and capped at 1: small when A is reliably better or reliably worse.
    """

    metric: str
    a: float
    b: float
    difference: float
    low: float
    high: float
    p_value: float
    n_boot: int

    def __str__(self) -> str:
        return (
            f"{self.metric}: {self.a:.4f} - {self.b:.4f} = {self.difference:+.4f} "
            f"[{self.low:+.4f}, {self.high:+.4f}], p = {self.p_value:.3g} "
            f"({self.n_boot:,} paired resamples)"
        )


def paired_resample(
    a: np.ndarray, b: np.ndarray, n_boot: int, seed: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Resampled column sums of ``a`` and ``b`` (same rows, same order), drawn together: each
    resample takes the same rows from both."""
    both = resample_sums(np.hstack([a, b]), n_boot, seed)
    return both[:, : a.shape[1]], both[:, a.shape[1] :]


def two_sided_p(differences: np.ndarray) -> float:
    """The paired bootstrap's two-sided p-value for "no difference" (see PairedDifference)."""
    finite = differences[np.isfinite(differences)]
    if len(finite) == 0:
        return float("nan")
    below = float(np.mean(finite <= 0))
    above = float(np.mean(finite >= 0))
    return min(1.0, 2.0 * min(below, above))
