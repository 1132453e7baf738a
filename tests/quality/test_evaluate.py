"""``kx.evaluate``: what each count means, matching by type, inputs, errors and money.

Properties over many inputs (gold vs gold, known corruption, row order, list matching, interval
coverage) are in ``test_evaluate_props.py``.
"""

from __future__ import annotations

import math
from datetime import date, datetime
from enum import Enum
from typing import Literal

import numpy as np
import pandas as pd
import pytest
from pydantic import BaseModel

import kimi_extract as kx
from kimi_extract.quality import (
    FunctionMatcher,
    ListMatcher,
    NumberMatcher,
    TextMatcher,
    normalize_text,
    paired_difference,
)


class Address(BaseModel):
    city: str
    zip: str | None = None


class Line(BaseModel):
    item: str
    quantity: int
    price: float | None = None


class Invoice(BaseModel):
    number: str
    total: float | None
    issued: date | None
    status: Literal["paid", "open"] | None
    address: Address | None
    lines: list[Line]
    tags: list[str]


def _invoice(number: str = "A-1", **changes: object) -> dict[str, object]:
    row: dict[str, object] = {
        "number": number,
        "total": 10.0,
        "issued": date(2024, 1, 5),
        "status": "paid",
        "address": {"city": "Paris", "zip": "75001"},
        "lines": [{"item": "pen", "quantity": 2, "price": 1.5}],
        "tags": ["office"],
    }
    row.update(changes)
    return row


def _scores(evaluation: kx.Evaluation, path: str) -> dict[str, float]:
    return evaluation.fields.loc[path].to_dict()


class One(BaseModel):
    value: str | None


def test_each_count_means_what_the_docstring_says():
    gold = pd.DataFrame({"value": ["a", "b", None, "d", None]})
    pred = pd.DataFrame({"value": ["a", "x", "c", None, None]})
    # right: tp; wrong value: fp + fn; value where gold has None: fp; None where gold has a
    # value: fn; None vs None: right, no count
    row = _scores(kx.evaluate(pred, gold, One, n_boot=0), "value")
    assert (row["tp"], row["fp"], row["fn"], row["support"]) == (1, 2, 2, 3)
    assert (row["correct"], row["units"]) == (2, 5)
    assert row["precision"] == pytest.approx(1 / 3)
    assert row["recall"] == pytest.approx(1 / 3)
    assert row["f1"] == pytest.approx(2 / (2 + 2 + 2))
    assert row["exact"] == pytest.approx(2 / 5)


def test_zero_denominators_are_one_without_errors_and_undefined_with_them():
    nothing = pd.DataFrame({"value": [None, None]})
    row = _scores(kx.evaluate(nothing, nothing, One, n_boot=0), "value")
    assert (row["precision"], row["recall"], row["f1"], row["exact"]) == (1.0, 1.0, 1.0, 1.0)
    invented = _scores(
        kx.evaluate(pd.DataFrame({"value": ["x", None]}), nothing, One, n_boot=0), "value"
    )
    assert invented["precision"] == 0.0 and math.isnan(invented["recall"]) and invented["f1"] == 0
    silent = _scores(
        kx.evaluate(nothing, pd.DataFrame({"value": ["x", None]}), One, n_boot=0), "value"
    )
    assert math.isnan(silent["precision"]) and silent["recall"] == 0.0 and silent["f1"] == 0


def test_a_failed_or_missing_row_is_a_miss_for_every_field():
    gold = pd.DataFrame([_invoice("A-1"), _invoice("A-2"), _invoice("A-3", total=None)])
    pred = gold.iloc[[0, 2]].copy()  # A-2 has no predicted row
    pred["kx_error"] = [None, "ValidationFailedError: bad"]
    evaluation = kx.evaluate(pred, gold, Invoice, n_boot=0)
    fields = evaluation.fields
    assert (fields["correct"] == 1).all()  # only row 0 is right, for every path with a row unit
    total = fields.loc["total"]
    assert (total["tp"], total["fn"], total["support"]) == (1, 1, 2)  # row 3's None: no count...
    assert total["exact"] == pytest.approx(1 / 3)  # ...but not right either
    assert fields.loc["lines", "fn"] == 2 and fields.loc["lines[].quantity", "units"] == 1
    rows = evaluation.rows
    assert rows["score"].tolist() == [1.0, 0.0, 0.0]
    assert rows["exact"].tolist() == [True, False, False]
    assert rows["error"].tolist() == [
        None,
        "no prediction for this row",
        "ValidationFailedError: bad",
    ]
    assert rows["wrong"].tolist() == [0, len(fields), len(fields)]
    assert evaluation.overall["failed"] == 2


