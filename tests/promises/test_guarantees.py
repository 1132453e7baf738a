"""The Reliability promises (docs/reliability.md) on the store, budget, output and configuration
side (#12).

Each test names the promise it holds; each was checked to fail on the code before the fix.
"""

from __future__ import annotations

import math
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    computed_field,
    create_model,
    field_serializer,
    field_validator,
)

import kimi_extract as kx
import kimi_extract.run.store_sqlite as store_module
from kimi_extract.run.store import ResultStore
from kimi_extract.simulator import Reply, Simulator

from ..conftest import INTERRUPTIBLE, Review, chat_requests, ok_exchanges
from ..pg import BACKENDS, Backend

ROOT = Path(__file__).parents[2]


# -- 2. Resume returns exactly the first run ---------------------------------------------------


class Secretive(BaseModel):
    name: str
    token: SecretStr


class Scaled(BaseModel):
    share: float

    @field_validator("share")
    @classmethod
    def percent(cls, v: float) -> float:
        return v / 100 if v > 1 else v


class Appended(BaseModel):
    name: str

    @field_validator("name")
    @classmethod
    def bang(cls, v: str) -> str:
        return v + "!"


class Aliased(BaseModel):
    full_name: str = Field(validation_alias="fullName", serialization_alias="display_name")


class Serialized(BaseModel):
    amount: float

    @field_serializer("amount")
    def money(self, v: float) -> str:
        return f"${v:.2f}"


class Computed(BaseModel):
    model_config = ConfigDict(extra="forbid")
    a: int
    b: int

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total(self) -> int:
        return self.a + self.b


class Excluded(BaseModel):
    name: str
    internal: str = Field(exclude=True)


class Inner(BaseModel):
    label: str
    score: int | None = None


class Nested(BaseModel):
    items: list[Inner]
    counts: dict[str, int]
    note: str | None = None


SHAPES: list[tuple[type[BaseModel], Any]] = [
    (Secretive, {"name": "a", "token": "s3cret"}),
    (Scaled, {"share": 250}),
    (Appended, {"name": "bob"}),
    (Aliased, {"fullName": "Ann Lee"}),
    (Serialized, {"amount": 3.5}),
    (Computed, {"a": 1, "b": 2}),
    (Excluded, {"name": "a", "internal": "kept out of dumps"}),
    (Nested, None),  # the simulator's own schema-valid answer (dicts as key/value lists)
    (Review, None),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("model", "content"), SHAPES, ids=[m.__name__ for m, _ in SHAPES])
def test_a_resumed_run_equals_the_first_and_sends_nothing(
    sim, make_extractor, backend: Backend, model, content, stream
):
    if content is not None:
        sim.responder = lambda r: Reply(content=content)
    store = backend.location
    rows = [f"row {i}" for i in range(4)]
    first = make_extractor(model, store=store, stream=stream).run(rows)
    assert first["kx_error"].isna().all(), first["kx_error"].tolist()
    sent = len(chat_requests(sim))
    rerun = make_extractor(model, store=store, stream=stream).run(rows)
    assert len(chat_requests(sim)) == sent  # zero requests
    assert rerun["kx_from_store"].all()
    columns = list(model.model_fields)
    assert rerun[columns].equals(first[columns])
    assert [repr(v) for v in rerun[columns].to_numpy().ravel()] == [
        repr(v) for v in first[columns].to_numpy().ravel()
    ]


FIELD_TYPES: list[Any] = [
    int,
    float,
    str,
    bool,
    list[str],
    int | None,
    dict[str, int],
    list[Inner],
    Inner,
    SecretStr,
]
TWISTS = ["plain", "scale", "append", "alias", "serializer", "exclude"]


def _twisted_model(fields: list[tuple[Any, str]], computed: bool) -> type[BaseModel]:
    """A model whose fields carry validators that change values, aliases, serializers or
    exclusions: any of them breaks a store that keeps a re-serialized value."""
    definitions: dict[str, Any] = {}
    validators: dict[str, Any] = {}
    for i, (annotation, twist) in enumerate(fields):
        name = f"f{i}"
        if twist == "alias":
            definitions[name] = (
                annotation,
                Field(validation_alias=f"in{i}", serialization_alias=f"out{i}"),
            )
        elif twist == "exclude":
            definitions[name] = (annotation, Field(exclude=True))
        else:
            definitions[name] = (annotation, ...)
        if twist == "scale" and annotation in (int, float):
            validators[f"v{i}"] = field_validator(name)(classmethod(lambda cls, v: v * 3 + 1))
        elif twist == "append" and annotation is str:
            validators[f"v{i}"] = field_validator(name)(classmethod(lambda cls, v: v + "!"))
        elif twist == "serializer":
            validators[f"s{i}"] = field_serializer(name)(lambda self, v: repr(v))
    return create_model(  # type: ignore[call-overload, no-any-return]
        "Twisted",
        __base__=_ForbidWithTotal if computed else _Forbid,
        __validators__=validators,
        **definitions,
    )


