"""The simulator's protocol: SSE streaming, function tools, web search, json_object mode, the
openai SDK, and malformed requests (always an error in the API's shape, never a 500)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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

    # the reference's own example names no function: auto still calls the first one
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


# -- json_object mode ----------------------------------------------------------------------------

REVIEW = {
    "title": "Review",
    "type": "object",
    "properties": {
        "title": {"title": "Title", "type": "string"},
        "rating": {"title": "Rating", "type": "integer", "minimum": 1, "maximum": 5, "default": 3},
        "tags": {"type": "array", "items": {"type": "string"}, "default": []},
        "verdict": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
    },
    "required": ["title"],
}


def json_object_answer(sim: Simulator, messages: list[dict[str, Any]]) -> Any:
    body = {
        "model": "kimi-k3.1-pro",
        "messages": messages,
        "response_format": {"type": "json_object"},
        "reasoning_effort": "low",
    }
    response = post(sim, body)
    assert response.status_code == 200, response.text
    return json.loads(response.json()["choices"][0]["message"]["content"])


@pytest.mark.parametrize(
    "place",
    ["system-unfenced", "system-compact", "user-unfenced", "user-fenced-after-example"],
)
def test_json_object_follows_a_schema_stated_anywhere(sim: Simulator, place: str) -> None:
    review = "Review: the blender is loud but crushes ice well."
    indented = json.dumps(REVIEW, indent=2)
    if place == "system-unfenced":  # how instructor's Mode.JSON states it
        system = (
            "Provide the parsed objects in json that match the following json_schema:\n\n"
            f"{indented}\n\nMake sure to return an instance of the JSON, not the schema itself"
        )
        messages = [{"role": "system", "content": system}, {"role": "user", "content": review}]
    elif place == "system-compact":  # how pydantic-ai's PromptedOutput states it
        system = (
            "Always respond with a JSON object that's compatible with this schema:\n\n"
            f"{json.dumps(REVIEW)}\n\nDon't include any text or Markdown fencing before or after."
        )
        messages = [{"role": "system", "content": system}, {"role": "user", "content": review}]
    elif place == "user-unfenced":
        messages = [{"role": "user", "content": f"{review}\nAnswer in this schema: {indented}"}]
    else:  # an example object first, the schema later, fenced: the schema wins
        text = f'Like {{"title": "x", "other": 1}} but per\n```json\n{indented}\n```\n{review}'
        messages = [{"role": "user", "content": text}]
    for _ in range(3):
        value = json_object_answer(sim, messages)
        jsonschema.validate(value, REVIEW)
        assert set(value) == set(REVIEW["properties"])  # type: ignore[arg-type]
        messages = messages + [{"role": "assistant", "content": json.dumps(value)}]
        messages.append({"role": "user", "content": review + " Another one."})


def test_json_object_imitates_an_example_when_no_schema_is_stated(sim: Simulator) -> None:
    """langextract's prompt: a description, Q/A examples with JSON answers, then the question."""
    example = {
        "extractions": [
            {"character": "Romeo", "character_attributes": {"mood": "wistful"}},
            {"emotion": "But soft!", "emotion_attributes": {"feeling": "awe"}},
        ]
    }
    prompt = (
        "Extract characters and emotions in order of appearance.\n\nExamples\n"
        "Q: But soft! What light through yonder window breaks?\n"
        f"A: ```json\n{json.dumps(example, indent=2)}\n```\n\n"
        "Q: Lady Juliet gazed longingly at the stars, her heart aching for Romeo\nA: "
    )
    value = json_object_answer(sim, [{"role": "user", "content": prompt}])
    assert set(value) == {"extractions"} and 1 <= len(value["extractions"]) <= 3
    shapes = [set(item) for item in example["extractions"]]
    for item in value["extractions"]:
        assert set(item) in shapes
        text_key = next(key for key in item if not key.endswith("_attributes"))
        assert isinstance(item[text_key], str) and item[text_key]
        assert isinstance(item[text_key + "_attributes"], dict)
    plain = json_object_answer(sim, [{"role": "user", "content": "Hello there"}])
    assert set(plain) == {"answer"}


# -- malformed requests --------------------------------------------------------------------------

