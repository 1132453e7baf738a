"""A picture of a comparison: ``plot_compare(result)`` (``pip install -e '.[plot]'``).

Accuracy (micro F1, or another overall score) against cost, one point per candidate with its
bootstrap interval as a vertical bar. The candidates on the Pareto front (more accurate at lower
cost than any other) are filled and joined by a step line; the others are hollow. A plain
``matplotlib.figure.Figure``, as ``plot_usage`` draws it (pyplot is never imported).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..exceptions import InputError
from ..table.plot import _matplotlib_figure, _show_in_jupyter
from .comparison import Comparison

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Front and other candidates (the blues and greys of ``plot_usage``).
FRONT_COLOR = "#08519c"
OTHER_COLOR = "#737373"
_LABELS = {"micro_f1": "micro F1", "row_exact": "rows entirely right"}


def plot_compare(
    result: Comparison,
    metric: str | None = None,
    *,
    title: str | None = None,
    figsize: tuple[float, float] = (8.0, 5.0),
    log_cost: bool | None = None,
) -> Figure:
    """Plot each candidate's ``metric`` (default: the comparison's, micro F1) against its cost.

    Vertical bars are the bootstrap intervals; filled points joined by a step line are the
    Pareto front. ``log_cost``: a logarithmic cost axis (default: when the costs span more than
    20x). Returns the ``matplotlib.figure.Figure``; raises ``ImportError`` without matplotlib.
    """
    if not isinstance(result, Comparison):
        raise InputError(
            f"plot_compare needs the Comparison kx.compare returned, got {type(result).__name__}"
        )
    figure_class = _matplotlib_figure()
    from matplotlib.ticker import FuncFormatter, PercentFormatter

    metric = metric or result.metric
    front = result.pareto(metric).to_numpy()
    table = result.table
    cost = table["cost"].to_numpy(dtype=np.float64)
    accuracy = table[metric].to_numpy(dtype=np.float64)
    low = table[f"{metric}_low"].to_numpy(dtype=np.float64)
    high = table[f"{metric}_high"].to_numpy(dtype=np.float64)
    known = ~np.isnan(cost) & ~np.isnan(accuracy)

    figure = figure_class(figsize=figsize, layout="constrained")
    ax = figure.subplots()
    for on_front, color, fill in ((False, OTHER_COLOR, "white"), (True, FRONT_COLOR, FRONT_COLOR)):
        chosen = known & (front == on_front)
        if not chosen.any():
            continue
        below = np.nan_to_num(accuracy[chosen] - low[chosen], nan=0.0)
        above = np.nan_to_num(high[chosen] - accuracy[chosen], nan=0.0)
        ax.errorbar(
            cost[chosen],
            accuracy[chosen],
            yerr=np.vstack([below, above]),
            fmt="o",
            color=color,
            markerfacecolor=fill,
            markersize=8,
            capsize=4,
            label="Pareto front" if on_front else "dominated",
        )
    order = np.flatnonzero(known & front)
    order = order[np.argsort(cost[order])]
    if len(order) > 1:
        ax.step(cost[order], accuracy[order], where="post", color=FRONT_COLOR, alpha=0.5)
    for k, name in enumerate(table.index):
        if known[k]:
            ax.annotate(
                str(name),
                (cost[k], accuracy[k]),
                textcoords="offset points",
                xytext=(7, 5),
                fontsize=9,
            )
    positive = cost[known & (cost > 0)]
    if log_cost is None:
        log_cost = len(positive) > 1 and positive.max() / positive.min() > 20
    if log_cost and len(positive):
        ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _dollars(x)))
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel(f"cost of the {int(table['rows'].iloc[0]):,} rows (USD)")
    ax.set_ylabel(_LABELS.get(metric, metric))
    ax.grid(alpha=0.3)
    if known.any():
        ax.legend(loc="lower right", fontsize=9)
    unknown = [str(n) for n, k in zip(table.index, known, strict=True) if not k]
    heading = title or f"{_LABELS.get(metric, metric)} vs cost, {len(table)} candidates"
    if unknown:
        heading += f" (not drawn, cost unknown: {', '.join(unknown)})"
    ax.set_title(heading)
    _show_in_jupyter(figure_class)
    return figure


def _dollars(value: float) -> str:
    if not math.isfinite(value):
        return ""
    return f"${value:,.2f}" if abs(value) >= 1 else f"${value:.3g}"
