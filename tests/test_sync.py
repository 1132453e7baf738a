"""run_sync: the sync shell around every run."""

from __future__ import annotations

import pytest

from kimi_extract.run.sync import run_sync


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
