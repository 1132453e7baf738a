"""Documents -> extraction rows: .txt, .md, .html and .pdf files, per document or per page.

``run_documents(extractor, sources, ...)`` (``Extractor.run_documents``) reads each document into
pages, cuts them into chunks when asked, runs every chunk through ``Extractor.arun`` in one run (so
chunks share the concurrency and the cached prompt prefix), and merges the chunks back:

- ``.txt`` / ``.md``: the text (a .txt is split into pages at form feeds ``\\f``); ``.html``: its
  visible text (tables as ``cell | cell`` lines); ``.pdf`` (``pip install 'kimi-extract[pdf]'``):
  page by page, ``pdf_mode="text"`` sends the text layer, ``"images"`` sends every page rendered
  as a PNG, and ``"auto"`` (default) sends the text layer and renders only pages without one
  (fewer than ``MIN_TEXT_CHARS`` non-space characters: scans). Rendered pages fit
  ``max_image_pixels`` (default: the extractor's, 1024 x 1024 pixels: about 105 dpi for a US-letter
  page) and never exceed 200 dpi.
- ``pages``: 1-based page numbers applied to every document: ``"1-3,5"``, ``"2-"``, an int, a
  list, or a ``range`` (``range(1, 4)`` = pages 1-3). Pages past a document's end are ignored.
- ``per_page=True``: one row per page, else one row per document. Output rows carry ``kx_source``
  (the file path) and ``kx_page`` (the page number; ``<NA>`` on document rows).
- ``chunk_pages=N`` / ``chunk_chars=M``: a row's pages are sent in chunks of at most N pages and
  about M characters (a longer page is split at paragraph, line or word boundaries; rendered pages
  count 0 characters). Merge rule, field by field in chunk order: lists are concatenated; nested
  models merge by the same rule; any other value is the first non-null one. Token and cost columns
  are summed over the chunks, ``kx_chunks`` says how many there were, and ``kx_error`` names the
  chunks that failed (the others still contribute their values).
- ``explode="field"``: one row per item of that list field (see ``kimi_extract.table.explode``).

A document that cannot be read becomes a row whose ``kx_error`` says why; no request is sent for it.
"""

from __future__ import annotations

import asyncio
import html.parser
import math
import re
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd

from ..exceptions import ConfigurationError, EmptyInputError, InputError, MediaError, RunStopped
from ..media.formats import png_bytes
from ..media.parts import current_options, media_options
from ..table.columns import ADDITIVE_COLUMNS
from ..table.explode import check_explode
from ..table.explode import explode as explode_frame
from ..table.frame import build_frame, output_columns
from .conversation import one_line

if TYPE_CHECKING:
    from ..extractor import Extractor

PdfMode = Literal["auto", "text", "images"]
PageSpec = str | int | range | Sequence[int] | None

TEXT_SUFFIXES = (".txt", ".md", ".markdown")
HTML_SUFFIXES = (".html", ".htm")
SUPPORTED_SUFFIXES = (*TEXT_SUFFIXES, *HTML_SUFFIXES, ".pdf")
#: pdf_mode="auto" renders a page whose text layer has fewer non-space characters than this.
MIN_TEXT_CHARS = 20
MAX_RENDER_DPI = 200
INSTALL_PDF = "pip install 'kimi-extract[pdf]'"


@dataclass
class Page:
    """One page: its 1-based number, its text, and a PNG rendering when it is sent as an image."""

    number: int
    text: str = ""
    image: bytes | None = None


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


@dataclass
class _Unit:
    """One output row: a document or a page, with the chunks it is sent in."""

    document: Document
    page: int | None
    chunks: list[list[Page]]
    first_row: int = 0  # position of its first chunk in the run's input frame
    error: Exception | None = None  # why it is not sent (unreadable, nothing to send)

    def __post_init__(self) -> None:
        self.error = self.error or self.document.error
        # Chunks with neither text nor an image (pdf_mode="text" on a scan) are not sent.
        self.chunks = [c for c in self.chunks if any(p.text.strip() or p.image for p in c)]
        if self.error is None and not self.chunks:
            where = f"page {self.page}" if self.page is not None else "the selected pages"
            self.error = EmptyInputError(
                f"{self.document.path}: {where} has no text (an empty text layer is sent as an "
                "image only with pdf_mode='auto' or 'images')"
            )


