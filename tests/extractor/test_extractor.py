"""End to end against the simulator: rows in, typed DataFrame out, accounting exact."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math

import pandas as pd
import pytest
from pydantic import BaseModel, Field

import kimi_extract as kx
from kimi_extract.simulator import Reply

from ..conftest import LONG_INSTRUCTIONS, Review, chat_requests, ok_exchanges, usage_sum

REVIEWS = [
    "Battery lasts two days and the screen is bright.",
    "Broke after a week, support never answered.",
    "It is fine. Nothing special about the speakers.",
]


def test_200_rows_index_preserved_and_accounting_matches_server(sim, make_extractor):
    texts = [f"{REVIEWS[i % 3]} Order number {i}." for i in range(200)]
    index = pd.Index([f"r{199 - i}" for i in range(200)], name="rid")
    df = pd.DataFrame({"review": texts, "stars": range(200)}, index=index)
    ex = make_extractor(instructions=LONG_INSTRUCTIONS, concurrency=8)
    out = ex.run(df, text="review")

    assert len(out) == 200
    assert out.index.equals(df.index)
    assert list(out["review"]) == texts
    assert out["kx_error"].isna().all()
    assert set(out["sentiment"]) <= {"positive", "negative", "neutral"}
    assert all(isinstance(a, list) for a in out["aspects"])
    # Accounting columns sum exactly to what the server reported, request by request.
    answers = ok_exchanges(sim)
    assert out["kx_attempts"].sum() == len(answers) == 200
    assert out["kx_prompt_tokens"].sum() == usage_sum(sim, "prompt")
    assert out["kx_cached_tokens"].sum() == usage_sum(sim, "cached")
    assert out["kx_cache_write_tokens"].sum() == usage_sum(sim, "write")
    assert out["kx_completion_tokens"].sum() == usage_sum(sim, "completion")
    assert out["kx_reasoning_tokens"].sum() == usage_sum(sim, "reasoning")
    # The shared prefix is long enough to be cached, so later rows read it.
    assert out["kx_cached_tokens"].sum() > 0
    assert out["kx_cache_write_tokens"].sum() > 0
    assert (out["kx_latency_s"] > 0).all()
    price = kx.MODELS["kimi-k3.1-pro"].pricing
    assert price is not None
    total = kx.Usage(
        prompt_tokens=int(out["kx_prompt_tokens"].sum()),
        cached_tokens=int(out["kx_cached_tokens"].sum()),
        cache_write_tokens=int(out["kx_cache_write_tokens"].sum()),
        completion_tokens=int(out["kx_completion_tokens"].sum()),
    )
    assert math.isclose(out["kx_cost"].sum(), price.cost(total), rel_tol=1e-9)
    assert ex.usage.requests == 200
    assert ex.usage.prompt_tokens == out["kx_prompt_tokens"].sum()


def test_prefix_is_byte_identical_and_row_last(sim, make_extractor):
    ex = make_extractor(
        instructions="Classify.",
        examples=[("love it", Review(sentiment="positive", aspects=[]))],
    )
    ex.run(REVIEWS)
    bodies = [h.body for h in chat_requests(sim)]
    prefixes = {json.dumps(b["messages"][:-1]) for b in bodies}
    assert len(prefixes) == 1
    first = bodies[0]["messages"]
    assert [m["role"] for m in first] == ["system", "user", "assistant", "user"]
    assert json.loads(first[2]["content"]) == {"sentiment": "positive", "aspects": []}
    assert sorted(b["messages"][-1]["content"] for b in bodies) == sorted(REVIEWS)
    for body in bodies:
        assert "temperature" not in body and "top_p" not in body
        assert body["reasoning_effort"] == "low"
        assert body["response_format"] == kx.response_format(Review)


def test_reask_carries_reasoning_content(sim, make_extractor):
    def responder(request):
        if not any(m["role"] == "assistant" for m in request.messages):
            return Reply(
                content='{"sentiment": "ecstatic", "aspects": []}', reasoning_content="R1 chain"
            )
        return None

    sim.responder = responder
    ex = make_extractor()
    out = ex.run(["great phone"])
    assert out.loc[0, "kx_error"] is None
    assert out.loc[0, "kx_attempts"] == 2
    first, second = chat_requests(sim)
    assistant, reask = second.body["messages"][-2:]
    assert assistant == {
        "role": "assistant",
        "content": '{"sentiment": "ecstatic", "aspects": []}',
        "reasoning_content": "R1 chain",
    }
    assert reask["role"] == "user" and "sentiment" in reask["content"]
    assert second.body["messages"][:-2] == first.body["messages"]
    assert (
        out.loc[0, "kx_prompt_tokens"]
        == first.usage["prompt_tokens"] + second.usage["prompt_tokens"]
    )


def test_validation_retries_exhausted_counts_every_attempt(sim, make_extractor):
    sim.responder = lambda request: "not json at all"
    ex = make_extractor(validation_retries=2)
    out = ex.run(["x"])
    assert out.loc[0, "kx_attempts"] == 3
    assert out.loc[0, "kx_error"].startswith("ValidationFailedError")
    assert out.loc[0, "kx_prompt_tokens"] == usage_sum(sim, "prompt")
    assert pd.isna(out.loc[0, "sentiment"])


def test_truncation_retried_once_with_double_budget(sim, make_extractor):
    def responder(request):
        if request.body["max_completion_tokens"] < 2000:
            return Reply(content='{"sentiment": "pos', finish_reason="length")
        return None

    sim.responder = responder
    out = make_extractor(max_completion_tokens=1000).run(["a"])
    budgets = [h.body["max_completion_tokens"] for h in chat_requests(sim)]
    assert budgets == [1000, 2000]
    assert out.loc[0, "kx_error"] is None and out.loc[0, "kx_attempts"] == 2

    sim.reset()
    sim.responder = lambda request: Reply(content="{", finish_reason="length")
    out = make_extractor(max_completion_tokens=1000).run(["a"])
    assert [h.body["max_completion_tokens"] for h in chat_requests(sim)] == [1000, 2000]
    assert "truncated" in out.loc[0, "kx_error"]
    assert out.loc[0, "kx_attempts"] == 2


class Typed(BaseModel):
    count: int
    flag: bool
    score: float
    label: str
    nested: Review | None = None


def test_nullable_dtypes_hold_na_for_failed_rows(sim, make_extractor):
    sim.responder = lambda r: "nope" if "bad" in r.user_text else None
    out = make_extractor(Typed, validation_retries=0).run(["good row", "bad row"])
    assert str(out["count"].dtype) == "Int64"
    assert str(out["flag"].dtype) == "boolean"
    assert out["count"].isna().tolist() == [False, True]
    assert out["flag"].isna().tolist() == [False, True]
    assert out.loc[1, "kx_error"].startswith("ValidationFailedError")


def test_empty_rows_send_nothing(sim, make_extractor):
    df = pd.DataFrame({"review": ["fine", None, float("nan"), "  "]}, dtype=object)
    out = make_extractor().run(df, text="review")
    assert len(chat_requests(sim)) == 1
    assert out["kx_error"].isna().tolist() == [True, False, False, False]
    assert out.loc[1, "kx_error"].startswith("EmptyInputError")
    assert out.loc[1, "kx_attempts"] == 0


def test_context_overflow_is_row_error_without_request(sim, make_extractor):
    huge = "word " * 1_100_000
    out = make_extractor().run(["small", huge])
    assert len(chat_requests(sim)) == 1
    assert out.loc[1, "kx_error"].startswith("ContextOverflowError")


def test_bad_configuration_fails_before_any_request(sim, make_extractor, monkeypatch):
    with pytest.raises(TypeError):
        kx.Extractor(dict)  # type: ignore[type-var]
    with pytest.raises(kx.InputError, match="nope"):
        make_extractor().run(pd.DataFrame({"a": ["x"]}), text="nope")
    with pytest.raises(kx.InputError, match="missing"):
        make_extractor().run(pd.DataFrame({"a": ["x"]}), template="{a} {missing}")
    with pytest.raises(kx.ConfigurationError):
        make_extractor(concurrency=0)
    with pytest.raises(kx.ConfigurationError, match="cache_ttl"):
        make_extractor(model="kimi-k3", reasoning_effort="max", cache_ttl="1h")
    monkeypatch.delenv("KIMI_API_KEY", raising=False)
    monkeypatch.delenv("EVOLINK_API_KEY", raising=False)
    ex = kx.Extractor(Review, base_url=sim.base_url, progress=False)
    with pytest.raises(kx.MissingAPIKeyError, match="KIMI_API_KEY.*EVOLINK_API_KEY"):
        ex.run(["x"])
    assert sim.history == []


def test_api_key_from_environment(sim, monkeypatch):
    monkeypatch.delenv("KIMI_API_KEY", raising=False)
    monkeypatch.setenv("EVOLINK_API_KEY", sim.api_key)
    monkeypatch.setenv("KIMI_BASE_URL", sim.base_url)
    out = kx.Extractor(Review, progress=False).run(["x"])
    assert out.loc[0, "kx_error"] is None


def test_column_clash_and_prefix(sim, make_extractor):
    df = pd.DataFrame({"sentiment": ["given"], "text": ["great"]})
    with pytest.raises(kx.InputError, match="prefix"):
        make_extractor().run(df, text="text")
    assert sim.history == []
    out = make_extractor(column_prefix="out_").run(df, text="text")
    assert list(out.columns[:4]) == ["sentiment", "text", "out_sentiment", "out_aspects"]


def test_extract_and_aextract_agree_and_raise_on_failure(sim, make_extractor):
    ex = make_extractor()
    one = ex.extract("great phone")
    assert isinstance(one, Review)
    two = asyncio.run(ex.aextract("great phone"))
    assert one == two  # the simulator answers the same request the same way
    sim.responder = lambda r: "garbage"
    with pytest.raises(kx.ValidationFailedError):
        ex.extract("great phone")
    with pytest.raises(kx.EmptyInputError):
        ex.extract("   ")


def test_run_inside_a_running_event_loop(make_extractor):
    ex = make_extractor()

    async def notebook_cell():
        return ex.run(["inside a loop"])

    out = asyncio.run(notebook_cell())
    assert out.loc[0, "kx_error"] is None


async def test_arun_is_the_async_twin(make_extractor):
    out = await make_extractor().arun(["a", "b"])
    assert len(out) == 2 and out["kx_error"].isna().all()


def test_usage_accumulates_and_summary_is_logged(make_extractor, caplog):
    ex = make_extractor()
    with caplog.at_level(logging.INFO, logger="kimi_extract"):
        ex.run(["a", "b"])
        ex.run(["c"])
    assert ex.usage.requests == 3
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("kimi_extract:")]
    assert len(lines) == 2
    assert "1 rows (1 ok, 0 failed)" in lines[1] and "cost $" in lines[1]
    assert ex.last_run is not None and ex.last_run.ok == 1


def test_unknown_price_gives_nan_cost_and_says_so(sim, make_extractor, caplog, monkeypatch):
    unpriced = dataclasses.replace(kx.MODELS["kimi-k3.1-pro"], pricing=None)
    monkeypatch.setattr("kimi_extract.config.core.model_info", lambda name: unpriced)
    ex = make_extractor(pricing={"other-model": kx.Pricing(1, 1, 1, 1)}, model="kimi-k3.1-pro")
    assert ex.config.resolved_pricing is None
    with caplog.at_level(logging.INFO, logger="kimi_extract"):
        out = ex.run(["a"])
    assert out["kx_cost"].isna().all()
    assert any("cost unknown" in r.getMessage() for r in caplog.records)


def test_k3_rules_effort_max_and_no_cache_options(sim, make_extractor, monkeypatch):
    monkeypatch.setattr("kimi_extract.kimi._warned", set())
    with pytest.warns(UserWarning, match="max"):
        ex = make_extractor(model="kimi-k3", reasoning_effort="low")
    ex.run(["a"])
    body = chat_requests(sim)[0].body
    assert body["model"] == "kimi-k3" and body["reasoning_effort"] == "max"
    assert "prompt_cache_options" not in body


def test_cache_ttl_sent_on_k31(sim, make_extractor):
    make_extractor(cache_ttl="1h").run(["a"])
    assert chat_requests(sim)[0].body["prompt_cache_options"] == {"mode": "implicit", "ttl": "1h"}


def test_images_travel_as_image_url_parts(sim, make_extractor, tmp_path):
    from ..run.test_inputs import PNG_1x1

    path = tmp_path / "p.png"
    path.write_bytes(PNG_1x1)
    df = pd.DataFrame(
        {
            "note": ["with file", "with url", "missing"],
            "photo": [str(path), ["https://example.com/a.jpg", PNG_1x1], str(tmp_path / "no.png")],
        }
    )
    out = make_extractor().run(df, text="note", images="photo")
    assert out["kx_error"].isna().tolist() == [True, True, False]
    assert "not found" in out.loc[2, "kx_error"]
    contents = sorted((h.body["messages"][-1]["content"] for h in chat_requests(sim)), key=len)
    first = contents[0]
    assert first[0]["type"] == "image_url" and first[0]["image_url"]["url"].startswith(
        "data:image/png;base64,"
    )
    assert first[-1] == {"type": "text", "text": "with file"}
    assert [p["type"] for p in contents[1]] == ["image_url", "image_url", "text"]


def test_key_never_in_repr_errors_or_frame(sim, make_extractor):
    ex = make_extractor(api_key="sk-wrong-secret-123456")
    assert "sk-wrong" not in repr(ex)
    with pytest.raises(kx.RunStopped) as info:
        ex.run(["a", "b"])
    text = repr(info.value) + str(info.value) + repr(info.value.cause)
    assert "sk-wrong" not in text and "123456" not in text
    assert "sk-wrong" not in info.value.partial.to_csv()


def test_field_models_with_constraints_reask_on_violation(sim, make_extractor):
    class Rated(BaseModel):
        stars: int = Field(ge=1, le=5)

    def responder(request):
        if not any(m["role"] == "assistant" for m in request.messages):
            return {"stars": 9}
        return {"stars": 4}

    sim.responder = responder
    out = make_extractor(Rated).run(["ok"])
    assert out.loc[0, "stars"] == 4 and out.loc[0, "kx_attempts"] == 2
    schema = kx.response_format(Rated)["json_schema"]["schema"]
    stars = schema["properties"]["stars"]
    # walle ultra carries integer bounds as keywords; pydantic still checks every answer
    assert stars == {"type": "integer", "minimum": 1, "maximum": 5}


def test_extractor_pickles_and_runs_after_a_round_trip(make_extractor):
    import pickle

    ex = make_extractor()
    ex.run(["warm up the router and usage"])
    clone = pickle.loads(pickle.dumps(ex))
    assert clone.run(["great phone"])["kx_error"].isna().all()
    assert repr(clone) == repr(ex)
