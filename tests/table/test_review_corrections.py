"""Corrections in the review page, in a real browser (tests/cdp.py): a reviewer edits a number,
marks a list item as not in the source, adds an item, confirms an untouched row; the marks
survive a reload; "download corrections" saves the file ``read_corrections`` turns into gold.
Pages whose corrections are kept are served over loopback HTTP (``site``; ``cdp.serve`` says why
not from file://).
Typed values that do not fit the field's type are refused, by the same rules the Python side
checks (a property over many values)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import kimi_extract as kx
from kimi_extract.table.review_types import check_value, describe_model

from ..cdp import Browser, browser_session, serve
from .test_review import page_data


class Item(BaseModel):
    name: str
    qty: int
    price: float | None = None


class Invoice(BaseModel):
    vendor: str
    total: float
    currency: Literal["EUR", "USD"]
    date: dt.date
    items: list[Item]
    note: str | None = None


TEXTS = [
    "ACME Corp invoice of 2024-03-01: 2 Bolt at 1.50, 1 Nut at 0.50. Total 1,234.50 EUR.",
    "Bolt Ltd, 2024-04-02, 1 Gear at 99.50, total 99.50 USD.",
    "Cog & Co, 2024-05-03, nothing sold, total 0 EUR.",
]
ANSWERS = [
    Invoice(
        vendor="ACME Corp",
        total=1243.5,  # misread: the text says 1,234.50
        currency="EUR",
        date=dt.date(2024, 3, 1),
        items=[Item(name="Bolt", qty=2, price=1.5), Item(name="Nut", qty=1, price=0.5)],
    ),
    Invoice(
        vendor="Bolt Ltd",
        total=99.5,
        currency="USD",
        date=dt.date(2024, 4, 2),
        items=[Item(name="Gear", qty=1, price=99.5)],
    ),
    Invoice(vendor="Cog & Co", total=0.0, currency="EUR", date=dt.date(2024, 5, 3), items=[]),
]


def invoices() -> pd.DataFrame:
    """An output frame as ``Extractor.run`` makes it: input columns, fields, accounting."""
    rows = [answer.model_dump() for answer in ANSWERS]
    df = pd.DataFrame({"text": TEXTS, "ref": ["A-1", "B-2", "C-3"]})
    for name in Invoice.model_fields:
        df[name] = pd.Series([row[name] for row in rows], dtype=object)
    df["total"] = df["total"].astype("Float64")
    df["kx_cost"] = [0.001] * 3
    df["kx_error"] = [None] * 3
    return df


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    yield from browser_session()


@pytest.fixture
def page(browser: Browser) -> Iterator[Browser]:
    """The browser with its problem list emptied; the test fails if the page logged any."""
    browser.clear_events()
    yield browser
    assert browser.problems() == []


@pytest.fixture
def site(page: Browser, tmp_path: Path) -> Iterator[Callable[[Path], str]]:
    """The test's folder on a fresh loopback origin, its storage emptied in the browser: a file
    under it -> its URL."""
    with serve(tmp_path) as url:
        page.clear_storage(url(tmp_path))
        yield url


def open_fresh(page: Browser, url: str) -> None:
    """Open a page (``site``) with no corrections stored. The storage is emptied before the page
    opens, not by the page and a reload: a reload is itself what a test of corrections checks."""
    page.open(url)
    assert page.evaluate("localStorage.length") == 0
    page.wait_for("document.querySelectorAll('.cx-check').length > 0")


def check(pos: int) -> str:
    return f'.cx-check[data-pos="{pos}"]'


def edit(page: Browser, pos: int, path: str, text: str) -> None:
    """Mark a value wrong and type its right value (the input opens focused and selected)."""
    page.click(f'{check(pos)} tr[data-path="{path}"] button.cx-bad')
    page.call("Input.insertText", {"text": text})
    page.key("Enter")


def block(page: Browser, pos: int) -> str:
    text: str = page.evaluate(f"document.querySelector('{check(pos)}').innerText")
    return text


def test_edit_drop_add_reload_download_read(page, site, tmp_path):
    df = invoices()
    out = kx.review(df, tmp_path / "inv.html", text_column="text", id="ref", model=Invoice)
    open_fresh(page, site(out))
    assert "0 of 3 rows reviewed" in page.evaluate(
        "document.getElementById('kx-reviewed').textContent"
    )
    # Row 0: a number edited, an item marked as not in the source, an item added.
    edit(page, 0, "total", "1234.5")
    page.click(f'{check(0)} tr[data-path="items[1]"] button.cx-drop')
    page.click(f"{check(0)} button.cx-add")
    for key, text in (("name", "Washer"), ("qty", "10")):  # price left empty: none
        page.evaluate(
            f"document.querySelector('{check(0)} tr.cx-form input[data-key=\"{key}\"]').focus()"
        )
        page.call("Input.insertText", {"text": text})
    page.click(f"{check(0)} button.cx-add-save")
    # Row 1: confirmed untouched. Row 2: untouched, so not gold.
    page.click(f"{check(1)} button.cx-confirm")
    before = block(page, 0), block(page, 1), block(page, 2)
    assert "1243.5 → 1234.5" in before[0] and "corrected: in the gold" in before[0]
    assert '{"name":"Washer","qty":10,"price":null}' in before[0]
    assert "marked correct: in the gold" in before[1] and "not reviewed" in before[2]

    page.reload()
    page.wait_for("document.querySelectorAll('.cx-check').length > 0")
    assert (block(page, 0), block(page, 1), block(page, 2)) == before  # kept across the reload
    assert "2 of 3 rows reviewed (1 corrected)" in page.evaluate(
        "document.getElementById('kx-reviewed').textContent"
    )

    downloads = tmp_path / "downloads"
    downloads.mkdir()
    page.save_downloads(downloads)
    page.click("#kx-download")
    saved = page.downloaded(downloads, "inv.corrections.json")
    document = json.loads(saved.read_text(encoding="utf-8"))
    assert document["format"] == "kimi_extract.corrections" and document["version"] == 1
    assert [(r["index"], r["id"], r["status"]) for r in document["rows"]] == [
        (0, "A-1", "corrected"),
        (1, "B-2", "confirmed"),
    ]
    marks = document["rows"][0]["fields"]["items"]["marks"]
    assert marks == [
        {"path": "items[1]", "status": "not_in_source"},
        {"path": "items", "status": "added", "value": {"name": "Washer", "qty": 10, "price": None}},
    ]

    gold = kx.read_corrections(saved, df, model=Invoice)
    expected = pd.DataFrame(
        {
            "vendor": ["ACME Corp", "Bolt Ltd"],
            "total": [1234.5, 99.5],
            "currency": ["EUR", "USD"],
            "date": ["2024-03-01", "2024-04-02"],
            "items": [
                [
                    {"name": "Bolt", "qty": 2, "price": 1.5},
                    {"name": "Washer", "qty": 10, "price": None},
                ],
                [{"name": "Gear", "qty": 1, "price": 99.5}],
            ],
            "note": [None, None],
        },
        index=pd.Index([0, 1]),
        dtype=object,
    )
    pd.testing.assert_frame_equal(gold, expected)

    # The gold scores the predictions: row 0's total is wrong, its Nut was invented and its
    # Washer missed; row 1 is right; row 2 was not reviewed, so it is not scored.
    evaluation = kx.evaluate(df, gold, model=Invoice, n_boot=0)
    counts = evaluation.fields[["tp", "fp", "fn"]].astype(int).T.to_dict("list")
    assert counts == {
        "vendor": [2, 0, 0],
        "total": [1, 1, 1],
        "currency": [2, 0, 0],
        "date": [2, 0, 0],
        "items": [2, 1, 1],  # Bolt and Gear paired, Nut extra, Washer missed
        "items[].name": [2, 0, 0],
        "items[].qty": [2, 0, 0],
        "items[].price": [2, 0, 0],
        "note": [0, 0, 0],
    }
    assert evaluation.fields.loc["total", "recall"] == 0.5
    assert evaluation.fields.loc["items", "precision"] == pytest.approx(2 / 3)
    assert evaluation.rows["exact"].tolist() == [False, True]
    assert list(evaluation.rows.index) == [0, 1]


def test_a_value_of_the_wrong_type_is_refused(page, site, tmp_path):
    out = kx.review(invoices(), tmp_path / "inv.html", text_column="text", model=Invoice)
    open_fresh(page, site(out))
    error = f"document.querySelector('{check(0)} .cx-error').textContent"
    cases = [
        ("total", "12a", "refused: total takes a number (digits, '.' for decimals, e.g. 1234.5)"),
        ("currency", "GBP", 'refused: currency takes one of EUR, USD: "GBP" is not one of them'),
        ("date", "2024-02-30", 'refused: date takes a date (ISO 8601), not "2024-02-30"'),
        ("items[0].qty", "1.5", "refused: items[].qty takes a whole number (integer)"),
    ]
    for path, text, message in cases:
        edit(page, 0, path, text)
        assert page.evaluate(error).startswith(message), path
        assert (
            page.evaluate(
                f"document.querySelector('{check(0)} .cx-input').getAttribute('aria-invalid')"
            )
            == "true"
        )
        page.click(f"{check(0)} button.cx-cancel")
        assert page.evaluate("kxReview.corrections().rows") == [], path
    # A required value cannot be set to none: the page offers no "no value" there, and a
    # value marked wrong but not given keeps the row out of the gold.
    page.click(f'{check(0)} tr[data-path="total"] button.cx-bad')
    assert page.evaluate(f"document.querySelector('{check(0)} .cx-none')") is None
    rows = page.evaluate("kxReview.corrections().rows")
    assert [(r["status"], r["fields"]["total"]["status"]) for r in rows] == [
        ("unresolved", "unresolved")
    ]
    # An added item is checked field by field.
    page.click(f"{check(0)} button.cx-cancel")
    page.click(f"{check(0)} button.cx-add")
    page.evaluate(
        f"document.querySelector('{check(0)} tr.cx-form input[data-key=\"name\"]').focus()"
    )
    page.call("Input.insertText", {"text": "Washer"})
    page.evaluate(
        f"document.querySelector('{check(0)} tr.cx-form input[data-key=\"qty\"]').focus()"
    )
    page.call("Input.insertText", {"text": "ten"})
    page.click(f"{check(0)} button.cx-add-save")
    assert page.evaluate(error).startswith("refused: items[].qty takes a whole number (integer)")
    assert page.evaluate("kxReview.corrections().rows") == []


def test_typing_survives_other_marks_in_the_row(page, site, tmp_path):
    """Marking another value redraws the row's block: an open editor keeps its text and its
    message, an open "add" form its inputs; saving the form closes it."""
    out = kx.review(invoices(), tmp_path / "inv.html", text_column="text", model=Invoice)
    open_fresh(page, site(out))
    edit(page, 0, "total", "12a")
    page.click(f"{check(0)} button.cx-add")
    page.call("Input.insertText", {"text": "Washer"})
    page.click(f'{check(0)} tr[data-path="items[1]"] button.cx-drop')
    state = (
        f"[document.querySelector('{check(0)} .cx-error').textContent,"
        f" document.querySelector('{check(0)} .cx-edit .cx-input').value,"
        f" [...document.querySelectorAll('{check(0)} tr.cx-form input')].map(i => i.value)]"
    )
    assert page.evaluate(state) == [
        "refused: total takes a number (digits, '.' for decimals, e.g. 1234.5): \"12a\" is not one",
        "12a",
        ["Washer", "", ""],
    ]
    page.evaluate(
        f"document.querySelector('{check(0)} tr.cx-form input[data-key=\"qty\"]').focus()"
    )
    page.call("Input.insertText", {"text": "4"})
    page.key("Enter")
    assert page.evaluate(f"document.querySelectorAll('{check(0)} tr.cx-form').length") == 0
    rows = page.evaluate("kxReview.corrections().rows")
    assert rows[0]["fields"]["items"]["marks"][-1]["value"] == {
        "name": "Washer",
        "qty": 4,
        "price": None,
    }


def test_a_failed_row_stays_out_until_its_values_fit(page, site, tmp_path):
    df = invoices()
    for name in Invoice.model_fields:
        df.loc[2, name] = None
    df.loc[2, "kx_error"] = "ValidationFailedError: ..."
    out = kx.review(df, tmp_path / "inv.html", text_column="text", model=Invoice)
    open_fresh(page, site(out))
    page.click(f"{check(2)} button.cx-confirm")
    assert "left out of the gold: vendor takes string, not none" in block(page, 2)
    assert [r["status"] for r in page.evaluate("kxReview.corrections().rows")] == ["unresolved"]
    for path, text in (("vendor", "Cog & Co"), ("total", "0"), ("currency", "EUR")):
        edit(page, 2, path, text)
    edit(page, 2, "date", "2024-05-03")
    page.click(f'{check(2)} tr[data-path="items"] button.cx-bad')
    page.call("Input.insertText", {"text": "[]"})
    page.key("Enter")
    assert "corrected: in the gold" in block(page, 2)
    document = tmp_path / "c.json"
    document.write_text(json.dumps(page.evaluate("kxReview.corrections()")), encoding="utf-8")
    gold = kx.read_corrections(document, df, model=Invoice)
    assert gold.loc[2].to_dict() == {
        "vendor": "Cog & Co",
        "total": 0,
        "currency": "EUR",
        "date": "2024-05-03",
        "items": [],
        "note": None,
    }


def test_corrections_are_kept_per_page_data(page, site, tmp_path):
    """localStorage is keyed by the data hash: a page of other data starts clean and keeps its
    own corrections apart; the same data (another file) finds its corrections; a stored entry
    that is unreadable or for other data is ignored."""
    df = invoices()
    first = kx.review(df, tmp_path / "a.html", text_column="text", model=Invoice)
    open_fresh(page, site(first))
    page.click(f"{check(1)} button.cx-confirm")
    page.wait_for("kxReview.corrections().rows.length === 1")  # kept before the page goes
    same = kx.review(df, tmp_path / "b.html", text_column="text", model=Invoice, title="again")
    page.open(site(same))
    assert [r["position"] for r in page.evaluate("kxReview.corrections().rows")] == [1]
    other = df.copy()
    other.loc[1, "vendor"] = "Bolt Limited"
    page.open(site(kx.review(other, tmp_path / "c.html", text_column="text", model=Invoice)))
    assert page.evaluate("kxReview.corrections().rows") == []
    page.wait_for(f"!!document.querySelector('{check(2)}')")
    page.click(f"{check(2)} button.cx-confirm")
    page.wait_for("kxReview.corrections().rows.length === 1")
    page.open(site(first))
    assert [r["position"] for r in page.evaluate("kxReview.corrections().rows")] == [1]
    key = "kimi_extract.corrections:" + page_data(first)["check"]["hash"]
    stored = json.loads(page.evaluate(f"localStorage.getItem({json.dumps(key)})"))
    for entry in ("{not json", json.dumps({**stored, "hash": "sha256:other"})):
        page.evaluate(f"localStorage.setItem({json.dumps(key)}, {json.dumps(entry)})")
        page.reload()
        assert page.evaluate(f"localStorage.getItem({json.dumps(key)})") == entry  # read, ignored
        assert page.evaluate("kxReview.corrections().rows") == []
        assert "not kept" not in page.evaluate("document.getElementById('kx-reviewed').textContent")


def test_without_a_model_types_are_inferred_and_said(page, site, tmp_path):
    df = invoices()
    df["date"] = df["date"].map(lambda d: d.isoformat())
    out = kx.review(df, tmp_path / "inv.html", text_column="text", id="ref")
    assert "inferred from the values; pass model=" in out.read_text(encoding="utf-8")
    open_fresh(page, site(out))
    assert "inferred from the values" in page.evaluate(
        "document.getElementById('kx-note').textContent"
    )
    edit(page, 0, "total", "lots")
    assert page.evaluate(f"document.querySelector('{check(0)} .cx-error').textContent").startswith(
        "refused: total takes a number"
    )
    page.click(f"{check(0)} button.cx-none")  # inferred types take none
    document = tmp_path / "c.json"
    document.write_text(json.dumps(page.evaluate("kxReview.corrections()")), encoding="utf-8")
    gold = kx.read_corrections(document, df)
    assert list(gold.columns) == [*Invoice.model_fields]  # text and id= columns are not fields
    assert gold.loc[0, "total"] is None and gold.loc[0, "vendor"] == "ACME Corp"


def test_big_integers_come_back_exact(page, site, tmp_path):
    """JavaScript holds integers exactly only up to 2**53: a confirmed value comes back from
    pred (the file was made from it), not from the page's rounded copy."""

    class Order(BaseModel):
        number: int
        vendor: str

    big = 2**60 + 1
    df = pd.DataFrame({"text": ["order"], "number": [big], "vendor": ["ACME"]})
    out = kx.review(df, tmp_path / "o.html", text_column="text", model=Order)
    open_fresh(page, site(out))
    page.click(f"{check(0)} button.cx-confirm")
    saved = page.evaluate("kxReview.corrections()")
    assert saved["rows"][0]["fields"]["number"]["value"] != big  # rounded in the browser
    document = tmp_path / "c.json"
    document.write_text(json.dumps(saved), encoding="utf-8")
    assert kx.read_corrections(document, df, model=Order).loc[0, "number"] == big


