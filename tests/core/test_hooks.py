"""The observer seam: every event of a run, counted against its RunReport; a hook that raises
changes nothing; content only on request; the key in no event.

The runs here go to a scripted server (``kimi_extract.testing``) on a virtual clock: its faults
are chosen per row, so every count is known before the run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import string
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kimi_extract as kx
from kimi_extract import hooks as events
from kimi_extract.testing import (
    BASE_URL,
    ScriptedBackend,
    VirtualClock,
    api_error,
    completion,
    use_backend,
    use_clock,
)

from ..conftest import Review

GOOD = {"sentiment": "positive", "aspects": ["lid"]}
BAD = '{"sentiment": "thrilled", "aspects": ["lid"]}'  # not one of the Literal's values

#: Row text -> the replies its requests get, in order (then GOOD).
FAULTS: dict[str, list[Any]] = {
    "plain one": [],
    "plain two": [],
    "server error": [api_error(500, "server_error")],
    "rate limited": [api_error(429, "rate_limit_reached_error", headers={"Retry-After": "3"})],
    "connection reset": [kx.APIConnectionError("connection reset by peer")],
    "invalid once": [BAD],
    "invalid always": [BAD, BAD, BAD],  # validation_retries=2: the row fails
    "stored": [],
}


class Recorder:
    """Keeps every event it is given, by hook method."""

    def __init__(self) -> None:
        self.seen: dict[str, list[Any]] = defaultdict(list)

    def __getattr__(self, name: str) -> Any:
        if name not in events.EVENTS:
            raise AttributeError(name)
        return lambda event: self.seen[name].append(event)

    def __dir__(self) -> list[str]:
        return [*super().__dir__(), *events.EVENTS]

    def count(self) -> Counter[str]:
        return Counter({name: len(found) for name, found in self.seen.items()})


class AsyncRecorder(Recorder):
    """The same, with every method a coroutine function that yields to the loop."""

    def __getattr__(self, name: str) -> Any:
        if name not in events.EVENTS:
            raise AttributeError(name)

        async def record(event: Any) -> None:
            await asyncio.sleep(0)
            self.seen[name].append(event)

        return record


class ContentRecorder(Recorder):
    capture_content = True


def script() -> tuple[ScriptedBackend, dict[str, int]]:
    sent: dict[str, int] = defaultdict(int)

    def reply(body: dict[str, Any]) -> Any:
        text = body["messages"][-1]["content"]
        if text not in FAULTS:  # a reask: the row's text is earlier in the conversation
            text = next(m["content"] for m in body["messages"] if m["content"] in FAULTS)
        planned = FAULTS[text]
        index = sent[text]
        sent[text] += 1
        return planned[index] if index < len(planned) else completion(GOOD, prompt_tokens=120)

    return ScriptedBackend(reply), sent


def run(texts: list[str], store: Path, **options: Any) -> tuple[pd.DataFrame, kx.RunReport]:
    backend, _ = script()
    ex = kx.Extractor(
        Review,
        base_url=BASE_URL,
        api_key="sk-test-key-0123456789",
        progress=False,
        store=store,
        concurrency=3,
        **options,
    )
    with use_backend(backend), use_clock(VirtualClock()):
        frame = ex.run(texts)
    assert ex.last_run is not None
    return frame, ex.last_run


def test_every_event_is_counted_and_the_counts_match_the_run_report(tmp_path):
    store = tmp_path / "store.sqlite3"
    run(["stored"], store)  # the next run serves it from the store
    recorder, waiting = Recorder(), AsyncRecorder()
    frame, report = run(list(FAULTS), store, hooks=[recorder, waiting])

    for hook in (recorder, waiting):
        counts = hook.count()
        seen = hook.seen
        assert counts["on_run_start"] == counts["on_run_end"] == 1
        assert seen["on_run_end"][0].report is report
        assert seen["on_run_end"][0].error is None
        assert seen["on_run_start"][0].rows == len(FAULTS)
        assert counts["on_row_start"] == counts["on_row_end"] == report.ok + report.failed == 8
        # Retries: the 500, the 429 and the reset, once each.
        assert counts["on_retry"] == report.retries == 3
        assert sum(r.rate_limited for r in seen["on_retry"]) == report.throttles == 1
        assert {r.error_type for r in seen["on_retry"]} == {
            "ServerError",
            "RateLimitError",
            "APIConnectionError",
        }
        assert [r.retry_after for r in seen["on_retry"] if r.rate_limited] == [3.0]
        # Every attempt is answered by one response; the answers are what the report counts.
        assert counts["on_attempt"] == counts["on_response"]
        answered = [r for r in seen["on_response"] if r.ok]
        assert len(answered) == report.usage.requests
        total = sum((r.usage for r in answered), kx.Usage())
        assert total.prompt_tokens == report.usage.prompt_tokens
        assert total.completion_tokens == report.usage.completion_tokens
        assert math.isclose(total.cost, report.usage.cost)
        assert counts["on_response"] - len(answered) == counts["on_retry"]
        # Reasks: one for "invalid once", two for "invalid always" (then it fails).
        assert counts["on_reask"] == 3
        ends = {e.label: e for e in seen["on_row_end"]}
        assert ends[FAULTS_INDEX["invalid once"]].reasks == 1
        assert ends[FAULTS_INDEX["invalid always"]].reasks == 2
        assert not ends[FAULTS_INDEX["invalid always"]].ok
        assert sum(e.ok for e in ends.values()) == report.ok
        # The store hit: a row end, no attempt.
        assert sum(e.from_store for e in ends.values()) == report.from_store == 1
        stored = ends[FAULTS_INDEX["stored"]]
        assert stored.attempts == 0 and stored.saved is not None
        assert not any(a.row == stored.row for a in seen["on_attempt"])
        # Each row's attempts are numbered per request; each retry is followed by the next.
        for retry in seen["on_retry"]:
            nexts = [
                a
                for a in seen["on_attempt"]
                if (a.row, a.request, a.attempt) == (retry.row, retry.request, retry.attempt + 1)
            ]
            assert len(nexts) == 1
        for end in ends.values():
            mine = [a for a in seen["on_attempt"] if a.row == end.row]
            assert len(mine) == end.attempts
            assert max((a.request for a in mine), default=0) == end.requests
        assert frame["kx_attempts"].sum() == report.usage.requests
        assert all(e.run_id == seen["on_run_start"][0].run_id for e in seen["on_row_end"])


FAULTS_INDEX = {text: i for i, text in enumerate(FAULTS)}


def test_rows_events_pair_up_in_order_for_each_row(tmp_path):
    """row start < attempt < response < (retry < attempt ...) < row end, per row."""
    order: list[tuple[str, int]] = []

    class Sequence:
        def __getattr__(self, name: str) -> Any:
            if name not in events.EVENTS:
                raise AttributeError(name)
            return lambda event: order.append((name, getattr(event, "row", -1)))

        def __dir__(self) -> list[str]:
            return [*super().__dir__(), *events.EVENTS]

    run(list(FAULTS), tmp_path / "s.sqlite3", hooks=[Sequence()])
    assert order[0] == ("on_run_start", -1) and order[-1] == ("on_run_end", -1)
    for row in range(len(FAULTS)):
        names = [name for name, r in order if r == row]
        assert names[0] == "on_row_start" and names[-1] == "on_row_end"
        inner = [n for n in names[1:-1] if n in ("on_attempt", "on_response")]
        assert inner == ["on_attempt", "on_response"] * (len(inner) // 2)


class Raising:
    """Raises in one event, and counts the calls it gets after that."""

    def __init__(self, event: str) -> None:
        self.event = event
        self.raised = False
        self.calls_after = 0

    def __getattr__(self, name: str) -> Any:
        if name not in events.EVENTS:
            raise AttributeError(name)

        def fail(event: Any) -> None:
            if self.raised:
                self.calls_after += 1
            if name == self.event:
                self.raised = True
                raise RuntimeError(f"broken hook in {name}")

        return fail

    def __dir__(self) -> list[str]:
        return [*super().__dir__(), *events.EVENTS]


class AsyncRaising(Raising):
    """The same as a coroutine: calls already in flight when it raised may still finish (and
    raise too: logged once all the same), but no call starts after it."""

    def __getattr__(self, name: str) -> Any:
        if name not in events.EVENTS:
            raise AttributeError(name)

        async def fail(event: Any) -> None:
            if self.raised:
                self.calls_after += 1
            await asyncio.sleep(0)
            if name == self.event:
                self.raised = True
                raise RuntimeError(f"broken hook in {name}")

        return fail


def comparable(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=["kx_latency_s"])


def test_a_raising_hook_is_logged_once_and_changes_nothing(tmp_path, caplog):
    plain, _ = run(list(FAULTS), tmp_path / "a.sqlite3", stream=True)
    broken = [Raising(name) for name in events.EVENTS] + [AsyncRaising("on_attempt")]
    after = Recorder()
    with caplog.at_level(logging.WARNING, logger="kimi_extract"):
        observed, report = run(
            list(FAULTS), tmp_path / "b.sqlite3", hooks=[*broken, after], stream=True
        )
    pd.testing.assert_frame_equal(comparable(observed), comparable(plain))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "hook" in r.message]
    assert len(warnings) == len(broken)  # once each, though most events happen once per row
    assert all("Raising raised RuntimeError" in w.message for w in warnings)
    for hook in broken:
        assert hook.raised and hook.calls_after == 0  # disabled once it raised
        assert sum(f"in {hook.event} at" in w.message for w in warnings) >= 1
    # A hook after the broken ones still gets every event.
    assert after.count()["on_row_end"] == report.ok + report.failed


def test_a_hook_fails_no_row_even_when_it_raises_in_the_middle_of_a_retry(tmp_path):
    """on_retry runs inside the transport's retry loop: a raising hook there stops nothing."""
    plain, _ = run(["server error", "rate limited"], tmp_path / "a.sqlite3")
    observed, report = run(
        ["server error", "rate limited"], tmp_path / "b.sqlite3", hooks=[Raising("on_retry")]
    )
    assert report.retries == 2 and report.ok == 2
    pd.testing.assert_frame_equal(comparable(observed), comparable(plain))