def test_rows_are_matched_by_index_or_by_key_columns():
    gold = pd.DataFrame([_invoice("A-1"), _invoice("A-2", total=3.0)], index=["x", "y"])
    pred = gold.iloc[::-1].copy()
    assert kx.evaluate(pred, gold, Invoice, n_boot=0).overall["row_exact"] == 1.0
    by_key = pred.reset_index(drop=True)
    by_key.loc[by_key["number"] == "A-1", "total"] = 99.0
    evaluation = kx.evaluate(by_key, gold.reset_index(drop=True), Invoice, on="number", n_boot=0)
    assert list(evaluation.rows.index) == ["A-1", "A-2"]
    assert evaluation.rows["fields"].tolist() == [("total",), ()]
    assert "number" not in evaluation.paths  # a key is not scored


def test_numbers_match_within_tolerance():
    class Price(BaseModel):
        price: float

    gold = pd.DataFrame({"price": [10.0, 100.0, 0.0]})
    pred = pd.DataFrame({"price": ["10", 100.5, 1e-12]})  # text as a CSV holds it
    assert kx.evaluate(pred, gold, Price, n_boot=0).fields.loc["price", "tp"] == 1
    loose = kx.evaluate(
        pred, gold, Price, matchers={"price": NumberMatcher(rel=0.01, abs=1e-9)}, n_boot=0
    )
    assert loose.fields.loc["price", "tp"] == 3


def test_dates_and_datetimes_are_parsed_then_compared():
    class When(BaseModel):
        day: date
        at: datetime

    gold = pd.DataFrame(
        {
            "day": [date(2024, 1, 5), "2024-02-01", date(2024, 3, 1)],
            "at": ["2024-01-05T10:00:00+01:00", datetime(2024, 1, 5, 9), "2024-01-05T09:00Z"],
        }
    )
    pred = pd.DataFrame(
        {
            "day": ["2024-01-05", date(2024, 2, 1), "2024-03-02"],
            "at": ["2024-01-05T09:00:00Z", "2024-01-05T09:00:00", "2024-01-05T09:00:01Z"],
        }
    )
    fields = kx.evaluate(pred, gold, When, n_boot=0).fields
    assert fields.loc["day", "tp"] == 2 and fields.loc["at", "tp"] == 2  # the last of each differs


class Colour(Enum):
    red = "red"
    blue = "blue"


def test_enums_and_literals_are_exact():
    class Paint(BaseModel):
        colour: Colour
        finish: Literal["matt", "gloss"]

    gold = [Paint(colour=Colour.red, finish="matt"), Paint(colour=Colour.blue, finish="gloss")]
    pred = [{"colour": "red", "finish": "matt"}, {"colour": "red", "finish": "gloss"}]
    fields = kx.evaluate(pred, gold, Paint, n_boot=0).fields
    assert fields.loc["colour", "tp"] == 1 and fields.loc["finish", "tp"] == 2
    with pytest.raises(kx.EvaluationError, match=r"predicted row 1, field finish: 'Gloss' is not"):
        kx.evaluate([pred[0], {"colour": "red", "finish": "Gloss"}], gold, Paint, n_boot=0)


def test_texts_are_normalised_and_optionally_fuzzy():
    assert normalize_text("  Café\u3000ＡＢＣ\u200b ") == normalize_text("café  abc")
    assert normalize_text("“quoted”—dash") == normalize_text('"QUOTED"-dash')
    assert normalize_text("ab c") != normalize_text("abc")
    gold = pd.DataFrame({"value": ["Café ＡＢＣ", "Acme Corporation", "Acme"]})
    pred = pd.DataFrame({"value": ["café abc", "Acme Corporatoin", "Zeta"]})
    assert kx.evaluate(pred, gold, One, n_boot=0).fields.loc["value", "tp"] == 1
    fuzzy = kx.evaluate(pred, gold, One, matchers={"value": TextMatcher(fuzzy=85)}, n_boot=0)
    assert fuzzy.fields.loc["value", "tp"] == 2
    exact = kx.evaluate(pred, gold, One, matchers={"value": TextMatcher(normalize=False)}, n_boot=0)
    assert exact.fields.loc["value", "tp"] == 0


def test_a_function_matcher_decides_per_pair():
    gold = pd.DataFrame({"value": ["10 kg", "3 kg"]})
    pred = pd.DataFrame({"value": ["10000 g", "3 g"]})
    grams = {"kg": 1000, "g": 1}

    def same_mass(a: str, b: str) -> bool:
        def parse(s: str) -> float:
            return float(s.split()[0]) * grams[s.split()[1]]

        return parse(a) == parse(b)

    evaluation = kx.evaluate(pred, gold, One, matchers={"value": same_mass}, n_boot=0)
    assert evaluation.fields.loc["value", "tp"] == 1