async def arun_documents(
    extractor: Extractor[Any],
    sources: Any,
    *,
    pdf_mode: PdfMode = "auto",
    pages: PageSpec = None,
    per_page: bool = False,
    chunk_pages: int | None = None,
    chunk_chars: int | None = None,
    explode: str | None = None,
    item_prefix: str = "",
    path_column: str = "path",
    text_column: str | None = None,
    recursive: bool = False,
    max_image_pixels: int | None | Literal["default"] = "default",
) -> pd.DataFrame:
    """Extract from documents; returns a DataFrame (see the module docstring for every option).

    ``sources``: a directory (its supported files, sorted; ``recursive=True`` for subfolders), a
    file path, a list of paths, or a DataFrame whose ``path_column`` holds the paths (its other
    columns are kept). ``text_column``: also keep each row's document text under that name.
    ``max_image_pixels``: size of rendered pages and images (default: the extractor's).
    """
    if pdf_mode not in ("auto", "text", "images"):
        raise ConfigurationError(f"pdf_mode must be 'auto', 'text' or 'images', got {pdf_mode!r}")
    for name, value in (("chunk_pages", chunk_pages), ("chunk_chars", chunk_chars)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ConfigurationError(f"{name} must be a positive integer, got {value!r}")
    select = page_selector(pages)
    documents = collect_sources(sources, path_column=path_column, recursive=recursive)
    model, prefix = extractor.output, extractor.prefix
    fixed = ["kx_source", "kx_page", "kx_chunks", *([text_column] if text_column else [])]
    source_columns = [c for c in documents[0].record] if documents else []
    taken = set(output_columns(model, prefix).values())
    clashes = sorted(taken & set(fixed + source_columns))
    if clashes:
        raise InputError(
            f"output column(s) {clashes} already name document columns; pass prefix='out_'"
        )
    if explode is not None:
        check_explode(
            model, explode, prefix=prefix, item_prefix=item_prefix, columns=fixed + source_columns
        )
    if max_image_pixels == "default":
        pixels = current_options(extractor.media).max_image_pixels
    else:
        pixels = max_image_pixels

    await asyncio.to_thread(_load_all, documents, pdf_mode, select, pixels)
    units = _plan(documents, per_page, chunk_pages, chunk_chars)
    text_name, images_name = _free_names(extractor, ("kx_doc_text", "kx_doc_images"))
    texts: list[str] = []
    images: list[list[bytes] | None] = []
    for unit in units:
        unit.first_row = len(texts)
        for number, chunk in enumerate(unit.chunks, start=1):
            texts.append(_chunk_text(unit, chunk, number))
            pictures = [p.image for p in chunk if p.image is not None]
            images.append(pictures or None)
    frame = pd.DataFrame({text_name: texts, images_name: images})
    use_images = any(cell for cell in images)
    stopped: RunStopped | None = None
    cancelled = False
    if len(frame):
        with media_options(max_image_pixels=pixels):
            try:
                results = await extractor.arun(
                    frame[[text_name, images_name]] if use_images else frame[[text_name]],
                    text=text_name,
                    images=images_name if use_images else None,
                )
            except RunStopped as exc:
                if exc.partial is None:
                    raise
                stopped, results = exc, exc.partial
            except asyncio.CancelledError:  # Ctrl-C: build the documents' partial, then go on
                if extractor.last_partial is None:
                    raise
                cancelled, results = True, extractor.last_partial
    else:
        results = frame
    source_dtypes = (
        {str(c): t for c, t in sources.dtypes.items()}
        if isinstance(sources, pd.DataFrame)
        else None
    )
    out = _assemble(extractor, units, results, source_dtypes=source_dtypes)
    if chunk_pages is None and chunk_chars is None:
        out = out.drop(columns=["kx_chunks"])
    if text_column:
        texts_kept = ["\n\n".join(p.text for c in u.chunks for p in c if p.text) for u in units]
        out.insert(2, text_column, texts_kept)
    if explode is not None:
        out = explode_frame(out, model, explode, prefix=prefix, item_prefix=item_prefix)
    if cancelled:
        extractor.last_partial = out  # RunInterrupted.partial: the document rows
        raise asyncio.CancelledError
    if stopped is not None:
        # The same class (RunStopped, BudgetExceeded...), now carrying the document rows.
        raise type(stopped)(str(stopped), partial=out, cause=stopped.cause) from stopped.cause
    return out


# -- sources and loading ---------------------------------------------------------------------------


def collect_sources(
    sources: Any, *, path_column: str = "path", recursive: bool = False
) -> list[Document]:
    """The documents named by ``sources`` (see ``arun_documents``); raises ``InputError``."""
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


def _load_all(
    documents: list[Document], pdf_mode: PdfMode, select: Any, pixels: int | None
) -> None:
    for document in documents:
        try:
            all_pages = load_pages(document.path, pdf_mode=pdf_mode, select=select, pixels=pixels)
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
    path: Path, *, pdf_mode: PdfMode = "auto", select: Any = None, pixels: int | None = None
) -> tuple[int, list[Page]]:
    """(page count, selected pages) of one document; raises ``MediaError`` when unreadable."""
    select = select or page_selector(None)
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise MediaError(f"{path}: unsupported document type; use {', '.join(SUPPORTED_SUFFIXES)}")
    if suffix == ".pdf":
        return _pdf_pages(path, pdf_mode, select, pixels)
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
    path: Path, pdf_mode: PdfMode, select: Any, pixels: int | None
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
                if pdf_mode != "images":
                    textpage = page.get_textpage()
                    text = textpage.get_text_range().replace("\r\n", "\n").replace("\r", "\n")
                    textpage.close()
                needs_image = pdf_mode == "images" or (
                    pdf_mode == "auto" and len("".join(text.split())) < MIN_TEXT_CHARS
                )
                image = _render(page, pixels) if needs_image else None
                pages.append(Page(number, "" if image is not None else text.strip(), image))
            finally:
                page.close()
        return count, pages
    except pdfium.PdfiumError as exc:
        raise MediaError(f"{path}: cannot read a page: {exc}") from None
    finally:
        pdf.close()


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


