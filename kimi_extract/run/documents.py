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
  count 0 characters; ``kimi_extract.media.chunks``). ``chunk_overlap``: consecutive chunks share
  that many characters (with ``chunk_chars``; default ``DEFAULT_OVERLAP_SHARE`` of it, at most
  ``MAX_DEFAULT_OVERLAP``) or pages (``chunk_pages`` alone; default 0), at most half a chunk, so
  an item cut by one chunk's end is whole in the next. Each chunk after the first is told, in a
  short fixed preamble (``_chunk_text``), the last line of the chunk before it and, when it
  starts inside a table whose header it lacks, that header row.
- Merging a document's chunks (``kimi_extract.run.merge``): list items found in several chunks
  (or passes) are kept once, in the order they first occur (with grounding: their spans overlap
  and their fields agree; without: their fields agree, ``dedupe_on=["sku", ...]`` naming the
  key fields, and they sit in the text the chunks share); ``dedupe_on=[]`` keeps every item
  (lists concatenated). Scalars follow ``merge={"path": "first" | "last" | "most_grounded" |
  "all"}`` (default "first"); chunks that disagree on a value are listed in ``kx_conflicts``.
  Token and cost columns are summed over the chunks, ``kx_chunks`` says how many there were,
  ``kx_duplicates_removed`` how many items were dropped as repeats, and ``kx_error`` names the
  chunks that failed (the others still contribute their values).
- ``passes=N`` (default 1): each chunk's conversation goes on with up to N - 1 follow-up turns
  asking for the list items it missed (``kimi_extract.run.passes``), stopping early when one adds
  nothing; ``kx_passes`` is the most passes a chunk ran, ``kx_items_by_pass`` the merged items
  each pass found first.