def test_content_is_in_the_events_only_for_hooks_that_ask(tmp_path):
    blind, seeing = Recorder(), ContentRecorder()
    run(list(FAULTS), tmp_path / "s.sqlite3", hooks=[blind, seeing], stream=True)
    content_fields = {
        "on_attempt": ["messages"],
        "on_response": ["content", "reasoning"],
        "on_chunk": ["delta", "text"],
        "on_reask": ["errors", "answer"],
        "on_row_end": ["value"],
    }
    for name, fields in content_fields.items():
        assert blind.seen[name], name
        for event in blind.seen[name]:
            assert all(getattr(event, f) is None for f in fields), (name, event)
        assert len(seeing.seen[name]) == len(blind.seen[name])
    attempt = seeing.seen["on_attempt"][0]
    assert attempt.messages[-1]["role"] == "user"
    answers = [r.content for r in seeing.seen["on_response"] if r.ok]
    assert '"positive"' in answers[0]
    assert any(r.errors and "sentiment" in r.errors[0] for r in seeing.seen["on_reask"])
    assert any(r.answer == BAD for r in seeing.seen["on_reask"])
    assert any(isinstance(e.value, Review) for e in seeing.seen["on_row_end"])
    # Chunks rebuild each streamed answer.
    last = {}
    for chunk in seeing.seen["on_chunk"]:
        last[(chunk.row, chunk.request, chunk.attempt)] = chunk
    for response in seeing.seen["on_response"]:
        if response.ok:
            key = (response.row, response.request, response.attempt)
            assert last[key].text == response.content
            assert last[key].chars == len(response.content)


