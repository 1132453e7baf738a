"""Documents -> pages -> chunks: reading .txt, .md, .html and .pdf files (pure, no requests).

``collect_sources`` names the documents (a directory, paths, or a DataFrame column),
``load_all`` / ``load_pages`` read the selected pages (``page_selector``): a .txt is split into
pages at form feeds, an .html page is its visible text (``html_to_text``), a .pdf is read page by
page (``pip install -e '.[pdf]'``) as its text layer or rendered as a PNG of at most
``pixels`` pixels and ``MAX_RENDER_DPI`` (with ``char_boxes=True`` a text-layer page also keeps
its characters' boxes, ``Page.boxes``, for grounding). ``plan_chunks`` (``media.chunks``) cuts one
row's pages into chunks of at most N pages and about M characters, consecutive chunks sharing an
overlap. A document that cannot be read keeps the ``MediaError`` that says why.
``kimi_extract.run.documents`` turns these into rows.
"""

from __future__ import annotations

import html.parser
import math
import re
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from ..exceptions import InputError, MediaError, install_hint
from .chunks import Page, plan_chunks, split_text
from .formats import png_bytes

PdfMode = Literal["auto", "text", "images"]
PageSpec = str | int | range | Sequence[int] | None

TEXT_SUFFIXES = (".txt", ".md", ".markdown")
HTML_SUFFIXES = (".html", ".htm")
SUPPORTED_SUFFIXES = (*TEXT_SUFFIXES, *HTML_SUFFIXES, ".pdf")
#: pdf_mode="auto" renders a page whose text layer has fewer non-space characters than this.
MIN_TEXT_CHARS = 20
MAX_RENDER_DPI = 200
INSTALL_PDF = install_hint("pdf")

__all__ = [
    "Document",
    "Page",
    "collect_sources",
    "html_to_text",
    "load_all",
    "load_pages",
    "page_selector",
    "plan_chunks",
    "split_text",
]


@dataclass
class Document:
    """A source document and, once loaded, its selected pages (or the error that stopped it)."""

    path: Path
    label: Hashable
    record: dict[str, Any] = field(default_factory=dict)
    pages: list[Page] = field(default_factory=list)
    page_count: int = 0
    error: Exception | None = None

    @property
    def name(self) -> str:
        return self.path.name


# -- sources and loading ---------------------------------------------------------------------------


def collect_sources(
    sources: Any, *, path_column: str = "path", recursive: bool = False
) -> list[Document]:
    """The documents named by ``sources`` (see ``Extractor.run_documents``); ``InputError``."""
    if isinstance(sources, pd.DataFrame):
        if path_column not in sources.columns:
            raise InputError(
                f"path column {path_column!r} not found; available columns: "
                f"{[str(c) for c in sources.columns]} (pass path_column=...)"
            )
        records = sources.to_dict("records")
        return [
            Document(
                path=Path(str(rec[path_column])),
                label=label,
                record={str(k): v for k, v in rec.items()},
            )
            for label, rec in zip(sources.index, records, strict=True)
        ]
    if isinstance(sources, str | Path):
        sources = [sources]
    if not isinstance(sources, Iterable):
        raise InputError(
            f"sources must be a directory, file paths or a DataFrame, got {type(sources).__name__}"
        )
    paths: list[Path] = []
    for item in sources:
        path = Path(item).expanduser()
        if path.is_dir():
            found = path.rglob("*") if recursive else path.iterdir()
            paths += sorted(
                p
                for p in found
                if p.is_file()
                and p.suffix.lower() in SUPPORTED_SUFFIXES
                and not p.name.startswith(".")
            )
        else:
            paths.append(path)
    if not paths:
        raise InputError(f"no documents ({', '.join(SUPPORTED_SUFFIXES)}) found in {sources!r}")
    return [Document(path=p, label=i) for i, p in enumerate(paths)]


