"""Generated long documents with their answer keys: 100-page PDFs, 200k-character HTML and Markdown.

Each document is an invoice: the vendor and invoice number on the first page, 500+ line items in
tables that run across pages (the header row only where a table starts), every fifth item with a
second line (a note) that may fall on the next page, a "Subtotal carried forward" line on every
page or section (a look-alike of the total), and the total on the last page. The answer key is
located (``kimi_extract.simulator.recall``): each item carries its text (``"@at"``), the
vendor and the total theirs, and the subtotals are the total's decoys.

    doc = make_pdf(folder, seed=1)      # Document(path, key, items, text)
"""

from __future__ import annotations

import importlib.util
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

HERE = Path(__file__).resolve().parent
_WORDS = (
    "brass hinge oak panel steel bracket walnut shelf copper pipe ceramic tile glass pane "
    "rubber seal nylon strap maple board pine beam zinc bolt aluminium rail cotton rope "
    "linen cloth leather strap vinyl sheet granite slab marble step bamboo pole"
).split()
_PROSE = (
    "The goods listed below were delivered in accordance with the framework agreement. "
    "Quantities are in units unless stated otherwise, and prices are net of any discount. "
    "Items marked with a note were substituted with the customer's written consent. "
)


class LineItem(BaseModel):
    """One line item of the invoice."""

    sku: str = Field(description="The item code, e.g. AB-01234")
    description: str = Field(description="The item's description as printed")
    quantity: int | None = Field(description="Units ordered")
    amount: float | None = Field(description="The line's amount in EUR")


class Invoice(BaseModel):
    """An invoice: its header, every line item, and the amount due."""

    vendor: str | None = Field(description="Who issued the invoice")
    invoice_number: str | None = Field(description="The invoice number")
    total: float | None = Field(description="The total amount due in EUR (not a subtotal)")
    items: list[LineItem] = Field(description="Every line item, in order")


INSTRUCTIONS = (
    "Extract the invoice: its vendor, number and total due, and every line item in order."
)


@dataclass
class Document:
    """A generated document: where it is, its located answer key, and its items."""

    path: Path
    key: dict[str, Any]
    items: list[dict[str, Any]]
    total: float
    #: The text the library reads from it (a PDF's text layer, an HTML page's visible text).
    text: str = ""


def _items(rng: random.Random, count: int, prefix: str) -> list[dict[str, Any]]:
    out = []
    for n in range(count):
        words = rng.sample(_WORDS, 3)
        quantity = rng.randint(1, 40)
        amount = round(quantity * rng.uniform(0.5, 90), 2)
        item = {
            "sku": f"{prefix}-{n:05d}",
            "description": " ".join(words),
            "quantity": quantity,
            "amount": amount,
            "note": f"note: substitute for {rng.choice(_WORDS)} {rng.choice(_WORDS)}"
            if n % 5 == 4
            else None,
        }
        out.append(item)
    return out


def _key(
    doc_items: list[dict[str, Any]],
    vendor: str,
    number: str,
    total: float,
    texts: dict[str, str],
    decoys: list[tuple[float, str]],
) -> dict[str, Any]:
    return {
        "vendor": vendor,
        "invoice_number": number,
        "total": total,
        "items": [
            {k: item[k] for k in ("sku", "description", "quantity", "amount")}
            | {"@at": item["@at"]}
            for item in doc_items
        ],
        "@at": texts,
        "@decoys": {"total": [[value, text] for value, text in decoys]},
    }


