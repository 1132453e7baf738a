"""The rest of the protocol from the client side: streaming, json_object mode, web search, and
every request we send validating against the API's OpenAPI request schema
(docs/reference/kimi-openapi.yaml, ``ChatCompletionRequest``)."""

from __future__ import annotations

import json
from importlib import resources

import jsonschema
import pandas as pd
import pytest

from kimi_extract.simulator import Reply, Simulator

from ..conftest import LONG_INSTRUCTIONS, Review, chat_requests, usage_sum
from ..run.test_inputs import PNG_1x1

TEXTS = ["Battery is great.", "Screen cracked in a week.", "Average speakers, fine price."]
VALUE_COLUMNS = ["sentiment", "aspects"]
ACCOUNTING = [
    "kx_prompt_tokens",
    "kx_cached_tokens",
    "kx_cache_write_tokens",
    "kx_completion_tokens",
    "kx_reasoning_tokens",
    "kx_attempts",
]


def request_validator() -> jsonschema.protocols.Validator:
    text = resources.files("kimi_extract.simulator").joinpath("openapi.json").read_text()
    document = json.loads(text)
    schema = {
        "$ref": "#/components/schemas/ChatCompletionRequest",
        "components": document["components"],
    }
    return jsonschema.Draft202012Validator(schema)


def assert_all_requests_valid(sim: Simulator) -> None:
    validator = request_validator()
    bodies = [h.body for h in chat_requests(sim)]
    assert bodies
    for body in bodies:
        errors = [e.message for e in validator.iter_errors(body)]
        assert errors == [], errors


def test_streaming_gives_identical_results(sim, make_extractor):
    plain = make_extractor(instructions=LONG_INSTRUCTIONS).run(TEXTS)
    plain_history = len(chat_requests(sim))
    streamed = make_extractor(instructions=LONG_INSTRUCTIONS, stream=True).run(TEXTS)
    stream_bodies = [h.body for h in chat_requests(sim)[plain_history:]]
    assert all(b["stream"] is True for b in stream_bodies)
    assert all(b["stream_options"] == {"include_usage": True} for b in stream_bodies)
    pd.testing.assert_frame_equal(plain[VALUE_COLUMNS], streamed[VALUE_COLUMNS])
    assert streamed["kx_error"].isna().all()
    # Token counts of the streamed run equal what the server reported for those requests.
    streamed_prompt = sum(h.usage["prompt_tokens"] for h in chat_requests(sim)[plain_history:])
    assert streamed["kx_prompt_tokens"].sum() == streamed_prompt
    assert (streamed["kx_completion_tokens"] == plain["kx_completion_tokens"]).all()
    assert_all_requests_valid(sim)


def test_streaming_usage_in_a_separate_chunk():
    with Simulator(stream_usage="separate") as server:
        import kimi_extract as kx

        ex = kx.Extractor(
            Review, base_url=server.base_url, api_key=server.api_key, stream=True, progress=False
        )
        out = ex.run(TEXTS)
        assert out["kx_error"].isna().all()
        assert out["kx_prompt_tokens"].sum() == usage_sum(server, "prompt") > 0
        assert out["kx_completion_tokens"].sum() == usage_sum(server, "completion") > 0


def test_stream_cut_is_retried(sim, make_extractor):
    sim.responder = lambda r: Reply(fault="cut") if r.index == 0 else None
    out = make_extractor(stream=True, concurrency=1).run(["one"])
    assert out.loc[0, "kx_error"] is None
    assert len(chat_requests(sim)) == 2
    assert out.loc[0, "kx_attempts"] == 1


def test_json_object_mode(sim, make_extractor):
    out = make_extractor(mode="json_object", instructions="Classify.").run(TEXTS)
    assert out["kx_error"].isna().all()
    body = chat_requests(sim)[0].body
    assert body["response_format"] == {"type": "json_object"}
    system = body["messages"][0]["content"]
    assert system.startswith("Classify.") and "```json" in system and '"sentiment"' in system
    assert_all_requests_valid(sim)


def test_json_object_mode_reasks_on_invalid_answer(sim, make_extractor):
    def responder(request):
        if not any(m["role"] == "assistant" for m in request.messages):
            return "Sure! Here is the JSON: {not json"
        return None

    sim.responder = responder
    out = make_extractor(mode="json_object").run(["x"])
    assert out.loc[0, "kx_error"] is None and out.loc[0, "kx_attempts"] == 2


@pytest.mark.parametrize("stream", [False, True])
def test_web_search_tool_loop(sim, make_extractor, stream):
    out = make_extractor(web_search=True, stream=stream).run(["Who makes the Nimbus e-reader?"])
    assert out.loc[0, "kx_error"] is None
    assert out.loc[0, "kx_web_searches"] == 1
    first, second = chat_requests(sim)
    assert first.body["tools"] == [{"type": "web_search"}]
    call = first.response["choices"][0]["message"]["tool_calls"][0]
    assistant, tool = second.body["messages"][-2:]
    assert assistant["role"] == "assistant"
    assert assistant["tool_calls"] == [call]
    assert (
        assistant["reasoning_content"]
        == first.response["choices"][0]["message"]["reasoning_content"]
    )
    assert tool == {
        "role": "tool",
        "tool_call_id": call["id"],
        "name": "$web_search",
        "content": call["function"]["arguments"],
    }
    assert out.loc[0, "kx_attempts"] == 2
    assert out.loc[0, "kx_prompt_tokens"] == usage_sum(sim, "prompt")
    assert_all_requests_valid(sim)


def test_tool_loop_is_bounded(sim, make_extractor):
    def responder(request):
        return Reply(
            content="",
            finish_reason="tool_calls",
            tool_calls=[
                {
                    "id": f"call_{request.index}",
                    "type": "builtin_function",
                    "function": {
                        "name": "$web_search",
                        "arguments": json.dumps(
                            {"search_result": {"search_id": "s1"}, "usage": {"total_tokens": 9}}
                        ),
                    },
                }
            ],
        )

    sim.responder = responder
    out = make_extractor(web_search=True, max_tool_rounds=2).run(["q"])
    assert out.loc[0, "kx_error"].startswith("ToolLoopError")
    assert len(chat_requests(sim)) == 3


def test_every_feature_sends_schema_valid_requests(sim, make_extractor, tmp_path):
    path = tmp_path / "p.png"
    path.write_bytes(PNG_1x1)
    df = pd.DataFrame({"note": ["a", "b"], "photo": [str(path), "https://example.com/x.jpg"]})
    make_extractor(
        cache_ttl="1h", examples=[("e", Review(sentiment="neutral", aspects=["x"]))]
    ).run(df, text="note", images="photo")
    make_extractor(stream=True, web_search=True).run(["q"])
    make_extractor(model="kimi-k3", reasoning_effort="max").run(["k3 row"])
    sim.responder = lambda r: "bad" if r.index == len(chat_requests(sim)) - 1 else None
    assert_all_requests_valid(sim)
    assert all(h.status == 200 for h in chat_requests(sim))
