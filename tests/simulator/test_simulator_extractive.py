"""The simulator's extractive answers: string fields copy spans of the user's text.

``Simulator(answers="extractive", perturb=...)`` makes offline grounding tests possible: every
plain string of a JSON answer is ``text[start:end]`` of the last user message (deterministic per
request), or that span perturbed by case, spacing, a typo or full-width forms; the aligner finds
each with the kind its perturbation calls for.
"""

from __future__ import annotations

import random
from typing import Any

import httpx
import pytest

from kimi_extract.exceptions import ConfigurationError
from kimi_extract.ground import align, fold
from kimi_extract.simulator import Simulator
from kimi_extract.simulator.extractive import PERTURBATIONS, Source, perturb

TEXT = (
    "Invoice No. 2024-117, issued by Acme, Inc. (Lyon) to Globex; total: EUR 1,200.50.\n"
    "合同由北京字节跳动科技有限公司与上海寻梦信息技术有限公司签署。契約書は株式会社サンプルが作成した。"
)
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "vendor": {"type": "string"},
        "buyer": {"type": "string"},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "qty": {"type": "integer"}},
                "required": ["name", "qty"],
                "additionalProperties": False,
            },
        },
        "issued": {"type": "string", "format": "date"},
    },
    "required": ["vendor", "buyer", "items", "issued"],
    "additionalProperties": False,
}


def _body(text: str = TEXT) -> dict[str, Any]:
    return {
        "model": "kimi-k3.1-pro",
        "messages": [
            {"role": "system", "content": "Extract the invoice."},
            {"role": "user", "content": text},
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "invoice", "strict": True, "schema": SCHEMA},
        },
        "reasoning_effort": "low",
    }


def _answer(sim: Simulator, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(
        f"{sim.base_url}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {sim.api_key}"},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    import json

    return json.loads(response.json()["choices"][0]["message"]["content"])


def _strings(answer: dict[str, Any]) -> list[str]:
    return [answer["vendor"], answer["buyer"], *(item["name"] for item in answer["items"])]


def test_extractive_strings_are_spans_of_the_user_text_and_deterministic():
    bodies = [_body(TEXT.replace("Lyon", city)) for city in ("Lyon", "Paris", "Nice", "Metz")]
    with Simulator(answers="extractive") as sim:
        answers = [_answer(sim, body) for body in bodies]
        again = _answer(sim, bodies[0])
    assert again == answers[0]
    for body, answer in zip(bodies, answers, strict=True):
        text = body["messages"][1]["content"]
        for value in _strings(answer):
            assert value and value in text, value
        assert answer["issued"][4] == "-"  # formats are kept: a date, not a span
    # joined words ("Acme Inc") are not spans of a text with punctuation: the default mode differs
    with Simulator() as sim:
        generated = [_answer(sim, body) for body in bodies]
    assert any(
        value not in body["messages"][1]["content"]
        for body, answer in zip(bodies, generated, strict=True)
        for value in _strings(answer)
    )


def test_perturbed_strings_fold_to_spans_and_the_aligner_finds_them():
    with Simulator(answers="extractive", perturb=1.0, perturb_kinds=("width", "case")) as sim:
        answer = _answer(sim, _body())
    folded = fold(TEXT)
    for value in _strings(answer):
        assert value not in TEXT or value.swapcase() == value  # changed unless it cannot change
        assert fold(value) in folded
    spans = align(TEXT, [(str(i), v) for i, v in enumerate(_strings(answer))])
    assert all(s.kind in ("normalized", "exact") for s in spans), spans


@pytest.mark.parametrize("seed", range(40))
def test_drawn_spans_are_grounded_with_the_kind_their_perturbation_calls_for(seed):
    rng = random.Random(seed)
    source = Source(TEXT, [], perturb=0.8)
    for _ in range(10):
        drawn = source.draw(rng)
        assert drawn is not None
        original = TEXT[drawn.start : drawn.end]
        if drawn.perturbation is None:
            assert drawn.value == original
        (span,) = align(TEXT, [("x", drawn.value)])
        expected = {
            None: {"exact"},
            "case": {"normalized"},
            "spacing": {"normalized"},
            "width": {"normalized"},
            # a typo in a short or repeated span may fall below the fuzzy threshold; one that
            # changes a digit, a CJK character or a short word reads as another value: a near
            # miss, never grounded
            "typo": {"fuzzy", "near", "none"},
        }[drawn.perturbation]
        assert span.kind in expected, (drawn, span)
        if span.kind in ("exact", "normalized") and TEXT.count(original) == 1:
            assert (span.start, span.end) == (drawn.start, drawn.end), (drawn, span)


def test_cjk_spans_are_short_runs_of_characters():
    text = "北京字节跳动科技有限公司与上海寻梦信息技术有限公司签署了合同"
    source = Source(text, [])
    for seed in range(50):
        drawn = source.draw(random.Random(seed))
        assert drawn is not None and 2 <= len(drawn.value) <= 8
        assert text[drawn.start : drawn.end] == drawn.value


@pytest.mark.parametrize("kind", PERTURBATIONS)
def test_each_perturbation_changes_the_value(kind):
    changed = perturb(random.Random(0), "Acme Corporation Ltd", kind)
    assert changed is not None and changed != "Acme Corporation Ltd"
    if kind != "typo":
        assert fold(changed) == fold("Acme Corporation Ltd")
    else:
        assert len(changed) == len("Acme Corporation Ltd")


def test_bad_options_are_refused():
    with pytest.raises(ConfigurationError, match="answers"):
        Simulator(answers="abstractive")
    with pytest.raises(ConfigurationError, match="perturb"):
        Simulator(answers="extractive", perturb=1.5)
    with pytest.raises(ConfigurationError, match="perturb_kinds"):
        Simulator(answers="extractive", perturb_kinds=("rot13",))


def test_the_simulate_command_takes_the_options(monkeypatch):
    from kimi_extract import cli

    seen: dict[str, Any] = {}
    monkeypatch.setattr(
        "kimi_extract.simulator.serve", lambda **options: seen.update(options), raising=True
    )
    args = cli.build_parser().parse_args(
        ["simulate", "--answers", "extractive", "--perturb", "0.25", "--quote-faults", "0.5"]
        + ["--port", "0"]
    )
    assert args.func(args) == 0
    assert seen["answers"] == "extractive" and seen["perturb"] == 0.25
    assert seen["quote_faults"] == 0.5
