"""A run collects young garbage in larger batches, and puts the application's GC thresholds back
however it ends (run.gc_scope)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Literal

import pytest
from pydantic import BaseModel, field_validator

import kimi_extract as kx
from kimi_extract.run.gc_scope import RUN_GEN0_THRESHOLD, spaced_young_collections
from kimi_extract.simulator import Simulator

from ..conftest import Review

APP = (600, 9, 11)  # the application's own thresholds (not CPython's defaults)


@pytest.fixture(autouse=True)
def app_thresholds() -> Iterator[None]:
    saved, enabled = gc.get_threshold(), gc.isenabled()
    gc.set_threshold(*APP)
    gc.enable()
    try:
        yield
    finally:
        gc.set_threshold(*saved)
        if not enabled:
            gc.disable()


def test_raised_inside_and_restored_after() -> None:
    with spaced_young_collections():
        assert gc.get_threshold() == (RUN_GEN0_THRESHOLD, 9, 11)
    assert gc.get_threshold() == APP


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_restored_when_the_block_raises(error: type[BaseException]) -> None:
    with pytest.raises(error), spaced_young_collections():
        raise error()
    assert gc.get_threshold() == APP


def test_overlapping_runs_restore_once_the_last_ends() -> None:
    outer, inner = spaced_young_collections(), spaced_young_collections()
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)  # the first run ends while the second goes on
    assert gc.get_threshold()[0] == RUN_GEN0_THRESHOLD
    inner.__exit__(None, None, None)
    assert gc.get_threshold() == APP


def test_the_applications_own_choices_are_left_alone() -> None:
    with spaced_young_collections():  # set by the application during the run: kept
        gc.set_threshold(2_000, 10, 10)
    assert gc.get_threshold() == (2_000, 10, 10)
    for thresholds in [(0, 10, 10), (50_000, 10, 10)]:  # automatic GC off; already higher
        gc.set_threshold(*thresholds)
        with spaced_young_collections():
            assert gc.get_threshold() == thresholds
        assert gc.get_threshold() == thresholds
    gc.set_threshold(*APP)
    gc.disable()
    with spaced_young_collections():
        assert gc.get_threshold() == APP
    assert gc.get_threshold() == APP


seen: list[int] = []


class Probe(BaseModel):
    """Records generation 0's threshold while a row's answer is validated (inside the run)."""

    sentiment: Literal["positive", "negative", "neutral"]
    aspects: list[str]

    @field_validator("sentiment")
    @classmethod
    def _record(cls, value: str) -> str:
        seen.append(gc.get_threshold()[0])
        return value


def test_a_run_raises_the_threshold_and_restores_it(make_extractor) -> None:
    seen.clear()
    out = make_extractor(Probe, concurrency=4).run(["good", "bad", "fine"])
    assert out["kx_error"].isna().all()
    assert seen and set(seen) == {RUN_GEN0_THRESHOLD}
    assert gc.get_threshold() == APP


def test_restored_after_a_run_is_cancelled_midway() -> None:
    """Ctrl-C in ``run`` cancels the run's task (asyncio.run); the thresholds come back."""

    async def cancel_midway() -> None:
        with Simulator(ttft_s=30.0) as slow:  # every request hangs: the run is cut in flight
            ex = kx.Extractor(Review, base_url=slow.base_url, api_key=slow.api_key, progress=False)
            task = asyncio.create_task(ex.arun(["a", "b", "c"]))
            for _ in range(500):  # until the run has started (at most ~5 s)
                if gc.get_threshold()[0] == RUN_GEN0_THRESHOLD:
                    break
                await asyncio.sleep(0.01)
            assert gc.get_threshold()[0] == RUN_GEN0_THRESHOLD
            task.cancel()
            with pytest.raises((asyncio.CancelledError, kx.RunInterrupted)):
                await task

    asyncio.run(cancel_midway())
    assert gc.get_threshold() == APP
