"""The schema compiler: strict MFJS schemas, constraint text, answer mapping and parsing."""

from __future__ import annotations

import copy
import json
import random
import string
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable, Mapping
from datetime import date, datetime, time
from decimal import Decimal
from enum import Enum, IntEnum, StrEnum
from typing import Annotated, Any, Generic, Literal, Optional, TypeVar
from uuid import UUID

import annotated_types as at
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    FutureDate,
    HttpUrl,
    Json,
    NaiveDatetime,
    PastDate,
    RootModel,
    WithJsonSchema,
    computed_field,
    create_model,
)

from kimi_extract.exceptions import SchemaError
from kimi_extract.schema import dialect as mfjs
from kimi_extract.schema.compiled import (
    AnswerInvalid,
    CompiledSchema,
    compile_schema,
    response_format,
)

# The simulator's answer generator reads the constraint sentence back (a cross-module contract).
values = pytest.importorskip("kimi_extract.simulator.values")

# ---------------------------------------------------------------------------------------------
# an independent checker of every rule the compiler promises

# walle ultra: the keywords each type may carry (MoonshotAI/walle docs/walle.md, "Keyword
# placement"), less the ones the compiler never emits (title, default, $id).
TYPE_KEYWORDS = {
    "object": {"properties", "required", "additionalProperties"},
    "array": {"items", "minItems", "maxItems"},
    "string": {"minLength", "maxLength", "pattern", "enum"},
    "number": {"minimum", "maximum", "enum"},
    "integer": {"minimum", "maximum", "enum"},
    "boolean": {"enum"},
    "null": {"enum"},
}
RESERVED = {"$defs", "$ref", "anyOf", "required", "additionalProperties"}
JSON_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}


def value_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "other"


def assert_strict(schema: dict[str, Any]) -> None:
    """Walk the schema and assert every rule the compiler promises, independently of mfjs."""
    assert schema.get("type") == "object", "root must be an object"
    defs = schema.get("$defs", {})
    assert all("/" not in name for name in defs), "a $defs name with '/'"

    def walk(node: Any, path: str, root: bool = False, branch: bool = False) -> None:
        assert isinstance(node, dict), path
        if not root:
            assert "$defs" not in node, f"{path}: $defs below the root"
        if "description" in node:
            assert isinstance(node["description"], str) and node["description"], path
        if "$ref" in node:
            assert set(node) <= {"$ref", "description"}, f"{path}: $ref siblings {set(node)}"
            assert node["$ref"].startswith("#/$defs/"), path
            target = defs.get(node["$ref"].removeprefix("#/$defs/"))
            assert target is not None, f"{path}: dangling ref"
            assert "$ref" not in target, f"{path}: a definition that is only a $ref"
            if "description" in node:  # ultra: a keyword beside $ref and in its target
                assert not branch, f"{path}: described $ref in an anyOf branch"
                assert "description" not in target and "anyOf" not in target, path
            return
        if "anyOf" in node:
            assert set(node) <= {"anyOf", "description"}, f"{path}: anyOf siblings {set(node)}"
            for index, item in enumerate(node["anyOf"]):
                assert "anyOf" not in item, f"{path}: nested anyOf not flattened"
                assert "type" in item or "$ref" in item, f"{path}.anyOf.{index}: untyped"
                if "description" in node:  # ultra: description on the parent and a branch
                    assert "description" not in item, f"{path}.anyOf.{index}: description"
                walk(item, f"{path}.anyOf.{index}", branch=True)
            return
        kind = node.get("type")
        assert kind in JSON_TYPES, f"{path}: type {kind!r}"
        allowed = {"type", "description"} | TYPE_KEYWORDS[kind] | ({"$defs"} if root else set())
        assert set(node) <= allowed, f"{path}: keywords {set(node) - allowed} on {kind}"
        if "enum" in node:
            kinds = {value_type(v) for v in node["enum"]}
            if kind == "number":
                kinds = {"number" if k == "integer" else k for k in kinds}
            assert kinds == {kind}, f"{path}: enum of {kinds} under type {kind}"
        if kind == "object" and "properties" in node:
            assert node.get("additionalProperties") is False, f"{path}: object not closed"
            assert sorted(node["required"]) == sorted(node["properties"]), f"{path}: required"
            for name, sub in node["properties"].items():
                assert name and name not in RESERVED, f"{path}: property name {name!r}"
                walk(sub, f"{path}.{name}")
        elif kind == "object":  # a dict: additionalProperties is its value schema ({} = any)
            values = node["additionalProperties"]
            assert isinstance(values, dict), path
            if values:
                walk(values, f"{path}{{}}")
        if kind == "array" and "items" in node:
            walk(node["items"], f"{path}[]")
        for low, high in (
            ("minimum", "maximum"),
            ("minLength", "maxLength"),
            ("minItems", "maxItems"),
        ):
            if low in node and high in node:
                assert node[low] <= node[high], path
        if kind == "integer":
            for key in ("minimum", "maximum"):
                assert key not in node or float(node[key]).is_integer(), path

    walk(schema, "", root=True)
    for name, sub in defs.items():
        walk(sub, f"$defs.{name}")


def compiled(model: type[BaseModel]) -> CompiledSchema:
    result = compile_schema(model)
    assert mfjs.check_schema(result.schema, "ultra") == []
    assert_strict(result.schema)
    jsonschema.Draft202012Validator.check_schema(result.schema)
    return result


def props(result: CompiledSchema | dict[str, Any], *path: str) -> dict[str, Any]:
    """The compiled node at a property path (through $refs)."""
    schema = result.schema if isinstance(result, CompiledSchema) else result
    node = schema
    for name in path:
        while "$ref" in node:
            node = schema["$defs"][node["$ref"].removeprefix("#/$defs/")]
        node = node["properties"][name]
    return node


def non_null(node: dict[str, Any]) -> dict[str, Any]:
    """The single non-null branch of an Optional node (or the node itself)."""
    if "anyOf" not in node:
        return node
    others = [b for b in node["anyOf"] if b.get("type") != "null"]
    assert len(others) == 1
    return others[0]


