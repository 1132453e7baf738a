"""``kx.review`` without a browser: the embedded data, its escaping, reading spans back from files,
and the ``kimi-extract review`` command (the page in a real browser: test_review_browser.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import kimi_extract as kx
from kimi_extract.cli import main as cli_main
from kimi_extract.exceptions import InputError
from kimi_extract.records import Span
from kimi_extract.table.export import write_table
from kimi_extract.table.review import script_json, spans_of, utf16_offsets

HOSTILE = "</script><script>window.__pwned=1</script><!-- \u2028 \u2029 & <b>"


def span(text: str, value: str, path: str, kind: str = "exact", **extra: Any) -> dict[str, Any]:
    start = text.find(value)
    grounded = start >= 0 and kind != "none"
    return Span(
        path=path,
        value=value,
        start=start if grounded else None,
        end=start + len(value) if grounded else None,
        kind=kind if grounded else "none",
        score=100.0 if grounded else 0.0,
        **extra,
    ).to_dict()


def frame(texts: list[str], values: list[list[tuple[str, str]]]) -> pd.DataFrame:
    """An output frame: a text column, one field column, kx_spans and the accounting columns."""
    spans = [[span(t, v, p) for p, v in leaves] for t, leaves in zip(texts, values, strict=True)]
    n = len(texts)
    return pd.DataFrame(
        {
            "text": texts,
            "vendor": [leaves[0][1] if leaves else None for leaves in values],
            "kx_spans": spans,
            "kx_grounded": [1.0] * n,
            "kx_prompt_tokens": [120] * n,
            "kx_cached_tokens": [0] * n,
            "kx_completion_tokens": [15] * n,
            "kx_reasoning_tokens": [0] * n,
            "kx_cost": [0.0004] * n,
            "kx_error": [None] * n,
        }
    )


def make_invoice_pdf(tmp_path: Path) -> Path:
    """Two PDF pages with text layers; the vendor line is on page 2."""
    pytest.importorskip("pypdfium2")
    from ..media.test_documents import samples

    path = tmp_path / "invoice.pdf"
    samples.write_pdf(
        path,
        [
            [(72, 700, 14, "Cover page"), (72, 660, 11, "Nothing to see here.")],
            [(72, 700, 16, "INVOICE 0042"), (72, 650, 11, "Vendor: Bolt Supplies Ltd")],
        ],
    )
    return path


@pytest.fixture
def invoice_pdf(tmp_path: Path) -> Path:
    return make_invoice_pdf(tmp_path)


def pdf_span(path: Path, page: int, value: str, field: str) -> dict[str, Any]:
    """A grounded span on a PDF page: offsets into the page's text as the library reads it,
    boxes from pypdfium2's character boxes in PDF points from the top-left corner."""
    import pypdfium2

    from kimi_extract.media.documents import load_pages

    text = {p.number: p.text for p in load_pages(path, pdf_mode="text")[1]}[page]
    start = text.index(value)
    pdf = pypdfium2.PdfDocument(str(path))
    try:
        pdf_page = pdf[page - 1]
        height = pdf_page.get_size()[1]
        textpage = pdf_page.get_textpage()
        raw = textpage.get_text_range()
        first = raw.index(value)
        boxes = []
        for i in range(first, first + len(value)):
            left, bottom, right, top = textpage.get_charbox(i)
            boxes.append((left, height - top, right, height - bottom))
        textpage.close()
        pdf_page.close()
    finally:
        pdf.close()
    return {
        "path": field,
        "value": value,
        "start": start,
        "end": start + len(value),
        "kind": "exact",
        "score": 100.0,
        "page": page,
        "boxes": [list(b) for b in boxes],
        "quote": None,
    }


def page_data(path: Path) -> dict[str, Any]:
    """The JSON embedded in a review page."""
    page = path.read_text(encoding="utf-8")
    block = re.search(r'<script type="application/json" id="kx-data">(.*?)</script>', page, re.S)
    assert block is not None
    data: dict[str, Any] = json.loads(block.group(1))
    return data


