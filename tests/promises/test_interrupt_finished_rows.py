"""A Ctrl-C never leaves a finished row out of the partial frame.

A row is finished once its answer is committed to the result store (or, with no store, once its
result is known): whenever the cancel lands after that (the commit done but the row not yet
resumed, the commit still on its way to the store, the row's ``on_row_end`` hook, ...), the
``partial`` the run leaves (``ex.last_partial``, what ``RunInterrupted.partial`` carries) holds
its value. Checked as a property over run sizes, concurrencies and the row whose finish the
cancel follows, each stage where the window was (before the fix, rows committed between the
commit and the report were in the store but not in the partial).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import kimi_extract as kx
from kimi_extract.run.store import ResultStore
from kimi_extract.simulator import Simulator


class Out(BaseModel):
    value: str


@pytest.fixture(scope="module")
def server() -> Iterator[Simulator]:
    with Simulator() as sim:
        yield sim


class _CancelAt:
    """Cancels the run's task when the ``at``-th row gets to a stage (counted from 1)."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.seen = 0
        self.task: asyncio.Task[Any] | None = None
        #: Rows whose ``on_row_end`` was heard, with their outcome.
        self.ended: dict[int, bool] = {}

    def hit(self) -> bool:
        self.seen += 1
        if self.seen == self.at and self.task is not None:
            self.task.cancel()
            return True
        return False


class _EndHook:
    def __init__(self, cancel: _CancelAt, *, on_end: bool) -> None:
        self.cancel = cancel
        self.on_end = on_end

    async def on_row_end(self, event: Any) -> None:
        self.cancel.ended[event.row] = event.ok
        if self.on_end and self.cancel.hit():
            await asyncio.sleep(0)  # the cancel lands here, in the hook


def _patch_commit(monkeypatch: pytest.MonkeyPatch, cancel: _CancelAt, stage: str) -> None:
    """Make the store's commit cancel the run at the chosen moment of the chosen row."""
    original = ResultStore.commit

    def commit(self: ResultStore, key: str, **options: Any) -> asyncio.Future[None]:
        inner = original(self, key, **options)
        loop = asyncio.get_running_loop()
        outer: asyncio.Future[None] = loop.create_future()

        def landed(_: asyncio.Future[None]) -> None:
            if stage == "commit-done":
                # The cancel first, then the commit's answer: the row's task wakes to the cancel
                # with its row committed (a Ctrl-C between the commit and the row's report).
                cancel.hit()
            if not outer.done():  # (cancelled with the row by the code before the fix)
                outer.set_result(None)

        if stage == "commit-in-flight" and cancel.hit():
            # The cancel now, the commit lands a moment later (a write still on its way).
            loop.call_later(0.01, lambda: inner.add_done_callback(landed))
        else:
            inner.add_done_callback(landed)
        return outer

    monkeypatch.setattr(ResultStore, "commit", commit)


def _run(
    server: Simulator, tmp_path: Path, rows: int, concurrency: int, cancel: _CancelAt, stage: str
) -> tuple[Any, int]:
    # A fresh file per example (hypothesis runs them all in one test's tmp_path).
    store: Path | bool = tmp_path / f"{uuid.uuid4().hex}.db"
    if stage == "no-store":
        store = False
    ex = kx.Extractor(
        Out,
        base_url=server.base_url,
        api_key=server.api_key,
        progress=False,
        concurrency=concurrency,
        store=store,
        hooks=[_EndHook(cancel, on_end=stage in ("row-end-hook", "no-store"))],
    )

    async def main() -> None:
        task = asyncio.create_task(ex.arun([f"row {i}" for i in range(rows)]))
        cancel.task = task
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    committed = 0
    if isinstance(store, Path):
        kept = ResultStore(store)
        try:
            committed = len(kept)
        finally:
            kept.close()
    return ex.last_partial, committed


STAGES = ["commit-done", "commit-in-flight", "row-end-hook", "no-store"]


@pytest.mark.parametrize("stage", STAGES)
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_every_row_finished_before_a_ctrl_c_is_in_the_partial(
    server: Simulator,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stage: str,
    data: st.DataObject,
):
    rows = data.draw(st.integers(2, 12), label="rows")
    concurrency = data.draw(st.integers(1, 6), label="concurrency")
    cancel = _CancelAt(data.draw(st.integers(1, rows), label="cancelled at the finish of row #"))
    with monkeypatch.context() as patch:
        if stage.startswith("commit"):
            _patch_commit(patch, cancel, stage)
        partial, committed = _run(server, tmp_path, rows, concurrency, cancel, stage)
    assert cancel.seen >= cancel.at  # the cancel did land where it was meant to
    assert partial is not None and len(partial) == rows
    finished = partial["kx_error"].isna()
    if stage == "no-store":
        # Every row whose end the hooks heard is in the partial with its value.
        for position, ok in cancel.ended.items():
            assert bool(finished.iloc[position]) == ok, (position, partial.iloc[position])
        assert finished.sum() >= sum(cancel.ended.values())
    else:
        # The store and the partial agree: every committed row is there, and nothing more.
        assert committed >= 1
        assert int(finished.sum()) == committed, partial[["value", "kx_error"]]
    assert (partial.loc[finished, "value"].str.len() > 0).all()
    unfinished = partial.loc[~finished, "kx_error"]
    assert unfinished.str.startswith("not run").all(), unfinished