def constraints(node: dict[str, Any]) -> list[str]:
    text = node.get("description", "")
    assert text.count("Constraints: ") <= 1
    if "Constraints: " not in text:
        return []
    sentence = text.split("Constraints: ", 1)[1]
    assert sentence.endswith(".")
    return sentence[:-1].split("; ")


# ---------------------------------------------------------------------------------------------
# models


class Color(StrEnum):
    red = "red"
    green = "green"


class Level(IntEnum):
    low = 1
    high = 2


class Shape(Enum):
    circle = "circle"
    square = "square"


class Item(BaseModel):
    name: str
    qty: Annotated[int, Field(ge=0)] = 1


class Cat(BaseModel):
    kind: Literal["cat"] = "cat"
    lives: int = 9


class Dog(BaseModel):
    kind: Literal["dog"]
    tricks: dict[str, int] = {}


class Node(BaseModel):
    value: int
    children: list[Node] = []


class Left(BaseModel):
    right: Right | None = None
    label: str = ""


class Right(BaseModel):
    left: Left | None = None
    weights: dict[str, float] = {}


T = TypeVar("T")


class Box(BaseModel, Generic[T]):
    content: T


class Everything(BaseModel):
    """A model combining every construct the compiler handles."""

    text: str = Field(description="Free text")
    count: Annotated[int, Field(ge=0, le=10, description="How many")] = 0
    ratio: float
    flag: bool
    maybe: Optional[Annotated[int, Field(gt=0)]] = None  # noqa: UP045 (the spelling is tested)
    either: int | str
    literal: Literal["a", "b"]
    mixed: Literal[1, "one"]
    nullable_literal: Literal[None, "x"]
    color: Color = Color.red
    level: Level
    shape: Shape
    items: list[Item]
    item: Item = Field(alias="mainItem", description="The main item")
    pet: Annotated[Cat | Dog, Field(discriminator="kind")]
    tree: Node
    left: Left
    day: date
    moment: datetime
    at: time
    ident: UUID
    amount: Decimal
    tags: set[str]
    frozen: frozenset[int]
    raw: bytes
    scores: dict[str, int]
    by_level: dict[Level, list[Item]] | None = None
    pair: tuple[int, str]
    many: tuple[float, ...]
    code: Annotated[str, Field(pattern=r"^[A-Z]{3}$", min_length=3, max_length=3)]
    nested_maps: list[dict[str, dict[str, Item]]]


# ---------------------------------------------------------------------------------------------
# compilation, construct by construct


def test_everything_passes_mfjs_and_the_independent_walker() -> None:
    result = compiled(Everything)
    assert result.name == "Everything"
    assert result.needs_mapping
    assert result.schema["description"].startswith("A model combining")
    assert set(result.schema["required"]) == set(result.schema["properties"])


def test_scalars_keep_their_types_and_descriptions() -> None:
    result = compiled(Everything)
    assert props(result, "text") == {"description": "Free text", "type": "string"}
    assert props(result, "ratio") == {"type": "number"}
    assert props(result, "flag") == {"type": "boolean"}
    assert props(result, "raw") == {"type": "string"}  # bytes travel as UTF-8 text


def test_nested_model_is_a_closed_ref_with_alias() -> None:
    result = compiled(Everything)
    assert "mainItem" in result.schema["properties"] and "item" not in result.schema["properties"]
    assert props(result, "mainItem") == {"description": "The main item", "$ref": "#/$defs/Item"}
    item = result.schema["$defs"]["Item"]
    assert item["required"] == ["name", "qty"] and item["additionalProperties"] is False


def test_defaulted_fields_become_nullable() -> None:
    result = compiled(Everything)
    count = props(result, "count")
    # walle ultra keeps bounds as keywords (docs/walle.md "Keyword placement": minimum/maximum)
    assert count["anyOf"] == [{"type": "integer", "minimum": 0, "maximum": 10}, {"type": "null"}]
    assert count["description"] == "How many"
    color = props(result, "color")
    assert color["anyOf"] == [{"$ref": "#/$defs/Color"}, {"type": "null"}]
    # already nullable: no second null branch
    maybe = props(result, "maybe")
    # an integer's exclusive bound is the next inclusive one
    assert maybe["anyOf"] == [{"type": "integer", "minimum": 1}, {"type": "null"}]


def test_union_branches_carry_types_and_parent_none() -> None:
    result = compiled(Everything)
    assert props(result, "either") == {"anyOf": [{"type": "integer"}, {"type": "string"}]}


def test_literals_and_enums_are_single_typed() -> None:
    result = compiled(Everything)
    assert props(result, "literal") == {"type": "string", "enum": ["a", "b"]}
    assert props(result, "mixed") == {
        "anyOf": [{"type": "integer", "enum": [1]}, {"type": "string", "enum": ["one"]}]
    }
    assert props(result, "nullable_literal") == {
        "anyOf": [{"type": "null"}, {"type": "string", "enum": ["x"]}]
    }
    defs = result.schema["$defs"]
    assert defs["Color"] == {"type": "string", "enum": ["red", "green"]}
    assert defs["Level"] == {"type": "integer", "enum": [1, 2]}
    assert defs["Shape"] == {"type": "string", "enum": ["circle", "square"]}


def test_const_becomes_a_typed_enum_of_one() -> None:
    class Tagged(BaseModel):
        kind: Literal["only"]
        number: Literal[7]

    result = compiled(Tagged)
    assert props(result, "kind") == {"type": "string", "enum": ["only"]}
    assert props(result, "number") == {"type": "integer", "enum": [7]}


def test_list_of_models() -> None:
    result = compiled(Everything)
    assert props(result, "items") == {"type": "array", "items": {"$ref": "#/$defs/Item"}}