# -- the page's checks agree with the Python side -------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(["EUR", "USD", "2024-02-29", "2023-02-29", "2024-03-01T12:30:00Z", ""])
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["name", "qty", "price", "other"]), inner, max_size=3)
    ),
    max_leaves=8,
)
PATHS = ["vendor", "total", "currency", "date", "items", "items[]", "items[].qty", "note"]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.tuples(st.sampled_from(PATHS), JSON_VALUES), min_size=20, max_size=20))
def test_the_page_and_python_accept_the_same_values(page, tmp_path, cases):
    out = tmp_path / "inv.html"
    if not out.exists():
        kx.review(invoices(), out, text_column="text", model=Invoice)
        page.open(out)
    types = describe_model(Invoice, list(Invoice.model_fields))
    # JSON carries what JavaScript holds: a float with no fraction arrives as an integer.
    values = [json.loads(json.dumps(v)) for _, v in cases]
    script = json.dumps([[p, v] for (p, _), v in zip(cases, values, strict=True)])
    found = page.evaluate(f"{script}.map(c => kxReview.checkValue(c[1], c[0]) === null)")
    expected = [check_value(v, p, types) is None for (p, _), v in zip(cases, values, strict=True)]
    assert found == expected, [c for c, a, b in zip(cases, found, expected, strict=True) if a != b]


@pytest.mark.parametrize(
    ("path", "text", "value"),
    [
        ("total", "1234.5", 1234.5),
        ("total", " 12 ", 12),
        ("total", "-1e3", -1000),
        ("items[].qty", "3", 3),
        ("items[].qty", "3.0", 3),
        ("items[].price", "0.25", 0.25),
        ("currency", "USD", "USD"),
        ("date", "2024-02-29", "2024-02-29"),
        ("vendor", "12", "12"),
        ("note", "", ""),
        (
            "items",
            '[{"name": "Nut", "qty": 1, "price": null}]',
            [{"name": "Nut", "qty": 1, "price": None}],
        ),
    ],
)
def test_typed_text_is_read_by_the_field_type(page, tmp_path, path, text, value):
    out = tmp_path / "inv.html"
    kx.review(invoices(), out, text_column="text", model=Invoice)
    page.open(out)
    got = page.evaluate(f"kxReview.parse({json.dumps(text)}, {json.dumps(path)})")
    assert got == {"value": value}
