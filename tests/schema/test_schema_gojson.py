"""The schema as walle's Go code sees it (kimi_extract.schema.gojson): sizes at the 120,000-byte
limit measured on Go's number text, integers beyond float64, and a checker that never raises.

The Go texts below are what walle's own build (MoonshotAI/walle ``python/walle/lib/libwalle.so``,
Go 1.23) measures: each was placed in a schema padded to exactly 120,000 bytes by that text,
which walle accepted, and to 120,001, which it refused.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kimi_extract.schema import dialect as mfjs
from kimi_extract.schema.gojson import decode_problem, go_number, schema_size

#: (a Python number, Go's encoding/json text of the float64 it decodes to), from walle's build.
GO_TEXT: list[tuple[int | float, str]] = [
    (1e-7, "1e-7"),  # Python: 1e-07 ('e' below 1e-6, and Go drops the exponent's 0)
    (1e-05, "0.00001"),  # Python: 1e-05 (Go writes 'f' from 1e-6)
    (-0.0, "-0"),  # Python: -0.0
    (0.0, "0"),
    (1e-06, "0.000001"),
    (9.99e-07, "9.99e-7"),
    (1e21, "1e+21"),
    (1e20, "100000000000000000000"),  # Python: 1e+20 (Go writes 'f' below 1e21)
    (10**21, "1e+21"),  # a Python int of 22 digits: Go holds a float64
    (12345678901234567890, "12345678901234567000"),
    (2**70, "1.1805916207174113e+21"),
    (1e16, "10000000000000000"),
    (0.1, "0.1"),
    (1 / 3, "0.3333333333333333"),
    (-1e-300, "-1e-300"),
    (5e-324, "5e-324"),
    (1.7976931348623157e308, "1.7976931348623157e+308"),
    (123.456, "123.456"),
    (-5, "-5"),
    (2.5e-05, "0.000025"),
    (1e-10, "1e-10"),
    (100.0, "100"),
    (9007199254740993, "9007199254740992"),  # 2**53 + 1 has no float64
]

SIZE_PROBLEM = "At path 'root': schema exceeds maximum allowed size"


@pytest.mark.parametrize(("number", "go"), GO_TEXT, ids=[text for _, text in GO_TEXT])
def test_numbers_are_measured_as_go_writes_them(number: int | float, go: str) -> None:
    assert go_number(number) == go
    assert schema_size({"default": number}) == len('{"default":}') + len(go)


@pytest.mark.parametrize(("number", "go"), GO_TEXT, ids=[text for _, text in GO_TEXT])
def test_schemas_at_the_size_limit_are_judged_as_walle_judges_them(
    number: int | float, go: str
) -> None:
    # padded with the description to exactly 120,000 bytes of Go's text: valid; one more: not
    frame = '{"type":"number","default":%s,"description":"%s"}'
    pad = mfjs.DEFAULT_LIMITS.max_size - len(frame % (go, ""))
    for extra, verdict in ((0, None), (1, SIZE_PROBLEM)):
        schema = {"type": "number", "default": number, "description": "a" * (pad + extra)}
        for level in mfjs.LEVELS:
            assert mfjs.first_problem(schema, level) == verdict, (level, extra)


def test_strings_are_measured_as_go_writes_them() -> None:
    # Go escapes <, >, & and U+2028/U+2029 as \\uXXXX; a surrogate pair is one character and a
    # lone surrogate becomes U+FFFD (3 bytes); all checked at the boundary on walle's build
    frame = len('{"title":""}')
    assert schema_size({"title": "<&>"}) == frame + 18
    assert schema_size({"title": "\u2028"}) == frame + 6
    assert schema_size({"title": "\ud83d\ude00"}) == frame + 4
    assert schema_size({"title": "\U0001f600"}) == frame + 4
    assert schema_size({"title": "\ud800"}) == frame + 3
    assert schema_size({"title": "\b\f\x01\x7f"}) == frame + 2 + 2 + 6 + 1


@given(st.floats(allow_nan=False, allow_infinity=False))
@settings(max_examples=500, deadline=None)
def test_go_text_reads_back_to_the_same_float(number: float) -> None:
    text = go_number(number)
    assert float(text) == number and math.copysign(1, float(text)) == math.copysign(1, number)
    magnitude = abs(number)
    assert ("e" in text) == (magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21))
    assert not text.endswith(".0") and "e-0" not in text and "e+0" not in text


HUGE = 10**400  # 401 digits: no float64 holds it


@pytest.mark.parametrize(
    ("schema", "number"),
    [
        ({"type": "integer", "maximum": HUGE}, HUGE),
        ({"type": "integer", "enum": [1, -HUGE]}, -HUGE),
        ({"type": "string", "default": HUGE}, HUGE),  # no rule reads it; Go's decoder does
        ({"type": "array", "minItems": HUGE}, HUGE),
        ({"type": "object", "properties": {"a": {"type": "number", "minimum": HUGE}}}, HUGE),
    ],
    ids=["maximum", "enum", "default", "minItems", "nested minimum"],
)
def test_integers_beyond_float64_are_walles_parse_error(
    schema: dict[str, Any], number: int
) -> None:
    # walle's build on such a text: "JSON schema parsing error: JSON type error at offset 429:
    # expected float64 but got number 999..." (the offset is left out: it depends on the text)
    problem = (
        f"JSON schema parsing error: JSON type error: expected float64 but got number {number}"
    )
    for level in mfjs.LEVELS:
        assert mfjs.first_problem(schema, level) == problem


def test_the_largest_float64_integer_still_decodes() -> None:
    largest = int(1.7976931348623157e308)
    assert decode_problem({"maximum": largest}) is None
    # the first integer that rounds past the largest float64 (half-way rounds to even: up)
    assert decode_problem({"maximum": largest + 2**970}) is not None
    assert decode_problem({"maximum": largest + 2**970 - 1}) is None


_NUMBERS = st.one_of(
    st.integers(),
    st.integers(min_value=10**300, max_value=10**500).map(lambda n: n * (-1) ** (n % 2)),
    st.floats(),
)
_NODES = st.fixed_dictionaries(
    {"type": st.sampled_from(["integer", "number", "string", "array", "object"])},
    optional={
        keyword: _NUMBERS
        for keyword in ("minimum", "maximum", "minItems", "maxItems", "minLength", "default")
    }
    | {"enum": st.lists(_NUMBERS, min_size=1, max_size=3)},
)
_SCHEMAS = st.one_of(
    _NODES,
    st.dictionaries(st.sampled_from(["a", "b", "c"]), _NODES, min_size=1).map(
        lambda props: {"type": "object", "properties": props, "required": sorted(props)}
    ),
)


@given(_SCHEMAS)
@settings(max_examples=400, deadline=None)
def test_first_problem_never_raises(schema: dict[str, Any]) -> None:
    # the promise of dialect.first_problem, over numbers of every size (integers beyond
    # float64, NaN, infinities) in every numeric keyword
    for level in mfjs.LEVELS:
        problem = mfjs.first_problem(schema, level)
        assert problem is None or isinstance(problem, str)
        if problem is None:  # what walle accepts, Go can hold
            assert decode_problem(schema) is None
            json.dumps(schema, allow_nan=False)
