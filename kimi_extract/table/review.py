"""``review(df)``: one static HTML page to check an extraction against its sources.

One card per row (or document, or page): the source text with every grounded value highlighted
(``kx_spans``; hover a highlight for its field, click it to select the field's row), the fields
table with unsupported values (match kind ``"none"``) flagged, ``kx_error``, tokens and cost; for
PDF pages, the page image with boxes over the evidence. The page is one self-contained file: no
network (a Content-Security-Policy forbids it), no external assets, the data embedded as JSON.

Where the source text comes from (span offsets are Python indices into the exact text that was
sent, so the page must be given that text):

- rows of ``Extractor.run``: pass the same ``text_column=`` (a column or a list of them) or
  ``template=`` as the run: the text is rendered exactly as the run rendered it;
- ``run_documents`` outputs (a ``kx_source`` column): the documents are read again (``documents``,
  default on when the column exists). A span carrying a ``page`` is highlighted in that page's
  text (``media.documents.load_pages`` with the text layer, as sent); when more exact spans read
  back their value from the document's text as one piece (its pages joined by a blank line, as
  ``run_documents(text_column=)`` writes it, or the given ``text_column``), offsets are read so.
  PDF pages holding evidence, and pages without a text layer (scans), are rendered (pypdfium2)
  and embedded as PNG data URLs, with the spans' ``boxes`` drawn over them: ``(left, top, right,
  bottom)`` in PDF points from the page's top-left corner. A document that cannot be read falls
  back to ``text_column`` when given, and its card says why.

Without a source text the cards show the fields, errors and accounting only. Offsets are
converted to UTF-16 code units for the browser (characters beyond U+FFFF count twice there).
Every value taken from the data is inserted as text, never as markup.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..exceptions import InputError, MediaError, install_hint
from ..media.documents import load_pages
from ..media.formats import png_bytes
from ..records import is_missing
from ..run.inputs import TextSpec
from . import columns as kx
from .review_page import CSS, SCRIPT, fill

SPANS, GROUNDED = kx.SPANS, kx.GROUNDED
#: Rendered page images fit this many pixels (about 900 x 1165 for a US-letter page).
DEFAULT_PAGE_PIXELS = 1_000_000
#: At most this many page images are embedded (each is tens of kB); later pages show text only.
DEFAULT_MAX_IMAGES = 200
#: A value longer than this is cut in the fields table (the full text stays in the source).
MAX_VALUE_CHARS = 2_000
MAX_COLUMNS = 60


def review(
    df: pd.DataFrame,
    path: str | os.PathLike[str] = "review.html",
    *,
    text_column: str | Sequence[str] | None = None,
    template: str | None = None,
    documents: bool | None = None,
    title: str | None = None,
    page_pixels: int = DEFAULT_PAGE_PIXELS,
    max_images: int = DEFAULT_MAX_IMAGES,
) -> Path:
    """Write a review page for an extraction output ``df`` to ``path``; returns the path.

    ``text_column`` / ``template``: how each row's source text was made (as passed to
    ``Extractor.run``; for ``run_documents`` the ``text_column=`` it wrote). ``documents``: read
    the files named in ``kx_source`` again for page texts and PDF page images (default: when the
    frame has that column). ``page_pixels``: size of rendered pages; ``max_images``: how many
    page images at most are embedded. Raises ``InputError`` for a text column or template field
    the frame does not have.
    """
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"review() takes the DataFrame an extraction returned, got {type(df)}")
    spec: TextSpec | None = None
    if text_column is not None or template is not None:
        spec = TextSpec.build(
            text=text_column, template=template, available=[str(c) for c in df.columns]
        )
    if documents is None:
        documents = kx.SOURCE in df.columns
    builder = _Builder(spec, documents, page_pixels, max_images)
    records = df.to_dict("records")
    for label, record in zip(df.index, records, strict=True):
        builder.add(label, {str(k): v for k, v in record.items()})
    target = Path(path)
    target.write_text(builder.page(title or target.stem, len(df)), encoding="utf-8")
    return target


# -- spans -----------------------------------------------------------------------------------------


def spans_of(cell: Any) -> list[dict[str, Any]]:
    """The span records of one ``kx_spans`` cell: a list of dicts (or ``Span`` objects), or the
    JSON text a .csv / .parquet file stores; missing -> []. ``InputError`` for anything else."""
    if cell is None or (isinstance(cell, float) and math.isnan(cell)):
        return []
    if isinstance(cell, str):
        if not cell.strip():
            return []
        try:
            cell = json.loads(cell)
        except json.JSONDecodeError as exc:
            raise InputError(f"{SPANS} holds text that is not JSON: {exc}") from None
    if hasattr(cell, "tolist"):  # a numpy array (pyarrow list cells)
        cell = cell.tolist()
    if not isinstance(cell, list | tuple):
        raise InputError(f"{SPANS} cells must be lists of span records, got {type(cell).__name__}")
    spans = []
    for item in cell:
        if hasattr(item, "to_dict"):
            item = item.to_dict()
        if not isinstance(item, Mapping):
            raise InputError(f"{SPANS} holds a {type(item).__name__}, not a span record")
        spans.append(dict(item))
    return spans


def _verified(spans: list[dict[str, Any]], text_of: Any) -> int:
    """How many exact spans read back their value from ``text_of(page)``."""
    count = 0
    for span in spans:
        start, end = _int_or_none(span.get("start")), _int_or_none(span.get("end"))
        if span.get("kind") != "exact" or start is None or end is None:
            continue
        text = text_of(_int_or_none(span.get("page")))
        count += text is not None and text[start:end] == str(span.get("value"))
    return count


def _int_or_none(value: Any) -> int | None:
    if is_missing(value):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _float_or_none(value: Any) -> float | None:
    if is_missing(value):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) or math.isinf(number) else number


def _text(value: Any, limit: int = MAX_VALUE_CHARS) -> str:
    if isinstance(value, str):
        text = value
    elif hasattr(value, "tolist"):
        text = json.dumps(value.tolist(), ensure_ascii=False, default=str)
    elif isinstance(value, dict | list | tuple):
        text = json.dumps(value, ensure_ascii=False, default=str)
    else:
        text = str(value)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text):,} characters)"


def utf16_offsets(text: str, offsets: Sequence[int]) -> list[int]:
    """Python string indices -> JavaScript (UTF-16) indices into the same text."""
    if not text or max(text) <= "\uffff":
        return list(offsets)
    wide = [0]
    for char in text:
        wide.append(wide[-1] + (char > "\uffff"))
    return [offset + wide[min(offset, len(text))] for offset in offsets]


def merge_boxes(boxes: Sequence[Sequence[float]]) -> list[list[float]]:
    """Character boxes -> one box per run of characters on the same line (fewer elements)."""
    merged: list[list[float]] = []
    for box in boxes:
        left, top, right, bottom = (float(v) for v in box)
        if right <= left or bottom <= top:
            continue  # no area (a generated character): nothing to draw
        if merged:
            last = merged[-1]
            # Same line: the vertical extents overlap by half the shorter one (glyph boxes are
            # tight: "o" is lower than "B", a space is a sliver on the baseline).
            overlap = min(bottom, last[3]) - max(top, last[1])
            same_line = overlap >= 0.5 * min(bottom - top, last[3] - last[1])
            height = max(last[3] - last[1], bottom - top)
            if same_line and -height <= left - last[2] <= height:
                last[0], last[1] = min(last[0], left), min(last[1], top)
                last[2], last[3] = max(last[2], right), max(last[3], bottom)
                continue
        merged.append([left, top, right, bottom])
    return merged


# -- documents -------------------------------------------------------------------------------------


@dataclass
class _Document:
    """A document read again: its page texts, and its rendered pages (lazily, by number)."""

    path: Path
    texts: dict[int, str] = field(default_factory=dict)
    images: dict[int, int | None] = field(default_factory=dict)  # page -> index in images
    sizes: dict[int, tuple[float, float]] = field(default_factory=dict)  # page -> points (w, h)
    error: str | None = None


def _render_pdf_pages(
    path: Path, numbers: Sequence[int], pixels: int
) -> dict[int, tuple[bytes, int, int, float, float]]:
    """page -> (PNG, width px, height px, width pt, height pt) for the given 1-based pages."""
    try:
        import pypdfium2
    except ImportError:
        raise MediaError(f"page images need pypdfium2: {install_hint('pdf')}") from None
    out = {}
    pdf = pypdfium2.PdfDocument(str(path))
    try:
        for number in numbers:
            if not 1 <= number <= len(pdf):
                continue
            page = pdf[number - 1]
            try:
                width_pt, height_pt = page.get_size()
                scale = min(200 / 72, math.sqrt(pixels / (width_pt * height_pt)))
                bitmap = page.render(scale=scale, rev_byteorder=True)
                try:
                    png = png_bytes(
                        bitmap.buffer,
                        bitmap.width,
                        bitmap.height,
                        channels=bitmap.n_channels,
                        stride=bitmap.stride,
                    )
                    out[number] = (png, bitmap.width, bitmap.height, width_pt, height_pt)
                finally:
                    bitmap.close()
            finally:
                page.close()
    finally:
        pdf.close()
    return out


# -- the page --------------------------------------------------------------------------------------


class _Builder:
    """Collects the cards; texts and page images are stored once and referenced by index."""

    def __init__(
        self, spec: TextSpec | None, documents: bool, page_pixels: int, max_images: int
    ) -> None:
        self.spec = spec
        self.documents = documents
        self.page_pixels = page_pixels
        self.max_images = max_images
        self.cards: list[dict[str, Any]] = []
        self.texts: list[str] = []
        self.text_ids: dict[str, int] = {}
        self.images: list[dict[str, Any]] = []
        self.loaded: dict[str, _Document] = {}
        self.errors = self.unsupported = 0
        self.cost = 0.0

    def _text_id(self, text: str) -> int:
        found = self.text_ids.get(text)
        if found is None:
            found = self.text_ids[text] = len(self.texts)
            self.texts.append(text)
        return found

    def _document(self, source: str) -> _Document:
        document = self.loaded.get(source)
        if document is None:
            document = self.loaded[source] = _Document(Path(source))
            try:
                _, pages = load_pages(document.path, pdf_mode="text")
                document.texts = {p.number: p.text for p in pages}
            except MediaError as exc:
                document.error = str(exc)
        return document

    def _page_image(self, document: _Document, number: int) -> int | None:
        if number in document.images:
            return document.images[number]
        document.images[number] = None
        if document.path.suffix.lower() != ".pdf" or len(self.images) >= self.max_images:
            return None
        try:
            rendered = _render_pdf_pages(document.path, [number], self.page_pixels)
        except Exception:  # a page that will not render shows its text only
            return None
        if number in rendered:
            png, width, height, width_pt, height_pt = rendered[number]
            document.sizes[number] = (width_pt, height_pt)
            src = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
            document.images[number] = len(self.images)
            self.images.append({"src": src, "w": width, "h": height})
        return document.images[number]

    def add(self, label: Any, record: dict[str, Any]) -> None:
        spans = spans_of(record.get(SPANS))
        source = record.get(kx.SOURCE)
        source = None if is_missing(source) else str(source)
        page = _int_or_none(record.get(kx.PAGE))
        note: str | None = None
        page_texts: dict[int, str] = {}
        document = self._document(source) if source and self.documents else None
        if document is not None and document.error is None:
            numbers = [page] if page is not None else sorted(document.texts)
            page_texts = {n: document.texts[n] for n in numbers if n in document.texts}
        elif document is not None:
            note = document.error
        text: str | None = None
        if self.spec is not None:
            try:
                text = self.spec.render(record)
            except InputError as exc:
                note = str(exc)
        # Which text the offsets index: a page's text (spans carry their page), or one text (the
        # row's, or a document's pages joined as run_documents' text_column). For a document
        # the reading under which more exact spans read back their value wins (pages on a tie).
        by_page = bool(page_texts)
        if by_page:
            flat = text if text is not None else "\n\n".join(t for t in page_texts.values() if t)
            if _verified(spans, lambda _: flat) > _verified(spans, page_texts.get):
                by_page, text = False, flat
        sections: list[dict[str, Any]] = []
        section_of_page: dict[int, int] = {}
        if by_page:
            for number, page_text in page_texts.items():
                section_of_page[number] = len(sections)
                # A page without a text layer (a scan) was sent as an image: show that instead.
                scan = document is not None and not page_text.strip()
                image = self._page_image(document, number) if document and scan else None
                text_id = self._text_id(page_text) if page_text.strip() else None
                sections.append({"page": number, "text": text_id, "image": image})
        plain: int | None = None
        if not by_page and text is not None:
            plain = len(sections)
            sections.append({"page": None, "text": self._text_id(text), "image": None})
        out_spans = []
        for number, span in enumerate(spans):
            out = self._span(number, span, sections, section_of_page, plain, by_page, document)
            out_spans.append(out)
        error = record.get(kx.ERROR)
        error = None if is_missing(error) else str(error)
        if error is not None and note:
            error = f"{error}\n(review: {note})"
        elif note:
            error = f"(review: {note})"
        unsupported = sum(1 for s in out_spans if s["kind"] == "none")
        cost = _float_or_none(record.get(kx.COST))
        grounded = _float_or_none(record.get(GROUNDED))
        self.errors += error is not None and not error.startswith("(review")
        self.unsupported += unsupported > 0
        self.cost += cost or 0.0
        # The other columns (input columns, fields without leaves): those the spans do not show.
        hidden = {SPANS, *(self.spec.columns if self.spec else ())}
        hidden |= {re.split(r"[.\[]", str(s.get("path", "")))[0] for s in spans}
        fields = [
            [name, _text(value)]
            for name, value in record.items()
            if not name.startswith(kx.RESERVED_PREFIX) and name not in hidden
        ][:MAX_COLUMNS]
        item = _int_or_none(record.get(kx.ITEM))
        title = _text(label, 200) + (f" · item {item}" if item is not None else "")
        self.cards.append(
            {
                "label": title,
                "source": source,
                "page": page,
                "sections": sections,
                "spans": out_spans,
                "fields": fields,
                "error": error,
                "unsupported": unsupported,
                "grounded": grounded,
                "cost": cost,
                "usage": {
                    "prompt": _int_or_none(record.get(kx.PROMPT_TOKENS)),
                    "cached": _int_or_none(record.get(kx.CACHED_TOKENS)),
                    "completion": _int_or_none(record.get(kx.COMPLETION_TOKENS)),
                    "reasoning": _int_or_none(record.get(kx.REASONING_TOKENS)),
                    "attempts": _int_or_none(record.get(kx.ATTEMPTS)),
                    "latency": _float_or_none(record.get(kx.LATENCY_S)),
                    "from_store": bool(record.get(kx.FROM_STORE) is True),
                },
            }
        )

    def _span(
        self,
        number: int,
        span: dict[str, Any],
        sections: list[dict[str, Any]],
        section_of_page: dict[int, int],
        plain: int | None,
        by_page: bool,
        document: _Document | None,
    ) -> dict[str, Any]:
        """The span as the page's script reads it: ``sec`` is the section whose text it
        highlights (-1: none), ``s``/``e`` UTF-16 offsets there, ``boxes`` fractions of the page
        image of section ``bsec``."""
        kind = str(span.get("kind") or "none")
        start, end = _int_or_none(span.get("start")), _int_or_none(span.get("end"))
        page = _int_or_none(span.get("page"))
        out: dict[str, Any] = {
            "k": number,
            "path": _text(span.get("path", ""), 300),
            "value": _text(span.get("value", "")),
            "kind": kind,
            "score": _float_or_none(span.get("score")) or 0.0,
            "page": page,
            "quote": None if is_missing(span.get("quote")) else _text(span.get("quote")),
            "sec": -1,
            "s": None,
            "e": None,
            "bsec": -1,
            "boxes": [],
        }
        if kind == "none" or start is None or end is None:
            return out
        section = (section_of_page.get(page) if page is not None else None) if by_page else plain
        if section is not None and sections[section]["text"] is not None:
            text = self.texts[sections[section]["text"]]
            if 0 <= start <= end <= len(text):
                out["sec"] = section
                out["s"], out["e"] = utf16_offsets(text, [start, end])
        boxes: Any = span.get("boxes")
        if hasattr(boxes, "tolist"):
            boxes = boxes.tolist()
        if not boxes or document is None or page is None or page not in document.texts:
            return out
        image = self._page_image(document, page)
        if image is None:
            return out
        target = section_of_page.get(page)
        if target is None:  # the text is shown as one piece: the page image gets its own section
            target = section_of_page[page] = len(sections)
            sections.append({"page": page, "text": None, "image": None})
        sections[target]["image"] = image
        width, height = document.sizes[page]
        out["bsec"] = target
        out["boxes"] = [
            [b[0] / width, b[1] / height, b[2] / width, b[3] / height] for b in merge_boxes(boxes)
        ]
        return out

    def page(self, title: str, rows: int) -> str:
        summary = f"{rows:,} rows · {self.errors:,} with errors · {self.unsupported:,} with "
        summary += f"unsupported values · ${self.cost:,.4f}"
        data = {
            "cards": self.cards,
            "texts": self.texts,
            "images": self.images,
            "no_text": "no source text: pass text_column= or template= as given to the run",
        }
        note = ""
        if self.spec is None and not any(c["sections"] for c in self.cards):
            note = "Source texts are not shown: pass text_column= (or template=) to review()."
        return fill(
            {
                "TITLE": html.escape(title),
                "SUMMARY": html.escape(summary),
                "NOTE": html.escape(note),
                "CSS": CSS,
                "SCRIPT": SCRIPT,
                "DATA": script_json(data),
            }
        )


def script_json(value: Any) -> str:
    """JSON safe inside ``<script type="application/json">``: ``<``, ``>``, ``&`` and the JS line
    separators escaped, so ``</script>`` or ``<!--`` in the data cannot end or change the block."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for char, escape in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escape)
    # A lone surrogate (left by broken JSON decoding) cannot be written as UTF-8: escape it.
    return _SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


_SURROGATE = re.compile("[\ud800-\udfff]")
