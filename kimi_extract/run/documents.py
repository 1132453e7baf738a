"""Documents -> extraction rows: .txt, .md, .html and .pdf files, per document or per page.

``Extractor.run_documents(sources, ...)`` reads each document into pages, cuts them into chunks
when asked (``kimi_extract.media.documents``), sends every chunk as one row of a single run (so
chunks share the concurrency, the budget, the result store and the cached prompt prefix), and
merges each document's chunk results back into one row (``DocumentPlan.merge``):

- ``.txt`` / ``.md``: the text (a .txt is split into pages at form feeds ``\\f``); ``.html``: its
  visible text (tables as ``cell | cell`` lines); ``.pdf`` (``pip install -e '.[pdf]'``):
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
- ``grounding=True`` (the extractor's setting): the merged answer's leaves are aligned to the
  unit's pages, each span with its ``page``, offsets into that page's text, and on PDF text
  layers the boxes of its lines (``kimi_extract.run.grounding.ground_pages``). With
  ``grounding="quotes"`` each chunk's answer is checked through its quotes as it comes back,
  and the merged answer's leaves take their chunks' quotes (``merged_quotes``).

The output frame is built by ``kimi_extract.table.documents``.

A document that cannot be read becomes a row whose ``kx_error`` says why; no request is sent for it.
Ctrl-C and run-stopping errors carry the document rows so far (``partial``), as ``run`` does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel

from ..exceptions import ConfigurationError, EmptyInputError
from ..ground import Interrupted, Work
from ..media.documents import (
    Document,
    Page,
    PageSpec,
    PdfMode,
    collect_sources,
    load_all,
    page_selector,
    plan_chunks,
)
from ..media.parts import MediaOptions
from ..records import RowInput, RowResult, Usage, is_missing
from .conversation import one_line
from .grounding import ground_pages, merged_quotes
from .inputs import BlockingRows, TextSpec, make_row


@dataclass
class DocumentUnit:
    """One output row: a document or a page, with the chunks it is sent in."""

    document: Document
    page: int | None
    chunks: list[list[Page]]
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


@dataclass
class DocumentPlan:
    """The documents of one ``run_documents`` call and the rows their chunks are sent as.

    ``plan_documents`` checks the options and names the documents; ``load`` reads them (in a
    worker thread) and plans the units; ``rows`` are the chunk rows for the scheduler, in order;
    ``merge`` turns the chunk results back into one result per unit.
    """

    documents: list[Document]
    pdf_mode: PdfMode
    select: Any
    per_page: bool
    chunk_pages: int | None
    chunk_chars: int | None
    #: How chunk images are encoded; ``max_image_pixels`` also sizes rendered PDF pages.
    media: MediaOptions
    units: list[DocumentUnit] = field(default_factory=list)

    @property
    def chunk_count(self) -> int:
        """How many rows the run sends (units that cannot be sent have none)."""
        return sum(len(unit.chunks) for unit in self.units if unit.error is None)

    async def load(self, *, char_boxes: bool = False) -> None:
        """Read every document's selected pages (blocking work, in a thread); plan the units.

        ``char_boxes``: keep PDF text layers' character boxes (for grounding)."""
        pixels = self.media.max_image_pixels
        await asyncio.to_thread(
            load_all, self.documents, self.pdf_mode, self.select, pixels, char_boxes=char_boxes
        )
        self.units = _plan(self.documents, self.per_page, self.chunk_pages, self.chunk_chars)

    def rows(self) -> Iterator[RowInput]:
        """One row per chunk, positions 0, 1, 2, ... in unit order (images encoded lazily)."""
        spec = TextSpec(columns=("text",))

        def rows() -> Iterator[RowInput]:
            position = 0
            for unit in self.units:
                if unit.error is not None:
                    continue
                for number, chunk in enumerate(unit.chunks, start=1):
                    pictures = [p.image for p in chunk if p.image is not None]
                    record = {"text": _chunk_text(unit, chunk, number), "images": pictures}
                    images = "images" if pictures else None
                    yield make_row(position, position, record, spec, images, media=self.media)
                    position += 1

        has_images = any(p.image is not None for d in self.documents for p in d.pages)
        return BlockingRows(rows()) if has_images else rows()

    def merge(
        self,
        results: Sequence[RowResult],
        model: type[BaseModel],
        stop_reason: str,
        *,
        grounding: bool | str = False,
        grounding_fields: Mapping[str, bool] | None = None,
        work: Work | None = None,
    ) -> list[RowResult]:
        """One result per unit from its chunks' results (in chunk order; see the module
        docstring): fields merged, usage / attempts / latency / web searches summed, errors
        named per chunk. A chunk without a result (the run stopped first) has ``stop_reason``.
        ``grounding``: the merged value's spans in the unit's pages (``ground_pages``);
        ``"quotes"``: checked through the quotes of its chunks (``merged_quotes``; the chunks'
        results carry their spans). ``work``: once stopped (Ctrl-C), the units not grounded yet
        are left without spans."""
        by_position = {r.position: r for r in results}
        merged: list[RowResult] = []
        position = 0
        for index, unit in enumerate(self.units):
            result = RowResult(label=unit.document.label, position=index)
            merged.append(result)
            if unit.error is not None:
                result.error = one_line(unit.error)
                continue
            chunks = [
                by_position.get(position + i)
                or RowResult(label=position + i, position=position + i, error=stop_reason)
                for i in range(len(unit.chunks))
            ]
            position += len(unit.chunks)
            values = [c.value for c in chunks if c.value is not None]
            if values:
                fields = {
                    name: merge_values([getattr(v, name) for v in values])
                    for name in model.model_fields
                }
                # Not validated: a merge of valid chunks (e.g. a concatenated list) may break a
                # constraint no single chunk broke; the frame reads the attributes only.
                result.value = model.model_construct(**fields)
                if grounding and not (work is not None and work.stopped):
                    quotes = None
                    if grounding == "quotes":
                        parts = [(c.value, c.spans or ()) for c in chunks if c.value is not None]
                        quotes = merged_quotes(parts, result.value)
                    try:
                        result.spans = ground_pages(
                            self._unit_pages(unit),
                            result.value,
                            quotes,
                            fields=grounding_fields,
                            work=work,
                        )
                    except Interrupted:
                        result.spans = None
            for chunk in chunks:
                result.usage = result.usage + chunk.usage
                result.attempts += chunk.attempts
                result.latency_s += chunk.latency_s
                result.web_searches += chunk.web_searches
                if chunk.saved is not None:
                    result.saved = (result.saved or Usage()) + chunk.saved
            result.from_store = all(c.from_store for c in chunks)
            result.error = _chunks_error(len(unit.chunks), [c.error for c in chunks])
        return merged

    @staticmethod
    def _unit_pages(unit: DocumentUnit) -> list[Page]:
        """The unit's whole pages (a chunk may hold a piece of one), in order."""
        if unit.page is not None:
            return [p for p in unit.document.pages if p.number == unit.page]
        return list(unit.document.pages)


