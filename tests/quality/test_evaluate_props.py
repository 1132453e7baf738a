"""Properties of ``kx.evaluate`` over many generated inputs (hypothesis).

- gold scored against itself is 1.0 everywhere (every field, its interval, every row);
- corrupting k of n values of one field gives that field's recall (n - k) / n exactly, and
  leaves the other fields at 1.0;
- list pairing equals brute force over every permutation (the solver, and ``evaluate``'s counts);
- the bootstrap interval covers the true rate in about 95 % of repeats (200 seeded repeats);
- scores and intervals do not depend on row order.
"""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, timedelta
from typing import Literal

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import kimi_extract as kx
from kimi_extract.quality import FunctionMatcher, normalize_text
from kimi_extract.quality.assign import PERMUTATION_LIMIT, assign_many, hungarian

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Item(BaseModel):
    name: str
    qty: int


class Address(BaseModel):
    city: str
    zip: str | None


class Record(BaseModel):
    text: str | None
    number: float | None
    count: int | None
    day: date | None
    at: datetime | None
    kind: Literal["a", "b", "c"] | None
    flag: bool | None
    address: Address | None
    items: list[Item]
    tags: list[str]


texts = st.text(min_size=1, max_size=12).filter(lambda s: normalize_text(s) != "")
numbers = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
counts = st.integers(min_value=-(2**63) + 2, max_value=2**63 - 2)  # past 2**53 too
days = st.dates(min_value=date(1900, 1, 1), max_value=date(2200, 1, 1))
instants = st.datetimes(
    min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)
kinds = st.sampled_from(["a", "b", "c"])


def _maybe(strategy: st.SearchStrategy) -> st.SearchStrategy:
    return st.none() | strategy


records = st.fixed_dictionaries(
    {
        "text": _maybe(texts),
        "number": _maybe(numbers),
        "count": _maybe(counts),
        "day": _maybe(days),
        "at": _maybe(instants),
        "kind": _maybe(kinds),
        "flag": _maybe(st.booleans()),
        "address": _maybe(st.fixed_dictionaries({"city": texts, "zip": _maybe(texts)})),
        "items": st.lists(
            st.fixed_dictionaries({"name": texts, "qty": st.integers(0, 5)}), max_size=4
        ),
        "tags": st.lists(texts, max_size=4),
    }
)


def _frame(rows: list[dict]) -> pd.DataFrame:
    """Object columns: a float column would round integers past 2**53 before evaluate sees them
    (a run's output holds integer fields as ``Int64``, which keeps them)."""
    index = [f"r{i}" for i in range(len(rows))]
    return pd.DataFrame(
        {
            name: pd.Series([r[name] for r in rows], index=index, dtype=object)
            for name in Record.model_fields
        }
    )


@FAST
@given(st.lists(records, min_size=1, max_size=12))
def test_gold_against_itself_is_one_everywhere(rows):
    gold = _frame(rows)
    evaluation = kx.evaluate(gold.copy(), gold, Record, n_boot=50, seed=1)
    scores = evaluation.fields[
        [f"{m}{s}" for m in ("precision", "recall", "f1", "exact") for s in ("", "_low", "_high")]
    ]
    assert (scores == 1.0).all().all(), scores
    assert (evaluation.rows["score"] == 1.0).all() and evaluation.rows["exact"].all()
    assert evaluation.overall["micro_f1"] == 1.0 and evaluation.overall["row_exact"] == 1.0


def _wrong(field: str, value: object) -> object:
    """A value of ``field`` that never matches ``value``."""
    if field in ("text", "address.city"):
        return f"{value} zz"
    if field == "number":
        return value + 1.0 + abs(value)  # type: ignore[operator]
    if field == "count":
        return value + 1  # type: ignore[operator]
    if field == "day":
        return value + timedelta(days=1)  # type: ignore[operator]
    if field == "at":
        return value + timedelta(microseconds=1)  # type: ignore[operator]
    if field == "kind":
        return {"a": "b", "b": "c", "c": "a"}[value]  # type: ignore[index]
    assert field == "flag"
    return not value


FILLED = {
    "text": texts,
    "number": numbers,
    "count": counts,
    "day": days,
    "at": instants,
    "kind": kinds,
    "flag": st.booleans(),
    "address.city": texts,
}


@FAST
@given(st.data())
def test_corrupting_k_of_n_values_gives_recall_one_minus_k_over_n(data):
    field = data.draw(st.sampled_from(sorted(FILLED)), label="field")
    rows = data.draw(st.lists(records, min_size=1, max_size=30), label="rows")
    top, _, inner = field.partition(".")
    for row in rows:  # every gold row has a value in the field
        value = data.draw(FILLED[field])
        if inner:
            row["address"] = {"city": value, "zip": None}
        else:
            row[top] = value
    n = len(rows)
    hit = data.draw(st.sets(st.integers(0, n - 1)), label="corrupted rows")
    as_none = data.draw(st.lists(st.booleans(), min_size=n, max_size=n), label="None or wrong")
    predicted = [dict(row) for row in rows]
    for position in hit:
        row = predicted[position]
        if inner:
            city = rows[position]["address"]["city"]
            row["address"] = {
                "city": None if as_none[position] else _wrong(field, city),
                "zip": None,
            }
        else:
            row[top] = None if as_none[position] else _wrong(field, row[top])
    gold, pred = _frame(rows), _frame(predicted)
    fields = kx.evaluate(pred, gold, Record, n_boot=0).fields
    assert fields.loc[field, "recall"] == (n - len(hit)) / n
    assert fields.loc[field, "support"] == n
    others = fields.drop(index=field)
    assert (others["recall"] == 1.0).all() and (others["precision"] == 1.0).all()