def page_selector(spec: PageSpec) -> Any:
    """A function ``count -> selected 1-based page numbers`` for a pages spec; ``InputError``."""
    if spec is None:
        return lambda count: list(range(1, count + 1))
    wanted: list[tuple[int, int | None]] = []
    if isinstance(spec, bool):
        raise InputError(f"pages must be like '1-3,5', an int, a list or a range, got {spec!r}")
    if isinstance(spec, int):
        wanted = [(spec, spec)]
    elif isinstance(spec, range):
        wanted = [(n, n) for n in spec]
    elif isinstance(spec, str):
        for part in spec.replace(" ", "").split(","):
            match = re.fullmatch(r"(\d*)-(\d*)|(\d+)", part)
            if not match or part == "-":
                raise InputError(f"pages={spec!r}: cannot read {part!r}; use e.g. '1-3,5,8-'")
            if match.group(3):
                wanted.append((int(match.group(3)), int(match.group(3))))
            else:
                start, end = match.group(1), match.group(2)
                wanted.append((int(start) if start else 1, int(end) if end else None))
    elif isinstance(spec, Iterable):
        wanted = [(int(n), int(n)) for n in spec]
    else:
        raise InputError(f"pages must be like '1-3,5', an int, a list or a range, got {spec!r}")
    if any(start < 1 or (end is not None and end < start) for start, end in wanted):
        raise InputError(f"pages={spec!r}: page numbers start at 1 and ranges must ascend")

    def select(count: int) -> list[int]:
        chosen = {
            n
            for start, end in wanted
            for n in range(start, min(count, end if end is not None else count) + 1)
        }
        return sorted(chosen)

    return select


def load_all(
    documents: list[Document],
    pdf_mode: PdfMode,
    select: Any,
    pixels: int | None,
    *,
    char_boxes: bool = False,
) -> None:
    """Read every document's selected pages in place; an unreadable one keeps its error."""
    for document in documents:
        try:
            all_pages = load_pages(
                document.path,
                pdf_mode=pdf_mode,
                select=select,
                pixels=pixels,
                char_boxes=char_boxes,
            )
        except MediaError as exc:
            document.error = exc
            continue
        document.page_count, document.pages = all_pages
        if not document.pages:
            document.error = MediaError(
                f"{document.path}: none of the selected pages exist "
                f"(it has {document.page_count} page(s))"
            )


def load_pages(
    path: Path,
    *,
    pdf_mode: PdfMode = "auto",
    select: Any = None,
    pixels: int | None = None,
    char_boxes: bool = False,
) -> tuple[int, list[Page]]:
    """(page count, selected pages) of one document; raises ``MediaError`` when unreadable.

    ``char_boxes``: PDF pages read as text also get ``Page.boxes``."""
    select = select or page_selector(None)
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise MediaError(f"{path}: unsupported document type; use {', '.join(SUPPORTED_SUFFIXES)}")
    if suffix == ".pdf":
        return _pdf_pages(path, pdf_mode, select, pixels, char_boxes)
    try:
        raw = path.read_text(encoding="utf-8-sig", errors="replace")
    except FileNotFoundError:
        raise MediaError(f"document not found: {path}") from None
    except OSError as exc:
        raise MediaError(f"cannot read {path}: {exc.strerror}") from None
    if suffix in HTML_SUFFIXES:
        texts = [html_to_text(raw)]
    else:
        texts = raw.split("\f") if suffix == ".txt" else [raw]
    wanted = set(select(len(texts)))
    pages = [Page(n, t.strip()) for n, t in enumerate(texts, start=1) if n in wanted]
    return len(texts), pages


def _pdfium() -> Any:
    """pypdfium2, or ``MediaError`` naming the install line: only the PDF rows fail without it."""
    try:
        import pypdfium2
    except ImportError:
        raise MediaError(f"reading PDFs needs pypdfium2: {INSTALL_PDF}") from None
    return pypdfium2


