"""Results as they come: partial values of one input (``stream``) and finished rows (``iter_rows``).

``stream_values``: one input, sent as an SSE stream; the run's observer hands every chunk of
the answer (``on_chunk``) to a ``PartialTracker`` (an internal hook of that run), which turns
the answer so far into a partial instance (``schema.partial.PartialParser``) and queues it when
it changed. Each HTTP attempt starts over (``on_attempt``): a reask, a retry or a larger budget
after a cut answer streams a new answer, and the values start again from the instance with no
field set. The last value is the row's value, as ``extract`` returns it.

``row_frames``: a whole run whose rows are handed over as they finish (the scheduler's
``on_done``, completion order), each as a one-row frame with ``run``'s columns. The rows
between the run and the consumer are bounded (a semaphore of ``concurrency`` places, taken by
the run and given back as the consumer takes each row): a consumer that stops reading holds the
run back. The queue itself is unbounded, so that the end of the run always gets into it.

``iterate_sync`` drives either from sync code: the async generator runs on an event loop in a
worker thread, one item at a time, and a Ctrl-C while waiting cancels it there (the run cleans
up as ``run`` does) and raises ``RunInterrupted``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import suppress
from typing import Any, TypeVar

import pandas as pd
from pydantic import BaseModel

from ..hooks import Attempt, Chunk
from ..records import Content, RowInput, RowResult
from ..run.inputs import PreparedInput
from ..run.report import fill_missing
from ..schema.partial import PartialParser
from .base import BaseExtractor

__all__ = ["PartialTracker", "iterate_sync", "row_frames", "stream_values"]

T = TypeVar("T")
#: Seconds a Ctrl-C waits for the cancelled run to clean up (close connections, keep rows).
CLEANUP_WAIT_S = 10.0
#: The end of a stream's queue.
_DONE: Any = object()


class PartialTracker:
    """An internal hook of one ``stream`` run: partial values of its answer, queued as they
    change (see the module docstring)."""

    capture_content = True

    def __init__(self, parser: PartialParser, queue: asyncio.Queue[Any]) -> None:
        self.parser = parser
        self.queue = queue
        #: The last value queued (None before the first).
        self.last: BaseModel | None = None
        self._fresh = True

    def on_attempt(self, event: Attempt) -> None:
        """A new attempt streams a new answer: its values start from nothing."""
        self._fresh = True

    def on_chunk(self, event: Chunk) -> None:
        """Queue the answer so far as a partial value, when it changed."""
        if event.text is None:
            return
        value = self.parser.parse(event.text)
        if value is None:
            return
        if self._fresh:
            self._fresh = False
            self.put(self.parser.empty())
        self.put(value)

    def put(self, value: BaseModel) -> None:
        """Queue ``value`` unless it equals the last one queued."""
        if self.last is not None and value == self.last:
            return
        self.last = value
        self.queue.put_nowait(value)


async def stream_values(
    ex: BaseExtractor[Any], content: Content | RowInput, images: Any
) -> AsyncIterator[Any]:
    """Partial values of ``content``'s answer as it streams, then its value (see the module
    docstring); the row's error is raised after the values streamed before it."""
    queue: asyncio.Queue[Any] = asyncio.Queue()
    tracker = PartialTracker(PartialParser(ex.compiled), queue)
    task = asyncio.ensure_future(ex._one(content, images, stream=True, listeners=[tracker]))
    task.add_done_callback(lambda _: queue.put_nowait(_DONE))
    try:
        while (item := await queue.get()) is not _DONE:
            yield item
        value = task.result()  # the row's error, raised
        if tracker.last is None or value != tracker.last:
            yield value
    finally:
        await _cancel(task)


async def row_frames(
    ex: BaseExtractor[Any], prepared: PreparedInput
) -> AsyncIterator[pd.DataFrame]:
    """``prepared``'s rows as they finish, each a one-row frame with ``run``'s columns; after
    the last, the run's stop error (``RunStopped``, ``BudgetExceeded``) with every finished
    row in its ``partial``. Cancelled (Ctrl-C), ``ex.last_partial`` holds every finished row,
    handed over or not, and the rows never finished."""
    lazy = prepared.frame is None
    finished: list[RowResult] = []
    queue: asyncio.Queue[Any] = asyncio.Queue()
    places = asyncio.Semaphore(max(1, ex.config.concurrency))

    async def done(result: RowResult) -> None:
        finished.append(result)
        await places.acquire()
        queue.put_nowait(result)

    def frame_of(results: list[RowResult], stop: BaseException | str | None) -> pd.DataFrame:
        results = sorted(results, key=lambda result: result.position)  # input order
        if lazy:
            return ex._frame_of(results)
        assert prepared.index is not None
        return ex._build(
            fill_missing(results, prepared.index, stop), prepared.index, prepared.frame
        )

    def one_row(result: RowResult) -> pd.DataFrame:
        if lazy:
            return ex._frame_of([result])
        assert prepared.index is not None and prepared.frame is not None
        at = slice(result.position, result.position + 1)
        return ex._build([result], prepared.index[at], prepared.frame.iloc[at])

    run = ex._execute(
        prepared.rows,
        total=prepared.length,
        progress=ex.config.progress,
        sink=lambda batch: None,  # every row goes to ``done`` as it finishes
        keep_records=lazy,
        lookahead=None if lazy else prepared.length,
        on_done=done,
    )
    task = asyncio.ensure_future(run)
    task.add_done_callback(lambda _: queue.put_nowait(_DONE))
    try:
        while (item := await queue.get()) is not _DONE:
            places.release()
            yield one_row(item)
        _, stop_cause, report = task.result()
        if stop_cause is not None:
            frame = frame_of(finished, stop_cause)
            raise ex._stopped(stop_cause, report, frame) from stop_cause
    except asyncio.CancelledError:
        await _cancel(task)
        ex.last_partial = frame_of(finished, "not run: interrupted")
        raise
    finally:
        await _cancel(task)


async def _cancel(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` (if still running) and wait for it to clean up."""
    if task.done():
        return
    task.cancel()
    with suppress(asyncio.CancelledError, Exception):
        await task


def iterate_sync(
    items: AsyncIterator[T], interrupted: Callable[[KeyboardInterrupt], BaseException]
) -> Iterator[T]:
    """Iterate an async generator from sync code (a script or Jupyter): it runs on a fresh
    event loop in a worker thread, one item per step. A Ctrl-C while waiting cancels the step
    there, waits for the generator to clean up, and raises ``interrupted(interrupt)``."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="kimi_extract-iter", daemon=True)
    thread.start()
    try:
        while True:
            stepped = threading.Event()
            future = asyncio.run_coroutine_threadsafe(_step(items, stepped), loop)
            try:
                while not stepped.wait(0.1):
                    pass
            except KeyboardInterrupt as interrupt:
                future.cancel()
                stepped.wait(CLEANUP_WAIT_S)
                raise interrupted(interrupt) from interrupt
            try:
                item = future.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        closing = asyncio.run_coroutine_threadsafe(_close(items), loop)
        with suppress(BaseException):
            closing.result(CLEANUP_WAIT_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(CLEANUP_WAIT_S)
        if not thread.is_alive():
            loop.close()


async def _step(items: AsyncIterator[T], stepped: threading.Event) -> T:
    """The next item; ``stepped`` is set when the step ends, however it ends."""
    try:
        return await anext(items)
    finally:
        stepped.set()


async def _close(items: AsyncIterator[Any]) -> None:
    close = getattr(items, "aclose", None)
    if close is not None:
        await close()
