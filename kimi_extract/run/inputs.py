"""Turn user data into rows: text rendering and media content parts.

Accepted data: a DataFrame (``text=`` column, list of columns, or ``template=``), a Series, a list
of strings, a list of dicts, or any iterable of those items. Each row becomes a ``RowInput`` whose
``content`` is a string (text only) or a list of content parts (images and videos first, then the
text, as in the ``multimodal`` example of docs/reference/kimi-chat-completions-reference.md).

Media (``images=`` column, and ``videos=`` for a column of videos only): a cell is a local path,
bytes, a PIL image, a numpy array, a ``data:`` URL, an http(s) URL, or a list of these; see
``kimi_extract.media.parts`` for formats, downscaling (``max_image_pixels``) and URL fetching. The
options come from ``prepare(media=...)``, else from ``media.media_options(...)``.

Whatever a cell holds, the worst case is that row's error (``row.error``, the run's
``kx_error``); nothing a cell holds stops the run. Text cells: ``bytes`` are decoded as UTF-8 (a
row error when they are not UTF-8); a string with a lone surrogate (``"bad \\udc80"``, common
after ``json.loads`` of scraped text) is a row error rather than silently changed text (clean it
with ``s.encode("utf-8", "replace").decode()`` to send it with U+FFFD); a ``template=`` field
missing from a dict row is a row error naming the key (a present but None/NaN value renders as
"").
"""

from __future__ import annotations

import asyncio
import itertools
import re
import string
import threading
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..exceptions import EmptyInputError, InputError, MediaError
from ..media.parts import MediaOptions, cancellable, current_options, media_parts, printable
from ..media.parts import image_url as _media_image_url
from ..records import Content, RowInput, is_missing


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
        """The row's text, or None when every referenced value is missing or blank.

        Raises ``InputError`` for this row: a template field missing from the row, bytes that
        are not UTF-8, a lone surrogate, a value the template cannot format.
        """
        if self.template is not None:
            absent = [c for c in self.columns if c not in record]
            if absent:
                keys = [printable(str(k)) for k in itertools.islice(record, 20)]
                raise InputError(
                    f"template field {printable(absent[0])!r} is missing from this row "
                    f"(its keys: {keys})"
                )
        values = {c: text_value(c, record.get(c)) for c in self.columns}
        present = {c: v for c, v in values.items() if not is_missing(v) and str(v).strip()}
        if not present:
            return None
        if self.template is not None:
            try:
                return self.template.format_map(
                    {c: "" if c not in present else v for c, v in values.items()}
                )
            except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
                raise InputError(
                    f"template cannot format this row: {type(exc).__name__}: {printable(str(exc))}"
                ) from None
        if len(self.columns) == 1:
            return str(present[self.columns[0]])
        return "\n".join(f"{c}: {v}" for c, v in present.items())


_SURROGATE = re.compile("[\ud800-\udfff]")


def text_value(column: str, value: Any) -> Any:
    """A text cell ready to render: bytes decoded as UTF-8; ``InputError`` for invalid text."""
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(
                f"column {printable(column)!r} holds bytes that are not UTF-8 text (byte "
                f"{exc.start}: {bytes(value)[exc.start : exc.start + 1]!r}); decode them "
                "first, e.g. value.decode('cp1252')"
            ) from None
    if isinstance(value, str):
        found = _SURROGATE.search(value)
        if found is not None:
            raise InputError(
                f"column {printable(column)!r} holds a lone surrogate {found.group()!r} at "
                f"character {found.start()}, which is not valid Unicode (often left by "
                "json.loads of broken text); clean it, e.g. "
                "text.encode('utf-8', 'replace').decode('utf-8')"
            )
    return value


