"""What every ``Extractor`` entry point shares: the run machinery, frames and stop errors.

``BaseExtractor`` holds the settings, the run machinery (``run.setup.Engine``) and what runs leave
behind (``usage``, ``last_run``, ``last_partial``); the public ``Extractor`` (``extractor.py``)
is its face, as httpx's ``Client`` is the face of ``BaseClient``. Here: preparing input rows,
running them (``_execute``: the engine, then the usage tally), turning results into the output
frame (``_rows_frame``), the one ``aextract`` row, the errors of a stopped or interrupted run,
and ``_sync``, the one helper every sync entry point goes through.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Generic, TypeVar

import pandas as pd
from pydantic import BaseModel

from ..config import ExtractorConfig
from ..exceptions import (
    BudgetExceeded,
    ConfigurationError,
    InputError,
    RowError,
    RunInterrupted,
    RunStopped,
)
from ..media.parts import MediaOptions, current_options
from ..records import Content, RowInput, RowResult, Usage
from ..run.inputs import PreparedInput, TextSpec, amake_row, prepare, records_frame
from ..run.report import RunReport, fill_missing
from ..run.setup import Engine
from ..run.sync import run_sync
from ..table.frame import build_frame, check_clashes, check_output_names

__all__ = ["BaseExtractor", "check_input_args"]

T = TypeVar("T", bound=BaseModel)
R = TypeVar("R")


class BaseExtractor(Generic[T]):
    """The machinery behind ``Extractor``'s entry points (see the module docstring)."""

    def __init__(self, output: type[T], config: ExtractorConfig) -> None:
        #: Every setting, validated (frozen; ``dataclasses.replace`` derives a variant).
        self.config = config
        #: The Pydantic model each row becomes.
        self.output = output
        check_output_names(output, config.column_prefix)
        #: The run machinery: schema, shared prefix, endpoint; fresh parts for every run.
        self.engine = Engine(config, output)
        #: The output model's schema, as sent.
        self.compiled = self.engine.compiled
        #: Where requests go (routed per request when no base URL was given).
        self.base_url = self.engine.endpoint.base_url
        self.router = self.engine.endpoint.router
        #: Tokens and cost of every run of this extractor, added up.
        self.usage = Usage()
        #: The report of the last run (``summary()``), or None before the first.
        self.last_run: RunReport | None = None
        #: After a Ctrl-C / cancellation: the partial frame (also on ``RunInterrupted.partial``).
        self.last_partial: pd.DataFrame | None = None

    # -- running -----------------------------------------------------------------------------

    def _sync(
        self,
        coroutine: Coroutine[Any, Any, R],
        partial_file: Callable[[], str | None] = lambda: None,
    ) -> R:
        """Run an entry point's coroutine from sync code (a script or Jupyter: ``run_sync``); a
        Ctrl-C raises ``RunInterrupted`` carrying ``last_partial`` and ``partial_file()``."""
        self.last_partial = None
        try:
            return run_sync(coroutine)
        except KeyboardInterrupt as interrupt:
            raise self._interrupted(interrupt, partial_file()) from interrupt

    async def _execute(self, rows: Any, **options: Any) -> tuple[list[RowResult], Any, RunReport]:
        """``Engine.execute`` (same options), then the usage tally and ``last_run``."""
        kept, stop_cause, report = await self.engine.execute(rows, **options)
        self.usage = self.usage + report.usage
        self.last_run = report
        return kept, stop_cause, report

    def _media(self) -> MediaOptions:
        """This extractor's media options, under any enclosing ``media_options`` block."""
        return current_options(self.config.media)

    def _prepare(
        self,
        data: Any,
        text: str | Sequence[str] | None,
        template: str | None,
        images: str | None,
        videos: str | None,
    ) -> PreparedInput:
        """The input rows of ``data``, every column option and name clash checked first."""
        check_input_args(text, template, images, videos)
        prepared = prepare(
            data, text=text, template=template, images=images, videos=videos, media=self._media()
        )
        grounding = bool(self.config.grounding_options.grounding)
        check_clashes(prepared.columns, self.output, self.config.column_prefix, grounding=grounding)
        return prepared

    async def _rows_frame(self, prepared: PreparedInput) -> pd.DataFrame:
        """Run prepared rows; the output frame (``arun``)."""
        lazy = prepared.frame is None
        kept: list[RowResult] = []

        def frame_of(stop_cause: BaseException | str | None) -> pd.DataFrame:
            if lazy:
                return self._frame_of(kept)
            assert prepared.index is not None
            return self._build(
                fill_missing(kept, prepared.index, stop_cause), prepared.index, prepared.frame
            )

        try:
            _, stop_cause, report = await self._execute(
                prepared.rows,
                total=prepared.length,
                progress=self.config.progress,
                sink=kept.extend,
                keep_records=lazy,
                # Rows and results of in-memory input are held anyway: never stall on one row.
                lookahead=None if lazy else prepared.length,
            )
        except asyncio.CancelledError:
            self.last_partial = frame_of("not run: interrupted")
            raise
        frame = frame_of(stop_cause)
        if stop_cause is not None:
            raise self._stopped(stop_cause, report, frame) from stop_cause
        return frame

    def _single(
        self,
        content: Any,
        images: Any,
        text: str | Sequence[str] | None,
        template: str | None,
        videos: str | None,
    ) -> Content | RowInput:
        """What ``extract`` / ``stream`` take: a text or content parts as they are, or one row
        (a pandas Series such as ``df.iloc[0]``, or a dict) read as ``run`` reads a DataFrame's
        rows, with ``text=`` / ``template=`` / ``images=`` / ``videos=`` naming its columns.
        Every option is checked here, before any request."""
        if isinstance(content, pd.Series | Mapping):
            record = content.to_dict() if isinstance(content, pd.Series) else dict(content)
            if not isinstance(images, str | None):
                raise InputError("for a row, images= names its column of images (as in run)")
            prepared = self._prepare([record], text, template, images, videos)
            return next(prepared.rows)
        if text is not None or template is not None or videos is not None:
            raise InputError(
                "text=, template= and videos= name a row's columns; pass a row (a Series such "
                "as df.iloc[0], or a dict), or the text itself with no column options"
            )
        if not isinstance(content, str | list):
            raise InputError(
                f"extract() takes a text, content parts or one row (a Series or dict); got "
                f"{type(content).__name__}"
            )
        return content

    async def _one(
        self,
        content: Content | RowInput,
        images: Any,
        *,
        stream: bool = False,
        listeners: Any = (),
    ) -> T:
        """One input -> one model instance, or the row's error raised (``aextract``).

        ``content``: a text, content parts, or a row ``_single`` read. ``stream``: request an
        SSE stream; ``listeners``: the run's own internal hooks (a stream's ``PartialTracker``)."""
        if isinstance(content, RowInput):
            row = content
        elif isinstance(content, list):
            row = RowInput(label=0, position=0, content=content)
        else:
            record = {"text": content, "images": images}
            images_key = "images" if images is not None else None
            # Media is read (or downloaded) in a worker thread, stopped at once by a cancel.
            row = await amake_row(record, TextSpec(columns=("text",)), images_key, self._media())
        results, stop_cause, _ = await self._execute(
            iter([row]),
            total=1,
            progress=False,
            ground_rows=False,
            stream=stream,
            listeners=listeners,
        )
        if stop_cause is not None:
            raise stop_cause
        result = results[0]
        if result.value is None:
            if result.exception is not None:
                raise result.exception
            raise RowError(result.error or "extraction failed")
        return result.value  # type: ignore[return-value]

    # -- frames --------------------------------------------------------------------------------

    def _build(
        self, results: list[RowResult], index: pd.Index, inputs: pd.DataFrame | None
    ) -> pd.DataFrame:
        """The output frame: the input columns, one column per output field, the ``kx_`` ones."""
        config = self.config
        return build_frame(
            model=self.output,
            results=results,
            index=index,
            input_frame=inputs,
            prefix=config.column_prefix,
            web_search=config.web_search,
            grounding=bool(config.grounding_options.grounding),
        )

    def _frame_of(self, results: list[RowResult]) -> pd.DataFrame:
        """An output frame for results that carry their input records."""
        labels = [r.label for r in results]
        try:
            index = pd.Index(labels)
        except UnicodeEncodeError:  # a label with a lone surrogate: no str dtype can hold it
            index = pd.Index(labels, dtype=object)
        records = [dict(r.record) if r.record is not None else {} for r in results]
        return self._build(results, index, records_frame(records, index) if records else None)

    # -- stop errors ---------------------------------------------------------------------------

    def _stopped(
        self, stop_cause: BaseException, report: RunReport, partial: pd.DataFrame
    ) -> RunStopped:
        """The error a stopped run raises (``BudgetExceeded`` for the budget), with ``partial``."""
        if isinstance(stop_cause, BudgetExceeded):
            return BudgetExceeded(
                f"budget ({self._budget_caps()}) reached after {report.ok} of {report.rows} rows; "
                "rows not sent hold a kx_error starting with 'budget' (rerun with a higher budget "
                "to resume: finished rows come from the result store)",
                partial=partial,
                cause=stop_cause,
            )
        return RunStopped(
            f"run stopped after {report.ok} of {report.rows} rows: {stop_cause}",
            partial=partial,
            cause=stop_cause,
        )

    def _budget_caps(self) -> str:
        budget, caps = self.config.budget, []
        if budget.max_total_tokens is not None:
            caps.append(f"max_total_tokens={budget.max_total_tokens:,}")
        if budget.max_cost is not None:
            caps.append(f"max_cost=${budget.max_cost:g}")
        return ", ".join(caps)

    def _interrupted(
        self, interrupt: KeyboardInterrupt, partial_file: str | None = None, note: str = ""
    ) -> RunInterrupted:
        """The ``RunInterrupted`` for a Ctrl-C, carrying ``last_partial``; ``note`` ends its
        message."""
        if isinstance(interrupt, RunInterrupted):
            return interrupt
        store, self.engine.run_store = self.engine.run_store, None
        location = self.config.store_path
        if location is None:
            message = (
                "interrupted; no result store: rerunning sends every row again (pass "
                "store='results.sqlite3' to keep finished rows)"
            )
        else:
            committed = store.committed_rows if store is not None else 0
            message = (
                f"interrupted; {committed:,} row(s) finished by this run are committed to the "
                f"result store {location}: rerunning serves every stored row from it and "
                "sends only the rest"
            )
        if partial_file is not None:
            message += f"; the rows written so far are in {partial_file}"
        message += note
        stopped = RunInterrupted(message, partial=self.last_partial, cause=interrupt)
        stopped.partial_file = partial_file
        return stopped


def check_input_args(text: Any, template: Any, images: Any, videos: Any = None) -> None:
    """The column options of a run (``text``, ``template``, ``images``, ``videos``), checked
    before any request."""
    if text is not None and not isinstance(text, str):
        if not (
            isinstance(text, Sequence) and len(text) > 0 and all(isinstance(t, str) for t in text)
        ):
            raise ConfigurationError(
                f"text must be a column name or a list of column names, got {text!r}"
            )
    if template is not None and not isinstance(template, str):
        raise ConfigurationError(f"template must be a str.format string, got {template!r}")
    for name, column in (("images", images), ("videos", videos)):
        if column is not None and not isinstance(column, str):
            raise ConfigurationError(f"{name} must be a column name, got {column!r}")