def test_discriminated_union_is_anyof_of_refs_with_required_tags() -> None:
    result = compiled(Everything)
    assert props(result, "pet") == {"anyOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}]}
    cat = result.schema["$defs"]["Cat"]
    # the tag has a default but stays non-null: pydantic needs it to pick the branch
    assert cat["properties"]["kind"] == {"type": "string", "enum": ["cat"]}
    assert non_null(cat["properties"]["lives"]) == {"type": "integer"}
    parsed = result.parse(json.dumps(encoded_everything()))
    assert isinstance(parsed, Everything) and isinstance(parsed.pet, Dog)


def test_recursive_self_model_keeps_def_for_self_reference() -> None:
    result = compiled(Node)
    schema = result.schema
    assert schema["type"] == "object" and "$ref" not in schema
    assert non_null(schema["properties"]["children"]) == {
        "type": "array",
        "items": {"$ref": "#/$defs/Node"},
    }
    assert schema["$defs"]["Node"]["properties"].keys() == schema["properties"].keys()
    tree = result.parse('{"value": 1, "children": [{"value": 2, "children": null}]}')
    assert tree == Node(value=1, children=[Node(value=2)])


def test_mutually_recursive_models() -> None:
    result = compiled(Left)
    defs = result.schema["$defs"]
    assert non_null(defs["Right"]["properties"]["left"]) == {"$ref": "#/$defs/Left"}
    assert non_null(props(result, "right")) == {"$ref": "#/$defs/Right"}
    answer = {
        "right": {"left": {"right": None, "label": "deep"}, "weights": {"w": 0.5}},
        "label": None,
    }
    parsed = result.parse(json.dumps(answer))
    assert parsed == Left(right=Right(left=Left(label="deep"), weights={"w": 0.5}))


def test_formats_become_constraint_text() -> None:
    result = compiled(Everything)
    assert constraints(props(result, "day")) == ["format: date (YYYY-MM-DD)"]
    assert constraints(props(result, "moment")) == ["format: date-time (ISO 8601)"]
    assert constraints(props(result, "at")) == ["format: time (HH:MM:SS)"]
    assert constraints(props(result, "ident")) == ["format: uuid"]


def test_decimal_is_number_or_numeric_string() -> None:
    result = compiled(Everything)
    amount = props(result, "amount")
    assert amount == {
        "anyOf": [
            {"type": "number"},
            {"type": "string", "pattern": r"^-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]{1,6})?$"},
        ]
    }

    class Money(BaseModel):
        price: Annotated[Decimal, Field(max_digits=6, decimal_places=2)]

    assert constraints(props(compiled(Money), "price")) == [
        "max digits: 6",
        "max decimal places: 2",
    ]
    assert Money.model_validate_json('{"price": "1234.50"}').price == Decimal("1234.50")


def test_sets_are_arrays_with_unique_items_text() -> None:
    result = compiled(Everything)
    assert props(result, "tags") == {
        "description": "Constraints: unique items.",
        "type": "array",
        "items": {"type": "string"},
    }
    assert constraints(props(result, "frozen")) == ["unique items"]


def test_string_and_number_constraints_text_is_exact() -> None:
    class Bounds(BaseModel):
        code: Annotated[str, Field(pattern=r"^[A-Z]{3}$", min_length=3, max_length=3)]
        tiny: Annotated[float, Field(gt=1e-7, lt=2.5, multiple_of=0.25)]
        big: Annotated[int, Field(ge=-5, le=10**12)]
        short: Annotated[list[int], Field(min_length=1, max_length=4)]
        url_ish: Annotated[str, Field(description="Where", max_length=20)]

    result = compiled(Bounds)
    # kept as keywords (walle ultra accepts them), not as words
    assert props(result, "code") == {
        "type": "string",
        "minLength": 3,
        "maxLength": 3,
        "pattern": "^[A-Z]{3}$",
    }
    # exclusive bounds and multiples of floats: words only
    assert props(result, "tiny")["type"] == "number" and "minimum" not in props(result, "tiny")
    assert constraints(props(result, "tiny")) == [
        "exclusive minimum: 0.0000001",
        "exclusive maximum: 2.5",
        "multiple of: 0.25",
    ]
    assert props(result, "big") == {"type": "integer", "minimum": -5, "maximum": 10**12}
    assert props(result, "short") == {
        "type": "array",
        "items": {"type": "integer"},
        "minItems": 1,
        "maxItems": 4,
    }
    assert props(result, "url_ish") == {"description": "Where", "type": "string", "maxLength": 20}


def test_constraint_text_is_what_the_simulator_reads() -> None:
    class Bounds(BaseModel):
        score: Annotated[int, Field(ge=1, le=5)]
        when: date
        names: Annotated[list[str], Field(min_length=2, max_length=3)]

    result = compiled(Bounds)
    read = values.constraints_of
    assert read(props(result, "score")) == {"minimum": 1, "maximum": 5}
    assert read(props(result, "when")) == {"format": "date"}
    assert read(props(result, "names")) == {"min items": 2, "max items": 3}


def test_dict_becomes_additional_properties() -> None:
    # walle.md: additionalProperties may be a schema at every level; {} is ANY
    result = compiled(Everything)
    assert props(result, "scores") == {
        "type": "object",
        "additionalProperties": {"type": "integer"},
    }
    # Enum keys: an object of exactly those keys, each nullable (null = absent), mapped back
    by_level = non_null(props(result, "by_level"))
    items = {"type": "array", "items": {"$ref": "#/$defs/Item"}}
    assert by_level["properties"] == {
        "1": {"anyOf": [items, {"type": "null"}]},
        "2": {"anyOf": [items, {"type": "null"}]},
    }
    assert by_level["additionalProperties"] is False
    nested = props(result, "nested_maps")["items"]["additionalProperties"]
    assert nested["additionalProperties"] == {"$ref": "#/$defs/Item"}


def test_typed_dict_keys_round_trip() -> None:
    class Keys(BaseModel):
        by_int: dict[int, str]
        by_day: dict[date, int]
        by_color: dict[Color, int]
        by_uuid: dict[UUID, bool]

    result = compiled(Keys)
    assert props(result, "by_int")["additionalProperties"] == {"type": "string"}
    assert constraints(props(result, "by_int")) == ["keys: integer values written as text"]
    assert constraints(props(result, "by_day")) == ["keys: format date"]
    assert list(props(result, "by_color")["properties"]) == ["red", "green"]
    value = Keys(
        by_int={3: "x", -1: "y"},
        by_day={date(2024, 2, 29): 1},
        by_color={Color.green: 2},
        by_uuid={UUID(int=7): True},
    )
    encoded = result.encode(value.model_dump(mode="json", by_alias=True))
    assert encoded["by_int"] == {"3": "x", "-1": "y"}
    jsonschema.validate(encoded, result.schema)
    assert result.parse(json.dumps(encoded)) == value


def test_tuples() -> None:
    result = compiled(Everything)
    # heterogeneous: an object keyed by position, mapped back to the tuple
    assert props(result, "pair") == {
        "description": "A tuple, written as an object whose keys are its positions 0, 1.",
        "type": "object",
        "properties": {"0": {"type": "integer"}, "1": {"type": "string"}},
        "required": ["0", "1"],
        "additionalProperties": False,
    }
    assert props(result, "many") == {"type": "array", "items": {"type": "number"}}

    class Same(BaseModel):
        point: tuple[float, float]
        pets: tuple[Cat, dict[str, int]]
        lists: tuple[dict[str, int], list[int], dict[str, str]] = ({}, [], {})

    same = compiled(Same)
    # homogeneous: an array of exactly n items (walle ultra: minItems/maxItems)
    assert props(same, "point") == {
        "type": "array",
        "items": {"type": "number"},
        "minItems": 2,
        "maxItems": 2,
    }
    assert list(props(same, "pets")["properties"]) == ["0", "1"]
    value = Same(point=(1.5, 2.0), pets=(Cat(), {"a": 1}), lists=({"b": 2}, [3], {}))
    encoded = same.encode(value.model_dump(mode="json", by_alias=True))
    assert encoded["pets"] == {"0": {"kind": "cat", "lives": 9}, "1": {"a": 1}}
    jsonschema.validate(encoded, same.schema)
    assert same.parse(json.dumps(encoded)) == value
    with pytest.raises(AnswerInvalid) as caught:
        same.parse('{"point": [1.0], "pets": {"0": {"kind": "cat", "lives": 1}}, "lists": null}')
    assert caught.value.kind == "validation"
    assert any(line.startswith("point") for line in caught.value.errors)
    assert any(line.startswith("pets") for line in caught.value.errors)


def test_schema_name_is_cleaned_and_cut() -> None:
    assert compiled(Box[int]).name == "Box_int_"
    long_model = type("X" * 80, (BaseModel,), {"__annotations__": {"a": int}})
    assert compiled(long_model).name == "X" * 64


def test_compile_is_cached_and_response_format_is_a_copy() -> None:
    first = compile_schema(Everything)
    assert compile_schema(Everything) is first
    fmt = response_format(Everything)
    assert fmt == {
        "type": "json_schema",
        "json_schema": {"name": "Everything", "strict": True, "schema": first.schema},
    }
    fmt["json_schema"]["schema"]["properties"].clear()
    assert first.schema["properties"]


def test_fast_path_flags() -> None:
    class Plain(BaseModel):
        a: int
        b: list[str]
        c: str | None = None

    assert not compiled(Plain).needs_mapping
    assert compiled(Item).needs_mapping  # qty has a non-null default


def test_computed_fields_and_extras_are_not_sent() -> None:
    class Priced(BaseModel):
        model_config = ConfigDict(extra="allow")
        net: float

        @computed_field  # type: ignore[prop-decorator]
        @property
        def gross(self) -> float:
            return self.net * 1.2

    result = compiled(Priced)
    assert list(result.schema["properties"]) == ["net"]
    value = Priced(net=10.0, other="x")  # type: ignore[call-arg]
    encoded = result.encode(value.model_dump(mode="json", by_alias=True))
    assert encoded == {"net": 10.0}


def test_strict_models_validate_answers_in_json_mode() -> None:
    class StrictModel(BaseModel):
        model_config = ConfigDict(strict=True)
        day: date
        counts: dict[int, Level]
        pair: tuple[int, int]

    result = compiled(StrictModel)
    parsed = result.parse(json.dumps({"day": "2024-01-02", "counts": {"4": 2}, "pair": [1, 2]}))
    assert parsed == StrictModel(day=date(2024, 1, 2), counts={4: Level.high}, pair=(1, 2))


def test_mapping_like_types_and_json_text() -> None:
    class Mappings(BaseModel):
        plain: Mapping[str, int]
        ordered: OrderedDict[str, int]
        counted: Counter[str]
        grouped: defaultdict[str, list[int]]
        document: Json[list[int]]

    result = compiled(Mappings)
    for name in ("plain", "ordered", "counted", "grouped"):
        assert props(result, name)["type"] == "object"
        assert "additionalProperties" in props(result, name)
    assert props(result, "document")["type"] == "string"
    value = Mappings(
        plain={"x": 1},
        ordered=OrderedDict(y=2),
        counted=Counter("aab"),
        grouped=defaultdict(list, {"q": [1]}),
        document="[1, 2]",
    )  # type: ignore[arg-type]
    encoded = result.encode(value.model_dump(mode="json", by_alias=True))
    assert encoded["document"] == "[1, 2]"
    assert_round_trip(result, value)


def test_custom_json_schemas_are_normalized() -> None:
    class Custom(BaseModel):
        one_of: Annotated[
            int | Literal["x"],
            WithJsonSchema(
                {
                    "oneOf": [{"type": "integer"}, {"const": "x", "type": "string"}],
                    "title": "T",
                    "examples": [1],
                    "$comment": "c",
                }
            ),
        ]
        listed: Annotated[int | None, WithJsonSchema({"type": ["integer", "null"]})]
        wrapped: Annotated[
            str,
            WithJsonSchema(
                {"allOf": [{"type": "string", "format": "email"}], "description": "Mail"}
            ),
        ]
        extra: str = Field(title="Extra", examples=["e"], json_schema_extra={"x-extra": 1})

    result = compiled(Custom)
    assert props(result, "one_of") == {
        "anyOf": [{"type": "integer"}, {"type": "string", "enum": ["x"]}]
    }
    assert props(result, "listed") == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert props(result, "wrapped") == {
        "description": "Mail. Constraints: format: email.",
        "type": "string",
    }
    assert non_null(props(result, "extra")) == {"type": "string"}

    class Intersection(BaseModel):
        both: Annotated[int, WithJsonSchema({"allOf": [{"type": "integer"}, {"minimum": 1}]})]

    with pytest.raises(SchemaError, match="field 'both' is an intersection"):
        compile_schema(Intersection)


# ---------------------------------------------------------------------------------------------
# refusals


class AnyField(BaseModel):
    payload: Any


class Meta(BaseModel):
    meta: dict[str, Any]


class Outer(BaseModel):
    rows: list[Meta]


class Opaque:
    pass


def one_field(name: str, annotation: Any, arbitrary: bool = False) -> type[BaseModel]:
    """A model named ``name`` with one required field ``x`` of the given type."""
    config = ConfigDict(arbitrary_types_allowed=arbitrary)
    return create_model(name, __config__=config, x=(annotation, ...))


@pytest.mark.parametrize(
    ("model", "field", "words"),
    [
        (one_field("TupleKeys", dict[tuple[int, int], str]), "x", "keys"),
        (one_field("LiteralKeys", dict[Literal[1, 2], str]), "x", "keys"),
        (one_field("OptionalKeys", dict[str | None, str]), "x", "keys"),
        (one_field("Arbitrary", Opaque, arbitrary=True), "x", "no JSON form"),
        (
            one_field(
                "Tail",
                Annotated[
                    list[Any],
                    WithJsonSchema(
                        {"type": "array", "prefixItems": [{"type": "integer"}], "items": {}}
                    ),
                ],
            ),
            "x",
            "prefixItems",
        ),
    ],
    ids=lambda value: value.__name__ if isinstance(value, type) else None,
)
def test_unsupported_types_raise_schema_error_naming_the_field(
    model: type[BaseModel], field: str, words: str
) -> None:
    with pytest.raises(SchemaError) as caught:
        compile_schema(model)
    message = str(caught.value)
    assert message.startswith(f"{model.__name__}: field '{field}' ")
    assert words in message
    assert "strict JSON schema" in message and ";" in message  # reason, then a suggested fix


@pytest.mark.parametrize(
    ("model", "value"),
    [
        (AnyField, AnyField(payload={"a": [1, "x", None]})),
        (Meta, Meta(meta={"k": [1, {"z": True}]})),
        (Outer, Outer(rows=[Meta(meta={})])),
        (one_field("BareList", list), {"x": [1, "a"]}),
        (one_field("BareDict", dict), {"x": {"a": 1}}),
        (one_field("ListAny", list[Any]), {"x": [None, 2.5]}),
        (one_field("AnyKeys", dict[Any, str]), {"x": {"k": "v"}}),
        (one_field("BoxAny", Box[Any]), {"x": {"content": "anything"}}),
        (one_field("DictOrList", dict[str, int] | list[int]), {"x": {"a": 1}}),
        (one_field("DictOrSet", list[int] | dict[str, int] | None), {"x": [1, 2]}),
    ],
    ids=lambda value: value.__name__ if isinstance(value, type) else None,
)
def test_untyped_values_and_open_dicts_compile(model: type[BaseModel], value: Any) -> None:
    # walle.md: additionalProperties {} is ANY; Any is spelled out as every JSON type
    result = compiled(model)
    instance = value if isinstance(value, BaseModel) else model.model_validate(value)
    assert_round_trip(result, instance)
    if model is Meta:
        assert props(result, "meta") == {"type": "object", "additionalProperties": {}}
    if model is AnyField:
        kinds = {branch["type"] for branch in props(result, "payload")["anyOf"]}
        assert kinds == JSON_TYPES - {"integer"}


def test_root_models_compile() -> None:
    class Scores(RootModel[list[int]]):
        pass

    class Wrapped(RootModel[Item]):
        pass

    class Holder(BaseModel):
        main: Wrapped
        scores: Scores

    scores = compiled(Scores)
    assert scores.schema["properties"]["root"] == {"type": "array", "items": {"type": "integer"}}
    assert scores.parse('{"root": [1, 2]}') == Scores([1, 2])
    assert scores.encode([3]) == {"root": [3]}
    with pytest.raises(AnswerInvalid) as caught:
        scores.parse('{"root": [1, "x"]}')
    assert caught.value.errors == [
        "root.1: Input should be a valid integer, unable to parse string as an integer"
    ]
    assert compiled(Wrapped).schema["properties"].keys() == {"name", "qty"}
    holder = compiled(Holder)
    # a RootModel of a model is no $defs entry that is only a $ref
    assert props(holder, "main") == {"$ref": "#/$defs/Item"}
    assert "Wrapped" not in holder.schema["$defs"]
    assert_round_trip(holder, Holder(main=Wrapped(Item(name="a")), scores=Scores([1])))


def test_reserved_property_names_travel_renamed() -> None:
    # walle.md "Object": property names must not be $defs, $ref, anyOf, required,
    # additionalProperties
    class Rule(BaseModel):
        required: bool
        any_of: list[str] = Field(alias="anyOf")
        required_: int = 0

    result = compiled(Rule)
    assert list(result.schema["properties"]) == ["required__", "anyOf_", "required_"]
    parsed = result.parse('{"required__": true, "anyOf_": ["a"], "required_": 2}')
    assert parsed == Rule(required=True, anyOf=["a"], required_=2)
    assert_round_trip(result, parsed)


def test_defs_names_are_sanitized() -> None:
    # walle.md: "$defs names must not contain /"
    from kimi_extract.schema.compile import _Compiler

    model = {"type": "object", "properties": {"v": {"type": "integer"}}, "required": ["v"]}
    source = {
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/pkg/Model"}, "y": {"$ref": "#/$defs/pkg_Model"}},
        "required": ["x", "y"],
        "$defs": {"pkg/Model": model, "pkg_Model": model},
    }
    schema, _ = _Compiler("M", source).compile()
    assert sorted(schema["$defs"]) == ["pkg_Model", "pkg_Model_2"]
    assert schema["properties"]["x"] == {"$ref": "#/$defs/pkg_Model"}
    assert schema["properties"]["y"] == {"$ref": "#/$defs/pkg_Model_2"}
    assert mfjs.check_schema(schema, "ultra") == []


def test_limits_are_refused_before_any_request_naming_the_limit() -> None:
    # walle conf.go defaults: depth 30, 3000 properties, 120000 bytes, 1000 enum values
    deep: type[BaseModel] = create_model("Level0", leaf=(int, ...))
    for index in range(1, 32):
        deep = create_model(f"Level{index}", inner=(deep, ...))
    with pytest.raises(SchemaError, match=r"nests objects deeper .* \(30 levels\)"):
        compile_schema(deep)
    wide = create_model("Wide", **{f"f{i}": (int, ...) for i in range(3001)})  # type: ignore
    with pytest.raises(SchemaError, match=r"more properties in all .* \(3000\)"):
        compile_schema(wide)
    text = "x" * 2000
    wordy = create_model(
        "Wordy",
        **{f"f{i}": (int, Field(description=text)) for i in range(70)},  # type: ignore
    )
    with pytest.raises(SchemaError, match=r"longer than .* \(120000 bytes of JSON\)"):
        compile_schema(wordy)
    many = create_model("Many", pick=(Literal[tuple(range(1001))], ...))  # type: ignore
    with pytest.raises(SchemaError, match=r"more values .* \(1000\)") as caught:
        compile_schema(many)
    assert "properties.pick" in str(caught.value)
    # the Extractor compiles when it is built: no request is ever sent
    from kimi_extract import Extractor

    with pytest.raises(SchemaError, match="30 levels"):
        Extractor(deep, api_key="sk-test", base_url="http://127.0.0.1:9")


def test_schema_error_is_a_configuration_error() -> None:
    with pytest.raises(ValueError):
        compile_schema(one_field("TupleKeys", dict[tuple[int, int], str]))


@pytest.mark.parametrize("thing", [dict, int, Item(name="x"), "Item", None])
def test_non_models_raise_type_error(thing: Any) -> None:
    with pytest.raises(TypeError, match="BaseModel subclass"):
        compile_schema(thing)


# ---------------------------------------------------------------------------------------------
# parse


class Aspect(BaseModel):
    name: str
    score: Annotated[int, Field(ge=0, le=5)]


class Review(BaseModel):
    aspects: list[Aspect]
    verdict: str = Field(alias="Verdict")


class Tally(BaseModel):
    counts: dict[str, Annotated[int, Field(ge=0)]]
    note: str = "none"
    more: list[Tally] = []


GOOD_REVIEW = '{"aspects": [{"name": "fan", "score": 2}], "Verdict": "ok"}'


def test_parse_fast_path() -> None:
    result = compiled(Review)
    assert not result.needs_mapping
    parsed = result.parse(GOOD_REVIEW)
    assert parsed == Review(aspects=[Aspect(name="fan", score=2)], Verdict="ok")


@pytest.mark.parametrize(
    "text",
    [
        f"  \n{GOOD_REVIEW}\n ",
        f"```json\n{GOOD_REVIEW}\n```",
        f"```\n{GOOD_REVIEW}```",
        f"Here you go:\n```json\n{GOOD_REVIEW}\n```\nAnything else?",
        f"Sure! {GOOD_REVIEW} Hope that helps.",
    ],
)
def test_parse_strips_fences_and_surroundings(text: str) -> None:
    assert compiled(Review).parse(text).verdict == "ok"  # type: ignore[attr-defined]
    tally = compiled(Tally).parse(text.replace(GOOD_REVIEW, '{"counts": {}, "note": "n"}'))
    assert tally == Tally(counts={}, note="n")


@pytest.mark.parametrize("model", [Review, Tally])
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"aspects": [', "$: Invalid JSON: EOF while parsing"),
        ("", "$: the answer is empty"),
        ("   ", "$: the answer is empty"),
        ("I cannot answer that.", "$: expected one JSON object, got text: 'I cannot answer"),
        ('{"aspects": [1, 2] "x"}', "$: Invalid JSON: "),
    ],
)
def test_parse_json_errors(model: type[BaseModel], text: str, expected: str) -> None:
    with pytest.raises(AnswerInvalid) as caught:
        compiled(model).parse(text)
    assert caught.value.kind == "json"
    assert len(caught.value.errors) == 1 and caught.value.errors[0].startswith(expected)