def plan_documents(
    sources: Any,
    *,
    media: MediaOptions,
    pdf_mode: PdfMode = "auto",
    pages: PageSpec = None,
    per_page: bool = False,
    chunk_pages: int | None = None,
    chunk_chars: int | None = None,
    path_column: str = "path",
    recursive: bool = False,
    max_image_pixels: int | None | Literal["default"] = "default",
) -> DocumentPlan:
    """Check the options and name the documents (nothing is read yet); ``ConfigurationError``
    or ``InputError``. ``media``: the run's media options; ``max_image_pixels`` other than
    "default" replaces theirs (for rendered pages and images alike)."""
    if pdf_mode not in ("auto", "text", "images"):
        raise ConfigurationError(f"pdf_mode must be 'auto', 'text' or 'images', got {pdf_mode!r}")
    for name, value in (("chunk_pages", chunk_pages), ("chunk_chars", chunk_chars)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ConfigurationError(f"{name} must be a positive integer, got {value!r}")
    select = page_selector(pages)
    documents = collect_sources(sources, path_column=path_column, recursive=recursive)
    if max_image_pixels != "default":
        media = replace(media, max_image_pixels=max_image_pixels)
    return DocumentPlan(
        documents=documents,
        pdf_mode=pdf_mode,
        select=select,
        per_page=per_page,
        chunk_pages=chunk_pages,
        chunk_chars=chunk_chars,
        media=media,
    )


def _plan(
    documents: list[Document], per_page: bool, chunk_pages: int | None, chunk_chars: int | None
) -> list[DocumentUnit]:
    units: list[DocumentUnit] = []
    for document in documents:
        if document.error is not None:
            units.append(DocumentUnit(document, None, []))
        elif per_page:
            units += [
                DocumentUnit(document, page.number, plan_chunks([page], None, chunk_chars))
                for page in document.pages
            ]
        else:
            units.append(
                DocumentUnit(document, None, plan_chunks(document.pages, chunk_pages, chunk_chars))
            )
    return units


def _pages_label(numbers: list[int]) -> str:
    first, last = numbers[0], numbers[-1]
    return f"page {first}" if first == last else f"pages {first}-{last}"


def _chunk_text(unit: DocumentUnit, chunk: list[Page], number: int) -> str:
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


def merge_values(values: Sequence[Any]) -> Any:
    """Merge one field's values from successive chunks: lists concatenate, nested models (and
    dicts) merge key by key by the same rule, anything else is the first non-null value."""
    present = [v.model_dump() if isinstance(v, BaseModel) else v for v in values]
    present = [v for v in present if not is_missing(v)]
    if not present:
        return None
    if all(isinstance(v, list) for v in present):
        return [item for v in present for item in v]
    if all(isinstance(v, dict) for v in present):
        keys = list(dict.fromkeys(k for v in present for k in v))
        return {k: merge_values([v.get(k) for v in present]) for k in keys}
    return present[0]


def _chunks_error(count: int, errors: list[str | None]) -> str | None:
    """The unit's ``kx_error``: its one chunk's error, or each failed chunk's, numbered."""
    failed = [(i, e) for i, e in enumerate(errors, start=1) if e is not None]
    if not failed:
        return None
    if count == 1:
        return failed[0][1]
    return "; ".join(f"chunk {i} of {count}: {e}" for i, e in failed)