class _Forbid(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _ForbidWithTotal(_Forbid):
    @computed_field  # type: ignore[prop-decorator]
    @property
    def total(self) -> int:
        return len(type(self).model_fields)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    fields=st.lists(
        st.tuples(st.sampled_from(FIELD_TYPES), st.sampled_from(TWISTS)), min_size=1, max_size=5
    ),
    computed=st.booleans(),
)
@pytest.mark.parametrize("kind", BACKENDS)
def test_resume_equals_the_first_run_for_any_model_shape(
    sim, make_extractor, new_store, kind, fields, computed
):
    model = _twisted_model(fields, computed)
    store = new_store(kind).location
    rows = [f"row {i}" for i in range(3)]
    first = make_extractor(model, store=store).run(rows)
    assert first["kx_error"].isna().all(), first["kx_error"].tolist()
    sent = len(chat_requests(sim))
    rerun = make_extractor(model, store=store).run(rows)
    assert len(chat_requests(sim)) == sent
    columns = list(model.model_fields)
    assert rerun[columns].equals(first[columns])


def test_an_excluded_field_gets_its_column(sim, make_extractor):
    sim.responder = lambda r: Reply(content={"name": "a", "internal": "x"})
    out = make_extractor(Excluded).run(["one", "two"])
    assert out["internal"].tolist() == ["x", "x"] and out["kx_error"].isna().all()


def _item_model(reject: str | None) -> type[BaseModel]:
    class Item(BaseModel):  # the same name and fields: the same schema, so the same store key
        name: str

        @field_validator("name")
        @classmethod
        def check(cls, v: str) -> str:
            if v == reject:
                raise ValueError("rejected by the new rule")
            return v

    return Item


def test_a_stored_answer_the_model_now_rejects_is_asked_again(
    sim, make_extractor, backend: Backend
):
    sim.responder = lambda r: Reply(content={"name": "bob" if "old" in r.user_text else "ann"})
    store = backend.location
    make_extractor(_item_model(None), store=store).run(["old row", "new row"])
    stricter = make_extractor(_item_model("bob"), store=store, validation_retries=0)
    assert stricter.estimate(["old row", "new row"]).stored_rows == 1  # only "ann" still passes
    sent = len(chat_requests(sim))
    out = stricter.run(["old row", "new row"])
    assert out["kx_from_store"].tolist() == [False, True]
    assert len(chat_requests(sim)) == sent + 1
    # An accepted new answer replaces the stale one (the key was taken): the next run sends none.
    sim.responder = lambda r: Reply(content={"name": "carl" if "old" in r.user_text else "ann"})
    assert stricter.run(["old row", "new row"])["name"].tolist() == ["carl", "ann"]
    sent = len(chat_requests(sim))
    again = stricter.run(["old row", "new row"])
    assert again["kx_from_store"].all() and again["name"].tolist() == ["carl", "ann"]
    assert len(chat_requests(sim)) == sent


# -- 3. The store belongs to an endpoint -------------------------------------------------------


def test_answers_from_one_endpoint_are_never_served_to_another(
    sim, make_extractor, backend: Backend
):
    store = backend.location
    rows = [f"row {i}" for i in range(3)]
    make_extractor(store=store).run(rows)
    same = make_extractor(store=store)
    assert same.estimate(rows).stored_rows == 3  # the lookup can hit
    for other in (
        {"base_url": "https://direct.evolink.ai"},
        {"base_url": "https://my-proxy.example/v1"},
        {},  # no base_url: the real API's routed hosts
    ):
        real = kx.Extractor(Review, api_key="sk-real", store=store, progress=False, **other)
        assert real.estimate(rows).stored_rows == 0, other
    with Simulator() as second:  # loopback servers are one endpoint: --simulate resumes
        ex = kx.Extractor(
            Review, base_url=second.base_url, api_key=second.api_key, store=store, progress=False
        )
        assert ex.run(rows)["kx_from_store"].all() and chat_requests(second) == []