def test_script_json_cannot_end_its_block_and_round_trips():
    text = script_json({"text": HOSTILE, HOSTILE: [HOSTILE]})
    assert not set(text) & {"<", ">", "&", "\u2028", "\u2029"}
    assert json.loads(text) == {"text": HOSTILE, HOSTILE: [HOSTILE]}


def test_a_lone_surrogate_is_escaped_not_fatal(tmp_path):
    df = frame(["ACME sells"], [[("vendor", "ACME")]])
    df["note"] = pd.Series(["bad \udc80 text"], dtype=object)
    data = page_data(kx.review(df, tmp_path / "r.html", text_column="text"))
    assert data["cards"][0]["fields"] == [["note", "bad \udc80 text"]]


def test_hostile_data_is_never_markup(tmp_path):
    df = frame([f"ACME {HOSTILE}"], [[("vendor", "ACME")]])
    df.index = pd.Index([HOSTILE])
    df["kx_error"] = [HOSTILE]
    out = kx.review(df, tmp_path / "r.html", text_column="text", title=HOSTILE)
    page = out.read_text(encoding="utf-8")
    # Exactly the page's own two script blocks, and the data only inside the JSON one.
    assert page.count("<script") == 2 and page.count("</script>") == 2
    assert "window.__pwned" in page and "<b>" not in page
    assert page_data(out)["cards"][0]["error"] == HOSTILE


def test_the_page_is_self_contained(tmp_path):
    out = kx.review(frame(["ACME sells"], [[("vendor", "ACME")]]), tmp_path / "r.html")
    page = out.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page, re.I)
    assert "default-src 'none'" in page  # the CSP forbids any network access


def test_text_is_the_text_the_run_sent(tmp_path):
    """A template renders as the run rendered it, so offsets land on the same characters."""
    df = pd.DataFrame({"title": ["Order"], "body": ["ACME ships 4 cups"]})
    template = "Title: {title}\nBody: {body}"
    sent = template.format(title="Order", body="ACME ships 4 cups")
    spans = [span(sent, "ACME", "vendor"), span(sent, "4", "count")]
    df["kx_spans"] = pd.Series([spans], dtype=object)
    data = page_data(kx.review(df, tmp_path / "r.html", template=template))
    card = data["cards"][0]
    text = data["texts"][card["sections"][0]["text"]]
    assert text == sent
    assert [text[s["s"] : s["e"]] for s in card["spans"]] == ["ACME", "4"]
    with pytest.raises(InputError, match="nope"):
        kx.review(df, tmp_path / "r.html", text_column="nope")


def test_offsets_count_utf16_units_past_the_bmp():
    text = "😀 ACME 𠀋 Corp"
    start = text.index("Corp")
    assert utf16_offsets(text, [0, 2, start, start + 4]) == [0, 3, start + 2, start + 6]
    assert utf16_offsets("plain", [1, 3]) == [1, 3]


def test_offsets_outside_the_text_are_not_highlighted(tmp_path):
    df = frame(["short"], [[]])
    bad = {"path": "x", "value": "v", "start": 3, "end": 99, "kind": "exact"}
    df["kx_spans"] = pd.Series([[bad]], dtype=object)
    card = page_data(kx.review(df, tmp_path / "r.html", text_column="text"))["cards"][0]
    assert card["spans"][0]["s"] is None and card["spans"][0]["kind"] == "exact"


@pytest.mark.parametrize(
    "cell",
    [
        [Span("a", "x", 0, 1, "exact", 100.0)],
        np.array([Span("a", "x", 0, 1, "exact", 100.0).to_dict()], dtype=object),
        json.dumps([Span("a", "x", 0, 1, "exact", 100.0).to_dict()]),
    ],
)
def test_span_cells_as_objects_arrays_or_json_text(cell):
    assert spans_of(cell) == [Span("a", "x", 0, 1, "exact", 100.0).to_dict()]


def test_missing_span_cells_and_bad_ones():
    assert spans_of(None) == spans_of(float("nan")) == spans_of("") == []
    with pytest.raises(InputError, match="not JSON"):
        spans_of("[{")
    with pytest.raises(InputError):
        spans_of(42)


