"""``run_to``'s pipeline: rows -> a .jsonl, .parquet or .csv file, written as they finish.

Rows are written in input order, batch by batch (``WRITE_BATCH_ROWS``), so memory stays bounded
for any input size. The target is replaced only when the run finishes: until then rows go to a
temporary file of this run's own beside it (``table.export.TableWriter``), kept as
``STEM.partial.SUFFIX`` when the run does not finish; rows the output could not take (a full
disk) go to the error's ``partial``.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import pandas as pd

from ..exceptions import BudgetExceeded, RunStopped
from ..records import RowResult
from ..run.inputs import PreparedInput
from ..run.report import RunReport
from ..table.export import TableWriter
from .base import BaseExtractor

__all__ = ["WRITE_BATCH_ROWS", "write_rows"]

#: run_to writes results in batches of this many rows.
WRITE_BATCH_ROWS = 1000


async def write_rows(
    ex: BaseExtractor[Any],
    path: str | os.PathLike[str],
    prepared: PreparedInput,
    writer: TableWriter,
) -> RunReport:
    """Run ``prepared`` rows through ``ex`` into ``writer`` (a file at ``path``); the report.

    On anything but a finished run the target stays as it was, and the error says where the rows
    are (``RunStopped`` / ``BudgetExceeded``; a cancellation sets ``ex.last_partial`` to the rows
    the output could not take)."""
    #: Finished rows not yet in the file; after a failed write, every row the file lacks.
    buffer: list[RowResult] = []
    failed: list[BaseException] = []

    def flush() -> None:
        if buffer and not failed:
            try:
                writer.write(ex._frame_of(buffer))
            except Exception as exc:
                failed.append(exc)
                raise
            buffer.clear()

    def sink(batch: list[RowResult]) -> None:
        buffer.extend(batch)  # after a failed write: only held (for the error's .partial)
        if len(buffer) >= WRITE_BATCH_ROWS:
            flush()

    stop_cause: BaseException | None
    try:
        _, stop_cause, report = await ex._execute(
            prepared.rows,
            total=prepared.length,
            progress=ex.config.progress,
            sink=sink,
            keep_records=True,
        )
    except BaseException:
        # Keep what finished beside the target; the target itself stays as it was.
        with contextlib.suppress(Exception):
            flush()
        writer.abort()
        ex.last_partial = _unwritten(ex, buffer, failed)
        raise
    if stop_cause is None:
        try:
            flush()
            writer.commit()
            return report
        except Exception as exc:  # the output cannot take the rows: the run did not finish
            stop_cause = exc
    else:
        with contextlib.suppress(Exception):
            flush()
    raise _output_stopped(ex, path, writer, stop_cause, report, buffer, failed) from stop_cause


def _unwritten(
    ex: BaseExtractor[Any], buffer: list[RowResult], failed: list[BaseException]
) -> pd.DataFrame | None:
    """The rows the output could not take (a frame), or None when every row is in a file."""
    if not buffer or not failed:
        return None
    try:
        return ex._frame_of(buffer)
    except Exception:  # the rows cannot even make a frame: nothing more to keep
        return None


def _output_stopped(
    ex: BaseExtractor[Any],
    path: str | os.PathLike[str],
    writer: TableWriter,
    stop_cause: BaseException,
    report: RunReport,
    buffer: list[RowResult],
    failed: list[BaseException],
) -> RunStopped:
    """The error of a ``run_to`` that did not finish: the rows so far kept, and named."""
    written = writer.rows
    kept = writer.abort()
    unwritten = _unwritten(ex, buffer, failed)
    if kept is not None:
        where = f"the {written} rows written so far are in {kept}"
    elif written:
        why = (
            "a parquet file cannot be completed after a failed write"
            if writer.broken
            else "neither its directory nor the temp directory took them"
        )
        where = f"the {written} rows written before could not be kept ({why})"
        if report.store:
            where += f"; a rerun takes them from the result store {report.store}"
    else:
        where = "no rows were written"
    if unwritten is not None:
        where += f"; {len(unwritten)} rows the output could not take are in the error's .partial"
    stop_class = BudgetExceeded if isinstance(stop_cause, BudgetExceeded) else RunStopped
    stopped = stop_class(
        f"run stopped after {report.ok} rows: {stop_cause}; {os.fspath(path)} was not "
        f"changed, {where}",
        partial=unwritten,
        cause=stop_cause,
    )
    stopped.partial_file = str(kept) if kept is not None else None
    return stopped
