"""Pure request building and the wire format: body shape, cached-prefix encoding, SSE assembly,
reask text."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kimi_extract.http.wire import (
    Answer,
    BodyEncoder,
    ErrorObject,
    StreamAssembler,
    encode_body,
    parse_completion,
)
from kimi_extract.records import Usage
from kimi_extract.run.request import (
    assistant_message,
    build_body,
    reask_message,
    tool_result_messages,
)

STATIC = ({"role": "system", "content": "Classify. ü"}, {"role": "user", "content": "ex"})
FORMAT = {"type": "json_schema", "json_schema": {"name": "R", "strict": True, "schema": {}}}


def body_with(messages):
    return build_body(
        model="kimi-k3.1-pro",
        messages=messages,
        response_format=FORMAT,
        reasoning_effort="low",
        max_completion_tokens=100,
        prompt_cache_options={"mode": "implicit", "ttl": "1h"},
    )


def test_body_never_sends_temperature_or_top_p():
    body = body_with([*STATIC, {"role": "user", "content": "x"}])
    assert "temperature" not in body and "top_p" not in body
    assert body["max_completion_tokens"] == 100


def test_encoder_matches_a_full_encode_and_shares_prefix_bytes():
    encoder = BodyEncoder(STATIC, FORMAT)
    rows = [[*STATIC, {"role": "user", "content": f"row {i} ✓"}] for i in range(3)]
    encoded = [encoder(body_with(m)) for m in rows]
    for raw, messages in zip(encoded, rows, strict=True):
        assert raw == encode_body(body_with(messages))
        assert json.loads(raw) == body_with(messages)
    prefix = encoded[0][: encoded[0].index(b"row 0")]
    assert all(raw.startswith(prefix) for raw in encoded)


def test_encoder_template_follows_every_change_of_the_body():
    """The cached head/tail is reused only while the body's other parts encode the same: a
    doubled budget, an option turned on or off, True for 1, another tools list, a reask's extra
    messages, a multimodal row or a message with other keys all give a full encode's bytes."""
    encoder = BodyEncoder(STATIC, FORMAT)
    options = {"mode": "implicit", "ttl": "1h"}
    tools = ({"type": "builtin_function", "function": {"name": "$web_search"}},)
    variants = [
        {},
        {"max_completion_tokens": 200},
        {"max_completion_tokens": 1},
        {"max_completion_tokens": True},
        {"prompt_cache_options": None},
        {"prompt_cache_options": {"mode": "implicit", "ttl": 1.0}},
        {"reasoning_effort": None},
        {"tools": list(tools)},
        {"tools": [{"type": "builtin_function", "function": {"name": "other"}}]},
        {"stream": True},
    ]
    rests = [
        [{"role": "user", "content": 'a "quoted" \u2028 row \x00 ü'}],
        [{"role": "user", "content": "r"}, {"role": "assistant", "content": "{}"}],
        [{"role": "user", "content": [{"type": "text", "text": "t"}]}],
        [{"content": "keys in another order", "role": "user"}],
        [{"role": "user", "content": "x", "name": "n"}],
        [],
    ]
    for round_ in range(2):  # the second round reuses templates made in the first
        for variant in variants:
            for rest in rests:
                fields = {
                    "model": "kimi-k3.1-pro",
                    "response_format": FORMAT,
                    "reasoning_effort": "low",
                    "max_completion_tokens": 100,
                    "prompt_cache_options": options,
                    **variant,
                }
                body = build_body(messages=[*STATIC, *rest], **fields)
                assert encoder(body) == encode_body(body), (round_, variant, rest)


def test_encoder_falls_back_for_other_bodies():
    encoder = BodyEncoder(STATIC, FORMAT)
    copied = [dict(m) for m in STATIC] + [{"role": "user", "content": "x"}]
    assert json.loads(encoder(body_with(copied))) == body_with(copied)