def test_parse_validation_errors_name_the_fields_as_sent() -> None:
    result = compiled(Review)
    with pytest.raises(AnswerInvalid) as caught:
        result.parse('{"aspects": [{"name": "a", "score": 1}, {"name": "b", "score": -1}]}')
    assert caught.value.kind == "validation"
    assert caught.value.errors == [
        "aspects.1.score: Input should be greater than or equal to 0",
        "Verdict: Field required",
    ]
    assert "aspects.1.score" in str(caught.value)
    with pytest.raises(AnswerInvalid) as caught:
        result.parse("[1, 2]")
    assert caught.value.errors[0].startswith("$: ")


def test_parse_mapped_errors_point_into_the_answer_as_sent() -> None:
    result = compiled(Tally)
    answer = {
        "counts": {"a": 1},
        "note": None,
        "more": [{"counts": {"x": 1, "y": -2}, "note": "n", "more": []}],
    }
    with pytest.raises(AnswerInvalid) as caught:
        result.parse(json.dumps(answer))
    assert caught.value.errors == ["more.0.counts.y: Input should be greater than or equal to 0"]

    class Keyword(BaseModel):
        required: list[Annotated[int, Field(ge=0)]]
        pair: tuple[int, str]

    keyword = compiled(Keyword)
    with pytest.raises(AnswerInvalid) as caught:
        keyword.parse('{"required_": [1, -1], "pair": {"0": "x", "1": "y"}}')
    assert caught.value.errors == [
        "required_.1: Input should be greater than or equal to 0",
        "pair.0: Input should be a valid integer, unable to parse string as an integer",
    ]


