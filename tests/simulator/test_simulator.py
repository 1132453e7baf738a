"""The local Kimi simulator: auth, validation, Kimi's rules, answers, usage, history, responder.

Everything is asserted through HTTP (httpx) and ``sim.history``. Cache, limits/faults and
streaming/tools live in tests/simulator/test_simulator_{cache,limits,protocol}.py.
"""

from __future__ import annotations

import base64
import json
import re
import signal
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import date, datetime
from datetime import time as dtime
from typing import Any

import httpx
import jsonschema
import pytest

from kimi_extract import tokens
from kimi_extract.simulator import Reply, SimExchange, SimRequest, Simulator
from kimi_extract.simulator.prompt import count_tokens, image_size
from kimi_extract.simulator.validation import component_schema, fast_path_agrees

from ..conftest import INTERRUPTIBLE

KEY = "sk-sim-test"

REVIEW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "sentiment": {"type": "string", "enum": ["positive", "negative", "neutral"]},
        "aspects": {"type": "array", "items": {"type": "string"}},
        "rating": {"type": "integer"},
        "price": {"anyOf": [{"type": "number"}, {"type": "null"}]},
        "verified": {"type": "boolean"},
    },
    "required": ["sentiment", "aspects", "rating", "price", "verified"],
    "additionalProperties": False,
}


def body_for(
    text: str = "The battery lasts two days and the screen is bright.",
    schema: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "kimi-k3.1-pro",
        "messages": [
            {"role": "system", "content": "Extract the review."},
            {"role": "user", "content": text},
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "review", "strict": True, "schema": schema or REVIEW_SCHEMA},
        },
        "reasoning_effort": "low",
        "max_completion_tokens": 4096,
    }
    body.update(extra)
    return body


#: One client for the module (building an httpx client per request costs ~50 ms); no keep-alive,
#: so a simulator started later on a recycled port never gets a stale pooled connection.
CLIENT = httpx.Client(timeout=10, limits=httpx.Limits(max_keepalive_connections=0))


@pytest.fixture(scope="module", autouse=True)
def _close_client() -> Iterator[None]:
    yield
    CLIENT.close()