def test_stream_assembler_reads_both_usage_placements_and_tool_calls():
    lines = [
        'data: {"id":"c1","choices":[{"index":0,"delta":{"role":"assistant"}}]}',
        'data: {"choices":[{"index":0,"delta":{"reasoning_content":"thi"}}]}',
        'data: {"choices":[{"index":0,"delta":{"reasoning_content":"nk"}}]}',
        'data: {"choices":[{"index":0,"delta":{"content":"{\\"a\\":"}}]}',
        'data: {"choices":[{"index":0,"delta":{"content":"1}"}}]}',
        ": keep-alive comment",
        'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t1",'
        '"type":"builtin_function","function":{"name":"$web","arguments":"{\\"x\\""}}]}}]}',
        'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,'
        '"function":{"name":"_search","arguments":":1}"}}]}}]}',
        'data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}',
        'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}',
        "data: [DONE]",
    ]
    assembler = StreamAssembler()
    for line in lines:
        assembler.feed_line(line)
    answer = assembler.answer()
    assert answer.content == '{"a":1}' and answer.reasoning_content == "think"
    assert answer.finish_reason == "tool_calls"
    assert answer.tool_calls == [
        {
            "id": "t1",
            "type": "builtin_function",
            "function": {"name": "$web_search", "arguments": '{"x":1}'},
        }
    ]
    assert answer.usage.prompt_tokens == 5 and answer.usage.completion_tokens == 3
    assert answer.request_id == "c1"


def test_stream_without_done_is_an_error():
    assembler = StreamAssembler()
    assembler.feed_line('data: {"choices":[{"index":0,"delta":{"content":"x"}}]}')
    try:
        assembler.answer()
    except ValueError as exc:
        assert "ended" in str(exc)
    else:
        raise AssertionError("expected ValueError")


def test_assistant_and_tool_messages_keep_reasoning_and_arguments():
    call = {
        "id": "t9",
        "type": "builtin_function",
        "function": {"name": "$web_search", "arguments": '{"k": 1}'},
    }
    answer = Answer(
        content="",
        reasoning_content="why",
        finish_reason="tool_calls",
        usage=Usage(),
        tool_calls=[call],
    )
    assert assistant_message(answer) == {
        "role": "assistant",
        "content": "",
        "reasoning_content": "why",
        "tool_calls": [call],
    }
    assert tool_result_messages(answer) == [
        {"role": "tool", "tool_call_id": "t9", "name": "$web_search", "content": '{"k": 1}'}
    ]


def test_reask_lists_every_error():
    message = reask_message(["a.0: bad", "b: missing"], "validation")
    assert message["role"] == "user"
    assert "- a.0: bad" in message["content"] and "- b: missing" in message["content"]


# -- reading hostile responses: only ValueError or ErrorObject, never another crash --------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "choices",
                    "message",
                    "delta",
                    "content",
                    "usage",
                    "prompt_tokens",
                    "completion_tokens",
                    "finish_reason",
                    "tool_calls",
                    "function",
                    "index",
                    "error",
                    "id",
                ]
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_parse_completion_raises_only_value_errors(data):
    try:
        answer = parse_completion(data)
    except (ValueError, ErrorObject):
        return
    assert isinstance(answer.content, str | None) and answer.usage.requests == 1
    assert answer.usage.prompt_tokens >= 0 and answer.usage.completion_tokens >= 0


@settings(max_examples=300, deadline=None)
@given(st.lists(JSON, max_size=4))
def test_stream_assembler_raises_only_value_errors(chunks):
    assembler = StreamAssembler()
    try:
        for chunk in chunks:
            assembler.feed(chunk)
        assembler.done = True
        assembler.answer()
    except (ValueError, ErrorObject):
        pass


@pytest.mark.parametrize(
    "body",
    [
        {"choices": [None]},
        {"choices": [{"message": "text", "finish_reason": "stop"}]},
        {"choices": "abc"},
        {"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}], "usage": [1]},
        {"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}]},
        {
            "choices": [{"message": {"tool_calls": [1]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1},
        },
    ],
)
def test_malformed_completions_are_value_errors(body):
    with pytest.raises(ValueError):
        parse_completion(body)


def test_an_error_body_is_an_error_object_not_an_answer():
    error = {"type": "invalid_authentication_error", "message": "no"}
    with pytest.raises(ErrorObject) as info:
        parse_completion({"error": error})
    assert info.value.error == error
    with pytest.raises(ErrorObject):
        StreamAssembler().feed_line("data: " + json.dumps({"error": error}))
