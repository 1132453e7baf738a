"""Turn user data into rows: text rendering and media content parts.

Accepted data: a DataFrame (``text=`` column, list of columns, or ``template=``), a Series, a list
of strings, a list of dicts, or any iterable of those items. Each row becomes a ``RowInput`` whose
``content`` is a string (text only) or a list of content parts (images and videos first, then the
text, as in the seed's multimodal example).

Media (``images=`` column, and ``videos=`` for a column of videos only): a cell is a local path,
bytes, a PIL image, a numpy array, a ``data:`` URL, an http(s) URL, or a list of these; see
``kimi_extract.media`` for formats, downscaling (``max_image_pixels``) and URL fetching. The
options come from ``prepare(media=...)``, else from ``media.media_options(...)``.
"""

from __future__ import annotations

import itertools
import math
import string
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from .exceptions import EmptyInputError, InputError, MediaError
from .media import MediaOptions, current_options, media_parts
from .media import image_url as _media_image_url
from .media_formats import data_url as data_url  # re-exported (their earlier home)
from .media_formats import sniff_image_mime as sniff_image_mime

Content = str | list[dict[str, Any]]


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
    videos: str | None = None,
    media: MediaOptions | None = None,
) -> PreparedInput:
    """Normalize ``data`` and validate column arguments before any request is sent.

    ``media``: how image/video cells are encoded (default: ``media.current_options()``).
    """
    media = media or current_options()
    columns_args = _MediaColumns(images, videos, media)
    if isinstance(data, str):
        raise InputError("run() takes many rows; for a single text use extract(text)")
    if isinstance(data, pd.Series):
        if text is not None or template is not None or columns_args.any:
            raise InputError(
                "text=, template=, images= and videos= apply to DataFrames, not a Series"
            )
        name = str(data.name) if data.name is not None else "input"
        frame = data.to_frame(name=name)
        spec = TextSpec(columns=(name,))
        return _from_frame(frame, spec, columns_args)
    if isinstance(data, pd.DataFrame):
        columns = [str(c) for c in data.columns]
        if len(set(columns)) != len(columns):
            raise InputError("the input DataFrame has duplicate column names")
        frame = data
        if not all(isinstance(c, str) for c in data.columns):
            frame = data.rename(columns=str)
        for kind, column in (("images", images), ("videos", videos)):
            if column is not None and column not in columns:
                raise InputError(
                    f"{kind} column {column!r} not found; available columns: {columns}"
                )
        available = [c for c in columns if c not in columns_args.names]
        if text is None and template is None and columns_args.any:
            spec = TextSpec(columns=())
        else:
            spec = TextSpec.build(text=text, template=template, available=available)
        return _from_frame(frame, spec, columns_args)
    if isinstance(data, Iterator):
        return _from_iterator(data, text=text, template=template, media_columns=columns_args)
    if isinstance(data, Iterable) and not isinstance(data, bytes | Mapping):
        items = list(data)
        if all(isinstance(item, str) or is_missing(item) for item in items):
            if text is not None or template is not None or columns_args.any:
                raise InputError(
                    "text=, template=, images= and videos= need dict rows or a DataFrame"
                )
            return prepare(pd.Series(items, name="input", dtype=object))
        if all(isinstance(item, Mapping) for item in items):
            return prepare(
                pd.DataFrame.from_records(items),
                text=text,
                template=template,
                images=images,
                videos=videos,
                media=media,
            )
        kinds = sorted({type(item).__name__ for item in items})
        raise InputError(f"rows must all be strings or all be dicts; got {kinds}")
    raise InputError(
        f"cannot read rows from {type(data).__name__}; pass a DataFrame, Series, list of str or "
        "list of dict"
    )


@dataclass(frozen=True)
class _MediaColumns:
    """The media columns of a run and the options that encode them."""

    images: str | None
    videos: str | None
    options: MediaOptions

    @property
    def names(self) -> list[str]:
        return [c for c in (self.images, self.videos) if c is not None]

    @property
    def any(self) -> bool:
        return bool(self.names)

    def row(
        self, label: Hashable, position: int, record: Mapping[str, Any], spec: TextSpec
    ) -> RowInput:
        """``make_row`` with this run's media columns and options."""
        return make_row(
            label, position, record, spec, self.images, videos=self.videos, media=self.options
        )


