"""Scheduling many rows: bounded concurrency, input order, progress, and stopping.

``Scheduler.run`` pulls rows lazily from an iterator and hands each to ``RowRunner.process``
(``run.conversation``) on ``concurrency`` workers. A row's failure never stops the others; only
run-level errors do (authentication, permission, quota, unknown model, the same 400 for the first
rows of a run, or an endpoint no attempt has reached). An input iterator that raises, or a result
store that fails, halts the run: no new row starts, rows in flight finish, and the run stops with
that error. Results are released in input order (``_Reorder``). ``run_engine`` is one whole run
on a transport: scheduler, tally, the ``RunReport``, the logged summary, and the run's start and
end told to its observer (``dispatch.Dispatcher``; the progress bar listens to it for retries).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from ..dispatch import Dispatcher
from ..exceptions import BudgetExceeded, RunStopped
from ..hooks import Retry
from ..http.limiter import Limiter
from ..http.transport import Transport
from ..records import RowInput, RowResult, Usage
from .budget import RunBudget
from .conversation import RowRunner, RowSettings
from .gc_scope import spaced_young_collections
from .inputs import next_blocking
from .report import RunReport, Tally
from .store_base import Store

logger = logging.getLogger("kimi_extract")

#: Seconds ``on_run_end`` hooks get when a run is interrupted (Ctrl-C), before the cancel goes on.
INTERRUPTED_HOOK_GRACE_S = 2.0


class Scheduler:
    """Runs many rows through one ``RowRunner``: workers, order, progress, stop handling."""

    def __init__(
        self, runner: RowRunner, limiter: Limiter | None = None, *, keep_records: bool = False
    ) -> None:
        self.runner = runner
        self.limiter = limiter
        self.keep_records = keep_records

    async def run(
        self,
        rows: Iterator[RowInput],
        *,
        total: int | None,
        progress: bool,
        concurrency: int,
        sink: Callable[[list[RowResult]], None] | None = None,
        warm_first: bool = False,
        lookahead: int | None = None,
        on_done: Callable[[RowResult], Awaitable[None]] | None = None,
    ) -> tuple[list[RowResult], BaseException | None]:
        """Process every row; returns results in input order and the run-stopping error, if any.

        ``concurrency`` workers pull rows from the iterator lazily. Results are released in input
        order through a reorder buffer; no worker starts a row more than ``lookahead`` (default
        ``2 * concurrency``) positions ahead of the oldest unfinished one, so pending work stays
        bounded for any input size (a larger lookahead keeps one slow row, e.g. one waiting out
        a 429, from stalling the others when the input is in memory anyway). With ``sink``,
        ordered results are handed to it as they become contiguous and not kept (the returned
        list is then empty). With ``warm_first``, rows are sent one at a time until one request
        has completed, so a shared prompt prefix is written to the cache once before the fan-out
        reads it. ``on_done``: awaited with each row as it finishes, in completion order, before
        it is released in input order.
        """
        order = _Reorder(window=lookahead or 2 * max(1, concurrency), sink=sink)
        runner = self.runner
        transport = runner.transport
        bar = Progress(total, enabled=progress, limiter=self.limiter, transport=transport)
        stop: list[BaseException] = []
        if bar.enabled:  # retries show on the bar as they happen, before any row finishes
            runner.hooks.add(bar, internal=True)

        async def handle(row: RowInput) -> RowResult:
            result = await runner.process(row)
            if self.keep_records:
                result.record = row.record
            if on_done is not None:
                await on_done(result)
            try:
                order.put(result)  # may hand results to the sink (run_to writes them)
            except Exception as exc:  # the output cannot take them: stop with what was written
                raise RunStopped(str(exc), cause=exc) from exc
            finally:
                del runner.finishing[result.position]
            bar.update(result)
            if runner.fatal is not None:
                raise RunStopped(str(runner.fatal), cause=runner.fatal)
            return result

        try:
            await self._schedule(rows, order, handle, concurrency, warm_first)
        except* RunStopped as stopped:
            first = stopped.exceptions[0]
            stop.append(first.cause if isinstance(first, RunStopped) and first.cause else first)
        finally:
            bar.close()
            runner.hooks.remove(bar)
        if not stop and runner.halt is not None:
            stop.append(runner.halt)
        if not stop and (runner.budget_hit or order.over_budget):
            stop.append(BudgetExceeded("the budget would be crossed by the next request"))
        return order.collected(), (stop[0] if stop else None)

    async def _schedule(
        self,
        rows: Iterator[RowInput],
        order: _Reorder,
        handle: Callable[[RowInput], Awaitable[RowResult]],
        concurrency: int,
        warm_first: bool,
    ) -> None:
        """The warm-up row (if asked), then ``concurrency`` workers pulling rows lazily.

        Rows that block to produce (``blocking``: media encoding, downloads) are pulled in a
        worker thread, one at a time, so the loop keeps serving the requests in flight."""
        blocking = getattr(rows, "blocking", False)
        pulling = asyncio.Lock()

        async def pull() -> RowInput | None:
            try:
                if not blocking:
                    return next(rows, None)
                async with pulling:
                    return await next_blocking(rows)
            except Exception as exc:  # the input itself failed: keep what finished, stop
                self.runner.stop_starting(exc)
                return None

        async def worker() -> None:
            runner = self.runner
            while not runner.budget_hit and runner.halt is None:
                if not order.take_room():  # (no coroutine per row when there is room)
                    await order.room()
                if blocking:
                    row = await pull()
                else:
                    try:
                        row = next(rows, None)
                    except Exception as exc:  # the input itself failed: keep what finished, stop
                        runner.stop_starting(exc)
                        row = None
                if row is None:
                    order.input_ended()
                    return
                await handle(row)

        try:
            if warm_first:
                while True:
                    await order.room()
                    row = await pull()
                    if row is None:
                        order.input_ended()
                        break
                    await handle(row)
                    if row.error is None:  # a request was made: the prefix is now cached
                        break
            async with asyncio.TaskGroup() as group:
                for _ in range(max(1, concurrency)):
                    group.create_task(worker())
        except asyncio.CancelledError:
            # Rows finished (or committed) but cut off before their report are reported now,
            # then every finished row goes to the sink before the cancel goes on.
            for result in await self.runner.unreported():
                order.put(result)
            order.collected()
            raise


class _Reorder:
    """Releases results in input order and bounds how far ahead workers may run."""

    def __init__(self, *, window: int, sink: Callable[[list[RowResult]], None] | None) -> None:
        self.window = window
        self.sink = sink
        self.next_position = 0
        self.started = 0
        self.pending: dict[int, RowResult] = {}
        self.done: list[RowResult] = []
        self._waiters: list[asyncio.Future[None]] = []
        self.exhausted = False
        #: A row was not (fully) sent because of the budget.
        self.over_budget = False

    def take_room(self) -> bool:
        """``room`` without waiting: True (and the row counted as started) when one more row
        may start now."""
        if self.exhausted or self.started - self.next_position < self.window:
            self.started += 1
            return True
        return False

    async def room(self) -> None:
        """Wait until one more row may start; counts it as started."""
        while not self.exhausted and self.started - self.next_position >= self.window:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
        self.started += 1

    def input_ended(self) -> None:
        """The input has no more rows: the slot just taken was not used; let every waiter go
        (each finds the input empty and stops)."""
        self.started -= 1
        self.exhausted = True
        self._wake()

    def put(self, result: RowResult) -> None:
        """Add a finished row; release every result that is now contiguous."""
        self.pending[result.position] = result
        if result.error is not None and result.error.startswith("budget"):
            self.over_budget = True
        ready = []
        while self.next_position in self.pending:
            ready.append(self.pending.pop(self.next_position))
            self.next_position += 1
        if not ready:
            return
        if self.sink is not None:
            self.sink(ready)
        else:
            self.done.extend(ready)
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def collected(self) -> list[RowResult]:
        """Every result kept (in order), then any released out of order by a stop."""
        leftovers = [self.pending[k] for k in sorted(self.pending)]
        self.pending.clear()
        if self.sink is not None:
            if leftovers:
                self.sink(leftovers)
            return []
        return self.done + leftovers


class Progress:
    """A tqdm bar showing rows, errors, tokens, cache-hit share and connection retries (no-op
    when disabled)."""

    def __init__(
        self,
        total: int | None,
        *,
        enabled: bool,
        limiter: Limiter | None = None,
        transport: Transport | None = None,
    ) -> None:
        self.limiter = limiter
        self.transport = transport
        self.enabled = enabled
        self.errors = 0
        self.usage = Usage()
        self._last_postfix = 0.0
        self._bar: Any = None
        if enabled:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, unit="row", desc="kimi_extract", leave=True)

    def update(self, result: RowResult) -> None:
        """Count one finished row (only the bar shows the counts: nothing to do without it)."""
        if self._bar is None:
            return
        self.usage = self.usage + result.usage
        if result.error is not None:
            self.errors += 1
        now = time.monotonic()
        if now - self._last_postfix > 0.25:
            self._last_postfix = now
            self._bar.set_postfix_str(self.postfix(), refresh=False)
        self._bar.update(1)

    def on_retry(self, event: Retry) -> None:
        """A request is about to be retried: a connection retry (no HTTP status) shows at once
        (at most every 0.25 s), so a run that cannot connect is visible before any row
        finishes."""
        if self._bar is None or event.status is not None:
            return
        now = time.monotonic()
        if now - self._last_postfix > 0.25:
            self._last_postfix = now
            self._bar.set_postfix_str(self.postfix(), refresh=True)

    def postfix(self) -> str:
        """The bar's status text."""
        text = (
            f"errors={self.errors} tokens={self.usage.total_tokens:,} "
            f"cache={self.usage.cache_hit_share:.0%}"
        )
        reconnects = self.transport.connection_retries if self.transport is not None else 0
        if reconnects:
            text += f" connection retries={reconnects:,}"
        rate = self.limiter.send_rate() if self.limiter is not None else None
        if rate is not None:
            text += f" rate={rate * 60:,.0f}/min"
        binding = self.limiter.binding() if self.limiter is not None else None
        if binding is not None:
            text += f" bound={binding}"
        if self.limiter is not None and self.limiter.throttles:
            text += f" refused={self.limiter.throttles:,}"
        return text

    def close(self) -> None:
        """Finish the bar with the final status."""
        if self._bar is not None:
            self._bar.set_postfix_str(self.postfix(), refresh=False)
            self._bar.close()