def test_a_base_url_spelling_is_the_same_endpoint(sim, make_extractor, tmp_path: Path):
    store = tmp_path / "s.sqlite3"
    make_extractor(store=store).run(["a"])
    spelled = sim.base_url.replace("http://", "HTTP://") + "/v1/"
    assert make_extractor(store=store, base_url=spelled).estimate(["a"]).stored_rows == 1


def test_simulated_answers_never_reach_a_real_run(monkeypatch, tmp_path: Path, capsys):
    """The quick start with --simulate, then the README's real-API command."""
    from kimi_extract.cli import main

    monkeypatch.setenv("KIMI_EXTRACT_STORE", "")
    monkeypatch.setenv("KIMI_EXTRACT_STORE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KIMI_API_KEY", "sk-real-key-0123456789")
    command = [
        "run",
        str(ROOT / "examples" / "reviews.csv"),
        "--schema",
        str(ROOT / "examples" / "review_schema.py") + ":Review",
        "--text",
        "review",
        "--no-progress",
    ]
    assert main([*command, "--out", str(tmp_path / "sim.csv"), "--simulate"]) == 0
    capsys.readouterr()
    assert main([*command, "--dry-run"]) == 0  # the real command's lookup, without sending
    estimate = capsys.readouterr().out
    assert "already stored" not in estimate and "20 rows -> 20 requests" in estimate, estimate


def test_a_simulator_run_gets_no_default_store(monkeypatch, sim, make_extractor, tmp_path):
    monkeypatch.setenv("KIMI_EXTRACT_STORE", "")
    monkeypatch.setenv("KIMI_EXTRACT_STORE_DIR", str(tmp_path))
    ex = make_extractor()
    ex.run(["a"])
    assert ex.store_path is None and not (tmp_path / "results.sqlite3").exists()
    real = kx.Extractor(Review, api_key="sk-real", progress=False)
    assert real.store_path == tmp_path / "results.sqlite3"


