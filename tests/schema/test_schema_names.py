"""Names and keys the compiler must carry through Kimi's dialect: property names walle refuses
(keywords, the empty name, names with braces) travel renamed and come back; dicts keyed by a
union of string types compile and read back.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any, Literal

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, StringConstraints, create_model

from kimi_extract.schema import dialect as mfjs
from kimi_extract.schema.compiled import CompiledSchema, compile_schema


def compiled(model: type[BaseModel]) -> CompiledSchema:
    result = compile_schema(model)
    for level in mfjs.LEVELS:
        assert mfjs.check_schema(result.schema, level) == [], level
    return result


def round_trip(result: CompiledSchema, value: BaseModel) -> dict[str, Any]:
    """The answer the model would send for ``value``; it validates and parses back to it."""
    encoded = result.encode(value.model_dump(mode="json", by_alias=True))
    jsonschema.Draft202012Validator(result.schema).validate(encoded)
    assert result.parse(json.dumps(encoded)) == value
    return encoded


def test_a_literal_under_a_braced_alias_travels_renamed() -> None:
    # walle refuses {"currency{iso}": {"type": "string", "enum": [...]}}: "invalid path"
    class Price(BaseModel):
        currency: Literal["USD", "EUR"] = Field(alias="currency{iso}")
        note: str | None = Field(default=None, alias="n{}")
        plain: str = Field(alias="a{b")  # one brace: walle reads it fine, it stays

    result = compiled(Price)
    assert list(result.schema["properties"]) == ["currency(iso)", "n()", "a{b"]
    assert result.schema["properties"]["currency(iso)"] == {
        "type": "string",
        "enum": ["USD", "EUR"],
    }
    parsed = result.parse('{"currency(iso)": "EUR", "n()": null, "a{b": "x"}')
    assert parsed == Price.model_validate({"currency{iso}": "EUR", "a{b": "x"})
    round_trip(result, parsed)


def test_a_renamed_name_never_collides() -> None:
    class Both(BaseModel):
        braced: Literal["x"] = Field(alias="k{1}")
        taken: int = Field(alias="k(1)")
        keyword: bool = Field(alias="required")
        keyword_taken: int = Field(alias="required_")

    result = compiled(Both)
    assert list(result.schema["properties"]) == ["k(1)_", "k(1)", "required__", "required_"]
    round_trip(
        result, Both.model_validate({"k{1}": "x", "k(1)": 1, "required": True, "required_": 2})
    )


def test_dict_keys_walle_refuses_travel_renamed() -> None:
    # a dict keyed by a Literal is an object of those keys: a key that is a walle keyword or
    # has braces is renamed like a field
    class Table(BaseModel):
        cells: dict[Literal["a{b}", "required", "x"], int]

    result = compiled(Table)
    cells = result.schema["properties"]["cells"]
    assert list(cells["properties"]) == ["a(b)", "required_", "x"]
    encoded = round_trip(result, Table(cells={"a{b}": 1, "required": 2}))
    assert encoded["cells"] == {"a(b)": 1, "required_": 2, "x": None}


_NAME = st.one_of(
    st.text(alphabet="ab{}()_", min_size=1, max_size=6),
    st.sampled_from(["required", "anyOf", "$ref", "$defs", "additionalProperties", "{0}"]),
)


@given(st.lists(_NAME, min_size=1, max_size=5, unique=True))
@settings(max_examples=150, deadline=None)
def test_any_names_compile_into_the_dialect_and_come_back(names: list[str]) -> None:
    # every field's type puts an enum, anyOf or required below its name (what walle refuses
    # under a braced name)
    kinds: list[Any] = [Literal["p", "q"], int | None, dict[Literal["k"], int]]
    fields: dict[str, Any] = {
        f"f{index}": (kinds[index % 3], Field(alias=name)) for index, name in enumerate(names)
    }
    model = create_model("Named", **fields)
    result = compiled(model)
    samples: list[Any] = ["q", None, {"k": 3}]
    value = model.model_validate({name: samples[i % 3] for i, name in enumerate(names)})
    round_trip(result, value)


class Tone(StrEnum):
    warm = "warm"
    cold = "cold"


@pytest.mark.parametrize(
    ("keys", "sample", "words"),
    [
        (Literal["a", "b"] | str, {"a": 1, "anything": 2}, []),
        (Annotated[str, StringConstraints(max_length=3)] | str, {"long key": 1}, []),
        (Tone | str, {"warm": 1, "other": 2}, []),
        # members that do not take any text: keys that follow the words are valid
        (
            Annotated[str, StringConstraints(max_length=3)] | Literal["total"],
            {"total": 1},
            ["keys: one of total"],
        ),
        (
            Annotated[str, StringConstraints(max_length=3)]
            | Annotated[str, StringConstraints(pattern="^z")],
            {"ab": 1},
            ["max key length: 3"],
        ),
    ],
    ids=[
        "literal|str",
        "constrained|str",
        "enum|str",
        "constrained|literal",
        "constrained|constrained",
    ],
)
def test_dicts_keyed_by_a_union_of_string_types(
    keys: Any, sample: dict[str, int], words: list[str]
) -> None:
    # walle has additionalProperties; pydantic reads JSON keys (text) back through the union
    model = create_model("Keyed", counts=(dict[keys, int], ...))
    result = compiled(model)
    node = result.schema["properties"]["counts"]
    assert node["type"] == "object" and node["additionalProperties"] == {"type": "integer"}
    description = node.get("description", "")
    assert description == (f"Constraints: {'; '.join(words)}." if words else "")
    round_trip(result, model(counts=sample))


def test_a_dict_keyed_by_a_union_of_literals_is_an_object_of_its_keys() -> None:
    class Split(BaseModel):
        counts: dict[Literal["x"] | Literal["y"], int]

    result = compiled(Split)
    assert list(result.schema["properties"]["counts"]["properties"]) == ["x", "y"]
    round_trip(result, Split(counts={"y": 2}))


def test_a_union_of_keys_that_are_not_all_text_is_still_refused() -> None:
    from kimi_extract.exceptions import SchemaError

    with pytest.raises(SchemaError, match="keys"):
        compile_schema(create_model("Mixed", counts=(dict[int | str, int], ...)))
