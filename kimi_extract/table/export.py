"""The one table writer: ``Extractor.run_to`` (batch by batch, in order) and the CLI's ``--out``.

Formats by suffix: ``.jsonl`` / ``.ndjson`` (nested values stay JSON objects and arrays),
``.parquet`` (pyarrow; nested values are stored as JSON text so every batch has the same schema),
``.csv`` (nested values as JSON text). ``TableWriter`` appends batches; ``write_table`` writes one
finished frame (the CLI) through it, so both write a given frame the same way.

The file is written under a temporary name beside the target (``.NAME.part``) and renamed over
the target only when the run finishes (``commit``). A run that stops, raises or is interrupted
never touches the target: an existing file stays as it was, and the rows written so far are kept
beside it as ``STEM.partial.SUFFIX`` (``abort`` returns that path, which the error message names).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from ..exceptions import ConfigurationError, install_hint
from ..records import is_missing
from .columns import INDEX

SUFFIXES = (".jsonl", ".ndjson", ".parquet", ".csv")


def check_format(path: str | os.PathLike[str]) -> Path:
    """Refuse a format we cannot write (unknown suffix, or .parquet without pyarrow)."""
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix not in SUFFIXES:
        raise ConfigurationError(
            f"unsupported output format {suffix or target.name!r}; use .csv, .jsonl or .parquet"
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
    """Validate the output path before any request; returns it as a Path."""
    target = check_format(path)
    if not target.parent.exists():
        raise ConfigurationError(f"output directory {target.parent} does not exist")
    return target


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
    created. Raises ``ConfigurationError`` for a format it cannot write.
    """
    target = check_format(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    writer = TableWriter(target, index=informative_index(frame))
    writer.write(frame)
    writer.commit()


class TableWriter:
    """Appends DataFrame batches to one output file; ``close()`` moves it into place.

    ``index``: write each batch's index as the first column (``run_to`` does: its rows keep the
    input's labels).
    """

    def __init__(self, path: str | os.PathLike[str], *, index: bool = True) -> None:
        self.path = check_path(path)
        self.index = index
        self.format = self.path.suffix.lower().lstrip(".")
        self.tmp = self.path.with_name(f".{self.path.name}.part")
        #: Where the rows written so far are kept when the run does not finish.
        self.partial_path = partial_path(self.path)
        self.aborted = False
        self.rows = 0
        self._handle: Any = None
        self._parquet: Any = None
        self._schema: Any = None

    def write(self, frame: pd.DataFrame) -> None:
        """Append one batch (its index becomes the first column unless ``index=False``)."""
        if frame.empty:
            return
        table = _index_as_column(frame) if self.index else frame.reset_index(drop=True)
        if self.format in ("jsonl", "ndjson"):
            self._text_handle().write(
                table.to_json(orient="records", lines=True, force_ascii=False, default_handler=str)
            )
        elif self.format == "csv":
            table.map(_json_text).to_csv(self._text_handle(), header=self.rows == 0, index=False)
        else:
            self._write_parquet(table)
        self.rows += len(frame)

    def _text_handle(self) -> Any:
        if self._handle is None:
            self._handle = open(self.tmp, "w", encoding="utf-8", newline="")  # noqa: SIM115
        return self._handle

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
            self._parquet = pq.ParquetWriter(self.tmp, self._schema)
        arrow = pa.Table.from_pandas(table, schema=self._schema, preserve_index=False)
        self._parquet.write_table(arrow)

    def _finish(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        if self._parquet is not None:
            self._parquet.close()
            self._parquet = None
        if not self.tmp.exists():
            self.tmp.write_bytes(b"")

    def close(self) -> None:
        """The run finished: complete the file and rename it over the target (``commit``)."""
        self.commit()

    def commit(self) -> None:
        """The run finished: complete the file and rename it over the target (an empty run
        writes an empty file)."""
        self._finish()
        os.replace(self.tmp, self.path)

    def abort(self) -> Path:
        """The run did not finish: keep the rows written so far as ``partial_path`` and leave
        the target untouched; returns the partial file's path."""
        self._finish()
        os.replace(self.tmp, self.partial_path)
        self.aborted = True
        return self.partial_path


def partial_path(target: Path) -> Path:
    """Where an unfinished run's rows go: ``out.jsonl`` -> ``out.partial.jsonl`` beside it."""
    return target.with_name(f"{target.stem}.partial{target.suffix}")
