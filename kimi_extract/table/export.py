"""The one table writer: ``Extractor.run_to`` (batch by batch, in order) and the CLI's ``--out``.

Formats by suffix: ``.jsonl`` / ``.ndjson`` (nested values stay JSON objects and arrays),
``.parquet`` (pyarrow; nested values are stored as JSON text so every batch has the same schema),
``.csv`` (nested values as JSON text). ``TableWriter`` appends batches; ``write_table`` writes one
finished frame (the CLI) through it, so both write a given frame the same way. Text is written
as UTF-8 with lone surrogates (left by ``json.loads`` of broken text) escaped as ``\\udc80``, so
every frame a run returns can be written.

The file is written under a temporary name of its own beside the target (``.NAME.<random>.part``,
created exclusively, so two writers of one target never share it) and renamed over the target
only when the run finishes (``commit``), after checking that the temporary file is still the one
written: a temporary file deleted or replaced meanwhile (a temp cleaner) is an error that leaves
the target as it was. A run that stops, raises or is interrupted never touches the target: the
rows written so far are kept beside it as ``STEM.partial.SUFFIX`` (``abort`` returns that path,
which the error message names; if that place cannot take them, the temporary directory). A
failed write leaves no half batch: csv and jsonl files are cut back to the last whole batch.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import secrets
import tempfile
from pathlib import Path
from typing import Any, cast

import pandas as pd

from ..exceptions import ConfigurationError, install_hint
from ..records import is_missing
from .columns import INDEX

__all__ = ["write_table"]

SUFFIXES = (".jsonl", ".ndjson", ".parquet", ".csv")
_SURROGATE = re.compile("[\ud800-\udfff]")


class TempFileLost(OSError):
    """The temporary file was deleted or replaced while the run wrote it: nothing is published."""


def _as_path(path: Any) -> Path:
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path:
        raise ConfigurationError(
            f"path must be a file path (str or os.PathLike ending in .csv, .jsonl or .parquet), "
            f"got {path!r}"
        )
    return Path(path)


def check_format(path: str | os.PathLike[str]) -> Path:
    """Refuse a format we cannot write (unknown suffix, or .parquet without pyarrow)."""
    target = _as_path(path)
    suffix = target.suffix.lower()
    if suffix not in SUFFIXES:
        raise ConfigurationError(
            f"unsupported output format {suffix or target.name!r} for {target}; "
            "use .csv, .jsonl or .parquet"
        )
    if suffix == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ConfigurationError(
                f"writing .parquet needs pyarrow: {install_hint('parquet')} (or write .csv / "
                ".jsonl)"
            ) from None
    return target


def check_path(path: str | os.PathLike[str]) -> Path:
    """Validate the output path before any request: a format we write, in a directory that
    exists and takes new files, not a directory itself. Raises ``ConfigurationError`` naming the
    path; returns it as a Path."""
    target = check_format(path)
    fd, probe = _create_temp(target)
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)
    return target


def _create_temp(target: Path) -> tuple[int, Path]:
    """A new file of our own beside ``target`` (opened for reading and writing), or a
    ``ConfigurationError`` saying why there can be none."""
    parent = target.parent
    if not parent.is_dir():
        why = "does not exist" if not parent.exists() else "is not a directory"
        raise ConfigurationError(f"cannot write {target}: the directory {parent} {why}")
    if target.is_dir():
        raise ConfigurationError(f"cannot write {target}: it is a directory; name a file in it")
    for _ in range(100):
        tmp = parent / f".{target.name}.{secrets.token_hex(6)}.part"
        try:
            return os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
        except OSError as exc:
            raise ConfigurationError(
                f"cannot write {target}: cannot create files in {parent} ({exc.strerror or exc})"
            ) from None
    raise ConfigurationError(f"cannot write {target}: no free temporary name in {parent}")


def _printable(text: str) -> str:
    """``text`` with lone surrogates escaped (``\\udc80``), so it encodes as UTF-8."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _has_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return _SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    if isinstance(value, list | tuple | set):
        return any(_has_surrogate(v) for v in value)
    return False