def make_pdf(folder: Path, *, seed: int = 1, pages: int = 100, per_page: int = 6) -> Document:
    """A ``pages``-page PDF with text layers: ``per_page`` items a page (module docstring).

    A page starts with the note of the page before's last item when it has one (the item runs
    across the page break), then "Brought forward" (the running subtotal: a look-alike of the
    total), then its rows; the header row is on the first page only."""
    samples = _samples()
    rng = random.Random(seed)
    items = _items(rng, pages * per_page, f"P{seed}")
    vendor, number = f"Northwind Supply {seed} GmbH", f"INV-{seed:03d}-2026"
    page_items: list[list[Any]] = []
    decoys: list[tuple[float, str]] = []
    running = 0.0
    carry: str | None = None
    for page in range(pages):
        lines: list[Any] = []
        put = _writer(lines)

        if page == 0:
            put(f"Invoice {number}", 14)
            put(f"Vendor: {vendor}", 11)
            put(f"Invoice number: {number}", 11)
            put("SKU Description Quantity Amount", 10)
        if carry is not None:
            put(carry)  # the note of the last item of the page before
            carry = None
        if page:
            text = f"Brought forward: {running:.2f}"
            put(text)
            decoys.append((round(running, 2), text))
        last = items[(page + 1) * per_page - 1]
        for item in items[page * per_page : (page + 1) * per_page]:
            row = f"{item['sku']} {item['description']} {item['quantity']} {item['amount']:.2f}"
            put(row)
            item["@at"] = row
            running += item["amount"]
            if item["note"]:
                note = f"({item['note']})"
                item["@at"] = f"{row}\n{note}"
                if item is last and page + 1 < pages:
                    carry = note  # the item's second line is on the next page
                else:
                    put(note)
        page_items.append(lines)
    total = round(running, 2)
    total_text = f"Total due: {total:.2f} EUR"
    page_items[-1].append((50, 80, 11, total_text))
    path = folder / f"invoice-{seed}.pdf"
    samples.write_pdf(path, page_items)
    texts = {"vendor": f"Vendor: {vendor}", "invoice_number": f"Invoice number: {number}"}
    texts["total"] = total_text
    key = _key(items, vendor, number, total, texts, decoys)
    return Document(path, key, items, total)


def _writer(lines: list[Any]) -> Any:
    """``put(text, size=9)``: a line of text below the previous one on a PDF page."""
    y = [760.0]

    def put(text: str, size: float = 9) -> None:
        lines.append((50, y[0], size, text))
        y[0] -= 13

    return put


def _sections(
    rng: random.Random, items: list[dict[str, Any]], target_chars: int
) -> list[list[dict[str, Any]]]:
    """Items cut into sections of 8-30 items, enough of them to fill ``target_chars``."""
    sections = []
    at = 0
    while at < len(items):
        size = rng.randint(8, 30)
        sections.append(items[at : at + size])
        at += size
    return sections


