"""``ex.stream`` / ``ex.astream``: partial instances as the answer streams.

Each partial is a valid prefix of the final value (every field it sets equals the final one's,
lists are prefixes, nested models partial in the same way), each is a prefix of the next until
a restart, and the last value equals ``extract()``'s. Runs go to a scripted server
(``kimi_extract.testing``) that streams answers in pieces of a few characters.
"""

from __future__ import annotations

import asyncio
import json
import string
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, field_validator

import kimi_extract as kx
from kimi_extract.http.backends import StreamReply
from kimi_extract.schema.compiled import compile_schema
from kimi_extract.schema.partial import PartialParser, partial_json
from kimi_extract.testing import BASE_URL, ScriptedBackend, VirtualClock, use_backend, use_clock


class Line(BaseModel):
    sku: str
    quantity: int = Field(ge=0)
    price: float
    note: str | None = None


class Address(BaseModel):
    street: str
    city: str


class Order(BaseModel):
    customer: str
    status: Literal["open", "paid", "shipped"]
    address: Address
    lines: list[Line]
    tags: list[str]
    counts: dict[str, int]
    rush: bool
    discount: float | None = None


TEXT = st.text(alphabet=string.ascii_letters + string.digits + ' "\\/{}[],:é€\n', max_size=12)
INTS = st.integers(min_value=-(10**12), max_value=10**12)
FLOATS = st.floats(allow_nan=False, allow_infinity=False, width=64)
LINES = st.builds(
    Line,
    sku=TEXT,
    quantity=st.integers(min_value=0, max_value=10**9),
    price=FLOATS,
    note=st.none() | TEXT,
)
ORDERS = st.builds(
    Order,
    customer=TEXT,
    status=st.sampled_from(["open", "paid", "shipped"]),
    address=st.builds(Address, street=TEXT, city=TEXT),
    lines=st.lists(LINES, max_size=4),
    tags=st.lists(TEXT, max_size=4),
    counts=st.dictionaries(TEXT, INTS, max_size=3),
    rush=st.booleans(),
    discount=st.none() | FLOATS,
)


def is_prefix(partial: Any, final: Any) -> bool:
    """``partial`` is ``final`` as far as it goes (see the module docstring)."""
    if isinstance(partial, BaseModel):
        if type(partial) is not type(final):
            return False
        return all(
            is_prefix(getattr(partial, name), getattr(final, name))
            for name in partial.model_fields_set
        )
    if isinstance(partial, list):
        return (
            isinstance(final, list)
            and len(partial) <= len(final)
            and all(is_prefix(p, f) for p, f in zip(partial, final, strict=False))
            and all(p == f for p, f in zip(partial[:-1], final, strict=False))
        )
    if isinstance(partial, dict):
        return (
            isinstance(final, dict)
            and all(k in final and is_prefix(v, final[k]) for k, v in partial.items())
            and all(partial[k] == final[k] for k in list(partial)[:-1])
        )
    return bool(partial == final) and type(partial) is type(final)


def answer_text(order: Order, indent: int | None) -> str:
    return json.dumps(order.model_dump(mode="json"), indent=indent, ensure_ascii=False)