def test_bad_hooks_are_refused_before_any_request():
    class Misspelt:
        def on_row_finish(self, event: Any) -> None: ...

    class Nothing:
        pass

    class Vague:
        capture_content = "yes"

        def on_row_end(self, event: Any) -> None: ...

    with pytest.raises(kx.ConfigurationError, match="on_row_finish.*did you mean 'on_row_end'"):
        kx.Extractor(Review, base_url="simulator", hooks=[Misspelt()])
    with pytest.raises(kx.ConfigurationError, match="hooks: Nothing has none"):
        kx.Extractor(Review, base_url="simulator", hooks=[Nothing()])
    with pytest.raises(kx.ConfigurationError, match="capture_content"):
        kx.Extractor(Review, base_url="simulator", hooks=[Vague()])
    with pytest.raises(kx.ConfigurationError, match="hooks must be a list"):
        kx.Extractor(Review, base_url="simulator", hooks="counter")
    ex = kx.Extractor(Review, base_url="simulator", hooks=[Recorder()])
    assert isinstance(ex.config.hooks, tuple)


def test_an_interrupted_run_still_ends_with_an_event():
    """A run cancelled mid-flight (what Ctrl-C does) tells on_run_end, with no report."""
    recorder = Recorder()
    arrived = asyncio.Event()

    class Hanging(ScriptedBackend):
        async def post(self, url: str, payload: bytes) -> Any:
            arrived.set()
            await asyncio.sleep(3600)

    ex = kx.Extractor(
        Review, base_url=BASE_URL, api_key="sk-test", progress=False, hooks=[recorder]
    )

    async def main() -> None:
        task = asyncio.create_task(ex.arun(["a", "b"]))
        await arrived.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with use_backend(Hanging([])):
        asyncio.run(main())
    end = recorder.seen["on_run_end"]
    assert len(end) == 1 and end[0].report is None and end[0].error == "interrupted"
    assert recorder.count()["on_attempt"] >= 1 and recorder.count()["on_row_end"] == 0


