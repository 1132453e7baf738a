"""The simulator's limits (concurrency, RPM, TPM, overload, quota), faults and latency model."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from kimi_extract.simulator import Reply, SimRequest, Simulator

KEY = "sk-sim-test"
CLIENT = httpx.Client(timeout=10, limits=httpx.Limits(max_keepalive_connections=0))
SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["city", "tags"],
    "additionalProperties": False,
}


class FakeClock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(scope="module", autouse=True)
def _close_client() -> Iterator[None]:
    yield
    CLIENT.close()


def body_for(
    text: str = "Paris is lovely in spring, said the guide.", **extra: Any
) -> dict[str, Any]:
    return {
        "model": "kimi-k3.1-pro",
        "messages": [{"role": "user", "content": text}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "city", "schema": SCHEMA},
        },
        "reasoning_effort": "low",
        **extra,
    }


def post(sim: Simulator, body: dict[str, Any] | None = None) -> httpx.Response:
    return CLIENT.post(
        sim.base_url + "/v1/chat/completions",
        json=body or body_for(),
        headers={"Authorization": f"Bearer {KEY}"},
    )


def error_of(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


# -- limits -----------------------------------------------------------------------------------


async def test_max_concurrency_429_in_kimis_form_without_retry_after() -> None:
    with Simulator(api_key=KEY, max_concurrency=2, ttft_s=0.4) as sim:
        async with httpx.AsyncClient(timeout=10) as client:
            responses = await asyncio.gather(
                *(
                    client.post(
                        sim.base_url + "/v1/chat/completions",
                        json=body_for(f"row {i}"),
                        headers={"Authorization": f"Bearer {KEY}"},
                    )
                    for i in range(4)
                )
            )
        statuses = sorted(r.status_code for r in responses)
        assert statuses == [200, 200, 429, 429]
        limited = [r for r in responses if r.status_code == 429]
        for response in limited:
            assert error_of(response) == {
                "message": "Your account org-sim request reached organization max concurrency: "
                "2, please try again after 1 seconds",
                "type": "rate_limit_reached_error",
                "code": None,
            }
            assert "retry-after" not in response.headers
        assert sim.stats()["by_error_type"] == {"rate_limit_reached_error": 2}
        billed = sum(r.json()["usage"]["prompt_tokens"] for r in responses if r.status_code == 200)
        assert sim.stats()["tokens"]["prompt"] == billed  # rejected requests are not billed


@pytest.mark.parametrize("header", [False, True])
def test_rpm_sliding_window(header: bool) -> None:
    clock = FakeClock()
    with Simulator(api_key=KEY, rpm=3, clock=clock, retry_after_header=header) as sim:
        assert [post(sim).status_code for _ in range(3)] == [200, 200, 200]
        clock.advance(20)
        limited = post(sim)
        assert limited.status_code == 429
        assert error_of(limited)["message"] == (
            "Your account org-sim request reached organization max RPM: 3, please try again "
            "after 40 seconds"
        )
        assert limited.headers.get("retry-after") == ("40" if header else None)
        clock.advance(40)
        assert post(sim).status_code == 200
        tokens = sim.stats()["tokens"]
        ok = [h for h in sim.history if h.status == 200]
        assert tokens["prompt"] == sum(h.usage["prompt_tokens"] for h in ok)  # type: ignore[index]


def test_tpm_counts_prompt_plus_completion() -> None:
    clock = FakeClock()
    with Simulator(api_key=KEY, tpm=10_000, clock=clock) as probe:
        usage = post(probe).json()["usage"]
    cost = usage["total_tokens"]
    with Simulator(api_key=KEY, tpm=2 * cost, clock=clock) as sim:
        assert post(sim).status_code == 200
        assert post(sim).status_code == 200
        limited = post(sim)
        assert limited.status_code == 429
        assert error_of(limited)["type"] == "rate_limit_reached_error"
        assert (
            f"organization max TPM: {2 * cost}, please try again after 60 seconds"
            in error_of(limited)["message"]
        )
        clock.advance(61)
        assert post(sim).status_code == 200


def test_overload_rate_is_seeded() -> None:
    def pattern(seed: int) -> list[int]:
        with Simulator(api_key=KEY, overload_rate=0.5, seed=seed) as sim:
            return [post(sim).status_code for _ in range(12)]

    first = pattern(7)
    assert first == pattern(7) and set(first) == {200, 429}
    with Simulator(api_key=KEY, overload_rate=1.0) as sim:
        response = post(sim)
        assert response.status_code == 429
        assert error_of(response) == {
            "message": "The engine is currently overloaded, please try again later",
            "type": "engine_overloaded_error",
            "code": None,
        }


def test_quota_stops_after_the_spend_and_rejections_are_free() -> None:
    pricing = {"input": 1000.0, "cached_input": 100.0, "cache_write": 1000.0, "output": 1000.0}
    with Simulator(api_key=KEY, quota_usd=0.05, pricing=pricing) as sim:
        first = post(sim)
        assert first.status_code == 200
        spent = sim.stats()["spend_usd"]
        assert spent == pytest.approx(first.json()["usage"]["total_tokens"] * 1000.0 / 1e6)
        assert spent >= 0.05
        refused = post(sim)
        assert refused.status_code == 429
        assert error_of(refused) == {
            "message": "Your account org-sim is suspended due to insufficient balance, please "
            "recharge your account or check your plan and billing details",
            "type": "exceeded_current_quota_error",
            "code": None,
        }
        assert sim.stats()["spend_usd"] == spent


# -- faults --------------------------------------------------------------------------------------


def test_fault_500_is_not_billed() -> None:
    with Simulator(api_key=KEY, fault_500=1.0) as sim:
        response = post(sim)
        assert response.status_code == 500 and error_of(response)["type"] == "server_error"
        (exchange,) = sim.history
        assert exchange.fault == "500" and exchange.usage is None
        assert sim.stats()["tokens"]["prompt"] == 0 and sim.stats()["by_fault"] == {"500": 1}


def test_fault_reset_closes_the_connection() -> None:
    with Simulator(api_key=KEY, fault_reset=1.0) as sim:
        with pytest.raises(httpx.RemoteProtocolError):
            post(sim)
        (exchange,) = sim.history
        assert exchange.fault == "reset" and exchange.status is None
        assert exchange.t_end is not None


def test_fault_stream_cut_drops_the_stream_without_done() -> None:
    with Simulator(api_key=KEY, fault_stream_cut=1.0) as sim:
        lines: list[str] = []
        with pytest.raises(httpx.RemoteProtocolError):
            with CLIENT.stream(
                "POST",
                sim.base_url + "/v1/chat/completions",
                json=body_for(stream=True),
                headers={"Authorization": f"Bearer {KEY}"},
            ) as response:
                assert response.status_code == 200
                for line in response.iter_lines():
                    lines.append(line)
        events = [line for line in lines if line.startswith("data: ")]
        assert events and "data: [DONE]" not in events
        assert all(json.loads(e[6:])["choices"][0]["finish_reason"] is None for e in events)
        assert sim.history[0].fault == "cut" and sim.history[0].usage is None
        assert post(sim).status_code == 200  # non-streaming requests are not cut


def test_fault_slow_first_byte() -> None:
    with Simulator(api_key=KEY, fault_slow_first_byte=1.0, slow_first_byte_s=0.3) as sim:
        started = time.monotonic()
        assert post(sim).status_code == 200
        assert time.monotonic() - started >= 0.3
        assert sim.history[0].fault == "slow_first_byte"


def test_fault_invalid_json_content() -> None:
    with Simulator(api_key=KEY, fault_invalid_json=1.0) as sim:
        for i in range(4):
            data = post(sim, body_for(f"row {i}")).json()
            choice = data["choices"][0]
            assert choice["finish_reason"] == "stop"
            with pytest.raises(ValueError):
                json.loads(choice["message"]["content"])
        assert {h.fault for h in sim.history} == {"invalid_json"}
        usage = sim.history[0].usage
        assert usage is not None and usage["completion_tokens"] > 0


def test_fault_truncate() -> None:
    with Simulator(api_key=KEY) as clean:
        full = post(clean).json()["choices"][0]["message"]["content"]
    with Simulator(api_key=KEY, fault_truncate=1.0) as sim:
        data = post(sim).json()
        assert data["choices"][0]["finish_reason"] == "length"
        content = data["choices"][0]["message"]["content"]
        assert full.startswith(content) and len(content) < len(full)
        assert sim.history[0].fault == "truncate"


def test_faults_are_reproducible_for_a_seed() -> None:
    def faults(seed: int) -> list[str | None]:
        with Simulator(api_key=KEY, seed=seed, fault_500=0.3, fault_truncate=0.3) as sim:
            for i in range(12):
                post(sim, body_for(f"row {i}"))
            return [h.fault for h in sim.history]

    first = faults(3)
    assert first == faults(3) and {"500", "truncate", None} <= set(first)


def test_reply_faults_cut_and_hang() -> None:
    def responder(request: SimRequest) -> Reply:
        return Reply(fault="hang" if "hang" in request.user_text else "cut")

    with Simulator(api_key=KEY, responder=responder) as sim:
        with pytest.raises(httpx.RemoteProtocolError):
            post(sim)  # a non-streaming answer cut: half the body, then the connection drops
        with pytest.raises(httpx.ReadTimeout):
            CLIENT.post(
                sim.base_url + "/v1/chat/completions",
                json=body_for("please hang"),
                headers={"Authorization": f"Bearer {KEY}"},
                timeout=0.3,
            )
        cut, hang = sim.history
        assert cut.fault == "cut" and cut.usage is None
        assert hang.fault == "hang" and hang.status is None
        started = time.monotonic()
    assert time.monotonic() - started < 5  # stopping does not wait for the hung request


# -- latency ------------------------------------------------------------------------------------


def test_latency_model_ttft_and_tokens_per_second() -> None:
    with Simulator(api_key=KEY, ttft_s=0.2) as sim:
        started = time.monotonic()
        post(sim)
        assert time.monotonic() - started >= 0.2
    with Simulator(api_key=KEY, tokens_per_s=400.0) as sim:
        started = time.monotonic()
        with CLIENT.stream(
            "POST",
            sim.base_url + "/v1/chat/completions",
            json=body_for(stream=True),
            headers={"Authorization": f"Bearer {KEY}"},
        ) as response:
            arrivals = [time.monotonic() for _ in response.iter_lines()]
        completion = sim.history[0].usage["completion_tokens"]  # type: ignore[index]
        assert arrivals[-1] - started >= 0.8 * completion / 400.0
        assert arrivals[-1] - arrivals[0] > 0.05  # spread over the answer, not one burst
