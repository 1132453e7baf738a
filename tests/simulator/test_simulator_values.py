"""The simulator's answers against their schemas (kimi_extract.simulator.values).

- Every answer the simulator draws validates against its schema (jsonschema, Draft 2020-12),
  over generated schemas of Kimi's dialect (walle strict) with the keywords clients send beside
  it (``exclusiveMinimum``, ``multipleOf``, ``uniqueItems``, ``const``...), recursive ones too.
- A schema with no valid value is named as such (``problem_of``) and the API answers 400;
  a schema built around a known valid value is never called empty.
- The work per answer is bounded: nested lists that must hold two items each are cut (finish
  "length") instead of growing exponentially, and a request like that never holds up another.
"""

from __future__ import annotations

import json
import random
import threading
from typing import Any

import httpx
import jsonschema
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from kimi_extract.schema import dialect as mfjs
from kimi_extract.simulator import Simulator, values

WORDS = ["the", "fan", "is", "loud", "but", "the", "case", "is", "solid"]
KEY = "sk-sim-values"

# -- generated schemas of the dialect ------------------------------------------------------------

_SMALL = st.integers(-20, 20)
_BOUND = st.one_of(_SMALL, st.floats(-20, 20, allow_nan=False).map(lambda x: round(x, 2)))
_PATTERNS = ["^[a-z]+$", "[0-9]", "^ab", "x*$", "^(foo|bar)[0-9]{0,3}$", "^[A-Z]{2}-[0-9]{2}$"]


@st.composite
def _numeric(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["integer", "number"]))
    node: dict[str, Any] = {"type": kind}
    for keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if draw(st.booleans()):
            node[keyword] = draw(_SMALL if kind == "integer" else _BOUND)
    if draw(st.integers(0, 3)) == 0:
        steps = st.integers(1, 6) if kind == "integer" else st.sampled_from([0.25, 0.5, 2, 3.0])
        node["multipleOf"] = draw(steps)
    return node


@st.composite
def _string(draw: st.DrawFn) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string"}
    if draw(st.booleans()):
        node["minLength"] = draw(st.integers(0, 12))
    if draw(st.booleans()):
        node["maxLength"] = draw(st.integers(0, 12))
    if draw(st.integers(0, 2)) == 0:
        node["pattern"] = draw(st.sampled_from(_PATTERNS))
    if draw(st.integers(0, 4)) == 0:
        node["format"] = draw(st.sampled_from(["date", "email", "uuid"]))
    return node


@st.composite
def _enum(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["string", "integer", "number", "boolean"]))
    pool = {
        "string": st.text(alphabet="abcxyz", max_size=6),
        "integer": _SMALL,
        "number": _BOUND,
        "boolean": st.booleans(),
    }[kind]
    node: dict[str, Any] = {"type": kind, "enum": draw(st.lists(pool, min_size=1, max_size=4))}
    if kind in ("integer", "number") and draw(st.booleans()):
        node["minimum"] = draw(_SMALL)
    if kind == "string" and draw(st.booleans()):
        node["maxLength"] = draw(st.integers(0, 4))
    if draw(st.integers(0, 3)) == 0:
        node = {"type": kind, "const": node["enum"][0]}
    return node


_LEAVES = st.one_of(
    _numeric(),
    _string(),
    _enum(),
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.just({"type": ["string", "null"], "maxLength": 3}),
)


