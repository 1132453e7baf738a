"""``review(df)``: one static HTML page to check an extraction against its sources.

One card per row, or per document for an exploded frame (its item rows together, under one copy
of the document): the source text with every located value highlighted (``kx_spans``; verified
matches in yellow, doubtful ones, fuzzy and near misses, in their own colours with the
value-vs-text difference shown), the fields table with unsupported values flagged, ``kx_error``,
tokens and cost; for PDF pages, the page image (zoomable) with boxes over the evidence. The page
filters and counts values (unsupported, near, fuzzy, inferred) as well as rows, lists every
doubtful value of the run, sorts cards, and shows one field across rows. Under each row's fields a
reviewer marks values right or wrong, types the right ones (checked against the field's type:
``model=``'s, else inferred from the values), drops or adds list items and confirms rows; the page
keeps the marks in localStorage and downloads them as a corrections file (``review_check``,
``review_edit``; ``corrections.read_corrections`` reads it). It is one self-contained file: no
network (a Content-Security-Policy forbids it), no external assets, the data embedded as JSON.

Where the source text comes from (span offsets are Python indices into the exact text that was
sent, so the page must be given that text):

- rows of ``Extractor.run``: pass the same ``text_column=`` (a column or a list of them) or
  ``template=`` as the run: the text is rendered exactly as the run rendered it;
- ``run_documents`` outputs (a ``kx_source`` column): the documents are read again (``documents``,
  default on when the column exists), only from under ``documents_root`` (``review_sources``). A
  span carrying a ``page`` is highlighted in that page's text; when more exact spans read back
  their value from the document's text as one piece (pages joined by a blank line, as
  ``run_documents(text_column=)`` writes it, or the given ``text_column``), offsets are read so.
  PDF pages holding evidence, and pages without a text layer (scans), are rendered (pypdfium2)
  and embedded as PNG data URLs, with the spans' ``boxes`` drawn over them.

Foreign or malformed tables never stop the page: a span record that cannot be used (not a record,
offsets that are not whole numbers inside the text, malformed boxes) is skipped or shown without a
highlight, and counted on its card. Offsets are converted to UTF-16 code units for the browser.
Every value taken from the data is inserted as text, never as markup.
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel

from ..exceptions import ConfigurationError, InputError
from ..records import is_missing
from ..run.inputs import TextSpec
from . import columns as kx
from .export import informative_index
from .review_cards import Row, card_of
from .review_check import Checks, checks_for
from .review_page import CSS, fill
from .review_script import SCRIPT
from .review_sources import ReadDocument, read_document, render_pdf_pages, resolve_root
from .review_spans import spans_of, text_of, utf16_offsets

__all__ = ["review", "script_json", "spans_of", "utf16_offsets"]

#: Rendered page images fit this many pixels (about 900 x 1165 for a US-letter page).
DEFAULT_PAGE_PIXELS = 1_000_000
#: At most this many page images are embedded (each is tens of kB); later pages show text only.
DEFAULT_MAX_IMAGES = 200


def review(
    df: pd.DataFrame,
    path: str | os.PathLike[str] = "review.html",
    *,
    text_column: str | Sequence[str] | None = None,
    template: str | None = None,
    documents: bool | None = None,
    documents_root: str | os.PathLike[str] | None = None,
    id: str | None = None,  # noqa: A002 - the name users pass: kx.review(df, id="sku")
    title: str | None = None,
    page_pixels: int = DEFAULT_PAGE_PIXELS,
    max_images: int = DEFAULT_MAX_IMAGES,
    model: type[BaseModel] | None = None,
    prefix: str = "",
) -> Path:
    """Write a review page for an extraction output ``df`` to ``path``; returns the path.

    ``text_column`` / ``template``: how each row's source text was made (as passed to
    ``Extractor.run``; for ``run_documents`` the ``text_column=`` it wrote). ``documents``: read
    the files named in ``kx_source`` again for page texts and PDF page images (default: when the
    frame has that column); only regular files under ``documents_root`` are read (default: the
    current directory; ``"/"`` allows any file), the others say so on their card. ``id``: a
    column whose value labels each card (default: the document's file name, else the index).
    ``title``: the page's title (default: the file name). ``page_pixels``: size of rendered
    pages; ``max_images``: how many page images at most are embedded.

    Corrections: a reviewer marks values right or wrong, types the right ones, drops or adds
    list items, and downloads the corrections as JSON (``read_corrections`` makes them a gold
    frame). ``model``: the output model, whose field types the page checks typed values
    against (without it the fields are the other columns and their types are inferred from the
    values); ``prefix``: the ``column_prefix=`` of the run.

    Raises ``ConfigurationError`` (``InputError`` for columns) naming the argument: a text
    column, template field or ``id`` column the frame does not have, an argument of the wrong
    type, a ``documents_root`` that is not a directory, a ``path`` that cannot be a file name;
    ``OSError`` when the page cannot be written. Malformed cells never raise: they show on
    their card.
    """
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"review() takes the DataFrame an extraction returned, got {type(df)}")
    target = _target(path)
    if title is not None and not isinstance(title, str):
        raise ConfigurationError(f"title= must be a string, got {type(title).__name__}")
    for name, number, low in (("page_pixels", page_pixels, 1), ("max_images", max_images, 0)):
        if isinstance(number, bool) or not isinstance(number, int) or number < low:
            raise ConfigurationError(f"{name}= must be a whole number >= {low}, got {number!r}")
    if documents is not None and not isinstance(documents, bool):
        raise ConfigurationError(f"documents= must be True, False or None, got {documents!r}")
    available = [str(c) for c in df.columns]
    if id is not None and (not isinstance(id, str) or id not in available):
        raise InputError(f"id={id!r} is not a column of the frame; its columns: {available}")
    spec: TextSpec | None = None
    if text_column is not None or template is not None:
        spec = TextSpec.build(text=text_column, template=template, available=available)
    if documents is None:
        documents = kx.SOURCE in available
    root = resolve_root(documents_root) if documents else None
    checks = checks_for(available, model, prefix, spec.columns if spec else (), id)
    builder = _Builder(spec, root, page_pixels, max_images, id, checks)
    for group in _groups(df, spec):
        builder.add(group)
    page = builder.page(title if title is not None else target.stem, len(df), target.stem)
    try:
        target.write_text(page, encoding="utf-8")
    except (UnicodeError, ValueError) as exc:
        raise ConfigurationError(f"path={str(target)!r} cannot be a file name: {exc}") from None
    return target


def _target(path: Any) -> Path:
    if not isinstance(path, str | os.PathLike):
        raise ConfigurationError(f"path= must be a file path, got {type(path).__name__}")
    try:
        target = Path(path)
        os.fsencode(target)
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise ConfigurationError(f"path={path!r} cannot be a file name: {exc}") from None
    if "\0" in str(target):
        raise ConfigurationError(f"path={path!r} cannot be a file name: it holds a NUL")
    return target


def _groups(df: pd.DataFrame, spec: TextSpec | None) -> list[list[Row]]:
    """The frame's rows as cards: one row each, except the item rows of an exploded frame
    (``kx_item``), which sit together under their document: consecutive rows with rising item
    numbers, the same source, page and text (and index label, when the index says something)."""
    labels = list(df.index)
    exploded = kx.ITEM in [str(c) for c in df.columns]
    by_label = informative_index(df)
    groups: list[list[Row]] = []
    previous: tuple[Any, ...] | None = None
    last_item: int | None = None
    for label, raw in zip(labels, df.to_dict("records"), strict=True):
        record = {str(k): v for k, v in raw.items()}
        text, note = None, None
        if spec is not None:
            try:
                text = spec.render(record)
            except InputError as exc:
                note = str(exc)
        row = Row(label, record, text, note)
        item = row.item
        key = (
            _hashable(label) if by_label else None,
            _hashable(record.get(kx.SOURCE)),
            _hashable(record.get(kx.PAGE)),
            text,
        )
        joins = (
            exploded
            and groups
            and item is not None
            and last_item is not None
            and item > last_item
            and key == previous
        )
        if joins:
            groups[-1].append(row)
        else:
            groups.append([row])
        previous, last_item = key, item
    return groups


def _hashable(value: Any) -> Any:
    if is_missing(value):
        return None
    return value if isinstance(value, str | int | float) else text_of(value, 500)


@dataclass
class _Images:
    """The page images embedded so far; ``ReadDocument.images`` maps a page to an index here."""

    pixels: int
    limit: int
    items: list[dict[str, Any]]

    def page(self, document: ReadDocument, number: int) -> int | None:
        """The index of ``number``'s rendered image (rendered once), or None."""
        if number in document.images:
            return document.images[number]
        document.images[number] = None
        path = document.path
        if path is None or path.suffix.lower() != ".pdf" or len(self.items) >= self.limit:
            return None
        try:
            rendered = render_pdf_pages(path, [number], self.pixels)
        except Exception:  # noqa: BLE001 - a page that will not render shows its text only
            return None
        if number in rendered:
            png, width, height, width_pt, height_pt = rendered[number]
            document.sizes[number] = (width_pt, height_pt)
            src = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
            document.images[number] = len(self.items)
            self.items.append({"src": src, "w": width, "h": height})
        return document.images[number]


class _Builder:
    """Collects the cards; texts and page images are stored once and referenced by index."""

    def __init__(
        self,
        spec: TextSpec | None,
        root: Path | None,
        page_pixels: int,
        max_images: int,
        id_column: str | None,
        checks: Checks | None = None,
    ) -> None:
        self.spec = spec
        self.checks = checks
        self.root = root
        self.id_column = id_column
        self.images = _Images(page_pixels, max_images, [])
        self.cards: list[dict[str, Any]] = []
        self.texts: list[str] = []
        self.text_ids: dict[str, int] = {}
        self.loaded: dict[str, ReadDocument] = {}
        self.error_rows = 0
        self.counts: dict[str, int] = {}
        self.cost = 0.0

    def text_id(self, text: str) -> int:
        found = self.text_ids.get(text)
        if found is None:
            found = self.text_ids[text] = len(self.texts)
            self.texts.append(text)
        return found

    def document(self, source: str) -> ReadDocument | None:
        if self.root is None:
            return None
        found = self.loaded.get(source)
        if found is None:
            found = self.loaded[source] = read_document(source, self.root)
        return found

    def add(self, rows: list[Row]) -> None:
        card = card_of(self, rows)
        if self.checks is not None:
            for shown, row in zip(card["rows"], rows, strict=True):
                shown.update(self.checks.row(row.label, row.record))
        self.error_rows += sum(1 for row in rows if row.error is not None)
        for name, count in card["counts"].items():
            self.counts[name] = self.counts.get(name, 0) + count
        self.cost += card["cost"] or 0.0
        self.cards.append(card)

    def page(self, title: str, rows: int, stem: str) -> str:
        counts = self.counts
        parts = [f"{rows:,} rows"]
        if len(self.cards) != rows:
            parts[0] += f" in {len(self.cards):,} cards"
        parts.append(f"{self.error_rows:,} with errors")
        unsupported = counts.get("none", 0) + counts.get("near", 0)
        parts.append(f"{unsupported:,} unsupported value{'' if unsupported == 1 else 's'}")
        for name, what in (("near", "near"), ("fuzzy", "fuzzy"), ("inferred", "inferred")):
            if counts.get(name):
                parts.append(f"{counts[name]:,} {what}")
        if counts.get("bad"):
            parts.append(
                f"{counts['bad']:,} unusable span record{'' if counts['bad'] == 1 else 's'}"
            )
        parts.append(f"${self.cost:,.4f}")
        data = {
            "cards": self.cards,
            "texts": self.texts,
            "images": self.images.items,
            "no_text": "no source text: pass text_column= or template= as given to the run",
        }
        if self.checks is not None:
            data["check"] = self.checks.data(stem)
        notes = []
        if self.checks is not None and self.checks.note():
            notes.append(self.checks.note())
        if self.spec is None and not any(c["sections"] for c in self.cards):
            notes.append(
                "Source texts are not shown: pass text_column= (or template=) to review()."
            )
        outside = sum(1 for d in self.loaded.values() if d.outside)
        if outside:
            notes.append(
                f"{outside:,} document{' was' if outside == 1 else 's were'} not read again: "
                f"outside the documents root {self.root} (pass documents_root=, or "
                "kimi-extract review --documents-root DIR, to read them)."
            )
        note = " ".join(notes)
        return fill(
            {
                "TITLE": visible(title),
                "SUMMARY": visible(" · ".join(parts)),
                "NOTE": visible(note),
                "CSS": CSS,
                "SCRIPT": SCRIPT,
                "DATA": script_json(data),
            }
        )


def visible(text: str) -> str:
    """Text for the page's HTML: escaped, lone surrogates written as ``\\udXXX`` (they cannot
    be encoded) and NULs as U+FFFD."""
    text = _SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", text).replace(
        "\0", "\ufffd"
    )
    return html.escape(text)


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