def post(
    sim: Simulator,
    body: Any,
    *,
    key: str | None = KEY,
    path: str = "/v1/chat/completions",
    content: bytes | None = None,
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    if content is not None:
        return CLIENT.post(sim.base_url + path, content=content, headers=headers)
    return CLIENT.post(sim.base_url + path, json=body, headers=headers)


def error_of(response: httpx.Response) -> dict[str, Any]:
    data = response.json()
    jsonschema.validate(data, component_schema("ErrorResponse"))
    assert set(data) == {"error"} and data["error"]["code"] is None
    return data["error"]


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator(api_key=KEY) as server:
        yield server


# -- auth, routes, validation --------------------------------------------------------------------


@pytest.mark.parametrize("key", [None, "sk-wrong"])
def test_missing_or_wrong_key_is_401(sim: Simulator, key: str | None) -> None:
    response = post(sim, body_for(), key=key)
    assert response.status_code == 401
    assert error_of(response)["type"] == "invalid_authentication_error"
    (exchange,) = sim.history
    assert exchange.status == 401 and exchange.error_type == "invalid_authentication_error"
    assert "authorization" not in {name.lower() for name in exchange.headers}


def test_routes_alias_models_stats_and_unknown_path(sim: Simulator) -> None:
    assert post(sim, body_for(), path="/chat/completions").status_code == 200
    models = CLIENT.get(sim.base_url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    assert [m["id"] for m in models.json()["data"]] == [
        "kimi-k3.1-pro",
        "kimi-k3.1-pro-highspeed",
        "kimi-k3",
    ]
    missing = post(sim, body_for(), path="/v1/completions")
    assert missing.status_code == 404 and error_of(missing)["type"] == "resource_not_found_error"
    stats = CLIENT.get(sim.base_url + "/stats").json()
    assert stats["by_status"] == {"200": 2, "404": 1}
    assert [h.path for h in sim.history] == [
        "/chat/completions",
        "/v1/models",
        "/v1/completions",
        "/stats",
    ]


@pytest.mark.parametrize(
    ("change", "path_text"),
    [
        ({"messages": [{"role": "bot", "content": "hi"}]}, "$.messages[0].role"),
        ({"max_completion_tokens": 0}, "$.max_completion_tokens"),
        ({"messages": []}, "$.messages"),
        ({"reasoning_effort": "extreme"}, "$.reasoning_effort"),
        ({"tools": [{"type": "function", "function": {"name": "get_x"}}]}, "$.tools[0]"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
            "$.response_format.json_schema",
        ),
    ],
)
def test_schema_invalid_body_is_400_naming_the_path(
    sim: Simulator, change: dict[str, Any], path_text: str
) -> None:
    response = post(sim, body_for(**change))
    assert response.status_code == 400
    error = error_of(response)
    assert error["type"] == "invalid_request_error"
    assert path_text in error["message"]
    assert sim.history[0].status == 400 and sim.history[0].usage is None


def test_missing_model_and_malformed_json_are_400(sim: Simulator) -> None:
    body = body_for()
    del body["model"]
    response = post(sim, body)
    assert (
        response.status_code == 400
        and "'model' is a required property" in error_of(response)["message"]
    )
    broken = post(sim, None, content=b'{"model": "kimi-k3.1-pro", "messages": [')
    assert broken.status_code == 400 and error_of(broken)["type"] == "invalid_request_error"
    assert sim.history[1].body is None


def test_unknown_model_is_404(sim: Simulator) -> None:
    response = post(sim, body_for(model="kimi-k9"))
    assert response.status_code == 404
    error = error_of(response)
    assert error["type"] == "resource_not_found_error" and "kimi-k9" in error["message"]


def test_fast_validation_path_agrees_with_the_full_validator() -> None:
    base = body_for()
    variants: list[Any] = [
        base,
        {},
        [],
        {"model": "kimi-k3", "messages": "hi"},
        {**base, "max_completion_tokens": 1.0},
        {**base, "max_completion_tokens": True},
        {**base, "temperature": "1"},
        {**base, "stream": 1},
        {**base, "tools": []},
        {**base, "tools": [{"type": "web_search"}]},
        {**base, "tools": [{"type": "web_search", "function": {}}]},
        {**base, "tool_choice": {"type": "function", "function": {"name": "f"}}},
        {**base, "tool_choice": "sometimes"},
        {
            **base,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "a"},
                        {"type": "image_url", "image_url": "http://x/y.png"},
                    ],
                }
            ],
        },
        {
            **base,
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"uri": "x"}}]}
            ],
        },
        {
            **base,
            "messages": [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c", "type": "builtin_function", "function": {"name": "$web_search"}}
                    ],
                }
            ],
        },
        {**base, "messages": [{"role": "user", "content": 5}]},
        {**base, "prompt_cache_options": {"ttl": "2h"}},
        {**base, "max_tokens": 1048577},
    ]
    for variant in variants:
        assert fast_path_agrees(variant), variant


# -- Kimi's rules ---------------------------------------------------------------------------------


def test_schema_outside_the_dialect_is_400_with_walles_message(sim: Simulator) -> None:
    # walle.md "Structural errors": type beside anyOf is rejected at every level.
    schema = {
        "type": "object",
        "properties": {"x": {"type": "string", "anyOf": [{"type": "string"}]}},
        "required": ["x"],
    }
    response = post(sim, body_for(schema=schema))
    assert response.status_code == 400
    assert error_of(response)["type"] == "invalid_request_error"
    assert error_of(response)["message"] == (
        "Invalid request: response_format.json_schema.schema is not a valid moonshot flavored "
        "json schema, details: <At path 'properties.x': when using anyOf, type should be "
        "defined in anyOf items instead of the parent schema>"
    )
    tool = {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {"type": "object", "properties": {"required": {"type": "string"}}},
        },
    }
    response = post(sim, body_for(tools=[tool]))
    assert response.status_code == 400
    assert error_of(response)["message"].endswith(
        "details: <At path 'properties': property name 'required' is reserved for JSON Schema "
        "keywords>"
    )


def test_strict_level_accepts_what_pydantic_and_the_openai_sdk_send(sim: Simulator) -> None:
    # walle strict: title, default, optional properties, minimum, format, open objects all pass.
    schema = {
        "title": "Review",
        "type": "object",
        "properties": {
            "stars": {"title": "Stars", "type": "integer", "minimum": 1, "maximum": 5},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "day": {"type": "string", "format": "date"},
            "extra": {"type": "object", "additionalProperties": True},
        },
        "required": ["stars", "day"],
    }
    response = post(sim, body_for(schema=schema))
    assert response.status_code == 200, response.text
    answer = json.loads(response.json()["choices"][0]["message"]["content"])
    assert 1 <= answer["stars"] <= 5


