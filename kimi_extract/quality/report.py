"""``Evaluation``: the scores of one set of predictions against gold, per field and per row."""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from ..exceptions import ConfigurationError
from .bootstrap import (
    PairedDifference,
    distinct_rows,
    paired_resample,
    percentile_interval,
    ratios,
    resample_sums,
    share,
    two_sided_p,
)
from .score import COUNTS

#: The overall scores ``paired_difference`` (and ``Evaluation.overall``) know.
OVERALL_METRICS = ("micro_precision", "micro_recall", "micro_f1", "row_exact")
#: The per-field scores.
FIELD_METRICS = ("precision", "recall", "f1", "exact")
_TP, _FP, _FN, _CORRECT, _UNITS = range(len(COUNTS))


def _scores(sums: np.ndarray, paths: int) -> dict[str, np.ndarray]:
    """Scores from summed counts: ``sums[..., k]`` over the columns of ``Evaluation.matrix``."""
    per_path = sums[..., : paths * len(COUNTS)].reshape(*sums.shape[:-1], paths, len(COUNTS))
    precision, recall, f1 = ratios(per_path[..., _TP], per_path[..., _FP], per_path[..., _FN])
    micro = per_path.sum(axis=-2)
    micro_precision, micro_recall, micro_f1 = ratios(
        micro[..., _TP], micro[..., _FP], micro[..., _FN]
    )
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "exact": share(per_path[..., _CORRECT], per_path[..., _UNITS]),
        "micro_precision": micro_precision,
        "micro_recall": micro_recall,
        "micro_f1": micro_f1,
        "row_exact": share(sums[..., -2], sums[..., -1]),
    }