def test_list_items_are_paired_by_optimal_assignment_not_order():
    gold = pd.DataFrame(
        [
            _invoice(
                lines=[
                    {"item": "pen", "quantity": 2, "price": 1.5},
                    {"item": "ink", "quantity": 1, "price": 7.0},
                ],
                tags=["b", "a"],
            )
        ]
    )
    pred = pd.DataFrame(
        [
            _invoice(
                lines=[
                    {"item": "INK", "quantity": 1, "price": 7.0},
                    {"item": "pen", "quantity": 3, "price": 1.5},  # same item, one field wrong
                    {"item": "extra", "quantity": 1, "price": None},  # invented
                ],
                tags=["A", "b"],
            )
        ]
    )
    fields = kx.evaluate(pred, gold, Invoice, n_boot=0).fields
    lines = fields.loc["lines"]
    assert (lines["tp"], lines["fp"], lines["fn"], lines["exact"]) == (2, 1, 0, 0.0)
    quantity = fields.loc["lines[].quantity"]  # over the two paired items only
    assert (quantity["tp"], quantity["fp"], quantity["fn"], quantity["units"]) == (1, 1, 1, 2)
    assert fields.loc["lines[].item", "tp"] == 2 and fields.loc["lines[].price", "tp"] == 2
    assert fields.loc["tags", "exact"] == 1.0  # order does not matter


def test_pairing_maximises_matches_where_greedy_would_not():
    class Names(BaseModel):
        names: list[str]

    similarity = {("A", "X"): 1.0, ("A", "Y"): 0.35, ("B", "X"): 0.35, ("B", "Y"): 0.1}
    same = FunctionMatcher(lambda g, p: similarity[g, p], threshold=0.3)
    # pairing the most similar first (A-X) leaves B with Y (0.1: not the same item), and so
    # does the pairing of the highest total similarity (1.0 > 0.35 + 0.35); the assignment
    # pairs as many items as it can first (A-Y, B-X): both gold items are found
    gold = pd.DataFrame({"names": [["A", "B"]]})
    pred = pd.DataFrame({"names": [["X", "Y"]]})
    evaluation = kx.evaluate(pred, gold, Names, matchers={"names": same}, n_boot=0)
    assert evaluation.fields.loc["names", ["tp", "fp", "fn"]].tolist() == [2, 0, 0]


def test_list_threshold_decides_when_two_items_are_the_same():
    gold = pd.DataFrame([_invoice(lines=[{"item": "pen", "quantity": 2, "price": 1.5}])])
    pred = pd.DataFrame([_invoice(lines=[{"item": "pen", "quantity": 3, "price": 9.0}])])
    default = kx.evaluate(pred, gold, Invoice, n_boot=0).fields  # 1 of 3 fields: below 0.5
    assert default.loc["lines", "tp"] == 0
    lenient = kx.evaluate(
        pred, gold, Invoice, matchers={"lines": ListMatcher(threshold=0.3)}, n_boot=0
    ).fields
    assert lenient.loc["lines", "tp"] == 1 and lenient.loc["lines[].item", "tp"] == 1


def test_gold_from_a_csv_written_by_run_to_and_from_model_instances(tmp_path):
    from kimi_extract.table.export import write_table

    gold = pd.DataFrame([_invoice("A-1"), _invoice("A-2", address=None, tags=[], total=None)])
    path = tmp_path / "gold.csv"
    write_table(gold, path)
    read = pd.read_csv(path, dtype={"number": str})
    assert isinstance(read.loc[0, "lines"], str)  # nested values are JSON text
    assert kx.evaluate(gold, read, Invoice, n_boot=0).overall["row_exact"] == 1.0
    instances = [Invoice.model_validate(r) for r in gold.to_dict("records")]
    assert kx.evaluate(instances, instances, Invoice, n_boot=0).overall["row_exact"] == 1.0
    wrong = [instances[0], None]  # a None prediction is a failed row
    assert kx.evaluate(wrong, instances, Invoice, n_boot=0).rows["exact"].tolist() == [True, False]