def _from_iterator(
    items: Iterator[Any],
    *,
    text: str | Sequence[str] | None,
    template: str | None,
    media_columns: _MediaColumns,
) -> PreparedInput:
    """Lazy rows from a generator of str or dict items; the first item fixes the kind.

    Column arguments are checked against the first dict's keys before any request. Labels are
    positions (0, 1, 2, ...); each row keeps its record so outputs can carry the input values.
    """
    first = next(items, None)
    if first is None:
        return PreparedInput(frame=None, index=None, rows=iter(()), length=0, columns=[])
    if isinstance(first, str):
        if text is not None or template is not None or media_columns.any:
            raise InputError("text=, template=, images= and videos= need dict rows or a DataFrame")
        spec, columns = TextSpec(columns=("input",)), ["input"]
        media_columns = _MediaColumns(None, None, media_columns.options)
    elif isinstance(first, Mapping):
        keys = [str(k) for k in first]
        for kind, column in (("images", media_columns.images), ("videos", media_columns.videos)):
            if column is not None and column not in keys:
                raise InputError(f"{kind} column {column!r} not found; first row has {keys}")
        available = [k for k in keys if k not in media_columns.names]
        if text is None and template is None and media_columns.any:
            spec = TextSpec(columns=())
        else:
            spec = TextSpec.build(text=text, template=template, available=available)
        columns = keys
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
            row = media_columns.row(position, position, record, spec)
            if not record:
                row.error = InputError(f"row {position} is a {type(item).__name__}, not str/dict")
            row.record = record
            yield row

    return PreparedInput(
        frame=None,
        index=None,
        rows=_lazy(rows(), media_columns),
        length=None,
        columns=columns,
    )


class BlockingRows(Iterator[RowInput]):
    """Rows whose production blocks (reading, decoding and encoding media; downloads): the
    engine pulls them in a worker thread, one at a time, so the event loop keeps serving the
    requests in flight."""

    blocking = True

    def __init__(self, rows: Iterator[RowInput]) -> None:
        self._rows = rows

    def __next__(self) -> RowInput:
        return next(self._rows)


def _lazy(rows: Iterator[RowInput], media_columns: _MediaColumns) -> Iterator[RowInput]:
    return BlockingRows(rows) if media_columns.any else rows


def _from_frame(frame: pd.DataFrame, spec: TextSpec, media_columns: _MediaColumns) -> PreparedInput:
    def rows() -> Iterator[RowInput]:
        columns = list(frame.columns)
        for position, (label, values) in enumerate(
            zip(frame.index, frame.itertuples(index=False, name=None), strict=True)
        ):
            record = dict(zip(columns, values, strict=True))
            row = media_columns.row(label, position, record, spec)
            row.record = record
            yield row

    return PreparedInput(
        frame=frame,
        index=frame.index,
        rows=_lazy(rows(), media_columns),
        length=len(frame),
        columns=[str(c) for c in frame.columns],
    )


def make_row(
    label: Hashable,
    position: int,
    record: Mapping[str, Any],
    spec: TextSpec,
    images: str | None,
    *,
    videos: str | None = None,
    media: MediaOptions | None = None,
) -> RowInput:
    """Build one row's content; a bad row gets an error instead of raising."""
    row = RowInput(label=label, position=position)
    text = spec.render(record) if spec.columns else None
    media = media or current_options()
    try:
        parts = media_parts(record.get(images), media) if images is not None else []
        if videos is not None:
            parts += media_parts(record.get(videos), media, kind="video")
    except MediaError as exc:
        row.error = exc
        return row
    if text is None and not parts:
        what = "text and media" if images is not None or videos is not None else "text"
        row.error = EmptyInputError(f"empty input: the row's {what} is missing or blank")
        return row
    row.content = content_parts(text, parts)
    return row


def content_parts(text: str | None, media: Sequence[str | dict[str, Any]]) -> Content:
    """A plain string for text only; otherwise media parts (a str is an image URL), then text."""
    if not media:
        return text or ""
    parts: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": item}} if isinstance(item, str) else item
        for item in media
    ]
    if text:
        parts.append({"type": "text", "text": text})
    return parts


def image_urls_of(cell: Any, media: MediaOptions | None = None) -> list[str]:
    """Image URLs for one cell (see ``kimi_extract.media``); raises ``MediaError``."""
    return [part["image_url"]["url"] for part in media_parts(cell, media, kind="image")]


def image_url(value: Any, media: MediaOptions | None = None) -> str:
    """One image value as a URL: passed through for http(s), a base64 data URL otherwise."""
    return _media_image_url(value, media)
