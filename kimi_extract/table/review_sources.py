"""The documents a review page reads again (``kx_source``): where it may read them, their page
texts, and their rendered PDF pages with the evidence boxes.

A table can come from someone else, and its ``kx_source`` column names files: read blindly, it
would pull a reviewer's own files into a page they may pass on. So only regular files under one
directory, the *documents root*, are read: by default the current directory for ``kx.review`` and
the table's own directory for ``kimi-extract review``; ``documents_root=`` (CLI
``--documents-root``) names another one, ``"/"`` allows any file. Paths are compared after
resolving symbolic links, so a link inside the root to a file outside it is not followed. A
source that is refused or unreadable shows its reason on its card; nothing is fatal.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..exceptions import ConfigurationError, MediaError, install_hint
from ..media.documents import load_pages
from ..media.formats import png_bytes

OUTSIDE = "outside the documents root"


def resolve_root(root: str | os.PathLike[str] | None) -> Path:
    """The resolved directory documents are read from (None: the current directory);
    ``ConfigurationError`` naming ``documents_root`` when it is not an existing directory."""
    if root is None:
        root = os.getcwd()
    if not isinstance(root, str | os.PathLike):
        raise ConfigurationError(
            f"documents_root= takes a directory path, got {type(root).__name__}"
        )
    try:
        resolved = Path(os.path.realpath(root))
        is_dir = resolved.is_dir()
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"documents_root={root!r} cannot be used: {exc}") from None
    if not is_dir:
        raise ConfigurationError(f"documents_root={root!r} is not an existing directory")
    return resolved


def allowed_path(source: str, root: Path) -> tuple[Path | None, str | None]:
    """(the file to read, None) or (None, why it is not read): a NUL or an unencodable name,
    a path outside ``root`` (after resolving links), a missing file or not a regular file."""
    shown = source if len(source) <= 300 else source[:300] + "…"
    if "\0" in source:
        return None, f"not read: the document path {shown!r} holds a NUL character"
    try:
        real = Path(os.path.realpath(source))
        inside = real == root or real.is_relative_to(root)
        if inside and not real.exists():
            return None, f"document not found: {shown}"
        if inside and not real.is_file():
            return None, f"not read: {shown} is not a regular file"
    except (OSError, ValueError) as exc:  # an unencodable or overlong name
        return None, f"not read: the document path {shown!r} cannot be used ({exc})"
    if not inside:
        return None, (
            f"not read: {shown} is {OUTSIDE} {root}; pass documents_root= "
            "(kimi-extract review --documents-root DIR) to read documents there"
        )
    return real, None


@dataclass
class ReadDocument:
    """A document read again: its page texts, and its rendered pages (lazily, by number)."""

    path: Path | None
    texts: dict[int, str] = field(default_factory=dict)
    images: dict[int, int | None] = field(default_factory=dict)  # page -> index in images
    sizes: dict[int, tuple[float, float]] = field(default_factory=dict)  # page -> points (w, h)
    error: str | None = None
    outside: bool = False  # refused: outside the documents root


def read_document(source: str, root: Path) -> ReadDocument:
    """The page texts of ``source`` (as the run sent them: the text layer for PDFs), or a
    ``ReadDocument`` whose ``error`` says why not."""
    path, refused = allowed_path(source, root)
    if path is None:
        return ReadDocument(None, error=refused, outside=OUTSIDE in str(refused))
    document = ReadDocument(path)
    try:
        _, pages = load_pages(path, pdf_mode="text")
        document.texts = {p.number: p.text for p in pages}
    except MediaError as exc:
        document.error = str(exc)
    except Exception as exc:  # noqa: BLE001 - a corrupt file shows its reason on the card
        document.error = f"cannot read {source}: {type(exc).__name__}: {exc}"
    return document


def render_pdf_pages(
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
                if not (width_pt > 0 and height_pt > 0):
                    continue
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


def page_fractions(
    boxes: Sequence[Sequence[float]], size: tuple[float, float]
) -> list[list[float]]:
    """Boxes in PDF points -> fractions of the page (what the page's script positions by),
    merged per line and clipped to the page."""
    width, height = size
    out = []
    for left, top, right, bottom in merge_boxes(boxes):
        box = [left / width, top / height, right / width, bottom / height]
        box = [min(max(v, 0.0), 1.0) for v in box]
        if box[2] > box[0] and box[3] > box[1]:
            out.append(box)
    return out