def test_other_columns_beside_the_spans_and_item_numbers(tmp_path):
    df = frame(["ACME a"], [[("vendor", "ACME")]]).assign(id=[7], kx_item=[2])
    card = page_data(kx.review(df, tmp_path / "r.html", text_column="text"))["cards"][0]
    # vendor is shown by its span, the text column by the source; id is another column
    assert card["fields"] == [["id", "7"]] and card["label"] == "0 · item 2"


def test_counts_errors_unsupported_and_cost(tmp_path):
    df = frame(["ACME a", "Bolt b", "Cog c"], [[("vendor", "ACME")], [], [("vendor", "Zed")]])
    df.at[1, "kx_error"] = "ValidationFailedError: row 1"
    data = page_data(kx.review(df, tmp_path / "r.html", text_column="text"))
    assert [c["error"] is not None for c in data["cards"]] == [False, True, False]
    assert [c["unsupported"] for c in data["cards"]] == [0, 0, 1]
    assert data["cards"][0]["usage"]["prompt"] == 120 and data["cards"][0]["cost"] == 0.0004
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "3 rows · 1 with errors · 1 unsupported value · $0.0012" in page


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl", ".csv"])
def test_cli_review_reads_spans_back_from_files(tmp_path, suffix, capsys):
    text = "发票 ACME 株式会社 total 42"
    df = frame([text], [[("vendor", "ACME 株式会社"), ("total", "42")]])
    source = tmp_path / f"out{suffix}"
    write_table(df, source)
    html = tmp_path / "review.html"
    assert cli_main(["review", str(source), "--html", str(html), "--text", "text"]) == 0
    card = page_data(html)["cards"][0]
    assert [(s["path"], s["s"], s["e"]) for s in card["spans"]] == [
        ("vendor", 3, 12),
        ("total", 19, 21),
    ]
    assert str(html) in capsys.readouterr().err


def test_document_spans_index_their_page_text(tmp_path):
    doc = tmp_path / "memo.txt"
    doc.write_text("Cover\fMemo from Bolt Supplies Ltd about cups", encoding="utf-8")
    page2 = "Memo from Bolt Supplies Ltd about cups"
    vendor = {**span(page2, "Bolt Supplies Ltd", "vendor"), "page": 2}
    df = pd.DataFrame({"kx_source": [str(doc)], "kx_page": [None], "kx_spans": [[vendor]]})
    data = page_data(kx.review(df, tmp_path / "r.html", documents_root=tmp_path))
    card = data["cards"][0]
    assert [s["page"] for s in card["sections"]] == [1, 2]
    (got,) = card["spans"]
    assert got["sec"] == 1 and data["texts"][1][got["s"] : got["e"]] == "Bolt Supplies Ltd"


def test_document_spans_into_the_joined_text_are_read_so(tmp_path, invoice_pdf):
    """Offsets into the document's text as one piece (pages joined by a blank line, as
    run_documents' text_column) are recognised: the exact spans read back there, not per page."""
    from kimi_extract.media.documents import load_pages

    joined = "\n\n".join(p.text for p in load_pages(invoice_pdf, pdf_mode="text")[1])
    vendor = pdf_span(invoice_pdf, 2, "Bolt Supplies Ltd", "vendor")
    start = joined.index("Bolt")
    vendor.update(start=start, end=start + len("Bolt Supplies Ltd"))
    df = pd.DataFrame({"kx_source": [str(invoice_pdf)], "kx_page": [None], "kx_spans": [[vendor]]})
    data = page_data(kx.review(df, tmp_path / "r.html", documents_root=tmp_path))
    card = data["cards"][0]
    assert [(s["page"], s["text"] is None, s["image"] is None) for s in card["sections"]] == [
        (None, False, True),  # the text as one piece
        (2, True, False),  # page 2's image, for the boxes
    ]
    (got,) = card["spans"]
    assert data["texts"][0][got["s"] : got["e"]] == "Bolt Supplies Ltd"
    assert got["bsec"] == 1 and len(got["boxes"]) == 1


