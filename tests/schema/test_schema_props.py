"""Property test of the schema compiler over generated Pydantic models.

For models built from nested models, optionals, unions, enums, literals, dicts, lists,
recursion, constrained types, datetimes, decimals and tuples:

- the compiled schema passes ``mfjs`` at ``ultra`` (walle's most thorough level);
- any instance drawn from the compiled schema alone is accepted by ``CompiledSchema.parse``
  (decode, then the model's own validation).

The instance generator honours the schema's keywords and, of the words the compiler writes, the
formats, timezone rules and key types. Rules the
compiler states in words only and this generator ignores are kept out of the models: past/future
dates, exclusive bounds and multiples of floats, unique items.
"""

from __future__ import annotations

import itertools
import json
import re
import string
from datetime import UTC, date, datetime, time
from decimal import Decimal
from enum import IntEnum, StrEnum
from typing import Annotated, Any, Literal, Optional, Union
from uuid import UUID

import jsonschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import AwareDatetime, BaseModel, Field, HttpUrl, NaiveDatetime, create_model

from kimi_extract.schema import dialect as mfjs
from kimi_extract.schema.compiled import compile_schema


class Mood(StrEnum):
    happy = "happy"
    sad = "sad"


class Rank(IntEnum):
    low = 1
    high = 2


class Tree(BaseModel):
    """A recursive model."""

    value: int
    kids: list[Tree] = []


LEAVES: list[Any] = [
    str,
    int,
    float,
    bool,
    date,
    datetime,
    time,
    Decimal,
    UUID,
    AwareDatetime,
    NaiveDatetime,
    HttpUrl,
    Mood,
    Rank,
    Tree,
    Literal["a", "b"],
    Literal[1, 2, 3],
    Literal["x", 7],
    Annotated[int, Field(ge=-3, le=40)],
    Annotated[int, Field(gt=0, lt=10)],
    Annotated[float, Field(ge=0.5, le=2.5)],
    Annotated[str, Field(min_length=2, max_length=5)],
    Annotated[str, Field(pattern=r"^[a-z]{2,4}-\d$")],
    Annotated[str, Field(description="described text")],
    Any,
]

_names = itertools.count()


def _model(fields: list[tuple[Any, bool]]) -> type[BaseModel]:
    spec: dict[str, Any] = {}
    for index, (annotation, defaulted) in enumerate(fields):
        name = ["required", "anyOf", f"f{index}"][index % 3] if index < 6 else f"f{index}"
        default = None if defaulted else ...
        if defaulted:
            annotation = Optional[annotation]  # noqa: UP045 (a runtime type expression)
        spec[name] = (annotation, Field(default, description=f"field {index}"))
    return create_model(f"Gen{next(_names)}", __doc__="A generated model.", **spec)


def _extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        inner.map(lambda t: list[t]),
        inner.map(lambda t: Optional[t]),  # noqa: UP045
        st.tuples(inner, inner).map(lambda ts: Union[ts[0], ts[1]]),  # noqa: UP007
        inner.map(lambda t: dict[str, t]),
        inner.map(lambda t: dict[int, t]),
        inner.map(lambda t: dict[Mood, t]),
        inner.map(lambda t: tuple[t, t]),
        st.tuples(inner, inner).map(lambda ts: tuple[ts[0], ts[1]]),
        inner.map(lambda t: Annotated[list[t], Field(min_length=1, max_length=3)]),
        st.lists(st.tuples(inner, st.booleans()), min_size=1, max_size=3).map(_model),
    )


field_types = st.recursive(st.sampled_from(LEAVES), _extend, max_leaves=6)
models = st.lists(st.tuples(field_types, st.booleans()), min_size=1, max_size=6).map(_model)


# ---------------------------------------------------------------------------------------------
# instances from the compiled schema alone

_WORDS = re.compile(r"Constraints: (.*)\.$")
_TEXT = st.text(alphabet=string.ascii_letters + " é", max_size=6)
_ANY = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | _TEXT,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(_TEXT, inner, max_size=2),
    max_leaves=4,
)