def _containers(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    @st.composite
    def array(draw: st.DrawFn) -> dict[str, Any]:
        node: dict[str, Any] = {"type": "array", "items": draw(inner)}
        if draw(st.booleans()):
            node["minItems"] = draw(st.integers(0, 4))
        if draw(st.booleans()):
            node["maxItems"] = draw(st.integers(0, 4))
        if draw(st.integers(0, 2)) == 0:
            node["uniqueItems"] = True
        return node

    @st.composite
    def obj(draw: st.DrawFn) -> dict[str, Any]:
        names = draw(st.lists(st.sampled_from("abcdef"), min_size=1, max_size=4, unique=True))
        props = {name: draw(inner) for name in names}
        required = [name for name in names if draw(st.booleans())]
        node = {"type": "object", "properties": props, "required": required}
        if draw(st.booleans()):
            node["additionalProperties"] = False
        return node

    @st.composite
    def mapping(draw: st.DrawFn) -> dict[str, Any]:
        node: dict[str, Any] = {"type": "object", "additionalProperties": draw(inner)}
        if draw(st.booleans()):
            node["minProperties"] = draw(st.integers(0, 3))
        if draw(st.booleans()):
            node["maxProperties"] = draw(st.integers(0, 3))
        return node

    @st.composite
    def any_of(draw: st.DrawFn) -> dict[str, Any]:
        branches = draw(st.lists(inner, min_size=1, max_size=3))
        if draw(st.booleans()):
            branches.append({"type": "null"})
        return {"anyOf": branches}

    return st.one_of(array(), obj(), mapping(), any_of())


_NODES = st.recursive(_LEAVES, _containers, max_leaves=8)


@st.composite
def dialect_schemas(draw: st.DrawFn) -> dict[str, Any]:
    """A root object of generated nodes, sometimes with a recursive ``$defs`` entry."""
    props = {f"p{i}": draw(_NODES) for i in range(draw(st.integers(1, 3)))}
    schema: dict[str, Any] = {
        "type": "object",
        "properties": props,
        "required": list(props),
        "additionalProperties": False,
    }
    if draw(st.booleans()):
        leaf = draw(_NODES)
        schema["$defs"] = {
            "Node": {
                "type": "object",
                "properties": {
                    "value": leaf,
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                    "parent": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]},
                },
                "required": ["value", "kids", "parent"],
            }
        }
        schema["properties"]["tree"] = {"$ref": "#/$defs/Node"}
        schema["required"].append("tree")
    return schema


def _node_tree(value: dict[str, Any]) -> dict[str, Any]:
    """A root object with a recursive ``Node`` whose ``value`` is ``value``."""
    node = {
        "type": "object",
        "properties": {
            "value": value,
            "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
            "parent": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]},
        },
        "required": ["value", "kids", "parent"],
    }
    return {
        "type": "object",
        "properties": {"p0": {"type": "null"}, "tree": {"$ref": "#/$defs/Node"}},
        "required": ["p0", "tree"],
        "additionalProperties": False,
        "$defs": {"Node": node},
    }


def _valid(schema: dict[str, Any], value: Any) -> list[str]:
    return [error.message for error in jsonschema.Draft202012Validator(schema).iter_errors(value)]


@given(dialect_schemas(), st.integers(0, 2**32))
# a pattern under anyOf is always written "ab": its repeats were left in a unique array
@example(
    _node_tree(
        {
            "type": "array",
            "minItems": 2,
            "uniqueItems": True,
            "items": {"anyOf": [{"type": "string", "pattern": "^ab"}]},
        }
    ),
    0,
)
# numbers below 0 in steps of 2: the variants went up from 0, past the maximum
@example(
    {
        "type": "object",
        "properties": {
            "p0": {
                "type": "array",
                "items": {"type": "number", "maximum": 0, "multipleOf": 2},
                "minItems": 2,
                "uniqueItems": True,
            }
        },
        "required": ["p0"],
        "additionalProperties": False,
    },
    0,
)
# below an exclusive 0 in steps of 2: -5e-324 passed our check (float division), not
# jsonschema's (an integer step takes the remainder)
@example(
    {
        "type": "object",
        "properties": {"p0": {"type": "number", "exclusiveMaximum": 0, "multipleOf": 2}},
        "required": ["p0"],
        "additionalProperties": False,
    },
    0,
)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_answer_validates_or_the_schema_has_no_value(schema: dict[str, Any], seed: int):
    assume(mfjs.first_problem(schema, "strict") is None)  # what the API accepts
    problem = values.problem_of(schema)
    if problem is not None:
        assert problem.startswith("At path '")
        return
    value = values.json_value(random.Random(seed), schema, WORDS)
    assert _valid(schema, value) == [], (json.dumps(schema), value)


# -- schemas built around a value: never called empty --------------------------------------------