def test_ultra_level_is_walles_thorough_check() -> None:
    schema = {
        "type": "object",
        "properties": {"day": {"type": "string", "format": "date"}},
        "required": ["day"],
    }
    with Simulator(api_key=KEY, schema_level="ultra") as ultra:
        response = post(ultra, body_for(schema=schema))
    assert response.status_code == 400
    assert error_of(response)["message"].endswith(
        "details: <At path 'properties.day': unsupported keywords: format>"
    )
    with pytest.raises(ValueError, match="schema_level"):
        Simulator(schema_level="lenient")


@pytest.mark.parametrize(
    ("change", "status", "message"),
    [
        ({"reasoning_effort": "low"}, 400, "reasoning_effort"),
        ({"reasoning_effort": "high"}, 400, "reasoning_effort"),
        ({"prompt_cache_options": {"mode": "implicit", "ttl": "1h"}}, 400, "prompt_cache_options"),
        ({"temperature": 0.3}, 400, "invalid temperature: only 1 is allowed for this model"),
        ({"top_p": 0.5}, 400, "invalid top_p: only 0.95 is allowed for this model"),
        ({}, 200, None),
        ({"reasoning_effort": "max", "temperature": 1, "top_p": 0.95}, 200, None),
        ({"reasoning_effort": "xhigh"}, 200, None),
    ],
)
def test_kimi_k3_rules(
    sim: Simulator, change: dict[str, Any], status: int, message: str | None
) -> None:
    body = body_for(model="kimi-k3")
    del body["reasoning_effort"]
    body.update(change)
    response = post(sim, body)
    assert response.status_code == status
    if message:
        assert message in error_of(response)["message"]


def test_k31_ignores_temperature_and_top_p(sim: Simulator) -> None:
    plain = post(sim, body_for()).json()
    tuned = post(sim, body_for(temperature=0.2, top_p=0.5)).json()
    assert plain["choices"][0]["message"]["content"] == tuned["choices"][0]["message"]["content"]


def test_context_window_overflow_is_400(sim: Simulator) -> None:
    parts = [
        {"type": "image_url", "image_url": {"url": f"https://example.com/{i}.png"}}
        for i in range(770)
    ]
    body = body_for()
    body["messages"][1]["content"] = parts
    response = post(sim, body)
    assert response.status_code == 400
    assert "exceeded model token limit: 1048576" in error_of(response)["message"]


# -- answers ----------------------------------------------------------------------------------


def content_of(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return json.loads(response.json()["choices"][0]["message"]["content"])


def test_answers_are_deterministic_and_schema_valid(sim: Simulator) -> None:
    first = post(sim, body_for()).json()
    second = post(sim, body_for()).json()
    assert first["choices"] == second["choices"]
    seen = set()
    for text in [
        "Great phone, awful battery.",
        "The lens cracked after a week of use.",
        "Shipping took forever but support was kind.",
        "Loud fan, cheap plastic case.",
    ]:
        value = content_of(post(sim, body_for(text)))
        jsonschema.validate(value, REVIEW_SCHEMA)
        words = set(re.findall(r"\w+", text))
        assert all(set(aspect.split()) <= words for aspect in value["aspects"])
        assert 0 <= value["rating"] <= 99
        seen.add(json.dumps(value, sort_keys=True))
    assert len(seen) > 1


CONSTRAINED: dict[str, Any] = {
    "type": "object",
    "properties": {
        "day": {"type": "string", "description": "When. Constraints: format: date (YYYY-MM-DD)."},
        "at": {"type": "string", "description": "Constraints: format: date-time (ISO 8601)."},
        "clock": {"type": "string", "description": "Constraints: format: time (HH:MM:SS)."},
        "mail": {"type": "string", "description": "Constraints: format: email."},
        "site": {"type": "string", "description": "Constraints: format: uri."},
        "ident": {"type": "string", "description": "Constraints: format: uuid."},
        "stars": {"type": "integer", "description": "Constraints: minimum: 1; maximum: 5."},
        "ratio": {
            "type": "number",
            "description": "Constraints: exclusive minimum: 0; exclusive maximum: 1.",
        },
        "big": {"type": "integer", "description": "Constraints: minimum: 1000."},
        "code": {"type": "string", "description": "Constraints: min length: 12; max length: 14."},
        "tags": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Constraints: min items: 4; max items: 6; unique items.",
        },
        "pair": {
            "type": "array",
            "items": {"type": "integer"},
            "description": "Constraints: exactly 2 items: [lat, lon].",
        },
        "maybe": {
            "anyOf": [{"type": "integer"}, {"type": "null"}],
            "description": "Constraints: minimum: 50; maximum: 60.",
        },
        "scores": {
            "type": "array",
            "description": "A dict. Constraints: unique items.",
            "items": {
                "type": "object",
                "properties": {"key": {"type": "string"}, "value": {"type": "integer"}},
                "required": ["key", "value"],
                "additionalProperties": False,
            },
        },
    },
    "required": [
        "day",
        "at",
        "clock",
        "mail",
        "site",
        "ident",
        "stars",
        "ratio",
        "big",
        "code",
        "tags",
        "pair",
        "maybe",
        "scores",
    ],
    "additionalProperties": False,
}


