"""Turn user data into rows: text rendering and image content parts.

Accepted data: a DataFrame (``text=`` column, list of columns, or ``template=``), a Series, a list
of strings, a list of dicts, or any iterable of those items. Each row becomes a ``RowInput`` whose
``content`` is a string (text only) or a list of content parts (images first, then the text, as in
the seed's multimodal example).

Images (``images=`` column): a cell is a local path (str or ``pathlib.Path``), bytes, a ``data:``
URL, an http(s) URL, or a list of these. Local data is sent as a base64 data URL with the MIME type
read from the file's magic bytes (png, jpeg, webp, gif); URLs are passed through unchanged.
"""

from __future__ import annotations

import base64
import itertools
import math
import string
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from .exceptions import EmptyInputError, InputError, MediaError

Content = str | list[dict[str, Any]]

_IMAGE_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
_IMAGE_EXTENSIONS = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}


def is_missing(value: Any) -> bool:
    """True for None, NaN, pd.NA and NaT (not for empty strings)."""
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, float) and math.isnan(value)


@dataclass
class RowInput:
    """One row ready to send: its index label, position, and content or the reason it has none."""

    label: Hashable
    position: int
    content: Content | None = None
    error: Exception | None = None
    #: The input values of the row, kept for streaming outputs (``run_to``, generator input).
    record: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class TextSpec:
    """How a row's text is made: one column, several labelled columns, or a template."""

    columns: tuple[str, ...] = ()
    template: str | None = None

    @classmethod
    def build(
        cls, *, text: str | Sequence[str] | None, template: str | None, available: Sequence[str]
    ) -> TextSpec:
        """Check ``text``/``template`` against the available columns; raise ``InputError``."""
        if text is not None and template is not None:
            raise InputError("pass either text= or template=, not both")
        if template is not None:
            fields = template_fields(template)
            unknown = [f for f in fields if f not in available]
            if unknown:
                raise InputError(
                    f"template field(s) {unknown} are not columns of the input; "
                    f"available columns: {list(available)}"
                )
            return cls(columns=tuple(fields), template=template)
        if text is None:
            return cls(columns=tuple(available))
        columns = (text,) if isinstance(text, str) else tuple(text)
        unknown = [c for c in columns if c not in available]
        if unknown:
            raise InputError(
                f"text column(s) {unknown} not found; available columns: {list(available)}"
            )
        return cls(columns=columns)

    def render(self, record: Mapping[str, Any]) -> str | None:
        """The row's text, or None when every referenced value is missing or blank."""
        values = {c: record.get(c) for c in self.columns}
        present = {c: v for c, v in values.items() if not is_missing(v) and str(v).strip()}
        if not present:
            return None
        if self.template is not None:
            return self.template.format_map(
                {c: "" if c not in present else v for c, v in values.items()}
            )
        if len(self.columns) == 1:
            return str(present[self.columns[0]])
        return "\n".join(f"{c}: {v}" for c, v in present.items())


def template_fields(template: str) -> list[str]:
    """Field names used by a ``str.format`` template, in order, without duplicates."""
    names: list[str] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise InputError(f"template is not a valid format string: {exc}") from None
    for _, field, _, _ in parsed:
        if field is None:
            continue
        if not field or field.isdigit():
            raise InputError("template fields must be named, e.g. 'Title: {title}'")
        base = field.split(".")[0].split("[")[0]
        if base not in names:
            names.append(base)
    return names


@dataclass
class PreparedInput:
    """The normalized input: a frame of input columns (or None) and a lazy row iterator."""

    frame: pd.DataFrame | None
    index: pd.Index | None
    rows: Iterator[RowInput]
    length: int | None
    #: The input's column names (for a generator: the first item's keys, or ``["input"]``).
    columns: list[str]


def prepare(
    data: Any,
    *,
    text: str | Sequence[str] | None = None,
    template: str | None = None,
    images: str | None = None,
) -> PreparedInput:
    """Normalize ``data`` and validate column arguments before any request is sent."""
    if isinstance(data, str):
        raise InputError("run() takes many rows; for a single text use extract(text)")
    if isinstance(data, pd.Series):
        if text is not None or template is not None or images is not None:
            raise InputError("text=, template= and images= apply to DataFrames, not a Series")
        name = str(data.name) if data.name is not None else "input"
        frame = data.to_frame(name=name)
        spec = TextSpec(columns=(name,))
        return _from_frame(frame, spec, None)
    if isinstance(data, pd.DataFrame):
        columns = [str(c) for c in data.columns]
        if len(set(columns)) != len(columns):
            raise InputError("the input DataFrame has duplicate column names")
        frame = data
        if not all(isinstance(c, str) for c in data.columns):
            frame = data.rename(columns=str)
        if images is not None and images not in columns:
            raise InputError(f"images column {images!r} not found; available columns: {columns}")
        available = [c for c in columns if c != images]
        if text is None and template is None and images is not None:
            spec = TextSpec(columns=())
        else:
            spec = TextSpec.build(text=text, template=template, available=available)
        return _from_frame(frame, spec, images)
    if isinstance(data, Iterator):
        return _from_iterator(data, text=text, template=template, images=images)
    if isinstance(data, Iterable) and not isinstance(data, bytes | Mapping):
        items = list(data)
        if all(isinstance(item, str) or is_missing(item) for item in items):
            if text is not None or template is not None or images is not None:
                raise InputError("text=, template= and images= need dict rows or a DataFrame")
            return prepare(pd.Series(items, name="input", dtype=object))
        if all(isinstance(item, Mapping) for item in items):
            return prepare(
                pd.DataFrame.from_records(items), text=text, template=template, images=images
            )
        kinds = sorted({type(item).__name__ for item in items})
        raise InputError(f"rows must all be strings or all be dicts; got {kinds}")
    raise InputError(
        f"cannot read rows from {type(data).__name__}; pass a DataFrame, Series, list of str or "
        "list of dict"
    )