@pytest.mark.parametrize(
    ("gold", "pred", "message"),
    [
        (
            pd.DataFrame([_invoice()]).assign(note="x"),
            None,
            r"gold has column\(s\) \['note'\] that the model Invoice lacks",
        ),
        (
            pd.DataFrame([_invoice(), _invoice("A-2")], index=["r1", "r1"]),
            None,
            r"gold has the index label 'r1' on 2 rows",
        ),
        (
            pd.DataFrame([_invoice(), _invoice(total="ten")], index=["r1", "r2"]),
            None,
            r"gold row 'r2', field total: 'ten' is not a number",
        ),
        (
            pd.DataFrame([_invoice(address={"city": "Paris", "country": "FR"})], index=["r1"]),
            None,
            r"gold row 'r1', field address: has a key 'country' .*address\.country",
        ),
        (
            pd.DataFrame(
                [_invoice(lines=[{"item": "a", "quantity": 1}, {"item": "b", "quantity": "x"}])],
                index=["r1"],
            ),
            None,
            r"gold row 'r1', field lines\[1\]\.quantity: 'x' is not a number",
        ),
        (
            pd.DataFrame([_invoice(issued="05/01/2024")], index=["r1"]),
            None,
            r"gold row 'r1', field issued: '05/01/2024' is not an ISO 8601 date",
        ),
        (
            pd.DataFrame([_invoice(status="closed")], index=["r1"]),
            None,
            r"gold row 'r1', field status: 'closed' is not one of the allowed values",
        ),
        (
            pd.DataFrame([_invoice(tags="office")], index=["r1"]),
            None,
            r"gold row 'r1', field tags: 'office' is not JSON",
        ),
        (
            pd.DataFrame([_invoice(number=["A", "B"])], index=["r1"]),
            None,
            r"gold row 'r1', field number: \['A', 'B'\] is a list, not a single value",
        ),
        (
            pd.DataFrame([_invoice()], index=["r1"]),
            pd.DataFrame([_invoice(address=["Paris"])], index=["r1"]),
            r"predicted row 'r1', field address: .* is not an object",
        ),
        (
            pd.DataFrame([_invoice()], index=["r1"]),
            pd.DataFrame([_invoice()], index=["r1"]).drop(columns="tags"),
            r"the predictions have no column\(s\) \['tags'\]",
        ),
    ],
)
def test_bad_input_names_the_row_and_the_field(gold, pred, message):
    pred = gold if pred is None else pred
    with pytest.raises(kx.EvaluationError, match=message):
        kx.evaluate(pred, gold, Invoice, n_boot=0)


def test_duplicate_keys_and_bad_settings_are_refused():
    gold = pd.DataFrame([_invoice("A-1"), _invoice("A-1")])
    with pytest.raises(kx.EvaluationError, match=r"gold has the key 'A-1' on 2 rows"):
        kx.evaluate(gold, gold, Invoice, on="number")
    with pytest.raises(kx.EvaluationError, match=r"predictions has no column\(s\) \['id'\]"):
        kx.evaluate(gold.drop(columns="number"), gold.assign(id=[1, 2]), Invoice, on="id")
    one = pd.DataFrame([_invoice()])
    with pytest.raises(kx.ConfigurationError, match=r"\['lines\[\]\.qty'\].*lines\[\]\.quantity"):
        kx.evaluate(one, one, Invoice, matchers={"lines[].qty": NumberMatcher()})
    with pytest.raises(kx.ConfigurationError, match=r"matchers\['total'\] is 3"):
        kx.evaluate(one, one, Invoice, matchers={"total": 3})
    with pytest.raises(kx.ConfigurationError, match=r"lines is a list of objects"):
        kx.evaluate(one, one, Invoice, matchers={"lines": TextMatcher()})
    with pytest.raises(kx.ConfigurationError, match="BaseModel subclass"):
        kx.evaluate(one, one, dict)  # type: ignore[arg-type]
    with pytest.raises(kx.ConfigurationError, match="fuzzy"):
        TextMatcher(fuzzy=0)


def test_money_per_correct_value_and_per_correct_row():
    gold = pd.DataFrame({"value": ["a", "b", "c", None]})
    pred = pd.DataFrame({"value": ["a", "x", "c", None], "kx_cost": [0.5, 0.25, 0.25, np.nan]})
    overall = kx.evaluate(pred, gold, One, n_boot=0).overall
    assert overall["cost"] == 1.0
    assert overall["cost_per_correct_value"] == pytest.approx(1.0 / 2)  # 2 true positives
    assert overall["cost_per_correct_row"] == pytest.approx(1.0 / 3)  # rows 0, 2, 3
    unpriced = kx.evaluate(pred.drop(columns="kx_cost"), gold, One, n_boot=0)
    assert math.isnan(unpriced.overall["cost_per_correct_value"])
    assert "cost: unknown" in unpriced.summary() and "no intervals" in unpriced.summary()
    no_price = kx.evaluate(pred.assign(kx_cost=np.nan).head(3), gold, One, n_boot=0).overall
    assert math.isnan(no_price["cost"]) and math.isnan(no_price["cost_per_correct_row"])