@dataclass(frozen=True)
class RunSetup:
    """What one run uses besides its rows, built by the ``Extractor`` from its config.

    ``settings``: what every request shares (model, prefix, schema, prices ...). ``transport`` /
    ``limiter``: where and how fast requests go. ``budget`` / ``store``: the run's budget and
    result store, if any (the store is closed when the run ends). ``concurrency``: rows in
    flight. ``warm_first``: send one request before the fan-out so the shared prefix is cached.
    ``hooks``: the run's observer (the transport's; default: the transport's own).
    """

    settings: RowSettings
    transport: Transport
    limiter: Limiter
    budget: RunBudget | None = None
    store: Store | None = None
    concurrency: int = 16
    warm_first: bool = False
    hooks: Dispatcher | None = None


async def run_engine(
    rows: Any,
    setup: RunSetup,
    *,
    total: int | None,
    progress: bool,
    sink: Callable[[list[RowResult]], None] | None = None,
    keep_records: bool = False,
    lookahead: int | None = None,
    on_done: Callable[[RowResult], Awaitable[None]] | None = None,
) -> tuple[list[RowResult], BaseException | None, RunReport]:
    """Run rows through a scheduler as ``setup`` says; tally usage; log the summary; close the
    store; tell the observer the run's start and end.

    Results go to ``sink`` in input order when given (and are not returned), else they are
    returned as a list. ``total``: the row count when known; ``progress``: show a bar;
    ``keep_records``: keep each row's input values on its result; ``lookahead`` and
    ``on_done``: see ``Scheduler.run``. An interrupted run (cancelled) tells ``on_run_end``
    with no report, giving its hooks ``INTERRUPTED_HOOK_GRACE_S``.
    """
    transport, limiter, store = setup.transport, setup.limiter, setup.store
    hooks = setup.hooks if setup.hooks is not None else transport.dispatcher
    kept: list[RowResult] = []
    tally = Tally()

    def deliver(batch: list[RowResult]) -> None:
        tally.add(batch)
        if sink is not None:
            sink(batch)
        else:
            kept.extend(batch)

    started = time.perf_counter()
    try:
        await hooks.run_start(
            rows=total, concurrency=setup.concurrency, stream=setup.settings.stream
        )
        # Young collections in larger batches while the run goes (restored however it ends).
        with spaced_young_collections():
            async with transport:
                runner = RowRunner(
                    setup.settings, transport, store=store, budget=setup.budget, hooks=hooks
                )
                scheduler = Scheduler(runner, limiter, keep_records=keep_records)
                _, stop_cause = await scheduler.run(
                    rows,
                    total=total,
                    progress=progress,
                    concurrency=setup.concurrency,
                    sink=deliver,
                    warm_first=setup.warm_first,
                    lookahead=lookahead,
                    on_done=on_done,
                )
    except asyncio.CancelledError:
        with suppress(TimeoutError):  # a hook must not hold up a Ctrl-C
            async with asyncio.timeout(INTERRUPTED_HOOK_GRACE_S):
                await hooks.run_end(None, "interrupted")
        raise
    except Exception as exc:
        await hooks.run_end(None, exc)
        raise
    finally:
        if store is not None:
            await store.aclose()
    report = RunReport(
        rows=total if total is not None else tally.rows,
        ok=tally.ok,
        failed=tally.rows - tally.ok,
        usage=tally.usage,
        wall_s=time.perf_counter() - started,
        model=setup.settings.model,
        priced=setup.settings.pricing is not None,
        retries=transport.retries,
        throttles=limiter.throttles,
        from_store=tally.from_store,
        saved=tally.saved,
        store=store.location if store is not None else None,
        bound_by=limiter.bound_by(),
    )
    logger.info(report.summary())
    await hooks.run_end(report, stop_cause)
    return kept, stop_cause, report