def test_a_scanned_page_shows_its_image(tmp_path):
    pytest.importorskip("pypdfium2")
    from ..media.test_documents import SCAN, samples

    path = tmp_path / "scan.pdf"
    samples.write_pdf(path, [[(72, 700, 12, "Typed cover page with a text layer")], SCAN])
    df = pd.DataFrame({"kx_source": [str(path)], "kx_page": [None], "kx_spans": [None]})
    data = page_data(kx.review(df, tmp_path / "r.html", documents_root=tmp_path))
    sections = data["cards"][0]["sections"]
    assert [(s["page"], s["text"] is None, s["image"] is None) for s in sections] == [
        (1, False, True),
        (2, True, False),
    ]
    assert data["images"][0]["src"].startswith("data:image/png;base64,")


# -- kinds, labels, exploded frames, linear offsets ------------------------------------------------


def kinds_frame() -> tuple[pd.DataFrame, str]:
    """One row holding a span of every kind (and one this version does not know)."""
    text = "ACME Corp may redistribute Section 2.1 of the licence, said acme corp."
    spans = [
        span(text, "ACME Corp", "vendor"),
        {**span(text, "acme corp", "alias"), "kind": "normalized"},
        {**span(text, "Section 2.1", "section"), "value": "Section 2.2", "kind": "fuzzy"},
        {
            **span(text, "may redistribute", "right"),
            "value": "may not redistribute",
            "kind": "near",
            "score": 91.0,
            "diff": "negation: not",
        },
        {
            **span(text, "licence", "doc"),
            "value": "license",
            "kind": "near",
            "diff": [["license", "licence"], "spelling"],
        },
        {"path": "sentiment", "value": "positive", "kind": "inferred", "score": 0.0},
        {"path": "city", "value": "Paris", "kind": "none", "score": 0.0},
        {**span(text, "said", "verb"), "kind": "telepathic"},
    ]
    df = pd.DataFrame({"text": [text], "kx_spans": [spans], "kx_grounded": [0.5]})
    return df, text


def test_every_kind_gets_its_class_and_counts_per_value(tmp_path):
    df, _ = kinds_frame()
    data = page_data(kx.review(df, tmp_path / "r.html", text_column="text"))
    (card,) = data["cards"]
    assert [s["cls"] for s in card["spans"]] == [
        "verified",
        "verified",
        "fuzzy",
        "near",
        "near",
        "inferred",
        "none",
        "other",
    ]
    assert card["counts"] == {
        "verified": 2,
        "fuzzy": 1,
        "near": 2,
        "inferred": 1,
        "none": 1,
        "other": 1,
        "bad": 0,
    }
    assert card["unsupported"] == 3  # none and near: no evidence for the value
    # Near misses and unknown kinds are located (the closest text); inferred and none are not.
    assert [s["sec"] for s in card["spans"]] == [0, 0, 0, 0, 0, -1, -1, 0]
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "3 unsupported values · 2 near · 1 fuzzy · 1 inferred" in page


def test_diffs_given_as_text_or_pieces_are_kept_for_the_page(tmp_path):
    df, _ = kinds_frame()
    spans = page_data(kx.review(df, tmp_path / "r.html", text_column="text"))["cards"][0]["spans"]
    assert spans[3]["diff"] == [{"note": "negation: not"}]
    assert spans[4]["diff"] == [{"v": "license", "x": "licence"}, {"note": "spelling"}]
    assert spans[2]["diff"] is None  # the page computes a character diff


def test_cards_are_labelled_by_an_id_column_or_the_document(tmp_path):
    df = frame(["ACME a", "Bolt b"], [[("vendor", "ACME")], [("vendor", "Bolt")]])
    df["sku"] = ["SKU-1", None]
    cards = page_data(kx.review(df, tmp_path / "r.html", text_column="text", id="sku"))["cards"]
    assert [(c["label"], c["row"]) for c in cards] == [("SKU-1", "0"), ("1", "1")]
    with pytest.raises(InputError, match="id='nope'"):
        kx.review(df, tmp_path / "r.html", id="nope")
    docs = pd.DataFrame({"kx_source": ["/data/in/a.pdf", "/data/in/b.txt"], "kx_page": [3, None]})
    cards = page_data(kx.review(docs, tmp_path / "r.html", documents=False))["cards"]
    assert [c["label"] for c in cards] == ["a.pdf · page 3", "b.txt"]


