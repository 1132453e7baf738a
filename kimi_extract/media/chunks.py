"""Pages -> chunks: cutting one row's pages into the pieces it is sent in (pure, no requests).

``plan_chunks(pages, chunk_pages, chunk_chars, overlap)`` cuts a row's pages into chunks of at
most ``chunk_pages`` pages and about ``chunk_chars`` characters (a longer page is split at
paragraph, line, sentence or word boundaries by ``split_text``; rendered pages count 0
characters). A piece of a page is a ``Page`` whose ``offset`` says where its text starts in the
whole page's text.

**Overlap.** With ``chunk_chars``, ``overlap`` is in characters: each chunk after the first
starts with about the last ``overlap`` characters of the text before it (moved back to the
start of their line when that line starts within ``overlap // 4`` characters, else to the start
of a word), so an item of up to ``overlap`` characters that straddles a cut is whole in the
later chunk. The chunks are first cut at ``chunk_chars - overlap`` characters, so a chunk with
its overlap stays within about ``chunk_chars``. With ``chunk_pages`` alone, ``overlap`` is in
pages: consecutive chunks share that many pages. ``overlap=0`` gives the chunks of earlier
releases exactly.

**Context** (``chunk_contexts``): each chunk after the first learns the last line of the chunk
before it and, when it starts inside a table whose header it does not hold, that header (one
pass over the row's text, ``_TableScan``). A table is a run of lines of one shape: cells split
by ``|`` (Markdown, and the ``cell | cell`` lines ``html_to_text`` writes for HTML tables; a
row with fewer cells, its empty ones dropped, belongs too) or by tabs, or (PDF text layers,
whose spaces are single) the same count of numeric tokens per line; up to ``TABLE_GAP_LINES``
lines of another shape (a note, a page's running footer and header) may sit between its rows.
Its header: a Markdown table's row above its rule (with the rule), the first row of a ``|`` or
tab table when it holds no digit, the line of words above the first row of an undelimited one.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np


@dataclass
class Page:
    """One page (or a piece of one): its 1-based number, its text, and a PNG rendering when it
    is sent as an image.

    ``boxes`` (PDF text layers read with ``char_boxes=True``): one row per character of ``text``,
    ``(left, top, right, bottom)`` in PDF points from the page's top-left corner; NaN for a
    character the text layer has no box for (a line break pdfium inserted).
    """

    number: int
    text: str = ""
    image: bytes | None = None
    boxes: np.ndarray | None = field(default=None, repr=False)
    #: Where ``text`` starts in the whole page's text: 0, or more for a piece of a page that
    #: was split into chunks (``chunks.plan_chunks``).
    offset: int = 0


#: (where to cut, what joins the pieces back): a sentence end keeps its full stop on the left.
_BOUNDARIES = (
    (re.compile(r"\n\n"), "\n\n"),
    (re.compile(r"\n"), "\n"),
    (re.compile(r"(?<=[.!?]) "), " "),
    (re.compile(r" "), " "),
)
#: Lines of another shape allowed between two runs of one table's rows on two pages (a page's
#: running footer and header).
TABLE_GAP_LINES = 3
#: The longest previous line or header a chunk's context quotes (longer ones are cut).
CONTEXT_LINE_CHARS = 200
_NUMERIC = re.compile(r"^[(+\-$€£¥]?\d[\d.,:/\-]*%?\)?$")
_MARKDOWN_RULE = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?$")


def split_text(text: str, limit: int) -> list[str]:
    """Cut ``text`` into pieces of at most ``limit`` characters at the widest boundary that works.

    Boundaries tried in order: blank lines, line breaks, sentence ends, spaces, then anywhere.
    Each piece is a substring of ``text`` (``split_offsets`` says where).
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