def template_fields(template: str) -> list[str]:
    """Field names used by a ``str.format`` template, in order, without duplicates."""
    names: list[str] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise InputError(f"template is not a valid format string: {exc}") from None
    for _, field, _, conversion in parsed:
        if field is None:
            continue
        if not field or field.isdigit():
            raise InputError("template fields must be named, e.g. 'Title: {title}'")
        if conversion not in (None, "r", "s", "a"):
            # str.format finds this only when it formats a row: every row would fail alike.
            raise InputError(
                f"template field {{{field}!{conversion}}} has an unknown conversion "
                f"'!{conversion}'; use !s, !r or !a"
            )
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
        return _prepare_frame(data, text, template, columns_args)
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
            # The dicts themselves render the text: a key absent from one is that row's error
            # (with a template), where the frame would hold NaN and render "".
            sources = [{str(k): v for k, v in item.items()} for item in items]
            frame = records_frame(items)
            return _prepare_frame(frame, text, template, columns_args, sources)
        kinds = sorted({type(item).__name__ for item in items})
        raise InputError(f"rows must all be strings or all be dicts; got {kinds}")
    raise InputError(
        f"cannot read rows from {type(data).__name__}; pass a DataFrame, Series, list of str or "
        "list of dict"
    )


def _prepare_frame(
    data: pd.DataFrame,
    text: str | Sequence[str] | None,
    template: str | None,
    columns_args: _MediaColumns,
    sources: list[dict[str, Any]] | None = None,
) -> PreparedInput:
    """``prepare`` for a DataFrame; ``sources``: the dicts it was built from (list input)."""
    columns = [str(c) for c in data.columns]
    if len(set(columns)) != len(columns):
        raise InputError("the input DataFrame has duplicate column names")
    frame = data
    if not all(isinstance(c, str) for c in data.columns):
        frame = data.rename(columns=str)
    spec = columns_args.text_spec(columns, text, template, where="available columns:")
    return _from_frame(frame, spec, columns_args, sources)


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

    def text_spec(
        self,
        columns: list[str],
        text: str | Sequence[str] | None,
        template: str | None,
        *,
        where: str,
    ) -> TextSpec:
        """Check the media columns exist in ``columns``; the text spec over the other columns.

        With media columns and neither ``text`` nor ``template``, rows carry no text.
        """
        for kind, column in (("images", self.images), ("videos", self.videos)):
            if column is not None and column not in columns:
                raise InputError(f"{kind} column {column!r} not found; {where} {columns}")
        if text is None and template is None and self.any:
            return TextSpec(columns=())
        available = [c for c in columns if c not in self.names]
        return TextSpec.build(text=text, template=template, available=available)

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
        columns = [str(k) for k in first]
        spec = media_columns.text_spec(columns, text, template, where="first row has")
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
    scheduler pulls them in a worker thread, one at a time, so the event loop keeps serving the
    requests in flight.

    ``cancel()`` (the scheduler calls it when the run is cancelled, e.g. by Ctrl-C) stops a
    download in progress within ~50 ms and ends the rows, so the worker thread finishes and the
    run can exit instead of waiting for a slow server.
    """

    blocking = True

    def __init__(self, rows: Iterator[RowInput]) -> None:
        self._rows = rows
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        """Stop the download in progress (its row fails) and end the rows; thread-safe."""
        self._cancelled.set()

    def __next__(self) -> RowInput:
        if self._cancelled.is_set():
            raise StopIteration
        with cancellable(self._cancelled):
            return next(self._rows)


async def next_blocking(rows: Iterator[RowInput]) -> RowInput | None:
    """The next row (None at the end), produced in a worker thread.

    If the awaiting task is cancelled (Ctrl-C), the rows are cancelled too (``cancel()``), so
    the thread stops its download at once instead of holding the run's exit until it ends.
    """
    try:
        return await asyncio.to_thread(next, rows, None)
    except asyncio.CancelledError:
        cancel = getattr(rows, "cancel", None)
        if cancel is not None:
            cancel()
        raise


async def amake_row(
    record: Mapping[str, Any], spec: TextSpec, images: str | None, media: MediaOptions
) -> RowInput:
    """``make_row`` for one input (label 0), in a worker thread when it has media to read or
    download, cancellable like a run's rows (``next_blocking``)."""
    if images is None:
        return make_row(0, 0, record, spec, None, media=media)
    rows = BlockingRows(make_row(0, 0, record, spec, images, media=media) for _ in range(1))
    row = await next_blocking(rows)
    assert row is not None
    return row