@st.composite
def value_and_schema(draw: st.DrawFn, depth: int = 0) -> tuple[Any, dict[str, Any]]:
    """A JSON value and a schema it is valid against, with tight bounds around it."""
    kind = draw(st.sampled_from(["int", "float", "str", "enum"] + ["list", "dict"] * (depth < 2)))
    if kind == "int":
        value = draw(_SMALL)
        node: dict[str, Any] = {"type": "integer"}
        gap = draw(st.integers(0, 2))
        node[draw(st.sampled_from(["minimum", "exclusiveMinimum"]))] = value - gap - 1
        node["minimum"] = value - gap
        node[draw(st.sampled_from(["maximum", "exclusiveMaximum"]))] = value + gap + 1
        return value, node
    if kind == "float":
        value = draw(_BOUND)
        return value, {
            "type": "number",
            "exclusiveMinimum": value - 0.5,
            "minimum": value - draw(st.sampled_from([0, 0.25])),
            "exclusiveMaximum": value + 0.001,
        }
    if kind == "str":
        value = draw(st.text(alphabet="abc", min_size=1, max_size=8))
        return value, {
            "type": "string",
            "minLength": len(value),
            "maxLength": len(value) + draw(st.integers(0, 1)),
            "pattern": "^[a-c]+$",
        }
    if kind == "enum":
        value = draw(_SMALL)
        others = draw(st.lists(_SMALL, max_size=3))
        return value, {"type": "integer", "enum": [*others, value], "maximum": value}
    if kind == "list":
        pairs = draw(st.lists(value_and_schema(depth + 1), min_size=1, max_size=3))
        items = [value for value, _ in pairs]
        return items, {
            "type": "array",
            "items": pairs[0][1] if len(pairs) == 1 else {"anyOf": [s for _, s in pairs]},
            "minItems": len(items),
            "maxItems": len(items),
        }
    pairs = draw(st.lists(value_and_schema(depth + 1), min_size=1, max_size=3))
    props = {f"k{i}": schema for i, (_, schema) in enumerate(pairs)}
    return {f"k{i}": value for i, (value, _) in enumerate(pairs)}, {
        "type": "object",
        "properties": props,
        "required": list(props),
        "additionalProperties": False,
    }


@given(value_and_schema(), st.integers(0, 2**32))
@settings(max_examples=300, deadline=None)
def test_a_schema_with_a_known_value_is_answered_validly(pair: tuple[Any, Any], seed: int):
    witness, schema = pair
    assert _valid(schema, witness) == []  # the strategy's own promise
    assert values.problem_of(schema) is None
    assert _valid(schema, values.json_value(random.Random(seed), schema, WORDS)) == []


def test_minimum_and_exclusive_minimum_together() -> None:
    # the issue's case: minimum 5 beside exclusiveMinimum gave 1
    for schema in (
        {"type": "integer", "minimum": 5, "exclusiveMinimum": 0},
        {"type": "number", "minimum": 5, "exclusiveMinimum": 0},
        {"type": "integer", "maximum": -5, "exclusiveMaximum": 10},
    ):
        for seed in range(30):
            assert _valid(schema, values.json_value(random.Random(seed), schema, WORDS)) == []


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        (
            {"type": "integer", "minimum": 5, "exclusiveMaximum": 5},
            "At path 'root': no integer satisfies minimum 5, exclusiveMaximum 5",
        ),
        (
            {
                "type": "object",
                "properties": {"s": {"type": "string", "minLength": 4, "maxLength": 2}},
                "required": ["s"],
            },
            "At path 'properties.s': minLength 4 is greater than maxLength 2",
        ),
        (
            {"type": "array", "items": {"type": "boolean"}, "minItems": 3, "uniqueItems": True},
            "At path 'root': uniqueItems with minItems 3, but its items have only 2 distinct "
            "values",
        ),
        (
            {"type": "string", "enum": ["long", "longer"], "maxLength": 3},
            "At path 'root': no enum value meets the node's other keywords",
        ),
        (
            {"type": "string", "pattern": "^[0-9]{4}$", "maxLength": 3},
            "At path 'root': pattern '^[0-9]{4}$' needs 4 characters or more, maxLength 3",
        ),
        (
            # a required recursion with no way out: every value would be infinite
            {
                "type": "object",
                "properties": {"next": {"$ref": "#"}},
                "required": ["next"],
            },
            "At path 'root': every value would nest without end",
        ),
    ],
    ids=["empty range", "lengths", "unique booleans", "enum", "pattern", "endless"],
)
def test_schemas_without_a_value_are_named(schema: dict[str, Any], problem: str) -> None:
    assert values.problem_of(schema) == problem
    # an optional place without a value is left out, and the rest is answered
    wrapper = {
        "type": "object",
        "properties": {"x": schema, "y": {"type": "string"}},
        "required": ["y"],
    }
    assert values.problem_of(wrapper) is None
    for seed in range(5):
        assert _valid(wrapper, values.json_value(random.Random(seed), wrapper, WORDS)) == []