def _make_markdown(
    folder: Path, *, extra: int = 0, seed: int = 2, chars: int = 200_000
) -> Document:
    """A Markdown report of about ``chars`` characters: sections of prose and pipe tables."""
    rng = random.Random(seed)
    items = _items(rng, 600, f"M{seed}")
    vendor, number = f"Contoso Trading {seed} Ltd", f"MD-{seed:03d}"
    parts = [f"# Invoice {number}", "", f"Vendor: {vendor}", f"Invoice number: {number}", ""]
    decoys = []
    running = 0.0
    sections = _sections(rng, items, chars)
    rows_chars = sum(
        60 + len(i["description"]) + (len(i["note"]) + 14 if i["note"] else 0) for i in items
    )
    prose_each = max(0, (chars - rows_chars) // max(1, len(sections)) + extra)
    for number_, section in enumerate(sections, start=1):
        parts += [f"## Delivery {number_}", "", _filler(rng, prose_each), ""]
        parts += ["| SKU | Description | Quantity | Amount |", "|---|---|---|---|"]
        for item in section:
            cells = (item["sku"], item["description"], item["quantity"], f"{item['amount']:.2f}")
            row = "| " + " | ".join(str(c) for c in cells) + " |"
            item["@at"] = row
            parts.append(row)
            if item["note"]:
                note = f"| | ({item['note']}) | | |"
                item["@at"] = f"{row}\n{note}"
                parts.append(note)
            running += item["amount"]
        subtotal = round(running, 2)
        text = f"Subtotal carried forward: {subtotal:.2f}"
        parts += ["", text, ""]
        decoys.append((subtotal, text))
    total = round(running, 2)
    total_text = f"**Total due: {total:.2f} EUR**"
    parts += [total_text, ""]
    path = folder / f"report-{seed}.md"
    path.write_text("\n".join(parts), encoding="utf-8")
    texts = {
        "vendor": f"Vendor: {vendor}",
        "invoice_number": f"Invoice number: {number}",
        "total": total_text,
    }
    return Document(path, _key(items, vendor, number, total, texts, decoys[:-1]), items, total)


def _make_html(folder: Path, *, extra: int = 0, seed: int = 3, chars: int = 200_000) -> Document:
    """An HTML report of about ``chars`` characters of visible text: prose and tables."""
    from kimi_extract.media.documents import html_to_text

    rng = random.Random(seed)
    items = _items(rng, 600, f"H{seed}")
    vendor, number = f"Fabrikam Goods {seed} SA", f"HT-{seed:03d}"
    parts = [
        "<html><body>",
        f"<h1>Invoice {number}</h1>",
        f"<p>Vendor: {vendor}</p>",
        f"<p>Invoice number: {number}</p>",
    ]
    decoys = []
    running = 0.0
    sections = _sections(rng, items, chars)
    rows_chars = sum(
        40 + len(i["description"]) + (len(i["note"]) + 8 if i["note"] else 0) for i in items
    )
    prose_each = max(0, (chars - rows_chars) // max(1, len(sections)) + extra)
    for number_, section in enumerate(sections, start=1):
        parts += [f"<h2>Delivery {number_}</h2>", f"<p>{_filler(rng, prose_each)}</p>", "<table>"]
        parts.append("<tr><th>SKU</th><th>Description</th><th>Quantity</th><th>Amount</th></tr>")
        for item in section:
            cells = [
                item["sku"],
                item["description"],
                str(item["quantity"]),
                f"{item['amount']:.2f}",
            ]
            rows = ["<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"]
            if item["note"]:
                rows.append(f"<tr><td></td><td>({item['note']})</td><td></td><td></td></tr>")
            parts += rows
            # the item's text as the library reads the page (``html_to_text``)
            item["@at"] = html_to_text("<table>" + "".join(rows) + "</table>")
            running += item["amount"]
        parts.append("</table>")
        subtotal = round(running, 2)
        text = f"Subtotal carried forward: {subtotal:.2f}"
        parts.append(f"<p>{text}</p>")
        decoys.append((subtotal, text))
    total = round(running, 2)
    total_text = f"Total due: {total:.2f} EUR"
    parts += [f"<p><b>{total_text}</b></p>", "</body></html>"]
    path = folder / f"report-{seed}.html"
    source = "\n".join(parts)
    path.write_text(source, encoding="utf-8")
    texts = {
        "vendor": f"Vendor: {vendor}",
        "invoice_number": f"Invoice number: {number}",
        "total": total_text,
    }
    document = Document(path, _key(items, vendor, number, total, texts, decoys[:-1]), items, total)
    document.text = html_to_text(source)
    return document


def make_markdown(folder: Path, *, seed: int = 2, chars: int = 200_000) -> Document:
    """A Markdown report of at least ``chars`` characters: sections of prose and pipe tables."""
    return _at_least(_make_markdown, folder, seed, chars)


def make_html(folder: Path, *, seed: int = 3, chars: int = 200_000) -> Document:
    """An HTML report of at least ``chars`` characters of visible text: prose and tables."""
    return _at_least(_make_html, folder, seed, chars)


def _at_least(make: Any, folder: Path, seed: int, chars: int) -> Document:
    """``make`` with more prose per section until the document's text reaches ``chars``."""
    from kimi_extract.media.documents import load_pages

    extra = 0
    for _ in range(4):
        document = make(folder, seed=seed, chars=chars, extra=extra)
        _, pages = load_pages(document.path)
        length = sum(len(p.text) for p in pages)
        if length >= chars:
            return document
        extra += (chars - length) // 20 + 50
    return document


def _filler(rng: random.Random, chars: int) -> str:
    """About ``chars`` characters of prose (no numbers, so nothing looks like a table row)."""
    out = []
    size = 0
    while size < chars:
        sentence = rng.choice(_PROSE.split(". ")).strip().rstrip(".") + "."
        out.append(sentence)
        size += len(sentence) + 1
    return " ".join(out)


def _samples() -> Any:
    spec = importlib.util.spec_from_file_location(
        "make_samples", HERE.parent / "examples" / "make_samples.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