# -- chunks ----------------------------------------------------------------------------------------


#: (where to cut, what joins the pieces back): a sentence end keeps its full stop on the left.
_BOUNDARIES = (
    (re.compile(r"\n\n"), "\n\n"),
    (re.compile(r"\n"), "\n"),
    (re.compile(r"(?<=[.!?]) "), " "),
    (re.compile(r" "), " "),
)


def split_text(text: str, limit: int) -> list[str]:
    """Cut ``text`` into pieces of at most ``limit`` characters at the widest boundary that works.

    Boundaries tried in order: blank lines, line breaks, sentence ends, spaces, then anywhere.
    """
    if len(text) <= limit:
        return [text]
    for boundary, separator in _BOUNDARIES:
        parts = boundary.split(text)
        if len(parts) == 1:
            continue
        pieces: list[str] = []
        current = ""
        for part in parts:
            candidate = f"{current}{separator}{part}" if current else part
            if len(candidate) <= limit:
                current = candidate
                continue
            if current:
                pieces.append(current)
            if len(part) > limit:
                pieces += split_text(part, limit)
                current = ""
            else:
                current = part
        if current:
            pieces.append(current)
        return [p for p in pieces if p.strip()]
    return [text[i : i + limit] for i in range(0, len(text), limit)]


def plan_chunks(
    pages: list[Page], chunk_pages: int | None = None, chunk_chars: int | None = None
) -> list[list[Page]]:
    """The chunks one row's pages are sent in (see the module docstring)."""
    groups = (
        [pages[i : i + chunk_pages] for i in range(0, len(pages), chunk_pages)]
        if chunk_pages
        else [pages]
    )
    if not chunk_chars:
        return groups
    chunks: list[list[Page]] = []
    for group in groups:
        current: list[Page] = []
        size = 0
        for page in group:
            if len(page.text) > chunk_chars:
                if current:
                    chunks.append(current)
                pieces = split_text(page.text, chunk_chars)
                chunks += [[replace(page, text=piece)] for piece in pieces[:-1]]
                current, size = [replace(page, text=pieces[-1])], len(pieces[-1])
                continue
            if current and size + len(page.text) > chunk_chars:
                chunks.append(current)
                current, size = [], 0
            current.append(page)
            size += len(page.text)
        if current:
            chunks.append(current)
    return chunks


def _plan(
    documents: list[Document], per_page: bool, chunk_pages: int | None, chunk_chars: int | None
) -> list[_Unit]:
    units: list[_Unit] = []
    for document in documents:
        if document.error is not None:
            units.append(_Unit(document, None, []))
        elif per_page:
            units += [
                _Unit(document, page.number, plan_chunks([page], None, chunk_chars))
                for page in document.pages
            ]
        else:
            units.append(
                _Unit(document, None, plan_chunks(document.pages, chunk_pages, chunk_chars))
            )
    return units


def _pages_label(numbers: list[int]) -> str:
    first, last = numbers[0], numbers[-1]
    return f"page {first}" if first == last else f"pages {first}-{last}"