def _words(node: dict[str, Any]) -> list[str]:
    match = _WORDS.search(node.get("description", ""))
    return match.group(1).split("; ") if match else []


def instances(
    node: dict[str, Any], defs: dict[str, Any], depth: int = 0, words: tuple[str, ...] = ()
) -> st.SearchStrategy[Any]:
    """Values valid against the compiled node (keywords, plus the words the simulator reads)."""
    words = (*words, *_words(node))
    if "$ref" in node:
        return instances(defs[node["$ref"].removeprefix("#/$defs/")], defs, depth + 1, words)
    if "anyOf" in node:
        branches = node["anyOf"]
        if depth > 3 and {"type": "null"} in branches:
            return st.none()
        return st.one_of([instances(b, defs, depth + 1, words) for b in branches])
    if "enum" in node:
        return st.sampled_from(node["enum"])
    kind = node.get("type")
    if kind == "object" and "properties" in node:
        return st.fixed_dictionaries(
            {name: instances(sub, defs, depth + 1) for name, sub in node["properties"].items()}
        )
    if kind == "object":
        keys = _TEXT
        if "keys: integer values written as text" in words:
            keys = st.integers(-9, 9).map(str)
        for word in words:  # a dict keyed by an Enum whose values may be null
            if word.startswith("keys: one of "):
                keys = st.sampled_from(word.removeprefix("keys: one of ").split(", "))
        values = node["additionalProperties"]
        value = instances(values, defs, depth + 1) if values else _ANY
        return st.dictionaries(keys, value, max_size=0 if depth > 3 else 2)
    if kind == "array":
        low = node.get("minItems", 0)
        high = node.get("maxItems", low + (0 if depth > 3 else 2))
        items = instances(node["items"], defs, depth + 1) if "items" in node else _ANY
        return st.lists(items, min_size=low, max_size=high)
    if kind == "integer":
        return st.integers(node.get("minimum", -1000), node.get("maximum", 1000))
    if kind == "number":
        low, high = node.get("minimum", -1e6), node.get("maximum", 1e6)
        return st.floats(low, high, allow_nan=False, allow_infinity=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    return _strings(node, words)


def _strings(node: dict[str, Any], words: tuple[str, ...]) -> st.SearchStrategy[str]:
    if "pattern" in node:
        return st.from_regex(node["pattern"], fullmatch=True)
    formats = [w.removeprefix("format: ").split(" ")[0] for w in words if w.startswith("format:")]
    if "date" in formats:
        return st.dates().map(date.isoformat)
    if "date-time" in formats:
        aware = "with a UTC offset (timezone-aware)" in words
        moments = st.datetimes(timezones=st.just(UTC) if aware else st.none())
        return moments.map(datetime.isoformat)
    if "time" in formats:
        return st.times().map(time.isoformat)
    if "uuid" in formats:
        return st.uuids().map(str)
    if "uri" in formats:
        return st.sampled_from(["https://example.com/", "http://kimi.test/a?b=1"])
    return st.text(
        alphabet=string.ascii_letters + " é",
        min_size=node.get("minLength", 0),
        max_size=node.get("maxLength", 8),
    )


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(model=models, data=st.data())
def test_compiled_schemas_pass_ultra_and_their_instances_validate(
    model: type[BaseModel], data: st.DataObject
) -> None:
    compiled = compile_schema(model)
    schema = compiled.schema
    assert mfjs.check_schema(schema, "ultra") == []
    assert mfjs.check_schema(schema, "strict") == []
    instance = data.draw(instances(schema, schema.get("$defs", {})))
    jsonschema.validate(instance, schema)  # the generator itself follows the schema
    parsed = compiled.parse(json.dumps(instance))
    assert isinstance(parsed, model)
    # and the model's own values go back to the compiled shape, which the schema accepts
    sent = compiled.encode(parsed.model_dump(mode="json", by_alias=True))
    jsonschema.validate(sent, schema)
    # as pydantic's own JSON round trip (a union such as AwareDatetime | Decimal may move a value
    # to another branch there too)
    expected = model.model_validate_json(parsed.model_dump_json(by_alias=True))
    assert compiled.parse(json.dumps(sent)) == expected