def _unique(items: dict[str, Any], low: int, **more: Any) -> dict[str, Any]:
    array = {"type": "array", "items": items, "minItems": low, "uniqueItems": True, **more}
    return {"type": "object", "properties": {"x": array}, "required": ["x"]}


_REPEATING = {  # items whose random draws repeat, and how many distinct ones to ask for
    "pattern in anyOf": ({"anyOf": [{"type": "string", "pattern": "^ab"}]}, 4),
    "pattern in nullable anyOf": (
        {"anyOf": [{"type": "string", "pattern": "^ab"}, {"type": "null"}]},
        4,
    ),
    "anchored pattern": ({"type": "string", "pattern": "^ab$", "maxLength": 3}, 2),  # and "ab\n"
    "narrow numbers": ({"type": "number", "minimum": 1, "exclusiveMaximum": 1.01}, 4),
    "narrow numbers in anyOf": (
        {"anyOf": [{"type": "number", "minimum": 1, "maximum": 1.001}]},
        4,
    ),
    "enums in anyOf": (
        {"anyOf": [{"type": "string", "enum": ["a", "b"]}, {"type": "string", "const": "a"}]},
        2,
    ),
    "objects": ({"type": "object", "properties": {"a": {"type": "string", "pattern": "^ab"}}}, 4),
    "objects in anyOf": (
        {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {"a": {"type": "string", "pattern": "^ab"}},
                    "required": ["a"],
                }
            ]
        },
        4,
    ),
    "lists": (
        {"type": "array", "items": {"type": "string", "pattern": "^ab", "maxLength": 2}},
        4,
    ),
    "any one character": ({"type": "string", "pattern": "x*$", "maxLength": 1}, 4),
    "type list": ({"type": ["string", "null"], "maxLength": 0}, 2),  # "" and null
    "dicts": ({"type": "object", "additionalProperties": {"const": 1}, "maxProperties": 1}, 4),
}


@pytest.mark.parametrize("case", list(_REPEATING))
def test_unique_items_whose_draws_repeat_are_made_distinct(case: str) -> None:
    # a value that random draws keep repeating ("ab", 1.0...) is replaced by a valid variant
    items, low = _REPEATING[case]
    schema = _unique(items, low)
    assert values.problem_of(schema) is None
    for seed in range(20):
        value = values.json_value(random.Random(seed), schema, WORDS)
        assert _valid(schema, value) == [], value


@pytest.mark.parametrize(
    ("items", "low", "supply"),
    [
        ({"type": "string", "pattern": "^ab", "maxLength": 2}, 2, 1),
        ({"anyOf": [{"type": "string", "pattern": "^ab", "maxLength": 2}]}, 2, 1),
        ({"type": "string", "pattern": "^(foo|bar)[0-9]{0,3}$", "maxLength": 3}, 3, 2),
        ({"anyOf": [{"type": "string", "enum": ["a"]}, {"type": "string", "const": "a"}]}, 2, 1),
        ({"anyOf": [{"type": "integer", "enum": [1]}, {"type": "number", "const": 1.0}]}, 2, 1),
        ({"type": ["boolean", "null"]}, 4, 3),
        ({"type": "number", "minimum": 0.5, "maximum": 5.5, "multipleOf": 2.0}, 3, 2),
    ],
    ids=[
        "pattern",
        "pattern in anyOf",
        "alternatives",
        "shared enum",
        "1 and 1.0",
        "type list",
        "number steps",
    ],
)
def test_unique_items_beyond_the_distinct_values_are_named(
    items: dict[str, Any], low: int, supply: int
) -> None:
    # counted from the regex and across branches (a value two branches share counts once)
    assert values.problem_of(_unique(items, low)) == (
        f"At path 'properties.x': uniqueItems with minItems {low}, but its items have only "
        f"{supply} distinct values"
    )
    fits = _unique(items, supply)
    assert values.problem_of(fits) is None
    for seed in range(10):
        assert _valid(fits, values.json_value(random.Random(seed), fits, WORDS)) == []


