"""Corrections without a browser: the field types and values a review page carries, and
``read_corrections`` (the file -> a gold frame; its checks). The page itself:
test_review_corrections.py."""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import json
import warnings
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

import kimi_extract as kx
from kimi_extract.exceptions import ConfigurationError, InputError
from kimi_extract.table.corrections import CorrectionsWarning
from kimi_extract.table.review_types import check_value, data_hash, describe_model

from .test_review import page_data


class Status(enum.Enum):
    PAID = "paid"
    OPEN = "open"


class Line(BaseModel):
    name: str
    qty: int = Field(ge=0)
    price: float | None = None


class Node(BaseModel):
    label: str
    children: list[Node] = []


class Order(BaseModel):
    vendor: str
    total: decimal.Decimal
    status: Status
    kind: Literal["a", "b"] | None = None
    date: dt.date
    lines: list[Line]
    tags: list[str]
    meta: dict[str, int]
    tree: Node | None = None


def test_types_per_path_come_from_the_model():
    types = describe_model(Order, list(Order.model_fields))
    assert types["vendor"] == {"t": ["string"]}
    assert types["total"] == {"t": ["number", "string"]}
    assert types["status"] == {"t": ["string"], "e": ["paid", "open"]}
    assert types["kind"] == {"t": ["null", "string"], "e": ["a", "b"]}
    assert types["date"] == {"t": ["string"], "f": "date"}
    assert types["lines"] == {"t": ["array"]}
    assert types["lines[]"] == {"t": ["object"], "k": ["name", "qty", "price"]}
    assert types["lines[].qty"] == {"t": ["integer"]}
    assert types["lines[].price"] == {"t": ["null", "number"]}
    assert types["tags[]"] == {"t": ["string"]}
    assert types["meta"] == {"t": ["object"]}  # free keys: edited as JSON
    # A recursive model is described once; deeper paths take any value.
    assert types["tree"] == {"t": ["null", "object"], "k": ["label", "children"]}
    assert types["tree.children[]"] == {"t": ["any"]}


@pytest.mark.parametrize(
    ("path", "value", "problem"),
    [
        ("total", 12, None),
        ("total", "12.50", None),
        ("vendor", None, "vendor takes string, not none"),
        ("status", "late", 'status takes one of ["paid", "open"], not "late"'),
        ("date", "2024-02-30", 'date takes a date (ISO 8601, e.g. 2024-03-01), not "2024-02-30"'),
        ("lines", [{"name": "x", "qty": 1.5}], "lines[0].qty takes integer, not number 1.5"),
        ("lines", [{"name": "x", "qty": 2.0}], None),
        ("lines", [{"name": "x", "qty": 1, "colour": "red"}], "lines[0] has no key 'colour'"),
        ("tags", ["a", 1], "tags[1] takes string, not integer 1"),
    ],
)
def test_values_are_checked_against_their_type(path, value, problem):
    found = check_value(value, path, describe_model(Order, list(Order.model_fields)))
    assert found == problem or (problem and found and found.startswith(problem))


def orders() -> pd.DataFrame:
    rows = [
        Order(
            vendor="ACME",
            total=decimal.Decimal("12.5"),
            status=Status.PAID,
            date=dt.date(2024, 3, 1),
            lines=[Line(name="Bolt", qty=2, price=1.5)],
            tags=["x"],
            meta={"a": 1},
        ),
        Order(
            vendor="Bolt",
            total=decimal.Decimal("3"),
            status=Status.OPEN,
            date=dt.date(2024, 4, 2),
            lines=[],
            tags=[],
            meta={},
        ),
    ]
    df = pd.DataFrame({"text": ["one", "two"], "ref": ["r1", "r2"]})
    for name in Order.model_fields:
        df[name] = pd.Series([getattr(r, name) for r in rows], dtype=object)
    df["lines"] = pd.Series([[ln.model_dump() for ln in r.lines] for r in rows], dtype=object)
    df["tags"] = pd.Series([np.array(r.tags, dtype=object) for r in rows], dtype=object)
    df["kx_cost"] = [0.1, float("nan")]
    return df