def _clean(value: Any) -> Any:
    """A cell as a file can hold it: lone surrogates escaped, also inside nested values."""
    if not _has_surrogate(value):
        return value
    if isinstance(value, str):
        return _printable(value)
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    return [_clean(v) for v in value]


#: A lone surrogate as ``repr`` shows it (inside a list or dict): a cheap first test, whose
#: rare false alarms (a text holding that escape literally) only cost the exact check.
_NESTED = frozenset({dict, list, tuple, set})
_SURROGATE_REPR = re.compile(r"\\ud[89a-f]", re.IGNORECASE)


def _may_hold_surrogate(values: Any) -> bool:
    """False when no value of ``values`` holds a lone surrogate (two C-speed scans: the texts
    joined, then the reprs of the nested values)."""
    texts = [v for v in values if type(v) is str]
    if texts and _SURROGATE.search("\x00".join(texts)):
        return True
    nested = [repr(v) for v in values if type(v) in _NESTED]
    return bool(nested) and _SURROGATE_REPR.search("\x00".join(nested)) is not None


def _clean_frame(table: pd.DataFrame, *, every: bool = False) -> pd.DataFrame:
    """The frame with lone surrogates escaped in names, index labels and object cells (only
    the columns a quick scan finds one in are rebuilt; ``every``: all of them)."""
    if every or _may_hold_surrogate(list(table.columns)):
        table = table.rename(columns=lambda c: _printable(c) if isinstance(c, str) else c)
    index = table.index
    if index.nlevels == 1 and (every or _may_hold_surrogate([*index, index.name])):
        labels = [_clean(v) for v in index] if index.dtype == object else index
        table = table.set_axis(pd.Index(labels, dtype=index.dtype, name=_clean(index.name)))
    for position, dtype in enumerate(table.dtypes):
        if not pd.api.types.is_object_dtype(dtype):
            continue  # pandas' str dtype cannot hold a lone surrogate; numbers hold no text
        column = table.iloc[:, position]
        if every or _may_hold_surrogate(column.tolist()):
            cleaned = pd.Series([_clean(v) for v in column], index=table.index, dtype=object)
            table.isetitem(position, cast(Any, cleaned))
    return table


def _json_text(value: Any) -> Any:
    if isinstance(value, dict | list | tuple | set):
        return json.dumps(value, default=str, ensure_ascii=False)
    return value


def _parquet_text(value: Any) -> str | None:
    """An object cell as parquet stores it: text (nested values as JSON), or None if missing."""
    if is_missing(value):
        return None
    return value if isinstance(value, str) else str(_json_text(value))


def informative_index(frame: pd.DataFrame) -> bool:
    """False for the default 0..n-1 index, which only numbers the rows."""
    index = frame.index
    default = pd.RangeIndex(len(frame))
    return not (index.name is None and isinstance(index, pd.RangeIndex) and index.equals(default))