KEYS = st.text(alphabet=string.ascii_letters + string.digits + "-_", min_size=12, max_size=60)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(key=KEYS, stream=st.booleans())
def test_the_key_appears_in_no_event(key, stream):
    """The key is in the row's text, in the answers (a server echoing it), in error messages and
    response ids: no event carries it, even to a hook that captures content."""
    key = "sk-" + key
    sent: dict[str, int] = defaultdict(int)
    echo = {"sentiment": "positive", "aspects": [f"the key is {key}"]}

    def reply(body: dict[str, Any]) -> Any:
        text = next(m["content"] for m in body["messages"] if m["role"] == "user")
        sent[text] += 1
        if sent[text] == 1:
            return api_error(500, "server_error", f"upstream said {key}")
        if sent[text] == 2:
            return f'{{"sentiment": "{key}", "aspects": []}}'  # invalid: reasked
        reply = completion(echo)
        return dataclasses.replace(reply, headers={"x-request-id": f"req-{key}"})

    recorders = [Recorder(), ContentRecorder()]
    ex = kx.Extractor(
        Review,
        base_url=BASE_URL,
        api_key=key,
        progress=False,
        hooks=recorders,
        stream=stream,
        concurrency=2,
    )
    with use_backend(ScriptedBackend(reply)), use_clock(VirtualClock()):
        ex.run([f"my key: {key}", "no key here"])
    seen = [e for r in recorders for found in r.seen.values() for e in found]
    assert len(seen) > 20
    for event in seen:
        for text in strings(event):
            assert key not in text, type(event).__name__


def strings(value: Any) -> list[str]:
    """Every string inside an event (fields, nested lists, dicts, models, usage)."""
    if isinstance(value, str):
        return [value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [s for f in dataclasses.fields(value) for s in strings(getattr(value, f.name))]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*strings(k), *strings(v))]
    if isinstance(value, list | tuple):
        return [s for v in value for s in strings(v)]
    if hasattr(value, "model_dump"):
        return strings(value.model_dump())
    return [repr(value)]


