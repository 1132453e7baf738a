"""The public ``Extractor``: configuration checked up front, sync and async entry points.

This is the face: the settings (``kimi_extract.config``), and one sync and one async method per
way in. The machinery behind them is ``pipeline`` (rows and documents to frames and files) and
``run.setup`` (the run's parts, assembled from the config).
"""

from __future__ import annotations

import dataclasses
import operator
import os
import warnings
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeVar

import pandas as pd
from pydantic import BaseModel

from .config import DEPRECATED_NAMES, ExtractorConfig, check_option_names, option_names
from .config.location import Location
from .exceptions import ConfigurationError, SchemaError
from .media.documents import PageSpec, PdfMode
from .pipeline.base import BaseExtractor
from .pipeline.documents import estimate_documents, extract_documents
from .pipeline.output import write_rows
from .pipeline.stream import iterate_sync, row_frames, stream_values
from .records import Content
from .run.estimate import Estimate
from .run.report import RunReport
from .table.export import TableWriter, check_format

__all__ = ["COLUMN_OPTIONS", "DEPRECATED_OPTIONS", "Extractor", "RunReport"]

T = TypeVar("T", bound=BaseModel)

#: The keyword arguments of ``run`` / ``arun`` / ``run_to`` / ``estimate`` that name input
#: columns (the accessor and Dask pass these to the run; every other keyword is a setting).
COLUMN_OPTIONS = ("text", "template", "images", "videos")
#: Old setting names still accepted for one release, with a ``DeprecationWarning``: old -> new.
DEPRECATED_OPTIONS = DEPRECATED_NAMES
#: Attributes that re-exposed a setting, deprecated for one release: name -> where it is now.
MOVED_ATTRIBUTES = {
    "info": "config.model_info",
    "reasoning_effort": "config.effort",
    "instructions": "config.instructions",
    "mode": "config.mode",
    "concurrency": "config.concurrency",
    "rpm": "config.rpm",
    "tpm": "config.tpm",
    "max_cost": "config.max_cost",
    "max_tokens": "config.max_total_tokens",
    "max_completion_tokens": "config.max_completion_tokens",
    "pricing": "config.resolved_pricing",
    "progress": "config.progress",
    "prefix": "config.column_prefix",
    "web_search": "config.web_search",
    "grounding": "config.grounding",
    "media": "config.media",
}


