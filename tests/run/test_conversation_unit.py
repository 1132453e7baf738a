"""One row's conversation against a scripted backend on a virtual clock: no server, no real waits.

The real ``Transport`` (retries, error mapping, the server's wait) and ``RowRunner`` (reask,
truncation, tool loop, store, budget, run-level errors) run as in a run; only the HTTP backend is
a script of replies and every wait is recorded on a virtual clock instead of slept.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import tracemalloc
from dataclasses import dataclass
from typing import Any

import pytest
from multidict import CIMultiDict

import kimi_extract as kx
import kimi_extract.testing as testing
from kimi_extract.config import Connection
from kimi_extract.http.backends import HttpReply
from kimi_extract.http.limiter import Limiter
from kimi_extract.http.transport import UNREACHABLE_AFTER, Secret, Transport
from kimi_extract.http.wire import MAX_RESPONSE_VALUES, json_values
from kimi_extract.records import Pricing, RowInput, Usage
from kimi_extract.run.budget import RunBudget
from kimi_extract.run.conversation import (
    MAX_TOOL_CALLS,
    MIN_ANSWER_VALUES,
    RowRunner,
    RowSettings,
)
from kimi_extract.schema.compiled import compile_schema
from kimi_extract.testing import ScriptedBackend, VirtualClock

from ..conftest import Review

KEY = "sk-unit-0123456789abcdef"
GOOD = json.dumps({"sentiment": "positive", "aspects": ["lid"]})
SYSTEM = {"role": "system", "content": "Classify the review."}


def answer(
    content: str | None = GOOD,
    *,
    finish: str = "stop",
    tool_calls: list[dict[str, Any]] | None = None,
    prompt: int = 100,
    completion: int = 20,
) -> HttpReply:
    return testing.completion(
        content,
        finish_reason=finish,
        reasoning="hm",
        tool_calls=tool_calls,
        prompt_tokens=prompt,
        completion_tokens=completion,
    )


def error(status: int, kind: str, message: str = "no", headers: dict[str, str] | None = None):
    # Header names are case-insensitive, as every HTTP backend gives them.
    return testing.api_error(status, kind, message, headers)


def settings(**overrides: Any) -> RowSettings:
    compiled = compile_schema(Review)
    options: dict[str, Any] = {
        "model": "kimi-k2",
        "compiled": compiled,
        "static_messages": (SYSTEM,),
        "response_format": compiled.response_format(),
        "reasoning_effort": None,
        "max_completion_tokens": 1000,
        "validation_retries": 2,
        "context_window": 100_000,
    }
    options.update(overrides)
    return RowSettings(**options)


@dataclass
class Outcome:
    result: Any
    runner: RowRunner
    #: The run-level error noted by the time this row finished.
    fatal: BaseException | None
    bodies: list[dict[str, Any]]
    sleeps: list[float]


def run_rows(
    replies: list[HttpReply | BaseException],
    *,
    rows: int = 1,
    store: Any = None,
    budget: RunBudget | None = None,
    connection: Connection | None = None,
    limiter: bool = False,
    **overrides: Any,
) -> list[Outcome]:
    backend = ScriptedBackend(replies, base_url=None)
    clock = VirtualClock(start=1000.0)

    async def main() -> list[Outcome]:
        transport = Transport(
            base_url="http://kimi.invalid",
            api_key=Secret(KEY),
            concurrency=1,
            connection=dataclasses.replace(connection or Connection(), timeout=30),
            gate=Limiter(concurrency=4, clock=clock) if limiter else None,
            clock=clock,
            backend=backend,
        )
        runner = RowRunner(settings(**overrides), transport, store=store, budget=budget)
        outcomes = []
        async with transport:
            for position in range(rows):
                row = RowInput(label=position, position=position, content=f"review {position}")
                result = await runner.process(row)
                sent = backend.requests
                outcomes.append(Outcome(result, runner, runner.fatal, sent, clock.sleeps))
        return outcomes

    outcomes = asyncio.run(main())
    assert not backend.remaining, "scripted replies left unused"
    assert not backend.extra_requests, "more requests than scripted replies"
    return outcomes


def run_row(replies: list[HttpReply | BaseException], **options: Any) -> Outcome:
    return run_rows(replies, **options)[0]


# -- the conversation ----------------------------------------------------------------------------


def test_an_invalid_answer_is_sent_back_with_its_errors_and_asked_again():
    out = run_row([answer('{"sentiment": "great", "aspects": []}'), answer()])
    assert out.result.ok and out.result.value == Review(sentiment="positive", aspects=["lid"])
    assert out.result.attempts == 2 and out.result.usage.prompt_tokens == 200
    first, second = out.bodies
    assert second["messages"][: len(first["messages"])] == first["messages"]
    assistant, reask = second["messages"][len(first["messages"]) :]
    assert assistant["role"] == "assistant" and assistant["reasoning_content"] == "hm"
    assert reask["role"] == "user" and "sentiment" in reask["content"]
    assert "did not match the required schema" in reask["content"]


def test_answers_that_stay_invalid_end_in_the_rows_validation_error():
    out = run_row([answer("not json at all")] * 3, validation_retries=2)
    assert out.result.value is None and out.result.attempts == 3
    assert out.result.error.startswith("ValidationFailedError: answer still invalid after 3")
    assert "was not valid JSON" in out.bodies[1]["messages"][-1]["content"]
    assert out.runner.fatal is None


def test_a_truncated_answer_is_asked_once_more_with_double_max_completion_tokens():
    out = run_row([answer('{"sentiment": "pos', finish="length"), answer()])
    assert out.result.ok and out.result.attempts == 2
    assert [b["max_completion_tokens"] for b in out.bodies] == [1000, 2000]
    # The cut answer is not part of the conversation: the same messages, a larger budget.
    assert out.bodies[0]["messages"] == out.bodies[1]["messages"]


def test_a_second_truncation_is_the_rows_truncated_error():
    out = run_row([answer("{", finish="length")] * 2)
    assert out.result.error.startswith("TruncatedError: truncated")
    assert "max_completion_tokens=2,000" in out.result.error


def search_call(query: str, call_id: str = "call-1") -> list[dict[str, Any]]:
    arguments = json.dumps({"query": query})
    return [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": "$web_search", "arguments": arguments},
        }
    ]


def test_tool_calls_are_echoed_back_and_counted_as_web_searches():
    tools = ({"type": "web_search"},)
    out = run_row(
        [answer(None, finish="tool_calls", tool_calls=search_call("kettle")), answer()],
        tools=tools,
    )
    assert out.result.ok and out.result.web_searches == 1 and out.result.attempts == 2
    assert out.bodies[0]["tools"] == [{"type": "web_search"}]
    assistant, tool = out.bodies[1]["messages"][-2:]
    assert assistant["tool_calls"][0]["id"] == "call-1"
    assert tool == {
        "role": "tool",
        "tool_call_id": "call-1",
        "name": "$web_search",
        "content": json.dumps({"query": "kettle"}),
    }


def test_a_model_that_keeps_calling_tools_ends_in_a_tool_loop_error():
    calls = [answer(None, finish="tool_calls", tool_calls=search_call(f"q{i}")) for i in range(3)]
    out = run_row(calls, tools=({"type": "web_search"},), max_tool_rounds=2)
    assert out.result.error.startswith("ToolLoopError: the model still called tools after 2")
    assert isinstance(out.result.exception, kx.ToolLoopError)


def test_a_call_of_a_tool_not_offered_ends_the_row_with_no_follow_up():
    for tools in ((), ({"type": "web_search"},)):
        call = search_call("x")
        call[0]["function"]["name"] = "run_shell" if tools else "$web_search"
        out = run_row([answer(None, finish="tool_calls", tool_calls=call)], tools=tools)
        assert out.result.error.startswith("ToolLoopError: the model called a tool that was not")
        assert len(out.bodies) == 1  # refused at once: nothing echoed back


def test_more_tool_calls_in_one_answer_than_accepted_end_the_row_with_no_follow_up():
    calls = [search_call(f"q{i}", call_id=f"call-{i}")[0] for i in range(MAX_TOOL_CALLS + 1)]
    out = run_row(
        [answer(None, finish="tool_calls", tool_calls=calls)], tools=({"type": "web_search"},)
    )
    assert out.result.error.startswith(f"ToolLoopError: the answer made {MAX_TOOL_CALLS + 1}")
    assert len(out.bodies) == 1
    fine = calls[:MAX_TOOL_CALLS]
    out = run_row(
        [answer(None, finish="tool_calls", tool_calls=fine), answer()],
        tools=({"type": "web_search"},),
    )
    assert out.result.ok and out.result.web_searches == MAX_TOOL_CALLS


def searched(tokens: int) -> list[dict[str, Any]]:
    """A ``$web_search`` call as Kimi sends it, reporting ``tokens`` of search results."""
    arguments = {"search_result": {"search_id": "ws-1"}, "usage": {"total_tokens": tokens}}
    call = search_call("x")
    call[0]["function"]["arguments"] = json.dumps(arguments)
    return call


def test_the_follow_up_reserves_the_search_results_the_search_reported():
    # First request: ~10 prompt tokens + 1,000 completion fits 3,000; the follow-up would bill
    # the 2,500 search tokens on top: it is not sent, and the row says why.
    budget = RunBudget(max_cost=None, max_total_tokens=3_000)
    first = answer(None, finish="tool_calls", tool_calls=searched(2_500), prompt=10, completion=5)
    out = run_row([first], budget=budget, tools=({"type": "web_search"},))
    error = out.result.error
    assert error.startswith("budget: ") and "2,500 of them web search" in error, error
    assert len(out.bodies) == 1 and budget.spent_tokens == 15
    # With room for them the follow-up goes, its reservation holding the search tokens.
    budget = RunBudget(max_cost=None, max_total_tokens=5_000)
    out = run_row([first, answer()], budget=budget, tools=({"type": "web_search"},))
    assert out.result.ok and len(out.bodies) == 2


def test_an_answer_with_more_json_values_than_its_budget_allows_is_refused_unparsed():
    # max_completion_tokens 1,000: at most max(10,000, 4 * 1,000) values.
    flood = "[" + "{}," * MIN_ANSWER_VALUES + "{}]"
    out = run_row([answer(flood)], max_completion_tokens=1_000)
    assert out.result.error.startswith("ValidationFailedError: the answer holds more than 10,000")
    assert len(out.bodies) == 1  # not asked again either
    inside_strings = json.dumps({"sentiment": "positive", "aspects": ["{}," * 20_000]})
    assert json_values(inside_strings, 10_000) == 3  # what strings hold does not count


def test_a_response_with_more_json_values_than_the_cap_is_refused_before_parsing():
    # The values sit outside the message (a field of the body): refused before json builds them.
    body = json.loads(answer().body)
    body["junk"] = [{}] * (MAX_RESPONSE_VALUES + 1)
    flood = HttpReply(200, CIMultiDict(), json.dumps(body).encode())
    tracemalloc.start()
    try:
        out = run_row([flood], connection=Connection(max_retries=3))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.result.error.startswith("ResponseTooLargeError: 200: the response holds more")
    assert len(out.bodies) == 1  # not retried
    # Parsed, 100,001 dicts would take over 6 MB; refused, the peak stays near the body's copy.
    assert peak < 3 * len(flood.body), peak


def test_a_stream_event_with_more_json_values_than_the_cap_is_refused_before_parsing():
    from kimi_extract.http.wire import StreamAssembler, TooManyValues

    assembler = StreamAssembler()
    with pytest.raises(TooManyValues):
        assembler.feed_line("data: " + json.dumps({"junk": [[]] * (MAX_RESPONSE_VALUES + 1)}))


def test_a_prompt_beyond_the_context_window_is_not_sent():
    out = run_row([], context_window=5)
    assert out.result.error.startswith("ContextOverflowError") and out.bodies == []


# -- the store -----------------------------------------------------------------------------------


@dataclass
class StoredRow:
    output: str
    usage: Usage
    attempts: int
    web_searches: int


class MemoryStore:
    def __init__(self) -> None:
        self.rows: dict[str, StoredRow] = {}

    async def lookup(self, key: str) -> StoredRow | None:
        return self.rows.get(key)

    async def commit(
        self,
        key: str,
        *,
        model: str,
        output: str,
        usage: Usage,
        attempts: int,
        web_searches: int = 0,
        replace: bool = False,
    ) -> None:
        # The store's rule: a key keeps its first row unless the answer replaces a stale one.
        if replace or key not in self.rows:
            self.rows[key] = StoredRow(output, usage, attempts, web_searches)


def test_a_stored_row_is_served_without_a_request_and_a_fresh_one_is_committed():
    store = MemoryStore()
    first = run_row([answer()], store=store)
    assert first.result.ok and not first.result.from_store and len(store.rows) == 1
    [stored] = store.rows.values()
    assert stored.output == GOOD and stored.attempts == 1
    again = run_row([], store=store)
    assert again.result.from_store and again.result.value == first.result.value
    assert again.bodies == [] and again.result.saved.prompt_tokens == 100


def test_a_stored_answer_the_model_no_longer_accepts_is_asked_again():
    store = MemoryStore()
    run_row([answer()], store=store)
    for row in store.rows.values():
        row.output = '{"sentiment": "meh", "aspects": []}'
    out = run_row([answer()], store=store)
    assert out.result.ok and not out.result.from_store and len(out.bodies) == 1


# -- the budget ----------------------------------------------------------------------------------


def test_a_request_that_cannot_fit_the_budget_is_never_sent():
    out = run_row([], budget=RunBudget(max_cost=None, max_total_tokens=500))
    assert out.result.error.startswith("budget: this row's next request may bill up to")
    assert out.bodies == [] and not out.runner.budget_hit


def test_the_budget_refuses_the_next_row_once_spent():
    # Worst case per request: ~10 prompt tokens * 1.1 + 1000 completion; the cap pays for one.
    budget = RunBudget(max_cost=None, max_total_tokens=1_100)
    first, second = run_rows([answer(prompt=10, completion=1000)], rows=2, budget=budget)
    assert first.result.ok and budget.spent_tokens == 1010
    assert second.result.error == "budget" and second.runner.budget_hit
    assert len(second.bodies) == 1  # the second row sent nothing


def test_a_retry_after_an_unknown_outcome_is_charged_its_worst_case_and_refused_when_over():
    # A timeout may have been billed: its worst case counts, and the retry no longer fits.
    budget = RunBudget(max_cost=None, max_total_tokens=1_100)
    out = run_row([kx.APITimeoutError("slow")], budget=budget, max_completion_tokens=1000)
    assert out.result.error == "budget" and len(out.bodies) == 1
    assert budget.spent_tokens >= 1000 and budget.reserved_tokens == 0


def test_the_budget_prices_billed_usage():
    pricing = Pricing(input=1.0, output=2.0, cached_input=0.5, cache_write=1.0)
    budget = RunBudget(max_cost=0.01, max_total_tokens=None, pricing=pricing)
    out = run_row([answer(prompt=1000, completion=500)], budget=budget, pricing=pricing)
    assert out.result.ok
    assert budget.spent_cost == pytest.approx((1000 * 1.0 + 500 * 2.0) / 1e6)
    assert out.result.usage.cost == pytest.approx(budget.spent_cost)


# -- errors: run-level, retried, waits -----------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind", "exception"),
    [
        (401, "invalid_authentication_error", kx.AuthenticationError),
        (403, "permission_denied_error", kx.PermissionDeniedError),
        (404, "resource_not_found_error", kx.NotFoundError),
        (429, "exceeded_current_quota_error", kx.QuotaExceededError),
    ],
)
def test_run_level_errors_are_sent_once_and_stop_the_run(status, kind, exception):
    out = run_row([error(status, kind)])
    assert isinstance(out.runner.fatal, exception) and len(out.bodies) == 1
    assert out.result.error.startswith(exception.__name__) and out.sleeps == []


def test_the_same_400_for_the_first_rows_stops_the_run_a_different_one_does_not():
    same = [error(400, "invalid_request_error", "bad model")] * 3
    outcomes = run_rows(same, rows=3)
    assert [o.fatal is not None for o in outcomes] == [False, False, True]
    assert all(o.result.error.startswith("BadRequestError") for o in outcomes)
    varied = [error(400, "invalid_request_error", f"bad row {i}") for i in range(3)]
    assert run_rows(varied, rows=3)[-1].fatal is None


@pytest.mark.parametrize(
    ("headers", "message", "wait"),
    [
        ({"retry-after-ms": "1500"}, "slow down", 1.5),
        ({"Retry-After": "7"}, "slow down", 7.0),
        ({}, "Engine overloaded, please try again after 3 seconds", 3.0),
        ({}, "please try again after 250 ms", 0.25),
    ],
)
def test_a_429_waits_exactly_what_the_server_said(headers, message, wait):
    out = run_row([error(429, "rate_limit_reached_error", message, headers), answer()])
    assert out.result.ok and len(out.bodies) == 2 and out.result.attempts == 1
    assert out.sleeps == [pytest.approx(wait)]


def test_a_429_asking_longer_than_max_wait_fails_the_row_without_a_retry():
    out = run_row(
        [error(429, "rate_limit_reached_error", "busy", {"Retry-After": "120"})],
        connection=Connection(max_retry_wait=60.0),
    )
    assert out.result.error.startswith("RateLimitError") and out.sleeps == []
    assert out.runner.fatal is None


def test_server_errors_back_off_with_full_jitter_up_to_max_retries():
    replies = [error(503, "server_error", "down")] * 4
    out = run_row(replies, connection=Connection(max_retries=3, max_retry_wait=60.0))
    assert out.result.error.startswith("ServerError") and len(out.bodies) == 4
    assert len(out.sleeps) == 3
    for n, slept in enumerate(out.sleeps):
        assert 0.0 <= slept <= 0.5 * 2 ** (n + 1)


def test_a_limit_named_in_a_429_paces_the_retry_on_the_same_clock():
    # Kimi's 429 names the RPM it hit: the limiter adopts it, and the retry goes a burst's worth
    # of that pace later (3 per minute: two 20 s intervals), on the transport's clock.
    message = "max RPM: 3, please try again after 1 seconds"
    out = run_row([error(429, "rate_limit_reached_error", message), answer()], limiter=True)
    gate = out.runner.transport.gate
    assert out.result.ok and len(out.bodies) == 2
    assert isinstance(gate, Limiter) and gate.rpm == 3 and gate.binding() == "RPM 3 (learned)"
    assert sum(out.sleeps) >= 40 * 0.99


def test_connection_errors_are_retried_and_the_key_never_reaches_the_rows_error():
    replies: list[HttpReply | BaseException] = [kx.APIConnectionError(f"reset by {KEY}")] * 9
    out = run_row(replies, connection=Connection(max_retries=8))
    assert out.result.error.startswith("APIConnectionError") and len(out.bodies) == 9
    assert KEY not in out.result.error and KEY[:8] not in out.result.error


# -- an endpoint no attempt reaches --------------------------------------------------------------


def refused() -> kx.APIConnectionError:
    """What a backend raises when the port is closed."""
    error = kx.APIConnectionError("connection failed: ClientConnectorError: refused")
    error.connect_failure = "connection refused"
    return error


class Unreachable(ScriptedBackend):
    """Every POST fails to connect (after ``answers`` good answers)."""

    def __init__(self, answers: int = 0) -> None:
        super().__init__([answer() for _ in range(answers)], base_url=None)

    async def post(self, url: str, payload: bytes) -> HttpReply:
        if self.remaining:
            return await super().post(url, payload)
        self.requests.append(json.loads(payload))
        raise refused()


def run_unreachable(backend: Unreachable, rows: int, timeout: float = 30.0) -> tuple[Any, ...]:
    random.seed(20)  # the backoff's jitter: the same waits every run
    clock = VirtualClock(start=1000.0)
    start = clock.time

    async def main() -> tuple[Any, ...]:
        transport = Transport(
            base_url="http://127.0.0.1:9",
            api_key=Secret(KEY),
            concurrency=1,
            connection=Connection(timeout=timeout, max_retries=8),
            clock=clock,
            backend=backend,
        )
        runner = RowRunner(settings(), transport)
        async with transport:
            results = []
            for position in range(rows):
                row = RowInput(label=position, position=position, content=f"review {position}")
                results.append(await runner.process(row))
        return results, runner.fatal, transport

    results, fatal, transport = asyncio.run(main())
    return results, fatal, transport, clock.time - start


def test_a_run_that_never_connects_stops_within_the_window_on_the_clock():
    backend = Unreachable()
    results, fatal, transport, elapsed = run_unreachable(backend, rows=1)
    # The row gave up before its 9 attempts: the next retry would have started past the window.
    assert results[0].error.startswith("APIConnectionError") and len(backend.requests) < 9
    assert elapsed < UNREACHABLE_AFTER + 30.0  # within the window plus one attempt's timeout
    assert isinstance(fatal, kx.APIConnectionError) and fatal is transport.unreachable
    assert str(fatal).startswith(
        "cannot reach http://127.0.0.1:9/v1/chat/completions: connection refused; no attempt of "
    )
    assert transport.connection_retries == len(backend.requests) - 1


def test_connection_failures_after_a_success_are_retried_as_before():
    backend = Unreachable(answers=1)
    results, fatal, transport, _ = run_unreachable(backend, rows=2)
    assert results[0].ok and results[1].error.startswith("APIConnectionError")
    assert len(backend.requests) == 1 + 9  # every retry of the second row was made
    assert fatal is None and transport.unreachable is None