def test_many_unique_items_are_distinct_or_the_answer_is_cut() -> None:
    # repeats are replaced by the item's examples in turn (one character strings too), and the
    # work stays bounded: an array that cannot fit is cut, the same way every time
    for items, low in (
        ({"anyOf": [{"type": "string", "pattern": "^ab"}]}, 2000),
        ({"type": "number", "minimum": 1, "exclusiveMaximum": 1.01}, 1000),
        ({"type": "string", "maxLength": 1}, 300),
        ({"type": "string", "pattern": "x*$", "maxLength": 1}, 300),
    ):
        schema = _unique(items, low)
        value = values.json_value(random.Random(1), schema, WORDS)
        assert _valid(schema, value) == [] and len(value["x"]) >= low
    huge = _unique({"anyOf": [{"type": "string", "pattern": "^ab"}]}, 100_000)
    with pytest.raises(values.AnswerTooLarge) as first:
        values.json_value(random.Random(1), huge, WORDS)
    with pytest.raises(values.AnswerTooLarge) as second:
        values.json_value(random.Random(1), huge, WORDS)
    assert first.value.text == second.value.text and first.value.text.startswith('{"x": ["ab"')


def test_a_list_of_types_is_null_where_its_other_types_have_no_value() -> None:
    schema = {
        "type": "object",
        "properties": {"s": {"type": ["string", "null"], "minLength": 4, "maxLength": 2}},
        "required": ["s"],
    }
    assert values.problem_of(schema) is None
    assert values.json_value(random.Random(0), schema, WORDS) == {"s": None}
    # the first type with a value is drawn, as before
    schema["properties"]["s"] = {"type": ["string", "null"], "maxLength": 3}
    for seed in range(10):
        drawn = values.json_value(random.Random(seed), schema, WORDS)["s"]
        assert isinstance(drawn, str) and len(drawn) <= 3


# -- through the API -----------------------------------------------------------------------------


def _body(schema: dict[str, Any], text: str = "The fan is loud.") -> dict[str, Any]:
    return {
        "model": "kimi-k3.1-pro",
        "messages": [{"role": "user", "content": text}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "s", "strict": True, "schema": schema},
        },
        "reasoning_effort": "low",
    }


def _nested_lists(levels: int, min_items: int | None = None) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        node = {"type": "array", "items": node}
        if min_items is not None:
            node["minItems"] = min_items
    return {"type": "object", "properties": {"x": node}, "required": ["x"]}


def test_a_schema_without_a_value_is_a_400_naming_the_place() -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 5, "exclusiveMaximum": 5}},
        "required": ["n"],
    }
    tool = {
        "type": "function",
        "function": {"name": "record", "parameters": schema},
    }
    with Simulator(api_key=KEY) as sim, httpx.Client(timeout=30) as client:
        headers = {"Authorization": f"Bearer {KEY}"}
        url = sim.base_url + "/v1/chat/completions"
        response = client.post(url, json=_body(schema), headers=headers)
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["message"] == (
            "Invalid request: response_format.json_schema.schema has no valid instance: <At path "
            "'properties.n': no integer satisfies minimum 5, exclusiveMaximum 5>"
        )
        body = {**_body(schema), "response_format": {"type": "text"}, "tools": [tool]}
        response = client.post(url, json=body, headers=headers)
        assert response.status_code == 400
        assert "tools[0].function.parameters has no valid instance" in response.text
        assert sim.stats()["tokens"]["completion"] == 0  # refused up front, nothing billed


def test_nested_lists_are_answered_within_bounded_work() -> None:
    # 16 levels took 1.7 s and deeper ones hung the server: arrays now count as nesting
    for levels in (16, 30, 60):
        schema = _nested_lists(levels)
        value = values.json_value(random.Random(levels), schema, WORDS)
        assert _valid(schema, value) == []
    # each level must hold 2 items: 2**40 strings; the answer is cut, the same way every time
    huge = _nested_lists(40, min_items=2)
    with pytest.raises(values.AnswerTooLarge) as first:
        values.json_value(random.Random(1), huge, WORDS)
    with pytest.raises(values.AnswerTooLarge) as second:
        values.json_value(random.Random(1), huge, WORDS)
    assert first.value.text == second.value.text
    assert first.value.text.startswith('{"x": [[[[') and not first.value.text.endswith("}")
    # 2**8 strings fit: the minimal answer, valid
    small = _nested_lists(8, min_items=2)
    assert _valid(small, values.json_value(random.Random(1), small, WORDS)) == []