class Evaluation:
    """Predictions scored against gold: per field (``fields``), per row (``rows``), overall.

    Built by ``kimi_extract.evaluate``; see its docstring for what each count means. Every score
    has a bootstrap interval over rows (``confidence``, default 95 %).
    """

    def __init__(
        self,
        *,
        model: str,
        paths: list[str],
        kinds: list[str],
        counts: np.ndarray,
        row_exact: np.ndarray,
        failed: np.ndarray,
        errors: list[str | None],
        index: pd.Index,
        cost: np.ndarray | None,
        skipped: list[str],
        unmatched: int = 0,
        n_boot: int,
        seed: int | None,
        confidence: float,
    ) -> None:
        self.model = model
        #: Field paths scored, in the model's order (``fields``' index).
        self.paths = paths
        self.kinds = kinds
        #: (rows, paths, ``COUNTS``) per-row counts.
        self.counts = counts
        self.row_exact = row_exact
        self.failed = failed
        self.errors = errors
        #: The gold rows' keys (their index, or the ``on=`` columns).
        self.index = index
        #: ``kx_cost`` per row (NaN for rows without a predicted row); None without that column.
        self.cost = cost
        #: Model fields the gold data has no column for (not scored).
        self.skipped = skipped
        #: Predicted rows without a gold row (not scored).
        self.unmatched = unmatched
        self.n_boot = n_boot
        self.seed = seed
        self.confidence = confidence

    def __repr__(self) -> str:
        overall = self.overall
        return (
            f"<Evaluation of {self.model}: {len(self.index):,} rows, {len(self.paths)} fields, "
            f"micro F1 {overall['micro_f1']:.3f}, rows entirely right {overall['row_exact']:.1%}>"
        )

    @property
    def matrix(self) -> np.ndarray:
        """Per-row counts, one column per (path, count), then row entirely right, then 1: every
        score is a ratio of this matrix's column sums (what the bootstrap resamples)."""
        rows = len(self.index)
        return np.hstack(
            [
                self.counts.reshape(rows, -1),
                self.row_exact.astype(np.float64)[:, None],
                np.ones((rows, 1)),
            ]
        )

    @cached_property
    def _point_and_intervals(self) -> tuple[dict[str, np.ndarray], dict[str, tuple[Any, Any]]]:
        matrix = self.matrix
        point = _scores(matrix.sum(axis=0), len(self.paths))
        resampled = _scores(resample_sums(matrix, self.n_boot, self.seed), len(self.paths))
        intervals = {
            name: percentile_interval(values, self.confidence) for name, values in resampled.items()
        }
        return point, intervals

    @cached_property
    def fields(self) -> pd.DataFrame:
        """One row per field path: kind, support (gold values), precision, recall, F1, exact
        (share of units entirely right), the counts, and ``<score>_low`` / ``<score>_high``."""
        point, intervals = self._point_and_intervals
        totals = self.counts.sum(axis=0)
        table = pd.DataFrame(
            {
                "kind": self.kinds,
                "support": (totals[:, _TP] + totals[:, _FN]).astype(np.int64),
                **{name: point[name] for name in FIELD_METRICS},
                **{name: totals[:, k].astype(np.int64) for k, name in enumerate(COUNTS)},
            },
            index=pd.Index(self.paths, name="field"),
        )
        for name in FIELD_METRICS:
            table[f"{name}_low"], table[f"{name}_high"] = intervals[name]
        return table

    @cached_property
    def overall(self) -> pd.Series:
        """Rows, failed rows, micro precision / recall / F1 over every field path, the share of
        rows entirely right, each with ``_low`` / ``_high``, and the money (``cost``, USD;
        ``cost_per_correct_value``: per true positive; ``cost_per_correct_row``)."""
        point, intervals = self._point_and_intervals
        values: dict[str, Any] = {"rows": len(self.index), "failed": int(self.failed.sum())}
        for name in OVERALL_METRICS:
            values[name] = float(point[name])
            values[f"{name}_low"] = float(intervals[name][0])
            values[f"{name}_high"] = float(intervals[name][1])
        known = self.cost[~np.isnan(self.cost)] if self.cost is not None else np.zeros(0)
        cost = float(known.sum()) if len(known) else float("nan")
        values["cost"] = cost
        values["cost_per_correct_value"] = _per(cost, float(self.counts[:, :, _TP].sum()))
        values["cost_per_correct_row"] = _per(cost, float(self.row_exact.sum()))
        return pd.Series(values, name=self.model)

    @cached_property
    def rows(self) -> pd.DataFrame:
        """One row per gold row: ``score`` (the row's micro F1 over its fields; 0 for a row
        without a prediction), ``exact``, ``wrong`` (how many field paths have an error),
        ``fields`` (which), the counts, ``error`` (why there is no prediction) and ``cost``."""
        counts = self.counts
        wrong = (counts[:, :, _FP] + counts[:, :, _FN] > 0) | (
            counts[:, :, _CORRECT] < counts[:, :, _UNITS]
        )
        wrong[self.failed] = True
        tp, fp, fn = (counts[:, :, k].sum(axis=1) for k in (_TP, _FP, _FN))
        _, _, score = ratios(tp, fp, fn)
        score = np.where(self.failed, 0.0, score)
        return pd.DataFrame(
            {
                "score": score,
                "exact": self.row_exact,
                "wrong": wrong.sum(axis=1).astype(np.int64),
                "fields": _which(wrong, self.paths),
                "tp": tp.astype(np.int64),
                "fp": fp.astype(np.int64),
                "fn": fn.astype(np.int64),
                "error": pd.Series(self.errors, index=self.index, dtype=object),
                "cost": self.cost if self.cost is not None else np.nan,
            },
            index=self.index,
        )

    def worst(self, n: int = 10) -> pd.DataFrame:
        """The ``n`` rows to look at first: lowest score, then most wrong fields (gold order
        breaks ties)."""
        rows = self.rows
        order = np.lexsort((np.arange(len(rows)), -rows["wrong"].to_numpy(), rows["score"]))
        return rows.iloc[order[: max(n, 0)]]

    def summary(self) -> str:
        """A table a person reads: overall scores and money, then one line per field."""
        o = self.overall
        tail = (
            f"{self.confidence:.0%} intervals from {self.n_boot:,} bootstrap resamples of rows"
            if self.n_boot
            else "no intervals (n_boot=0)"
        )
        lines = [
            f"Evaluation of {self.model}: {int(o['rows']):,} rows ({int(o['failed']):,} without a "
            f"prediction); {tail}",
            f"micro F1 {_ci(o, 'micro_f1')}   precision {_ci(o, 'micro_precision')}   "
            f"recall {_ci(o, 'micro_recall')}",
            f"rows entirely right {_ci(o, 'row_exact')}",
        ]
        if self.cost is None or np.isnan(o["cost"]):
            lines.append("cost: unknown (no kx_cost column, or no price known)")
        else:
            lines.append(
                f"cost ${o['cost']:.4f}: {_money(o['cost_per_correct_value'])} per correct value, "
                f"{_money(o['cost_per_correct_row'])} per row entirely right"
            )
        if self.skipped:
            lines.append(f"not scored (no gold column): {', '.join(self.skipped)}")
        if self.unmatched:
            lines.append(f"not scored: {self.unmatched:,} predicted rows without a gold row")
        table = pd.DataFrame(
            {
                "kind": self.fields["kind"],
                "support": self.fields["support"],
                **{
                    name: [_ci(row, name) for _, row in self.fields.iterrows()]
                    for name in FIELD_METRICS
                },
            }
        )
        lines += ["", table.to_string()]
        return "\n".join(lines)