class Extractor(BaseExtractor[T]):
    """Extract instances of a Pydantic model from rows, documents and images with Kimi.

    ``Extractor(Review, instructions="...", concurrency=32)``: ``output`` is the Pydantic model
    each row becomes; every keyword is a setting of ``kx.ExtractorConfig`` or one of its groups
    (``limits=kx.Limits(...)`` ...; docs/configuration.md lists them with their defaults).
    ``Extractor(Review, config=cfg)`` takes a ready config, and
    ``Extractor(Review, config=cfg, rpm=600)`` uses ``dataclasses.replace(cfg, rpm=600)``.

    Every setting is checked here, before any request: a wrong type or range raises one
    ``ConfigurationError`` naming the setting; output fields may not take a ``kx_`` column name;
    the store location must be usable. Old setting names (``cache=``, ``max_tokens=``,
    ``prefix=``) work for one release with a ``DeprecationWarning``. Read a setting back from
    ``ex.config`` (``ex.config.rpm``); ``usage``, ``last_run`` and ``last_partial`` are what runs
    leave behind.
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
        super().__init__(output, config)

    @property
    def model(self) -> str:
        """The model name sent."""
        return self.config.model

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

    def __getattr__(self, name: str) -> Any:
        # Only reached for a name no attribute has: the settings this class used to mirror.
        moved = MOVED_ATTRIBUTES.get(name)
        if moved is None or name.startswith("__"):
            raise AttributeError(f"'Extractor' object has no attribute {name!r}")
        warnings.warn(
            f"Extractor.{name} is deprecated: use ex.{moved}", DeprecationWarning, stacklevel=2
        )
        return operator.attrgetter(moved)(self)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in MOVED_ATTRIBUTES:
            raise AttributeError(
                f"Extractor.{name} is a setting: derive another extractor with "
                f"kx.Extractor(Model, config=ex.config, {name}=...)"
            )
        super().__setattr__(name, value)

    def __repr__(self) -> str:
        config = self.config
        return (
            f"Extractor({self.output.__name__}, model={config.model!r}, "
            f"base_url={config.base_url if config.simulated else self.base_url!r}, "
            f"concurrency={config.concurrency}, mode={config.mode!r})"
        )

    # -- rows -> DataFrame ---------------------------------------------------------------------

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
        return self._sync(
            self.arun(data, text=text, template=template, images=images, videos=videos)
        )

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
        return await self._rows_frame(self._prepare(data, text, template, images, videos))

    # -- rows -> file --------------------------------------------------------------------------

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

        def partial_file() -> str | None:
            kept = writer[0].kept if writer and writer[0].aborted else None
            return str(kept) if kept else None

        coroutine = self.arun_to(
            path, data, text=text, template=template, images=images, videos=videos, _writer=writer
        )
        # The rows are in the file: RunInterrupted.partial stays None.
        return self._sync(coroutine, partial_file)

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
        prepared = self._prepare(data, text, template, images, videos)
        writer = TableWriter(path)  # creates its temporary file: a place it cannot write stops here
        if _writer is not None:
            _writer.append(writer)
        return await write_rows(self, path, prepared, writer)

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
        prepared = self._prepare(data, text, template, images, videos)
        return self.engine.estimate(prepared.rows, prepared.length)

    # -- documents -----------------------------------------------------------------------------

    def estimate_documents(self, sources: Any, **options: Any) -> Estimate:
        """``estimate`` for ``run_documents(sources, **options)``: the documents are read and cut
        as the run would cut them (no request); with ``passes=N`` every chunk is priced at N
        passes (an upper bound: a chunk stops early when a pass adds nothing). Frame options
        (``explode``, ``item_prefix``, ``text_column``) are accepted and play no part."""
        return self._sync(estimate_documents(self, sources, **options))

    def run_documents(self, sources: Any, **options: Any) -> pd.DataFrame:
        """Extract from documents (.txt, .md, .html, .pdf): see ``kimi_extract.run.documents``.

        Ctrl-C raises ``RunInterrupted`` whose ``partial`` holds the document rows so far."""
        return self._sync(self.arun_documents(sources, **options))

    async def arun_documents(
        self,
        sources: Any,
        *,
        pdf_mode: PdfMode = "auto",
        pages: PageSpec = None,
        per_page: bool = False,
        chunk_pages: int | None = None,
        chunk_chars: int | None = None,
        chunk_overlap: int | None = None,
        passes: int = 1,
        merge: dict[str, str] | None = None,
        dedupe_on: Sequence[str] | None = None,
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
        return await extract_documents(
            self,
            sources,
            pdf_mode=pdf_mode,
            pages=pages,
            per_page=per_page,
            chunk_pages=chunk_pages,
            chunk_chars=chunk_chars,
            chunk_overlap=chunk_overlap,
            passes=passes,
            merge=merge,
            dedupe_on=dedupe_on,
            explode=explode,
            item_prefix=item_prefix,
            path_column=path_column,
            text_column=text_column,
            recursive=recursive,
            max_image_pixels=max_image_pixels,
        )

    # -- one input -----------------------------------------------------------------------------

    def extract(
        self,
        content: Content | pd.Series | Mapping[str, Any],
        *,
        images: Any = None,
        text: str | Sequence[str] | None = None,
        template: str | None = None,
        videos: str | None = None,
    ) -> T:
        """Extract one input; returns the model instance or raises the row's error.

        ``content``: a text (with ``images=``: the images themselves), content parts, or one
        row (a Series such as ``df.iloc[0]``, or a dict) read as ``run`` reads a row, with
        ``text=`` / ``template=`` / ``images=`` / ``videos=`` naming its columns.
        Ctrl-C raises ``RunInterrupted`` (its ``partial`` is None: there is no frame)."""
        one = self._single(content, images, text, template, videos)
        return self._sync(self._one(one, images))

    async def aextract(
        self,
        content: Content | pd.Series | Mapping[str, Any],
        *,
        images: Any = None,
        text: str | Sequence[str] | None = None,
        template: str | None = None,
        videos: str | None = None,
    ) -> T:
        """Async ``extract``: one text or row (and optional images) -> one model instance."""
        return await self._one(self._single(content, images, text, template, videos), images)

    # -- results as they come ------------------------------------------------------------------

    def stream(
        self,
        content: Content | pd.Series | Mapping[str, Any],
        *,
        images: Any = None,
        text: str | Sequence[str] | None = None,
        template: str | None = None,
        videos: str | None = None,
    ) -> Iterator[T]:
        """Partial instances of the output model as the answer to one input streams, then the
        value ``extract`` returns for it (docs/streaming.md). The input: as ``extract``'s (a
        text, content parts, or one row with its column options).

        Fields appear once complete enough to validate, lists grow item by item, and fields not
        yet there hold their default or None (``model_fields_set`` names those that came). A
        reask, a retry or a larger budget streams a new answer: the values start again from an
        instance with no field set. The last value is ``extract``'s; a row error is raised after
        the values before it. Ctrl-C while waiting raises ``RunInterrupted``."""
        one = self._single(content, images, text, template, videos)
        self.last_partial = None
        return iterate_sync(stream_values(self, one, images), self._interrupted)

    def astream(
        self,
        content: Content | pd.Series | Mapping[str, Any],
        *,
        images: Any = None,
        text: str | Sequence[str] | None = None,
        template: str | None = None,
        videos: str | None = None,
    ) -> AsyncIterator[T]:
        """Async ``stream``: ``async for partial in ex.astream(text)``."""
        one = self._single(content, images, text, template, videos)
        return stream_values(self, one, images)

    def iter_rows(
        self,
        data: Any,
        *,
        text: str | Sequence[str] | None = None,
        template: str | None = None,
        images: str | None = None,
        videos: str | None = None,
    ) -> Iterator[pd.DataFrame]:
        """Extract every row of ``data`` (as ``run``), handing each row over as it finishes: a
        one-row DataFrame with ``run``'s columns, in completion order (docs/streaming.md).

        The column options are checked here, before any request. The run is ``run``'s: result
        store, budget, a row's failure in its ``kx_error``; a stopped run raises its
        ``RunStopped`` / ``BudgetExceeded`` after the last finished row. Ctrl-C while waiting
        raises ``RunInterrupted``: its message says how many rows were handed over, and
        ``partial`` holds every finished row (handed over or not) and the rows never run."""
        prepared = self._prepare(data, text, template, images, videos)
        self.last_partial = None
        handed = 0

        def interrupted(interrupt: KeyboardInterrupt) -> BaseException:
            note = f"; iter_rows had handed over {handed:,} finished row(s)"
            return self._interrupted(interrupt, note=note)

        def rows() -> Iterator[pd.DataFrame]:
            nonlocal handed
            for frame in iterate_sync(row_frames(self, prepared), interrupted):
                handed += 1
                yield frame

        return rows()

    def aiter_rows(
        self,
        data: Any,
        *,
        text: str | Sequence[str] | None = None,
        template: str | None = None,
        images: str | None = None,
        videos: str | None = None,
    ) -> AsyncIterator[pd.DataFrame]:
        """Async ``iter_rows``: ``async for row in ex.aiter_rows(df, text="review")``."""
        return row_frames(self, self._prepare(data, text, template, images, videos))