def test_constraint_text_is_honoured(sim: Simulator) -> None:
    for i in range(12):
        value = content_of(post(sim, body_for(f"Order {i} arrived late but intact", CONSTRAINED)))
        jsonschema.validate(value, CONSTRAINED)
        date.fromisoformat(value["day"])
        datetime.fromisoformat(value["at"].replace("Z", "+00:00"))
        dtime.fromisoformat(value["clock"])
        assert re.fullmatch(r"[a-z0-9]+@example\.com", value["mail"])
        assert value["site"].startswith("https://")
        assert uuid.UUID(value["ident"]).version == 4
        assert 1 <= value["stars"] <= 5
        assert 0 < value["ratio"] < 1
        assert value["big"] >= 1000
        assert 12 <= len(value["code"]) <= 14
        assert 4 <= len(value["tags"]) <= 6 and len(set(value["tags"])) == len(value["tags"])
        assert len(value["pair"]) == 2
        assert value["maybe"] is None or 50 <= value["maybe"] <= 60
        keys = [item["key"] for item in value["scores"]]
        assert len(keys) == len(set(keys)) >= 1


def test_recursive_refs_terminate_with_valid_values(sim: Simulator) -> None:
    schema = {
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/Node"}},
        "required": ["root"],
        "additionalProperties": False,
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                    "parent": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]},
                },
                "required": ["name", "children", "parent"],
                "additionalProperties": False,
            }
        },
    }
    for i in range(5):
        jsonschema.validate(content_of(post(sim, body_for(f"tree {i}", schema))), schema)


def test_json_object_mode_follows_a_fenced_schema_in_the_system_message(sim: Simulator) -> None:
    system = (
        "Answer with one JSON object that follows this JSON schema:\n```json\n"
        + json.dumps(REVIEW_SCHEMA, indent=1)
        + "\n```"
    )
    body = body_for(response_format={"type": "json_object"})
    body["messages"][0]["content"] = system
    jsonschema.validate(content_of(post(sim, body)), REVIEW_SCHEMA)
    plain = body_for(response_format={"type": "json_object"})
    assert isinstance(content_of(post(sim, plain)), dict)


def test_text_mode_answers_a_sentence_with_reasoning(sim: Simulator) -> None:
    body = body_for(response_format={"type": "text"})
    message = post(sim, body).json()["choices"][0]["message"]
    assert message["content"].endswith(".") and message["reasoning_content"]
    del body["response_format"]
    assert post(sim, body).json()["choices"][0]["message"]["content"].endswith(".")


def test_reasoning_grows_with_effort_and_aliases(sim: Simulator) -> None:
    def reasoning_tokens(effort: str) -> int:
        usage = post(sim, body_for(reasoning_effort=effort)).json()["usage"]
        return int(usage["completion_tokens_details"]["reasoning_tokens"])

    low, high, top = reasoning_tokens("low"), reasoning_tokens("high"), reasoning_tokens("max")
    assert 30 <= low <= 81 and 200 <= high <= 401 and 600 <= top <= 1201
    assert reasoning_tokens("medium") == high
    assert reasoning_tokens("none") == low
    body = body_for()
    del body["reasoning_effort"]
    assert post(sim, body).json()["usage"]["completion_tokens_details"]["reasoning_tokens"] == top