def _index_as_column(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with its index as a first column (named ``index``, or ``kx_index`` when an
    ``index`` column exists, if it had no name)."""
    if frame.index.name is None and frame.index.nlevels == 1:
        frame = frame.rename_axis("index" if "index" not in frame.columns else INDEX)
    return frame.reset_index()


def write_table(frame: pd.DataFrame, path: str | os.PathLike[str]) -> None:
    """Write one finished frame to ``path`` (.csv, .jsonl or .parquet) via a temp file + rename.

    The index is written (as a named first column) only when it carries information: a table
    read from a file has the default 0..n-1 index, which is left out. Missing directories are
    created. Raises ``ConfigurationError`` for a format or place it cannot write, ``OSError``
    when writing fails (the target is then left as it was, and no temporary file remains).
    """
    target = check_format(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    writer = TableWriter(target, index=informative_index(frame))
    try:
        writer.write(frame)
        writer.commit()
    except BaseException:
        writer.discard()
        raise


def _write_all(fd: int, data: bytes | memoryview) -> None:
    """Write every byte of ``data`` to ``fd`` (the one place output bytes go to disk)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class _Sink:
    """The file object pyarrow writes a parquet file through (bytes go via ``_write_all``)."""

    def __init__(self, writer: TableWriter) -> None:
        self.writer = writer
        self.closed = False

    def write(self, data: bytes) -> int:
        self.writer._append(data)
        return len(data)

    def tell(self) -> int:
        return self.writer.size

    def flush(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True


class TableWriter:
    """Appends DataFrame batches to one output file; ``commit()`` moves it into place.

    ``index``: write each batch's index as the first column (``run_to`` does: its rows keep the
    input's labels). The temporary file is created at once: a directory that cannot take it is
    a ``ConfigurationError`` here, before any request.
    """

    def __init__(self, path: str | os.PathLike[str], *, index: bool = True) -> None:
        self.path = check_format(path)
        self.index = index
        self.format = self.path.suffix.lower().lstrip(".")
        self._fd, self.tmp = _create_temp(self.path)
        #: Where the rows written so far are kept when the run does not finish.
        self.partial_path = partial_path(self.path)
        #: The file ``abort`` kept the rows in (None: none, or not aborted).
        self.kept: Path | None = None
        self.aborted = False
        #: Rows in the temporary file (whole batches only).
        self.rows = 0
        #: Bytes in the temporary file.
        self.size = 0
        #: A parquet write failed: the file cannot be completed (pyarrow cannot resume it).
        self.broken = False
        self._parquet: Any = None
        self._schema: Any = None

    def write(self, frame: pd.DataFrame) -> None:
        """Append one batch (its index becomes the first column unless ``index=False``).

        A batch is written whole or not at all (csv, jsonl): on an error the file is cut back
        to the batches before it, and the error is raised."""
        if frame.empty:
            return
        if self.broken:
            raise OSError(f"{self.tmp} cannot take more rows after a failed parquet write")
        try:
            self._render(_clean_frame(frame))
        except UnicodeEncodeError:  # a surrogate the quick scan missed (a dict subclass...)
            self._render(_clean_frame(frame, every=True))
        self.rows += len(frame)

    def _render(self, table: pd.DataFrame) -> None:
        """Write one cleaned batch in the file's format."""
        table = _index_as_column(table) if self.index else table.reset_index(drop=True)
        if self.format in ("jsonl", "ndjson"):
            text = table.to_json(
                orient="records", lines=True, force_ascii=False, default_handler=str
            )
            if text and not text.endswith("\n"):
                text += "\n"
            self._append_batch(text.encode("utf-8"))
        elif self.format == "csv":
            table = table.map(_json_text)
            text = table.to_csv(header=self.rows == 0, index=False)
            if "\r" in text:
                # Rows end in "\n", so a "\r" is in a value, and the csv module quotes only
                # the line terminator's characters: unquoted, readers split the row there.
                text = table.to_csv(header=self.rows == 0, index=False, quoting=csv.QUOTE_ALL)
            self._append_batch(text.encode("utf-8"))
        else:
            self._write_parquet(table)

    def _append(self, data: bytes) -> None:
        _write_all(self._fd, data)
        self.size += len(data)

    def _append_batch(self, data: bytes) -> None:
        good = self.size
        try:
            self._append(data)
        except OSError:
            with contextlib.suppress(OSError):  # no half batch in the file
                os.ftruncate(self._fd, good)
                os.lseek(self._fd, good, os.SEEK_SET)
            self.size = good
            raise

    def _write_parquet(self, table: pd.DataFrame) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = table.copy()
        for column in table.columns:
            if table[column].dtype == object:
                # A Series, not a list: a list assigned to a column turns None into NaN, which
                # would then be written as the text "nan".
                table[column] = pd.Series(
                    [_parquet_text(v) for v in table[column]], index=table.index, dtype=object
                )
        if self._schema is None:
            fields = []
            for column in table.columns:
                if table[column].dtype == object:
                    fields.append(pa.field(str(column), pa.string()))
                else:
                    inferred = pa.Table.from_pandas(table[[column]], preserve_index=False)
                    fields.append(inferred.schema.field(0))
            self._schema = pa.schema(fields)
        arrow = pa.Table.from_pandas(table, schema=self._schema, preserve_index=False)
        try:
            if self._parquet is None:
                self._parquet = pq.ParquetWriter(_Sink(self), self._schema)
            self._parquet.write_table(arrow)
        except OSError:
            self.broken = True
            raise

    def _finish(self) -> None:
        """Complete the file (the parquet footer) and flush it to disk."""
        if self._parquet is not None:
            parquet, self._parquet = self._parquet, None
            if self.broken:
                with contextlib.suppress(Exception):
                    parquet.close()
            else:
                try:
                    parquet.close()
                except OSError:
                    self.broken = True
                    raise
        os.fsync(self._fd)

    def _ours(self) -> bool:
        """The temporary path still names the file this writer wrote."""
        try:
            on_disk, ours = os.stat(self.tmp), os.fstat(self._fd)
        except OSError:
            return False
        return (on_disk.st_dev, on_disk.st_ino) == (ours.st_dev, ours.st_ino)

    def close(self) -> None:
        """The run finished: complete the file and rename it over the target (``commit``)."""
        self.commit()

    def commit(self) -> None:
        """The run finished: complete the file and rename it over the target (an empty run
        writes an empty file). Raises ``TempFileLost`` (an ``OSError``) when the temporary file
        was deleted or replaced meanwhile, and ``OSError`` when the file cannot be completed or
        renamed; the target is then left as it was and ``abort()`` can still keep the rows."""
        self._finish()
        if not self._ours():
            raise TempFileLost(
                f"the temporary file {self.tmp} was deleted or replaced while the run wrote it "
                f"(a temp cleaner?); {self.path} was not changed"
            )
        os.replace(self.tmp, self.path)
        self._close_fd()

    def abort(self) -> Path | None:
        """The run did not finish: keep the rows written so far as ``partial_path`` (else the
        temporary file under its own name, else the temp directory) and leave the target
        untouched. Returns the file holding them, or None when there was none to keep (a
        failed parquet file). Never raises ``OSError``."""
        if self.aborted:
            return self.kept
        self.aborted = True
        if self._fd < 0:
            return None
        with contextlib.suppress(OSError):
            self._finish()
        if self.broken:
            self.discard()
            return None
        if self._ours():
            try:
                os.replace(self.tmp, self.partial_path)
                self.kept = self.partial_path
            except OSError:
                self.kept = self.tmp  # the rows stay where they are, under the temporary name
        else:
            self.kept = self._rescue()
        self._close_fd()
        return self.kept

    def _rescue(self) -> Path | None:
        """Copy the rows from the open (but unlinked) temporary file to ``partial_path``, else
        to the temp directory; the path written, or None."""
        for place in (self.partial_path, Path(tempfile.gettempdir()) / self.partial_path.name):
            try:
                fd, tmp = _create_temp(place)
            except ConfigurationError:
                continue
            try:
                offset = 0
                while chunk := os.pread(self._fd, 1 << 20, offset):
                    _write_all(fd, chunk)
                    offset += len(chunk)
                os.fsync(fd)
                os.replace(tmp, place)
                return place
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            finally:
                os.close(fd)
        return None

    def discard(self) -> None:
        """Remove the temporary file (nothing to keep)."""
        if self._parquet is not None:
            with contextlib.suppress(Exception):
                self._parquet.close()
            self._parquet = None
        if self._fd >= 0 and self._ours():
            with contextlib.suppress(OSError):
                os.unlink(self.tmp)
        self._close_fd()

    def _close_fd(self) -> None:
        if getattr(self, "_fd", -1) >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self._close_fd()


def partial_path(target: Path) -> Path:
    """Where an unfinished run's rows go: ``out.jsonl`` -> ``out.partial.jsonl`` beside it."""
    return target.with_name(f"{target.stem}.partial{target.suffix}")
