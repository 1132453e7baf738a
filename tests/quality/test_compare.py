"""kx.compare: candidates on the same rows against the simulator's quality model.

Rows carry an answer key (``with_answer_key``), so the simulated model answers from it with
mistakes at the rates its ``QualityModel`` sets per (model, effort): accuracy is measurable
offline and known in advance. Every test was checked to fail without the behaviour it names.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import pytest
from pydantic import BaseModel, Field

import kimi_extract as kx
from kimi_extract.exceptions import ConfigurationError, EvaluationError
from kimi_extract.simulator import Simulator
from kimi_extract.simulator.quality import ErrorRates, QualityModel, with_answer_key


class Item(BaseModel):
    name: str
    quantity: int = Field(ge=1)
    price: float


class Invoice(BaseModel):
    vendor: str
    currency: Literal["EUR", "USD", "GBP"]
    issued: date
    due: date | None
    paid: bool
    total: float
    items: list[Item]


_VENDORS = ("Acme GmbH", "Nordlicht AG", "Zeta Ltd", "Okawa Trading", "Brix & Sons", "Lumen SA")
_GOODS = ("desk lamp", "office chair", "paper ream", "ink cartridge", "stapler", "monitor arm")


def invoices(n: int, seed: int = 0) -> tuple[pd.DataFrame, list[Invoice]]:
    """``n`` invoice texts (each with its answer key) and their gold answers."""
    rng = random.Random(seed)
    texts, gold = [], []
    for number in range(n):
        items = [
            Item(
                name=rng.choice(_GOODS),
                quantity=rng.randint(1, 12),
                price=round(rng.uniform(2, 300), 2),
            )
            for _ in range(rng.randint(1, 4))
        ]
        issued = date(2024, 1, 1) + timedelta(days=rng.randrange(365))
        invoice = Invoice(
            vendor=rng.choice(_VENDORS),
            currency=rng.choice(("EUR", "USD", "GBP")),
            issued=issued,
            due=issued + timedelta(days=30) if rng.random() < 0.7 else None,
            paid=rng.random() < 0.5,
            total=round(sum(i.quantity * i.price for i in items), 2),
            items=items,
        )
        lines = "; ".join(f"{i.quantity} x {i.name} at {i.price:.2f}" for i in items)
        text = (
            f"Invoice {number:04d} from {invoice.vendor}, issued {issued}. {lines}. "
            f"Total {invoice.total:.2f} {invoice.currency}."
        )
        texts.append(with_answer_key(text, invoice))
        gold.append(invoice)
    return pd.DataFrame({"text": texts}), gold


def _quality(rates: dict[tuple[str, str], float]) -> QualityModel:
    return QualityModel({key: ErrorRates.uniform(rate) for key, rate in rates.items()})


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator() as server:  # the default quality model: the illustrative rates
        yield server


def _connection(server: Simulator, **extra: Any) -> dict[str, Any]:
    return {"base_url": server.base_url, "api_key": server.api_key, "progress": False, **extra}


PRO = "kimi-k3.1-pro"


def test_compare_ranks_candidates_by_their_configured_error_rates() -> None:
    rates = {(PRO, "low"): 0.2, (PRO, "high"): 0.07, (PRO, "max"): 0.01}
    data, gold = invoices(150)
    with Simulator(quality=_quality(rates)) as server:
        result = kx.compare(
            {
                "medium": {"model": PRO, "reasoning_effort": "high"},
                "worst": {"model": PRO, "reasoning_effort": "low"},
                "best": {"model": PRO, "reasoning_effort": "max"},
            },
            data,
            gold,
            model=Invoice,
            text="text",
            store=False,
            **_connection(server),
        )
    table = result.table
    assert list(table.index) == ["medium", "worst", "best"]  # the order given
    for metric in ("micro_f1", "row_exact"):
        assert table.loc["best", metric] > table.loc["medium", metric] > table.loc["worst", metric]
    assert (table["errors"] == 0).all() and (table["rows"] == 150).all()
    # a real difference, detected on the same rows
    difference = result.better("best", "worst")
    assert difference.low > 0 and difference.p_value < 0.01


def test_illustrative_defaults_more_effort_fewer_mistakes_more_reasoning(sim: Simulator) -> None:
    data, gold = invoices(120, seed=1)
    result = kx.compare(
        {effort: {"model": PRO, "reasoning_effort": effort} for effort in ("low", "high", "max")},
        data,
        gold,
        model=Invoice,
        text="text",
        **_connection(sim),
    )
    t = result.table
    assert t.loc["max", "micro_f1"] > t.loc["high", "micro_f1"] > t.loc["low", "micro_f1"]
    assert t.loc["low", "micro_f1"] < 1.0  # the defaults do make mistakes
    reasoning = t["reasoning_tokens"]
    assert reasoning["max"] > reasoning["high"] > reasoning["low"]
    assert t.loc["max", "cost"] > t.loc["high", "cost"] > t.loc["low", "cost"]


def test_paired_test_does_not_find_a_difference_between_equal_rates() -> None:
    # two models with the same rates: independent mistakes, no real difference
    rates = {(PRO, "low"): 0.06, ("kimi-k3.1-pro-highspeed", "low"): 0.06}
    data, gold = invoices(150, seed=2)
    with Simulator(quality=_quality(rates)) as server:
        result = kx.compare(
            {
                "pro": {"model": PRO},
                "highspeed": {"model": "kimi-k3.1-pro-highspeed"},
            },
            data,
            gold,
            model=Invoice,
            text="text",
            **_connection(server),
        )
    difference = result.better("highspeed", "pro")
    assert difference.low < 0 < difference.high and difference.p_value > 0.05
    scores = {name: result.evaluations[name].rows["score"] for name in ("pro", "highspeed")}
    assert (scores["pro"] != scores["highspeed"]).sum() > 10  # each made its own mistakes
    # the same accuracy at twice the price (kimi.py's prices): highspeed is dominated
    assert result.table.loc["highspeed", "cost"] > 1.8 * result.table.loc["pro", "cost"]


def test_estimate_only_prices_every_candidate_and_sends_nothing(sim: Simulator) -> None:
    data, gold = invoices(40)
    candidates = {
        "low": {"reasoning_effort": "low"},
        "max": {"reasoning_effort": "max"},
        "k3": {"model": "kimi-k3", "reasoning_effort": "max"},
    }
    table = kx.compare(
        candidates, data, gold, model=Invoice, text="text", estimate_only=True, **_connection(sim)
    )
    assert sim.history == [] and sim.stats()["requests"] == 0
    assert list(table.index) == list(candidates)
    for name, options in candidates.items():
        alone = kx.Extractor(Invoice, **options, **_connection(sim)).estimate(data, text="text")
        assert table.loc[name, "cost"] == pytest.approx(alone.cost)
        assert table.loc[name, "requests"] == 40
    assert table.loc["max", "cost"] > table.loc["low", "cost"]
    assert sim.history == []


def test_a_shared_store_makes_a_rerun_free_and_keeps_candidates_apart(
    sim: Simulator, tmp_path: Path
) -> None:
    data, gold = invoices(30)
    candidates = {
        "low": {"reasoning_effort": "low"},
        "high": {"reasoning_effort": "high"},
        "k3": {"model": "kimi-k3", "reasoning_effort": "max"},
    }
    options = _connection(sim, store=tmp_path / "compare.sqlite3")
    first = kx.compare(candidates, data, gold, model=Invoice, text="text", **options)
    # every candidate asked for its own answers: store keys differ by model and effort
    assert len(sim.history) == 30 * 3
    second = kx.compare(candidates, data, gold, model=Invoice, text="text", **options)
    assert len(sim.history) == 30 * 3  # nothing sent again
    assert (second.table["from_store"] == 30).all() and (second.table["paid"] == 0).all()
    columns = ["micro_f1", "row_exact", "cost", "prompt_tokens", "reasoning_tokens"]
    pd.testing.assert_frame_equal(first.table[columns], second.table[columns])
    assert first.table.loc["low", "micro_f1"] != first.table.loc["high", "micro_f1"]


def test_cost_is_the_candidates_own_though_it_read_another_ones_cached_prompts(
    tmp_path: Path,
) -> None:
    data, gold = invoices(40, seed=3)
    candidates = {"low": {"reasoning_effort": "low"}, "high": {"reasoning_effort": "high"}}
    with Simulator() as server:
        result = kx.compare(
            candidates, data, gold, model=Invoice, text="text", **_connection(server)
        )
    t = result.table
    # "high" ran second on the same prompts: it read them from the cache "low" wrote
    assert t.loc["high", "cached_tokens"] > t.loc["low", "cached_tokens"]
    assert t.loc["high", "paid"] < t.loc["high", "cost"]
    assert t.loc["low", "paid"] == pytest.approx(t.loc["low", "cost"])
    with Simulator() as fresh:  # "high" on its own, cold cache
        alone = kx.Extractor(Invoice, reasoning_effort="high", **_connection(fresh))
        alone.run(data, text="text")
    assert alone.last_run is not None
    assert t.loc["high", "cost"] == pytest.approx(alone.last_run.usage.cost, rel=1e-9)


def test_candidates_may_be_extractors_configs_or_dicts(sim: Simulator) -> None:
    data, gold = invoices(12)
    extractor = kx.Extractor(Invoice, reasoning_effort="high", **_connection(sim))
    config = kx.ExtractorConfig(reasoning_effort="max", **_connection(sim))
    result = kx.compare(
        {
            "extractor": extractor,
            "config": config,
            "dict": {"model": "kimi-k3", "reasoning_effort": "max"},
        },
        data,
        gold,
        text="text",  # model= comes from the extractor
        base=_connection(sim),
    )
    assert list(result.table["effort"]) == ["high", "max", "max"]
    assert list(result.table["model"]) == [PRO, PRO, "kimi-k3"]
    assert len(sim.history) == 36


def test_only_the_rows_gold_covers_are_sent(sim: Simulator) -> None:
    data, gold = invoices(20)
    data.index = [f"r{i}" for i in range(20)]
    gold_frame = pd.DataFrame([g.model_dump() for g in gold], index=data.index).iloc[5:12]
    result = kx.compare(
        {"only": {}}, data, gold_frame, model=Invoice, text="text", **_connection(sim)
    )
    assert len(sim.history) == 7
    assert list(result.outputs["only"].index) == [f"r{i}" for i in range(5, 12)]
    assert result.table.loc["only", "rows"] == 7


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (
            lambda d, g, c: kx.compare(
                {"a": {"reasoning_efort": "low"}}, d, g, model=Invoice, text="text", **c
            ),
            ConfigurationError,
            ["'a'", "'reasoning_efort'", "did you mean 'reasoning_effort'"],
        ),
        (
            lambda d, g, c: kx.compare(
                {"a": {}}, d, g, model=Invoice, text="text", concurency=4, **c
            ),
            ConfigurationError,
            ["'concurency'", "did you mean 'concurrency'"],
        ),
        (
            lambda d, g, c: kx.compare(
                {"a": {"progress": False}}, d, g, model=Invoice, text="text", **c
            ),
            ConfigurationError,
            ["'a'", "progress"],
        ),
        (
            lambda d, g, c: kx.compare({"a": {}}, d, g, model="kimi-k3", text="text", **c),
            ConfigurationError,
            ["output model"],
        ),
        (
            lambda d, g, c: kx.compare({"a": {}}, d, g, text="text", **c),
            ConfigurationError,
            ["model=OutputModel"],
        ),
        (
            lambda d, g, c: kx.compare(
                {"a": {"reasoning_effort": "lots"}}, d, g, model=Invoice, text="text", **c
            ),
            ConfigurationError,
            ["'a'", "reasoning_effort"],
        ),
        (
            lambda d, g, c: kx.compare(
                {"a": {}}, d, g.assign(color="red"), model=Invoice, text="text", **c
            ),
            EvaluationError,
            ["color"],
        ),
        (
            lambda d, g, c: kx.compare(
                {"a": {}}, d, g.assign(total="lots"), model=Invoice, text="text", **c
            ),
            EvaluationError,
            ["total", "row 0"],
        ),
        (
            lambda d, g, c: kx.compare({"a": {}}, d.iloc[:5], g, model=Invoice, text="text", **c),
            EvaluationError,
            ["gold row 5", "no row in data"],
        ),
        (
            lambda d, g, c: kx.compare({"a": {}}, d, g, model=Invoice, text="body", **c),
            ConfigurationError,
            ["body"],
        ),
        (
            lambda d, g, c: kx.compare({}, d, g, model=Invoice, text="text", **c),
            ConfigurationError,
            ["non-empty"],
        ),
    ],
)
def test_bad_input_is_a_clear_error_before_any_request(
    sim: Simulator, call: Any, error: type[Exception], words: list[str]
) -> None:
    data, gold = invoices(8)
    gold_frame = pd.DataFrame([g.model_dump() for g in gold])
    with pytest.raises(error) as raised:
        call(data, gold_frame, _connection(sim))
    for word in words:
        assert word in str(raised.value)
    assert sim.history == []


def test_extractors_of_different_models_are_refused(sim: Simulator) -> None:
    class Other(BaseModel):
        vendor: str

    data, gold = invoices(4)
    candidates = {
        "a": kx.Extractor(Invoice, **_connection(sim)),
        "b": kx.Extractor(Other, **_connection(sim)),
    }
    with pytest.raises(ConfigurationError, match="one output model"):
        kx.compare(candidates, data, gold, text="text")
    with pytest.raises(ConfigurationError, match="'b' extracts Other"):
        kx.compare(candidates, data, gold, model=Invoice, text="text")
    assert sim.history == []


def test_candidates_of_one_model_run_back_to_back(sim: Simulator) -> None:
    data, gold = invoices(6)
    candidates = {
        "pro-low": {"reasoning_effort": "low"},
        "k3": {"model": "kimi-k3", "reasoning_effort": "max"},
        "pro-high": {"reasoning_effort": "high"},
    }
    result = kx.compare(candidates, data, gold, model=Invoice, text="text", **_connection(sim))
    sent = [(e.body["model"], e.body["reasoning_effort"]) for e in sim.history if e.body]
    assert sent == [(PRO, "low")] * 6 + [(PRO, "high")] * 6 + [("kimi-k3", "max")] * 6
    assert list(result.table.index) == list(candidates)  # the table keeps the order given


def test_a_list_of_texts_is_matched_to_gold_by_position(sim: Simulator) -> None:
    data, gold = invoices(10)
    result = kx.compare({"only": {}}, list(data["text"]), gold, model=Invoice, **_connection(sim))
    assert result.table.loc["only", "rows"] == 10 and len(sim.history) == 10
    assert result.table.loc["only", "micro_f1"] > 0.8  # answered from each row's own key