def _foreign_db(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE users (id INTEGER, name TEXT)")


def _other_results_table(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE results (id INTEGER, payload BLOB)")


def _corrupt_store(path: Path) -> None:
    ResultStore(path).close()
    data = bytearray(path.read_bytes())
    data[100:1000] = b"\xa5" * 900  # page 1's b-tree (the schema) is garbage now
    path.write_bytes(bytes(data))


BAD_STORES = {
    "random bytes": lambda p: p.write_bytes(bytes(range(256)) * 40),
    "foreign sqlite": _foreign_db,
    "other results table": _other_results_table,
    "corrupt": _corrupt_store,
    "a directory": lambda p: p.mkdir(),
}


@pytest.mark.parametrize("kind", list(BAD_STORES))
def test_an_unusable_store_fails_before_the_first_request(sim, make_extractor, tmp_path, kind):
    path = tmp_path / "results.sqlite3"
    BAD_STORES[kind](path)
    before = path.read_bytes() if path.is_file() else None
    with pytest.raises(kx.StoreError) as info:
        make_extractor(store=path).run(["a", "b"])
    assert isinstance(info.value, kx.ConfigurationError)
    assert str(path) in str(info.value) and "store=False" in str(info.value)
    assert sim.history == []
    if before is not None:
        assert path.read_bytes() == before  # a foreign file is never written


def test_an_unwritable_store_location_fails_at_construction(
    sim, make_extractor, tmp_path, monkeypatch
):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(kx.StoreError, match="a-file"):
        make_extractor(store=blocker / "results.sqlite3")
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    real_access = store_module.os.access
    # Tests run as root here, where chmod cannot make a directory read-only: deny as a user's
    # permissions would.
    monkeypatch.setattr(
        store_module.os,
        "access",
        lambda p, mode: False if Path(p) == read_only else real_access(p, mode),
    )
    with pytest.raises(kx.StoreError, match="read-only"):
        make_extractor(store=read_only / "results.sqlite3")
    assert sim.history == []


class _FullDisk:
    """A store connection whose writes fail after ``ok`` of them: a disk that fills mid-run."""

    def __init__(self, db: sqlite3.Connection, ok: int) -> None:
        self.db, self.ok = db, ok

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.startswith("INSERT"):
            if self.ok <= 0:
                raise sqlite3.OperationalError("database or disk is full")
            self.ok -= 1
        return self.db.execute(sql, *args)

    def close(self) -> None:
        self.db.close()


def test_a_store_failing_mid_run_stops_with_the_partial_frame(
    sim, make_extractor, tmp_path, monkeypatch
):
    real_connect = store_module._connect
    monkeypatch.setattr(store_module, "_connect", lambda p: _FullDisk(real_connect(p), ok=5))
    path = tmp_path / "s.sqlite3"
    rows = [f"row {i}" for i in range(40)]
    with pytest.raises(kx.RunStopped) as info:
        make_extractor(store=path, concurrency=4).run(rows)
    stopped = info.value
    assert isinstance(stopped.cause, kx.StoreError)
    assert str(path) in str(stopped) and "disk is full" in str(stopped)
    partial = stopped.partial
    assert partial is not None and len(partial) == 40
    finished = partial["kx_error"].isna()
    assert finished.sum() >= 6  # five committed, then the row whose commit failed
    assert partial.loc[finished, "sentiment"].notna().all()
    assert len(chat_requests(sim)) < 40  # no new row started once the store failed
    assert len(chat_requests(sim)) == partial["kx_attempts"].sum()


# -- 4. Budgets are hard -----------------------------------------------------------------------


def _long_answers(tokens: int) -> Any:
    reasoning = " ".join(["word"] * tokens)  # one token per word (kimi_extract.tokens)
    return lambda r: Reply(reasoning_content=reasoning)


def _billed(sim: Simulator, pricing: kx.Pricing) -> tuple[int, float]:
    tokens, cost = 0, 0.0
    for h in ok_exchanges(sim):
        usage = kx.Usage.from_api(h.usage)
        tokens += usage.prompt_tokens + usage.completion_tokens
        cost += pricing.cost(usage)
    return tokens, cost


def test_budgets_hold_against_long_answers(sim, make_extractor):
    """The #12 repro: 16,000-token answers at concurrency 16 spent 258,080 tokens / $1.12."""
    sim.responder = _long_answers(16_000)
    rows = [f"row {i}" for i in range(40)]
    with pytest.raises(kx.BudgetExceeded) as info:
        make_extractor(max_total_tokens=20_000, concurrency=16).run(rows)
    partial = info.value.partial
    assert len(partial) == 40 and (partial["kx_error"] == "budget").sum() >= 38
    ex = make_extractor()
    assert ex.config.resolved_pricing is not None
    assert 0 < _billed(sim, ex.config.resolved_pricing)[0] <= 20_000
    sim.reset()
    # One 16,384-token completion may cost $0.16 at $10/M: $0.05 cannot pay for any request.
    with pytest.raises(kx.ConfigurationError, match="max_cost=\\$0.05 .*max_completion_tokens"):
        make_extractor(max_cost=0.05, concurrency=16)
    with pytest.raises(kx.BudgetExceeded) as info:
        make_extractor(max_cost=0.5, concurrency=16).run(rows)
    assert 0.3 < _billed(sim, ex.config.resolved_pricing)[1] <= 0.5  # what fits is spent, no more


def test_a_row_that_cannot_fit_alone_is_that_rows_budget_error(sim, make_extractor):
    long_row = " ".join(["word"] * 6_000)  # its prompt alone passes the cap
    with pytest.raises(kx.BudgetExceeded) as info:
        make_extractor(max_total_tokens=5_000, max_completion_tokens=1_000, concurrency=1).run(
            ["short", long_row, "short too"]
        )
    errors = info.value.partial["kx_error"].tolist()
    assert errors[0] is None and errors[2] is None  # the others were sent
    assert errors[1].startswith("budget: ") and "max_total_tokens=5,000" in errors[1], errors
    assert len(chat_requests(sim)) == 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_total_tokens": 16_384}, "max_total_tokens=16,384 cannot pay for one request"),
        ({"max_total_tokens": 900, "max_completion_tokens": 1_000}, "max_total_tokens=900"),
        ({"max_cost": 0.001, "max_completion_tokens": 200}, "max_cost=\\$0.001"),
    ],
)
def test_a_budget_that_cannot_pay_for_one_request_is_a_configuration_error(
    sim, make_extractor, options, message
):
    with pytest.raises(kx.ConfigurationError, match=message):
        make_extractor(**options)


