"""run_sync: the sync shell around every run."""

from __future__ import annotations

import traceback

import pytest

import kimi_extract as kx
from kimi_extract.run.sync import run_sync

from ..conftest import Review


def test_the_result_is_returned_and_never_rendered_as_text():
    # asyncio.run (3.11) formats its SIGINT handler, which holds the main task and its result,
    # when it ends; a run's result is a DataFrame of every row, so rendering it costs CPU per row.
    rendered: list[int] = []

    class Result:
        def __repr__(self) -> str:
            rendered.append(1)
            return "Result()"

    async def run() -> Result:
        return Result()

    assert isinstance(run_sync(run()), Result)
    assert rendered == []


def test_an_error_of_the_run_is_raised_as_is():
    async def run() -> None:
        raise LookupError("nope")

    with pytest.raises(LookupError, match="nope"):
        run_sync(run())


def _printed(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))


def test_an_error_of_the_run_carries_no_chained_event_loop_error():
    # The sync shell looks for a running loop first; an error of the run must not be shown as
    # raised "during handling of" that lookup's RuntimeError.
    async def run() -> None:
        raise LookupError("nope")

    with pytest.raises(LookupError) as info:
        run_sync(run())
    assert info.value.__cause__ is None and info.value.__context__ is None
    assert "no running event loop" not in _printed(info.value)


def test_a_sync_run_error_prints_no_event_loop_traceback(monkeypatch: pytest.MonkeyPatch):
    # What a user sees: a sync run without a key fails with one traceback, its own.
    for name in ("KIMI_API_KEY", "EVOLINK_API_KEY", "KIMI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    ex = kx.Extractor(Review, progress=False)
    with pytest.raises(kx.MissingAPIKeyError) as info:
        ex.run(["fine"])
    printed = _printed(info.value)
    assert "no running event loop" not in printed
    assert "During handling of the above exception" not in printed