def test_max_completion_tokens_cuts_with_length(sim: Simulator) -> None:
    full = post(sim, body_for()).json()
    full_message = full["choices"][0]["message"]
    reasoning = full["usage"]["completion_tokens_details"]["reasoning_tokens"]
    budget = reasoning + 5
    cut = post(sim, body_for(max_completion_tokens=budget)).json()
    assert cut["choices"][0]["finish_reason"] == "length"
    message = cut["choices"][0]["message"]
    assert message["reasoning_content"] == full_message["reasoning_content"]
    assert full_message["content"].startswith(message["content"])
    assert message["content"] != full_message["content"]
    assert cut["usage"]["completion_tokens"] <= budget
    tiny = post(sim, body_for(max_completion_tokens=10)).json()
    assert tiny["choices"][0]["finish_reason"] == "length"
    assert tiny["choices"][0]["message"]["content"] == ""
    assert tiny["usage"]["completion_tokens"] == 10
    legacy = body_for(max_tokens=10)
    del legacy["max_completion_tokens"]
    assert post(sim, legacy).json()["choices"][0]["finish_reason"] == "length"


# -- usage --------------------------------------------------------------------------------------


def test_usage_shape_and_arithmetic(sim: Simulator) -> None:
    body = body_for(schema=REVIEW_SCHEMA)
    data = post(sim, body).json()
    jsonschema.validate(data, component_schema("ChatCompletionResponse"))
    usage = data["usage"]
    jsonschema.validate(usage, component_schema("ChatUsage"))
    assert set(usage) == {
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "prompt_tokens_details",
        "completion_tokens_details",
    }
    assert set(usage["prompt_tokens_details"]) == {"cached_tokens", "cache_write_tokens"}
    assert set(usage["completion_tokens_details"]) == {"reasoning_tokens"}
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    message = data["choices"][0]["message"]
    reasoning = usage["completion_tokens_details"]["reasoning_tokens"]
    assert reasoning == tokens.count_text_tokens(message["reasoning_content"])
    assert usage["completion_tokens"] == reasoning + tokens.count_text_tokens(message["content"])
    schema_text = json.dumps(REVIEW_SCHEMA, separators=(",", ":"))
    expected_prompt = tokens.count_text_tokens(schema_text) + sum(
        tokens.MESSAGE_OVERHEAD + tokens.count_text_tokens(m["content"]) for m in body["messages"]
    )
    assert usage["prompt_tokens"] == expected_prompt
    assert data["id"].startswith("chatcmpl-") and data["object"] == "chat.completion"
    assert message["role"] == "assistant" and data["model"] == "kimi-k3.1-pro"


def _png(width: int, height: int) -> str:
    header = (
        b"\x89PNG\r\n\x1a\n"
        + struct.pack(">I", 13)
        + b"IHDR"
        + struct.pack(">II", width, height)
        + b"\x08\x02\x00\x00\x00"
        + b"\x00" * 20
    )
    return "data:image/png;base64," + base64.b64encode(header).decode()


def test_image_and_video_parts_are_billed_by_size(sim: Simulator) -> None:
    def prompt_tokens(part: dict[str, Any]) -> int:
        body = body_for(response_format={"type": "text"})
        body["messages"] = [{"role": "user", "content": [part, {"type": "text", "text": "Hi"}]}]
        return int(post(sim, body).json()["usage"]["prompt_tokens"])

    base = tokens.MESSAGE_OVERHEAD + 1
    png = {"type": "image_url", "image_url": {"url": _png(280, 56)}}
    assert prompt_tokens(png) == base + tokens.image_tokens(280, 56)
    remote = {"type": "image_url", "image_url": "https://example.com/cat.png"}
    assert prompt_tokens(remote) == base + tokens.image_tokens(None, None)
    video_bytes = b"\x00" * 3_000_000
    video_url = "data:video/mp4;base64," + base64.b64encode(video_bytes).decode()
    video = {"type": "video_url", "video_url": {"url": video_url}}
    assert prompt_tokens(video) == base + tokens.video_tokens(len(video_bytes))


