"""Run a coroutine from sync code, in a plain script or inside a running loop (Jupyter)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

R = TypeVar("R")


def run_sync(coro: Coroutine[Any, Any, R]) -> R:
    """Run a coroutine from sync code.

    Without a running loop this is ``asyncio.run`` (Ctrl-C cancels the run, which closes its
    connections). Inside a running loop (Jupyter) the coroutine runs on a fresh loop in a worker
    thread; a Ctrl-C in the calling thread cancels it there and waits for it to clean up.
    """
    if not _loop_running():
        # Not inside ``except RuntimeError``: every error of the run would be chained to a
        # misleading "RuntimeError: no running event loop" ("During handling of the above...").
        # The main task returns None, not the value: at its end ``asyncio.run`` (3.11) formats
        # a ValueError naming its SIGINT handler, whose repr holds the task and its result, so a
        # DataFrame result would be rendered as text (twice) and thrown away: ~7 ms for 2,000 rows.
        box: list[R] = []
        asyncio.run(_into(coro, box))
        return box[0]
    outcome: dict[str, Any] = {}
    ready = threading.Event()
    # Not ``thread.join``: a KeyboardInterrupt inside ``join`` can leave the thread looking
    # finished (``is_alive()`` False) while it still runs, so the wait after a Ctrl-C returned
    # at once and the caller raised before the run had set its partial result.
    finished = threading.Event()

    def worker() -> None:
        try:
            with asyncio.Runner() as runner:
                outcome["loop"] = runner.get_loop()
                task = outcome["task"] = outcome["loop"].create_task(coro)
                ready.set()
                try:
                    outcome["value"] = runner.run(_await(task))
                except BaseException as exc:  # delivered to the calling thread below
                    outcome["error"] = exc
        finally:
            finished.set()

    thread = threading.Thread(target=worker, name="kimi_extract-run", daemon=True)
    thread.start()
    try:
        while not finished.wait(0.1):
            pass
    except KeyboardInterrupt:
        ready.wait(5)
        if "task" in outcome:
            outcome["loop"].call_soon_threadsafe(outcome["task"].cancel)
        finished.wait(10)
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _loop_running() -> bool:
    """Whether this thread is inside a running event loop (Jupyter, an async caller)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def _await(task: asyncio.Task[R]) -> R:
    return await task


async def _into(coro: Coroutine[Any, Any, R], box: list[R]) -> None:
    box.append(await coro)