def _brute_force(weights: np.ndarray) -> float:
    """The best total weight of any matching (pairs of weight 0 add nothing)."""
    n, m = weights.shape
    if n == 0 or m == 0:
        return 0.0
    if n > m:
        weights, n, m = weights.T, m, n
    return max(
        sum(weights[i, columns[i]] for i in range(n))
        for columns in itertools.permutations(range(m), n)
    )


#: Cells of a weight matrix: dense (most pairs are candidates, ties) or sparse (most items have
#: one candidate or none: the solver's shortcut).
_DENSE = st.sampled_from([0.0, 0.0, 0.25, 0.5, 1.0, 1.5, 2.0]) | st.floats(0, 3)
_SPARSE = st.sampled_from([0.0] * 6 + [1.0, 1.5])
matrices = st.tuples(
    st.integers(0, PERMUTATION_LIMIT + 2), st.integers(0, PERMUTATION_LIMIT + 2), st.booleans()
).flatmap(
    lambda shape: st.lists(
        _SPARSE if shape[2] else _DENSE, min_size=shape[0] * shape[1], max_size=shape[0] * shape[1]
    ).map(lambda cells: np.asarray(cells, dtype=np.float64).reshape(shape[0], shape[1]))
)


@FAST
@given(st.lists(matrices, min_size=1, max_size=6))
def test_list_pairing_equals_brute_force(blocks):
    sizes = [b.size for b in blocks]
    offsets = np.cumsum(sizes) - sizes
    flat = np.concatenate([b.reshape(-1) for b in blocks])
    gold_sizes = np.array([b.shape[0] for b in blocks])
    pred_sizes = np.array([b.shape[1] for b in blocks])
    lists, cells = assign_many(flat, offsets, gold_sizes, pred_sizes)
    for k, block in enumerate(blocks):
        chosen = cells[lists == k] - offsets[k]
        rows, columns = np.divmod(chosen, max(block.shape[1], 1))
        assert len(set(rows)) == len(rows) and len(set(columns)) == len(columns)  # a matching
        assert flat[cells[lists == k]].sum() == pytest.approx(_brute_force(block))
        pairs = hungarian(block)  # the solver for long lists, on the same matrix
        assert block[np.flatnonzero(pairs >= 0), pairs[pairs >= 0]].sum() == pytest.approx(
            _brute_force(block)
        )


class Labels(BaseModel):
    labels: list[int]


@FAST
@given(st.data())
def test_evaluate_pairs_as_many_items_as_brute_force(data):
    # with a threshold of 0.3, two pairs of 0.3 (0.6) are fewer than one of 1.0: the pairing
    # must prefer more pairs over more similarity
    similarity = data.draw(
        st.lists(st.sampled_from([0.0, 0.1, 0.3, 0.6, 0.8, 1.0]), min_size=36, max_size=36)
    )
    table = np.asarray(similarity).reshape(6, 6)
    matcher = FunctionMatcher(lambda g, p: table[g, p], threshold=0.3)
    lists = st.lists(st.integers(0, 5), max_size=PERMUTATION_LIMIT + 2)
    gold = data.draw(st.lists(lists, min_size=1, max_size=5))
    pred = data.draw(st.lists(lists, min_size=len(gold), max_size=len(gold)))
    evaluation = kx.evaluate(
        pd.DataFrame({"labels": pred}),
        pd.DataFrame({"labels": gold}),
        Labels,
        matchers={"labels": matcher},
        n_boot=0,
    )
    expected = sum(
        _brute_force((table[np.ix_(g, p)] >= 0.3).astype(float))
        for g, p in zip(gold, pred, strict=True)
    )
    assert evaluation.fields.loc["labels", "tp"] == expected


def test_bootstrap_interval_covers_the_true_rate_about_95_percent_of_the_time():
    """200 seeded repeats: 200 rows each, a field right with probability 0.8 (its true recall).

    The coverage of a 95 % interval is a binomial share over 200 repeats (standard deviation
    1.5 points at 95 %); the test accepts 90-99 %, about 3 standard deviations either side,
    wide enough for the percentile bootstrap's slight undercoverage at 200 rows.
    """
    true_rate, rows, repeats = 0.8, 200, 200
    gold = pd.DataFrame({"value": [f"v{i}" for i in range(rows)]})

    class Value(BaseModel):
        value: str

    covered = 0
    for repeat in range(repeats):
        rng = np.random.default_rng(1000 + repeat)
        pred = gold.copy()
        pred.loc[rng.random(rows) >= true_rate, "value"] = "wrong"
        recall = kx.evaluate(pred, gold, Value, n_boot=400, seed=repeat).fields.loc["value"]
        covered += recall["recall_low"] <= true_rate <= recall["recall_high"]
    assert 0.90 <= covered / repeats <= 0.99, covered / repeats


@FAST
@given(st.lists(records, min_size=1, max_size=12), st.data())
def test_scores_do_not_depend_on_row_order(rows, data):
    gold = _frame(rows)
    pred = _frame([data.draw(records) if data.draw(st.booleans()) else r for r in rows])
    pred["kx_error"] = [("failed" if data.draw(st.booleans()) else None) for _ in rows]
    reference = kx.evaluate(pred, gold, Record, n_boot=100, seed=3)
    gold_order = data.draw(st.permutations(range(len(rows))))
    pred_order = data.draw(st.permutations(range(len(rows))))
    shuffled = kx.evaluate(
        pred.iloc[list(pred_order)], gold.iloc[list(gold_order)], Record, n_boot=100, seed=3
    )
    pd.testing.assert_frame_equal(shuffled.fields, reference.fields)
    pd.testing.assert_frame_equal(shuffled.rows.loc[reference.rows.index], reference.rows)
    pd.testing.assert_series_equal(shuffled.overall, reference.overall)