def _lazy(rows: Iterator[RowInput], media_columns: _MediaColumns) -> Iterator[RowInput]:
    return BlockingRows(rows) if media_columns.any else rows


def _from_frame(
    frame: pd.DataFrame,
    spec: TextSpec,
    media_columns: _MediaColumns,
    sources: list[dict[str, Any]] | None = None,
) -> PreparedInput:
    def rows() -> Iterator[RowInput]:
        columns = list(frame.columns)
        for position, (label, values) in enumerate(
            zip(frame.index, frame.itertuples(index=False, name=None), strict=True)
        ):
            record = dict(zip(columns, values, strict=True))
            source = sources[position] if sources is not None else record
            row = media_columns.row(label, position, source, spec)
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
    """Build one row's content; a bad row gets an error instead of raising.

    Whatever the cells hold, the worst case is ``row.error`` (a ``MediaError`` or
    ``InputError`` naming what is wrong); only ``KeyboardInterrupt`` and the like escape.
    """
    row = RowInput(label=label, position=position)
    media = media or current_options()
    try:
        text = spec.render(record) if spec.columns else None
        if text is not None and _SURROGATE.search(text):
            text_value("text", text)  # raises, naming the character
        parts = media_parts(record.get(images), media) if images is not None else []
        if videos is not None:
            parts += media_parts(record.get(videos), media, kind="video")
    except (MediaError, InputError) as exc:
        row.error = _printable_error(exc)
        return row
    except Exception as exc:  # a cell type nobody foresaw: this row fails, the run goes on
        row.error = InputError(
            f"cannot read this row's input: {type(exc).__name__}: {printable(str(exc))}"
        )
        return row
    if text is None and not parts:
        what = "text and media" if images is not None or videos is not None else "text"
        row.error = EmptyInputError(f"empty input: the row's {what} is missing or blank")
        return row
    row.content = content_parts(text, parts)
    return row


def _printable_error(exc: Exception) -> Exception:
    """``exc``, or a copy whose message has no lone surrogate (it goes to files and frames)."""
    message = str(exc)
    if not _SURROGATE.search(message):
        return exc
    return type(exc)(printable(message))


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
    """Image URLs for one cell (see ``kimi_extract.media.parts``); raises ``MediaError``."""
    return [part["image_url"]["url"] for part in media_parts(cell, media, kind="image")]


def image_url(value: Any, media: MediaOptions | None = None) -> str:
    """One image value as a URL: passed through for http(s), a base64 data URL otherwise."""
    return _media_image_url(value, media)


def records_frame(records: list[dict[str, Any]], index: pd.Index | None = None) -> pd.DataFrame:
    """A frame of dict records (``run_to``'s input columns, the CLI's JSON input). A column
    holding a lone surrogate, which pandas' str dtype cannot hold, stays an object column (as
    in a frame the user built with ``dtype=object``), so such text reaches ``run``, which makes
    it that row's error, and the writers, which escape it."""
    try:
        return pd.DataFrame.from_records(records, index=index)
    except UnicodeEncodeError:
        pass
    data: dict[Any, pd.Series] = {}
    for column in dict.fromkeys(key for record in records for key in record):
        values = [record.get(column) for record in records]
        try:
            data[column] = pd.Series(values, index=index)
        except UnicodeEncodeError:
            data[column] = pd.Series(values, index=index, dtype=object)
    return pd.DataFrame(data, index=index)