def test_attempts_of_unknown_cost_count_as_their_worst_case(sim, make_extractor):
    # A 200 whose usage is unusable may still have been billed: each such attempt (retried by
    # the transport) is charged its worst case, so retries stop once that would cross the cap.
    sim.responder = lambda r: Reply(usage={"prompt_tokens": -5, "completion_tokens": 3})
    with pytest.raises(kx.BudgetExceeded) as info:
        make_extractor(
            max_total_tokens=5_000, max_completion_tokens=1_000, max_retries=8, concurrency=2
        ).run(["a", "b", "c"])
    # Every attempt may bill up to 1,000 completion tokens (+ its prompt): at most 5 fit.
    assert 1 <= len(chat_requests(sim)) <= 5
    assert len(info.value.partial) == 3


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    answer=st.integers(min_value=50, max_value=16_000),
    cap=st.integers(min_value=500, max_value=16_384),
    max_tokens=st.integers(min_value=1_000, max_value=80_000),
    max_cost=st.one_of(st.none(), st.floats(min_value=0.002, max_value=0.2)),
    concurrency=st.integers(min_value=1, max_value=16),
    rows=st.integers(min_value=1, max_value=10),
)
def test_billed_totals_never_cross_a_budget(
    sim, make_extractor, answer, cap, max_tokens, max_cost, concurrency, rows
):
    sim.reset()
    sim.responder = _long_answers(answer)
    try:
        ex = make_extractor(
            max_total_tokens=max_tokens,
            max_cost=max_cost,
            max_completion_tokens=cap,
            concurrency=concurrency,
            store=False,
        )
    except kx.ConfigurationError:  # a cap below one request's completion budget
        output_price = make_extractor(
            store=False
        ).config.resolved_pricing.output  # USD per 1M tokens
        assert max_tokens <= cap or (max_cost is not None and cap * output_price / 1e6 >= max_cost)
        return
    try:
        out = ex.run([f"row {i}" for i in range(rows)])
    except kx.BudgetExceeded as stopped:
        out = stopped.partial
    assert len(out) == rows
    assert ex.config.resolved_pricing is not None
    tokens, cost = _billed(sim, ex.config.resolved_pricing)
    assert tokens <= max_tokens
    assert max_cost is None or cost <= max_cost + 1e-9
    assert tokens == out["kx_prompt_tokens"].sum() + out["kx_completion_tokens"].sum()


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    max_tokens=st.integers(min_value=20_000, max_value=80_000),
    max_cost=st.one_of(st.none(), st.floats(min_value=0.02, max_value=0.2)),
    cap=st.integers(min_value=500, max_value=4_000),
    concurrency=st.integers(min_value=1, max_value=16),
    rows=st.integers(min_value=4, max_value=40),
)
def test_web_search_results_never_carry_a_run_past_its_budget(
    sim, make_extractor, max_tokens, max_cost, cap, concurrency, rows
):
    """The simulator bills each search's 800-4,000 result tokens as input of the follow-up
    request, as Kimi does: they are reserved before it is sent, so billed totals stay within
    the caps (a follow-up that cannot pay for them ends its row with a ``budget:`` error)."""
    sim.reset()
    try:
        ex = make_extractor(
            max_total_tokens=max_tokens,
            max_cost=max_cost,
            max_completion_tokens=cap,
            concurrency=concurrency,
            web_search=True,
            store=False,
        )
    except kx.ConfigurationError:  # a cap below one request's completion budget
        return
    try:
        out = ex.run([f"review {i}: the kettle is loud" for i in range(rows)])
    except kx.BudgetExceeded as stopped:
        out = stopped.partial
    assert ex.config.resolved_pricing is not None
    tokens, cost = _billed(sim, ex.config.resolved_pricing)
    assert tokens <= max_tokens
    assert max_cost is None or cost <= max_cost + 1e-9
    assert tokens == out["kx_prompt_tokens"].sum() + out["kx_completion_tokens"].sum()


def test_a_follow_up_that_cannot_pay_for_its_search_results_is_not_sent(sim, make_extractor):
    # One row: its first request fits, the follow-up's 800-4,000 search tokens do not.
    ex = make_extractor(max_total_tokens=2_600, max_completion_tokens=1_000, web_search=True)
    with pytest.raises(kx.BudgetExceeded) as info:
        ex.run(["the kettle is loud"])
    error = info.value.partial.loc[0, "kx_error"]
    assert error.startswith("budget: ") and "web search results" in error, error
    assert len(chat_requests(sim)) == 1