def test_chunked_token_count_equals_the_shared_tokenizer() -> None:
    import random

    rng = random.Random(1)
    alphabet = list('abcdefghij KLM 0123456789 .,;:"{}[]_-\n\t\u00a0\x1f\u3000') + [
        "日",
        "本",
        "語",
        "é",
        "ß",
        "한",
        "カ",
        "ab12cd",
        "αβγ",
    ]
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 120)))
        assert count_tokens(text) == tokens.count_text_tokens(text), repr(text)


def test_image_headers_are_read_without_pillow() -> None:
    def data_url(kind: str, raw: bytes) -> str:
        return f"data:image/{kind};base64," + base64.b64encode(raw).decode()

    assert image_size(_png(640, 480)) == (640, 480)
    gif = b"GIF89a" + struct.pack("<HH", 33, 17) + b"\x00" * 20
    assert image_size(data_url("gif", gif)) == (33, 17)
    jpeg = (
        b"\xff\xd8"
        + b"\xff\xe0"
        + struct.pack(">H", 16)
        + b"JFIF\x00"
        + b"\x00" * 9
        + b"\xff\xc0"
        + struct.pack(">HBHH", 17, 8, 300, 500)
        + b"\x00" * 12
        + b"\xff\xd9"
    )
    assert image_size(data_url("jpeg", jpeg)) == (500, 300)
    vp8x = (
        b"RIFF"
        + b"\x00" * 4
        + b"WEBPVP8X"
        + struct.pack("<I", 10)
        + b"\x00" * 4
        + (99).to_bytes(3, "little")
        + (49).to_bytes(3, "little")
    )
    assert image_size(data_url("webp", vp8x)) == (100, 50)
    assert image_size("https://example.com/x.png") == (None, None)


def test_serve_runs_until_interrupted() -> None:
    code = INTERRUPTIBLE + (
        "from kimi_extract.simulator import serve; serve(port=0, api_key='sk-sim-test')"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        base_url = re.search(r"http://127\.0\.0\.1:\d+", first)
        assert base_url, first
        response = CLIENT.post(
            base_url.group(0) + "/v1/chat/completions",
            json=body_for(),
            headers={"Authorization": f"Bearer {KEY}"},
        )
        assert response.status_code == 200
        rest = [process.stdout.readline() for _ in range(4)]
        assert f"API key: {KEY}" in "".join(rest) and rest[-1].startswith("Press Ctrl-C")
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=20)
    assert process.returncode == 0 and "Traceback" not in err, (process.returncode, err)


# -- history, stats, responder ---------------------------------------------------------------


def test_history_records_each_exchange(sim: Simulator) -> None:
    before = time.monotonic()
    post(sim, body_for())
    post(sim, body_for(model="nope"))
    ok, missing = sim.history
    assert isinstance(ok, SimExchange)
    assert (ok.index, missing.index) == (0, 1)
    assert before <= ok.t_start <= ok.t_end <= missing.t_start  # type: ignore[operator]
    assert ok.method == "POST" and ok.path == "/v1/chat/completions"
    assert ok.body == body_for() and ok.stream is False and ok.fault is None
    assert ok.status == 200 and ok.error_type is None
    assert ok.response is not None and ok.usage == ok.response["usage"]
    assert missing.status == 404 and missing.error_type == "resource_not_found_error"
    assert missing.usage is None
    stats = sim.stats()
    assert stats["requests"] == 2 and stats["by_error_type"] == {"resource_not_found_error": 1}
    assert stats["tokens"]["prompt"] == ok.response["usage"]["prompt_tokens"]
    assert stats["in_flight"] == 0 and stats["in_flight_peak"] == 1
    sim.reset()
    assert sim.history == [] and sim.stats()["requests"] == 0


def test_history_limit_keeps_the_last_exchanges_and_counts_all() -> None:
    with Simulator(api_key=KEY, history_limit=2) as sim:
        for _ in range(3):
            post(sim, body_for())
        assert [h.index for h in sim.history] == [1, 2]
        assert sim.stats()["requests"] == 3 and sim.stats()["by_status"] == {"200": 3}