def test_the_page_carries_types_keys_and_values(tmp_path):
    df = orders()
    data = page_data(kx.review(df, tmp_path / "r.html", text_column="text", id="ref", model=Order))
    check = data["check"]
    assert (check["typed"], check["model"], check["fields"]) == (
        "model",
        "Order",
        [*Order.model_fields],
    )
    assert check["types"] == describe_model(Order, [*Order.model_fields])
    row = data["cards"][0]["rows"][0]
    assert (row["pos"], row["key"]) == (0, [0, "r1"])
    assert row["values"] == {
        "vendor": "ACME",
        "total": 12.5,
        "status": "paid",  # the enum's value
        "kind": None,
        "date": "2024-03-01",  # ISO text
        "lines": [{"name": "Bolt", "qty": 2, "price": 1.5}],
        "tags": ["x"],  # a numpy array as a list
        "meta": {"a": 1},
        "tree": None,
    }
    rows = [
        (key[0], key[1], [r["values"][n] for n in check["fields"]])
        for r, key in ((c["rows"][0], c["rows"][0]["key"]) for c in data["cards"])
    ]
    assert check["hash"] == data_hash(check["fields"], "ref", rows)


def test_the_model_needs_its_columns_and_the_prefix_names_them(tmp_path):
    df = orders()
    with pytest.raises(InputError, match=r"no column\(s\) \['out_vendor'.*for its field"):
        kx.review(df, tmp_path / "r.html", model=Order, prefix="out_")
    with pytest.raises(ConfigurationError, match="model= takes the output model"):
        kx.review(df, tmp_path / "r.html", model=dict)  # type: ignore[arg-type]
    renamed = df.rename(columns={n: "out_" + n for n in Order.model_fields})
    data = page_data(kx.review(renamed, tmp_path / "r.html", model=Order, prefix="out_"))
    assert data["check"]["fields"] == [*Order.model_fields]
    assert data["cards"][1]["rows"][0]["values"]["vendor"] == "Bolt"


def test_without_a_model_the_page_says_its_types_are_inferred(tmp_path):
    page = kx.review(orders(), tmp_path / "r.html", text_column="text", id="ref")
    data = page_data(page)
    assert data["check"]["typed"] == "inferred"
    assert data["check"]["fields"] == [*Order.model_fields]  # not the text or id= column
    assert data["check"]["types"]["total"] == {"t": ["null", "number"]}
    assert "inferred from the values; pass model= to review()" in page.read_text(encoding="utf-8")


# -- read_corrections ---------------------------------------------------------------------