def _from_iterator(
    items: Iterator[Any],
    *,
    text: str | Sequence[str] | None,
    template: str | None,
    images: str | None,
) -> PreparedInput:
    """Lazy rows from a generator of str or dict items; the first item fixes the kind.

    Column arguments are checked against the first dict's keys before any request. Labels are
    positions (0, 1, 2, ...); each row keeps its record so outputs can carry the input values.
    """
    first = next(items, None)
    if first is None:
        return PreparedInput(frame=None, index=None, rows=iter(()), length=0, columns=[])
    if isinstance(first, str):
        if text is not None or template is not None or images is not None:
            raise InputError("text=, template= and images= need dict rows or a DataFrame")
        spec, image_column, columns = TextSpec(columns=("input",)), None, ["input"]
    elif isinstance(first, Mapping):
        keys = [str(k) for k in first]
        if images is not None and images not in keys:
            raise InputError(f"images column {images!r} not found; first row has {keys}")
        available = [k for k in keys if k != images]
        if text is None and template is None and images is not None:
            spec = TextSpec(columns=())
        else:
            spec = TextSpec.build(text=text, template=template, available=available)
        image_column, columns = images, keys
    else:
        raise InputError(f"rows must be strings or dicts; got {type(first).__name__}")

    def rows() -> Iterator[RowInput]:
        for position, item in enumerate(itertools.chain([first], items)):
            if isinstance(item, Mapping):
                record: Mapping[str, Any] = item
            elif isinstance(item, str) or is_missing(item):
                record = {"input": item}
            else:
                record = {}
            row = make_row(position, position, record, spec, image_column)
            if not record:
                row.error = InputError(f"row {position} is a {type(item).__name__}, not str/dict")
            row.record = record
            yield row

    return PreparedInput(frame=None, index=None, rows=rows(), length=None, columns=columns)


def _from_frame(frame: pd.DataFrame, spec: TextSpec, images: str | None) -> PreparedInput:
    def rows() -> Iterator[RowInput]:
        columns = list(frame.columns)
        for position, (label, values) in enumerate(
            zip(frame.index, frame.itertuples(index=False, name=None), strict=True)
        ):
            record = dict(zip(columns, values, strict=True))
            row = make_row(label, position, record, spec, images)
            row.record = record
            yield row

    return PreparedInput(
        frame=frame,
        index=frame.index,
        rows=rows(),
        length=len(frame),
        columns=[str(c) for c in frame.columns],
    )


def make_row(
    label: Hashable, position: int, record: Mapping[str, Any], spec: TextSpec, images: str | None
) -> RowInput:
    """Build one row's content; a bad row gets an error instead of raising."""
    row = RowInput(label=label, position=position)
    text = spec.render(record) if spec.columns else None
    try:
        image_urls = image_urls_of(record.get(images)) if images is not None else []
    except MediaError as exc:
        row.error = exc
        return row
    if text is None and not image_urls:
        what = "text and images" if images is not None else "text"
        row.error = EmptyInputError(f"empty input: the row's {what} is missing or blank")
        return row
    row.content = content_parts(text, image_urls)
    return row


def content_parts(text: str | None, image_urls: Sequence[str]) -> Content:
    """A plain string for text only; otherwise image parts then a text part."""
    if not image_urls:
        return text or ""
    parts: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": url}} for url in image_urls
    ]
    if text:
        parts.append({"type": "text", "text": text})
    return parts


def image_urls_of(cell: Any) -> list[str]:
    """Image URLs for one cell (see the module docstring); raises ``MediaError``."""
    if cell is None or (not isinstance(cell, list | tuple) and is_missing(cell)):
        return []
    if isinstance(cell, list | tuple):
        return [url for item in cell for url in image_urls_of(item)]
    return [image_url(cell)]


def image_url(value: Any) -> str:
    """One image value as a URL: passed through for data:/http(s), base64-inlined otherwise."""
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        mime = sniff_image_mime(data)
        if mime is None:
            raise MediaError("image bytes are not png, jpeg, webp or gif")
        return data_url(data, mime)
    if isinstance(value, str):
        if value.startswith("data:"):
            if not value.startswith("data:image/") or ";base64," not in value:
                raise MediaError(f"not a base64 image data URL: {value[:40]}...")
            return value
        if value.startswith(("http://", "https://")):
            return value
        return _file_url(Path(value))
    if isinstance(value, Path):
        return _file_url(value)
    raise MediaError(f"unsupported image value of type {type(value).__name__}")


def _file_url(path: Path) -> str:
    try:
        data = path.expanduser().read_bytes()
    except FileNotFoundError:
        raise MediaError(f"image file not found: {path}") from None
    except OSError as exc:
        raise MediaError(f"cannot read image file {path}: {exc.strerror}") from None
    mime = sniff_image_mime(data) or _IMAGE_EXTENSIONS.get(path.suffix.lower())
    if mime is None:
        raise MediaError(f"{path} is not a png, jpeg, webp or gif image")
    return data_url(data, mime)


def sniff_image_mime(data: bytes) -> str | None:
    """The image MIME type from magic bytes, or None."""
    for magic, mime in _IMAGE_MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def data_url(data: bytes, mime: str) -> str:
    """A base64 data URL."""
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