def test_parse_a_map_that_is_not_an_object_is_a_validation_error() -> None:
    with pytest.raises(AnswerInvalid) as caught:
        compiled(Tally).parse(json.dumps({"counts": [["a", 1]], "note": None, "more": None}))
    assert caught.value.kind == "validation"
    assert caught.value.errors[0] == "counts: Input should be an object"


def test_null_for_a_defaulted_field_applies_the_default() -> None:
    result = compiled(Item)
    assert result.parse('{"name": "x", "qty": null}') == Item(name="x", qty=1)
    assert result.parse('{"name": "x", "qty": 4}') == Item(name="x", qty=4)
    tally = compiled(Tally).parse('{"counts": {}, "note": null, "more": null}')
    assert tally == Tally(counts={})
    # nested in lists, dicts, unions and refs
    answer = encoded_everything()
    answer["items"] = [{"name": "a", "qty": None}]
    answer["by_level"] = {"2": [{"name": "b", "qty": None}]}
    answer["count"] = None
    answer["pet"] = {"kind": "cat", "lives": None}
    parsed = compiled(Everything).parse(json.dumps(answer))
    assert isinstance(parsed, Everything)
    assert parsed.items == [Item(name="a")] and parsed.count == 0
    assert parsed.by_level == {Level.high: [Item(name="b")]}
    assert parsed.pet == Cat()


