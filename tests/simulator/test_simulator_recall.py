"""The simulator's recall on long lists: located answer keys read pass by pass (``recall``)."""

from __future__ import annotations

import json
import random
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from kimi_extract.exceptions import ConfigurationError
from kimi_extract.simulator import Simulator
from kimi_extract.simulator.quality import QualityModel
from kimi_extract.simulator.recall import UNSEEN, KeyIndex, Recall, read


def located_items(count: int) -> list[dict[str, Any]]:
    return [
        {"sku": f"S-{n:03d}", "qty": n + 1, "@at": f"row S-{n:03d} part {n}\n  qty {n + 1}"}
        for n in range(count)
    ]


KEY = {
    "vendor": "Bolt",
    "total": 99.5,
    "items": located_items(10),
    "@at": {"vendor": "Vendor: Bolt", "total": "Total due: 99.50"},
    "@decoys": {"total": [[12.0, "Subtotal: 12.00"]]},
}


def text_of(rows: range, *extra: str) -> str:
    return "\n".join([*extra, *(KEY["items"][n]["@at"] for n in rows)])


def test_a_reader_sees_only_what_the_text_shows() -> None:
    text = text_of(range(2, 6), "Vendor: Bolt")
    answer = read(KEY, text, Recall(), random.Random(1), [])
    assert [i["sku"] for i in answer["items"]] == ["S-002", "S-003", "S-004", "S-005"]
    assert answer["vendor"] == "Bolt" and answer["total"] is UNSEEN


def test_an_item_cut_by_the_end_of_the_text_is_answered_with_what_is_visible() -> None:
    text = text_of(range(0, 3)) + "\n" + KEY["items"][3]["@at"].split("\n")[0]
    answer = read(KEY, text, Recall(), random.Random(1), [])
    *whole, cut = answer["items"]
    assert [i["sku"] for i in whole] == ["S-000", "S-001", "S-002"]
    assert cut == {"sku": "S-003", "qty": UNSEEN}  # its quantity line is in the next chunk
    # the next chunk starts with the item's last line (after its header): the other half
    following = "Document: x, part 2\n\n" + KEY["items"][3]["@at"].split("\n")[1]
    answer = read(KEY, following, Recall(), random.Random(1), [])
    assert answer["items"] == [{"sku": UNSEEN, "qty": 4}]


def test_a_look_alike_is_taken_for_a_value_the_text_lacks_at_the_decoy_rate() -> None:
    text = text_of(range(3), "Subtotal: 12.00")
    taken = [
        read(KEY, text, Recall(decoy=0.25), random.Random(seed), [])["total"] for seed in range(400)
    ]
    share = taken.count(12.0) / len(taken)
    assert abs(share - 0.25) < 0.1 and set(taken) == {12.0, UNSEEN}


def test_a_first_answer_finds_a_share_and_stops_early_a_follow_up_finds_part_of_the_rest() -> None:
    items = {"items": located_items(200)}
    text = "\n".join(i["@at"] for i in items["items"])
    first = read(items, text, Recall(found=0.5), random.Random(3), [])["items"]
    assert 70 < len(first) < 130
    capped = read(items, text, Recall(max_items=40), random.Random(3), [])["items"]
    assert [i["sku"] for i in capped] == [f"S-{n:03d}" for n in range(40)]  # document order
    later = read(items, text, Recall(later=0.5), random.Random(4), [{"items": first}])["items"]
    given_before = {i["sku"] for i in first}
    assert not given_before & {i["sku"] for i in later}  # only what was missed
    assert 0.3 < len(later) / (200 - len(first)) < 0.7


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32), found=st.floats(0, 1), most=st.integers(1, 30))
def test_reading_is_deterministic_and_never_invents_an_item(seed, found, most) -> None:
    text = text_of(range(1, 8))
    recall = Recall(found=found, max_items=most)
    once = read(KEY, text, recall, random.Random(seed), [])
    assert once == read(KEY, text, recall, random.Random(seed), [])
    skus = [i["sku"] for i in once["items"]]
    assert len(skus) <= most and set(skus) <= {f"S-{n:03d}" for n in range(1, 8)}
    assert skus == sorted(skus)


class Line(BaseModel):
    sku: str
    qty: int | None


class Order(BaseModel):
    vendor: str | None
    total: float | None
    items: list[Line]


def ask(sim: Simulator, text: str, history: list[dict[str, Any]] = ()) -> dict[str, Any]:
    body = {
        "model": "kimi-k3.1-pro",
        "reasoning_effort": "low",
        "messages": [{"role": "user", "content": text}, *history],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "Order", "strict": True, "schema": Order.model_json_schema()},
        },
    }
    response = httpx.post(
        f"{sim.base_url}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {sim.api_key}"},
        timeout=30,
    )
    response.raise_for_status()
    return json.loads(response.json()["choices"][0]["message"]["content"])


def test_registered_keys_answer_chunks_and_a_repeat_draws_anew() -> None:
    text = text_of(range(0, 10), "Vendor: Bolt")
    quality = QualityModel(default_recall=Recall(found=0.5))
    with (
        Simulator(quality=quality, answer_keys=[KEY]) as sim,
        Simulator(quality=quality, answer_keys=[KEY]) as twin,
    ):
        first = ask(sim, text)
        assert first == ask(twin, text)  # the same request in a fresh simulator: the same answer
        repeats = [ask(sim, text) for _ in range(5)]
        assert any(r != first for r in repeats)  # an identical request again: a new sample
        assert first["vendor"] == "Bolt" and first["total"] is None  # not on this page
        assert {i["sku"] for i in first["items"]} <= {f"S-{n:03d}" for n in range(10)}
        follow = ask(
            sim,
            text,
            [{"role": "assistant", "content": json.dumps(first)}, {"role": "user", "content": "?"}],
        )
        assert not {i["sku"] for i in follow["items"]} & {i["sku"] for i in first["items"]}


def test_without_registered_keys_answers_are_as_before() -> None:
    text = "An order with nothing located in it: 3 hinges, 2 panels."
    with Simulator() as plain, Simulator(answer_keys=[KEY]) as keyed:
        assert ask(plain, text) == ask(keyed, text)


def test_bad_recall_settings_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="Recall.found"):
        Recall(found=1.5)
    with pytest.raises(ConfigurationError, match="max_items"):
        Recall(max_items=0)
    with pytest.raises(ConfigurationError, match="answer_keys"):
        KeyIndex(["not an object"])
