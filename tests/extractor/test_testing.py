"""``kimi_extract.testing``: a real ``Extractor`` against scripted replies, on a virtual clock.

What a user's own test relies on: the script's replies reach the rows (in order, or per request
body), reasks and retries run as against a server, waits take no real time and are recorded,
mistakes in the script show up in the rows. docs/testing.md's blocks run in
tests/promises/test_docs.py.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import kimi_extract as kx
from kimi_extract.http import clock as clock_module
from kimi_extract.http import transport as transport_module
from kimi_extract.testing import (
    BASE_URL,
    HttpReply,
    ScriptedBackend,
    VirtualClock,
    api_error,
    completion,
    use_backend,
    use_clock,
)

ROOT = Path(__file__).resolve().parents[2]


class Review(BaseModel):
    sentiment: str
    stars: int


def extractor(**settings: Any) -> kx.Extractor:
    options: dict[str, Any] = {"base_url": BASE_URL, "api_key": "sk-test", "progress": False}
    return kx.Extractor(Review, **{**options, **settings})


def user_text(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    return content if isinstance(content, str) else json.dumps(content)


# -- a run against a script --------------------------------------------------------------------


def test_a_run_gets_the_scripted_answers_and_reasks_and_retries_on_a_virtual_clock():
    backend = ScriptedBackend(
        [
            api_error(429, "rate_limit_reached_error", headers={"Retry-After": "30"}),
            {"sentiment": "good", "stars": "five"},  # invalid: asked again with its errors
            Review(sentiment="good", stars=5),
            {"sentiment": "bad", "stars": 1},
        ]
    )
    clock = VirtualClock()
    frame = pd.DataFrame({"text": ["love it", "broken"]})
    with use_backend(backend), use_clock(clock):
        out = extractor(concurrency=1).run(frame, text="text")
    assert out["sentiment"].tolist() == ["good", "bad"] and out["stars"].tolist() == [5, 1]
    assert out["kx_error"].isna().all() and out["kx_attempts"].tolist() == [2, 1]
    assert len(backend.requests) == 4 and backend.remaining == [] and backend.extra_requests == 0
    reask = backend.requests[2]["messages"][-1]
    assert reask["role"] == "user" and "stars" in reask["content"]
    assert clock.sleeps == [30.0] and clock.now() == 30.0  # the server's wait, not slept


def test_a_function_script_answers_each_request_by_its_body_whatever_the_order():
    def script(body: dict[str, Any]) -> dict[str, Any]:
        text = user_text(body)
        return {"sentiment": "good" if "love" in text else "bad", "stars": len(text)}

    texts = [f"love {'x' * n}" if n % 2 else f"hate {'y' * n}" for n in range(40)]
    backend = ScriptedBackend(script)
    with use_backend(backend):
        out = extractor(concurrency=8).run(pd.DataFrame({"text": texts}), text="text")
    assert out["sentiment"].tolist() == ["good" if "love" in t else "bad" for t in texts]
    assert out["stars"].tolist() == [len(t) for t in texts]
    assert len(backend.requests) == 40


def test_a_request_past_the_end_of_the_script_fails_its_row_and_is_counted():
    backend = ScriptedBackend([{"sentiment": "good", "stars": 5}])
    with use_backend(backend):
        out = extractor(concurrency=1).run(pd.DataFrame({"text": ["a", "b"]}), text="text")
    assert out["kx_error"].iloc[0] is None
    assert "no scripted reply left for request 2" in out["kx_error"].iloc[1]
    assert backend.extra_requests == 1


def test_a_request_to_another_url_is_refused_so_no_real_store_gets_scripted_answers():
    backend = ScriptedBackend([{"sentiment": "good", "stars": 5}])
    with use_backend(backend):
        out = extractor(base_url="http://127.0.0.1:9/v1", store=False).run(
            pd.DataFrame({"text": ["a"]}), text="text"
        )
    assert "kimi_extract.testing.BASE_URL" in out["kx_error"].iloc[0]
    assert backend.extra_requests == 1 and len(backend.remaining) == 1


def test_exceptions_in_the_script_are_raised_as_the_http_client_would():
    backend = ScriptedBackend([kx.APIConnectionError("reset"), {"sentiment": "ok", "stars": 3}])
    clock = VirtualClock()
    with use_backend(backend), use_clock(clock):
        value = extractor().extract("meh")
    assert value == Review(sentiment="ok", stars=3)
    assert len(backend.requests) == 2 and len(clock.sleeps) == 1  # one backoff, not slept


def test_a_raw_reply_and_a_raw_answer_text_go_through_as_scripted():
    broken = HttpReply(200, {}, b"not a chat completion")
    backend = ScriptedBackend([broken, "not json", {"sentiment": "ok", "stars": 3}])
    with use_backend(backend), use_clock(VirtualClock()):
        value = extractor().extract("meh")
    assert value == Review(sentiment="ok", stars=3) and len(backend.requests) == 3
    assert "not valid JSON" in backend.requests[2]["messages"][-1]["content"]


def test_a_script_entry_of_another_type_is_an_error_naming_it():
    backend = ScriptedBackend([42])  # type: ignore[list-item]
    with pytest.raises(kx.ConfigurationError, match="got int"):
        asyncio.run(backend.post(BASE_URL + "/chat/completions", b"{}"))


@settings(max_examples=25, deadline=None)
@given(
    answer=st.fixed_dictionaries(
        {"sentiment": st.text(min_size=0, max_size=60), "stars": st.integers(-(10**9), 10**9)}
    ),
    chunk_chars=st.integers(1, 40),
    reasoning=st.none() | st.text(max_size=30),
)
def test_a_streamed_run_assembles_exactly_the_scripted_answer(answer, chunk_chars, reasoning):
    reply = completion(answer, reasoning=reasoning, prompt_tokens=7, completion_tokens=9)
    backend = ScriptedBackend([reply, reply], chunk_chars=chunk_chars)
    with use_backend(backend):
        streamed = extractor(stream=True, store=False).run(pd.DataFrame({"t": ["x"]}), text="t")
        plain = extractor(store=False).run(pd.DataFrame({"t": ["x"]}), text="t")
    assert [body.get("stream") for body in backend.requests] == [True, None]
    assert streamed["sentiment"].iloc[0] == answer["sentiment"] == plain["sentiment"].iloc[0]
    assert streamed["stars"].iloc[0] == answer["stars"]
    assert streamed["kx_prompt_tokens"].iloc[0] == 7
    assert streamed["kx_completion_tokens"].iloc[0] == 9


def test_a_streamed_error_reply_is_the_same_error():
    backend = ScriptedBackend([api_error(401, "invalid_authentication_error", "bad key")])
    with use_backend(backend), pytest.raises(kx.AuthenticationError, match="bad key"):
        extractor(stream=True).extract("x")


def test_use_backend_covers_its_block_only_and_nests():
    original = transport_module.make_backend
    outer, inner = ScriptedBackend([]), ScriptedBackend([])
    with use_backend(outer):
        with use_backend(inner):
            assert transport_module.make_backend("aiohttp") is inner
        assert transport_module.make_backend("aiohttp") is outer
    assert transport_module.make_backend is original


def test_use_backend_reaches_a_run_started_from_inside_a_running_loop():
    # In Jupyter the sync shell runs the extraction on a loop in another thread.
    backend = ScriptedBackend([{"sentiment": "good", "stars": 5}])

    async def inside_a_loop() -> Review:
        return extractor().extract("love it")

    with use_backend(backend):
        assert asyncio.run(inside_a_loop()) == Review(sentiment="good", stars=5)
    assert len(backend.requests) == 1


# -- the virtual clock -------------------------------------------------------------------------


def test_a_sleep_returns_at_once_and_moves_the_clock_by_the_wait():
    clock = VirtualClock(start=5.0)

    async def waits() -> None:
        await clock.sleep(2.5)
        await clock.sleep(-1)  # a negative wait is no wait
        await clock.sleep(10)

    asyncio.run(waits())
    assert clock.now() == 17.5 and clock.sleeps == [2.5, -1, 10]
    clock.advance(0.5)
    assert clock.now() == 18.0
    with pytest.raises(kx.ConfigurationError, match="forward"):
        clock.advance(-1)


def test_use_clock_is_the_http_layers_own():
    clock = VirtualClock()
    with use_clock(clock):
        assert clock_module.default_clock() is clock
    assert clock_module.default_clock() is clock_module.SYSTEM_CLOCK


@settings(max_examples=50, deadline=None)
@given(waits=st.lists(st.integers(0, 10_000), min_size=1, max_size=12))
def test_under_run_concurrent_waits_overlap_and_wake_in_time_order(waits):
    clock = VirtualClock(start=100.0)
    woke: list[tuple[float, int]] = []

    async def sleeper(n: int, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append((clock.now(), n))

    async def main() -> str:
        await asyncio.gather(*(sleeper(n, w / 10) for n, w in enumerate(waits)))
        return "done"

    assert clock.run(main()) == "done"
    # Each task woke at its own deadline: waits overlap (an instant clock would add them up).
    assert [when for when, _ in woke] == sorted(when for when, _ in woke)
    assert sorted(woke) == sorted((100.0 + w / 10, n) for n, w in enumerate(waits))
    assert clock.now() == 100.0 + max(waits) / 10


def test_under_run_asyncio_timeouts_and_sleeps_are_virtual_too():
    clock = VirtualClock()

    async def main() -> float:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(5):
                await clock.sleep(3600)
        await asyncio.sleep(2)
        return clock.now()

    assert clock.run(main()) == pytest.approx(7.0)


def test_under_run_a_thread_still_reports_back():
    clock = VirtualClock()
    started = threading.Event()

    def work() -> str:
        started.wait(5)
        return "from a thread"

    async def main() -> str:
        task = asyncio.create_task(asyncio.to_thread(work))
        await asyncio.sleep(0)
        started.set()
        return await task

    assert clock.run(main()) == "from a thread"


# -- the page ----------------------------------------------------------------------------------

PAGE = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"\n```python\n(.*?)\n```", PAGE, re.S)


def test_the_testing_page_has_its_example():
    assert BLOCKS and all("kimi_extract.testing" in block for block in BLOCKS)
