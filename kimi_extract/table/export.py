"""Incremental writers for ``Extractor.run_to``: results go to disk batch by batch, in order.

Formats by suffix: ``.jsonl`` / ``.ndjson`` (nested values stay JSON objects and arrays),
``.parquet`` (pyarrow; nested values are stored as JSON text so every batch has the same schema),
``.csv`` (nested values as JSON text). The file is written under a temporary name beside the
target (``.NAME.part``) and renamed over the target only when the run finishes (``commit``). A run
that stops, raises or is interrupted never touches the target: an existing file stays as it was,
and the rows written so far are kept beside it as ``STEM.partial.SUFFIX`` (``abort`` returns that
path, which the error message names).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from ..exceptions import ConfigurationError

SUFFIXES = (".jsonl", ".ndjson", ".parquet", ".csv")


def check_path(path: str | os.PathLike[str]) -> Path:
    """Validate the output path before any request; returns it as a Path."""
    target = Path(path)
    if target.suffix.lower() not in SUFFIXES:
        raise ConfigurationError(f"run_to writes {', '.join(SUFFIXES)} files; got {target.name!r}")
    if target.suffix.lower() == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ConfigurationError(
                "writing .parquet needs pyarrow: pip install 'kimi-extract[parquet]'"
            ) from None
    if not target.parent.exists():
        raise ConfigurationError(f"output directory {target.parent} does not exist")
    return target


def _json_text(value: Any) -> Any:
    if isinstance(value, dict | list | tuple | set):
        return json.dumps(value, default=str, ensure_ascii=False)
    return value


class TableWriter:
    """Appends DataFrame batches to one output file; ``close()`` moves it into place."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = check_path(path)
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
        """Append one batch (its index becomes the first column)."""
        if frame.empty:
            return
        table = frame.reset_index()
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
                table[column] = [
                    None if v is None else (_json_text(v) if not isinstance(v, str) else v)
                    for v in table[column]
                ]
                table[column] = table[column].map(
                    lambda v: v if v is None or isinstance(v, str) else str(v)
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
