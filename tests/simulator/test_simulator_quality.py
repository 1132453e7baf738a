"""The simulator's model of answer quality (``kimi_extract.simulator.quality``).

A row whose text carries an answer key is answered from the key, with mistakes of each kind at
the rate its ``QualityModel`` gives the request's model and effort; rows without a key are
answered exactly as before. Every test was checked to fail without the behaviour it names.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import date
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field

import kimi_extract as kx
from kimi_extract.exceptions import ConfigurationError
from kimi_extract.quality import normalize_text
from kimi_extract.simulator import Simulator
from kimi_extract.simulator.quality import (
    ERROR_KINDS,
    ErrorRates,
    QualityModel,
    answer_key,
    corrupt,
    with_answer_key,
)

from ..quality.test_compare import Invoice, invoices


class Tag(BaseModel):
    label: str
    weight: int = Field(ge=0)


class Record(BaseModel):
    title: str
    note: str | None
    kind: Literal["red", "green", "blue"]
    flag: bool
    count: int = Field(ge=0)
    amount: float
    day: date
    when: date | None
    tags: list[Tag] = Field(min_length=1, max_length=4)


SCHEMA = kx.compile_schema(Record).schema
KEY = Record(
    title="Quarterly report",
    note="signed by the board",
    kind="green",
    flag=True,
    count=7,
    amount=120.5,
    day=date(2024, 3, 1),
    when=date(2024, 5, 2),
    tags=[Tag(label="finance", weight=3), Tag(label="annual", weight=1)],
).model_dump(mode="json")


def _only(kind: str, rate: float = 1.0) -> ErrorRates:
    return ErrorRates(**{kind: rate})


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=8),
        st.one_of(st.integers(), st.text(), st.booleans(), st.none(), st.lists(st.integers())),
        max_size=6,
    ),
    st.text(max_size=200),
)
def test_an_answer_key_round_trips_through_the_text(answer: dict[str, Any], text: str) -> None:
    assert answer_key(with_answer_key(text, answer)) == answer


def test_no_mistakes_at_zero_rates_and_every_value_of_the_key_kept() -> None:
    value, mistakes = corrupt(KEY, SCHEMA, ErrorRates(), random.Random(1), ["w"])
    assert value == KEY and mistakes == []


@pytest.mark.parametrize("kind", ERROR_KINDS)
def test_each_kind_makes_its_own_mistake_and_the_answer_stays_valid(kind: str) -> None:
    for seed in range(20):
        value, mistakes = corrupt(KEY, SCHEMA, _only(kind), random.Random(seed), ["word"])
        Record.model_validate(value)  # still an answer the output model accepts
        assert mistakes and {m.kind for m in mistakes} == {kind}
        paths = {m.path for m in mistakes}
        if kind == "wrong_number":
            assert paths == {"count", "amount", "tags[0].weight", "tags[1].weight"}
            assert value["count"] != KEY["count"] and value["amount"] != KEY["amount"]
            assert value["count"] >= 0 and all(t["weight"] >= 0 for t in value["tags"])
        elif kind == "changed_date":
            assert paths == {"day", "when"}
            assert value["day"] != KEY["day"] and date.fromisoformat(value["day"])
        elif kind == "typo":
            assert "title" in paths and "note" in paths
            assert normalize_text(value["title"]) != normalize_text(KEY["title"])
            assert len(value["title"]) == len(KEY["title"])
        elif kind == "wrong_enum":
            assert paths == {"kind", "flag"}
            assert value["kind"] in {"red", "blue"} and value["flag"] is False
        elif kind == "dropped_item":
            assert len(value["tags"]) == 1  # min_length=1 is kept
        elif kind == "invented_item":
            assert len(value["tags"]) == 3 and all(t in value["tags"] for t in KEY["tags"])
        elif kind == "null_value":
            assert value["note"] is None and value["when"] is None  # nullable: null
            assert value["title"] == ""  # a text that cannot be null: empty
            assert value["count"] == KEY["count"]  # a number cannot be left out


#: How many values of KEY each kind can hit: numbers; texts; the list (once); nullable values
#: and texts (a text that cannot be null is emptied).
_TARGETS = {"wrong_number": 4, "typo": 4, "invented_item": 1, "null_value": 5}


@pytest.mark.parametrize("kind", sorted(_TARGETS))
def test_mistakes_happen_at_their_configured_rate(kind: str) -> None:
    rate = 0.3
    rng = random.Random(7)
    tried = made = 0
    for _ in range(400):
        _, mistakes = corrupt(KEY, SCHEMA, _only(kind, rate), rng, ["word"])
        made += len(mistakes)
        tried += _TARGETS[kind]
    # binomial: 5 standard deviations either side
    spread = 5 * (rate * (1 - rate) / tried) ** 0.5
    assert abs(made / tried - rate) < spread


@given(st.integers(0, 2**32), st.floats(0, 1))
def test_any_rates_and_seed_give_an_answer_the_model_accepts(seed: int, rate: float) -> None:
    value, _ = corrupt(KEY, SCHEMA, ErrorRates.uniform(rate), random.Random(seed), ["w"])
    Record.model_validate(value)


def _run(sim: Simulator, data: Any, **options: Any) -> Any:
    extractor = kx.Extractor(
        Invoice, base_url=sim.base_url, api_key=sim.api_key, progress=False, **options
    )
    return extractor.run(data, text="text")


def test_rows_with_a_key_are_answered_from_it_and_others_as_before() -> None:
    data, gold = invoices(20)
    plain = data.assign(text=[t.split("\n\nkx-answer-key:")[0] for t in data["text"]])
    with Simulator(quality="exact") as exact, Simulator(quality=None) as off:
        answered = _run(exact, data)
        assert kx.evaluate(answered, gold, Invoice).overall["micro_f1"] == 1.0
        ignored = _run(off, data)  # keys ignored: placeholder answers
        assert kx.evaluate(ignored, gold, Invoice).overall["micro_f1"] < 0.5
        # without a key the answer is the one the simulator always gave
        columns = list(Invoice.model_fields)
        assert _run(exact, plain)[columns].equals(_run(off, plain)[columns])
    # the same requests got the same responses, word for word (in whatever order they came)

    def answers(server: Simulator) -> dict[str, Any]:
        return {
            json.dumps(e.body, sort_keys=True): e.response["choices"]
            for e in server.history[20:]
            if e.body and e.response
        }

    assert len(answers(exact)) == 20 and answers(exact) == answers(off)


def test_the_same_row_gets_the_same_answer_and_models_err_independently() -> None:
    data, _ = invoices(30)
    rates = ErrorRates.uniform(0.2)
    quality = QualityModel({("kimi-k3.1-pro", "low"): rates, ("kimi-k3", "max"): rates})
    with Simulator(quality=quality) as sim:
        first = _run(sim, data)
        again = _run(sim, data)
        other = _run(sim, data, model="kimi-k3", reasoning_effort="max")
    columns = list(Invoice.model_fields)
    assert first[columns].equals(again[columns])
    assert not first[columns].equals(other[columns])


def test_the_illustrative_rates_fall_with_effort_and_differ_by_model() -> None:
    model = QualityModel.illustrative()
    for kind in ERROR_KINDS:
        low, high, top = (
            getattr(model.rates_for("kimi-k3.1-pro", e), kind) for e in ("low", "high", "max")
        )
        assert 0 < top < high < low < 1
        assert getattr(model.rates_for("kimi-k3", "max"), kind) > top
        assert getattr(model.rates_for("kimi-k3.1-pro-highspeed", "high"), kind) == high
    assert Simulator()._service.quality == model  # the default


def test_bad_quality_settings_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="quality must be"):
        Simulator(quality="perfect")
    with pytest.raises(ConfigurationError, match="ErrorRates.typo"):
        ErrorRates(typo=1.5)
    with pytest.raises(ConfigurationError, match="keyed by"):
        QualityModel({"kimi-k3": ErrorRates()})  # type: ignore[dict-item]


def test_a_key_that_is_not_json_is_ignored() -> None:
    assert answer_key("text\n\nkx-answer-key: {not json") is None
    assert answer_key("no key at all") is None
    text = with_answer_key("one", {"a": 1}) + "\n" + with_answer_key("two", {"a": 2})
    assert answer_key(text) == {"a": 2}  # the last key wins
    assert json.loads(text.rsplit("kx-answer-key:", 1)[1]) == {"a": 2}


def test_mistake_kinds_over_many_rows_follow_the_configured_mix() -> None:
    quality = QualityModel(default=ErrorRates(typo=0.5, wrong_enum=0.0))
    data, gold = invoices(40)
    with Simulator(quality=quality) as sim:
        out = _run(sim, data)
    evaluation = kx.evaluate(out, gold, Invoice)
    wrong = Counter(field for fields in evaluation.rows["fields"] for field in fields)
    assert wrong["vendor"] > 5 and wrong["items[].name"] > 5  # texts get typos
    assert wrong["currency"] == 0 and wrong["total"] == 0 and wrong["issued"] == 0
