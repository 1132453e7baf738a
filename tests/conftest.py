"""Shared fixtures: a simulator per test and an extractor factory pointed at it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

import pytest
from hypothesis import settings
from pydantic import BaseModel

import kimi_extract as kx
from kimi_extract.http.clock import use_clock
from kimi_extract.simulator import Simulator

from .pg import backend, new_store, pg_url, postgres_server  # noqa: F401  (tests/pg.py)

# CI (CI=true) runs the property tests on a fixed set of examples, so a landing never depends on
# a lucky draw; on developers' machines every run explores new examples (and keeps what failed).
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

#: First line of every child-process script that a test interrupts with SIGINT. A shell starts a
#: background job (``pytest &``, some CI runners) with SIGINT ignored, the child inherits that, and
#: Python then installs no KeyboardInterrupt handler; this puts Python's own handler back.
INTERRUPTIBLE = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"

#: For child scripts interrupted while a sync iterator (``stream``, ``iter_rows``) waits:
#: ``tell_when(ready, line)`` prints ``line()`` once ``ready()`` holds and the main thread is
#: blocked in the library's wait for the next item, so the parent's SIGINT lands there and not in
#: the script's own loop body (the order of events, not a pause).
WAITING_IN_LIBRARY = """import sys, threading, time


def waiting_in_library():
    frame = sys._current_frames().get(threading.main_thread().ident)
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return "iterate_sync" in names and names[0] == "wait"


def tell_when(ready, line):
    def watch():
        while not (ready() and waiting_in_library()):
            time.sleep(0.01)
        print(line(), flush=True)
    threading.Thread(target=watch, daemon=True).start()
"""

# The same for this process: a suite started in the background with SIGINT ignored would run
# Ctrl-C tests that can never be interrupted (and hang). A handler, unlike an ignored signal, is
# not inherited across exec, so the processes tests start get Python's own handler back too.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


class Review(BaseModel):
    sentiment: Literal["positive", "negative", "neutral"]
    aspects: list[str]


#: Long enough (> 256 tokens) that the shared prefix is cacheable.
LONG_INSTRUCTIONS = "You classify product reviews for a consumer electronics retailer. " + " ".join(
    f"Rule {i}: read the review carefully, decide the overall sentiment, and list every "
    "product aspect the reviewer mentions using short lowercase nouns."
    for i in range(1, 16)
)


#: A sanity bound, in wall seconds, on how long Ctrl-C takes to end a run in a child process:
#: 10x docs/reliability.md's "within about two seconds", so a busy machine (a loaded CI runner)
#: passes.
#: Tests that check promptness also check the order of events (the run did not wait for a hung
#: request), which no load can upset.
CTRL_C_BOUND_S = 20.0


def ctrl_c_when_ready(args: list[str], ready: Callable[[str], bool]) -> tuple[str, str, str, int]:
    """Start a child script (``python -c SCRIPT ...``), wait for its first line, check it says
    the child is ready with ``ready(line)``, press Ctrl-C (SIGINT) and wait up to
    ``CTRL_C_BOUND_S`` for it to end. Returns (first line, rest of stdout, stderr, exit code)."""
    child = subprocess.Popen(
        [sys.executable, "-c", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stderr is not None
        first = child.stdout.readline()
        if not ready(first):
            child.kill()
            raise AssertionError(f"the child was not ready: {first!r}\n{child.stderr.read()}")
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=CTRL_C_BOUND_S)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    return first, out, err, child.returncode


#: The benchmark smoke run: a minute or more in its own processes
#: (tests/promises/test_benchmarks_smoke.py).
BENCHMARK_SMOKE = "test_quick_benchmark_run_writes_its_report"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The benchmark smoke test goes last: its run starts at collection and goes on meanwhile."""
    items.sort(key=lambda item: item.name == BENCHMARK_SMOKE)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the benchmark smoke run as soon as its test is collected, so it runs beside the rest
    of the suite (on the other core); the test, last, waits for it."""
    if session.config.option.collectonly:
        return
    for item in session.items:
        if item.name == BENCHMARK_SMOKE:
            item.module.start_in_background()  # type: ignore[attr-defined]
            return


def pytest_sessionfinish(session: pytest.Session) -> None:
    for item in session.items:
        if item.name == BENCHMARK_SMOKE:
            item.module.stop_background()  # type: ignore[attr-defined]
            return


@pytest.fixture(autouse=True)
def _no_default_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never touch the user's default store; store tests pass ``store=`` a tmp path."""
    monkeypatch.setenv("KIMI_EXTRACT_STORE", "off")


class FastClock:
    """A clock running ``speedup`` times faster than real time: a wait of ``s`` seconds on it takes
    ``s / speedup`` real seconds. Each wait still takes its own (shorter) real time, so no task's
    wait is hidden by another's, and a gap the simulator measures in real seconds, times
    ``speedup``, is the gap on this clock."""

    def __init__(self, speedup: float) -> None:
        self.speedup = speedup
        self._origin = time.monotonic()

    def now(self) -> float:
        return (time.monotonic() - self._origin) * self.speedup

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds / self.speedup)


#: How much faster than real time the ``fast_time`` fixture's clock runs.
SPEEDUP = 40.0


@pytest.fixture
def fast_time() -> Iterator[FastClock]:
    """Every client wait (retry backoff, server-asked pauses, limiter pacing) on a ``FastClock``:
    for tests where the waits are what is checked, not how the server counts real time."""
    with use_clock(FastClock(SPEEDUP)) as clock:
        yield clock


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator() as server:
        yield server


@pytest.fixture
def make_extractor(sim: Simulator) -> Callable[..., kx.Extractor[Any]]:
    def make(output: type[BaseModel] = Review, **options: Any) -> kx.Extractor[Any]:
        options.setdefault("base_url", sim.base_url)
        options.setdefault("api_key", sim.api_key)
        options.setdefault("progress", False)
        return kx.Extractor(output, **options)

    return make


def ok_exchanges(sim: Simulator) -> list[Any]:
    """History entries that returned a model answer."""
    return [h for h in sim.history if h.status == 200]


def chat_requests(sim: Simulator) -> list[Any]:
    return [h for h in sim.history if h.path.endswith("/chat/completions")]


def usage_sum(
    sim: Simulator, key: Literal["prompt", "cached", "write", "completion", "reasoning"]
) -> int:
    total = 0
    for h in ok_exchanges(sim):
        u = h.usage or {}
        if key == "prompt":
            total += u.get("prompt_tokens", 0)
        elif key == "completion":
            total += u.get("completion_tokens", 0)
        elif key == "cached":
            total += (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        elif key == "write":
            total += (u.get("prompt_tokens_details") or {}).get("cache_write_tokens", 0)
        else:
            total += (u.get("completion_tokens_details") or {}).get("reasoning_tokens", 0)
    return total