def split_offsets(text: str, limit: int) -> list[tuple[int, int]]:
    """Where to cut ``text`` into pieces of at most ``limit`` characters, as ``(start, end)``
    offsets: each piece is as long as it can be and ends at the widest boundary (a blank line,
    a line break, a sentence end, a space, in that order) found in its second half, else the
    widest found anywhere in it, else it is cut at ``limit``; the boundary's separator belongs
    to no piece (nor the line breaks right after it), and blank pieces are left out."""
    out: list[tuple[int, int]] = []
    start = 0
    while len(text) - start > limit:
        end = start + limit
        cut, skip = end, 0
        for low in (start + limit // 2, start + 1):  # the second half first, then anywhere
            found = None
            for boundary, separator in _BOUNDARIES:
                matches = [m for m in boundary.finditer(text, low, end + 2) if m.start() <= end]
                if matches:
                    found = matches[-1].start(), len(separator)
                    break
            if found is not None:
                cut, skip = found
                break
        if text[start:cut].strip():
            out.append((start, cut))
        start = cut + skip
        while start < len(text) and text[start] in "\n\r":  # a longer run of line breaks
            start += 1
    if text[start:].strip():
        out.append((start, len(text)))
    return out


#: One piece of a chunk: (the index of its page in the row's pages, start, end in its text).
_Range = tuple[int, int, int]


def plan_chunks(
    pages: list[Page],
    chunk_pages: int | None = None,
    chunk_chars: int | None = None,
    overlap: int = 0,
) -> list[list[Page]]:
    """The chunks one row's pages are sent in (module docstring): at most ``chunk_pages`` pages
    and about ``chunk_chars`` characters each, consecutive chunks sharing ``overlap`` characters
    (with ``chunk_chars``) or pages (with ``chunk_pages`` alone)."""
    if not chunk_chars:
        if not chunk_pages:
            return [pages]
        step = max(1, chunk_pages - overlap)
        windows = []
        for start in range(0, len(pages), step):
            windows.append(pages[start : start + chunk_pages])
            if start + chunk_pages >= len(pages):
                break
        return windows
    limit = max(1, chunk_chars - overlap)
    groups = (
        [
            list(range(i, min(i + chunk_pages, len(pages))))
            for i in range(0, len(pages), chunk_pages)
        ]
        if chunk_pages
        else [list(range(len(pages)))]
    )
    cores: list[list[_Range]] = []
    for group in groups:
        current: list[_Range] = []
        size = 0
        for index in group:
            text = pages[index].text
            if len(text) > limit:
                if current:
                    cores.append(current)
                pieces = split_offsets(text, limit)
                cores += [[(index, a, b)] for a, b in pieces[:-1]]
                a, b = pieces[-1]
                current, size = [(index, a, b)], b - a
                continue
            if current and size + len(text) > limit:
                cores.append(current)
                current, size = [], 0
            current.append((index, 0, len(text)))
            size += len(text)
        if current:
            cores.append(current)
    chunks = [cores[0]] if cores else []
    for number, core in enumerate(cores[1:], start=1):
        chunks.append(_joined([*_tail(pages, cores, number, overlap), *core]) if overlap else core)
    return [[_piece(pages[i], a, b) for i, a, b in chunk] for chunk in chunks]


def _tail(
    pages: Sequence[Page], cores: list[list[_Range]], number: int, overlap: int
) -> list[_Range]:
    """The last ``overlap`` characters of the text before core ``number`` (from as many cores
    before it as it takes), moved back to a line or word start."""
    out: list[_Range] = []
    remaining = overlap
    ranges = (r for n in range(number - 1, -1, -1) for r in reversed(cores[n]))
    for index, start, end in ranges:
        if remaining <= 0:
            break
        if end - start <= remaining:
            out.append((index, start, end))
            remaining -= end - start
            continue
        text = pages[index].text
        cut = end - remaining
        line = text.rfind("\n", start, cut)
        if line >= 0 and cut - (line + 1) <= overlap // 4:
            cut = line + 1
        else:
            space = text.rfind(" ", max(start, cut - 32), cut)
            if space >= 0:
                cut = space + 1
        out.append((index, cut, end))
        remaining = 0
    return [r for r in reversed(out) if r[2] > r[1]]  # (a rendered page is not sent twice)


def _joined(ranges: list[_Range]) -> list[_Range]:
    """Consecutive ranges of one page made one piece again (the cut between them undone)."""
    out: list[_Range] = []
    for index, start, end in ranges:
        if out and out[-1][0] == index and out[-1][2] <= start:
            out[-1] = (index, out[-1][1], end)
        else:
            out.append((index, start, end))
    return out


def _piece(page: Page, start: int, end: int) -> Page:
    if start == 0 and end == len(page.text):
        return page
    boxes = page.boxes[start:end] if page.boxes is not None else None
    return replace(page, text=page.text[start:end], offset=page.offset + start, boxes=boxes)


# -- what a chunk is told about the text before it -------------------------------------------------


@dataclass(frozen=True)
class ChunkContext:
    """What a chunk is told about the chunk before it (None for the first chunk's fields).

    ``previous_line``: the last non-blank line of the chunk before; ``header``: the header row
    (two lines for a Markdown table: the row and its rule) of a table this chunk continues
    whose header it does not hold; ``overlap_text``: the text this chunk shares with the chunk
    before it (its first characters).
    """

    previous_line: str | None = None
    header: str | None = None
    overlap_text: str = ""

    @property
    def shared(self) -> str:
        """All the text this chunk and the one before it both show: the overlap, and the line
        it is told the chunk before ended with (once: with an overlap it is the overlap's
        last line)."""
        line = self.previous_line
        if not line or self.overlap_text.rstrip().endswith(line):
            return self.overlap_text
        return f"{self.overlap_text}\n{line}" if self.overlap_text else line


def reach_back(chunks: Sequence[Sequence[Page]], index: int) -> int:
    """How many chunks before chunk ``index`` share text with it, counting back until one does
    not (at least 1 after the first chunk): an overlap longer than the chunk before it (a short
    page) reaches further back."""

    def ranges(chunk: Sequence[Page]) -> list[tuple[int, int, int]]:
        return [(p.number, p.offset, p.offset + len(p.text)) for p in chunk if p.text]

    mine = ranges(chunks[index])
    back = 0
    for earlier in range(index - 1, -1, -1):
        if not any(
            n == m and a < d and c < b for n, a, b in mine for m, c, d in ranges(chunks[earlier])
        ):
            break
        back = index - earlier
    return max(back, 1) if index else 0


def chunk_contexts(pages: Sequence[Page], chunks: Sequence[Sequence[Page]]) -> list[ChunkContext]:
    """One ``ChunkContext`` per chunk of ``pages`` (``plan_chunks``' output), in order."""
    out = [ChunkContext()]
    tables = _TableScan(pages) if len(chunks) > 1 else None
    for previous, chunk in zip(chunks, chunks[1:], strict=False):
        last = _last_line(previous)
        first = next((p for p in chunk if p.text), None)
        header = None
        if first is not None and tables is not None:
            header = tables.header_at(first.number, first.offset, first.text)
        out.append(ChunkContext(last, header, _shared(previous, chunk)))
    return out


class _TableScan:
    """Which table each line of a row's pages is in, and that table's header: one pass over
    the text (module docstring)."""

    def __init__(self, pages: Sequence[Page]) -> None:
        #: Per line: (page number, where it starts in its page's text), in order.
        self.starts: list[tuple[int, int]] = []
        #: Per line: the table it is in or ends (its row shape and header), if any.
        self.states: list[tuple[tuple[str, int], str | None] | None] = []
        state: tuple[tuple[str, int], str | None] | None = None
        gap = 0
        previous: str | None = None  # the line before, on the same page
        for page in pages:
            offset = 0
            for raw in page.text.split("\n"):
                line = raw.strip()
                self.starts.append((page.number, offset))
                offset += len(raw) + 1
                if not line:
                    self.states.append(state)
                    continue
                shape = row_shape(line)
                if _MARKDOWN_RULE.match(line) and previous is not None:
                    above = row_shape(previous)
                    state = (above, _cut(previous) + "\n" + line) if above else state
                    gap = 0
                elif shape is not None and state is not None and _continues(state[0], shape):
                    gap = 0
                elif shape is not None:
                    state, gap = (shape, _first_header(shape, line, previous)), 0
                elif state is not None:
                    gap += 1
                    if gap > TABLE_GAP_LINES:
                        state = None
                self.states.append(state)
                previous = line
            previous = None

    def header_at(self, page: int, offset: int, text: str) -> str | None:
        """The header of the table a chunk starting at ``offset`` of ``page`` (its first piece's
        text ``text``) continues, when the chunk does not hold it."""
        at = bisect.bisect_right(self.starts, (page, offset)) - 1  # the line the chunk starts in
        state = self.states[at - 1] if at > 0 else None
        if state is None or state[1] is None:
            return None
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        first = next(
            (row_shape(line) for line in lines[: TABLE_GAP_LINES + 1] if row_shape(line)), None
        )
        if first is None or not _continues(state[0], first):
            return None
        if state[1].split("\n")[0] in lines[: TABLE_GAP_LINES + 2]:
            return None  # the chunk holds the header itself
        return state[1]


def _continues(table: tuple[str, int], shape: tuple[str, int]) -> bool:
    """Whether a line of ``shape`` is a row of a table whose rows have ``table``'s shape."""
    if table[0] != shape[0]:
        return False
    return shape[1] == table[1] if shape[0] == "#" else shape[1] <= table[1]


def _first_header(shape: tuple[str, int], line: str, previous: str | None) -> str | None:
    """The header of a table whose first row-shaped line is ``line`` (``previous``: the line
    above it): a ``|`` or tab line without digits is its own header; undelimited rows have
    theirs above them."""
    if shape[0] in ("|", "\t"):
        return _cut(line) if not any(c.isdigit() for c in line) else None
    if previous is not None and _header_like(previous, shape[1]):
        return _cut(previous)
    return None


def _last_line(chunk: Sequence[Page]) -> str | None:
    for page in reversed(chunk):
        lines = [line.strip() for line in page.text.splitlines() if line.strip()]
        if lines:
            return _cut(lines[-1])
    return None


def _shared(previous: Sequence[Page], chunk: Sequence[Page]) -> str:
    """The text at the start of ``chunk`` that ``previous`` also holds."""
    shared: list[str] = []
    ends = {(p.number): (p.offset, p.offset + len(p.text)) for p in previous if p.text}
    for page in chunk:
        held = ends.get(page.number)
        if held is None or not page.text:
            break
        start, end = max(page.offset, held[0]), min(page.offset + len(page.text), held[1])
        if end <= start:
            break
        shared.append(page.text[start - page.offset : end - page.offset])
    return "\n\n".join(shared)


def _cut(line: str) -> str:
    return line if len(line) <= CONTEXT_LINE_CHARS else line[: CONTEXT_LINE_CHARS - 1] + "…"


def row_shape(line: str) -> tuple[str, int] | None:
    """The shape of a table row: cells split by ``|`` or tabs (``("|", cells)``), else the
    count of numeric tokens when there are at least two (``("#", count)``); None for a line
    that does not look like a row."""
    text = line.strip()
    if not text:
        return None
    if "|" in text:
        inner = text.strip("|")
        cells = inner.split("|")
        if len(cells) >= 2:
            return ("|", len(cells))
    if "\t" in text:
        cells = text.split("\t")
        if len(cells) >= 2:
            return ("\t", len(cells))
    numbers = sum(1 for token in text.split() if _NUMERIC.match(token))
    return ("#", numbers) if numbers >= 2 else None


def _header_like(line: str, numbers: int) -> bool:
    """A line of column names for rows with ``numbers`` numeric cells: no digit, no colon (a
    label), at most 16 words and more words than numeric cells."""
    words = line.split()
    return not any(c.isdigit() for c in line) and ":" not in line and numbers < len(words) <= 16
