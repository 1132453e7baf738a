"""plot_usage: the buckets it draws add up to the run's usage, the share is cumulative."""

from __future__ import annotations

import builtins
import io
import math
import re
from typing import Any

import pandas as pd
import pytest

pytest.importorskip("matplotlib")
import matplotlib  # noqa: E402

matplotlib.use("Agg")

from kimi_extract.exceptions import InputError, install_hint  # noqa: E402
from kimi_extract.table import plot  # noqa: E402
from kimi_extract.table.plot import cache_hit_share, plot_usage, usage_buckets  # noqa: E402

from ..conftest import LONG_INSTRUCTIONS  # noqa: E402


def _frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "kx_prompt_tokens": [1000, 1000, 0, 1000],
            "kx_cached_tokens": [0, 800, 0, 800],
            "kx_cache_write_tokens": [800, 0, 0, 0],
            "kx_completion_tokens": [100, 120, 0, 80],
            "kx_reasoning_tokens": [40, 60, 0, 30],
        },
        index=["a", "b", "c", "d"],
    )


def test_buckets_do_not_overlap_and_sum_to_total_tokens():
    buckets = usage_buckets(_frame())
    assert buckets == {
        "prompt, regular": 3000 - 1600 - 800,
        "prompt, cached": 1600,
        "prompt, cache write": 800,
        "completion, answer": 300 - 130,
        "completion, reasoning": 130,
    }
    assert sum(buckets.values()) == 3000 + 300


def test_cache_hit_share_is_cumulative_in_frame_order():
    share = cache_hit_share(_frame())
    assert list(share.index) == ["a", "b", "c", "d"]
    assert share.tolist() == pytest.approx([0.0, 800 / 2000, 800 / 2000, 1600 / 3000])


def test_cache_hit_share_is_nan_before_any_prompt_token():
    frame = _frame().iloc[[2, 1]]  # the zero-token row (served from the store) first
    share = cache_hit_share(frame)
    assert math.isnan(share.iloc[0]) and share.iloc[1] == pytest.approx(0.8)


def test_plot_usage_draws_both_panels_and_renders_png():
    fig = plot_usage(_frame(), title="demo")
    tokens_ax, share_ax = fig.axes
    widths = [patch.get_width() for patch in tokens_ax.patches]
    assert widths == list(usage_buckets(_frame()).values())
    assert [t.get_text() for t in tokens_ax.get_yticklabels()] == [b for b, _ in plot.BUCKETS]
    (line,) = share_ax.get_lines()
    assert list(line.get_xdata()) == [1, 2, 3, 4]
    assert list(line.get_ydata()) == pytest.approx([0.0, 40.0, 40.0, 160000 / 3000])
    assert "53% at the end" in share_ax.get_title()
    png = io.BytesIO()
    fig.savefig(png, format="png")
    assert png.getvalue().startswith(b"\x89PNG")


def test_plot_usage_on_a_real_run(make_extractor):
    ex = make_extractor(instructions=LONG_INSTRUCTIONS, concurrency=2)
    texts = [f"Review {i}: the battery lasts {i} days and the screen is bright." for i in range(8)]
    out = ex.run(texts)
    buckets = usage_buckets(out)
    usage = ex.last_run.usage
    assert sum(buckets.values()) == usage.prompt_tokens + usage.completion_tokens
    assert buckets["prompt, cached"] == usage.cached_tokens > 0
    assert cache_hit_share(out).iloc[-1] == pytest.approx(usage.cache_hit_share)
    fig = plot_usage(out)
    assert len(fig.axes) == 2


def test_plot_usage_handles_an_empty_frame():
    fig = plot_usage(_frame().iloc[0:0])
    assert [p.get_width() for p in fig.axes[0].patches] == [0] * 5
    fig.savefig(io.BytesIO(), format="png")


def test_missing_accounting_columns_are_named():
    with pytest.raises(InputError, match="kx_cached_tokens"):
        plot_usage(_frame().drop(columns=["kx_cached_tokens"]))
    with pytest.raises(InputError, match="DataFrame"):
        plot_usage([1, 2, 3])  # type: ignore[arg-type]


def test_without_matplotlib_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch):
    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(ImportError, match=re.escape(install_hint("plot"))):
        plot_usage(_frame())


def test_plot_usage_is_exported():
    import kimi_extract as kx

    assert kx.plot_usage is plot_usage
    assert "plot_usage" in kx.__all__
