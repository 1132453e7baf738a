"""A picture of a run's token accounting: ``plot_usage(df)`` (``pip install -e '.[plot]'``).

It reads only the ``kx_`` accounting columns of a ``run`` / ``run_documents`` output (exploded
outputs too: their token columns sit on each source's first item row, so sums stay exact). The
buckets do not overlap, so they add up to the run's total tokens::

    prompt, regular      prompt - cached - cache write
    prompt, cached       served from the prefix cache
    prompt, cache write  written to the cache (K3.1 series)
    completion, answer   completion - reasoning
    completion, reasoning

The cache-hit share is cumulative over the rows in frame order: after row *i*, the cached tokens of
rows 0..i over their prompt tokens. Rows served from the result store cost no tokens and leave it
unchanged.

The figure is a plain ``matplotlib.figure.Figure`` (pyplot is never imported), so it works without
a display, is not kept alive by pyplot, and is shown once (not twice) when it is a Jupyter cell's
value.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..exceptions import InputError, install_hint
from . import columns as kx

if TYPE_CHECKING:
    from matplotlib.figure import Figure

INSTALL_PLOT = install_hint("plot")

#: (label, color): blues for input, oranges for output.
BUCKETS = (
    ("prompt, regular", "#9ecae1"),
    ("prompt, cached", "#3182bd"),
    ("prompt, cache write", "#08519c"),
    ("completion, answer", "#fdae6b"),
    ("completion, reasoning", "#e6550d"),
)


def _matplotlib_figure() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(
            f"kimi_extract.plot_usage needs matplotlib, which is not installed: {INSTALL_PLOT}"
        ) from exc
    return Figure


def usage_buckets(df: pd.DataFrame) -> dict[str, int]:
    """Total tokens of ``df`` per non-overlapping bucket (the labels of ``BUCKETS``)."""
    totals = {col: int(_column(df, col).sum()) for col in kx.TOKEN_COLUMNS}
    values = (
        totals[kx.PROMPT_TOKENS] - totals[kx.CACHED_TOKENS] - totals[kx.CACHE_WRITE_TOKENS],
        totals[kx.CACHED_TOKENS],
        totals[kx.CACHE_WRITE_TOKENS],
        totals[kx.COMPLETION_TOKENS] - totals[kx.REASONING_TOKENS],
        totals[kx.REASONING_TOKENS],
    )
    return {label: value for (label, _), value in zip(BUCKETS, values, strict=True)}


def cache_hit_share(df: pd.DataFrame) -> pd.Series:
    """Cumulative cached / prompt tokens after each row, in frame order (NaN before any prompt)."""
    cached = _column(df, kx.CACHED_TOKENS).cumsum()
    prompt = _column(df, kx.PROMPT_TOKENS).cumsum()
    share = cached / prompt.where(prompt > 0)
    return pd.Series(share.to_numpy(dtype="float64"), index=df.index, name="cache_hit_share")


def plot_usage(
    df: pd.DataFrame, *, title: str | None = None, figsize: tuple[float, float] = (11.0, 4.0)
) -> Figure:
    """Plot tokens by bucket and the cumulative cache-hit share of a run's output frame.

    ``df``: the DataFrame ``Extractor.run`` (or ``run_documents``) returned; only its ``kx_``
    token columns are read. Left: total tokens per bucket (prompt regular / cached / cache write,
    completion answer / reasoning). Right: the cache-hit share (cached / prompt tokens, cumulative
    over rows in order) in percent. Returns the ``matplotlib.figure.Figure``; save it with
    ``fig.savefig("usage.png")``. Raises ``ImportError`` without matplotlib and ``InputError``
    when a ``kx_`` token column is missing.
    """
    figure_class = _matplotlib_figure()
    from matplotlib.ticker import MaxNLocator, StrMethodFormatter

    buckets = usage_buckets(df)
    share = cache_hit_share(df) * 100
    figure = figure_class(figsize=figsize, layout="constrained")
    tokens_ax, share_ax = figure.subplots(1, 2, width_ratios=(1.1, 1))

    labels = list(buckets)
    values = [buckets[label] for label in labels]
    positions = range(len(labels))
    bars = tokens_ax.barh(positions, values, color=[color for _, color in BUCKETS])
    tokens_ax.set_yticks(list(positions), labels)
    tokens_ax.invert_yaxis()  # buckets read top to bottom in BUCKETS order
    tokens_ax.bar_label(bars, labels=[f"{v:,}" for v in values], padding=3, fontsize=9)
    tokens_ax.set_xlabel("tokens")
    tokens_ax.xaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    tokens_ax.set_xlim(0, max(max(values, default=0), 1) * 1.2)
    total = sum(values)
    tokens_ax.set_title(f"Tokens by bucket ({len(df):,} rows, {total:,} tokens)")
    tokens_ax.grid(axis="x", alpha=0.3)

    rows = range(1, len(share) + 1)
    marker = "." if len(share) <= 60 else None
    share_ax.plot(rows, share.to_numpy(), color=BUCKETS[1][1], marker=marker)
    share_ax.set_ylim(0, 100)
    share_ax.set_xlim(0.5, max(len(share), 1) + 0.5)
    share_ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    share_ax.set_xlabel("row (frame order)")
    share_ax.set_ylabel("cached / prompt tokens (%)")
    final = share.dropna()
    last = f": {final.iloc[-1]:.0f}% at the end" if len(final) else ""
    share_ax.set_title(f"Cache-hit share over the run{last}")
    share_ax.grid(alpha=0.3)
    if title:
        figure.suptitle(title)
    _show_in_jupyter(figure_class)
    return figure


def _show_in_jupyter(figure_class: Any) -> None:
    """Let IPython display a bare ``Figure`` returned as a cell's value, as a PNG.

    IPython registers its figure formatter only once a pyplot backend has been loaded, which a
    pyplot-free figure never does; without this a fresh notebook would show ``<Figure ...>``. An
    existing registration (``%matplotlib inline``, ``%config InlineBackend...``) is kept.
    """
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return
    png = shell.display_formatter.formatters.get("image/png")
    if png is None:
        return
    try:
        png.lookup_by_type(figure_class)
    except KeyError:
        from IPython.core.pylabtools import print_figure

        png.for_type(figure_class, lambda figure: print_figure(figure, "png"))


def _column(df: pd.DataFrame, name: str) -> pd.Series:
    if not isinstance(df, pd.DataFrame):
        raise InputError(
            f"plot_usage needs the DataFrame Extractor.run returned, got {type(df).__name__}"
        )
    if name not in df.columns:
        missing = [c for c in kx.TOKEN_COLUMNS if c not in df.columns]
        raise InputError(
            f"plot_usage needs the accounting columns {missing} (the output of Extractor.run or "
            "run_documents; a column_prefix= does not rename them)"
        )
    return pd.to_numeric(df[name], errors="coerce").fillna(0).astype("int64")
