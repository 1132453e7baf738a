"""A run's machinery, assembled from the config in one place (``Engine``).

The ``Extractor`` is the public face; this is what it runs on (as pydantic-ai's agent runs on its
graph). ``Engine(config, output)`` is made once per extractor: the compiled output schema, the
shared prefix (system message and examples), and where requests go (``Endpoint``: the base URL
or the host router, the key, the bundled simulator started for ``base_url="simulator"``, and the
identity that keys the result store). Every run then gets fresh parts from ``Engine.setup``:

- ``RowSettings.from_config``: what every request of the run shares;
- the limiter, from ``config.limits``;
- the transport, taking ``config.connection`` as it is;
- the budget, from ``config.budget`` (``RunBudget``), when it has a cap;
- the result store, from ``config.store`` (opened per run, closed when it ends);
- the observer (``dispatch.Dispatcher``): the user's ``config.hooks``, and the run's own
  listeners (a stream's consumer); the row runner adds the budget to it
  (``run.budget.BudgetHook``) and the scheduler the progress bar.

``Engine.setup`` is the one place these are made and wired to each other, and ``RunSetup`` carries
them to the scheduler, the row runner and the transport (``run.scheduler.run_engine``): anything
that observes a run is handed down from here, as the one dispatcher.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from ..config import API_KEY_ENV_VARS, ExtractorConfig, simulator_endpoint
from ..dispatch import Dispatcher
from ..exceptions import MissingAPIKeyError, SchemaError
from ..http.limiter import Limiter
from ..http.routing import Router
from ..http.secret import Secret
from ..http.transport import Transport
from ..http.wire import BodyEncoder
from ..kimi import CACHE_MIN_TOKENS, DEFAULT_BASE_URL
from ..records import RowResult, Usage
from ..schema.compiled import CompiledSchema, compile_schema
from .budget import SHARED_LEDGER, RunBudget
from .estimate import Estimate, predict, row_prompt_tokens
from .grounding import check_grounding_fields
from .report import RunReport
from .request import example_messages, system_prompt
from .scheduler import RunSetup, run_engine
from .settings import RowSettings
from .store import Store, check_store, endpoint_identity, open_location, open_store

__all__ = ["Endpoint", "Engine"]


@dataclass(frozen=True)
class Endpoint:
    """Where a run's requests go, resolved once per extractor.

    ``base_url``: the given URL, or the text host when requests are routed per body
    (``router``: media to the multimodal host, text to the text host, with failover; it keeps
    its failover state across runs). ``secret``: the key (the bundled simulator's own for
    ``base_url="simulator"``), or None when none was found. ``identity``: whose answers the
    result store keeps, part of every store key (``store.endpoint_identity``).
    """

    base_url: str
    secret: Secret | None
    router: Router
    identity: str

    @classmethod
    def from_config(cls, config: ExtractorConfig) -> Endpoint:
        """The endpoint of ``config`` (starts the bundled simulator for ``"simulator"``)."""
        base_url, secret = config.base_url, config.secret
        if config.simulated:
            base_url, key = simulator_endpoint()
            secret = Secret(key)
        router = Router(base_url)
        identity = endpoint_identity(
            router.explicit, text_url=router.text_url, media_url=router.media_url
        )
        return cls(base_url or DEFAULT_BASE_URL, secret, router, identity)


class Engine:
    """The machinery of an ``Extractor``: made once from its config and output model, then a
    fresh limiter, transport, budget and store for every run (see the module docstring)."""

    def __init__(self, config: ExtractorConfig, output: type[BaseModel]) -> None:
        self.config = config
        try:
            compiled = compile_schema(output)
            if config.grounding_options.grounding == "quotes":
                compiled = compiled.with_quotes()  # the schema asks for a quote per field too
        except RecursionError:
            raise SchemaError(
                f"output model {output.__name__} nests too deeply to compile (recursion limit); "
                "flatten it"
            ) from None
        #: The output model's schema, as sent.
        self.compiled: CompiledSchema = compiled
        check_grounding_fields(output, config.grounding_options.grounding_fields)
        self.endpoint = Endpoint.from_config(config)
        if config.store_path is not None:
            check_store(config.store_path)  # on the machine that runs (a Dask worker too)
        prompt = system_prompt(config.instructions, compiled, config.mode)
        static = [{"role": "system", "content": prompt}]
        static += example_messages(config.examples, compiled)
        #: The shared prefix every request starts with: the system message and the examples.
        self.static_messages = tuple(static)
        #: The result store of the run in progress (an interrupted run's message reads it).
        self.run_store: Store | None = None

    def settings(self, total_rows: int | None, *, ground_rows: bool = True) -> RowSettings:
        """What every request of a run of ``total_rows`` rows shares."""
        return RowSettings.from_config(
            self.config,
            self.compiled,
            self.static_messages,
            endpoint=self.endpoint.identity,
            total_rows=total_rows,
            ground_rows=ground_rows,
        )

    def setup(
        self, settings: RowSettings, *, progress: bool, listeners: Sequence[Any] = ()
    ) -> RunSetup:
        """Fresh parts for one run: limiter, transport, budget, store and observer, wired
        together. ``listeners``: the run's own internal hooks (before the user's)."""
        config, endpoint = self.config, self.endpoint
        secret = endpoint.secret
        if secret is None:
            raise MissingAPIKeyError(
                "no API key: pass api_key=... or set one of the environment variables "
                + " / ".join(API_KEY_ENV_VARS)
            )

        def price(usage: Usage) -> Usage:
            return usage.priced(
                settings.pricing,
                separate_cache_writes=settings.separate_cache_writes,
                ttl=settings.cache_ttl,
            )

        hooks = Dispatcher(
            config.hooks,
            internal=listeners,
            model=settings.model,
            redact=secret.redact,
            redact_value=secret.redact_value,
            price=price,
        )
        limits = config.limits
        limiter = Limiter(
            concurrency=limits.concurrency,
            rpm=limits.rpm,
            tpm=limits.tpm,
            adaptive=limits.adaptive,
        )
        transport = Transport(
            base_url=endpoint.base_url,
            api_key=secret,
            concurrency=limits.concurrency,
            connection=config.connection,
            dispatcher=hooks,
            gate=limiter,
            router=endpoint.router,
            encoder=BodyEncoder(settings.static_messages, settings.response_format),
        )
        budget = None
        if config.budget.limited:
            budget = RunBudget(
                max_cost=config.budget.max_cost,
                max_total_tokens=config.budget.max_total_tokens,
                pricing=settings.pricing,
                separate_cache_writes=settings.separate_cache_writes,
                cache_ttl=settings.cache_ttl,
                ledger=SHARED_LEDGER.get(),  # a Dask partition's run: the cluster's budget
            )
        return RunSetup(
            settings=settings,
            transport=transport,
            limiter=limiter,
            budget=budget,
            store=open_store(config.store_path, progress, endpoint=endpoint.identity),
            concurrency=limits.concurrency,
            warm_first=config.prompt_cache.cache_warm and settings.prefix_tokens > CACHE_MIN_TOKENS,
            hooks=hooks,
        )

    async def execute(
        self,
        rows: Any,
        *,
        total: int | None,
        progress: bool,
        sink: Callable[[list[RowResult]], None] | None = None,
        keep_records: bool = False,
        lookahead: int | None = None,
        ground_rows: bool = True,
        stream: bool = False,
        listeners: Sequence[Any] = (),
        on_done: Callable[[RowResult], Awaitable[None]] | None = None,
    ) -> tuple[list[RowResult], BaseException | None, RunReport]:
        """Run rows through fresh parts (``run.scheduler.run_engine``); log the summary.

        Results go to ``sink`` in input order when given (and are not returned), else they are
        returned as a list. ``ground_rows=False``: no spans per row (documents ground merged rows).
        ``stream``: request SSE streams whatever the config says; ``listeners``: the run's own
        internal hooks; ``on_done``: awaited with each row as it finishes (completion order).
        """
        settings = self.settings(total, ground_rows=ground_rows)
        if stream and not settings.stream:
            settings = dataclasses.replace(settings, stream=True)
        setup = self.setup(settings, progress=progress, listeners=listeners)
        self.run_store = setup.store
        result = await run_engine(
            rows,
            setup,
            total=total,
            progress=progress,
            sink=sink,
            keep_records=keep_records,
            lookahead=lookahead,
            on_done=on_done,
        )
        self.run_store = None  # still set after a Ctrl-C: the interrupted run's message reads it
        return result

    def estimate(self, rows: Iterable[Any], total: int | None, *, passes: int = 1) -> Estimate:
        """Requests, tokens and cost of a run over ``rows``, without calling the API (rows
        already in the result store cost nothing; ``run.estimate`` has the assumptions);
        ``passes``: answers per row (documents' follow-up passes)."""
        config = self.config
        settings = self.settings(total)
        store = open_location(config.store_path) if config.store_path is not None else None
        try:
            prompts, stored = row_prompt_tokens(rows, settings, store)
        finally:
            if store is not None:
                store.close()
        return predict(
            row_prompt_tokens=prompts,
            stored=stored,
            prefix_tokens=settings.prefix_tokens,
            schema=self.compiled.schema,
            reasoning_effort=config.effort,
            separate_cache_writes=settings.separate_cache_writes,
            pricing=settings.pricing,
            cache_ttl=settings.cache_ttl,
            passes=passes,
        )
