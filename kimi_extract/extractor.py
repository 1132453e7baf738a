"""The public ``Extractor``: configuration checked up front, sync and async entry points."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Generic, Literal, TypeVar

import pandas as pd
from pydantic import BaseModel

from .config import (
    API_KEY_ENV_VARS,
    DEPRECATED_NAMES,
    ExtractorConfig,
    check_option_names,
    option_names,
    simulator_endpoint,
)
from .exceptions import (
    BudgetExceeded,
    ConfigurationError,
    MissingAPIKeyError,
    RowError,
    RunInterrupted,
    RunStopped,
    SchemaError,
)
from .ground import Work
from .http.limiter import Limiter
from .http.routing import Router
from .http.transport import RetryPolicy, Secret, Transport
from .http.wire import BodyEncoder
from .kimi import (
    CACHE_MIN_TOKENS,
    DEFAULT_BASE_URL,
    DEFAULT_CACHE_TTL,
    WEB_SEARCH_TOOL,
    ModelInfo,
)
from .media.documents import PageSpec, PdfMode
from .media.parts import MediaOptions, current_options
from .records import Content, Pricing, RowInput, RowResult, Usage
from .run.budget import RunBudget
from .run.conversation import RowSettings, charge_retry
from .run.documents import plan_documents
from .run.estimate import Estimate, auto_cache_ttl, predict, row_prompt_tokens
from .run.grounding import check_grounding_fields, threaded
from .run.inputs import TextSpec, amake_row, prepare, records_frame
from .run.report import RunReport, fill_missing, not_run_reason
from .run.request import (
    Mode,
    estimate_prompt_tokens,
    example_messages,
    response_format_for,
    system_prompt,
)
from .run.scheduler import RunSetup, run_engine
from .run.store import Location, Store, check_store, endpoint_identity, open_location, open_store
from .run.sync import run_sync
from .schema.compiled import compile_schema
from .table.documents import check_document_columns, document_frame
from .table.export import TableWriter, check_format
from .table.frame import build_frame, check_clashes, check_output_names

logger = logging.getLogger("kimi_extract")

T = TypeVar("T", bound=BaseModel)

#: run_to writes results in batches of this many rows.
WRITE_BATCH_ROWS = 1000
#: The keyword arguments of ``run`` / ``arun`` / ``run_to`` / ``estimate`` that name input
#: columns (the accessor and Dask pass these to the run; every other keyword is a setting).
COLUMN_OPTIONS = ("text", "template", "images", "videos")
#: Old setting names still accepted for one release, with a ``DeprecationWarning``: old -> new.
DEPRECATED_OPTIONS = DEPRECATED_NAMES


class Extractor(Generic[T]):
    """Extract instances of a Pydantic model from rows, documents and images with Kimi.

    ``Extractor(Review, instructions="...", concurrency=32)``: ``output`` is the Pydantic model
    each row becomes; every keyword is a setting of ``kx.ExtractorConfig`` (``kimi_extract.config``
    lists them with their defaults). ``Extractor(Review, config=cfg)`` takes a ready config, and
    ``Extractor(Review, config=cfg, rpm=600)`` uses ``dataclasses.replace(cfg, rpm=600)``.

    Every setting is checked here, before any request: a wrong type or range raises one
    ``ConfigurationError`` naming the setting; output fields may not take a ``kx_`` column name;
    the store location must be usable. ``store``: the result store (a path; None/True: the
    default location; False: none). ``cache=`` is its old name (deprecated: a
    ``DeprecationWarning``; "cache" now means Kimi's prompt cache only: ``cache_ttl``,
    ``cache_warm``).
    """

    def __init__(
        self, output: type[T], *, config: ExtractorConfig | None = None, **options: Any
    ) -> None:
        if not (isinstance(output, type) and issubclass(output, BaseModel)):
            # SchemaError is a ConfigurationError and a TypeError (what this raised before).
            raise SchemaError(f"output must be a pydantic BaseModel subclass, got {output!r}")
        check_option_names(options, option_names(), "Extractor")
        for old, new in DEPRECATED_OPTIONS.items():
            if old in options and new in options:
                raise ConfigurationError(f"pass {new}= only ({old}= is its deprecated old name)")
        if config is None:
            config = ExtractorConfig(**options)
        elif not isinstance(config, ExtractorConfig):
            raise ConfigurationError(
                f"config must be a kx.ExtractorConfig, got {type(config).__name__}"
            )
        elif options:
            config = dataclasses.replace(config, **options)
        #: Every setting, validated (frozen; ``dataclasses.replace`` derives a variant).
        self.config = config
        self.output = output
        try:
            self.compiled = compile_schema(output)
            if (
                config.grounding_options.grounding == "quotes"
            ):  # the schema also asks for a quote per field
                self.compiled = self.compiled.with_quotes()
        except RecursionError:
            raise SchemaError(
                f"output model {output.__name__} nests too deeply to compile (recursion limit); "
                "flatten it"
            ) from None
        check_output_names(output, config.column_prefix)
        check_grounding_fields(output, config.grounding_options.grounding_fields)
        base_url, self._secret = config.base_url, config.secret
        if config.simulated:  # base_url="simulator": the bundled simulator, with its own key
            base_url, key = simulator_endpoint()
            self._secret = Secret(key)
        self.base_url = base_url or DEFAULT_BASE_URL
        self.router = Router(base_url)
        #: Whose answers the store keeps: part of every store key (``store.endpoint_identity``).
        self.endpoint = endpoint_identity(
            self.router.explicit, text_url=self.router.text_url, media_url=self.router.media_url
        )
        if config.store_path is not None:
            check_store(config.store_path)  # on the machine that runs (a Dask worker too)
        prompt = system_prompt(config.instructions, self.compiled, config.mode)
        static = [{"role": "system", "content": prompt}]
        static += example_messages(config.examples, self.compiled)
        self._static_messages = tuple(static)
        self.usage = Usage()
        self.last_run: RunReport | None = None
        #: After a Ctrl-C / cancellation: the partial frame (also on ``RunInterrupted.partial``).
        self.last_partial: pd.DataFrame | None = None
        #: The result store of the run in progress (read by ``_interrupted``), else None.
        self._run_store: Store | None = None

    # -- settings (read-only views of ``config``) ------------------------------------------------

    @property
    def model(self) -> str:
        """The model name sent."""
        return self.config.model

    @property
    def info(self) -> ModelInfo:
        """The model's rules (``kx.ModelInfo``)."""
        return self.config.model_info

    @property
    def reasoning_effort(self) -> str | None:
        """The reasoning effort sent (normalized for the model; None: omitted)."""
        return self.config.effort

    @property
    def instructions(self) -> str | None:
        """The system prompt, or None."""
        return self.config.instructions

    @property
    def mode(self) -> Mode:
        """``"json_schema"`` or ``"json_object"``."""
        return self.config.mode

    @property
    def concurrency(self) -> int:
        """Rows in flight at once."""
        return self.config.limits.concurrency

    @property
    def rpm(self) -> int | None:
        """Client-side requests per minute, or None."""
        return self.config.limits.rpm

    @property
    def tpm(self) -> int | None:
        """Client-side tokens per minute, or None."""
        return self.config.limits.tpm

    @property
    def max_cost(self) -> float | None:
        """The budget in USD, or None."""
        return self.config.budget.max_cost

    @property
    def max_total_tokens(self) -> int | None:
        """The budget in tokens, or None."""
        return self.config.budget.max_total_tokens

    @property
    def max_completion_tokens(self) -> int:
        """The output budget of one request, reasoning included."""
        return self.config.max_completion_tokens

    @property
    def pricing(self) -> Pricing | None:
        """The price this model is billed at, or None when unknown."""
        return self.config.resolved_pricing

    @property
    def progress(self) -> bool:
        """Whether runs show a progress bar."""
        return self.config.progress

    @property
    def column_prefix(self) -> str:
        """Prepended to output column names."""
        return self.config.column_prefix

    @property
    def web_search(self) -> bool:
        """Whether Kimi's ``$web_search`` tool is offered."""
        return self.config.web_search

    @property
    def grounding(self) -> bool | str:
        """Whether each answer's leaves are aligned to the text sent (``kx_spans``)."""
        return self.config.grounding_options.grounding

    @property
    def media(self) -> MediaOptions:
        """How media cells become content parts (``MediaOptions``)."""
        return self.config.media

    @property
    def store_path(self) -> Location | None:
        """The result store: a file (``Path``), a PostgreSQL database (``StoreURL``, shown
        without its password), or None when this extractor keeps no store."""
        return self.config.store_path

    @property
    def cache_path(self) -> Location | None:
        """Deprecated name of ``store_path``."""
        warnings.warn(
            "Extractor.cache_path is deprecated: use store_path", DeprecationWarning, stacklevel=2
        )
        return self.config.store_path

    def __repr__(self) -> str:
        return (
            f"Extractor({self.output.__name__}, model={self.model!r}, "
            f"base_url={self.config.base_url if self.config.simulated else self.base_url!r}, "
            f"concurrency={self.concurrency}, mode={self.mode!r})"
        )

    # -- public entry points -------------------------------------------------------------------

    def run(
        self,
        data: Any,
        *,
        text: str | Sequence[str] | None = None,
        template: str | None = None,
        images: str | None = None,
        videos: str | None = None,
    ) -> pd.DataFrame:
        """Extract every row of ``data``; returns a DataFrame (see ``arun``). Works in Jupyter.

        Ctrl-C stops the run within moments: finished rows are already in the result store (when
        there is one), the connections are closed, and ``kx.RunInterrupted`` (a
        ``KeyboardInterrupt``) is raised with ``.partial`` holding every row (unfinished ones say
        so in ``kx_error``); its message says where the finished rows are.
        """
        self.last_partial = None
        try:
            return run_sync(
                self.arun(data, text=text, template=template, images=images, videos=videos)
            )
        except KeyboardInterrupt as interrupt:
            raise self._interrupted(interrupt) from interrupt

    def _interrupted(
        self, interrupt: KeyboardInterrupt, partial_file: str | None = None
    ) -> RunInterrupted:
        """The ``RunInterrupted`` for a Ctrl-C, carrying ``last_partial``."""
        if isinstance(interrupt, RunInterrupted):
            return interrupt
        store, self._run_store = self._run_store, None
        if self.store_path is None:
            message = (
                "interrupted; no result store: rerunning sends every row again (pass "
                "store='results.sqlite3' to keep finished rows)"
            )
        else:
            committed = store.committed_rows if store is not None else 0
            message = (
                f"interrupted; {committed:,} row(s) finished by this run are committed to the "
                f"result store {self.store_path}: rerunning serves every stored row from it and "
                "sends only the rest"
            )
        if partial_file is not None:
            message += f"; the rows written so far are in {partial_file}"
        stopped = RunInterrupted(message, partial=self.last_partial, cause=interrupt)
        stopped.partial_file = partial_file
        return stopped

    async def arun(
        self,
        data: Any,
        *,
        text: str | Sequence[str] | None = None,
        template: str | None = None,
        images: str | None = None,
        videos: str | None = None,
    ) -> pd.DataFrame:
        """Extract every row of ``data`` (DataFrame, Series, list of str or dict).

        ``text``: the column (or columns) holding the text; ``template``: a ``str.format``
        template over columns instead; ``images``: a column of image paths/bytes/URLs;
        ``videos``: a column of videos (paths/bytes/URLs; see ``kimi_extract.run.inputs``). Returns
        the input columns, one column per output field, and the ``kx_`` accounting columns. Raises
        ``RunStopped`` (with ``.partial``) when a run-level error stops the run (also when the
        input iterator raises or the result store fails: finished rows are kept).
        """
        _check_input_args(text, template, images, videos)
        prepared = prepare(
            data, text=text, template=template, images=images, videos=videos, media=self._media()
        )
        check_clashes(
            prepared.columns, self.output, self.column_prefix, grounding=bool(self.grounding)
        )
        lazy = prepared.frame is None
        kept: list[RowResult] = []

        def frame_of(stop_cause: BaseException | str | None) -> pd.DataFrame:
            if lazy:
                return self._frame_of(kept)
            assert prepared.index is not None
            return build_frame(
                model=self.output,
                results=fill_missing(kept, prepared.index, stop_cause),
                index=prepared.index,
                input_frame=prepared.frame,
                prefix=self.column_prefix,
                web_search=self.web_search,
                grounding=bool(self.grounding),
            )

        try:
            _, stop_cause, report = await self._execute(
                prepared.rows,
                total=prepared.length,
                progress=self.progress,
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

    def run_to(
        self,
        path: str | os.PathLike[str],
        data: Any,
        *,
        text: str | Sequence[str] | None = None,
        template: str | None = None,
        images: str | None = None,
        videos: str | None = None,
    ) -> RunReport:
        """Extract every row of ``data`` and write the results to ``path`` as they finish.

        ``path`` ends in .jsonl, .parquet or .csv; rows are written in input order, batch by
        batch, so memory stays bounded for any input size (``data`` may be a generator of str or
        dict items). Returns the run report. A path that is not a file path, an unknown format,
        or a directory that does not exist or cannot take new files is a ``ConfigurationError``
        naming the path, before any request.

        ``path`` is replaced only when the run finishes: until then rows go to a temporary file
        of this run's own beside it (two runs writing one target never mix: the last to finish
        wins, whole). When the run stops (``RunStopped``), the output cannot be written or
        completed, raises anything, or is interrupted (``RunInterrupted``), an existing ``path``
        is left as it was and the rows written so far are kept as ``STEM.partial.SUFFIX`` beside
        it (else in the temp directory); the error's message and ``partial_file`` name that
        file. Rows the output could not take (a full disk) are in the error's ``partial``.
        """
        writer: list[TableWriter] = []
        self.last_partial = None  # the rows are in the file: RunInterrupted.partial stays None
        try:
            return run_sync(
                self.arun_to(
                    path,
                    data,
                    text=text,
                    template=template,
                    images=images,
                    videos=videos,
                    _writer=writer,
                )
            )
        except KeyboardInterrupt as interrupt:
            kept = writer[0].kept if writer and writer[0].aborted else None
            raise self._interrupted(interrupt, str(kept) if kept else None) from interrupt

    async def arun_to(
        self,
        path: str | os.PathLike[str],
        data: Any,
        *,
        text: str | Sequence[str] | None = None,
        template: str | None = None,
        images: str | None = None,
        videos: str | None = None,
        _writer: list[TableWriter] | None = None,
    ) -> RunReport:
        """Async ``run_to`` (the same guarantees for ``path``)."""
        check_format(path)
        _check_input_args(text, template, images, videos)
        prepared = prepare(
            data, text=text, template=template, images=images, videos=videos, media=self._media()
        )
        check_clashes(
            prepared.columns, self.output, self.column_prefix, grounding=bool(self.grounding)
        )
        writer = TableWriter(path)  # creates its temporary file: a place it cannot write stops here
        if _writer is not None:
            _writer.append(writer)
        #: Finished rows not yet in the file; after a failed write, every row the file lacks.
        buffer: list[RowResult] = []
        failed: list[BaseException] = []

        def flush() -> None:
            if buffer and not failed:
                try:
                    writer.write(self._frame_of(buffer))
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
            _, stop_cause, report = await self._execute(
                prepared.rows,
                total=prepared.length,
                progress=self.progress,
                sink=sink,
                keep_records=True,
            )
        except BaseException:
            # Keep what finished beside the target; the target itself stays as it was.
            with contextlib.suppress(Exception):
                flush()
            writer.abort()
            self.last_partial = self._unwritten(buffer, failed)
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
        raise self._output_stopped(path, writer, stop_cause, report, buffer, failed) from stop_cause

    def _unwritten(
        self, buffer: list[RowResult], failed: list[BaseException]
    ) -> pd.DataFrame | None:
        """The rows the output could not take (a frame), or None when every row is in a file."""
        if not buffer or not failed:
            return None
        try:
            return self._frame_of(buffer)
        except Exception:  # the rows cannot even make a frame: nothing more to keep
            return None

    def _output_stopped(
        self,
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
        unwritten = self._unwritten(buffer, failed)
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
            where += (
                f"; {len(unwritten)} rows the output could not take are in the error's .partial"
            )
        stop_class = BudgetExceeded if isinstance(stop_cause, BudgetExceeded) else RunStopped
        stopped = stop_class(
            f"run stopped after {report.ok} rows: {stop_cause}; {os.fspath(path)} was not "
            f"changed, {where}",
            partial=unwritten,
            cause=stop_cause,
        )
        stopped.partial_file = str(kept) if kept is not None else None
        return stopped

    def _budget_caps(self) -> str:
        caps = []
        if self.max_total_tokens is not None:
            caps.append(f"max_total_tokens={self.max_total_tokens:,}")
        if self.max_cost is not None:
            caps.append(f"max_cost=${self.max_cost:g}")
        return ", ".join(caps)

    def _frame_of(self, results: list[RowResult]) -> pd.DataFrame:
        """An output frame for results that carry their input records."""
        labels = [r.label for r in results]
        try:
            index = pd.Index(labels)
        except UnicodeEncodeError:  # a label with a lone surrogate: no str dtype can hold it
            index = pd.Index(labels, dtype=object)
        records = [dict(r.record) if r.record is not None else {} for r in results]
        inputs = records_frame(records, index) if records else None
        return build_frame(
            model=self.output,
            results=results,
            index=index,
            input_frame=inputs,
            prefix=self.column_prefix,
            web_search=self.web_search,
            grounding=bool(self.grounding),
        )

    def estimate(
        self,
        data: Any,
        *,
        text: str | Sequence[str] | None = None,
        template: str | None = None,
        images: str | None = None,
        videos: str | None = None,
    ) -> Estimate:
        """Predict requests, prompt/cached/completion tokens and cost without calling the API.

        Every request reads the shared prefix from the prompt cache once the first has written it
        and writes its own row's blocks; completion is the mean reasoning of the effort plus the
        expected answer of the output schema; rows already in the result store cost nothing. See
        ``kimi_extract.run.estimate`` for the assumptions.
        """
        _check_input_args(text, template, images, videos)
        prepared = prepare(
            data, text=text, template=template, images=images, videos=videos, media=self._media()
        )
        settings = self._settings(prepared.length)
        store = open_location(self.store_path) if self.store_path is not None else None
        try:
            prompts, stored = row_prompt_tokens(prepared.rows, settings, store)
        finally:
            if store is not None:
                store.close()
        return predict(
            row_prompt_tokens=prompts,
            stored=stored,
            prefix_tokens=settings.prefix_tokens,
            schema=self.compiled.schema,
            reasoning_effort=self.reasoning_effort,
            separate_cache_writes=self.info.separate_cache_writes,
            pricing=self.pricing,
            cache_ttl=settings.cache_ttl,
        )

    def run_documents(self, sources: Any, **options: Any) -> pd.DataFrame:
        """Extract from documents (.txt, .md, .html, .pdf): see ``kimi_extract.run.documents``.

        Ctrl-C raises ``RunInterrupted`` whose ``partial`` holds the document rows so far."""
        self.last_partial = None
        try:
            return run_sync(self.arun_documents(sources, **options))
        except KeyboardInterrupt as interrupt:
            raise self._interrupted(interrupt) from interrupt

    async def arun_documents(
        self,
        sources: Any,
        *,
        pdf_mode: PdfMode = "auto",
        pages: PageSpec = None,
        per_page: bool = False,
        chunk_pages: int | None = None,
        chunk_chars: int | None = None,
        explode: str | None = None,
        item_prefix: str = "",
        path_column: str = "path",
        text_column: str | None = None,
        recursive: bool = False,
        max_image_pixels: int | None | Literal["default"] = "default",
    ) -> pd.DataFrame:
        """Async ``run_documents``: every chunk is a row of one run, merged per document.

        ``sources``: a directory (its supported files, sorted; ``recursive=True`` for
        subfolders), a file path, a list of paths, or a DataFrame whose ``path_column`` holds the
        paths (its other columns are kept). ``text_column``: also keep each row's document text
        under that name. ``max_image_pixels``: size of rendered pages and images (default: the
        extractor's). The other options: see ``kimi_extract.run.documents``.
        """
        plan = plan_documents(
            sources,
            media=self._media(),
            pdf_mode=pdf_mode,
            pages=pages,
            per_page=per_page,
            chunk_pages=chunk_pages,
            chunk_chars=chunk_chars,
            path_column=path_column,
            recursive=recursive,
            max_image_pixels=max_image_pixels,
        )
        check_document_columns(
            plan,
            self.output,
            prefix=self.column_prefix,
            text_column=text_column,
            explode=explode,
            item_prefix=item_prefix,
        )
        source_dtypes = (
            {str(c): t for c, t in sources.dtypes.items()}
            if isinstance(sources, pd.DataFrame)
            else None
        )
        grounding = bool(self.grounding)
        await plan.load(char_boxes=grounding)
        kept: list[RowResult] = []
        # grounding the merged documents runs in a worker thread that a Ctrl-C stops (the
        # units not grounded by then have no spans); the partial frame is built without it
        work = Work(threading.Event())

        def frame_of(stop_cause: BaseException | str | None) -> pd.DataFrame:
            return document_frame(
                plan,
                plan.merge(
                    kept,
                    self.output,
                    not_run_reason(stop_cause),
                    grounding=self.grounding,
                    grounding_fields=self.config.grounding_options.grounding_fields,
                    work=work,
                ),
                model=self.output,
                prefix=self.column_prefix,
                web_search=self.web_search,
                grounding=grounding,
                source_dtypes=source_dtypes,
                text_column=text_column,
                explode=explode,
                item_prefix=item_prefix,
            )

        total = plan.chunk_count
        if total == 0:
            return frame_of(None)
        try:
            _, stop_cause, report = await self._execute(
                plan.rows(),
                total=total,
                progress=self.progress,
                sink=kept.extend,
                lookahead=total,  # the chunks are in memory anyway: never stall on one row
                # documents are grounded after the merge, in their pages; with quotes, each
                # chunk is checked through its own quotes first (the merge reads them)
                ground_rows=self.grounding == "quotes",
            )
        except asyncio.CancelledError:
            work.stop()
            self.last_partial = frame_of("not run: interrupted")  # RunInterrupted.partial
            raise
        try:
            if grounding:
                frame = await threaded(frame_of, stop_cause)
            else:
                frame = frame_of(stop_cause)
        except asyncio.CancelledError:
            work.stop()
            self.last_partial = frame_of("not run: interrupted")
            raise
        if stop_cause is not None:
            raise self._stopped(stop_cause, report, frame) from stop_cause
        return frame

    def extract(self, content: Content, *, images: Any = None) -> T:
        """Extract one input; returns the model instance or raises the row's error.

        Ctrl-C raises ``RunInterrupted`` (its ``partial`` is None: there is no frame)."""
        self.last_partial = None
        try:
            return run_sync(self.aextract(content, images=images))
        except KeyboardInterrupt as interrupt:
            raise self._interrupted(interrupt) from interrupt

    async def aextract(self, content: Content, *, images: Any = None) -> T:
        """Async ``extract``: one text (and optional images) -> one model instance."""
        if isinstance(content, list):
            row = RowInput(label=0, position=0, content=content)
        else:
            record = {"text": content, "images": images}
            images_key = "images" if images is not None else None
            # Media is read (or downloaded) in a worker thread, stopped at once by a cancel.
            row = await amake_row(record, TextSpec(columns=("text",)), images_key, self._media())
        results, stop_cause, _ = await self._execute(
            iter([row]), total=1, progress=False, ground_rows=False
        )
        if stop_cause is not None:
            raise stop_cause
        result = results[0]
        if result.value is None:
            if result.exception is not None:
                raise result.exception
            raise RowError(result.error or "extraction failed")
        return result.value  # type: ignore[return-value]

    # -- internals -----------------------------------------------------------------------------

    def _settings(self, total_rows: int | None) -> RowSettings:
        prefix_text = ""
        if self.mode == "json_schema":
            prefix_text = json.dumps(self.compiled.schema, separators=(",", ":"))
        prefix_tokens = estimate_prompt_tokens(self._static_messages, prefix_text)
        ttl = self.config.prompt_cache.cache_ttl
        if ttl == "auto":
            ttl = auto_cache_ttl(
                total_rows=total_rows,
                prefix_tokens=prefix_tokens,
                concurrency=self.concurrency,
                rpm=self.rpm,
                pricing=self.pricing,
                accepts_ttl=self.info.cache_options,
            )
        cache_options = {"mode": "implicit", "ttl": ttl} if ttl else None
        return RowSettings(
            model=self.model,
            compiled=self.compiled,
            static_messages=self._static_messages,
            response_format=response_format_for(self.compiled, self.mode),
            reasoning_effort=self.reasoning_effort,
            max_completion_tokens=self.max_completion_tokens,
            validation_retries=self.config.validation_retries,
            context_window=self.info.context_window,
            prompt_cache_options=cache_options,
            pricing=self.pricing,
            separate_cache_writes=self.info.separate_cache_writes,
            cache_ttl=ttl or DEFAULT_CACHE_TTL,
            prefix_tokens=prefix_tokens,
            stream=self.config.stream,
            tools=(dict(WEB_SEARCH_TOOL),) if self.web_search else (),
            max_tool_rounds=self.config.max_tool_rounds,
            mode=self.mode,
            endpoint=self.endpoint,
            grounding=self.grounding,
            grounding_fields=self.config.grounding_options.grounding_fields,
        )

    def _transport(self, limiter: Limiter) -> Transport:
        if self._secret is None:
            raise MissingAPIKeyError(
                "no API key: pass api_key=... or set one of the environment variables "
                + " / ".join(API_KEY_ENV_VARS)
            )
        return Transport(
            base_url=self.base_url,
            api_key=self._secret,
            on_retry=charge_retry,  # budgets count retried attempts of unknown cost
            concurrency=self.concurrency,
            timeout=self.config.connection.timeout,
            max_response_bytes=self.config.connection.max_response_bytes,
            retry=RetryPolicy(
                max_retries=self.config.connection.max_retries,
                max_wait=self.config.connection.max_retry_wait,
            ),
            http_backend=self.config.connection.http_backend,
            gate=limiter,
            router=self.router,
        )

    def _media(self) -> MediaOptions:
        """This extractor's media options, under any enclosing ``media_options`` block."""
        return current_options(self.media)

    async def _execute(
        self,
        rows: Any,
        *,
        total: int | None,
        progress: bool,
        sink: Callable[[list[RowResult]], None] | None = None,
        keep_records: bool = False,
        lookahead: int | None = None,
        ground_rows: bool = True,
    ) -> tuple[list[RowResult], BaseException | None, RunReport]:
        """Run rows through a fresh transport and scheduler; tally usage; log the summary.

        Results go to ``sink`` in input order when given (and are not returned), else they are
        returned as a list. ``ground_rows=False``: no spans per row (documents ground merged rows).
        """
        limiter = Limiter(
            concurrency=self.concurrency,
            rpm=self.rpm,
            tpm=self.tpm,
            adaptive=self.config.limits.adaptive,
        )
        transport = self._transport(limiter)
        settings = self._settings(total)
        if not ground_rows:
            settings = dataclasses.replace(settings, grounding=False)
        transport.encoder = BodyEncoder(settings.static_messages, settings.response_format)
        budget = None
        if self.config.budget.limited:
            budget = RunBudget(
                max_cost=self.max_cost,
                max_total_tokens=self.max_total_tokens,
                pricing=self.pricing,
                separate_cache_writes=self.info.separate_cache_writes,
                cache_ttl=settings.cache_ttl,
            )
        setup = RunSetup(
            settings=settings,
            transport=transport,
            limiter=limiter,
            budget=budget,
            store=open_store(self.store_path, progress, endpoint=self.endpoint),
            concurrency=self.concurrency,
            warm_first=self.config.prompt_cache.cache_warm
            and settings.prefix_tokens > CACHE_MIN_TOKENS,
        )
        self._run_store = setup.store
        kept, stop_cause, report = await run_engine(
            rows,
            setup,
            total=total,
            progress=progress,
            sink=sink,
            keep_records=keep_records,
            lookahead=lookahead,
        )
        self._run_store = None  # still set after a Ctrl-C: _interrupted reads it
        self.usage = self.usage + report.usage
        self.last_run = report
        return kept, stop_cause, report


def _check_input_args(text: Any, template: Any, images: Any, videos: Any = None) -> None:
    """The column options of a run (``COLUMN_OPTIONS``), checked before any request."""
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
