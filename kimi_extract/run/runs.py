"""Run plumbing shared by the entry points: the run report, tallies, and sync runners."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pandas as pd

from ..exceptions import BudgetExceeded
from ..http.limits import Budget, Limiter
from ..http.transport import Transport
from ..records import Usage
from .engine import BUDGET_ERROR, Engine, RowResult, RowSettings
from .store import ResultStore

logger = logging.getLogger("kimi_extract")


@dataclass(frozen=True)
class RunReport:
    """What one run did: rows ok/failed, usage by bucket, cost and wall time."""

    rows: int
    ok: int
    failed: int
    usage: Usage
    wall_s: float
    model: str
    priced: bool
    retries: int = 0
    throttles: int = 0
    #: Rows served from the result store, and the usage they cost when first extracted.
    from_store: int = 0
    saved: Usage = field(default_factory=Usage)
    store: str | None = None
    #: The limit that held sends back most and the send rate, e.g. "RPM 3,000 (learned from a
    #: 429): 49.5 requests/s"; None when no limit held the run back.
    bound_by: str | None = None

    def summary(self) -> str:
        """The one-line summary logged at the end of a run."""
        cost = (
            f"cost ${self.usage.cost:.4f}"
            if self.priced
            else f"cost unknown (no price for {self.model}; pass pricing=kx.Pricing(...))"
        )
        u = self.usage
        return (
            f"kimi_extract: {self.rows:,} rows ({self.ok:,} ok, {self.failed:,} failed) in "
            f"{self.wall_s:.2f} s; {u.requests:,} requests; prompt {u.prompt_tokens:,} tokens "
            f"(cached {u.cached_tokens:,} = {u.cache_hit_share:.0%}, cache write "
            f"{u.cache_write_tokens:,}), completion {u.completion_tokens:,} (reasoning "
            f"{u.reasoning_tokens:,}); {cost}"
            + (f"; {self.from_store:,} rows from the result store" if self.from_store else "")
            + (f"; bound by {self.bound_by}" if self.bound_by else "")
        )


class Tally:
    """Running totals of delivered rows."""

    def __init__(self) -> None:
        self.rows = 0
        self.ok = 0
        self.from_store = 0
        self.usage = Usage()
        self.saved = Usage()

    def add(self, batch: list[RowResult]) -> None:
        self.rows += len(batch)
        for result in batch:
            self.ok += result.ok
            self.usage = self.usage + result.usage
            if result.saved is not None:
                self.from_store += 1
                self.saved = self.saved + result.saved


def fill_missing(
    results: list[RowResult], index: pd.Index, stop_cause: BaseException | str | None
) -> list[RowResult]:
    """Rows never run (the run stopped) get a result saying so, keeping one row per input."""
    if len(results) == len(index):
        return results
    by_position = {r.position: r for r in results}
    if isinstance(stop_cause, str):
        reason = stop_cause
    elif isinstance(stop_cause, BudgetExceeded):
        reason = BUDGET_ERROR
    elif stop_cause is not None:
        reason = f"not run: the run stopped ({type(stop_cause).__name__})"
    else:
        reason = "not run"
    return [
        by_position.get(pos) or RowResult(label=label, position=pos, error=reason)
        for pos, label in enumerate(index)
    ]


R = TypeVar("R")


def run_sync(coro: Coroutine[Any, Any, R]) -> R:
    """Run a coroutine from sync code.

    Without a running loop this is ``asyncio.run`` (Ctrl-C cancels the run, which closes its
    connections). Inside a running loop (Jupyter) the coroutine runs on a fresh loop in a worker
    thread; a Ctrl-C in the calling thread cancels it there and waits for it to clean up.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    outcome: dict[str, Any] = {}
    ready = threading.Event()

    def worker() -> None:
        with asyncio.Runner() as runner:
            outcome["loop"] = runner.get_loop()
            task = outcome["task"] = outcome["loop"].create_task(coro)
            ready.set()
            try:
                outcome["value"] = runner.run(_await(task))
            except BaseException as exc:  # delivered to the calling thread below
                outcome["error"] = exc

    thread = threading.Thread(target=worker, name="kimi_extract-run", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.1)
    except KeyboardInterrupt:
        ready.wait(5)
        if "task" in outcome:
            outcome["loop"].call_soon_threadsafe(outcome["task"].cancel)
        thread.join(10)
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


async def _await(task: asyncio.Task[R]) -> R:
    return await task


async def run_engine(
    rows: Any,
    *,
    settings: RowSettings,
    transport: Transport,
    limiter: Limiter,
    budget: Budget | None,
    store: ResultStore | None,
    total: int | None,
    progress: bool,
    concurrency: int,
    warm_first: bool,
    lookahead: int | None = None,
    keep_records: bool,
    sink: Callable[[list[RowResult]], None] | None,
    model: str,
    priced: bool,
) -> tuple[list[RowResult], BaseException | None, RunReport]:
    """Run rows through an engine on ``transport``; tally usage; log the summary; close the store.

    Results go to ``sink`` in input order when given (and are not returned), else they are
    returned as a list.
    """
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
        async with transport:
            engine = Engine(
                settings, transport, limiter, keep_records=keep_records, store=store, budget=budget
            )
            _, stop_cause = await engine.run(
                rows,
                total=total,
                progress=progress,
                concurrency=concurrency,
                sink=deliver,
                warm_first=warm_first,
                lookahead=lookahead,
            )
    finally:
        if store is not None:
            store.close()
    report = RunReport(
        rows=total if total is not None else tally.rows,
        ok=tally.ok,
        failed=tally.rows - tally.ok,
        usage=tally.usage,
        wall_s=time.perf_counter() - started,
        model=model,
        priced=priced,
        retries=transport.retries,
        throttles=limiter.throttles,
        from_store=tally.from_store,
        saved=tally.saved,
        store=str(store.path) if store is not None else None,
        bound_by=limiter.bound_by(),
    )
    logger.info(report.summary())
    return kept, stop_cause, report