def test_null_for_a_nullable_default_stays_null() -> None:
    class Opt(BaseModel):
        a: int | None = 5

    assert compiled(Opt).parse('{"a": null}') == Opt(a=None)


def test_a_constraint_violation_names_the_field() -> None:
    with pytest.raises(AnswerInvalid) as caught:
        compiled(Item).parse('{"name": "x", "qty": -3}')
    assert caught.value.errors == ["qty: Input should be greater than or equal to 0"]


def test_answer_invalid_pickles() -> None:
    import pickle

    error = AnswerInvalid("validation", ["a: bad"])
    again = pickle.loads(pickle.dumps(error))
    assert (again.kind, again.errors, str(again)) == ("validation", ["a: bad"], str(error))


def test_decode_and_encode_never_mutate_their_input() -> None:
    result = compiled(Everything)
    sent = encoded_everything()
    sent["count"] = None
    before = copy.deepcopy(sent)
    decoded = result.decode(sent)
    assert sent == before
    assert "count" not in decoded
    assert decoded["scores"] == {"a": 1, "b": 2}
    dumped = sample_everything().model_dump(mode="json", by_alias=True)
    before = copy.deepcopy(dumped)
    result.encode(dumped)
    assert dumped == before


def test_simulator_answers_for_compiled_schemas_parse() -> None:
    class Simulated(BaseModel):
        title: Annotated[str, Field(min_length=2, max_length=40)]
        score: Annotated[int, Field(ge=1, le=5)]
        when: date
        ident: UUID
        pet: Annotated[Cat | Dog, Field(discriminator="kind")]
        tree: Node
        counts: dict[str, int]
        by_level: dict[Level, Item] = {}
        items: Annotated[list[Item], Field(min_length=1, max_length=3)]
        # the simulator reads the words and keywords the compiler writes for these
        amount: Decimal
        aware: AwareDatetime
        naive: NaiveDatetime
        past: PastDate
        future: FutureDate
        url: HttpUrl
        code: Annotated[str, Field(pattern=r"^[A-Z]{3}-\d{2}$")]
        pair: tuple[int, str]
        point: tuple[float, float]
        extra: dict[str, Any]
        anything: Any
        required: bool

    result = compiled(Simulated)
    for seed in range(40):
        words = ["a", "review", "of", "the", "fan"]
        value = values.json_value(random.Random(seed), result.schema, words)
        assert isinstance(result.parse(json.dumps(value)), Simulated)