def exploded_frame(tmp_path: Path) -> pd.DataFrame:
    """An exploded run_documents output: two documents, three and two item rows."""
    rows = []
    for name, items in (("a.txt", ["hinge", "panel", "screw"]), ("b.txt", ["nut", "bolt"])):
        text = "Order: " + ", ".join(f"{item} x {n + 1}" for n, item in enumerate(items))
        (tmp_path / name).write_text(text, encoding="utf-8")
        for n, item in enumerate(items):
            spans = [{**span(text, item, f"items[{n}].name"), "page": 1}]
            if n == 0:
                spans.insert(0, {"path": "currency", "value": "EUR", "kind": "none"})
            rows.append(
                {
                    "kx_source": str(tmp_path / name),
                    "kx_page": None,
                    "kx_item": n,
                    "name": item,
                    "qty": n + 1,
                    "kx_spans": spans,
                    "kx_cost": 0.001 if n == 0 else 0.0,
                    "kx_error": None,
                }
            )
    return pd.DataFrame(rows, index=[0, 0, 0, 1, 1])


def test_an_exploded_frame_is_one_card_per_document_with_its_items(tmp_path):
    df = exploded_frame(tmp_path)
    data = page_data(kx.review(df, tmp_path / "r.html", documents_root=tmp_path))
    assert len(data["cards"]) == 2 and len(data["texts"]) == 2  # each document's text once
    first, second = data["cards"]
    assert first["label"] == "a.txt · 3 items" and second["label"] == "b.txt · 2 items"
    assert [r["item"] for r in first["rows"]] == [0, 1, 2]
    # The item columns differ per item; the spans carry their item row.
    assert [r["fields"] for r in first["rows"]] == [[["qty", "1"]], [["qty", "2"]], [["qty", "3"]]]
    assert [(s["r"], s["path"]) for s in first["spans"]] == [
        (0, "currency"),
        (0, "items[0].name"),
        (1, "items[1].name"),
        (2, "items[2].name"),
    ]
    text = data["texts"][first["sections"][0]["text"]]
    assert [text[s["s"] : s["e"]] for s in first["spans"][1:]] == ["hinge", "panel", "screw"]
    assert first["cost"] == 0.001 and first["unsupported"] == 1
    # Read back from a file (the index is a column then), the same cards.
    table = tmp_path / "out.parquet"
    write_table(df, table)
    html = tmp_path / "cli.html"
    assert cli_main(["review", str(table), "--html", str(html)]) == 0
    assert [c["label"] for c in page_data(html)["cards"]] == [first["label"], second["label"]]


def test_offsets_are_converted_in_one_sweep_per_text(tmp_path, monkeypatch):
    """10,000 spans in one row: the text is scanned once for UTF-16 offsets, not once per span
    (a counter of the characters the converter is handed)."""
    from kimi_extract.table import review_cards

    pieces, spans, at = ["😀 order "], [], len("😀 order ")
    for n in range(10_000):
        value = f"v{n}"
        spans.append(
            {
                "path": f"items[{n}]",
                "value": value,
                "start": at + 1,
                "end": at + 1 + len(value),
                "kind": "exact",
            }
        )
        pieces.append(" " + value)
        at += 1 + len(value)
    text = "".join(pieces)
    scanned = []
    real = review_cards.utf16_offsets

    def counting(text: str, offsets: list[int]) -> list[int]:
        scanned.append(len(text))
        return real(text, offsets)

    monkeypatch.setattr(review_cards, "utf16_offsets", counting)
    df = pd.DataFrame({"text": [text], "kx_spans": [spans]})
    card = page_data(kx.review(df, tmp_path / "r.html", text_column="text"))["cards"][0]
    assert sum(scanned) <= 2 * len(text), sum(scanned)
    wide = text.encode("utf-16-le")
    for got, sent in zip(card["spans"], spans, strict=True):
        assert wide[2 * got["s"] : 2 * got["e"]].decode("utf-16-le") == sent["value"]


def test_utf16_offsets_in_any_order():
    text = "a😀b𠀋c"
    offsets = [5, 0, 3, 1, 2, 4]
    assert utf16_offsets(text, offsets) == [len(text[:o].encode("utf-16-le")) // 2 for o in offsets]