def test_deep_item_chains_get_valid_answers_without_recursion() -> None:
    # walle accepts items chains thousands deep; drawing walks them on an explicit stack
    node: dict[str, Any] = {"type": "integer", "minimum": 3}
    for _ in range(3000):
        node = {"type": "array", "items": node, "minItems": 1, "maxItems": 1}
    value = values.json_value(random.Random(0), node, WORDS)
    for _ in range(3000):
        assert isinstance(value, list) and len(value) == 1
        value = value[0]
    assert isinstance(value, int) and value >= 3


def test_deep_item_chains_through_the_api_up_to_the_body_parser() -> None:
    # walle takes them; the simulator answers them as deep as Python's JSON parser reads a body
    # (README: 900 levels answered, 2,000 a 400 "nested too deeply", never a 500)
    with Simulator(api_key=KEY) as sim, httpx.Client(timeout=60) as client:
        for levels, status in ((900, 200), (2000, 400)):
            schema = '{"type": "array", "items": ' * levels + '{"type": "string"}' + "}" * levels
            body = json.dumps(_body({"type": "object"})).replace('{"type": "object"}', schema)
            response = client.post(
                sim.base_url + "/v1/chat/completions",
                content=body.encode(),
                headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
            )
            assert response.status_code == status, response.text[:300]
            if status == 200:
                answer = json.loads(response.json()["choices"][0]["message"]["content"])
                while answer:  # nested lists, ending in strings or empty lists
                    assert isinstance(answer, list)
                    answer = answer[0] if not isinstance(answer[0], str) else None
            else:
                assert "nested too deeply" in response.json()["error"]["message"]


def test_a_pathological_request_never_holds_up_another() -> None:
    # the pathological one is sent first; the normal one, sent once the first is in flight,
    # is answered; the first ends too, cut ("length"). A hang fails on the client timeout.
    with Simulator(api_key=KEY) as sim, httpx.Client(timeout=120) as client:
        headers = {"Authorization": f"Bearer {KEY}"}
        url = sim.base_url + "/v1/chat/completions"
        results: dict[str, httpx.Response] = {}
        started = threading.Event()

        def pathological() -> None:
            started.set()
            results["slow"] = client.post(url, json=_body(_nested_lists(48, 2)), headers=headers)

        thread = threading.Thread(target=pathological)
        thread.start()
        started.wait()
        normal = client.post(url, json=_body(_nested_lists(3)), headers=headers)
        thread.join(timeout=120)
        assert not thread.is_alive()
        assert normal.status_code == 200
        answer = json.loads(normal.json()["choices"][0]["message"]["content"])
        assert _valid(_nested_lists(3), answer) == []
        slow = results["slow"].json()["choices"][0]
        assert results["slow"].status_code == 200 and slow["finish_reason"] == "length"
        assert sim.stats()["in_flight"] == 0


_MARK = 424242424242  # replaced, in the body's text, by an integer of 400 digits
_PLACES = {
    "maximum": {"type": "integer", "maximum": _MARK},
    "default": {"type": "string", "default": _MARK},
    "enum": {"type": "integer", "enum": [1, _MARK]},
    "minItems": {"type": "array", "items": {"type": "string"}, "minItems": _MARK},
}


@pytest.mark.parametrize("tool", [False, True], ids=["response_format", "tool"])
@pytest.mark.parametrize("place", list(_PLACES))
def test_integers_beyond_float64_are_refused_everywhere_as_walle_does(place: str, tool: bool):
    # walle's Go decoder cannot hold them ("expected float64 but got number"): every schema
    # that carries one is a 400, whatever keyword it sits in (one was a 400, another a 200)
    schema = {"type": "object", "properties": {"a": _PLACES[place]}, "required": ["a"]}
    body: dict[str, Any] = {
        "model": "kimi-k3.1-pro",
        "messages": [{"role": "user", "content": "Hi"}],
    }
    if tool:
        body["tools"] = [{"type": "function", "function": {"name": "put", "parameters": schema}}]
        where = "tools.function.parameters"
    else:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "s", "schema": schema},
        }
        where = "response_format.json_schema.schema"
    huge = "9" * 400
    raw = json.dumps(body).replace(str(_MARK), huge).encode()
    with Simulator(api_key=KEY) as sim, httpx.Client(timeout=30) as client:
        response = client.post(
            sim.base_url + "/v1/chat/completions",
            content=raw,
            headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
        )
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert f"{where} is not a valid moonshot flavored json schema" in message
    assert f"expected float64 but got number {huge}" in message