# ---------------------------------------------------------------------------------------------
# round trip: instance -> dump -> encode -> (valid against the schema) -> JSON -> parse


def sample_everything() -> Everything:
    return Everything(
        text="t",
        ratio=0.5,
        flag=True,
        either="s",
        literal="a",
        mixed=1,
        nullable_literal=None,
        level=Level.low,
        shape=Shape.square,
        items=[Item(name="a", qty=2)],
        mainItem=Item(name="m"),
        pet=Dog(kind="dog", tricks={"sit": 1}),
        tree=Node(value=1, children=[Node(value=2)]),
        left=Left(right=Right(weights={"w": 1.0})),
        day=date(2024, 1, 2),
        moment=datetime(2024, 1, 2, 3, 4, 5),
        at=time(1, 2, 3),
        ident=UUID(int=1),
        amount=Decimal("1.25"),
        tags={"x"},
        frozen=frozenset({1}),
        raw=b"bytes",
        scores={"a": 1, "b": 2},
        by_level={Level.high: [Item(name="h")]},
        pair=(1, "p"),
        many=(1.0, 2.5),
        code="ABC",
        nested_maps=[{"outer": {"inner": Item(name="i")}}],
    )


def encoded_everything() -> dict[str, Any]:
    result = compile_schema(Everything)
    encoded = result.encode(sample_everything().model_dump(mode="json", by_alias=True))
    assert isinstance(encoded, dict)
    return encoded


def assert_round_trip(result: CompiledSchema, value: BaseModel) -> None:
    dumped = value.model_dump(mode="json", by_alias=True)
    encoded = result.encode(dumped)
    jsonschema.Draft202012Validator(result.schema).validate(encoded)
    assert result.parse(json.dumps(encoded)) == value


def test_round_trip_everything() -> None:
    assert_round_trip(compiled(Everything), sample_everything())


class Flat(BaseModel):
    name: str
    count: Annotated[int, at.Ge(0)] = 0
    ratio: float
    flag: bool
    maybe: int | None = None
    either: int | str
    literal: Literal["a", "b"]
    mixed: Literal[1, "one", None]
    color: Color = Color.red
    level: Level
    shape: Shape
    day: date
    moment: datetime
    at: time
    ident: UUID
    amount: Decimal
    tags: set[str]
    frozen: frozenset[int]
    raw: bytes
    pair: tuple[int, str]
    many: tuple[float, ...]
    renamed: str = Field(alias="Renamed")


class Maps(BaseModel):
    scores: dict[str, int]
    by_int: dict[int, list[Item]]
    by_color: dict[Color, str] = {}
    optional: dict[str, Item] | None = None
    listed: list[dict[str, float]]
    nested: dict[str, dict[str, int]]
    pair: tuple[dict[str, int], int]
    either: dict[str, int] | int
    two: dict[str, int] | dict[str, str]


class Unions(BaseModel):
    pet: Annotated[Cat | Dog, Field(discriminator="kind")]
    pets: list[Annotated[Cat | Dog, Field(discriminator="kind")]]
    thing: Item | dict[str, int]
    num: int | float | str


class Tree(BaseModel):
    value: int
    children: list[Tree] = []
    named: dict[str, Tree] = {}
    partner: Left | None = None