# -- 8. Outputs never destroy an existing file -------------------------------------------------


def _good_file(path: Path) -> bytes:
    frame = pd.DataFrame({"review": [f"kept {i}" for i in range(2500)], "n": range(2500)})
    if path.suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True)
    elif path.suffix == ".parquet":
        frame.to_parquet(path)
    else:
        frame.to_csv(path, index=False)
    return path.read_bytes()


def _read(path: Path) -> pd.DataFrame:
    if path.suffix == ".jsonl":
        return pd.read_json(path, lines=True)
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    return pd.read_csv(path)


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet", ".csv"])
def test_run_to_keeps_the_existing_file_when_the_run_fails(sim, make_extractor, tmp_path, suffix):
    target = tmp_path / f"out{suffix}"
    good = _good_file(target)

    def rows():
        for i in range(30):
            yield f"row {i}"
        raise OSError("the source went away")

    with pytest.raises(kx.RunStopped) as info:
        make_extractor(concurrency=4).run_to(target, rows())
    assert target.read_bytes() == good
    kept = tmp_path / f"out.partial{suffix}"
    assert info.value.partial_file == str(kept) and str(kept) in str(info.value)
    assert len(_read(kept)) == 30


def test_run_to_keeps_the_existing_file_when_the_run_stops(sim, make_extractor, tmp_path):
    target = tmp_path / "out.jsonl"
    good = _good_file(target)
    sim.responder = lambda r: Reply(status=401, error_type="invalid_authentication_error")
    with pytest.raises(kx.RunStopped) as info:
        make_extractor().run_to(target, [f"row {i}" for i in range(5)])
    assert target.read_bytes() == good
    assert "out.partial.jsonl" in str(info.value)
    sim.responder = None
    make_extractor().run_to(target, ["x"])  # a finished run does replace it
    assert len(_read(target)) == 1


def test_run_to_stops_cleanly_when_the_output_cannot_be_written(
    sim, make_extractor, tmp_path, monkeypatch
):
    from kimi_extract.table.export import TableWriter

    monkeypatch.setattr("kimi_extract.pipeline.output.WRITE_BATCH_ROWS", 5)
    real_write = TableWriter.write
    calls: list[int] = []

    def full_disk(self: TableWriter, frame: pd.DataFrame) -> None:
        calls.append(len(frame))
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        real_write(self, frame)

    monkeypatch.setattr(TableWriter, "write", full_disk)
    target = tmp_path / "out.csv"
    good = _good_file(target)
    with pytest.raises(kx.RunStopped) as info:
        make_extractor(concurrency=2).run_to(target, (f"row {i}" for i in range(40)))
    assert isinstance(info.value.cause, OSError) and "out.partial.csv" in str(info.value)
    assert target.read_bytes() == good
    assert len(pd.read_csv(tmp_path / "out.partial.csv")) == 5


RUN_TO_INTERRUPT = INTERRUPTIBLE + textwrap.dedent(
    """
    import sys
    import kimi_extract as kx
    from kimi_extract.simulator import Reply, Simulator
    from tests.conftest import Review
    slow = lambda r: Reply(delay=60) if int(r.user_text.split()[1]) >= 5 else None
    with Simulator(responder=slow) as sim:
        ex = kx.Extractor(Review, base_url=sim.base_url, api_key=sim.api_key, store=sys.argv[2],
                          concurrency=10, progress=False)
        print("started", flush=True)
        try:
            ex.run_to(sys.argv[1], [f"row {i}" for i in range(20)])
        except KeyboardInterrupt as stop:
            print("interrupted", type(stop).__name__, stop.partial_file, flush=True)
    """
)


def _interrupt_when_stored(proc: subprocess.Popen[str], store: Path, rows: int) -> None:
    """SIGINT ``proc`` once ``rows`` rows are committed to ``store`` (the rest hang)."""
    assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if store.exists():
            opened = ResultStore(store)
            try:
                if len(opened) >= rows:
                    break
            finally:
                opened.close()
        time.sleep(0.05)
    time.sleep(0.3)  # committed rows are delivered right after their commit
    proc.send_signal(signal.SIGINT)