def _pdf_pages(
    path: Path, pdf_mode: PdfMode, select: Any, pixels: int | None, char_boxes: bool = False
) -> tuple[int, list[Page]]:
    pdfium = _pdfium()
    if not path.exists():
        raise MediaError(f"document not found: {path}")
    try:
        pdf = pdfium.PdfDocument(str(path))
    except (pdfium.PdfiumError, OSError) as exc:
        raise MediaError(f"{path} is not a readable PDF: {exc}") from None
    try:
        count = len(pdf)
        pages = []
        for number in select(count):
            page = pdf[number - 1]
            try:
                text = ""
                boxes = None
                if pdf_mode != "images":
                    textpage = page.get_textpage()
                    raw = textpage.get_text_range()
                    text = raw.replace("\r\n", "\n").replace("\r", "\n")
                    if char_boxes:
                        boxes = _char_boxes(pdfium, textpage, raw, page.get_size()[1])
                    textpage.close()
                needs_image = pdf_mode == "images" or (
                    pdf_mode == "auto" and len("".join(text.split())) < MIN_TEXT_CHARS
                )
                image = _render(page, pixels) if needs_image else None
                if image is not None:
                    pages.append(Page(number, "", image))
                    continue
                stripped = text.strip()
                if boxes is not None:
                    # the rows of the characters the page text keeps (no "\r" of a "\r\n")
                    kept = [
                        i
                        for i, c in enumerate(raw)
                        if not (c == "\r" and raw[i + 1 : i + 2] == "\n")
                    ]
                    lead = len(text) - len(text.lstrip())
                    boxes = boxes[kept][lead : lead + len(stripped)]
                pages.append(Page(number, stripped, None, boxes))
            finally:
                page.close()
        return count, pages
    except pdfium.PdfiumError as exc:
        raise MediaError(f"{path}: cannot read a page: {exc}") from None
    finally:
        pdf.close()


def _char_boxes(pdfium: Any, textpage: Any, raw: str, height: float) -> np.ndarray:
    """One box per character of ``raw`` (``get_text_range``'s text): (left, top, right, bottom)
    in PDF points from the top-left corner, NaN where pdfium inserted the character."""
    boxes = np.full((len(raw), 4), np.nan)
    unit = 0  # UTF-16 index of the character: pdfium's "text index"
    for index, char in enumerate(raw):
        found = pdfium.raw.FPDFText_GetCharIndexFromTextIndex(textpage, unit)
        unit += 2 if char > "\uffff" else 1
        if found < 0:
            continue
        left, bottom, right, top = textpage.get_charbox(found)
        if right > left and top > bottom:
            boxes[index] = (left, height - top, right, height - bottom)
    return boxes


def _render(page: Any, pixels: int | None) -> bytes:
    """The page as a PNG of at most ``pixels`` pixels (and at most ``MAX_RENDER_DPI``)."""
    width_pt, height_pt = page.get_size()
    scale = MAX_RENDER_DPI / 72
    if pixels is not None:
        scale = min(scale, math.sqrt(pixels / (width_pt * height_pt)) * 0.999)
    bitmap = page.render(scale=scale, rev_byteorder=True)
    try:
        return png_bytes(
            bitmap.buffer,
            bitmap.width,
            bitmap.height,
            channels=bitmap.n_channels,
            stride=bitmap.stride,
        )
    finally:
        bitmap.close()


class _HTMLText(html.parser.HTMLParser):
    """Visible text of an HTML page: blocks on their own lines, table cells joined by ' | '."""

    BLOCKS = frozenset(
        "p div br li ul ol h1 h2 h3 h4 h5 h6 tr table section article header footer pre "
        "blockquote title dt dd hr".split()
    )
    SKIP = frozenset({"script", "style", "noscript", "template", "svg"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[list[str]] = [[]]
        self.skipping = 0
        self.cell_open = False

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in self.SKIP:
            self.skipping += 1
        elif tag in self.BLOCKS:
            self.lines.append([])
        elif tag in ("td", "th"):
            if self.lines[-1]:
                self.lines[-1].append(" | ")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP and self.skipping:
            self.skipping -= 1
        elif tag in self.BLOCKS:
            self.lines.append([])

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.lines[-1].append(data)

    def text(self) -> str:
        lines = [" ".join("".join(parts).split()) for parts in self.lines]
        return "\n".join(line for line in lines if line)


def html_to_text(source: str) -> str:
    """The visible text of an HTML document (scripts and styles dropped)."""
    parser = _HTMLText()
    parser.feed(source)
    parser.close()
    return parser.text()