def test_responder_forms(sim: Simulator) -> None:
    seen: list[SimRequest] = []

    def responder(request: SimRequest) -> Any:
        seen.append(request)
        text = request.user_text
        if text.startswith("none"):
            return None
        if text.startswith("str"):
            return "plain words"
        if text.startswith("dict"):
            return {"sentiment": "positive"}
        if text.startswith("limit"):
            return Reply(
                status=429,
                error_type="rate_limit_reached_error",
                error_message="slow down",
                headers={"retry-after-ms": "1500"},
            )
        if text.startswith("script"):
            return Reply(
                content='{"a": 1}',
                reasoning_content="because",
                finish_reason="length",
                usage={"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
            )
        raise RuntimeError("responder bug")

    sim.responder = responder
    generated = post(sim, body_for("none please"))
    assert content_of(generated)["sentiment"] in ("positive", "negative", "neutral")
    plain = post(sim, body_for("str please")).json()
    assert plain["choices"][0]["message"]["content"] == "plain words"
    assert plain["usage"]["completion_tokens"] > tokens.count_text_tokens("plain words")
    assert content_of(post(sim, body_for("dict please"))) == {"sentiment": "positive"}
    limited = post(sim, body_for("limit please"))
    assert limited.status_code == 429 and limited.headers["retry-after-ms"] == "1500"
    assert error_of(limited) == {
        "message": "slow down",
        "type": "rate_limit_reached_error",
        "code": None,
    }
    scripted = post(sim, body_for("script please")).json()
    assert scripted["choices"][0]["finish_reason"] == "length"
    assert scripted["choices"][0]["message"]["reasoning_content"] == "because"
    assert scripted["usage"] == {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    broken = post(sim, body_for("boom"))
    assert broken.status_code == 500 and error_of(broken)["type"] == "server_error"
    assert sim.history[-1].fault == "responder_error"
    request = seen[0]
    assert request.index == 0 and request.model == "kimi-k3.1-pro"
    assert request.schema == REVIEW_SCHEMA
    assert request.messages == body_for("none please")["messages"]
    assert "authorization" not in {name.lower() for name in request.headers}


def test_responder_user_text_joins_text_parts_and_reply_delay_and_reset(sim: Simulator) -> None:
    texts: list[str] = []

    def responder(request: SimRequest) -> Any:
        texts.append(request.user_text)
        if "slow" in request.user_text:
            return Reply(delay=0.3)
        if "reset" in request.user_text:
            return Reply(fault="reset")
        return None

    sim.responder = responder
    body = body_for()
    body["messages"].append({"role": "assistant", "content": "{}"})
    body["messages"].append(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "first"},
                {"type": "image_url", "image_url": _png(28, 28)},
                {"type": "text", "text": "slow second"},
            ],
        }
    )
    started = time.monotonic()
    assert post(sim, body).status_code == 200
    assert time.monotonic() - started >= 0.3
    assert texts == ["first\nslow second"]
    with pytest.raises(httpx.RemoteProtocolError):
        post(sim, body_for("please reset"))
    assert sim.history[-1].fault == "reset" and sim.history[-1].status is None
    assert sim.stats()["tokens"]["prompt"] == sim.history[0].usage["prompt_tokens"]  # type: ignore[index]


def test_exchange_is_sim_exchange_under_its_old_name_with_a_warning():
    """The simulator's record is ``SimExchange`` (the client has its own ``Exchange``)."""
    import kimi_extract.simulator as simulator

    with pytest.warns(DeprecationWarning, match="SimExchange"):
        assert simulator.Exchange is SimExchange
    with pytest.raises(AttributeError):
        simulator.Nothing  # noqa: B018


def test_stopping_with_a_request_in_flight_leaves_no_task_behind(caplog: pytest.LogCaptureFixture):
    """A request still being answered when the simulator stops (its client gone, as after a
    cancelled run) is cancelled with the loop, so no handler task outlives it: collected later,
    it would log "Task was destroyed but it is pending!"."""
    import gc
    import logging

    sim = Simulator(ttft_s=30.0).start()
    body = {"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes its connection
        httpx.post(
            f"{sim.base_url}/chat/completions",
            headers={"Authorization": f"Bearer {sim.api_key}"},
            json=body,
            timeout=httpx.Timeout(5.0, read=0.3),
        )
    assert len(sim.history) == 1 and sim.history[0].status is None  # still being answered
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        sim.stop()
        gc.collect()
    assert not [r for r in caplog.records if "destroyed but it is pending" in r.getMessage()]