- ``explode="field"``: one row per item of that list field (see ``kimi_extract.table.explode``).
- ``grounding=True`` (the extractor's setting): each chunk's answer (its passes' items together)
  is aligned to the pages it was sent, each span with its ``page``, offsets into that page's
  whole text, and on PDF text layers the boxes of its lines
  (``kimi_extract.run.grounding.ground_pages``); the merged answer keeps the spans of the
  values it kept. With ``grounding="quotes"`` each chunk's answer is checked through its quotes
  as it comes back, and again through them in its pages.

The output frame is built by ``kimi_extract.table.documents``.

A document that cannot be read becomes a row whose ``kx_error`` says why; no request is sent for it.
Ctrl-C and run-stopping errors carry the document rows so far (``partial``), as ``run`` does.
"""

from __future__ import annotations

import asyncio
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel

from ..exceptions import ConfigurationError, EmptyInputError
from ..ground import Interrupted, Work
from ..media.chunks import ChunkContext, chunk_contexts
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
from ..records import Gleaning, RowInput, RowResult, Usage, is_missing
from .conversation import one_line
from .document_merge import UnitOutcome, merge_unit
from .grounding import _unwrap, field_paths
from .inputs import BlockingRows, TextSpec, make_row
from .merge import SCALAR_RULES
from .report import PassStats

#: ``chunk_overlap`` default with ``chunk_chars``: this share of a chunk...
DEFAULT_OVERLAP_SHARE = 0.1
#: ... and at most this many characters.
MAX_DEFAULT_OVERLAP = 1_000
#: The most passes ``passes=`` accepts.
MAX_PASSES = 10


@dataclass
class DocumentUnit:
    """One output row: a document or a page, with the chunks it is sent in and what each chunk
    is told about the one before it (``contexts``)."""

    document: Document
    page: int | None
    chunks: list[list[Page]]
    error: Exception | None = None  # why it is not sent (unreadable, nothing to send)
    contexts: list[ChunkContext] = field(default_factory=list)

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
        if len(self.contexts) != len(self.chunks):
            self.contexts = chunk_contexts(self.pages(), self.chunks)

    def pages(self) -> list[Page]:
        """The unit's whole pages (a chunk may hold a piece of one), in order."""
        if self.page is not None:
            return [p for p in self.document.pages if p.number == self.page]
        return list(self.document.pages)


@dataclass
class DocumentPlan:
    """The documents of one ``run_documents`` call and the rows their chunks are sent as.

    ``plan_documents`` checks the options and names the documents; ``load`` reads them (in a
    worker thread) and plans the units; ``rows`` are the chunk rows for the scheduler, in order;
    ``merge`` turns the chunk results back into one result per unit (and ``outcomes``: what each
    merge removed, the conflicts it found, what each pass added).
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
    #: Characters (with ``chunk_chars``) or pages (``chunk_pages`` alone) consecutive chunks share.
    chunk_overlap: int = 0
    #: Answers per chunk (``run.passes``); 1: no follow-up.
    passes: int = 1
    #: Scalar field path -> merge rule (``run.merge``).
    merge_rules: Mapping[str, str] = field(default_factory=dict)
    #: Key fields of list items (None: every field; (): no merging).
    dedupe_on: tuple[str, ...] | None = None
    #: Per unit, after ``merge``: duplicates removed, conflicts, passes (``UnitOutcome``).
    outcomes: list[UnitOutcome] = field(default_factory=list)

    @property
    def chunked(self) -> bool:
        """Whether the documents were cut into chunks (the frame then has ``kx_chunks`` ...)."""
        return self.chunk_pages is not None or self.chunk_chars is not None

    def pass_stats(self) -> tuple[PassStats, ...]:
        """Per pass, over every unit of the last ``merge``: the items it found first, its usage."""
        count = max((len(o.pass_usage) for o in self.outcomes), default=0)
        stats = []
        for number in range(count):
            items = sum(
                o.items_by_pass[number] for o in self.outcomes if number < len(o.items_by_pass)
            )
            usage = sum(
                (o.pass_usage[number] for o in self.outcomes if number < len(o.pass_usage)), Usage()
            )
            stats.append(PassStats(number + 1, items, usage))
        return tuple(stats)

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
        self.units = _plan(
            self.documents, self.per_page, self.chunk_pages, self.chunk_chars, self.chunk_overlap
        )

    def rows(self) -> Iterator[RowInput]:
        """One row per chunk, positions 0, 1, 2, ... in unit order (images encoded lazily)."""
        spec = TextSpec(columns=("text",))
        gleaning = Gleaning(self.passes, self.dedupe_on) if self.passes > 1 else None

        def rows() -> Iterator[RowInput]:
            position = 0
            for unit in self.units:
                if unit.error is not None:
                    continue
                for number, chunk in enumerate(unit.chunks, start=1):
                    pictures = [p.image for p in chunk if p.image is not None]
                    record = {"text": _chunk_text(unit, chunk, number), "images": pictures}
                    images = "images" if pictures else None
                    row = make_row(position, position, record, spec, images, media=self.media)
                    row.gleaning = gleaning
                    yield row
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
        docstring and ``run.merge``): items found once, scalars by rule, usage / attempts /
        latency / web searches summed, errors named per chunk. A chunk without a result (the
        run stopped first) has ``stop_reason``. ``grounding``: each chunk's answer aligned to
        its pages (``"quotes"``: through the quotes its result carries); the merged value keeps
        its values' spans. ``work``: once stopped (Ctrl-C), the units not grounded yet are left
        without spans. Fills ``outcomes``."""
        by_position = {r.position: r for r in results}
        merged: list[RowResult] = []
        self.outcomes = []
        position = 0
        for index, unit in enumerate(self.units):
            result = RowResult(label=unit.document.label, position=index)
            merged.append(result)
            outcome = UnitOutcome()
            self.outcomes.append(outcome)
            if unit.error is not None:
                result.error = one_line(unit.error)
                continue
            chunks = [
                by_position.get(position + i)
                or RowResult(label=position + i, position=position + i, error=stop_reason)
                for i in range(len(unit.chunks))
            ]
            position += len(unit.chunks)
            ground = bool(grounding) and not (work is not None and work.stopped)
            try:
                merge_unit(
                    unit.chunks,
                    unit.contexts,
                    unit.pages(),
                    chunks,
                    result,
                    outcome,
                    model,
                    rules=self.merge_rules,
                    dedupe_on=self.dedupe_on,
                    grounding=grounding if ground else False,
                    grounding_fields=grounding_fields,
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


def plan_documents(
    sources: Any,
    *,
    media: MediaOptions,
    pdf_mode: PdfMode = "auto",
    pages: PageSpec = None,
    per_page: bool = False,
    chunk_pages: int | None = None,
    chunk_chars: int | None = None,
    chunk_overlap: int | None = None,
    passes: int = 1,
    merge: Mapping[str, str] | None = None,
    dedupe_on: Sequence[str] | None = None,
    path_column: str = "path",
    recursive: bool = False,
    max_image_pixels: int | None | Literal["default"] = "default",
) -> DocumentPlan:
    """Check the options and name the documents (nothing is read yet); ``ConfigurationError``
    or ``InputError``. ``media``: the run's media options; ``max_image_pixels`` other than
    "default" replaces theirs (for rendered pages and images alike). The output model's own
    checks of ``merge`` and ``dedupe_on``: ``check_merge_options``."""
    if pdf_mode not in ("auto", "text", "images"):
        raise ConfigurationError(f"pdf_mode must be 'auto', 'text' or 'images', got {pdf_mode!r}")
    for name, value in (("chunk_pages", chunk_pages), ("chunk_chars", chunk_chars)):
        if value is not None and (not _whole(value) or value < 1):
            raise ConfigurationError(f"{name} must be a positive integer, got {value!r}")
    overlap = _overlap(chunk_pages, chunk_chars, chunk_overlap)
    if not _whole(passes) or not 1 <= passes <= MAX_PASSES:
        raise ConfigurationError(
            f"passes must be an integer from 1 to {MAX_PASSES}, got {passes!r}"
        )
    rules = dict(merge or {})
    if not isinstance(merge, Mapping | None):
        raise ConfigurationError(f"merge must map field paths to rules, got {merge!r}")
    for path, rule in rules.items():
        if rule not in SCALAR_RULES:
            raise ConfigurationError(
                f"merge[{path!r}] must be one of {', '.join(SCALAR_RULES)}, got {rule!r}"
            )
    keys: tuple[str, ...] | None = None
    if dedupe_on is not None:
        if isinstance(dedupe_on, str) or not all(isinstance(k, str) for k in dedupe_on):
            raise ConfigurationError(
                f"dedupe_on must be a list of field names (e.g. ['sku']), got {dedupe_on!r}"
            )
        keys = tuple(dedupe_on)
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
        chunk_overlap=overlap,
        passes=passes,
        merge_rules=rules,
        dedupe_on=keys,
    )


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _overlap(chunk_pages: int | None, chunk_chars: int | None, overlap: int | None) -> int:
    """``chunk_overlap`` checked (at most half a chunk), or its default (module docstring)."""
    if overlap is None:
        if chunk_chars:
            return min(MAX_DEFAULT_OVERLAP, int(chunk_chars * DEFAULT_OVERLAP_SHARE))
        return 0
    size, unit = (chunk_chars, "characters") if chunk_chars else (chunk_pages, "pages")
    if not _whole(overlap) or overlap < 0:
        raise ConfigurationError(f"chunk_overlap must be an integer >= 0, got {overlap!r}")
    if overlap and size is None:
        raise ConfigurationError("chunk_overlap needs chunk_chars (characters) or chunk_pages")
    if size is not None and 2 * overlap > size:
        raise ConfigurationError(
            f"chunk_overlap={overlap} {unit} is more than half a chunk ({size} {unit}); "
            "consecutive chunks would share text with the one after next"
        )
    return overlap


def check_merge_options(plan: DocumentPlan, model: type[BaseModel]) -> None:
    """``merge`` must name fields outside lists, ``dedupe_on`` fields of list items, and
    ``passes > 1`` needs a list field (``ConfigurationError`` naming the setting)."""
    paths = field_paths(model)
    lists = _list_paths(model)
    for path in plan.merge_rules:
        if path not in paths or any(path.startswith(p + ".") or path == p for p in lists):
            raise ConfigurationError(
                f"merge names {path!r}, which is not a field of {model.__name__} outside a "
                f"list (fields: {', '.join(p for p in paths if p not in lists)[:300]})"
            )
    item_fields = {p for p in paths for lst in lists if p.startswith(lst + ".")}
    bare = {p.rsplit(".", 1)[-1] for p in item_fields}
    for name in plan.dedupe_on or ():
        if name not in item_fields and name not in bare:
            raise ConfigurationError(
                f"dedupe_on names {name!r}, which is not a field of a list item of "
                f"{model.__name__} (list items' fields: {', '.join(sorted(item_fields))[:300]})"
            )
    if plan.passes > 1 and not lists:
        raise ConfigurationError(
            f"passes={plan.passes} asks for missed list items, but {model.__name__} has no list "
            "field; use passes=1"
        )


def _list_paths(model: type[BaseModel]) -> list[str]:
    """The field paths of ``model`` that hold lists (or tuples, sets)."""
    out: list[str] = []

    def walk(kind: type[BaseModel], prefix: str, depth: int) -> None:
        if depth > 16:
            return
        for name, info in kind.model_fields.items():
            path = f"{prefix}.{name}" if prefix else name
            annotation = info.annotation
            origins = {typing.get_origin(a) for a in _flat(annotation)}
            if origins & {list, tuple, set, frozenset}:
                out.append(path)
            for sub in _unwrap(annotation):
                if isinstance(sub, type) and issubclass(sub, BaseModel):
                    walk(sub, path, depth + 1)

    walk(model, "", 0)
    return out


def _flat(annotation: Any) -> list[Any]:
    """The types of a union (``Annotated`` opened), lists left whole."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _flat(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [a for arg in typing.get_args(annotation) for a in _flat(arg)]
    return [annotation]


def _plan(
    documents: list[Document],
    per_page: bool,
    chunk_pages: int | None,
    chunk_chars: int | None,
    overlap: int = 0,
) -> list[DocumentUnit]:
    units: list[DocumentUnit] = []
    for document in documents:
        if document.error is not None:
            units.append(DocumentUnit(document, None, []))
        elif per_page:
            units += [
                DocumentUnit(document, page.number, plan_chunks([page], None, chunk_chars, overlap))
                for page in document.pages
            ]
        else:
            units.append(
                DocumentUnit(
                    document, None, plan_chunks(document.pages, chunk_pages, chunk_chars, overlap)
                )
            )
    return units


def _pages_label(numbers: list[int]) -> str:
    first, last = numbers[0], numbers[-1]
    return f"page {first}" if first == last else f"pages {first}-{last}"


def preamble(context: ChunkContext, number: int) -> list[str]:
    """What a chunk after the first is told about the one before it (the module docstring)."""
    lines = []
    if context.previous_line:
        lines.append(f"Part {number - 1} ended with: {context.previous_line}")
    if context.header:
        lines.append(f"This part continues a table with the header:\n{context.header}")
    return lines


def _chunk_text(unit: DocumentUnit, chunk: list[Page], number: int) -> str:
    """The chunk's text: a header naming the document and pages, what the chunk before it
    ended with (``preamble``), then each page's text."""
    document = unit.document
    numbers = [p.number for p in chunk]
    header = f"Document: {document.name}"
    if document.page_count > 1:
        header += f" ({_pages_label(numbers)} of {document.page_count})"
    if len(unit.chunks) > 1:
        header += f", part {number} of {len(unit.chunks)}"
        if number > 1 and number - 1 < len(unit.contexts):
            header = "\n".join([header, *preamble(unit.contexts[number - 1], number)])
    blocks = [header]
    several = len(set(numbers)) > 1
    for page in chunk:
        body = page.text if page.image is None else "(this page is attached as an image)"
        blocks.append(f"--- page {page.number} ---\n{body}" if several else body)
    return "\n\n".join(b for b in blocks if b)


# -- results ---------------------------------------------------------------------------------------


def merge_values(values: Sequence[Any]) -> Any:
    """Merge one field's values from successive chunks the simplest way: lists concatenate,
    nested models (and dicts) merge key by key by the same rule, anything else is the first
    non-null value (``dedupe_on=[]`` with the "first" rule; ``run.merge`` does the rest)."""
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


__all__ = [
    "DocumentPlan",
    "DocumentUnit",
    "check_merge_options",
    "merge_values",
    "plan_documents",
]
