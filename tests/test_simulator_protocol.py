"""The simulator's protocol: SSE streaming, function tools, web search, and the openai SDK."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from kimi_extract import tokens
from kimi_extract.simulator import Simulator
from kimi_extract.simulator.validation import component_schema

KEY = "sk-sim-test"
CLIENT = httpx.Client(timeout=10, limits=httpx.Limits(max_keepalive_connections=0))
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "score": {"type": "integer"}},
    "required": ["answer", "score"],
    "additionalProperties": False,
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module", autouse=True)
def _close_client() -> Iterator[None]:
    yield
    CLIENT.close()


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator(api_key=KEY) as server:
        yield server


def body_for(
    text: str = "Summarize: the river flooded the old town twice this spring.", **extra: Any
) -> dict[str, Any]:
    return {
        "model": "kimi-k3.1-pro",
        "messages": [{"role": "user", "content": text}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}},
        "reasoning_effort": "low",
        **extra,
    }


def post(sim: Simulator, body: dict[str, Any]) -> httpx.Response:
    return CLIENT.post(
        sim.base_url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}
    )


def events_of(sim: Simulator, body: dict[str, Any]) -> list[Any]:
    response = post(sim, {**body, "stream": True})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    lines = [line for line in response.text.split("\n") if line]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line[6:]) for line in lines[:-1]]


# -- streaming --------------------------------------------------------------------------------


def test_stream_chunk_order_and_usage_in_the_final_chunk(sim: Simulator) -> None:
    plain = post(sim, body_for()).json()
    chunks = events_of(sim, body_for())
    assert all(
        c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks
    )
    kinds = []
    for c in chunks[:-1]:
        delta = c["choices"][0]["delta"]
        kinds.append(
            "role"
            if "role" in delta
            else "reasoning"
            if "reasoning_content" in delta
            else "content"
        )
        assert c["choices"][0]["finish_reason"] is None and "usage" not in c
    assert kinds[0] == "role" and kinds.count("role") == 1
    assert kinds == ["role"] + ["reasoning"] * kinds.count("reasoning") + ["content"] * kinds.count(
        "content"
    )
    assert kinds.count("reasoning") >= 2
    final = chunks[-1]
    assert final["choices"][0]["finish_reason"] == "stop"
    assert final["usage"] == final["choices"][0]["usage"] == plain["usage"]
    jsonschema.validate(final["usage"], component_schema("ChatUsage"))
    reasoning = "".join(c["choices"][0]["delta"].get("reasoning_content", "") for c in chunks)
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    message = plain["choices"][0]["message"]
    assert (reasoning, content) == (message["reasoning_content"], message["content"])
    exchange = sim.history[-1]
    assert exchange.stream and exchange.usage == plain["usage"]
    assert exchange.response is not None
    assert exchange.response["choices"][0]["message"] == message


@pytest.mark.parametrize("include_usage", [True, False])
def test_stream_usage_separate_chunk(include_usage: bool) -> None:
    with Simulator(api_key=KEY, stream_usage="separate") as sim:
        body = body_for(stream_options={"include_usage": include_usage})
        chunks = events_of(sim, body)
        finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
        assert len(finals) == 1 and "usage" not in finals[0]
        assert "usage" not in finals[0]["choices"][0]
        if include_usage:
            assert chunks[-1]["choices"] == [] and chunks[-2] is finals[0]
            assert chunks[-1]["usage"] == sim.history[0].usage
        else:
            assert chunks[-1] is finals[0]
        assert sim.history[0].usage is not None  # billed either way


# -- function tools ------------------------------------------------------------------------------


def test_function_tool_call_when_the_prompt_asks(sim: Simulator) -> None:
    body = body_for("Please call get_weather for Oslo.", tools=[WEATHER_TOOL])
    data = post(sim, body).json()
    choice = data["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] == "" and message["reasoning_content"]
    (call,) = message["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    jsonschema.validate(
        json.loads(call["function"]["arguments"]), WEATHER_TOOL["function"]["parameters"]
    )  # type: ignore[index]
    usage = data["usage"]
    assert usage["completion_tokens"] == (
        tokens.count_text_tokens(message["reasoning_content"])
        + tokens.count_text_tokens("get_weather")
        + tokens.count_text_tokens(call["function"]["arguments"])
    )
    follow = body_for("Please call get_weather for Oslo.", tools=[WEATHER_TOOL])
    follow["messages"] += [
        message,
        {"role": "tool", "tool_call_id": call["id"], "content": '{"forecast": "rain"}'},
    ]
    answer = post(sim, follow).json()["choices"][0]
    assert answer["finish_reason"] == "stop"
    jsonschema.validate(json.loads(answer["message"]["content"]), SCHEMA)


def test_tool_choice_policy(sim: Simulator) -> None:
    """auto: a call when the user spoke last (the named function, else the first), content after
    a tool result; required: always a call; a named function: that one; none: never."""
    other = {
        "type": "function",
        "function": {
            "name": "lookup_time",
            "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}},
        },
    }

    def called(response: httpx.Response) -> str | None:
        assert response.status_code == 200, response.text
        choice = response.json()["choices"][0]
        calls = choice["message"].get("tool_calls")
        assert (choice["finish_reason"] == "tool_calls") == bool(calls)
        return calls[0]["function"]["name"] if calls else None

    # the seed's own example names no function: auto still calls the first one
    seed = body_for("Check today's weather in Beijing.", tools=[WEATHER_TOOL], tool_choice="auto")
    first = post(sim, seed)
    assert called(first) == "get_weather"
    both = [WEATHER_TOOL, other]
    assert called(post(sim, body_for("How are you?", tools=both))) == "get_weather"
    assert called(post(sim, body_for("What is the lookup time?", tools=both))) == "lookup_time"
    assert called(post(sim, body_for("Please call lookup_time now", tools=both))) == "lookup_time"
    message = first.json()["choices"][0]["message"]
    result = {
        "role": "tool",
        "tool_call_id": message["tool_calls"][0]["id"],
        "content": '{"forecast": "rain"}',
    }
    after = {**seed, "messages": seed["messages"] + [message, result]}
    assert called(post(sim, after)) is None
    assert called(post(sim, {**after, "tool_choice": "required"})) == "get_weather"
    named = {"type": "function", "function": {"name": "lookup_time"}}
    assert called(post(sim, {**after, "tools": [WEATHER_TOOL, other], "tool_choice": named})) == (
        "lookup_time"
    )
    off = body_for("call get_weather", tools=[WEATHER_TOOL], tool_choice="none")
    assert called(post(sim, off)) is None
    search_and_function = body_for("Hi", tools=[{"type": "web_search"}, WEATHER_TOOL])
    assert called(post(sim, search_and_function)) == "$web_search"
    weather = {"type": "function", "function": {"name": "get_weather"}}
    assert called(post(sim, {**search_and_function, "tool_choice": weather})) == "get_weather"


def test_bad_tools_are_400(sim: Simulator) -> None:
    bad_name = {
        "type": "function",
        "function": {"name": "9lives", "parameters": {"type": "object", "properties": {}}},
    }
    assert post(sim, body_for(tools=[bad_name])).status_code == 400
    bad_params = {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {"type": "object", "anyOf": [{"properties": {}}]},
        },
    }
    response = post(sim, body_for(tools=[bad_params]))
    assert response.status_code == 400
    assert (
        "tools.function.parameters is not a valid moonshot flavored json schema"
        in (response.json()["error"]["message"])
    )


def test_missing_reasoning_content_and_unknown_tool_call_id_are_400(sim: Simulator) -> None:
    first = post(sim, body_for("Please call get_weather for Oslo.", tools=[WEATHER_TOOL])).json()
    message = dict(first["choices"][0]["message"])
    call_id = message["tool_calls"][0]["id"]
    tool = {"role": "tool", "tool_call_id": call_id, "content": "sunny"}

    def follow(assistant: dict[str, Any], tool_message: dict[str, Any]) -> httpx.Response:
        body = body_for("Please call get_weather for Oslo.", tools=[WEATHER_TOOL])
        body["messages"] += [assistant, tool_message]
        return post(sim, body)

    stripped = {k: v for k, v in message.items() if k != "reasoning_content"}
    missing = follow(stripped, tool)
    assert missing.status_code == 400
    assert missing.json()["error"] == {
        "message": "Invalid request: thinking is enabled but reasoning_content is missing in "
        "assistant tool call message at index 1",
        "type": "invalid_request_error",
        "code": None,
    }
    assert follow({**message, "reasoning_content": ""}, tool).status_code == 200
    unknown = follow(message, {**tool, "tool_call_id": "call_nope"})
    assert unknown.status_code == 400 and "call_nope" in unknown.json()["error"]["message"]


# -- web search -----------------------------------------------------------------------------------


def test_web_search_round_trip_bills_the_results(sim: Simulator) -> None:
    body = body_for("Find the official Kimi homepage.", tools=[{"type": "web_search"}])
    first = post(sim, body).json()
    choice = first["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] == "" and message["reasoning_content"]
    (call,) = message["tool_calls"]
    assert call["type"] == "builtin_function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "$web_search"
    arguments = json.loads(call["function"]["arguments"])
    assert set(arguments) == {"search_result", "usage"}
    assert arguments["search_result"]["search_id"]
    search_tokens = arguments["usage"]["total_tokens"]
    assert search_tokens > 0
    tool = {
        "role": "tool",
        "tool_call_id": call["id"],
        "name": "$web_search",
        "content": call["function"]["arguments"],
    }
    second_body = {**body, "messages": body["messages"] + [message, tool]}
    second = post(sim, second_body).json()
    assert second["choices"][0]["finish_reason"] == "stop"
    jsonschema.validate(json.loads(second["choices"][0]["message"]["content"]), SCHEMA)
    added = (
        tokens.MESSAGE_OVERHEAD
        + tokens.count_text_tokens(message["reasoning_content"])
        + tokens.count_text_tokens(json.dumps(message["tool_calls"], separators=(",", ":")))
        + tokens.MESSAGE_OVERHEAD
        + tokens.count_text_tokens(tool["content"])
    )
    assert second["usage"]["prompt_tokens"] == first["usage"]["prompt_tokens"] + added + (
        search_tokens
    )
    garbled = {**tool, "content": "I searched and found nothing"}
    response = post(sim, {**body, "messages": body["messages"] + [message, garbled]})
    assert response.status_code == 400


# -- the official openai SDK -------------------------------------------------------------------


def test_openai_sdk_plain_stream_and_tool_calls(sim: Simulator) -> None:
    client = openai.OpenAI(base_url=sim.openai_base_url, api_key=KEY, max_retries=0)
    body = body_for()
    result = client.chat.completions.create(**body)
    message = result.choices[0].message
    jsonschema.validate(json.loads(message.content or ""), SCHEMA)
    assert (message.model_extra or {})["reasoning_content"]
    assert result.usage is not None and result.usage.prompt_tokens_details is not None
    assert result.usage.prompt_tokens_details.cached_tokens == 0

    content, usage = "", None
    for part in client.chat.completions.create(
        **body, stream=True, stream_options={"include_usage": True}
    ):
        if part.choices and part.choices[0].delta.content:
            content += part.choices[0].delta.content
        usage = part.usage or usage
    assert content == message.content
    assert usage is not None and usage.total_tokens == result.usage.total_tokens

    called = client.chat.completions.create(
        **body_for("Use get_weather for Lima", tools=[WEATHER_TOOL])
    )
    tool_calls = called.choices[0].message.tool_calls
    assert called.choices[0].finish_reason == "tool_calls" and tool_calls
    assert tool_calls[0].function.name == "get_weather"
    client.close()


async def test_openai_async_sdk_web_search_round_trip(sim: Simulator) -> None:
    client = openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key=KEY, max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Search the Kimi homepage."}]
    # Kimi's own tool type and message fields are outside the SDK's typed params: pass as Any.
    request: dict[str, Any] = {
        "model": "kimi-k3.1-pro",
        "messages": messages,
        "tools": [{"type": "web_search"}],
        "reasoning_effort": "low",
    }
    first = await client.chat.completions.create(**request)
    assert first.choices[0].finish_reason == "tool_calls"
    assistant = first.choices[0].message.model_dump(exclude_none=True, warnings=False)
    messages.append(assistant)
    for call in assistant["tool_calls"]:
        messages.append(
            {
                "role": "tool",
                "tool_call_id": call["id"],
                "name": "$web_search",
                "content": call["function"]["arguments"],
            }
        )
    final = await client.chat.completions.create(**request, stream=True)
    finish = None
    async for part in final:
        if part.choices and part.choices[0].finish_reason:
            finish = part.choices[0].finish_reason
    assert finish == "stop"
    assert [h.status for h in sim.history] == [200, 200]
    await client.close()