floats = st.floats(allow_nan=False, allow_infinity=False)
texts = st.text(max_size=8)
words = st.text(string.ascii_letters, min_size=1, max_size=5)
items = st.builds(Item, name=texts, qty=st.integers(0, 1000))
cats = st.builds(Cat, lives=st.integers())
dogs = st.builds(Dog, kind=st.just("dog"), tricks=st.dictionaries(texts, st.integers(), max_size=3))
lefts: st.SearchStrategy[Left] = st.deferred(
    lambda: st.builds(Left, right=st.none() | rights, label=texts)
)
rights: st.SearchStrategy[Right] = st.deferred(
    lambda: st.builds(
        Right, left=st.none() | lefts, weights=st.dictionaries(texts, floats, max_size=2)
    )
)
trees = st.recursive(
    st.builds(
        Tree, value=st.integers(), children=st.just([]), named=st.just({}), partner=st.none()
    ),
    lambda inner: st.builds(
        Tree,
        value=st.integers(),
        children=st.lists(inner, max_size=2),
        named=st.dictionaries(words, inner, max_size=2),
        partner=st.none() | lefts,
    ),
    max_leaves=6,
)

STRATEGIES: dict[type[BaseModel], st.SearchStrategy[Any]] = {
    Flat: st.builds(
        Flat,
        name=texts,
        ratio=floats,
        raw=texts.map(str.encode),
        amount=st.decimals(allow_nan=False, allow_infinity=False, places=3),
        many=st.lists(floats, max_size=3).map(tuple),
    ),
    Maps: st.builds(
        Maps,
        scores=st.dictionaries(texts, st.integers(), max_size=3),
        by_int=st.dictionaries(st.integers(), st.lists(items, max_size=2), max_size=3),
        by_color=st.dictionaries(st.sampled_from(Color), texts, max_size=2),
        optional=st.none() | st.dictionaries(texts, items, max_size=2),
        listed=st.lists(st.dictionaries(texts, floats, max_size=2), max_size=2),
        nested=st.dictionaries(
            texts, st.dictionaries(texts, st.integers(), max_size=2), max_size=2
        ),
        pair=st.tuples(st.dictionaries(texts, st.integers(), max_size=2), st.integers()),
        either=st.dictionaries(words, st.integers(), max_size=2) | st.integers(),
        two=st.dictionaries(words, st.integers(), max_size=2)
        | st.dictionaries(words, texts, min_size=1, max_size=2),
    ),
    Unions: st.builds(
        Unions,
        pet=cats | dogs,
        pets=st.lists(cats | dogs, max_size=3),
        thing=items
        | st.dictionaries(
            words.filter(lambda w: w not in ("name", "qty")), st.integers(), max_size=2
        ),
        num=st.integers() | floats | texts,
    ),
    Tree: trees,
    Left: lefts,
}


@pytest.mark.parametrize("model", list(STRATEGIES), ids=lambda m: m.__name__)
def test_round_trip_property(model: type[BaseModel]) -> None:
    result = compiled(model)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(STRATEGIES[model])
    def check(value: BaseModel) -> None:
        assert_round_trip(result, value)

    check()


def test_round_trip_with_nulls_for_every_default() -> None:
    """An answer that sends null for every defaulted field parses to the defaults."""
    result = compiled(Flat)
    value = Flat(
        name="n",
        ratio=1.0,
        flag=False,
        either=1,
        literal="b",
        mixed=None,
        level=Level.low,
        shape=Shape.circle,
        day=date(2020, 1, 1),
        moment=datetime(2020, 1, 1),
        at=time(0, 0),
        ident=UUID(int=0),
        amount=Decimal(0),
        tags=set(),
        frozen=frozenset(),
        raw=b"",
        pair=(0, ""),
        many=(),
        Renamed="r",
    )
    encoded = result.encode(value.model_dump(mode="json", by_alias=True))
    for name in ("count", "color"):
        encoded[name] = None
    jsonschema.validate(encoded, result.schema)
    assert result.parse(json.dumps(encoded)) == value


def _every_node(schema: Any, visit: Callable[[dict[str, Any]], None]) -> None:
    if isinstance(schema, dict):
        visit(schema)
        for value in schema.values():
            _every_node(value, visit)
    elif isinstance(schema, list):
        for value in schema:
            _every_node(value, visit)


@pytest.mark.parametrize(
    "model", [Everything, Flat, Maps, Unions, Tree, Left, Node], ids=lambda m: m.__name__
)
def test_every_constraint_sentence_is_well_formed(model: type[BaseModel]) -> None:
    allowed = (
        "format: ",
        "minimum: ",
        "maximum: ",
        "exclusive minimum: ",
        "exclusive maximum: ",
        "multiple of: ",
        "min length: ",
        "max length: ",
        "pattern: ",
        "min items: ",
        "max items: ",
        "unique items",
        "min keys: ",
        "max keys: ",
        "keys: ",
        "keys match pattern: ",
        "min key length: ",
        "max key length: ",
        "with a UTC offset",
        "without a UTC offset",
        "in the past",
        "in the future",
        "scheme: ",
        "with a host",
        "max digits: ",
        "max decimal places: ",
    )

    def visit(node: dict[str, Any]) -> None:
        for item in constraints(node):
            assert item.startswith(allowed), item

    _every_node(compiled(model).schema, visit)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | floats
    | texts
    | st.sampled_from(["key", "value", "cat", "dog"]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "key",
                    "value",
                    "kind",
                    "name",
                    "qty",
                    "counts",
                    "note",
                    "more",
                    "pet",
                    "thing",
                    "lives",
                    "tricks",
                ]
            )
            | texts,
            inner,
            max_size=5,
        )
    ),
    max_leaves=20,
)


@pytest.mark.parametrize("model", [Tally, Unions, Everything], ids=lambda m: m.__name__)
def test_parse_raises_only_answer_invalid_on_arbitrary_json(model: type[BaseModel]) -> None:
    result = compiled(model)

    @settings(max_examples=80, deadline=None)
    @given(json_values)
    def check(value: Any) -> None:
        try:
            result.parse(json.dumps(value))
        except AnswerInvalid as invalid:
            assert invalid.errors and all(": " in line for line in invalid.errors)

    check()