ERROR_STATUSES = {400, 401, 404, 413, 422, 429}
VALID: dict[str, Any] = {
    "model": "kimi-k3.1-pro",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Summarize the river flooding."},
    ],
    "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}},
    "tools": [WEATHER_TOOL],
    "reasoning_effort": "low",
    "max_completion_tokens": 2000,
}
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=16,
)
#: Places in a valid body where a wrong value does the most harm.
_PATHS = [
    ("model",),
    ("messages",),
    ("messages", 1),
    ("messages", 1, "content"),
    ("messages", 1, "role"),
    ("response_format",),
    ("response_format", "type"),
    ("response_format", "json_schema", "schema"),
    ("response_format", "json_schema", "schema", "properties", "answer"),
    ("response_format", "json_schema", "schema", "required"),
    ("tools",),
    ("tools", 0, "function", "parameters"),
    ("tools", 0, "function", "parameters", "properties", "city"),
    ("tool_choice",),
    ("max_completion_tokens",),
    ("reasoning_effort",),
    ("stream_options",),
    ("prompt_cache_options",),
]


def _deep(depth: int) -> bytes:
    """A valid body whose response_format schema nests ``depth`` objects (built as text: the json
    module cannot encode it)."""
    schema = '{"type": "string"}'
    for _ in range(depth):
        schema = '{"type": "object", "properties": {"a": ' + schema + '}, "required": ["a"]}'
    response_format = '{"type": "json_schema", "json_schema": {"name": "s", "schema": %s}}'
    body = json.dumps({**VALID, "response_format": None})
    return body.replace("null", response_format % schema).encode()


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    body: Any = json.loads(json.dumps(VALID))
    path = draw(st.sampled_from(_PATHS))
    node = body
    for step in path[:-1]:
        node = node[step]
    if draw(st.booleans()) and isinstance(node, dict):
        node.pop(path[-1], None)
    else:
        node[path[-1]] = draw(_json)
    if draw(st.booleans()):
        body[draw(st.text(max_size=6))] = draw(_json)
    return json.dumps(body).encode()


#: A lone surrogate written straight into the UTF-8 bytes (not as a \\u escape).
_RAW_SURROGATE = '{"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "\ud800"}]}'
_RAW_SURROGATE_BYTES = _RAW_SURROGATE.encode("utf-8", "surrogatepass")
#: Malformed bodies that must each be a 400 (several once got a plain-text 500, or a 200).
_SPECIAL = [
    b"",
    b"{",
    b"[" * 5000 + b"]" * 5000,
    b'{"model": NaN}',
    b'{"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "\\ud800"}]}',
    b"\xff\xfe{}",
    _RAW_SURROGATE_BYTES,
    _deep(3000),
]
_REQUESTS = st.one_of(
    _mutated(),  # twice: most requests should get past the JSON parse
    _mutated(),
    _json.map(lambda value: json.dumps(value).encode()),
    st.binary(max_size=40),
    st.sampled_from(_SPECIAL),
)


def test_malformed_requests_get_an_api_error_never_a_500() -> None:
    with Simulator(api_key=KEY) as sim, httpx.Client(timeout=10) as client:
        url = sim.base_url + "/v1/chat/completions"
        error_schema = component_schema("ErrorResponse")

        @settings(max_examples=250, deadline=None, database=None)
        @given(raw=_REQUESTS, authorized=st.sampled_from([True, True, True, False]))
        def check(raw: bytes, authorized: bool) -> None:
            headers = {"Authorization": f"Bearer {KEY}"} if authorized else {}
            response = client.post(url, content=raw, headers=headers)
            if response.status_code == 200:  # a mutation that kept the body valid
                assert raw.startswith(b"{")
            else:
                assert response.status_code in ERROR_STATUSES, response.text
                assert response.headers["content-type"].startswith("application/json")
                data = response.json()
                jsonschema.validate(data, error_schema)
                assert set(data["error"]) == {"message", "type", "code"}
                assert data["error"]["type"].endswith("_error")
            assert sim.stats()["in_flight"] == 0

        check()
        assert CLIENT.get(sim.base_url + "/stats").json()["in_flight"] == 0
        statuses = {h.status for h in sim.history}
        assert 400 in statuses and 401 in statuses and 500 not in statuses


@pytest.mark.parametrize("raw", _SPECIAL, ids=range(len(_SPECIAL)))
def test_each_known_malformed_body_is_a_400_and_leaves_nothing_in_flight(
    sim: Simulator, raw: bytes
) -> None:
    """Among them a schema nested 3,000 levels deep (once a plain-text 500 from a RecursionError
    that also left the request counted in flight forever)."""
    response = CLIENT.post(
        sim.base_url + "/v1/chat/completions",
        content=raw,
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert CLIENT.get(sim.base_url + "/stats").json()["in_flight"] == 0
