"""The simulator's implicit prefix cache: hits, writes, concurrency, TTLs, models."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from kimi_extract.simulator import Reply, Simulator

KEY = "sk-sim-test"
#: ~600 tokens: long enough that the shared prefix is cacheable (> 256 tokens).
LONG_SYSTEM = " ".join(
    f"Rule {i}: read the review carefully, decide the sentiment and list each aspect."
    for i in range(40)
)
CLIENT = httpx.Client(timeout=10, limits=httpx.Limits(max_keepalive_connections=0))


class FakeClock:
    """An injectable clock that only moves when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(scope="module", autouse=True)
def _close_client() -> Iterator[None]:
    yield
    CLIENT.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sim(clock: FakeClock) -> Iterator[Simulator]:
    with Simulator(api_key=KEY, clock=clock) as server:
        yield server


def body_for(text: str, model: str = "kimi-k3.1-pro", **extra: Any) -> dict[str, Any]:
    body = {
        "model": model,
        "messages": [{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": text}],
        "max_completion_tokens": 2048,
        **extra,
    }
    if model != "kimi-k3":
        body.setdefault("reasoning_effort", "low")
    return body


def usage_of(sim: Simulator, body: dict[str, Any]) -> dict[str, int]:
    response = CLIENT.post(
        sim.base_url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}
    )
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    return {
        "prompt": usage["prompt_tokens"],
        "cached": usage["prompt_tokens_details"]["cached_tokens"],
        "write": usage["prompt_tokens_details"]["cache_write_tokens"],
    }


def test_miss_then_hit_on_a_shared_prefix(sim: Simulator) -> None:
    first = usage_of(sim, body_for("The screen is bright."))
    assert first["cached"] == 0
    assert first["write"] == first["prompt"] // 64 * 64 > 256
    second = usage_of(sim, body_for("The battery died within an hour of unboxing it. " * 12))
    assert second["cached"] > 256 and second["cached"] % 64 == 0
    # Only the row's own blocks are new; the shared system prompt is read, not written again.
    assert second["cached"] + second["write"] == second["prompt"] // 64 * 64
    assert second["cached"] >= first["write"] - 64 and second["write"] >= 64
    assert second["prompt"] - second["cached"] - second["write"] >= 0
    stats = sim.stats()
    assert stats["cache"]["hits"] == 1 and stats["cache"]["writes"] == 2
    assert stats["tokens"]["cached"] == second["cached"]


def test_identical_request_is_cached_up_to_its_last_full_block(sim: Simulator) -> None:
    body = body_for("Same row again.")
    first = usage_of(sim, body)
    again = usage_of(sim, body)
    assert again["cached"] == first["write"] and again["write"] == 0


def test_short_prompts_neither_read_nor_write(sim: Simulator) -> None:
    body = {
        "model": "kimi-k3.1-pro",
        "messages": [{"role": "user", "content": "Hello there"}],
        "reasoning_effort": "low",
    }
    assert (
        usage_of(sim, body)
        == usage_of(sim, body)
        == {"prompt": usage_of(sim, body)["prompt"], "cached": 0, "write": 0}
    )
    assert sim.stats()["cache"]["entries"] == 0


async def test_concurrent_first_requests_all_miss(sim: Simulator) -> None:
    sim.responder = lambda request: Reply(delay=0.3)
    async with httpx.AsyncClient(timeout=10) as client:
        responses = await asyncio.gather(
            *(
                client.post(
                    sim.base_url + "/v1/chat/completions",
                    json=body_for(f"Row number {i}."),
                    headers={"Authorization": f"Bearer {KEY}"},
                )
                for i in range(6)
            )
        )
    usages = [r.json()["usage"]["prompt_tokens_details"] for r in responses]
    assert all(u["cached_tokens"] == 0 and u["cache_write_tokens"] > 256 for u in usages)
    assert sim.stats()["in_flight_peak"] == 6
    sim.responder = None
    assert usage_of(sim, body_for("Row number 99."))["cached"] > 256


def test_ttl_is_five_minutes_from_the_write(sim: Simulator, clock: FakeClock) -> None:
    usage_of(sim, body_for("first"))
    clock.advance(299)
    assert usage_of(sim, body_for("second"))["cached"] > 0  # a read does not extend the entry
    clock.advance(2)
    expired = usage_of(sim, body_for("third"))
    assert expired["cached"] == 0 and expired["write"] > 256


def test_read_refresh_is_an_option(clock: FakeClock) -> None:
    with Simulator(api_key=KEY, clock=clock, cache_refresh_on_read=True) as server:
        usage_of(server, body_for("first"))
        clock.advance(299)
        assert usage_of(server, body_for("second"))["cached"] > 0  # refreshes the shared blocks
        clock.advance(299)
        assert usage_of(server, body_for("third"))["cached"] > 0
        clock.advance(301)
        expired = usage_of(server, body_for("fourth"))
        assert expired["cached"] == 0 and expired["write"] > 256


def test_one_hour_ttl_with_prompt_cache_options(sim: Simulator, clock: FakeClock) -> None:
    long_lived: dict[str, Any] = {"prompt_cache_options": {"mode": "implicit", "ttl": "1h"}}
    usage_of(sim, body_for("first", **long_lived))
    clock.advance(3000)
    assert usage_of(sim, body_for("second", **long_lived))["cached"] > 256
    clock.advance(3601)
    assert usage_of(sim, body_for("third", **long_lived))["cached"] == 0


def test_kimi_k3_reports_no_cache_writes_but_still_caches(sim: Simulator) -> None:
    first = usage_of(sim, body_for("first", model="kimi-k3"))
    assert first["write"] == 0 and first["cached"] == 0
    second = usage_of(sim, body_for("second", model="kimi-k3"))
    assert second["cached"] > 256 and second["write"] == 0


def test_cache_is_per_model(sim: Simulator) -> None:
    usage_of(sim, body_for("first"))
    assert usage_of(sim, body_for("second", model="kimi-k3.1-pro-highspeed"))["cached"] == 0


def test_prefix_includes_schema_and_tools(sim: Simulator) -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
    usage_of(sim, body_for("first", response_format=fmt))
    other = {**schema, "properties": {"b": {"type": "string"}}, "required": ["b"]}
    changed = {"type": "json_schema", "json_schema": {"name": "a", "schema": other}}
    assert usage_of(sim, body_for("second", response_format=changed))["cached"] == 0
    assert usage_of(sim, body_for("third", response_format=fmt))["cached"] > 256


def test_images_are_keyed_by_their_url(sim: Simulator) -> None:
    def with_image(url: str, text: str) -> dict[str, Any]:
        body = body_for(text)
        body["messages"].insert(
            1, {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}
        )
        return body

    usage_of(sim, with_image("https://example.com/a.png", "first"))
    same = usage_of(sim, with_image("https://example.com/a.png", "second"))
    other = usage_of(sim, with_image("https://example.com/b.png", "third"))
    assert same["cached"] > other["cached"] > 256  # the system prompt is shared, not the image


def test_failed_requests_write_nothing(clock: FakeClock) -> None:
    with Simulator(api_key=KEY, clock=clock, fault_500=1.0) as failing:
        response = CLIENT.post(
            failing.base_url + "/v1/chat/completions",
            json=body_for("x"),
            headers={"Authorization": f"Bearer {KEY}"},
        )
        assert response.status_code == 500
        assert failing.stats()["cache"]["entries"] == 0
        assert failing.stats()["tokens"]["prompt"] == 0


def test_reset_clears_the_cache(sim: Simulator) -> None:
    usage_of(sim, body_for("first"))
    sim.reset()
    assert usage_of(sim, body_for("second"))["cached"] == 0