def _chunk_text(unit: _Unit, chunk: list[Page], number: int) -> str:
    """The chunk's text: a header naming the document and pages, then each page's text."""
    document = unit.document
    numbers = [p.number for p in chunk]
    header = f"Document: {document.name}"
    if document.page_count > 1:
        header += f" ({_pages_label(numbers)} of {document.page_count})"
    if len(unit.chunks) > 1:
        header += f", part {number} of {len(unit.chunks)}"
    blocks = [header]
    several = len(set(numbers)) > 1
    for page in chunk:
        body = page.text if page.image is None else "(this page is attached as an image)"
        blocks.append(f"--- page {page.number} ---\n{body}" if several else body)
    return "\n\n".join(b for b in blocks if b)


# -- results ---------------------------------------------------------------------------------------


def _free_names(extractor: Extractor[Any], wanted: tuple[str, ...]) -> tuple[str, ...]:
    """Internal input column names that no output column uses."""
    taken = set(output_columns(extractor.output, extractor.prefix).values())
    names = []
    for name in wanted:
        while name in taken:
            name = "_" + name
        names.append(name)
    return tuple(names)


def _missing(value: Any) -> bool:
    if value is None or value is pd.NA:
        return True
    return isinstance(value, float) and math.isnan(value)


def merge_values(values: Sequence[Any]) -> Any:
    """Merge one field's values from successive chunks (lists concatenate; else first non-null)."""
    present = [v for v in values if not _missing(v)]
    if not present:
        return None
    if all(isinstance(v, list) for v in present):
        return [item for v in present for item in v]
    if all(isinstance(v, dict) for v in present):
        keys = list(dict.fromkeys(k for v in present for k in v))
        return {k: merge_values([v.get(k) for v in present]) for k in keys}
    return present[0]


def _assemble(
    extractor: Extractor[Any],
    units: list[_Unit],
    results: pd.DataFrame,
    *,
    source_dtypes: dict[str, Any] | None,
) -> pd.DataFrame:
    """One row per unit: source columns, ``kx_source``/``kx_page``, merged fields, accounting.

    ``source_dtypes``: the source DataFrame's column dtypes (None when sources were paths).
    """
    template = build_frame(
        model=extractor.output,
        results=[],
        index=pd.RangeIndex(0),
        input_frame=None,
        prefix=extractor.prefix,
        web_search=extractor.web_search,
    )
    fields = set(output_columns(extractor.output, extractor.prefix).values())
    values: dict[str, list[Any]] = {c: [] for c in template.columns}
    for unit in units:
        rows = results.iloc[unit.first_row : unit.first_row + len(unit.chunks)]
        for column in template.columns:
            cells = rows[column].tolist() if len(rows) else []
            if column in fields:
                value = merge_values(cells)
            elif column == "kx_error":
                value = _unit_error(unit, cells)
            elif column in ADDITIVE_COLUMNS:
                value = sum(cells) if cells else 0
            elif template[column].dtype == bool:  # e.g. kx_from_cache: true if every chunk was
                value = bool(cells) and all(cells)
            else:
                value = next((c for c in cells if not _missing(c)), None)
            values[column].append(value)
    if source_dtypes is not None:
        index = pd.Index([u.document.label for u in units])
    else:
        index = pd.RangeIndex(len(units))
    data: dict[str, Any] = {
        "kx_source": pd.Series([str(u.document.path) for u in units], index=index, dtype=object),
        "kx_page": pd.Series([u.page for u in units], index=index, dtype="Int64"),
    }
    for column, dtype in (source_dtypes or {}).items():
        cells = [u.document.record.get(column) for u in units]
        data[column] = pd.Series(cells, index=index, dtype=dtype)
    for column in template.columns:
        dtype = template[column].dtype
        cells = [pd.NA if v is None and dtype.kind != "O" else v for v in values[column]]
        data[column] = pd.Series(cells, index=index, dtype=dtype)
    data["kx_chunks"] = pd.Series([len(u.chunks) for u in units], index=index, dtype="int64")
    return pd.DataFrame(data, index=index)


def _unit_error(unit: _Unit, chunk_errors: list[Any]) -> str | None:
    if unit.error is not None:
        return one_line(unit.error)
    errors = [(i, e) for i, e in enumerate(chunk_errors, start=1) if not _missing(e)]
    if not errors:
        return None
    if len(unit.chunks) == 1:
        return str(errors[0][1])
    return "; ".join(f"chunk {i} of {len(unit.chunks)}: {e}" for i, e in errors)
