"""The Pareto front and the paired test of ``kx.compare``, as properties over many inputs.

- the front: a point on it is never dominated, every other point is (hypothesis), and a
  constructed example comes out as drawn by hand;
- the paired bootstrap on the same rows (``Comparison.better``): over many repeats of the
  simulator's quality model it finds a real difference almost always and a null one about as
  often as its level says.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kimi_extract as kx
from kimi_extract.quality.comparison import Comparison, pareto_front
from kimi_extract.simulator.quality import ErrorRates, corrupt

from .test_compare import Invoice, invoices


def _dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether point a = (accuracy, cost) dominates b."""
    return a[0] >= b[0] and a[1] <= b[1] and (a[0] > b[0] or a[1] < b[1])


_value = st.sampled_from([0.1, 0.5, 0.5, 0.7, 0.9, 1.0, math.nan])


@given(st.lists(st.tuples(_value, _value), min_size=1, max_size=12))
def test_front_points_are_never_dominated_and_every_other_point_is(points) -> None:
    accuracy = [p[0] for p in points]
    cost = [p[1] for p in points]
    front = pareto_front(accuracy, cost)
    known = [not (math.isnan(a) or math.isnan(c)) for a, c in points]
    for i, point in enumerate(points):
        others = [q for j, q in enumerate(points) if known[j] and j != i]
        if not known[i]:
            assert not front[i]  # an unknown accuracy or cost is never on the front
        elif front[i]:
            assert not any(_dominates(q, point) for q in others)
        else:
            dominators = [q for j, q in enumerate(points) if front[j] and _dominates(q, point)]
            assert dominators, "a point off the front is dominated by a point on it"
    if any(known):
        assert front.any()  # a finite set of known points has a front


def test_front_of_a_constructed_example() -> None:
    table = {
        "cheap": (0.80, 0.5),
        "a": (0.90, 1.0),
        "a-but-dearer": (0.90, 1.5),  # as accurate as "a", dearer
        "b": (0.95, 2.0),
        "b-twin": (0.95, 2.0),  # equal points are both on the front
        "c": (0.93, 3.0),  # less accurate than "b" and dearer
        "best": (0.99, 8.0),
        "unpriced": (1.00, math.nan),
    }
    front = pareto_front([v[0] for v in table.values()], [v[1] for v in table.values()])
    on = {name for name, flag in zip(table, front, strict=True) if flag}
    assert on == {"cheap", "a", "b", "b-twin", "best"}


def _comparison(rows: dict[str, tuple[float, float, float]]) -> Comparison:
    """A Comparison of made-up candidates: name -> (micro_f1, its lower bound, cost)."""
    records = {}
    for name, (f1, low, cost) in rows.items():
        records[name] = {
            "rows": 10,
            "micro_f1": f1,
            "micro_f1_low": low,
            "micro_f1_high": min(1.0, f1 + (f1 - low)),
            "row_exact": f1,
            "row_exact_low": low,
            "row_exact_high": 1.0,
            "cost": cost,
        }
    return Comparison(
        table=pd.DataFrame.from_dict(records, orient="index"),
        evaluations={},
        outputs={},
        reports={},
    )


def test_cheapest_good_enough_candidate() -> None:
    result = _comparison(
        {"low": (0.90, 0.85, 1.0), "high": (0.96, 0.90, 3.0), "max": (0.98, 0.96, 9.0)}
    )
    assert list(result.table["pareto"]) == [True, True, True]
    assert result.cheapest(0.95) == "high"
    assert result.cheapest(0.95, confident=True) == "max"  # high's interval reaches below 0.95
    assert result.cheapest(0.99) is None
    assert result.cheapest(0.5) == "low"


_SCHEMA = kx.compile_schema(Invoice).schema
_KEYS = [g.model_dump(mode="json") for g in invoices(50, seed=11)[1]]


def _evaluations(rate_a: float, rate_b: float, seed: int) -> tuple:
    """Two candidates' evaluations on the same rows under the simulator's quality model, each
    making its own mistakes (as two models or efforts do: independent draws)."""
    rng_a, rng_b = random.Random(seed * 2 + 1), random.Random(seed * 2 + 2)
    pred_a = [corrupt(k, _SCHEMA, ErrorRates.uniform(rate_a), rng_a, ["x"])[0] for k in _KEYS]
    pred_b = [corrupt(k, _SCHEMA, ErrorRates.uniform(rate_b), rng_b, ["x"])[0] for k in _KEYS]
    return (
        kx.evaluate(pred_a, _KEYS, Invoice, n_boot=0),
        kx.evaluate(pred_b, _KEYS, Invoice, n_boot=0),
    )


@pytest.mark.parametrize(
    ("rate_a", "rate_b", "least", "most"),
    [
        (0.05, 0.05, 0.0, 0.125),  # no real difference: rejected about 5 % of the time (3 sd)
        (0.02, 0.08, 0.9, 1.0),  # a real one: found almost always
    ],
)
def test_paired_test_rejects_at_its_level_and_finds_real_differences(
    rate_a: float, rate_b: float, least: float, most: float
) -> None:
    repeats = 80
    rejected = 0
    for seed in range(repeats):
        a, b = _evaluations(rate_a, rate_b, seed)
        result = Comparison(
            table=pd.DataFrame(
                {
                    "rows": [50, 50],
                    "cost": [1.0, 1.0],
                    **{
                        f"micro_f1{s}": [e.overall[f"micro_f1{s}"] for e in (a, b)]
                        for s in ("", "_low", "_high")
                    },
                },
                index=["a", "b"],
            ),
            evaluations={"a": a, "b": b},
            outputs={},
            reports={},
        )
        difference = result.better("a", "b", n_boot=400, seed=seed)
        rejected += difference.p_value < 0.05
        assert np.isfinite(difference.difference)
    assert least <= rejected / repeats <= most, rejected


def test_plot_compare_draws_every_priced_candidate_and_fills_the_front() -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.colors import to_hex

    from kimi_extract.exceptions import InputError
    from kimi_extract.quality.plot import FRONT_COLOR

    result = _comparison(
        {
            "low": (0.90, 0.85, 1.0),
            "dear": (0.89, 0.80, 2.0),
            "max": (0.98, 0.96, 9.0),
            "unpriced": (0.99, 0.97, math.nan),
        }
    )
    figure = kx.plot_compare(result)
    ax = figure.axes[0]
    drawn = {}
    for line in ax.get_lines():
        for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True):
            if line.get_marker() == "o":
                drawn[(float(x), float(y))] = to_hex(line.get_markerfacecolor())
    assert drawn == {
        (1.0, 0.90): FRONT_COLOR,
        (9.0, 0.98): FRONT_COLOR,
        (2.0, 0.89): "#ffffff",  # dominated: hollow
    }
    assert "unpriced" in ax.get_title()  # not drawn, and said so
    labels = {text.get_text() for text in ax.texts}
    assert labels == {"low", "dear", "max"}
    with pytest.raises(InputError, match="Comparison"):
        kx.plot_compare(result.table)  # type: ignore[arg-type]
