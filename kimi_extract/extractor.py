"""The public ``Extractor``: configuration checked up front, sync and async entry points."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import pandas as pd
from pydantic import BaseModel

from .exceptions import (
    BudgetExceeded,
    ConfigurationError,
    MissingAPIKeyError,
    RowError,
    RunInterrupted,
    RunStopped,
    SchemaError,
)
from .http.backends import BACKENDS, DEFAULT_MAX_RESPONSE_BYTES
from .http.limits import Budget, Limiter
from .http.routing import Router
from .http.transport import RetryPolicy, Secret, Transport
from .kimi import (
    DEFAULT_BASE_URL,
    DEFAULT_MAX_COMPLETION_TOKENS,
    DEFAULT_MODEL,
    MAX_COMPLETION_TOKENS,
    model_info,
    normalize_effort,
    resolve_pricing,
)
from .media.parts import (
    DEFAULT_FETCH_TIMEOUT,
    DEFAULT_MAX_DECODE_PIXELS,
    DEFAULT_MAX_FETCH_BYTES,
    DEFAULT_MAX_IMAGE_PIXELS,
    MediaOptions,
    current_options,
)
from .records import Content, Pricing, RowInput, RowResult, Usage
from .run.conversation import RowSettings, charge_retry
from .run.estimate import CACHE_MIN_TOKENS, Estimate, auto_cache_ttl, predict, row_prompt_tokens
from .run.inputs import TextSpec, amake_row, prepare
from .run.report import RunReport, fill_missing
from .run.request import (
    BodyEncoder,
    Mode,
    estimate_prompt_tokens,
    example_messages,
    response_format_for,
    system_prompt,
)
from .run.scheduler import run_engine
from .run.store import (
    ResultStore,
    check_location,
    endpoint_identity,
    is_local_endpoint,
    open_store,
)
from .run.store import resolve as store_path
from .run.sync import run_sync
from .schema.compiled import compile_schema
from .table.export import TableWriter
from .table.frame import build_frame, check_clashes, check_output_names

logger = logging.getLogger("kimi_extract")

T = TypeVar("T", bound=BaseModel)

API_KEY_ENV_VARS = ("KIMI_API_KEY", "EVOLINK_API_KEY")
#: run_to writes results in batches of this many rows.
WRITE_BATCH_ROWS = 1000
BASE_URL_ENV_VAR = "KIMI_BASE_URL"
#: The largest ``concurrency`` accepted: the highest Kimi tier allows 1,000 requests in flight.
MAX_CONCURRENCY = 1000


class Extractor(Generic[T]):
    """Extract instances of a Pydantic model from rows, documents and images with Kimi.

    Every setting is checked here, before any request: a wrong type or range raises one
    ``ConfigurationError`` naming the setting (``concurrency`` at most ``MAX_CONCURRENCY`` =
    1,000; ``timeout`` > 0; output fields may not take a ``kx_`` column name; the store location
    must be usable). ``cache``: the result store (a path; None/True: the default location; False:
    none); runs against a loopback endpoint (the simulator) get no default store. ``max_cost`` /
    ``max_tokens``: hard budgets, checked before every attempt against its worst case
    (``kimi_extract.http.limits.Budget``).

    ``output``: the Pydantic model each row becomes. ``instructions``: the system prompt (static,
    so it forms a cacheable prefix). ``examples``: optional few-shot ``(input, output)`` pairs.
    ``model``: default ``kimi-k3.1-pro``. ``reasoning_effort``: default ``"low"`` (the API's own
    default is max). ``api_key``: default env ``KIMI_API_KEY`` then ``EVOLINK_API_KEY``.
    ``base_url``: default env ``KIMI_BASE_URL``, else routed per request: image/video requests to
    ``https://api.evolink.ai``, text to ``https://direct.evolink.ai``, failing over between them
    (``kimi_extract.http.routing``).
    ``concurrency``: rows in flight at once (default 16). ``validation_retries``: reasks after an
    invalid answer (default 2). ``max_completion_tokens``: output budget incl. reasoning (default
    16,384; a truncated answer is retried once with double). ``pricing``: a ``kx.Pricing`` or a
    dict of them by model name (default: the package's table). ``cache_ttl``: ``"5m"`` or ``"1h"``
    prompt-cache write TTL (K3.1 only); ``"auto"`` (default) picks 1h when the run is expected to
    outlast the point where one 1-hour write is cheaper than repeated 5-minute writes, else sends
    nothing (the server's 5 m default); None never sends it. ``cache_warm``: when the shared
    prefix is long enough to be cached (> 256 tokens), send one request first and fan out after it
    completes, so the prefix is written once. ``rpm`` / ``tpm``: client-side request and token
    limits per minute (no 60-second window exceeds them). ``adaptive``: slow start and a CUBIC
    send rate that backs off on 429s and adopts the limits Kimi's 429 messages name.
    ``mode``: ``"json_schema"`` (strict structured output) or ``"json_object"``. ``max_retries``,
    ``max_retry_wait``: the transport retry policy. ``timeout``: deadline in seconds for each HTTP
    attempt, from connect to last byte (streams: also the longest silence between two events,
    at most 120 s). ``max_response_bytes``: cap on one response body after decompression
    (default 32 MiB); a larger one fails that row with ``ResponseTooLargeError``.
    ``progress``: show a tqdm bar. ``prefix``: prepended to output column names. ``stream``:
    request SSE streams (results are identical). ``web_search``: offer Kimi's built-in
    ``$web_search`` tool and run the tool loop (at most ``max_tool_rounds`` rounds per row; adds a
    ``kx_web_searches`` column). ``max_image_pixels``: larger images are downscaled to this many
    pixels (default 1,048,576 = 1024 x 1024, at most ~1,370 image tokens; None: never; see
    ``kimi_extract.media.parts``). ``fetch_urls``: download http(s) image/video URLs and send them inline
    instead of passing the URLs through. ``fetch_timeout``: seconds for each whole download
    (connect to last byte, redirects included; default 30). ``max_fetch_bytes``: largest image
    download, after decompression (default 20 MiB).
    ``allow_private_urls``: let ``fetch_urls`` reach loopback, private, link-local and other
    non-public addresses (refused by default, after DNS and on every redirect).
    ``max_decode_pixels``: refuse to decode an image larger than this many pixels (default
    50,000,000; a jpeg counts at the reduced size its decoder can produce; None: no cap but
    Pillow's); a refused image is that row's error.
    """

    def __init__(
        self,
        output: type[T],
        *,
        instructions: str | None = None,
        examples: Sequence[tuple[Content, T | dict[str, Any]]] | None = None,
        model: str = DEFAULT_MODEL,
        reasoning_effort: str | None = "low",
        api_key: str | None = None,
        base_url: str | None = None,
        concurrency: int = 16,
        validation_retries: int = 2,
        max_completion_tokens: int = DEFAULT_MAX_COMPLETION_TOKENS,
        pricing: Pricing | dict[str, Pricing] | None = None,
        cache_ttl: str | None = "auto",
        cache_warm: bool = True,
        cache: str | os.PathLike[str] | bool | None = None,
        max_cost: float | None = None,
        max_tokens: int | None = None,
        rpm: int | None = None,
        tpm: int | None = None,
        adaptive: bool = True,
        mode: Mode = "json_schema",
        max_retries: int = 8,
        max_retry_wait: float = 60.0,
        timeout: float = 600.0,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        progress: bool = True,
        prefix: str = "",
        stream: bool = False,
        web_search: bool = False,
        max_tool_rounds: int = 3,
        http_backend: str = "aiohttp",
        max_image_pixels: int | None = DEFAULT_MAX_IMAGE_PIXELS,
        fetch_urls: bool = False,
        fetch_timeout: float = DEFAULT_FETCH_TIMEOUT,
        max_fetch_bytes: int = DEFAULT_MAX_FETCH_BYTES,
        allow_private_urls: bool = False,
        max_decode_pixels: int | None = DEFAULT_MAX_DECODE_PIXELS,
    ) -> None:
        if not (isinstance(output, type) and issubclass(output, BaseModel)):
            # SchemaError is a ConfigurationError and a TypeError (what this raised before).
            raise SchemaError(f"output must be a pydantic BaseModel subclass, got {output!r}")
        for name, text_setting in (
            ("base_url", base_url),
            ("api_key", api_key),
            ("instructions", instructions),
        ):
            if text_setting is not None and not isinstance(text_setting, str):
                raise ConfigurationError(
                    f"{name} must be a string or None, got {type(text_setting).__name__}"
                )
        if not isinstance(prefix, str):
            raise ConfigurationError(f"prefix must be a string, got {type(prefix).__name__}")
        if not isinstance(model, str) or not model:
            raise ConfigurationError(f"model must be a model name, got {model!r}")
        self.output = output
        try:
            self.compiled = compile_schema(output)
        except RecursionError:
            raise SchemaError(
                f"output model {output.__name__} nests too deeply to compile (recursion limit); "
                "flatten it"
            ) from None
        check_output_names(output, prefix)
        self.model = model
        self.info = model_info(model)
        self.reasoning_effort = normalize_effort(self.info, reasoning_effort)
        _check_positive("concurrency", concurrency)
        if concurrency > MAX_CONCURRENCY:
            raise ConfigurationError(
                f"concurrency={concurrency:,} exceeds the maximum {MAX_CONCURRENCY:,} (the highest "
                "Kimi tier's concurrency); use a value up to your account's limit"
            )
        _check_seconds("timeout", timeout)
        _check_seconds("max_retry_wait", max_retry_wait, allow_zero=True)
        _check_positive("max_response_bytes", max_response_bytes)
        _check_positive("max_completion_tokens", max_completion_tokens)
        if max_completion_tokens > MAX_COMPLETION_TOKENS:
            raise ConfigurationError(
                f"max_completion_tokens={max_completion_tokens} exceeds the API maximum "
                f"{MAX_COMPLETION_TOKENS:,}"
            )
        for name, count in (
            ("validation_retries", validation_retries),
            ("max_retries", max_retries),
            ("max_tool_rounds", max_tool_rounds),
        ):
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise ConfigurationError(f"{name} must be an integer >= 0, got {count!r}")
        if mode not in ("json_schema", "json_object"):
            raise ConfigurationError(f"mode must be 'json_schema' or 'json_object', got {mode!r}")
        if cache_ttl not in (None, "auto", "5m", "1h"):
            raise ConfigurationError(
                f"cache_ttl must be 'auto', '5m', '1h' or None, got {cache_ttl!r}"
            )
        if cache_ttl in ("5m", "1h") and not self.info.cache_options:
            raise ConfigurationError(
                f"{model} does not accept prompt_cache_options (K3.1 series only); drop cache_ttl"
            )
        if http_backend not in BACKENDS:
            raise ConfigurationError(
                f"http_backend must be one of {BACKENDS}, got {http_backend!r}"
            )
        self.instructions = instructions
        self.mode: Mode = mode
        self.concurrency = concurrency
        self.validation_retries = validation_retries
        self.max_completion_tokens = max_completion_tokens
        self.cache_ttl = cache_ttl
        self.cache_warm = cache_warm
        for name, limit in (("rpm", rpm), ("tpm", tpm)):
            if limit is not None:
                _check_positive(name, limit)
        self.rpm = rpm
        self.tpm = tpm
        self.adaptive = adaptive
        if max_cost is not None and not (
            isinstance(max_cost, int | float)
            and not isinstance(max_cost, bool)
            and math.isfinite(max_cost)
            and max_cost > 0
        ):
            raise ConfigurationError(f"max_cost must be a positive number of USD, got {max_cost!r}")
        if max_tokens is not None:
            _check_positive("max_tokens", max_tokens)
        self.max_cost = max_cost
        self.max_tokens = max_tokens
        if not (cache is None or isinstance(cache, bool | str | os.PathLike)):
            raise ConfigurationError(
                f"cache must be a path, True/None (default location) or False, got {cache!r}"
            )
        self.retry = RetryPolicy(max_retries=max_retries, max_wait=max_retry_wait)
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self.progress = progress
        self.prefix = prefix
        self.http_backend = http_backend
        self.stream = stream
        self.web_search = web_search
        self.max_tool_rounds = max_tool_rounds
        self.pricing = resolve_pricing(pricing, model, self.info.pricing)
        if max_cost is not None and self.pricing is None:
            raise ConfigurationError(
                f"max_cost needs prices for {model}: pass pricing=kx.Pricing(...) "
                "(or use max_tokens)"
            )
        check_budget_fits(max_tokens, max_cost, max_completion_tokens, self.pricing)
        self.base_url = base_url or os.environ.get(BASE_URL_ENV_VAR) or DEFAULT_BASE_URL
        self.router = Router(base_url or os.environ.get(BASE_URL_ENV_VAR))
        #: Whose answers the store keeps: part of every store key (``store.endpoint_identity``).
        self.endpoint = endpoint_identity(
            self.router.explicit, text_url=self.router.text_url, media_url=self.router.media_url
        )
        self.cache_path = store_path(cache)
        if (cache is None or cache is True) and is_local_endpoint(self.router.explicit):
            # The simulator (or another loopback server) never writes into the default store
            # that real runs read: pass cache=path to keep its results.
            self.cache_path = None
        if self.cache_path is not None:
            check_location(self.cache_path)
        self.media = MediaOptions(
            max_image_pixels=max_image_pixels,
            fetch_urls=fetch_urls,
            fetch_timeout=fetch_timeout,
            max_fetch_bytes=max_fetch_bytes,
            allow_private_urls=allow_private_urls,
            max_decode_pixels=max_decode_pixels,
        )
        key = api_key or next((os.environ[v] for v in API_KEY_ENV_VARS if os.environ.get(v)), None)
        self._api_key = Secret(key) if key else None
        static = [{"role": "system", "content": system_prompt(instructions, self.compiled, mode)}]
        static += example_messages(examples, self.compiled)
        self._static_messages = tuple(static)
        self.usage = Usage()
        self.last_run: RunReport | None = None
        #: After a Ctrl-C / cancellation: the partial frame (also on ``RunInterrupted.partial``).
        self.last_partial: pd.DataFrame | None = None

    def __repr__(self) -> str:
        return (
            f"Extractor({self.output.__name__}, model={self.model!r}, base_url={self.base_url!r}, "
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
    ) -> pd.DataFrame:
        """Extract every row of ``data``; returns a DataFrame (see ``arun``). Works in Jupyter.

        Ctrl-C stops the run within moments: finished rows are already in the result store, the
        connections are closed, and ``kx.RunInterrupted`` (a ``KeyboardInterrupt``) is raised
        with ``.partial`` holding every row (unfinished ones say so in ``kx_error``).
        """
        self.last_partial = None
        try:
            return run_sync(self.arun(data, text=text, template=template, images=images))
        except KeyboardInterrupt as interrupt:
            raise self._interrupted(interrupt) from interrupt

    def _interrupted(
        self, interrupt: KeyboardInterrupt, partial_file: str | None = None
    ) -> RunInterrupted:
        """The ``RunInterrupted`` for a Ctrl-C, carrying ``last_partial``."""
        if isinstance(interrupt, RunInterrupted):
            return interrupt
        message = "interrupted; finished rows are committed to the result store"
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
    ) -> pd.DataFrame:
        """Extract every row of ``data`` (DataFrame, Series, list of str or dict).

        ``text``: the column (or columns) holding the text; ``template``: a ``str.format``
        template over columns instead; ``images``: a column of image paths/bytes/URLs. Returns the
        input columns, one column per output field, and the ``kx_`` accounting columns. Raises
        ``RunStopped`` (with ``.partial``) when a run-level error stops the run (also when the
        input iterator raises or the result store fails: finished rows are kept).
        """
        _check_input_args(text, template, images)
        prepared = prepare(data, text=text, template=template, images=images, media=self._media())
        check_clashes(prepared.columns, self.output, self.prefix)
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
                prefix=self.prefix,
                web_search=self.web_search,
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
        if isinstance(stop_cause, BudgetExceeded):
            raise BudgetExceeded(
                f"budget ({self._budget_caps()}) reached after {report.ok} of {report.rows} rows; "
                "rows not sent hold a kx_error starting with 'budget' (rerun with a higher budget "
                "to resume: finished rows come from the result store)",
                partial=frame,
                cause=stop_cause,
            )
        if stop_cause is not None:
            raise RunStopped(
                f"run stopped after {report.ok} of {report.rows} rows: {stop_cause}",
                partial=frame,
                cause=stop_cause,
            ) from stop_cause
        return frame

    def run_to(
        self,
        path: str | os.PathLike[str],
        data: Any,
        *,
        text: str | Sequence[str] | None = None,
        template: str | None = None,
        images: str | None = None,
    ) -> RunReport:
        """Extract every row of ``data`` and write the results to ``path`` as they finish.

        ``path`` ends in .jsonl, .parquet or .csv; rows are written in input order, batch by
        batch, so memory stays bounded for any input size (``data`` may be a generator of str or
        dict items). Returns the run report.

        ``path`` is replaced only when the run finishes: until then rows go to a temporary file
        beside it. When the run stops (``RunStopped``), raises anything, or is interrupted
        (``RunInterrupted``), an existing ``path`` is left as it was and the rows written so far
        are kept as ``STEM.partial.SUFFIX`` beside it; the error's message and ``partial_file``
        name that file.
        """
        writer: list[TableWriter] = []
        try:
            return run_sync(
                self.arun_to(
                    path, data, text=text, template=template, images=images, _writer=writer
                )
            )
        except KeyboardInterrupt as interrupt:
            kept = str(writer[0].partial_path) if writer and writer[0].aborted else None
            raise self._interrupted(interrupt, kept) from interrupt

    async def arun_to(
        self,
        path: str | os.PathLike[str],
        data: Any,
        *,
        text: str | Sequence[str] | None = None,
        template: str | None = None,
        images: str | None = None,
        _writer: list[TableWriter] | None = None,
    ) -> RunReport:
        """Async ``run_to`` (the same guarantees for ``path``)."""
        writer = TableWriter(path)
        if _writer is not None:
            _writer.append(writer)
        _check_input_args(text, template, images)
        prepared = prepare(data, text=text, template=template, images=images, media=self._media())
        check_clashes(prepared.columns, self.output, self.prefix)
        buffer: list[RowResult] = []

        def sink(batch: list[RowResult]) -> None:
            buffer.extend(batch)
            if len(buffer) >= WRITE_BATCH_ROWS:
                writer.write(self._frame_of(buffer))
                buffer.clear()

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
                writer.write(self._frame_of(buffer))
            writer.abort()
            raise
        try:
            writer.write(self._frame_of(buffer))
        except Exception as exc:  # the output cannot take the last rows: the run did not finish
            stop_cause = stop_cause or exc
        if stop_cause is None:
            writer.commit()
            return report
        kept = writer.abort()
        stop_class = BudgetExceeded if isinstance(stop_cause, BudgetExceeded) else RunStopped
        stopped = stop_class(
            f"run stopped after {report.ok} rows: {stop_cause}; {path!s} was not changed, the "
            f"{writer.rows} rows written so far are in {kept}",
            cause=stop_cause,
        )
        stopped.partial_file = str(kept)
        raise stopped from stop_cause

    def _budget_caps(self) -> str:
        caps = []
        if self.max_tokens is not None:
            caps.append(f"max_tokens={self.max_tokens:,}")
        if self.max_cost is not None:
            caps.append(f"max_cost=${self.max_cost:g}")
        return ", ".join(caps)

    def _frame_of(self, results: list[RowResult]) -> pd.DataFrame:
        """An output frame for results that carry their input records."""
        index = pd.Index([r.label for r in results])
        records = [dict(r.record) if r.record is not None else {} for r in results]
        inputs = pd.DataFrame.from_records(records, index=index) if records else None
        return build_frame(
            model=self.output,
            results=results,
            index=index,
            input_frame=inputs,
            prefix=self.prefix,
            web_search=self.web_search,
        )

    def estimate(
        self,
        data: Any,
        *,
        text: str | Sequence[str] | None = None,
        template: str | None = None,
        images: str | None = None,
    ) -> Estimate:
        """Predict requests, prompt/cached/completion tokens and cost without calling the API.

        The shared prefix is counted once as a cache write and then as cache reads; rows already
        in the result store cost nothing. See ``kimi_extract.run.estimate`` for the assumptions.
        """
        prepared = prepare(data, text=text, template=template, images=images, media=self._media())
        settings = self._settings(prepared.length)
        store = ResultStore(self.cache_path) if self.cache_path is not None else None
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
            cacheable=True,
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

    async def arun_documents(self, sources: Any, **options: Any) -> pd.DataFrame:
        """Async ``run_documents``."""
        from .run.documents import arun_documents

        return await arun_documents(self, sources, **options)

    def extract(self, content: Content, *, images: Any = None) -> T:
        """Extract one input; returns the model instance or raises the row's error."""
        return run_sync(self.aextract(content, images=images))

    async def aextract(self, content: Content, *, images: Any = None) -> T:
        """Async ``extract``: one text (and optional images) -> one model instance."""
        if isinstance(content, list):
            row = RowInput(label=0, position=0, content=content)
        else:
            record = {"text": content, "images": images}
            images_key = "images" if images is not None else None
            # Media is read (or downloaded) in a worker thread, stopped at once by a cancel.
            row = await amake_row(record, TextSpec(columns=("text",)), images_key, self._media())
        results, stop_cause, _ = await self._execute(iter([row]), total=1, progress=False)
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
        ttl = self.cache_ttl
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
            validation_retries=self.validation_retries,
            context_window=self.info.context_window,
            prompt_cache_options=cache_options,
            pricing=self.pricing,
            separate_cache_writes=self.info.separate_cache_writes,
            cache_ttl=ttl or "5m",
            prefix_tokens=prefix_tokens,
            stream=self.stream,
            tools=({"type": "web_search"},) if self.web_search else (),
            max_tool_rounds=self.max_tool_rounds,
            mode=self.mode,
            endpoint=self.endpoint,
        )

    def _transport(self, limiter: Limiter) -> Transport:
        if self._api_key is None:
            raise MissingAPIKeyError(
                "no API key: pass api_key=... or set one of the environment variables "
                + " / ".join(API_KEY_ENV_VARS)
            )
        return Transport(
            base_url=self.base_url,
            api_key=self._api_key,
            on_retry=charge_retry,  # budgets count retried attempts of unknown cost
            concurrency=self.concurrency,
            timeout=self.timeout,
            max_response_bytes=self.max_response_bytes,
            retry=self.retry,
            http_backend=self.http_backend,
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
    ) -> tuple[list[RowResult], BaseException | None, RunReport]:
        """Run rows through a fresh transport and engine; tally usage; log the summary.

        Results go to ``sink`` in input order when given (and are not returned), else they are
        returned as a list.
        """
        limiter = Limiter(
            concurrency=self.concurrency, rpm=self.rpm, tpm=self.tpm, adaptive=self.adaptive
        )
        transport = self._transport(limiter)
        settings = self._settings(total)
        transport.encoder = BodyEncoder(settings.static_messages, settings.response_format)
        budget = None
        if self.max_cost is not None or self.max_tokens is not None:
            budget = Budget(
                max_cost=self.max_cost,
                max_tokens=self.max_tokens,
                pricing=self.pricing,
                separate_cache_writes=self.info.separate_cache_writes,
                cache_ttl=settings.cache_ttl,
            )
        kept, stop_cause, report = await run_engine(
            rows,
            settings=settings,
            transport=transport,
            limiter=limiter,
            budget=budget,
            store=open_store(self.cache_path, progress),
            total=total,
            progress=progress,
            concurrency=self.concurrency,
            warm_first=self.cache_warm and settings.prefix_tokens > CACHE_MIN_TOKENS,
            keep_records=keep_records,
            lookahead=lookahead,
            sink=sink,
            model=self.model,
            priced=self.pricing is not None,
        )
        self.usage = self.usage + report.usage
        self.last_run = report
        return kept, stop_cause, report


def check_budget_fits(
    max_tokens: int | None,
    max_cost: float | None,
    max_completion_tokens: int,
    pricing: Pricing | None,
    per: str = "",
) -> None:
    """A budget must pay for one request's worst case, or no request could ever be sent."""
    fix = "raise it or lower max_completion_tokens (each request reserves all of it)"
    if max_tokens is not None and max_tokens <= max_completion_tokens:
        raise ConfigurationError(
            f"budget max_tokens={max_tokens:,}{per} cannot pay for one request: its worst case is "
            f"max_completion_tokens={max_completion_tokens:,} plus the prompt; {fix}"
        )
    if max_cost is not None and pricing is not None and pricing.output > 0:
        completion_cost = max_completion_tokens * pricing.output / 1_000_000
        if completion_cost >= max_cost:
            fitting = int(max_cost * 1_000_000 / pricing.output)
            raise ConfigurationError(
                f"budget max_cost=${max_cost:g}{per} cannot pay for one request: "
                f"max_completion_tokens={max_completion_tokens:,} may cost "
                f"${completion_cost:.4f} at ${pricing.output:g}/M output tokens (fewer than "
                f"{fitting:,} would fit); {fix}"
            )


def _check_seconds(name: str, value: float, *, allow_zero: bool = False) -> None:
    """A duration setting: a finite number of seconds, > 0 (>= 0 with ``allow_zero``)."""
    ok = (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value >= 0 if allow_zero else value > 0)
    )
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigurationError(
            f"{name} must be a finite number of seconds {bound}, got {value!r}"
        )


def _check_input_args(text: Any, template: Any, images: Any) -> None:
    """``text`` / ``template`` / ``images`` of a run: column names, checked before any request."""
    if text is not None and not isinstance(text, str):
        if not (
            isinstance(text, Sequence) and len(text) > 0 and all(isinstance(t, str) for t in text)
        ):
            raise ConfigurationError(
                f"text must be a column name or a list of column names, got {text!r}"
            )
    if template is not None and not isinstance(template, str):
        raise ConfigurationError(f"template must be a str.format string, got {template!r}")
    if images is not None and not isinstance(images, str):
        raise ConfigurationError(f"images must be a column name, got {images!r}")


def _check_positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"{name} must be a positive integer, got {value!r}")