def test_summary_rows_and_worst_point_at_what_to_fix():
    gold = pd.DataFrame([_invoice(f"A-{i}") for i in range(6)], index=[f"r{i}" for i in range(6)])
    pred = gold.copy()
    pred.loc["r2", "total"] = 1.0
    pred.loc["r4", "total"] = 1.0
    pred.at["r4", "tags"] = []
    pred.loc["r5", "kx_error"] = "TruncatedError: cut"
    evaluation = kx.evaluate(pred, gold, Invoice, n_boot=200)
    assert list(evaluation.worst(3).index) == ["r5", "r4", "r2"]
    assert evaluation.rows.loc["r4", "fields"] == ("total", "tags")
    summary = evaluation.summary()
    assert "6 rows (1 without a prediction)" in summary
    assert "lines[].quantity" in summary and "95% intervals from 200 bootstrap" in summary
    low, high = evaluation.fields.loc["total", ["f1_low", "f1_high"]]
    assert 0 <= low <= evaluation.fields.loc["total", "f1"] <= high <= 1


def test_paired_difference_on_the_same_rows():
    rng = np.random.default_rng(5)
    gold = pd.DataFrame({"value": [f"v{i}" for i in range(400)]})
    good = gold.copy()
    good.loc[rng.random(400) < 0.05, "value"] = "wrong"
    bad = gold.copy()
    bad.loc[rng.random(400) < 0.30, "value"] = "wrong"
    a = kx.evaluate(good, gold, One, n_boot=500)
    b = kx.evaluate(bad.iloc[::-1], gold, One, n_boot=500)  # row order does not matter
    better = paired_difference(a, b)
    assert better.difference == pytest.approx(a.overall["micro_f1"] - b.overall["micro_f1"])
    assert 0 < better.low < better.difference < better.high and better.p_value < 0.01
    same = paired_difference(a, a, "recall", field="value")
    assert (same.difference, same.low, same.high, same.p_value) == (0.0, 0.0, 0.0, 1.0)
    with pytest.raises(kx.ConfigurationError, match="different gold rows"):
        paired_difference(a, kx.evaluate(gold.head(10), gold.head(10), One))


def test_values_as_files_read_them_back():
    """A CSV column of integer literals with blanks reads back as floats; parquet gives lists as
    numpy arrays; both are the values they stand for."""

    class Graded(BaseModel):
        grade: Literal[1, 2, 3] | None
        tags: list[str]

    gold = pd.DataFrame({"grade": [1.0, np.nan, 3.0], "tags": [np.array(["a", "b"]), [], ["c"]]})
    pred = pd.DataFrame({"grade": [1, None, 2], "tags": [["b", "a"], np.array([]), ["c"]]})
    fields = kx.evaluate(pred, gold, Graded, n_boot=0).fields
    assert fields.loc["grade", ["tp", "fp", "fn"]].tolist() == [1, 1, 1]
    assert fields.loc["tags", "exact"] == 1.0


def test_predictions_without_gold_rows_are_left_out_and_said():
    gold = pd.DataFrame({"value": ["a", "b"]}, index=["x", "y"])
    pred = pd.DataFrame({"value": ["a", "b", "c"]}, index=["x", "y", "z"])
    evaluation = kx.evaluate(pred, gold, One, n_boot=0)
    assert list(evaluation.rows.index) == ["x", "y"] and evaluation.unmatched == 1
    assert evaluation.overall["row_exact"] == 1.0
    assert "1 predicted rows without a gold row" in evaluation.summary()


def test_an_empty_text_or_list_is_no_value():
    gold = pd.DataFrame([_invoice(number="A-1", tags=None), _invoice(number="A-2", tags=[])])
    pred = gold.copy()
    pred["number"] = ["A-1", "A-2"]
    pred["tags"] = [[], None]
    pred["address"] = [{"city": "Paris", "zip": "  "}, {"city": "Paris", "zip": "75001"}]
    gold["address"] = [{"city": "Paris", "zip": None}, {"city": "Paris", "zip": "75001"}]
    fields = kx.evaluate(pred, gold, Invoice, n_boot=0).fields
    assert fields.loc["address.zip", ["tp", "fp", "fn", "correct"]].tolist() == [1, 0, 0, 2]
    assert fields.loc["tags", ["tp", "fp", "fn", "correct"]].tolist() == [0, 0, 0, 2]
