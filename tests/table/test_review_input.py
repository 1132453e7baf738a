"""``kx.review`` on foreign, malformed and hostile tables (it writes a page, with what it could
not use counted on the cards, or raises a ``ConfigurationError`` naming the argument), and the
documents it may read again (only under ``documents_root``)."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kimi_extract as kx
from kimi_extract.cli import main as cli_main
from kimi_extract.exceptions import ConfigurationError, InputError
from kimi_extract.table.export import write_table

from .test_review import frame, page_data, span

TEXT = "Invoice from ACME Corp, total 42 EUR."


def one_row(spans: Any, **columns: Any) -> pd.DataFrame:
    df = pd.DataFrame({"text": [TEXT], **{k: [v] for k, v in columns.items()}})
    df["kx_spans"] = pd.Series([spans], dtype=object)
    return df


# -- the cases that crashed ----------------------------------------------------------------------


def test_infinite_and_fractional_offsets_are_flagged_not_fatal(tmp_path):
    good = span(TEXT, "ACME Corp", "vendor")
    spans = [
        good,
        {**good, "path": "a", "start": float("inf"), "end": float("inf")},
        {**good, "path": "b", "start": 1.5, "end": 4},
        {**good, "path": "c", "start": -3, "end": 2},
        {**good, "path": "d", "start": 5, "end": 9_999},
        {**good, "path": "e", "start": "x", "end": None},
    ]
    card = page_data(kx.review(one_row(spans), tmp_path / "r.html", text_column="text"))["cards"][0]
    assert [s["s"] is not None for s in card["spans"]] == [True, False, False, False, False, False]
    assert [bool(s["bad"]) for s in card["spans"]] == [False] + [True] * 5
    assert "offsets inf..inf unusable" in card["spans"][1]["bad"]
    assert "outside the text" in card["spans"][4]["bad"]
    assert card["counts"]["bad"] == 5


def test_records_that_are_not_records_are_skipped_and_counted(tmp_path):
    spans = [span(TEXT, "ACME Corp", "vendor"), 42, "text", None, [1, 2]]
    card = page_data(kx.review(one_row(spans), tmp_path / "r.html", text_column="text"))["cards"][0]
    assert [s["path"] for s in card["spans"]] == ["vendor"] and card["counts"]["bad"] == 4
    broken = one_row("[{not json")
    card = page_data(kx.review(broken, tmp_path / "r.html", text_column="text"))["cards"][0]
    assert card["spans"] == [] and card["counts"]["bad"] == 1 and "not JSON" in card["note"]


def test_malformed_boxes_are_skipped(tmp_path):
    from .test_review import make_invoice_pdf, pdf_span

    invoice_pdf = make_invoice_pdf(tmp_path)
    vendor = pdf_span(invoice_pdf, 2, "Bolt Supplies Ltd", "vendor")
    good_boxes = vendor["boxes"]
    vendor["boxes"] = [*good_boxes, [1, 2, 3], ["a", 1, 2, 3], [0, 0, float("inf"), 1], "box", None]
    other = {**vendor, "path": "x", "boxes": {"left": 1}}
    df = pd.DataFrame(
        {"kx_source": [str(invoice_pdf)], "kx_page": [2], "kx_spans": [[vendor, other]]}
    )
    card = page_data(kx.review(df, tmp_path / "r.html", documents_root=tmp_path))["cards"][0]
    first, second = card["spans"]
    assert len(first["boxes"]) == 1 and first["bad"] == "malformed boxes skipped"
    assert second["boxes"] == [] and second["bad"] == "malformed boxes skipped"
    assert first["s"] is not None  # the text highlight stays


def test_a_nul_in_the_source_and_surrogates_in_title_and_file_name(tmp_path):
    df = one_row([span(TEXT, "ACME Corp", "vendor")], kx_source="docs/a\0b.txt")
    out = kx.review(df, tmp_path / "r\udc80.html", text_column="text", title="t\ud800itle")
    page = out.read_text(encoding="utf-8")
    assert "<title>t\\ud800itle</title>" in page
    card = page_data(out)["cards"][0]
    assert "NUL" in card["note"] and card["spans"][0]["s"] is not None
    # The default title comes from the file name, surrogate and all.
    out = kx.review(df, tmp_path / "x\udc80.html", text_column="text")
    assert "<title>x\\udc80</title>" in out.read_text(encoding="utf-8")
    # A name the file system cannot take is a ConfigurationError naming path.
    with pytest.raises(ConfigurationError, match="path="):
        kx.review(df, tmp_path / "bad\ud800.html")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"title": 5},
        {"page_pixels": 0},
        {"max_images": 1.5},
        {"documents": "yes"},
        {"documents": True, "documents_root": 3},
        {"documents": True, "documents_root": "/no/such/dir"},
        {"id": ["sku"]},
    ],
)
def test_bad_arguments_are_configuration_errors_naming_them(tmp_path, kwargs):
    name = next(iter(kwargs)) if "documents_root" not in kwargs else "documents_root"
    with pytest.raises(ConfigurationError, match=name):
        kx.review(one_row([]), tmp_path / "r.html", **kwargs)
    with pytest.raises(ConfigurationError, match="path="):
        kx.review(one_row([]), 42)  # type: ignore[arg-type]


# -- the property: a page or a ConfigurationError, never anything else ----------------------------

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(st.characters(codec=None, exclude_categories=()), max_size=12)
)
JSONISH = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = ("path", "value", "start", "end", "kind", "score", "page", "boxes", "quote", "diff")
KINDS = st.sampled_from(["exact", "normalized", "fuzzy", "near", "quote", "inferred", "none", "?"])
SPAN_RECORD = st.fixed_dictionaries(
    {},
    optional={
        **{name: JSONISH for name in FIELDS},
        "start": st.integers(-5, 60) | JSONISH,
        "end": st.integers(-5, 60) | JSONISH,
        "kind": KINDS | JSONISH,
        "boxes": st.lists(st.lists(SCALARS, max_size=5), max_size=3) | JSONISH,
    },
)
SPAN_CELLS = (
    st.lists(SPAN_RECORD | JSONISH, max_size=6)
    | JSONISH
    | st.lists(SPAN_RECORD, max_size=4).map(lambda r: json.dumps(r, default=str))
    | st.lists(SPAN_RECORD, max_size=3).map(lambda r: np.array(r, dtype=object))
)
TITLES = st.none() | st.text(st.characters(codec=None, exclude_categories=())) | JSONISH


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cells=st.lists(SPAN_CELLS, min_size=1, max_size=3),
    sources=st.lists(JSONISH, min_size=3, max_size=3),
    pages=st.lists(JSONISH, min_size=3, max_size=3),
    items=st.lists(JSONISH | st.integers(0, 3), min_size=3, max_size=3),
    numbers=st.lists(JSONISH, min_size=3, max_size=3),
    title=TITLES,
)
def test_any_malformed_table_gives_a_page_or_a_configuration_error(
    cells, sources, pages, items, numbers, title
):
    n = len(cells)
    df = pd.DataFrame(
        {
            "text": [TEXT] * n,
            "kx_spans": pd.Series(cells, dtype=object),
            "kx_source": pd.Series(sources[:n], dtype=object),
            "kx_page": pd.Series(pages[:n], dtype=object),
            "kx_item": pd.Series(items[:n], dtype=object),
            "kx_cost": pd.Series(numbers[:n], dtype=object),
            "kx_grounded": pd.Series(numbers[::-1][:n], dtype=object),
            "kx_error": pd.Series(numbers[1:] + numbers[:1], dtype=object)[:n],
        }
    )
    with tempfile.TemporaryDirectory() as folder:
        try:
            out = kx.review(
                df, Path(folder, "r.html"), text_column="text", title=title, documents_root=folder
            )
        except ConfigurationError:
            assert title is not None and not isinstance(title, str)
            return
        page = out.read_text(encoding="utf-8")
    assert page.count("<script") == 2 and page.count("</script>") == 2
    data = page_data_text(page)
    assert len(data["cards"]) >= 1
    for card in data["cards"]:
        for s in card["spans"]:
            if s["s"] is not None:
                assert 0 <= s["s"] <= s["e"]


def page_data_text(page: str) -> dict[str, Any]:
    block = re.search(r'<script type="application/json" id="kx-data">(.*?)</script>', page, re.S)
    assert block is not None
    data: dict[str, Any] = json.loads(block.group(1))
    return data


# -- which documents are read ----------------------------------------------------------------------


def doc_frame(path: Path | str) -> pd.DataFrame:
    text = "Memo from Bolt Supplies Ltd"
    vendor = {**span(text, "Bolt Supplies Ltd", "vendor"), "page": 1}
    return pd.DataFrame({"kx_source": [str(path)], "kx_page": [None], "kx_spans": [[vendor]]})


@pytest.fixture
def outside(tmp_path: Path) -> tuple[Path, Path]:
    """(a root folder, a document beside it, outside the root)."""
    root = tmp_path / "root"
    root.mkdir()
    doc = tmp_path / "private.txt"
    doc.write_text("Memo from Bolt Supplies Ltd", encoding="utf-8")
    return root, doc


def test_documents_outside_the_root_are_not_read(outside):
    root, doc = outside
    out = kx.review(doc_frame(doc), root / "r.html", documents_root=root)
    card = page_data(out)["cards"][0]
    assert card["sections"] == [] and "outside the documents root" in card["note"]
    assert "1 document was not read again: outside the documents root" in out.read_text()
    # A link inside the root to the file outside is not followed.
    (root / "link.txt").symlink_to(doc)
    card = page_data(kx.review(doc_frame(root / "link.txt"), root / "r.html", documents_root=root))
    assert card["cards"][0]["sections"] == []
    # Named explicitly, it is read.
    card = page_data(kx.review(doc_frame(doc), root / "r.html", documents_root=doc.parent))
    assert len(card["cards"][0]["sections"]) == 1
    assert page_data(kx.review(doc_frame(doc), root / "r.html", documents_root="/"))["texts"]


def test_the_default_root_is_the_current_directory(outside, monkeypatch):
    root, doc = outside
    monkeypatch.chdir(root)
    assert page_data(kx.review(doc_frame(doc), "r.html"))["texts"] == []
    monkeypatch.chdir(doc.parent)
    assert page_data(kx.review(doc_frame(doc), "r.html"))["texts"] == [doc.read_text()]
    assert page_data(kx.review(doc_frame("private.txt"), "r.html"))["texts"] == [doc.read_text()]


def test_devices_and_folders_are_not_read(tmp_path):
    (tmp_path / "folder.txt").mkdir()
    note = page_data(
        kx.review(doc_frame(tmp_path / "folder.txt"), tmp_path / "r.html", documents_root=tmp_path)
    )["cards"][0]["note"]
    assert "not a regular file" in note
    if os.path.exists("/dev/zero"):
        card = page_data(
            kx.review(doc_frame("/dev/zero.txt"), tmp_path / "r.html", documents_root="/")
        )["cards"][0]
        assert card["sections"] == [] and card["note"]


def test_cli_reads_documents_beside_the_table_only(outside, monkeypatch, capsys):
    root, doc = outside
    inside = root / "memo.txt"
    inside.write_text("Memo from Bolt Supplies Ltd", encoding="utf-8")
    table = root / "out.jsonl"
    write_table(pd.concat([doc_frame(inside), doc_frame(doc)], ignore_index=True), table)
    monkeypatch.chdir(doc.parent)  # the current directory holds both: the table's decides
    html = root / "r.html"
    assert cli_main(["review", str(table), "--html", str(html)]) == 0
    first, second = page_data(html)["cards"]
    assert len(first["sections"]) == 1 and second["sections"] == []
    assert cli_main(["review", str(table), "--html", str(html), "--documents-root", "/"]) == 0
    assert all(card["sections"] for card in page_data(html)["cards"])
    assert cli_main(["review", str(table), "--html", str(html), "--documents-root", "/nope"]) == 2
    assert "documents_root" in capsys.readouterr().err


def test_cli_id_labels_the_cards(tmp_path):
    df = frame(["ACME a", "Bolt b"], [[("vendor", "ACME")], [("vendor", "Bolt")]])
    df["sku"] = ["SKU-1", "SKU-2"]
    table = tmp_path / "out.csv"
    write_table(df, table)
    html = tmp_path / "r.html"
    assert (
        cli_main(["review", str(table), "--html", str(html), "--text", "text", "--id", "sku"]) == 0
    )
    assert [c["label"] for c in page_data(html)["cards"]] == ["SKU-1", "SKU-2"]
    assert cli_main(["review", str(table), "--html", str(html), "--id", "nope"]) == 2


def test_spans_of_stays_strict():
    from kimi_extract.table.review import spans_of

    with pytest.raises(InputError):
        spans_of([1])
