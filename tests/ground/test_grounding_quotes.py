"""``grounding="quotes"``: the schema asks for a supporting quote per field; each value is checked
through its quote.

The augmented schema (``kimi_extract.schema.quotes``) against walle's levels; end to end against
the simulator's extractive answers (quotes copied from the text: grounded; ``quote_faults``:
fabricated or garbled quotes make values unsupported that plain grounding would find); scripted
answers for each kind (the value in its quote, a quote without the value: "quote", a made-up or
empty quote: "none"); a missing ``kx_quotes`` is reasked; the user's columns stay as they are;
the store key changes with the mode; few-shot examples carry quotes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import pytest
from pydantic import BaseModel, Field, create_model

import kimi_extract as kx
from kimi_extract.cli import main as cli_main
from kimi_extract.exceptions import SchemaError
from kimi_extract.ground import align, leaves_of
from kimi_extract.run.request import QUOTES_INSTRUCTION
from kimi_extract.schema import compile_schema
from kimi_extract.schema import dialect as mfjs
from kimi_extract.schema.quotes import QUOTES
from kimi_extract.simulator import Reply, Simulator

from .test_grounding import TEXTS, Deal, answers


def run(sim: Simulator, texts: list[str], model: type[BaseModel] = Deal, **options: Any):
    options.setdefault("store", False)
    ex = kx.Extractor(model, base_url=sim.base_url, api_key=sim.api_key, progress=False, **options)
    return ex.run(pd.DataFrame({"text": texts}), text="text")


def has_quotes(value: Any) -> bool:
    if isinstance(value, dict):
        return QUOTES in value or any(has_quotes(v) for v in value.values())
    if isinstance(value, list):
        return any(has_quotes(v) for v in value)
    return False


# -- the schema --------------------------------------------------------------------------------


class Where(BaseModel):
    city: str
    zip_code: str | None = None


class Entry(BaseModel):
    name: str
    qty: int


class Invoice(BaseModel):
    vendor: str = Field(alias="Vendor Name")
    total: float | None
    status: Literal["paid", "open"]
    tags: list[str]
    where: Where
    entries: list[Entry]
    extra: dict[str, str]
    paid: bool
    required: str  # a walle keyword: sent as required_


def test_the_schema_asks_for_a_quote_per_field_and_passes_walle():
    plain = compile_schema(Invoice)
    quoted = plain.with_quotes()
    assert quoted.quotes and not plain.quotes and quoted.model is Invoice
    assert QUOTES not in json.dumps(plain.schema)  # the plain schema is untouched
    schema = quoted.schema
    root = schema["properties"]
    assert next(iter(root)) == QUOTES and schema["required"][0] == QUOTES  # evidence first
    asked = root[QUOTES]
    assert asked["additionalProperties"] is False
    assert asked["required"] == list(asked["properties"])
    assert asked["properties"] == {
        "Vendor Name": {"type": "string"},
        "total": {"type": "string"},
        "status": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},  # one quote per item
        "required_": {"type": "string"},
    }  # nested objects carry their own; booleans and dicts get none
    for name in ("Where", "Entry"):
        nested = schema["$defs"][name]["properties"][QUOTES]["properties"]
        assert set(nested) == set(schema["$defs"][name]["properties"]) - {QUOTES}
    for level in ("strict", "ultra"):
        assert mfjs.check_schema(schema, level) == []
    assert quoted.with_quotes() is quoted and plain.with_quotes() is quoted  # built once


def test_objects_without_quotable_fields_get_no_quotes_and_a_clash_is_refused():
    class Flags(BaseModel):
        ok: bool
        where: Where

    schema = compile_schema(Flags).with_quotes().schema
    assert QUOTES not in schema["properties"]
    assert QUOTES in schema["$defs"]["Where"]["properties"]

    class Clash(BaseModel):
        kx_quotes: str

    with pytest.raises(SchemaError, match="kx_quotes"):
        compile_schema(Clash).with_quotes()


def test_a_model_at_walles_depth_limit_is_refused_with_a_hint():
    model: type[BaseModel] = create_model("Leaf", word=(str, ...))
    for depth in range(60):
        model = create_model(f"Level{depth}", inner=(model, ...))
        try:
            compiled = compile_schema(model)
        except SchemaError:
            break
        try:
            compiled.with_quotes()
        except SchemaError as error:
            assert "grounding=True" in str(error) and "depth" in str(error)
            return
    pytest.fail("no model deep enough for the quotes to cross walle's depth limit")


# -- end to end --------------------------------------------------------------------------------


def test_copied_quotes_ground_every_leaf_and_the_columns_stay_the_users():
    with Simulator(answers="extractive") as sim:
        out = run(sim, TEXTS, grounding="quotes")
        body = sim.history[-1].body
        plain = run(sim, TEXTS, grounding=True)
    sent = json.dumps(body["response_format"])
    assert QUOTES in sent and QUOTES_INSTRUCTION in body["messages"][0]["content"]
    assert list(out.columns) == list(plain.columns)  # no quotes column: kx_spans holds them
    assert out["kx_error"].isna().all()
    rows = answers(out, Deal)
    assert not has_quotes(rows)
    for text, answer, spans in zip(TEXTS, rows, out["kx_spans"], strict=True):
        Deal.model_validate(answer)
        assert [(s["path"], s["value"]) for s in spans] == leaves_of(answer)
        assert any(s["path"].startswith("seller.address.") for s in spans)
        assert any(s["path"].startswith("lines[0].") for s in spans)
        assert any(s["path"].startswith("tags[") for s in spans)
        for s in spans:
            assert s["kind"] == "exact", s
            assert text[s["start"] : s["end"]] == s["value"]
            quote = s["quote"]
            assert quote and quote in text and s["value"] in quote
            at = text.find(quote, max(0, s["start"] - len(quote)))
            assert at <= s["start"] and s["end"] <= at + len(quote)  # inside its evidence
    assert out["kx_grounded"].tolist() == [1.0] * len(TEXTS)


def test_fabricated_or_garbled_quotes_make_values_unsupported():
    with Simulator(answers="extractive", quote_faults=1.0) as sim:
        out = run(sim, TEXTS, grounding="quotes")
    for text, answer, spans in zip(TEXTS, answers(out, Deal), out["kx_spans"], strict=True):
        # the values are copies plain grounding finds; their quotes are not in the text
        assert all(s.kind == "exact" for s in align(text, leaves_of(answer)))
        for s in spans:
            assert s["kind"] == "none" and s["start"] is None and s["score"] == 0.0, s
            assert s["quote"] and s["quote"] not in text
    assert out["kx_grounded"].tolist() == [0.0] * len(TEXTS)


class Order(BaseModel):
    buyer: str
    seller: str
    count: int
    priority: Literal["high", "low"]
    city: str | None
    colors: list[str]


ORDER_TEXT = (
    "Purchase order: Globex Corporation buys twelve crates from Initech GmbH, shipped to "
    "Springfield. Colours: crimson red and navy blue. Handle urgently."
)


def test_each_kind_from_scripted_quotes(sim):
    answer = {
        QUOTES: {
            "buyer": "Globex Corporation buys",  # the value inside its quote: exact
            "seller": "according to the annex",  # made up, though the value is in the text
            "count": "buys twelve crates",  # "12" is in it, as a word: normalized
            "priority": "Handle urgentyl.",  # an inferred label with fuzzy evidence: quote
            "city": "",  # no quote given
            "colors": ["crimson red and", "purple"],  # one aligned, one not
        },
        "buyer": "Globex Corporation",
        "seller": "Initech GmbH",
        "count": 12,
        "priority": "high",
        "city": "Springfield",
        "colors": ["crimson red", "navy blue"],
    }
    sim.responder = lambda request: Reply(content=answer)
    out = run(sim, [ORDER_TEXT], Order, grounding="quotes")
    spans = {s["path"]: s for s in out["kx_spans"].iloc[0]}
    kinds = {path: s["kind"] for path, s in spans.items()}
    assert kinds == {
        "buyer": "exact",
        "seller": "none",
        "count": "normalized",
        "priority": "quote",
        "city": "none",
        "colors[0]": "exact",
        "colors[1]": "none",
    }
    buyer = spans["buyer"]
    assert ORDER_TEXT[buyer["start"] : buyer["end"]] == "Globex Corporation"
    count = spans["count"]
    assert ORDER_TEXT[count["start"] : count["end"]] == "twelve"
    assert count["value"] == "12"
    priority = spans["priority"]
    assert ORDER_TEXT[priority["start"] : priority["end"]].startswith("Handle urgently")
    assert spans["seller"]["quote"] == "according to the annex"
    assert spans["city"]["quote"] == "" and spans["city"]["start"] is None
    # priority is an inferred label: outside the share (buyer, count, colors[0] of 6)
    assert out["kx_grounded"].iloc[0] == pytest.approx(3 / 6)
    assert out[["buyer", "seller", "count", "priority", "city"]].iloc[0].tolist() == [
        "Globex Corporation",
        "Initech GmbH",
        12,
        "high",
        "Springfield",
    ]


def test_an_answer_without_its_quotes_is_reasked(sim):
    good = {
        QUOTES: {
            "buyer": "Globex Corporation",
            "seller": "Initech GmbH",
            "count": "twelve crates",
            "priority": "urgently",
            "city": "Springfield",
            "colors": ["crimson red"],
        },
        "buyer": "Globex Corporation",
        "seller": "Initech GmbH",
        "count": 12,
        "priority": "high",
        "city": "Springfield",
        "colors": ["crimson red"],
    }
    bare = {key: value for key, value in good.items() if key != QUOTES}
    replies = iter([bare, good])
    sim.responder = lambda request: Reply(content=next(replies))
    out = run(sim, [ORDER_TEXT], Order, grounding="quotes")
    assert out["kx_error"].isna().all() and out["kx_attempts"].tolist() == [2]
    reask = sim.history[-1].body["messages"][-1]["content"]
    assert f"{QUOTES}: Field required" in reask
    assert out["kx_grounded"].iloc[0] == 1.0


def test_the_store_key_follows_the_mode_and_a_rerun_recomputes_the_quoted_spans(tmp_path):
    store = tmp_path / "store.sqlite3"
    user = {"role": "user", "content": TEXTS[0]}
    keys = {}
    for mode in (False, True, "quotes"):
        ex = kx.Extractor(Deal, base_url="http://127.0.0.1:9", api_key="k", grounding=mode)
        keys[mode] = ex.engine.settings(1).store_key(user)
    assert keys[False] == keys[True] != keys["quotes"]  # a different schema, another request
    with Simulator(answers="extractive", perturb=0.5) as sim:
        run(sim, TEXTS, grounding=True, store=store)
        requests = len(sim.history)
        first = run(sim, TEXTS, grounding="quotes", store=store)
        assert len(sim.history) == requests + len(TEXTS)  # not served the unquoted answers
        second = run(sim, TEXTS, grounding="quotes", store=store)
        assert len(sim.history) == requests + len(TEXTS)  # served from the store
    assert second["kx_from_store"].all() and not first["kx_from_store"].any()
    assert list(second["kx_spans"]) == list(first["kx_spans"])
    assert all(s["quote"] for cell in second["kx_spans"] for s in cell)


def test_examples_show_quotes_in_the_answers():
    class Who(BaseModel):
        name: str
        age: int | None

    example = ("Ada, aged 36", Who(name="Ada", age=36))
    ex = kx.Extractor(
        Who, base_url="http://127.0.0.1:9", api_key="k", grounding="quotes", examples=[example]
    )
    shown = json.loads(ex.engine.static_messages[-1]["content"])
    assert shown == {QUOTES: {"name": "Ada", "age": "36"}, "name": "Ada", "age": 36}


def test_document_chunks_lend_their_quotes_to_the_merged_row(tmp_path):
    class Facts(BaseModel):
        party: str
        items: list[str]

    paragraphs = [
        "Northwind Traders Limited agrees to deliver four hundred oak barrels to Contoso.",
        "Payment is due within thirty days of delivery to the Rotterdam warehouse.",
        "Either party may end this agreement with ninety days written notice.",
    ]
    path = tmp_path / "contract.txt"
    path.write_text("\n\n".join(paragraphs * 3), encoding="utf-8")
    results = {}
    for faults in (0.0, 1.0):
        with Simulator(answers="extractive", quote_faults=faults) as sim:
            ex = kx.Extractor(
                Facts,
                base_url=sim.base_url,
                api_key=sim.api_key,
                progress=False,
                grounding="quotes",
                store=False,
            )
            out = ex.run_documents([str(path)], chunk_chars=200, text_column="text")
            assert len(sim.history) > 1  # several chunks, merged into one row
        results[faults] = out
    text = results[0.0]["text"].iloc[0]
    spans = results[0.0]["kx_spans"].iloc[0]
    assert len(spans) > 2 and all(s["quote"] is not None for s in spans)
    grounded = [s for s in spans if s["kind"] != "none"]
    assert len(grounded) >= len(spans) // 2  # a few copy the chunk header, not evidence
    for s in grounded:
        assert s["kind"] == "exact" and text[s["start"] : s["end"]] == s["value"]
        assert s["quote"] in text
    assert all(s["kind"] == "none" for s in results[1.0]["kx_spans"].iloc[0])


def test_cli_grounding_quotes_flag(tmp_path):
    examples = Path(__file__).resolve().parents[2] / "examples"
    out = tmp_path / "out.parquet"
    args = ["run", str(examples / "reviews.csv"), "--schema"]
    args += [f"{examples / 'review_schema.py'}:Review", "--text", "review", "--grounding-quotes"]
    assert cli_main([*args, "--simulate", "--no-progress", "--out", str(out)]) == 0
    frame = pd.read_parquet(out)
    spans = [json.loads(cell) for cell in frame["kx_spans"]]
    quoted = [s for cell in spans for s in cell if s["quote"] is not None]
    assert quoted  # the schema asked for quotes and the spans carry them
    assert not any(QUOTES in column for column in frame.columns)


def test_json_object_mode_carries_the_quoted_schema_in_the_prompt():
    with Simulator(answers="extractive") as sim:
        out = run(sim, TEXTS, grounding="quotes", mode="json_object")
        system = sim.history[-1].body["messages"][0]["content"]
    assert QUOTES in system and QUOTES_INSTRUCTION in system
    assert out["kx_error"].isna().all() and not has_quotes(answers(out, Deal))
    assert out["kx_grounded"].tolist() == [1.0] * len(TEXTS)
    spans = [s for cell in out["kx_spans"] for s in cell]
    assert all(s["quote"] and s["kind"] == "exact" for s in spans)  # each value in its quote


# -- a quote vouches only for a value found inside it -------------------------------------------

MEETING = (
    "The meeting is in Berlin on Monday. The fee is 120.5 euros per person. "
    "Lunch is served in Berlin too, at the hotel."
)


class Meeting(BaseModel):
    city: str
    fee: float


def _quoted(answer_quotes: dict[str, str], city: str, fee: float, text: str = MEETING):
    answer = {QUOTES: answer_quotes, "city": city, "fee": fee}
    with Simulator(responder=lambda request: Reply(content=answer)) as sim:
        out = run(sim, [text], Meeting, grounding="quotes")
    return {s["path"]: s for s in out["kx_spans"].iloc[0]}, out


def test_a_made_up_value_is_not_vouched_for_by_a_true_quote():
    true_sentence = "The meeting is in Berlin on Monday."
    spans, out = _quoted({"city": true_sentence, "fee": true_sentence}, "Paris", 99.5)
    assert spans["city"]["kind"] == spans["fee"]["kind"] == "none"
    assert spans["city"]["start"] is None and out["kx_grounded"].iloc[0] == 0.0


def test_a_quote_of_the_whole_input_vouches_for_nothing():
    long_text = MEETING + " " + " ".join(f"Note {i}: nothing else happens." for i in range(30))
    spans, _ = _quoted({"city": long_text, "fee": long_text}, "Berlin", 120.5, text=long_text)
    assert spans["city"]["kind"] == spans["fee"]["kind"] == "none"


def test_a_value_inside_its_quote_is_grounded_at_the_quotes_occurrence():
    quote = "Lunch is served in Berlin too"
    spans, out = _quoted({"city": quote, "fee": "The fee is 120.5 euros"}, "Berlin", 120.5)
    assert spans["city"]["kind"] == "exact"
    assert spans["city"]["start"] == MEETING.index(quote) + quote.index("Berlin")
    assert spans["fee"]["kind"] == "exact" and out["kx_grounded"].iloc[0] == 1.0


def test_a_near_miss_inside_its_quote_is_near_not_grounded():
    spans, _ = _quoted({"city": "", "fee": "The fee is 120.5 euros"}, "Berlin", 129.5)
    assert spans["fee"]["kind"] == "none"  # a number: whole tokens only, no near
    spans, _ = _quoted(
        {"city": "The meeting is in Berlin on Monday.", "fee": ""}, "meeting is in Bern", 1.0
    )
    assert spans["city"]["kind"] in ("near", "none")
    assert spans["city"]["kind"] != "exact"


def test_the_quote_bound_is_three_times_the_value_plus_a_sentence():
    from kimi_extract.run.grounding import QUOTE_FACTOR, QUOTE_SLACK, vouches

    value = "Berlin"
    assert vouches("x" * (QUOTE_FACTOR * len(value) + QUOTE_SLACK), value)
    assert not vouches("x" * (QUOTE_FACTOR * len(value) + QUOTE_SLACK + 1), value)