def document(data: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A corrections file for a page's data, as the page's download writes it."""
    check = data["check"]
    return {
        "format": check["format"],
        "version": check["version"],
        "data_hash": check["hash"],
        "page": check["name"],
        "model": check["model"],
        "typed": check["typed"],
        "prefix": check["prefix"],
        "id_column": check["id_column"],
        "fields": check["fields"],
        "types": check["types"],
        "saved": "2025-01-31T12:00:00.000Z",
        "rows": rows,
    }


def shown_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [row for card in data["cards"] for row in card["rows"]]


def confirmed(row: dict[str, Any], status: str = "confirmed", **changes: Any) -> dict[str, Any]:
    """A file row for a page row: confirmed, with ``changes`` as corrected values."""
    fields = {
        name: {
            "status": "corrected" if name in changes else "unmarked",
            "value": changes.get(name, value),
            "shown": value,
            "marks": [],
        }
        for name, value in row["values"].items()
    }
    return {
        "position": row["pos"],
        "index": row["key"][0],
        "id": row["key"][1],
        "label": str(row["key"][0]),
        "status": status,
        "confirmed": status == "confirmed",
        "fields": fields,
    }


def write(tmp_path: Path, content: Any) -> Path:
    path = tmp_path / "corrections.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


@pytest.fixture
def made(tmp_path):
    df = orders()
    data = page_data(kx.review(df, tmp_path / "r.html", text_column="text", id="ref", model=Order))
    return df, data, shown_rows(data)


def test_gold_holds_the_reviewed_rows_with_their_corrections(tmp_path, made):
    df, data, rows = made
    path = write(tmp_path, document(data, [confirmed(rows[1], "corrected", total=4.5)]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # made from this very frame: no warning
        gold = kx.read_corrections(path, df, model=Order)
    assert list(gold.index) == [1] and list(gold.columns) == [*Order.model_fields]
    assert gold.loc[1].to_dict() == {**rows[1]["values"], "total": 4.5}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not a corrections file: not JSON"),
        ({"format": "something else"}, 'no "format": "kimi_extract.corrections"'),
        (
            {"format": "kimi_extract.corrections", "version": 2, "rows": []},
            "version 2 of the corrections format; this kimi_extract reads version 1",
        ),
        ({"format": "kimi_extract.corrections", "version": "1", "rows": []}, "version '1'"),
    ],
)
def test_a_file_of_another_kind_or_version_is_refused(tmp_path, made, content, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        kx.read_corrections(write(tmp_path, content), made[0])


def test_other_predictions_warn_or_fail_when_strict(tmp_path, made):
    df, data, rows = made
    path = write(tmp_path, document(data, [confirmed(rows[0])]))
    changed = df.copy()
    changed.loc[1, "vendor"] = "Bolt Ltd"
    with pytest.warns(CorrectionsWarning, match="made from other predictions than pred"):
        gold = kx.read_corrections(path, changed)
    assert gold.loc[0, "vendor"] == "ACME"  # what the reviewer saw
    with pytest.raises(InputError, match="rows or values changed since the page was made"):
        kx.read_corrections(path, changed, strict=True)


def test_rows_not_in_pred_are_named(tmp_path, made):
    df, data, rows = made
    path = write(tmp_path, document(data, [confirmed(r) for r in rows]))
    missing = r'1 corrected row\(s\) are not in pred: index 1 \(id "r2"\)'
    with pytest.warns(CorrectionsWarning), pytest.raises(InputError, match=missing):
        kx.read_corrections(path, df.iloc[:1])
    # A row whose index label now holds another id= value is not the row that was reviewed.
    swapped = df.copy()
    swapped["ref"] = ["r2", "r1"]
    with pytest.warns(CorrectionsWarning), pytest.raises(InputError, match=r"index 0 \(id .r1.\)"):
        kx.read_corrections(path, swapped)


def test_rows_are_found_by_id_when_the_index_repeats(tmp_path):
    df = pd.concat([orders(), orders().assign(ref=["r3", "r4"])], ignore_index=False)
    data = page_data(kx.review(df, tmp_path / "r.html", id="ref", model=Order))
    rows = shown_rows(data)
    path = write(tmp_path, document(data, [confirmed(rows[3], "corrected", vendor="Z")]))
    gold = kx.read_corrections(path, df, model=Order)
    assert gold["vendor"].tolist() == ["Z"] and list(gold.index) == [1]
    no_id = page_data(kx.review(df, tmp_path / "s.html", model=Order))
    path = write(tmp_path, document(no_id, [confirmed(shown_rows(no_id)[3])]))
    with pytest.raises(InputError, match="matches 2 rows of pred .*duplicate labels"):
        kx.read_corrections(path, df)


def test_a_row_given_twice_is_refused(tmp_path, made):
    df, data, rows = made
    path = write(tmp_path, document(data, [confirmed(rows[0]), confirmed(rows[0])]))
    with pytest.raises(InputError, match='row index 0 \\(id "r1"\\) is given twice'):
        kx.read_corrections(path, df)


def test_unresolved_rows_are_left_out_and_named(tmp_path, made):
    df, data, rows = made
    path = write(tmp_path, document(data, [confirmed(rows[0], "unresolved"), confirmed(rows[1])]))
    with pytest.warns(CorrectionsWarning, match=r'1 row\(s\) left out .*index 0 \(id "r1"\)'):
        gold = kx.read_corrections(path, df)
    assert list(gold.index) == [1]


def test_values_that_do_not_fit_are_named_by_row_and_field(tmp_path, made):
    df, data, rows = made
    bad_type = confirmed(rows[0], "corrected", date="March")
    path = write(tmp_path, document(data, [bad_type]))
    with pytest.raises(InputError, match=r'row index 0 \(id "r1"\): date takes a date'):
        kx.read_corrections(path, df)
    # Fits the JSON type, not the model's constraint (qty >= 0): model= catches it.
    negative = confirmed(rows[0], "corrected", lines=[{"name": "Bolt", "qty": -2, "price": 1.5}])
    path = write(tmp_path, document(data, [negative]))
    assert kx.read_corrections(path, df)["lines"][0][0]["qty"] == -2
    with pytest.raises(InputError, match=r"row 0, field lines.0.qty: Input should be greater"):
        kx.read_corrections(path, df, model=Order)


def test_model_keeps_its_fields_and_needs_them_all(tmp_path, made):
    df, _, _ = made
    inferred = page_data(kx.review(df, tmp_path / "r.html", id="ref"))  # "text" is a field here
    rows = shown_rows(inferred)
    path = write(tmp_path, document(inferred, [confirmed(rows[0])]))
    assert "text" in kx.read_corrections(path, df).columns
    assert list(kx.read_corrections(path, df, model=Order).columns) == [*Order.model_fields]

    class Wider(Order):
        extra: int

    with pytest.raises(InputError, match=r"no field\(s\) \['extra'\] of model=Wider"):
        kx.read_corrections(path, df, model=Wider)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    values=st.lists(
        st.tuples(
            st.none() | st.integers(-5, 5) | st.floats(allow_nan=True, allow_infinity=False),
            st.none() | st.text(max_size=5),
            st.lists(st.integers(0, 3), max_size=3),
        ),
        min_size=1,
        max_size=8,
    ),
    chosen=st.sets(st.integers(0, 7)),
    label=st.sampled_from(["range", "text", "dates"]),
)
def test_gold_is_exactly_the_confirmed_rows_of_pred(tmp_path, values, chosen, label):
    """For any frame, confirming a set of rows gives those rows' values, in pred's order and
    with its index labels, and the hash recomputed from pred matches the page's."""
    df = pd.DataFrame(
        {
            "number": pd.Series([v[0] for v in values], dtype=object),
            "word": [v[1] for v in values],
            "counts": pd.Series([v[2] for v in values], dtype=object),
        }
    )
    if label == "text":
        df.index = pd.Index([f"row {n}" for n in range(len(df))])
    elif label == "dates":
        df.index = pd.date_range("2024-01-01", periods=len(df), freq="D")
    data = page_data(kx.review(df, tmp_path / "r.html"))
    rows = shown_rows(data)
    picked = sorted(n for n in chosen if n < len(df))
    path = write(tmp_path, document(data, [confirmed(rows[n]) for n in reversed(picked)]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gold = kx.read_corrections(path, df)
    assert list(gold.index) == list(df.index[picked])
    for n in picked:
        assert gold.loc[df.index[n]].to_dict() == rows[n]["values"]


SCHEMA = """
from pydantic import BaseModel

class Line(BaseModel):
    name: str
    qty: int

class Invoice(BaseModel):
    vendor: str
    total: float
    lines: list[Line]
"""


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_cli_review_takes_the_schema(tmp_path, suffix):
    """``kimi-extract review --schema``: the model's types, nested values read back from the
    JSON text a .csv holds; the corrections then read against the same table, hash equal."""
    from kimi_extract.cli import main as cli_main
    from kimi_extract.cli_io import read_table
    from kimi_extract.table.export import write_table

    (tmp_path / "schema.py").write_text(SCHEMA, encoding="utf-8")
    df = pd.DataFrame(
        {
            "text": ["ACME sells 2 bolts", "Bolt Ltd"],
            "vendor": ["ACME", "Bolt Ltd"],
            "total": [12.5, 3.25],
            "lines": pd.Series([[{"name": "bolt", "qty": 2}], []], dtype=object),
        }
    )
    table = tmp_path / f"out{suffix}"
    write_table(df, table)
    html = tmp_path / "review.html"
    args = ["review", str(table), "--html", str(html), "--text", "text"]
    assert cli_main([*args, "--schema", f"{tmp_path / 'schema.py'}:Invoice"]) == 0
    data = page_data(html)
    assert data["check"]["typed"] == "model" and data["check"]["types"]["lines[].qty"] == {
        "t": ["integer"]
    }
    rows = shown_rows(data)
    assert rows[0]["values"]["lines"] == [{"name": "bolt", "qty": 2}]
    path = write(tmp_path, document(data, [confirmed(rows[0])]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gold = kx.read_corrections(path, read_table(table))
    assert gold.loc[0, "lines"] == [{"name": "bolt", "qty": 2}]


def test_the_quality_pages_block_reads_its_file_without_a_warning(tmp_path, monkeypatch, capsys):
    """The corrections example of docs/quality.md: its file's hash is the page's, and the gold is
    the two reviewed rows with the correction."""
    page = Path(__file__).resolve().parents[2] / "docs" / "quality.md"
    blocks = [b.split("```")[0] for b in page.read_text(encoding="utf-8").split("```python\n")[1:]]
    (code,) = [b for b in blocks if "read_corrections(" in b]
    monkeypatch.chdir(tmp_path)
    scope: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exec(compile(code, "docs/quality.md", "exec"), scope)
    gold = scope["gold"]
    assert "precision" in capsys.readouterr().out  # the evaluation printed
    assert gold.to_dict("index") == {
        0: {"vendor": "ACME", "total": 1234.5, "items": ["bolt"]},
        1: {"vendor": "Bolt Ltd", "total": 99.5, "items": ["gear"]},
    }
