"""Kimi's schema dialect (kimi_extract.schema.dialect) against MoonshotAI/walle's documented rules.

Each case cites the rule of walle's ``docs/walle.md`` rule table (section "Error categories") it
encodes, or the README's level definitions; messages are walle's. Cases written here from the
docs; walle's own test files are not copied.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kimi_extract.schema import dialect as mfjs

OBJ = {"type": "object"}


def obj(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props}


def at(path: str, message: str) -> str:
    return f"At path '{path}': {message}"


# (rule cited, schema, problem at strict, problem at ultra); None = valid at that level
CASES: list[tuple[str, Any, str | None, str | None]] = [
    # -- what clients send: walle accepts it at strict (README: strict is what the server needs)
    ("README strict: an open object", {"additionalProperties": True, "type": "object"}, None, None),
    ("README strict: the empty schema {} is ANY", {}, None, None),
    (
        "Keyword placement: title, default, optional properties, bounds (pydantic output)",
        {
            "title": "Review",
            "type": "object",
            "properties": {
                "stars": {"title": "Stars", "type": "integer", "minimum": 1, "maximum": 5},
                "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
                "code": {"type": "string", "pattern": "^[A-Z]+$", "maxLength": 3},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            },
            "required": ["stars"],
        },
        None,
        at("properties.note", "keyword 'default' is not allowed at the same level as anyOf"),
    ),
    (
        "Only keywords allowed by MFJS: unknown keywords pass strict, ultra names them",
        obj(day={"type": "string", "format": "date"}),
        None,
        at("properties.day", "unsupported keywords: format"),
    ),
    (
        "Only keywords allowed by MFJS (sorted list)",
        {"type": "object", "zzz": 1, "aaa": 2},
        None,
        at("root", "unsupported keywords: aaa, zzz"),
    ),
    (
        "Structural: {} as additionalProperties is ANY",
        {"type": "object", "additionalProperties": {}},
        None,
        None,
    ),
    (
        "Structural: type must sit inside anyOf, not beside it",
        obj(a={"type": "string", "anyOf": [{"type": "string"}]}),
        at(
            "properties.a",
            "when using anyOf, type should be defined in anyOf items instead of the parent schema",
        ),
        at(
            "properties.a",
            "when using anyOf, type should be defined in anyOf items instead of the parent schema",
        ),
    ),
    (
        "Structural: type must sit inside the $ref target, not beside it",
        {"type": "object", "properties": {"u": {"$ref": "#", "type": "string"}}},
        at(
            "properties.u",
            "when using $ref, type should be defined in the referenced schema instead of the "
            "parent schema",
        ),
        at(
            "properties.u",
            "when using $ref, type should be defined in the referenced schema instead of the "
            "parent schema",
        ),
    ),
    (
        "Only the seven types",
        {"type": "function"},
        at("root", "invalid type"),
        at("root", "invalid type"),
    ),
    (
        "The value of type must be a string (or an MFJS-allowed type array)",
        {"type": 5},
        at("root", "type must be string or array of strings"),
        at("root", "type must be string or array of strings"),
    ),
    (
        "Keyword placement: for a type, only its keywords (ultra)",
        {"type": "string", "minItems": 1},
        None,
        at("root", "invalid keywords: minItems"),
    ),
    (
        "Object: every name in required must be declared in properties",
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]},
        at("required", "required property 'b' is not defined in properties"),
        at("required", "required property 'b' is not defined in properties"),
    ),
    (
        "Every entry in required must be a string",
        {"type": "object", "properties": {"a": OBJ}, "required": [1]},
        at("required", "items in required array must be strings"),
        at("required", "items in required array must be strings"),
    ),
    (
        "Object: properties keys must not be named like keywords",
        obj(required={"type": "string"}),
        at("properties", "property name 'required' is reserved for JSON Schema keywords"),
        at("properties", "property name 'required' is reserved for JSON Schema keywords"),
    ),
    (
        "Object: properties keys must not be named $ref",
        obj(**{"$ref": {"type": "string"}}),
        at("properties", "property name '$ref' is reserved for JSON Schema keywords"),
        at("properties", "property name '$ref' is reserved for JSON Schema keywords"),
    ),
    (
        "properties must be an object",
        {"type": "object", "properties": []},
        at("properties", "properties must be an object"),
        at("properties", "properties must be an object"),
    ),
    (
        "anyOf must have between 1 and the limit of items",
        {"anyOf": []},
        at("anyOf", "anyOf must have 1-500 items"),
        at("anyOf", "anyOf must have 1-500 items"),
    ),
    (
        "anyOf must be an array; each item must be a valid subschema",
        {"anyOf": [{"type": "string"}, "x"]},
        at("anyOf", "schema in anyOf must be an object"),
        at("anyOf", "schema in anyOf must be an object"),
    ),
    (
        "Beside anyOf only description and title (ultra)",
        {"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}], "default": "x"}}},
        None,
        at("properties.a", "keyword 'default' is not allowed at the same level as anyOf"),
    ),
    (
        "Beside $ref only description and title (ultra)",
        {
            "type": "object",
            "properties": {"u": {"$ref": "#/$defs/U", "minLength": 1}},
            "$defs": {"U": {"type": "string"}},
        },
        None,
        at("properties.u", "keyword 'minLength' is not allowed at the same level as $ref"),
    ),
    (
        "Beside anyOf: description on the parent and a branch conflict (ultra)",
        obj(a={"description": "d", "anyOf": [{"type": "string", "description": "e"}]}),
        None,
        at(
            "properties.a",
            "conflicting keywords found in anyOf with parent: keywords (description) are "
            "defined on the parent schema and inside anyOf; remove them from the parent or "
            "from anyOf branches",
        ),
    ),
    (
        "Beside $ref: a description both beside the $ref and in its target conflict (ultra)",
        {
            "type": "object",
            "properties": {"p": {"description": "x", "$ref": "#/$defs/A"}},
            "$defs": {"A": {"type": "object", "description": "y"}},
        },
        None,
        at(
            "properties.p",
            "conflicting keywords found after $ref expansion: keywords (description) are "
            'defined both alongside "$ref" and in the referenced schema; remove the duplicates',
        ),
    ),
    (
        "$defs and $id may only appear at the root (ultra)",
        obj(a={"type": "string", "$id": "x"}),
        None,
        at("properties.a", "keyword $id must be at root level"),
    ),
    (
        "$ref must resolve within this schema: no $defs",
        obj(u={"$ref": "#/$defs/User"}),
        at("properties.u.$ref", "$defs not found for reference: #/$defs/User"),
        at("properties.u.$ref", "$defs not found for reference: #/$defs/User"),
    ),
    (
        "$ref must resolve within this schema: no remote refs",
        obj(u={"$ref": "https://example.com/user.json"}),
        at("properties.u.$ref", "references must start with #/$defs/"),
        at("properties.u.$ref", "references must start with #/$defs/"),
    ),
    (
        "$ref must resolve within this schema: a missing definition",
        {"type": "object", "properties": {"u": {"$ref": "#/$defs/B"}}, "$defs": {"A": OBJ}},
        at("root", "invalid $ref path: #/$defs/B"),
        at("root", "invalid $ref path: #/$defs/B"),
    ),
    (
        "$ref self-reference '#' with a termination (optional child)",
        {"type": "object", "properties": {"child": {"$ref": "#"}}},
        None,
        None,
    ),
    (
        "$ref / $defs must admit a termination condition",
        {"type": "object", "properties": {"node": {"$ref": "#"}}, "required": ["node"]},
        at("properties.node", "detected infinite recursion without termination condition"),
        at("properties.node", "detected infinite recursion without termination condition"),
    ),
    (
        "$ref may only appear where allowed",
        {
            "type": "object",
            "properties": {"a": {"type": "object", "default": {"$ref": "#"}}},
        },
        at("properties.a.default", "$ref is not allowed in this schema."),
        at("properties.a.default", "$ref is not allowed in this schema."),
    ),
    (
        "$defs names must not contain /",
        {"type": "object", "$defs": {"positive/integer": {"type": "integer"}}},
        at("$defs", "$defs property name 'positive/integer' cannot contain '/' character"),
        at("$defs", "$defs property name 'positive/integer' cannot contain '/' character"),
    ),
    (
        "Array: items, if present, must be a schema",
        {"type": "array", "items": []},
        at("items", "items must be an object"),
        at("items", "items must be an object"),
    ),
    (
        "Array: items may be omitted",
        {"type": "array", "minItems": 1},
        None,
        None,
    ),
    (
        "type must agree with enum values",
        {"type": "integer", "enum": [1, 3.67]},
        at("enum", "not a valid integer"),
        at("enum", "not a valid integer"),
    ),
    (
        "All enum elements must share the same type",
        {"type": "string", "enum": ["a", 1]},
        at("enum", "enum value (1) does not match any type in [string]"),
        at("enum", "enum value (1) does not match any type in [string]"),
    ),
    (
        "All enum elements share a type: for number, [2, 3.33] is valid",
        {"type": "number", "enum": [2, 3.33]},
        None,
        None,
    ),
    (
        "An enum needs a type",
        {"type": "object", "properties": {"a": {"enum": ["x", "y"]}}},
        at("properties.a", "type is not defined"),
        at("properties.a", "type is not defined"),
    ),
    (
        "enum must be an array",
        {"type": "string", "enum": "a"},
        at("enum", "enum must be an array"),
        at("enum", "enum must be an array"),
    ),
    (
        "type array with enum: only one type paired with null",
        {"type": ["string", "integer"], "enum": ["a", 1]},
        at(
            "root",
            "when type is array and enum is specified, currently only 2 types are supported, "
            "one must be null, and the other can be string/integer/number/boolean",
        ),
        at(
            "root",
            "when type is array and enum is specified, currently only 2 types are supported, "
            "one must be null, and the other can be string/integer/number/boolean",
        ),
    ),
    (
        "type array with enum: a scalar type and null",
        {"type": ["string", "null"], "enum": ["a", None]},
        None,
        None,
    ),
    (
        "type array without enum: only description/title beside it",
        {"type": ["string", "integer"], "maxLength": 5},
        at("root", "keyword maxLength is not allowed in combination with multiple types"),
        at("root", "keyword maxLength is not allowed in combination with multiple types"),
    ),
    (
        "Any min*/max* pair must satisfy min <= max (ultra)",
        {"type": "string", "minLength": 10, "maxLength": 5},
        None,
        at("minLength", "minLength (10) cannot be greater than maxLength (5)"),
    ),
    (
        "Any min*/max* pair must satisfy min <= max (numbers, ultra)",
        {"type": "number", "minimum": 10, "maximum": 2.5},
        None,
        at("root", "minimum (10) cannot be greater than maximum (2.5)"),
    ),
    (
        "min/max for integer must be integers (ultra)",
        {"type": "integer", "minimum": 1.5},
        None,
        at("root", "not a valid integer"),
    ),
    (
        "description must be a string",
        {"type": "string", "description": 5},
        at("description", "description must be a string"),
        at("description", "description must be a string"),
    ),
    (
        "additionalProperties may only be boolean or object",
        {"type": "object", "additionalProperties": None},
        at("additionalProperties", "additionalProperties must be a boolean or an object"),
        at("additionalProperties", "additionalProperties must be a boolean or an object"),
    ),
    (
        "the root schema must be a JSON object",
        ["type", "string"],
        at("root", "schema must be a dict"),
        at("root", "schema must be a dict"),
    ),
    (
        "Values must lie in the allowed numeric range (no NaN or Infinity)",
        {"type": "number", "enum": [float("inf")]},
        at("root", "invalid number: NaN or Infinity not allowed"),
        at("root", "invalid number: NaN or Infinity not allowed"),
    ),
]

BRACED = "invalid path: "
# A property or $defs name with both braces: walle looks the node up again by its path before
# checking enum / required / $ref / anyOf and reads the name as ``anyOf{index}``; the lookup
# fails. Every message below is walle's own (its libwalle.so build, both levels alike).
BRACE_CASES: list[tuple[str, Any, str | None]] = [
    (
        "an enum (a Literal with alias 'currency{iso}')",
        obj(**{"currency{iso}": {"type": "string", "enum": ["USD", "EUR"]}}),
        at("properties.currency{iso}.enum", BRACED + "properties.currency{iso}"),
    ),
    (
        "an anyOf (an Optional)",
        obj(**{"a{b}": {"anyOf": [{"type": "string"}, {"type": "null"}]}}),
        at("properties.a{b}.anyOf", BRACED + "properties.a{b}"),
    ),
    (
        "a required list",
        obj(**{"a{b}": {**obj(c={"type": "string"}), "required": ["c"]}}),
        at("properties.a{b}.required", BRACED + "properties.a{b}"),
    ),
    (
        "a $ref",
        {**obj(**{"a{b}": {"$ref": "#/$defs/D"}}), "$defs": {"D": {"type": "string"}}},
        at("properties.a{b}.$ref", BRACED + "properties.a{b}"),
    ),
    (
        "an enum several levels below, through an anyOf branch (its index in the lookup path)",
        obj(
            x={
                "anyOf": [
                    obj(**{"a{b}": obj(c={"type": "integer", "enum": [1]})}),
                    {"type": "null"},
                ]
            }
        ),
        at(
            "properties.x.anyOf.properties.a{b}.properties.c.enum",
            BRACED + "properties.x.anyOf{0}.properties.a{b}.properties.c",
        ),
    ),
    (
        "an enum below items",
        obj(**{"l{1}": {"type": "array", "items": {"type": "string", "enum": ["x"]}}}),
        at("properties.l{1}.items.enum", BRACED + "properties.l{1}.items"),
    ),
    (
        "a $defs name",
        {**obj(a={"$ref": "#/$defs/A{x}"}), "$defs": {"A{x}": {"type": "string", "enum": ["x"]}}},
        at("$defs.A{x}.enum", BRACED + "$defs.A{x}"),
    ),
    ("nothing of the four below it", obj(**{"currency{iso}": {"type": "string"}}), None),
    (
        "an empty required list (walle returns before the lookup)",
        obj(**{"a{b}": {**obj(c={"type": "string"}), "required": []}}),
        None,
    ),
    ("a $ref to the root (walle returns before the lookup)", obj(**{"a{b}": {"$ref": "#"}}), None),
    (
        "a $defs name with braces, referred to, with nothing of the four inside",
        {**obj(a={"$ref": "#/$defs/A{x}"}), "$defs": {"A{x}": {"type": "string"}}},
        None,
    ),
    (
        "only one kind of brace",
        obj(**{"a{b": {"type": "string", "enum": ["x"]}, "c}": {"anyOf": [{"type": "string"}]}}),
        None,
    ),
]


@pytest.mark.parametrize(
    ("what", "schema", "problem"), BRACE_CASES, ids=[c[0] for c in BRACE_CASES]
)
def test_braced_names_fail_walles_path_lookup(what: str, schema: Any, problem: str | None) -> None:
    for level in mfjs.LEVELS:
        assert mfjs.first_problem(schema, level) == problem, level


@pytest.mark.parametrize(("rule", "schema", "strict", "ultra"), CASES, ids=[c[0] for c in CASES])
def test_walle_rule(rule: str, schema: Any, strict: str | None, ultra: str | None) -> None:
    assert mfjs.first_problem(schema, "strict") == strict
    assert mfjs.first_problem(schema, "ultra") == ultra
    assert mfjs.check_schema(schema, "ultra") == ([] if ultra is None else [ultra])


def nested(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        node = {"type": "object", "properties": {"a": node}}
    return node


def test_limit_nesting_depth() -> None:
    # "Object: nesting depth and property count are capped" (conf.go default depth: 30)
    assert mfjs.first_problem(nested(30), "strict") is None
    problem = mfjs.first_problem(nested(31), "strict")
    assert problem == at(
        ".".join(["properties.a"] * 31), "schema depth exceeds maximum limit of 30"
    )
    # a $ref adds its target's depth
    ref = {"type": "object", "properties": {"x": {"$ref": "#/$defs/D"}}, "$defs": {"D": nested(30)}}
    assert mfjs.first_problem(ref) == at("root", "schema depth exceeds maximum limit of 30")


def test_limit_property_count() -> None:
    # "A schema may have up to N object properties in total" (conf.go: 3000)
    props = {f"p{i}": {"type": "integer"} for i in range(1499)}  # 2 + 2 x 1499 = 3000
    two = {"type": "object", "properties": {"a": obj(**props), "b": obj(**props)}}
    assert mfjs.first_problem(two, "strict") is None
    props["extra"] = {"type": "integer"}
    over = {"type": "object", "properties": {"a": obj(**props), "b": obj(**props)}}
    assert mfjs.first_problem(over, "strict") == at(
        "properties.b",
        "total number of properties keys(3002) across all objects exceeds maximum limit of 3000",
    )


def test_limit_enum_items_and_anyof_items() -> None:
    # "Array: enum size limits" and "anyOf must have between 1 and N items" (conf.go)
    assert mfjs.first_problem({"type": "integer", "enum": list(range(1000))}) is None
    assert mfjs.first_problem({"type": "integer", "enum": list(range(1001))}) == at(
        "enum", "enum array cannot have more than 1000 items"
    )
    branches = [{"type": "string", "enum": [str(i)]} for i in range(501)]
    assert mfjs.first_problem({"anyOf": branches}, "strict") == at(
        "anyOf", "anyOf must have 1-500 items"
    )
    small = mfjs.SchemaLimits(max_enum_items=3)
    assert mfjs.first_problem({"type": "integer", "enum": [1, 2, 3, 4]}, limits=small) == at(
        "enum", "enum array cannot have more than 3 items"
    )


def test_limit_schema_size() -> None:
    # "Total string-size limits": the schema's compact JSON (Go's encoding) <= 120000 bytes
    fits = {"type": "string", "description": "x" * 100}
    size = mfjs.schema_size(fits)
    assert size == len(json.dumps(fits, separators=(",", ":")))
    assert mfjs.schema_size({"description": "<&>"}) == len('{"description":"<&>"}') + 15
    big = {"type": "string", "description": "x" * 120000}
    assert mfjs.first_problem(big, "strict") == at("root", "schema exceeds maximum allowed size")


def chain(kind: str, levels: int) -> dict[str, Any]:
    """A schema nesting ``levels`` times through ``kind``, built without recursion."""
    node: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        if kind == "properties":
            node = {"type": "object", "properties": {"a": node}}
        elif kind == "items":
            node = {"type": "array", "items": node}
        elif kind == "additionalProperties":
            node = {"type": "object", "additionalProperties": node}
        else:
            node = {"anyOf": [{"type": "null"}, node]}
    return node


@pytest.mark.parametrize(
    ("kind", "levels"), [("items", 3000), ("anyOf", 3000), ("additionalProperties", 2500)]
)
def test_deep_chains_outside_properties_are_valid(kind: str, levels: int) -> None:
    # walle's depth limit counts properties levels only: its own build accepts these chains
    # (as deep as fits in 120,000 bytes); the checker agrees, without recursion (the default
    # recursion limit is 1,000)
    for level in mfjs.LEVELS:
        assert mfjs.first_problem(chain(kind, levels), level) is None


def test_deep_properties_break_the_depth_limit_without_raising() -> None:
    problem = mfjs.first_problem(chain("properties", 3000), "strict")
    assert problem is not None and problem.endswith("schema depth exceeds maximum limit of 30")


def test_nesting_past_gos_decoder_is_a_parse_error() -> None:
    # Go's encoding/json reads at most 10,000 open objects/arrays; walle's build: 9,999 items
    # levels (10,000 objects) pass, 10,000 levels are "exceeded max depth". A bare items chain
    # is the deepest that fits in the 120,000-byte limit.
    bare: dict[str, Any] = {"type": "string"}
    for _ in range(9999):
        bare = {"items": bare}
    assert mfjs.first_problem(bare, "strict") is None
    assert mfjs.first_problem({"items": bare}, "strict") == (
        "JSON schema parsing error: JSON syntax error: invalid character '{' exceeded max depth"
    )
    nested: list[Any] = []
    for _ in range(9999):
        nested = [nested]
    assert mfjs.first_problem({"type": "array", "default": nested}, "strict") == (
        "JSON schema parsing error: JSON syntax error: invalid character '[' exceeded max depth"
    )


def test_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="level"):
        mfjs.check_schema({}, "lenient")  # type: ignore[arg-type]