def _which(wrong: np.ndarray, paths: list[str]) -> list[tuple[str, ...]]:
    """Per row, the paths marked in ``wrong`` (rows x paths), as tuples (shared per pattern)."""
    if wrong.shape[1] == 0:
        return [()] * wrong.shape[0]
    patterns, inverse, _ = distinct_rows(wrong.astype(np.uint8))
    names = [tuple(p for p, w in zip(paths, row, strict=True) if w) for row in patterns]
    return [names[k] for k in inverse]


def _per(cost: float, count: float) -> float:
    if np.isnan(cost):
        return float("nan")
    if count == 0:
        return float("inf") if cost > 0 else float("nan")
    return cost / count


def _money(value: float) -> str:
    if np.isinf(value):
        return "- (none correct)"
    return "-" if np.isnan(value) else f"${value:.6f}"


def _ci(values: Any, name: str) -> str:
    point, low, high = values[name], values[f"{name}_low"], values[f"{name}_high"]
    if pd.isna(point):
        return "-"
    if pd.isna(low):
        return f"{point:.1%}"
    return f"{point:.1%} [{low:.1%}, {high:.1%}]"


def paired_difference(
    a: Evaluation,
    b: Evaluation,
    metric: str = "micro_f1",
    *,
    field: str | None = None,
    n_boot: int | None = None,
    seed: int | None = None,
) -> PairedDifference:
    """Score of ``a`` minus score of ``b`` on the same gold rows, with a paired bootstrap
    interval and p-value (each resample takes the same rows from both).

    ``metric``: one of ``OVERALL_METRICS``, or with ``field=`` one of ``FIELD_METRICS`` of that
    field path. ``n_boot`` and ``seed`` default to ``a``'s.
    """
    if field is None and metric not in OVERALL_METRICS:
        raise ConfigurationError(
            f"metric={metric!r}: use one of {list(OVERALL_METRICS)}, or field='path' with one "
            f"of {list(FIELD_METRICS)}"
        )
    if field is not None and (metric not in FIELD_METRICS or field not in a.paths):
        raise ConfigurationError(
            f"field={field!r}, metric={metric!r}: the field must be one of {a.paths} and the "
            f"metric one of {list(FIELD_METRICS)}"
        )
    if a.paths != b.paths:
        raise ConfigurationError(
            f"the evaluations score different fields ({a.paths} vs {b.paths}): evaluate both "
            "against the same gold with the same model"
        )
    if len(a.index) != len(b.index) or not a.index.isin(b.index).all():
        raise ConfigurationError(
            "the evaluations cover different gold rows: evaluate both against the same gold"
        )
    order = b.index.get_indexer(a.index)
    b_matrix = b.matrix[order]
    boots = a.n_boot if n_boot is None else n_boot
    sums_a, sums_b = paired_resample(a.matrix, b_matrix, boots, a.seed if seed is None else seed)
    paths = len(a.paths)

    def pick(scores: dict[str, np.ndarray]) -> np.ndarray:
        values = scores[metric]
        return values if field is None else values[..., a.paths.index(field)]

    point_a = float(pick(_scores(a.matrix.sum(axis=0), paths)))
    point_b = float(pick(_scores(b_matrix.sum(axis=0), paths)))
    differences = pick(_scores(sums_a, paths)) - pick(_scores(sums_b, paths))
    low, high = percentile_interval(differences[:, None], a.confidence)
    name = metric if field is None else f"{field} {metric}"
    return PairedDifference(
        metric=name,
        a=point_a,
        b=point_b,
        difference=point_a - point_b,
        low=float(low[0]),
        high=float(high[0]),
        p_value=two_sided_p(differences),
        n_boot=boots,
    )