def test_ctrl_c_during_run_to_keeps_the_existing_file(tmp_path: Path):
    target, store = tmp_path / "out.jsonl", tmp_path / "s.sqlite3"
    good = _good_file(target)
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN_TO_INTERRUPT, str(target), str(store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    _interrupt_when_stored(proc, store, 5)
    out, err = proc.communicate(timeout=30)
    kept = tmp_path / "out.partial.jsonl"
    assert out.split() == ["interrupted", "RunInterrupted", str(kept)], err
    assert target.read_bytes() == good
    assert len(_read(kept)) == 5


def test_cli_keeps_the_existing_output_when_the_run_stops(sim, tmp_path, monkeypatch, capsys):
    from kimi_extract.cli import main

    target = tmp_path / "out.csv"
    good = _good_file(target)
    data = tmp_path / "in.csv"
    pd.DataFrame({"review": ["a", "b", "c"]}).to_csv(data, index=False)
    schema = tmp_path / "schema.py"
    schema.write_text(
        "from typing import Literal\nfrom pydantic import BaseModel\n"
        "class Review(BaseModel):\n    sentiment: Literal['positive', 'negative']\n"
    )
    sim.responder = lambda r: Reply(status=401, error_type="invalid_authentication_error")
    monkeypatch.setenv("KIMI_BASE_URL", sim.base_url)
    monkeypatch.setenv("KIMI_API_KEY", sim.api_key)
    code = main(
        [
            "run",
            str(data),
            "--schema",
            f"{schema}:Review",
            "--text",
            "review",
            "--out",
            str(target),
            "--no-progress",
        ]
    )
    assert code == 2
    assert target.read_bytes() == good
    kept = tmp_path / "out.partial.csv"
    assert len(pd.read_csv(kept)) == 3 and str(kept) in capsys.readouterr().err


# -- Inputs that fail, and invariant 1: only documented exceptions escape ------------------------


def test_an_input_generator_that_raises_keeps_the_finished_rows(
    sim, make_extractor, backend: Backend
):
    store = backend.location

    def rows():
        for i in range(12):
            yield {"review": f"row {i}"}
        raise ValueError("the source broke")

    with pytest.raises(kx.RunStopped) as info:
        make_extractor(store=store, concurrency=4).run(rows(), text="review")
    assert isinstance(info.value.cause, ValueError)
    partial = info.value.partial
    assert partial is not None and list(partial["review"]) == [f"row {i}" for i in range(12)]
    assert partial["kx_error"].isna().all() and partial["sentiment"].notna().all()
    assert backend.committed() == 12  # and the store kept them


class Fussy(BaseModel):
    value: str

    @field_validator("value")
    @classmethod
    def explode(cls, v: str) -> str:
        if v == "boom":
            raise RuntimeError("a validator bug")  # not a ValueError: pydantic lets it through
        return v


def test_a_raising_validator_is_that_rows_error(sim, make_extractor):
    sim.responder = lambda r: Reply(content={"value": "boom" if "bad" in r.user_text else "ok"})
    out = make_extractor(Fussy).run(["good", "bad", "good too"])
    assert out["value"].tolist()[::2] == ["ok", "ok"]
    assert out["kx_error"].isna().tolist() == [True, False, True]
    assert "RuntimeError" in out["kx_error"].iloc[1]


# -- 10. Configuration is checked at construction ----------------------------------------------


@pytest.mark.parametrize(
    ("options", "setting"),
    [
        ({"instructions": 123}, "instructions"),
        ({"base_url": 8000}, "base_url"),
        ({"api_key": b"sk-bytes"}, "api_key"),
        ({"timeout": -1}, "timeout"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": math.nan}, "timeout"),
        ({"concurrency": 10**6}, "concurrency"),
        ({"concurrency": 0}, "concurrency"),
        ({"max_retry_wait": -1}, "max_retry_wait"),
        ({"validation_retries": "2"}, "validation_retries"),
        ({"max_tool_rounds": -1}, "max_tool_rounds"),
        ({"column_prefix": 3}, "column_prefix"),
        ({"store": 123}, "store"),
        ({"max_cost": math.inf}, "max_cost"),
        ({"model": "my-own-model", "max_cost": 1.0}, "max_cost"),
    ],
)
@pytest.mark.filterwarnings("ignore:kimi_extract does not know the model")
def test_bad_settings_raise_one_configuration_error(sim, make_extractor, options, setting):
    with pytest.raises(kx.ConfigurationError, match=setting):
        make_extractor(**options)
    assert sim.history == []


def test_concurrency_has_a_documented_maximum(make_extractor):
    assert make_extractor(concurrency=kx.config.MAX_CONCURRENCY).config.concurrency == 1000
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert "1,000" in page[page.index("`concurrency=`") :][:300]


@pytest.mark.parametrize("text", [0, [1], [], b"review"])
def test_a_bad_text_argument_is_named(sim, make_extractor, text):
    with pytest.raises(kx.ConfigurationError, match="text"):
        make_extractor().run(pd.DataFrame({"review": ["a"]}), text=text)
    assert sim.history == []


def test_output_fields_may_not_take_accounting_column_names(make_extractor):
    Clash = create_model("Clash", kx_cost=(float, ...), kx_error=(str, ...))
    with pytest.raises(kx.ConfigurationError, match="prefix="):
        make_extractor(Clash)
    Plain = create_model("Plain", cost=(float, ...))
    with pytest.raises(kx.ConfigurationError, match="kx_cost"):
        make_extractor(Plain, column_prefix="kx_")
    make_extractor(Clash, column_prefix="out_")  # the suggested fix works


def test_a_model_nested_too_deep_is_a_schema_error(make_extractor):
    model: type[BaseModel] = create_model("L0", x=(int, ...))
    for i in range(1, 50):
        model = create_model(f"L{i}", child=(model, ...))
    with pytest.raises(kx.SchemaError, match="L49"):
        make_extractor(model)


def test_ctrl_c_is_never_an_exception():
    assert issubclass(kx.RunInterrupted, KeyboardInterrupt)
    assert not issubclass(kx.RunInterrupted, Exception)
    try:
        try:
            raise kx.RunInterrupted("stop", partial=pd.DataFrame())
        except Exception:  # user code's catch-all must not swallow Ctrl-C
            pytest.fail("RunInterrupted was caught by except Exception")
    except KeyboardInterrupt as caught:
        assert isinstance(caught, kx.RunInterrupted) and caught.partial is not None


DOCS_INTERRUPT = INTERRUPTIBLE + textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import kimi_extract as kx
    from kimi_extract.simulator import Reply, Simulator
    from tests.conftest import Review
    folder = Path(sys.argv[1])
    for i in range(12):
        (folder / f"doc{i:02d}.txt").write_text(f"document {i}: the hinge is loose")
    slow = lambda r: Reply(delay=60) if "document 0" not in r.user_text else None
    with Simulator(responder=slow) as sim:
        ex = kx.Extractor(Review, base_url=sim.base_url, api_key=sim.api_key, store=sys.argv[2],
                          concurrency=4, progress=False)
        print("started", flush=True)
        try:
            ex.run_documents(folder)
        except KeyboardInterrupt as stop:
            part = stop.partial
            print(type(stop).__name__, len(part), "kx_source" in part.columns,
                  "kx_doc_text" in part.columns, int(part["kx_error"].isna().sum()), flush=True)
    """
)


def test_ctrl_c_in_run_documents_gives_the_documents_partial(tmp_path: Path):
    docs, store = tmp_path / "docs", tmp_path / "s.sqlite3"
    docs.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", DOCS_INTERRUPT, str(docs), str(store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    _interrupt_when_stored(proc, store, 1)
    out, err = proc.communicate(timeout=30)
    assert out.split() == ["RunInterrupted", "12", "True", "False", "1"], err


def test_a_dask_run_shares_one_budget_instead_of_splitting_it(make_extractor, tmp_path: Path):
    """A budget that pays for two requests is not cut into four shares that pay for none: the
    partitions draw from it through the scheduler (tests/dask/test_dask_machines.py runs it)."""
    dd = pytest.importorskip("dask.dataframe")
    from kimi_extract.dask import extract, partition_config

    ddf = dd.from_pandas(pd.DataFrame({"review": [f"r{i}" for i in range(8)]}), npartitions=4)
    ex = make_extractor(
        max_total_tokens=40_000, max_completion_tokens=16_384, store=tmp_path / "s.db"
    )
    installed: list[object] = []
    client = type("Client", (), {"run_on_scheduler": lambda self, f: installed.append(f)})()
    lazy = extract(ddf, ex, text="review", client=client)  # type: ignore[arg-type]
    assert lazy.npartitions == 4 and installed  # the budget service is installed
    assert partition_config(ex.config, tmp_path / "s.db", 4).max_total_tokens == 40_000