def extractor(**options: Any) -> kx.Extractor[Any]:
    options.setdefault("output", Order)
    output = options.pop("output")
    return kx.Extractor(
        output, base_url=BASE_URL, api_key="sk-test-0123456789", progress=False, **options
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(order=ORDERS, indent=st.sampled_from([None, 1]), chunk=st.integers(1, 7))
def test_partials_are_prefixes_of_the_final_value_which_is_extracts(order, indent, chunk):
    text = answer_text(order, indent)
    ex = extractor()
    with use_backend(ScriptedBackend([text], chunk_chars=chunk)):
        values = list(ex.stream("an order"))
    with use_backend(ScriptedBackend([text])):
        extracted = ex.extract("an order")
    assert values[-1] == extracted == order
    assert values[0].model_fields_set == set()  # the sequence starts from nothing
    for before, after in zip(values, values[1:], strict=False):
        assert before != after
        assert is_prefix(before, after), (before, after)
    for value in values:
        assert isinstance(value, Order)
        assert is_prefix(value, extracted), (value, extracted)


def test_fields_appear_when_complete_and_lists_grow_item_by_item():
    order = Order(
        customer="Ann",
        status="paid",
        address=Address(street="1 Main", city="Oslo"),
        lines=[Line(sku="tea", quantity=12, price=2.5), Line(sku="cup", quantity=3, price=1.0)],
        tags=["a", "b", "c"],
        counts={"x": 1},
        rush=True,
    )
    ex = extractor()
    with use_backend(ScriptedBackend([order.model_dump_json()], chunk_chars=1)):
        values = list(ex.stream("an order"))
    tag_counts = [len(v.tags) for v in values if v.tags is not None]
    assert tag_counts == sorted(tag_counts) and set(tag_counts) == {0, 1, 2, 3}
    line_counts = [len(v.lines) for v in values if v.lines is not None]
    assert line_counts == sorted(line_counts) and set(line_counts) == {0, 1, 2}
    quantities = {v.lines[0].quantity for v in values if v.lines}
    assert quantities == {None, 12}  # never 1: a number appears only once it is whole
    customers = {v.customer for v in values}
    assert customers == {None, "Ann"}  # never "A" or "An"
    # A nested model appears as soon as it starts; its fields as they complete.
    assert any(v.address is not None and v.address.model_fields_set == set() for v in values)
    assert values[-1] == order


def test_a_reask_and_a_retry_restart_the_stream():
    """The first answer is invalid (reasked), the second is cut mid-stream (retried): each new
    answer starts a fresh sequence from the instance with no field set (even when its first
    chunk already holds whole fields, as here)."""
    good = Order(
        customer="Bo",
        status="open",
        address=Address(street="2 High", city="Rome"),
        lines=[],
        tags=["z"],
        counts={},
        rush=False,
    )
    invalid = good.model_dump(mode="json") | {"status": "lost"}
    backend = CuttingBackend(
        [json.dumps(invalid), good.model_dump_json(), good.model_dump_json()],
        cut={1},
        chunk_chars=20,
    )
    ex = extractor()
    with use_backend(backend), use_clock(VirtualClock()):
        values = list(ex.stream("an order"))
    assert len(backend.requests) == 3
    starts = [i for i, v in enumerate(values) if not v.model_fields_set]
    assert len(starts) == 3  # the first answer, the reask's (cut), its retry
    assert values[starts[1] - 1].customer == "Bo"  # the invalid answer streamed far
    last = values[starts[-1] :]
    assert last[-1] == good
    assert all(is_prefix(v, good) for v in last)


class CuttingBackend(ScriptedBackend):
    """Streams the requests whose numbers (from 0) are in ``cut`` only halfway, then drops."""

    def __init__(self, script: Any, *, cut: set[int], chunk_chars: int) -> None:
        super().__init__(script, chunk_chars=chunk_chars)
        self.cut = cut

    @asynccontextmanager
    async def stream(self, url: str, payload: bytes) -> AsyncIterator[StreamReply]:
        number = len(self.requests)
        async with super().stream(url, payload) as reply:
            if number not in self.cut:
                yield reply
                return
            lines = [line async for line in reply.lines]

            async def half() -> AsyncIterator[str]:
                for line in lines[: len(lines) // 2]:
                    yield line
                raise kx.APIConnectionError("connection reset by peer")

            yield StreamReply(reply.status, reply.headers, half(), reply.read)


def test_a_row_error_is_raised_after_the_partials():
    ex = extractor(validation_retries=0)
    with use_backend(ScriptedBackend(['{"customer": "Cy", "status": "lost"}'], chunk_chars=4)):
        seen = []
        with pytest.raises(kx.ValidationFailedError):
            for value in ex.stream("an order"):
                seen.append(value)
    assert any(v.customer == "Cy" for v in seen)


def test_astream_gives_the_same_values_as_stream():
    order = Order(
        customer="Di",
        status="shipped",
        address=Address(street="3 Low", city="Lima"),
        lines=[Line(sku="pen", quantity=1, price=0.5)],
        tags=[],
        counts={"k": 2},
        rush=True,
    )
    ex = extractor()

    async def collect() -> list[Any]:
        return [value async for value in ex.astream("an order")]

    with use_backend(ScriptedBackend([order.model_dump_json()], chunk_chars=2)):
        async_values = asyncio.run(collect())
    with use_backend(ScriptedBackend([order.model_dump_json()], chunk_chars=2)):
        sync_values = list(ex.stream("an order"))
    assert async_values == sync_values and async_values[-1] == order


def test_leaving_a_stream_early_cancels_its_request():
    """The consumer stops reading while the answer is still streaming: the request is
    cancelled and its stream closed before the loop over ``stream`` ends."""
    order = Order(
        customer="Ed",
        status="open",
        address=Address(street="4 Way", city="Bern"),
        lines=[],
        tags=["t"] * 50,
        counts={},
        rush=False,
    )
    backend = HangingBackend([order.model_dump_json()], chunk_chars=1)
    ex = extractor()
    with use_backend(backend):
        for value in ex.stream("an order"):
            if value.tags:
                break
    assert backend.closed == [True]


class HangingBackend(ScriptedBackend):
    """Streams half of each answer, then sends nothing more; ``closed`` notes each stream the
    client closed."""

    closed: list[bool]

    @asynccontextmanager
    async def stream(self, url: str, payload: bytes) -> AsyncIterator[StreamReply]:
        self.closed = []
        async with super().stream(url, payload) as reply:
            lines = [line async for line in reply.lines]

            async def half() -> AsyncIterator[str]:
                try:
                    for line in lines[: len(lines) // 2]:
                        yield line
                    await asyncio.Event().wait()
                finally:
                    self.closed.append(True)

            yield StreamReply(reply.status, reply.headers, half(), reply.read)


@pytest.mark.parametrize("grounding", [False, True, "quotes"])
def test_stream_with_grounding_ends_with_extracts_value(grounding):
    """Against the simulator's extractive answers (with ``kx_quotes`` for "quotes"): the
    partials never carry quotes or spans, and the last value is ``extract``'s."""
    from kimi_extract.simulator import Simulator

    class Review(BaseModel):
        product: str
        aspects: list[str]
        stars: int

    text = "The Acme kettle boils fast. The lid sticks. Four stars from me."
    with Simulator(answers="extractive") as sim:
        ex = kx.Extractor(
            Review, base_url=sim.base_url, api_key=sim.api_key, progress=False, grounding=grounding
        )
        values = list(ex.stream(text))
        extracted = ex.extract(text)
        streamed = [h for h in sim.history if h.stream]
    assert streamed  # the stream went as SSE
    assert values[-1] == extracted
    # Partial values came before the last (the quoted schema's answers are read as they grow).
    assert any(v.model_fields_set and v != extracted for v in values[:-1])
    for value in values:
        assert isinstance(value, Review) and is_prefix(value, extracted)
        assert "kx_quotes" not in value.model_dump()


def test_a_stored_row_streams_its_value_alone(tmp_path):
    order = Order(
        customer="Fa",
        status="paid",
        address=Address(street="5 Rd", city="Kyiv"),
        lines=[],
        tags=[],
        counts={},
        rush=False,
    )
    ex = extractor(store=tmp_path / "s.sqlite3")
    with use_backend(ScriptedBackend([order.model_dump_json()])):
        ex.extract("an order")
    with use_backend(ScriptedBackend([])) as backend:
        assert list(ex.stream("an order")) == [order]
    assert not backend.requests


def test_partial_json_leaves_out_what_may_still_grow():
    assert partial_json('{"a": 12') == {}
    assert partial_json('{"a": 12,') == {"a": 12}
    assert partial_json('{"a": [1, 2') == {"a": [1]}
    assert partial_json('{"a": "ab') == {}
    assert partial_json('{"a": tru') == {}
    assert partial_json('```json\n{"a": 1.5e3}') == {"a": 1500.0}
    assert partial_json("no object yet") is None
    parser = PartialParser(compile_schema(Order))
    assert parser.parse('{"customer": "x", "status": "ope') == parser.parse('{"customer": "x"')


class Shouted(BaseModel):
    name: str
    words: list[str]

    @field_validator("name")
    @classmethod
    def upper(cls, value: str) -> str:
        return value.upper()


def test_the_last_value_is_the_validated_one_even_when_validators_change_it():
    """Partials are checked field by field; the model's validators run on the final value,
    which is yielded last (here it differs from every partial: the name is upper-cased)."""
    ex = extractor(output=Shouted)
    answer = '{"name": "ann", "words": ["a", "b"]}'
    with use_backend(ScriptedBackend([answer], chunk_chars=2)):
        values = list(ex.stream("shout"))
    with use_backend(ScriptedBackend([answer])):
        extracted = ex.extract("shout")
    assert values[-1] == extracted and extracted.name == "ANN"
    assert {v.name for v in values[:-1]} == {None, "ann"}


def test_a_dataframe_row_streams_as_run_sends_it():
    """``stream(df.iloc[i], template=...)`` reads the row as ``run`` does: the same request, and
    its last value is ``extract``'s for the same row and ``run``'s row."""
    import pandas as pd

    from kimi_extract.simulator import Simulator

    class Review(BaseModel):
        product: str
        aspects: list[str]

    df = pd.DataFrame(
        {
            "title": ["Kettle", "Lamp"],
            "body": ["Boils fast. The lid sticks.", "Bright, but the switch broke."],
            "id": [7, 8],
        }
    )
    template = "{title}: {body}"
    with Simulator(answers="extractive") as sim:
        ex = kx.Extractor(Review, base_url=sim.base_url, api_key=sim.api_key, progress=False)
        values = list(ex.stream(df.iloc[1], template=template))
        streamed = sim.history[-1].body["messages"]
        extracted = ex.extract(df.iloc[1].to_dict(), template=template)
        ran = ex.run(df.iloc[[1]], template=template)
        sent = sim.history[-1].body["messages"]
    assert streamed == sent
    assert values[-1] == extracted
    assert ran.iloc[0]["product"] == extracted.product
    assert list(ran.iloc[0]["aspects"]) == extracted.aspects
    assert len(values) > 1


def test_a_rows_column_options_are_checked_before_any_request():
    import pandas as pd

    row = pd.DataFrame({"body": ["x"]}).iloc[0]
    ex = extractor()
    with use_backend(ScriptedBackend([])) as backend:
        with pytest.raises(kx.ConfigurationError, match="'nope'"):
            ex.stream(row, text="nope")
        with pytest.raises(kx.ConfigurationError, match="name a row's columns"):
            ex.stream("a text", text="body")
        with pytest.raises(kx.ConfigurationError, match="got int"):
            ex.extract(5)  # type: ignore[arg-type]
    assert not backend.requests
