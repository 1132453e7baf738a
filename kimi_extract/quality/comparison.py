"""``Comparison``: candidates scored on the same rows, side by side; the accuracy/cost front.

``kimi_extract.compare`` builds one. Its ``table`` has a row per candidate: accuracy (micro F1
and the share of rows entirely right, each with its bootstrap interval), cost, tokens by bucket,
latency percentiles and errors, and whether the candidate is on the Pareto front of accuracy
against cost. ``better(a, b)`` is the paired bootstrap on the same rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..exceptions import ConfigurationError
from .bootstrap import PairedDifference
from .report import OVERALL_METRICS, Evaluation, paired_difference

if TYPE_CHECKING:
    from ..run.report import RunReport

#: The table's token columns, the ``Usage`` buckets (nested: cached and cache write are part of
#: prompt, reasoning of completion).
TOKEN_BUCKETS = (
    "prompt_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "completion_tokens",
    "reasoning_tokens",
)


def pareto_front(accuracy: Any, cost: Any) -> np.ndarray:
    """Which points are on the front of higher accuracy at lower cost (a boolean per point).

    A point is dominated when another is at least as accurate and at most as costly, and
    strictly better in one of the two; the front is every point not dominated. Equal points are
    all on it. A point with an unknown (NaN) accuracy or cost is never on it and dominates none.
    """
    accuracy = np.asarray(accuracy, dtype=np.float64)
    cost = np.asarray(cost, dtype=np.float64)
    if accuracy.shape != cost.shape or accuracy.ndim != 1:
        raise ConfigurationError("pareto_front takes two 1-d sequences of the same length")
    known = ~(np.isnan(accuracy) | np.isnan(cost))
    a, c = accuracy[:, None], cost[:, None]
    # dominated[i, j]: point j dominates point i
    dominated = (accuracy[None, :] >= a) & (cost[None, :] <= c)
    dominated &= (accuracy[None, :] > a) | (cost[None, :] < c)
    dominated &= known[None, :]
    return known & ~dominated.any(axis=1)


class Comparison:
    """Candidates run on the same rows and scored against the same gold (``kx.compare``).

    - ``table``: one row per candidate (in the order given): ``model``, ``effort``, ``rows``,
      ``errors`` (rows with a ``kx_error``), ``micro_f1`` and ``row_exact`` with ``_low`` /
      ``_high`` bounds, ``cost`` (USD, the candidate on these rows on its own: see
      ``kx.compare``), ``paid`` (what this comparison billed for it), ``cost_per_correct_row``,
      the token buckets (this run plus what stored rows cost when first made), ``latency_p50_s`` /
      ``latency_p95_s`` (rows sent by this run), ``from_store`` and ``pareto``.
    - ``evaluations`` / ``outputs`` / ``reports``: per candidate, its ``Evaluation``, its output
      frame and its ``RunReport``.
    - ``better(a, b)``: is ``a`` better than ``b`` (paired bootstrap on the same rows).
    - ``cheapest(at_least)``: the cheapest candidate whose accuracy is good enough.
    """

    def __init__(
        self,
        *,
        table: pd.DataFrame,
        evaluations: Mapping[str, Evaluation],
        outputs: Mapping[str, pd.DataFrame],
        reports: Mapping[str, RunReport],
        metric: str = "micro_f1",
    ) -> None:
        self.evaluations = dict(evaluations)
        self.outputs = dict(outputs)
        self.reports = dict(reports)
        #: The accuracy the Pareto front and ``cheapest`` use by default.
        self.metric = metric
        table = table.copy()
        table["pareto"] = self.pareto(metric, table)
        self.table = table

    @property
    def names(self) -> list[str]:
        """The candidates, in the order given."""
        return list(self.table.index)

    def __repr__(self) -> str:
        front = ", ".join(str(n) for n in self.table.index[self.table["pareto"]])
        rows = int(self.table["rows"].iloc[0]) if len(self.table) else 0
        return (
            f"<Comparison of {len(self.table)} candidates on {rows:,} rows; Pareto front "
            f"({self.metric} vs cost): {front or 'none'}>"
        )

    def pareto(self, metric: str | None = None, table: pd.DataFrame | None = None) -> pd.Series:
        """Per candidate, whether it is on the front of ``metric`` (default: this comparison's)
        against ``cost``."""
        metric = metric or self.metric
        _check_metric(metric)
        table = self.table if table is None else table
        front = pareto_front(table[metric].to_numpy(), table["cost"].to_numpy())
        return pd.Series(front, index=table.index, name="pareto")

    def better(
        self,
        a: str,
        b: str,
        metric: str = "micro_f1",
        *,
        field: str | None = None,
        n_boot: int | None = None,
        seed: int | None = None,
    ) -> PairedDifference:
        """``a``'s score minus ``b``'s on the same rows, with a paired bootstrap interval and a
        p-value: ``a`` is reliably better when the interval is above 0 (see
        ``kimi_extract.quality.paired_difference``; ``field=`` compares one field path)."""
        for name in (a, b):
            if name not in self.evaluations:
                raise ConfigurationError(
                    f"no candidate {name!r} in this comparison (candidates: {self.names})"
                )
        return paired_difference(
            self.evaluations[a], self.evaluations[b], metric, field=field, n_boot=n_boot, seed=seed
        )

    def cheapest(
        self, at_least: float, metric: str | None = None, *, confident: bool = False
    ) -> str | None:
        """The cheapest candidate whose ``metric`` is at least ``at_least`` (with
        ``confident=True``: whose interval's lower bound is); None when none is."""
        metric = metric or self.metric
        _check_metric(metric)
        column = f"{metric}_low" if confident else metric
        good = self.table[self.table[column] >= at_least]
        good = good[good["cost"].notna()]
        if good.empty:
            return None
        return str(good["cost"].idxmin())

    def summary(self) -> str:
        """A table a person reads: accuracy with intervals, cost, tokens, latency, errors."""
        t = self.table
        lines = []
        for name, row in t.iterrows():
            lines.append(
                {
                    "candidate": ("* " if row["pareto"] else "  ") + str(name),
                    "micro F1": _interval(row, "micro_f1"),
                    "rows right": _interval(row, "row_exact"),
                    "cost": _money(row["cost"]),
                    "per right row": _money(row["cost_per_correct_row"]),
                    "completion tok": f"{int(row['completion_tokens']):,}",
                    "reasoning tok": f"{int(row['reasoning_tokens']):,}",
                    "p50 s": _seconds(row["latency_p50_s"]),
                    "p95 s": _seconds(row["latency_p95_s"]),
                    "errors": f"{int(row['errors']):,}",
                }
            )
        rows = int(t["rows"].iloc[0]) if len(t) else 0
        evaluation = next(iter(self.evaluations.values()), None)
        boot = (
            f"{evaluation.confidence:.0%} intervals from {evaluation.n_boot:,} bootstrap resamples"
            if evaluation is not None and evaluation.n_boot
            else "no intervals"
        )
        text = pd.DataFrame(lines).to_string(index=False)
        return (
            f"{len(t)} candidates on {rows:,} rows ({boot}); * = on the Pareto front of "
            f"{self.metric} vs cost\n{text}"
        )


def _check_metric(metric: str) -> None:
    if metric not in OVERALL_METRICS:
        raise ConfigurationError(f"metric={metric!r}: use one of {list(OVERALL_METRICS)}")


def _interval(row: pd.Series, name: str) -> str:
    point, low, high = row[name], row[f"{name}_low"], row[f"{name}_high"]
    if pd.isna(point):
        return "-"
    if pd.isna(low):
        return f"{point:.1%}"
    return f"{point:.1%} [{low:.1%}, {high:.1%}]"


def _money(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if math.isinf(value):
        return "- (none right)"
    return f"${value:.4f}"


def _seconds(value: float) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.2f}"