@pytest.mark.parametrize("stream", [False, True])
def test_event_counts_match_the_report_against_the_simulators_random_faults(tmp_path, stream):
    """The simulator over HTTP, with 500s, resets, spurious 429s and invalid answers drawn at
    random, and a store holding a third of the rows: every count still adds up."""
    from kimi_extract.simulator import Simulator

    texts = [f"review {i}: the lid {'broke' if i % 2 else 'works'}" for i in range(36)]
    store = tmp_path / "store.sqlite3"
    faults = {
        "fault_500": 0.15,
        "fault_reset": 0.1,
        "spurious_429_rate": 0.1,
        "fault_invalid_json": 0.2,
        "seed": 7,
    }
    with Simulator(**faults) as sim, use_clock(VirtualClock()):
        options = {"base_url": sim.base_url, "api_key": sim.api_key, "progress": False}
        first = kx.Extractor(Review, store=store, **options)
        first.run(texts[::3])
        assert first.last_run is not None
        stored = first.last_run.ok
        recorder = Recorder()
        ex = kx.Extractor(Review, store=store, hooks=[recorder], stream=stream, **options)
        sent_before = len(sim.history)
        frame = ex.run(texts)
        report = ex.last_run
        attempts = len(sim.history) - sent_before
    counts, seen = recorder.count(), recorder.seen
    assert report is not None
    assert counts["on_attempt"] == counts["on_response"] == attempts
    assert counts["on_retry"] == report.retries > 0
    assert sum(r.rate_limited for r in seen["on_retry"]) == report.throttles > 0
    assert counts["on_row_end"] == report.ok + report.failed == len(texts)
    assert sum(e.from_store for e in seen["on_row_end"]) == report.from_store == stored > 0
    answered = [r for r in seen["on_response"] if r.ok]
    assert len(answered) == report.usage.requests
    assert sum(r.usage.total_tokens for r in answered) == report.usage.total_tokens
    # Every answer either became a row's value, was asked again, or ended its row invalid.
    invalid_ends = sum(
        1 for e in seen["on_row_end"] if e.error and e.error.startswith("ValidationFailedError")
    )
    network_ok = sum(1 for e in seen["on_row_end"] if e.ok and not e.from_store)
    assert counts["on_reask"] == len(answered) - network_ok - invalid_ends > 0
    assert sum(e.reasks for e in seen["on_row_end"]) == counts["on_reask"]
    ends = sorted(seen["on_row_end"], key=lambda e: e.row)
    assert list(frame["kx_error"].isna()) == [e.ok for e in ends]


@pytest.mark.parametrize("budget", [False, True])
def test_a_rows_later_passes_are_more_requests_of_that_row(tmp_path, budget):
    """A long document's gleaning passes (``passes=``): each pass's attempts carry their chunk's
    row and go on numbering its requests, so each row end counts them and the totals still
    match the report (with a budget, whose hook holds each row's reservation by its row)."""
    from ..pipeline.test_documents_long import (
        Recall,
        extractor,
        many_items,
        simulator,
        two_line_document,
    )

    path, key = two_line_document(many_items(40), tmp_path)
    recorder = Recorder()
    options: dict[str, Any] = {"hooks": [recorder], "concurrency": 4}
    if budget:
        options["max_total_tokens"] = 10_000_000
    with simulator(key, Recall(found=0.5, later=1.0)) as sim:
        ex = extractor(sim, {}, **options)
        ex.run_documents(path, chunk_chars=1000, chunk_overlap=200, passes=3)
        sent = len(sim.history)
    seen = recorder.seen
    assert len(seen["on_attempt"]) == len(seen["on_response"]) == sent
    ends = seen["on_row_end"]
    assert len(ends) > 1  # several chunks, each a row
    assert all(e.row >= 0 for e in seen["on_attempt"])
    for end in ends:
        mine = [a for a in seen["on_attempt"] if a.row == end.row]
        assert len(mine) == end.attempts and end.requests >= 2  # the first pass and a later one
        assert sorted(a.request for a in mine) == list(range(1, end.requests + 1))
    assert sum(e.requests for e in ends) == sent
