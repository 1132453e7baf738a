"""Pydantic output model -> strict MFJS ``json_schema`` response_format; answer text -> model.

``compile_schema(Model)`` starts from pydantic's validation JSON schema (aliases as property
names) and rewrites it into the dialect Kimi's strict mode accepts (the rules are in ``mfjs``):

- every object is closed and lists every property in ``required``; a field with a default
  becomes nullable, and on the way back a null for a field whose type is not nullable is dropped
  so the pydantic default applies;
- constraints the dialect cannot carry (formats, bounds, lengths, patterns, item counts, tuple
  positions) move into the description as one sentence, ``Constraints: <item>; <item>.`` (the
  simulator's answer generator reads it back); pydantic still enforces them on every answer;
- ``dict[K, V]`` becomes an array of ``{"key": K, "value": V}`` objects, mapped back on decode;
  ``tuple[A, B]`` an array of ``A | B`` with an ``exactly 2 items: A, B`` constraint;
- what has no faithful JSON shape (``Any``, ``dict[str, Any]``, ``RootModel``, dict keys that do
  not come back from JSON...) raises ``SchemaError`` naming the field, when the Extractor is built.

``CompiledSchema.parse`` is the hot path: when no mapping is needed the answer text goes straight
to ``model_validate_json``; the slower path (fence stripping, dict mapping, null-for-default) runs
only when needed. Validation always uses pydantic's JSON mode, so strict models behave the same on
both paths.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, RootModel, ValidationError
from pydantic.errors import PydanticInvalidForJsonSchema, PydanticUserError
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue, JsonSchemaWarningKind
from pydantic_core import core_schema, from_json

from .exceptions import SchemaError

__all__ = ["AnswerInvalid", "CompiledSchema", "compile_schema", "response_format"]

AnswerKind = Literal["json", "validation"]

_UNTYPED = "x-kx-untyped"  # markers the generator leaves for the compiler, which knows the path
_INVALID = "x-kx-invalid"
_KEYS = "x-kx-keys"
_KEYS_PROBLEM = "x-kx-keys-problem"
_REF_PREFIX = "#/$defs/"
_SCALARS = frozenset({"string", "integer", "number", "boolean", "null"})
_KEY_TYPES = frozenset({"string", "integer", "number", "boolean"})
# Core schema types whose values come back from a JSON object key (always a string) unchanged.
_ROUND_TRIP_KEYS = frozenset(
    {"str", "int", "float", "bool", "decimal", "date", "datetime", "time", "timedelta", "uuid",
     "bytes", "url", "multi-host-url"}
)
_WRAPPERS = ("function-after", "function-before", "function-wrap", "default")
_FORMATS = {"date": "date (YYYY-MM-DD)", "date-time": "date-time (ISO 8601)",
            "time": "time (HH:MM:SS)"}
_SILENT_FORMATS = frozenset({"binary"})  # bytes travel as plain UTF-8 text
_DECIMAL_PATTERN = r"^(?!^[-+.]*$)[+-]?0*\d*\.?\d*$"  # pydantic's Decimal-as-string pattern
_BOUNDS = (("minimum", "minimum"), ("maximum", "maximum"),
           ("exclusiveMinimum", "exclusive minimum"), ("exclusiveMaximum", "exclusive maximum"),
           ("multipleOf", "multiple of"), ("minLength", "min length"),
           ("maxLength", "max length"))
_COUNTS = (("minItems", "min items"), ("minProperties", "min items"),
           ("maxItems", "max items"), ("maxProperties", "max items"))
_MAPPING_NOTE = "A mapping, written as a list of key/value pairs with distinct keys."
_FENCE = re.compile(r"```[a-zA-Z]*\s*(.*?)\s*```", re.DOTALL)


class AnswerInvalid(ValueError):
    """An answer that is not JSON (``kind="json"``) or does not validate (``kind="validation"``).

    ``errors`` holds one line per problem: ``path.to.field: message`` with property names and
    list indexes as sent (aliases, e.g. ``aspects.0.score``), or ``$: message`` for the whole
    answer. The engine sends these lines back to the model when it reasks.
    """

    def __init__(self, kind: AnswerKind, errors: Sequence[str]) -> None:
        self.kind: AnswerKind = kind
        self.errors: list[str] = list(errors)
        what = "is not valid JSON" if kind == "json" else "does not match the output model"
        super().__init__(f"the answer {what}: " + "; ".join(self.errors))

    def __reduce__(self) -> tuple[Any, ...]:
        return (AnswerInvalid, (self.kind, self.errors))


@dataclass(frozen=True, eq=False)
class CompiledSchema:
    """An output model compiled for Kimi's strict mode; built once per class by compile_schema.

    ``schema`` is the MFJS schema (treat it as read-only; ``response_format()`` hands out a copy).
    ``needs_mapping`` is True when answers must be transformed before validation (dicts sent as
    key/value lists, nulls standing for defaults).
    """

    model: type[BaseModel]
    name: str
    schema: dict[str, Any] = field(repr=False)
    needs_mapping: bool
    _codec: _Codec = field(repr=False)
    _fast_first: bool = field(repr=False)

    def response_format(self) -> dict[str, Any]:
        """The ``response_format`` request field: a strict ``json_schema`` named ``name``."""
        schema = copy.deepcopy(self.schema)
        return {
            "type": "json_schema",
            "json_schema": {"name": self.name, "strict": True, "schema": schema},
        }

    def decode(self, data: Any) -> Any:
        """An answer in the compiled shape -> data for ``model.model_validate`` (never mutated).

        Raises AnswerInvalid(kind="validation") for a malformed key/value list. ``parse``
        validates the result in JSON mode (as JSON text), which strict models need.
        """
        if not self.needs_mapping:
            return data
        try:
            return self._codec.decode(data)
        except _MappingError as error:
            raise AnswerInvalid("validation", [error.line()]) from None

    def encode(self, data: Any) -> Any:
        """``model_dump(mode="json", by_alias=True)`` -> the compiled shape (inverse of decode)."""
        return self._codec.encode(data)

    def parse(self, text: str | bytes) -> BaseModel:
        """Answer text -> a validated model instance, or AnswerInvalid.

        Tolerates whitespace and a ```json fence around the object.
        """
        if self._fast_first:
            try:
                return self.model.model_validate_json(text)
            except ValidationError as error:
                if not self.needs_mapping and not _is_json_error(error):
                    raise AnswerInvalid("validation", _error_lines(error)) from None
        return self._parse_slow(text)

    def _parse_slow(self, text: str | bytes) -> BaseModel:
        data, body = _load(text)
        if not self.needs_mapping:
            try:
                return self.model.model_validate_json(body)
            except ValidationError as error:
                raise AnswerInvalid("validation", _error_lines(error)) from None
        decoded = self.decode(data)
        try:
            return self.model.model_validate_json(
                json.dumps(decoded, ensure_ascii=False, separators=(",", ":"))
            )
        except ValidationError as error:
            lines = _error_lines(error, lambda loc: self._codec.locate(loc, data))
            raise AnswerInvalid("validation", lines) from None


def compile_schema(model: type) -> CompiledSchema:
    """Compile a pydantic model class (cached per class).

    Raises TypeError for anything but a BaseModel subclass, and SchemaError (naming the model,
    the field and the reason) for types Kimi's strict JSON schema mode cannot express.
    """
    if not isinstance(model, type) or not issubclass(model, BaseModel):
        raise TypeError(f"compile_schema expects a pydantic BaseModel subclass, got {model!r}")
    return _compile_cached(model)


def response_format(model: type) -> dict[str, Any]:
    """The strict ``json_schema`` response_format for a model: compile_schema(model)'s."""
    return compile_schema(model).response_format()


@functools.lru_cache(maxsize=512)
def _compile_cached(model: type[BaseModel]) -> CompiledSchema:
    if issubclass(model, RootModel):
        raise SchemaError(
            f"{model.__name__}: a RootModel cannot be the output model, because Kimi's strict "
            "mode answers with a JSON object; wrap the value in a field of a BaseModel"
        )
    try:
        source = model.model_json_schema(
            by_alias=True, ref_template=_REF_PREFIX + "{model}", schema_generator=_Generator,
            mode="validation",
        )
    except (PydanticUserError, PydanticInvalidForJsonSchema) as error:
        raise SchemaError(
            f"{model.__name__}: pydantic cannot build its JSON schema: {error}"
        ) from error
    compiler = _Compiler(model.__name__, source)
    schema, codec = compiler.compile()
    needs_mapping = codec.decodes
    fast_first = not any(isinstance(c, _Mapping) for c in compiler.codecs)
    name = re.sub(r"[^a-zA-Z0-9_-]", "_", model.__name__)[:64] or "output"
    return CompiledSchema(model, name, schema, needs_mapping, codec, fast_first)


# ---------------------------------------------------------------------------------------------
# pydantic JSON schema generation, with markers for what only the compiler can judge


class _Generator(GenerateJsonSchema):
    """pydantic's generator, leaving markers (untyped, invalid, dict keys) instead of failing."""

    # defaults never reach the compiled schema, so unserializable ones do not matter
    ignored_warning_kinds: set[JsonSchemaWarningKind] = {
        "skipped-choice", "non-serializable-default"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.core_defs: dict[str, Any] = {}

    def definitions_schema(self, schema: core_schema.DefinitionsSchema) -> JsonSchemaValue:
        self.core_defs.update({d["ref"]: d for d in schema["definitions"] if "ref" in d})
        return super().definitions_schema(schema)

    def any_schema(self, schema: core_schema.AnySchema) -> JsonSchemaValue:
        return {_UNTYPED: True}

    def handle_invalid_for_json_schema(self, schema: Any, error_info: str) -> JsonSchemaValue:
        return {_INVALID: error_info}

    def dict_schema(self, schema: core_schema.DictSchema) -> JsonSchemaValue:
        return self.with_keys(super().dict_schema(schema), schema.get("keys_schema"))

    def ordered_dict_schema(self, schema: Any) -> JsonSchemaValue:
        return self.with_keys(super().ordered_dict_schema(schema), schema.get("keys_schema"))

    def counter_schema(self, schema: Any) -> JsonSchemaValue:
        return self.with_keys(super().counter_schema(schema), schema.get("keys_schema"))

    def frozendict_schema(self, schema: Any) -> JsonSchemaValue:
        return self.with_keys(super().frozendict_schema(schema), schema.get("keys_schema"))

    def with_keys(self, json_schema: JsonSchemaValue, keys: Any) -> JsonSchemaValue:
        """Record the keys' own JSON schema, and why they would not round-trip (if so)."""
        json_schema[_KEYS] = self.generate_inner(keys) if keys else {"type": "string"}
        problem = self.key_problem(keys) if keys else None
        if problem:
            json_schema[_KEYS_PROBLEM] = problem
        return json_schema

    def key_problem(self, keys: Any) -> str | None:
        """Why keys of this core schema would not come back from JSON unchanged, or None."""
        for _ in range(50):
            kind = keys.get("type")
            if kind == "definition-ref" and keys.get("schema_ref") in self.core_defs:
                keys = self.core_defs[keys["schema_ref"]]
            elif kind in _WRAPPERS and isinstance(keys.get("schema"), dict):
                keys = keys["schema"]
            elif kind == "json-or-python":
                keys = keys["json_schema"]
            elif kind == "lax-or-strict":
                keys = keys["lax_schema"]
            else:
                break
        kind = keys.get("type")
        if kind == "literal":
            if all(isinstance(v, str) for v in keys.get("expected", [])):
                return None
            return "its keys are a Literal of non-string values, which pydantic does not match "\
                "against JSON object keys (always text)"
        if kind == "enum":
            members = keys.get("members", [])
            if keys.get("sub_type") in ("str", "int", "float") or all(
                    isinstance(getattr(m, "value", None), str) for m in members):
                return None
            return "its keys are an Enum of mixed values, which pydantic does not match against "\
                "JSON object keys (always text)"
        if kind in _ROUND_TRIP_KEYS:
            return None
        if kind == "any":
            return "its keys have no type"
        return f"its keys ({kind}) do not come back unchanged from JSON object keys (always text)"


# ---------------------------------------------------------------------------------------------
# codecs: map one node's values between the compiled (sent) shape and pydantic's shape


class _MappingError(Exception):
    """A malformed key/value list; ``loc`` is filled in on the way up."""

    def __init__(self, loc: list[Any], message: str) -> None:
        super().__init__(message)
        self.loc = loc
        self.message = message

    def line(self) -> str:
        return f"{_path_text(self.loc)}: {self.message}"


class _Codec:
    """Identity codec; ``decodes`` says whether decode must touch the data at all."""

    __slots__ = ("decodes",)

    def __init__(self) -> None:
        self.decodes = False

    def intrinsic(self) -> bool:
        return False

    def children(self) -> Iterable[_Codec]:
        return ()

    def decode(self, data: Any) -> Any:
        return data

    def encode(self, data: Any) -> Any:
        return data

    def locate(self, loc: Sequence[Any], sent: Any) -> list[Any]:
        """A pydantic error location (decoded shape) -> the same place in the sent answer."""
        return list(loc)


_IDENTITY = _Codec()


def _within(step: Any, decode: Callable[[Any], Any], value: Any) -> Any:
    try:
        return decode(value)
    except _MappingError as error:
        error.loc.insert(0, step)
        raise


class _Object(_Codec):
    __slots__ = ("drop_null", "fields", "optional")

    def __init__(
        self, fields: dict[str, _Codec], drop_null: frozenset[str], optional: frozenset[str]
    ) -> None:
        super().__init__()
        self.fields = fields
        self.drop_null = drop_null
        self.optional = optional

    def intrinsic(self) -> bool:
        return bool(self.drop_null)

    def children(self) -> Iterable[_Codec]:
        return self.fields.values()

    def decode(self, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        out = {}
        for name, value in data.items():
            if value is None and name in self.drop_null:
                continue
            codec = self.fields.get(name)
            out[name] = _within(name, codec.decode, value) if codec and codec.decodes else value
        return out

    def encode(self, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        out = {}
        for name, codec in self.fields.items():
            if name in data:
                out[name] = codec.encode(data[name])
            elif name in self.optional:
                out[name] = None
        return out

    def locate(self, loc: Sequence[Any], sent: Any) -> list[Any]:
        if not loc or not isinstance(sent, dict) or loc[0] not in sent:
            return list(loc)
        codec = self.fields.get(loc[0], _IDENTITY)
        return [loc[0], *codec.locate(loc[1:], sent[loc[0]])]


class _Array(_Codec):
    __slots__ = ("item",)

    def __init__(self, item: _Codec) -> None:
        super().__init__()
        self.item = item

    def children(self) -> Iterable[_Codec]:
        return (self.item,)

    def decode(self, data: Any) -> Any:
        if not isinstance(data, list):
            return data
        return [_within(index, self.item.decode, value) for index, value in enumerate(data)]

    def encode(self, data: Any) -> Any:
        return [self.item.encode(value) for value in data] if isinstance(data, list) else data

    def locate(self, loc: Sequence[Any], sent: Any) -> list[Any]:
        if loc and isinstance(loc[0], int) and isinstance(sent, list) and loc[0] < len(sent):
            return [loc[0], *self.item.locate(loc[1:], sent[loc[0]])]
        return list(loc)


class _Tuple(_Codec):
    __slots__ = ("positions",)

    def __init__(self, positions: list[_Codec]) -> None:
        super().__init__()
        self.positions = positions

    def children(self) -> Iterable[_Codec]:
        return self.positions

    def decode(self, data: Any) -> Any:
        if not isinstance(data, list):
            return data
        return [
            _within(i, self.positions[i].decode, value) if i < len(self.positions) else value
            for i, value in enumerate(data)
        ]

    def encode(self, data: Any) -> Any:
        if not isinstance(data, list):
            return data
        return [
            self.positions[i].encode(value) if i < len(self.positions) else value
            for i, value in enumerate(data)
        ]

    def locate(self, loc: Sequence[Any], sent: Any) -> list[Any]:
        if (loc and isinstance(loc[0], int) and isinstance(sent, list)
                and loc[0] < min(len(sent), len(self.positions))):
            return [loc[0], *self.positions[loc[0]].locate(loc[1:], sent[loc[0]])]
        return list(loc)


class _Mapping(_Codec):
    """``dict[K, V]`` <-> ``[{"key": K, "value": V}, ...]``."""

    __slots__ = ("key_types", "value")

    def __init__(self, key_types: list[tuple[str, list[Any] | None]], value: _Codec) -> None:
        super().__init__()
        self.key_types = key_types  # (JSON type, enum values or None) a key may take
        self.value = value

    def intrinsic(self) -> bool:
        return True

    def children(self) -> Iterable[_Codec]:
        return (self.value,)

    def decode(self, data: Any) -> Any:
        value = self.value
        if isinstance(data, dict):  # already a mapping (json_object mode answers may be)
            return {k: _within(k, value.decode, v) for k, v in data.items()}
        if not isinstance(data, list):
            raise _MappingError([], "expected an array of {key, value} objects")
        out: dict[Any, Any] = {}
        for index, item in enumerate(data):
            if not isinstance(item, dict) or "key" not in item or "value" not in item:
                raise _MappingError([index], "expected an object with 'key' and 'value'")
            key = item["key"]
            if key is None or isinstance(key, dict | list):
                raise _MappingError([index, "key"], "a key must be a string or a number")
            if key in out:
                raise _MappingError([index, "key"], f"duplicate key {key!r}; give each key once")
            out[key] = _within(index, lambda v: _within("value", value.decode, v), item["value"])
        return out

    def encode(self, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return [{"key": self.encode_key(k), "value": self.value.encode(v)} for k, v in data.items()]

    def encode_key(self, key: Any) -> Any:
        """A JSON object key (text) -> the typed key the schema asks for."""
        if not isinstance(key, str):
            return key
        for kind, values in self.key_types:
            typed = _typed_key(kind, key)
            if typed is not _NO_KEY and (values is None or typed in values):
                return typed
        return key

    def locate(self, loc: Sequence[Any], sent: Any) -> list[Any]:
        if not loc:
            return []
        if isinstance(sent, dict):
            if loc[0] in sent:
                return [loc[0], *self.value.locate(loc[1:], sent[loc[0]])]
            return list(loc)
        if not isinstance(sent, list):
            return list(loc)
        wanted = _key_text(loc[0])
        for index, item in enumerate(sent):
            if isinstance(item, dict) and "key" in item and _key_text(item["key"]) == wanted:
                if loc[1:2] == ("[key]",):
                    return [index, "key"]
                return [index, "value", *self.value.locate(loc[1:], item.get("value"))]
        return list(loc)


_NO_KEY = object()


def _typed_key(kind: str, text: str) -> Any:
    if kind == "string":
        return text
    if kind == "boolean":
        return {"true": True, "false": False}.get(text, _NO_KEY)
    try:
        return int(text) if kind == "integer" else float(text)
    except ValueError:
        return _NO_KEY


def _key_text(key: Any) -> str:
    return key if isinstance(key, str) else json.dumps(key)


class _Union(_Codec):
    """anyOf whose branches need mapping: the branch is the one the data fits."""

    __slots__ = ("branches", "defs", "null", "parts")

    def __init__(self, nodes: list[dict[str, Any]], codecs: list[_Codec], defs: dict[str, Any]):
        super().__init__()
        self.parts = list(zip(nodes, codecs, strict=True))
        self.null = any(node.get("type") == "null" for node in nodes)
        self.branches = [(n, c) for n, c in self.parts if n.get("type") != "null"]
        self.defs = defs

    def children(self) -> Iterable[_Codec]:
        return [codec for _, codec in self.branches]

    def pick(self, data: Any) -> _Codec | None:
        if data is None and self.null:
            return None
        if len(self.branches) == 1:
            return self.branches[0][1]
        for node, codec in self.branches:
            if _conforms(node, data, self.defs):
                return codec
        for node, codec in self.branches:
            if _kind_fits(_resolve(node, self.defs), data):
                return codec
        return None

    def decode(self, data: Any) -> Any:
        codec = self.pick(data)
        return codec.decode(data) if codec is not None and codec.decodes else data

    def encode(self, data: Any) -> Any:
        if data is None and self.null:
            return None
        order = sorted(self.branches, key=lambda branch: _key_fit(branch[0], data, self.defs))
        for node, codec in order:
            out = codec.encode(data)
            if _conforms(node, out, self.defs):
                return out
        return data

    def locate(self, loc: Sequence[Any], sent: Any) -> list[Any]:
        if len(self.branches) == 1 and sent is not None:  # Optional[X]: pydantic adds no tag
            return self.branches[0][1].locate(loc, sent)
        return list(loc)


class _JsonText(_Codec):
    """``Json[X]``: sent as the JSON text pydantic parses; model_dump gives the parsed value."""

    __slots__ = ()

    def encode(self, data: Any) -> Any:
        return json.dumps(data, ensure_ascii=False)


class _Ref(_Codec):
    __slots__ = ("name", "target")

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.target: _Codec = _IDENTITY

    def children(self) -> Iterable[_Codec]:
        return (self.target,)

    def decode(self, data: Any) -> Any:
        return self.target.decode(data)

    def encode(self, data: Any) -> Any:
        return self.target.encode(data)

    def locate(self, loc: Sequence[Any], sent: Any) -> list[Any]:
        return self.target.locate(loc, sent)


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = defs[node["$ref"].removeprefix(_REF_PREFIX)]
    return node


def _kind_fits(node: dict[str, Any], data: Any) -> bool:
    kind = node.get("type")
    if kind is None:
        return False
    if kind == "string":
        return isinstance(data, str)
    if kind == "integer":
        return isinstance(data, int) and not isinstance(data, bool)
    if kind == "number":
        return isinstance(data, int | float) and not isinstance(data, bool)
    if kind == "boolean":
        return isinstance(data, bool)
    if kind == "null":
        return data is None
    if kind == "object":
        return isinstance(data, dict)
    return isinstance(data, list)


def _conforms(node: dict[str, Any], data: Any, defs: dict[str, Any]) -> bool:
    """Whether data has the compiled node's shape (types, enums, keys; not constraints)."""
    node = _resolve(node, defs)
    if "anyOf" in node:
        return any(_conforms(branch, data, defs) for branch in node["anyOf"])
    if not _kind_fits(node, data):
        return False
    if "enum" in node and data not in node["enum"]:
        return False
    if node["type"] == "object":
        props = node["properties"]
        return data.keys() == props.keys() and all(
            _conforms(props[name], value, defs) for name, value in data.items()
        )
    if node["type"] == "array":
        return all(_conforms(node["items"], value, defs) for value in data)
    return True


def _key_fit(node: dict[str, Any], data: Any, defs: dict[str, Any]) -> int:
    """0 when data's keys are exactly an object branch's properties, 2 when they are not."""
    node = _resolve(node, defs)
    if isinstance(data, dict) and node.get("type") == "object":
        return 0 if data.keys() == node["properties"].keys() else 2
    return 1


# ---------------------------------------------------------------------------------------------
# the compiler: pydantic JSON schema -> MFJS schema + codec tree


class _Compiler:
    def __init__(self, model_name: str, source: dict[str, Any]) -> None:
        self.model_name = model_name
        self.source = source
        self.source_defs: dict[str, Any] = source.get("$defs", {})
        self.defs: dict[str, dict[str, Any]] = {}
        self.def_codecs: dict[str, _Codec] = {}
        self.in_progress: set[str] = set()
        self.refs: list[_Ref] = []
        self.codecs: list[_Codec] = []
        # Discriminator properties stay required and non-null: pydantic needs the tag present.
        self.tags: dict[int, set[str]] = {}
        self.find_tags(source)

    # -- driver ------------------------------------------------------------------------------

    def compile(self) -> tuple[dict[str, Any], _Codec]:
        root = self.source
        if "$ref" in root:  # a recursive root model: inline its definition at the root
            name = root["$ref"].removeprefix(_REF_PREFIX)
            root = {**self.source_defs.get(name, {}),
                    **{k: v for k, v in root.items() if k not in ("$ref", "$defs")}}
        node, codec = self.node(root, "")
        if node.get("type") != "object":
            raise self.error("", "the model's schema is not a JSON object", "use a plain BaseModel")
        if self.defs:
            node["$defs"] = dict(sorted(self.defs.items()))
        for ref in self.refs:
            ref.target = self.def_codecs[ref.name]
        for item in self.codecs:
            item.decodes = item.intrinsic()
        changed = True
        while changed:
            changed = False
            for item in self.codecs:
                if not item.decodes and any(child.decodes for child in item.children()):
                    item.decodes = changed = True
        return node, codec

    def find_tags(self, src: Any) -> None:
        if isinstance(src, list):
            for item in src:
                self.find_tags(item)
        if not isinstance(src, dict):
            return
        tag = src.get("discriminator")
        if isinstance(tag, dict) and isinstance(tag.get("propertyName"), str):
            refs = list((tag.get("mapping") or {}).values())
            refs += [b.get("$ref") for b in src.get("oneOf") or src.get("anyOf") or ()
                     if isinstance(b, dict)]
            for ref in refs:
                target = self.source_defs.get(str(ref).removeprefix(_REF_PREFIX))
                if isinstance(target, dict):
                    self.tags.setdefault(id(target), set()).add(tag["propertyName"])
        for key, value in src.items():
            if key != "discriminator":
                self.find_tags(value)

    def register(self, codec: _Codec) -> _Codec:
        self.codecs.append(codec)
        return codec

    def error(self, path: str, reason: str, fix: str) -> SchemaError:
        where = f"field '{path}'" if path else "the model"
        return SchemaError(
            f"{self.model_name}: {where} {reason}, which Kimi's strict JSON schema mode cannot "
            f"express; {fix}"
        )

    def untyped(self, path: str, what: str = "has no type (Any or a missing annotation)") -> (
            SchemaError):
        return self.error(
            path, what, "give it a concrete type such as str, int, list[str] or a nested model"
        )

    # -- nodes -------------------------------------------------------------------------------

    def node(self, src: Any, path: str) -> tuple[dict[str, Any], _Codec]:
        if not isinstance(src, dict) or _UNTYPED in src:
            raise self.untyped(path)
        if _INVALID in src:
            raise self.error(
                path, f"has a type with no JSON form ({src[_INVALID]})",
                "use JSON-compatible types (str, int, float, bool, lists, nested models)",
            )
        src = self.normalize(src, path)
        if "$ref" in src:
            return self.ref_node(src, path)
        if "anyOf" in src:
            return self.union_node(src, path)
        if "enum" in src:
            return self.enum_node(src, path)
        kind = src.get("type")
        if kind == "object":
            return self.object_node(src, path)
        if kind == "array":
            return self.array_node(src, path)
        if kind == "string" and src.get("contentMediaType") == "application/json":  # Json[X]
            text = _describe(src, note="A JSON document written as a string.")
            return _node(text, {"type": "string"}), self.register(_JsonText())
        if kind in _SCALARS:
            return _node(_describe(src), {"type": kind}), _IDENTITY
        raise self.untyped(path)

    def normalize(self, src: dict[str, Any], path: str) -> dict[str, Any]:
        if "allOf" in src:
            parts = src["allOf"]
            if not isinstance(parts, list) or len(parts) != 1 or not isinstance(parts[0], dict):
                raise self.error(path, "is an intersection (allOf) of several schemas",
                                 "use a single model type")
            src = {**parts[0], **{k: v for k, v in src.items() if k != "allOf"}}
        if "oneOf" in src and "anyOf" not in src:
            src = {**{k: v for k, v in src.items() if k != "oneOf"}, "anyOf": src["oneOf"]}
        if "const" in src and "enum" not in src:
            src = {**src, "enum": [src["const"]]}
        if isinstance(src.get("type"), list):
            rest = {k: v for k, v in src.items() if k not in ("type", "description")}
            src = {"anyOf": [{**rest, "type": kind} for kind in src["type"]],
                   **({"description": src["description"]} if "description" in src else {})}
        return src

    def ref_node(self, src: dict[str, Any], path: str) -> tuple[dict[str, Any], _Codec]:
        ref = src["$ref"]
        if not isinstance(ref, str) or not ref.startswith(_REF_PREFIX):
            raise self.error(path, f"refers to an outside schema ({ref!r})", "use plain models")
        name = ref.removeprefix(_REF_PREFIX)
        if name not in self.source_defs:
            raise self.error(path, f"refers to a missing definition {name!r}", "rebuild the model")
        if name not in self.defs and name not in self.in_progress:
            self.in_progress.add(name)
            self.defs[name], self.def_codecs[name] = self.node(self.source_defs[name], path)
            self.in_progress.discard(name)
        ref_codec = _Ref(name)
        self.refs.append(ref_codec)
        return _node(_describe(src), {"$ref": ref}), self.register(ref_codec)

    def union_node(self, src: dict[str, Any], path: str) -> tuple[dict[str, Any], _Codec]:
        pairs = [self.node(branch, path) for branch in _flat_branches(src["anyOf"])]
        return self.merge(pairs, _describe(src), path)

    def merge(
        self, pairs: list[tuple[dict[str, Any], _Codec]], text: str, path: str,
        positional: bool = False,
    ) -> tuple[dict[str, Any], _Codec]:
        """One anyOf of compiled branches: nested anyOf spliced in, duplicates dropped.

        ``positional`` (tuple items) skips the dict-or-list check: positions pick the codec.
        """
        nodes: list[dict[str, Any]] = []
        codecs: list[_Codec] = []
        seen: set[str] = set()
        for node, codec in pairs:
            if "anyOf" in node:  # e.g. a mixed-type enum split by type
                parts = codec.parts if isinstance(codec, _Union) else [
                    (part, codec) for part in node["anyOf"]]
            else:
                parts = [(node, codec)]
            for part, part_codec in parts:
                key = json.dumps(part, sort_keys=True)
                if key not in seen:
                    seen.add(key)
                    nodes.append(part)
                    codecs.append(part_codec)
        if not nodes:
            raise self.error(path, "is an empty union", "give it at least one type")
        arrays = [self.is_mapping(c) for n, c in zip(nodes, codecs, strict=True)
                  if self.type_of(n) == "array"]
        if not positional and any(arrays) and not all(arrays):
            raise self.error(
                path, "is a union of a dict and a list, set or tuple (a dict is sent as a "
                "list of key/value pairs, so an empty one would be ambiguous)",
                "use one of the two types, or put each in its own model",
            )
        if len(nodes) == 1:
            only = nodes[0]
            merged = _join_text(text, only.get("description", ""))
            rest = {k: v for k, v in only.items() if k != "description"}
            return _node(merged, rest), codecs[0]
        if all(codec is _IDENTITY for codec in codecs):
            return _node(text, {"anyOf": nodes}), _IDENTITY
        return _node(text, {"anyOf": nodes}), self.register(_Union(nodes, codecs, self.defs))

    def enum_node(self, src: dict[str, Any], path: str) -> tuple[dict[str, Any], _Codec]:
        groups: dict[str, list[Any]] = {}
        for value in src["enum"]:
            kind = _json_type(value)
            if kind in ("array", "object"):
                raise self.error(path, f"is an enum/Literal with a non-scalar value {value!r}",
                                 "use string or number values")
            groups.setdefault(kind, []).append(value)
        if "integer" in groups and "number" in groups:
            groups["number"] = [v for v in src["enum"] if _json_type(v) in ("integer", "number")]
            del groups["integer"]
        if not groups:
            raise self.error(path, "is an enum without values", "give it at least one value")
        nodes = [{"type": "null"} if kind == "null" else {"type": kind, "enum": values}
                 for kind, values in groups.items()]
        text = _describe(src)
        if len(nodes) == 1:
            return _node(text, nodes[0]), _IDENTITY
        return _node(text, {"anyOf": nodes}), _IDENTITY

    def object_node(self, src: dict[str, Any], path: str) -> tuple[dict[str, Any], _Codec]:
        props_src = src.get("properties")
        if props_src is None:
            values = src.get("additionalProperties")
            patterns = src.get("patternProperties")
            if isinstance(patterns, dict) and len(patterns) == 1:
                values = next(iter(patterns.values()))
            if not isinstance(values, dict) or not values or _UNTYPED in values:
                raise self.untyped(path, "is a dict whose values have no type (dict[str, Any])")
            return self.mapping_node(src, values, path)
        required = set(src.get("required", [])) | self.tags.get(id(src), set())
        props: dict[str, Any] = {}
        fields: dict[str, _Codec] = {}
        drop_null: set[str] = set()
        for name, sub in props_src.items():
            node, codec = self.node(sub, _join(path, name))
            if name not in required and not self.accepts_null(node):
                node = _nullable(node)
                drop_null.add(name)
            props[name], fields[name] = node, codec
        compiled = _node(_describe(src), {
            "type": "object", "properties": props, "required": list(props),
            "additionalProperties": False,
        })
        optional = frozenset(set(props) - required)
        return compiled, self.register(_Object(fields, frozenset(drop_null), optional))

    def mapping_node(
        self, src: dict[str, Any], values: dict[str, Any], path: str
    ) -> tuple[dict[str, Any], _Codec]:
        if _KEYS_PROBLEM in src:
            raise self.error(path, f"is a dict, and {src[_KEYS_PROBLEM]}",
                             "use str keys (or int, enum, date or UUID keys)")
        keys_src = src.get(_KEYS) or src.get("propertyNames") or {"type": "string"}
        if "type" not in keys_src and not {"$ref", "enum", "anyOf", "const"} & set(keys_src):
            keys_src = {**keys_src, "type": "string"}
        if _UNTYPED in keys_src:
            raise self.untyped(path, "is a dict whose keys have no type")
        key_node, _ = self.node(keys_src, _join(path, "key"))
        # text keys first: a Decimal key stays exact as a string
        key_types = sorted(self.key_types(key_node), key=lambda kind: kind[0] != "string")
        if not key_types or any(kind not in _KEY_TYPES for kind, _ in key_types):
            raise self.error(path, "is a dict whose keys are not strings or numbers",
                             "use str keys (or int, enum, date or UUID keys)")
        value_node, value_codec = self.node(values, _join(path, "value"))
        item = {
            "type": "object",
            "properties": {"key": key_node, "value": value_node},
            "required": ["key", "value"],
            "additionalProperties": False,
        }
        compiled = _node(_describe(src, note=_MAPPING_NOTE), {"type": "array", "items": item})
        return compiled, self.register(_Mapping(key_types, value_codec))

    def array_node(self, src: dict[str, Any], path: str) -> tuple[dict[str, Any], _Codec]:
        if "prefixItems" in src:
            return self.tuple_node(src, path)
        items = src.get("items")
        if not isinstance(items, dict) or not items or _UNTYPED in items:
            raise self.untyped(path, "is a list, set or tuple whose items have no type")
        item_node, item_codec = self.node(items, _join(path, "[]"))
        compiled = _node(_describe(src), {"type": "array", "items": item_node})
        if item_codec is _IDENTITY:
            return compiled, _IDENTITY
        return compiled, self.register(_Array(item_codec))

    def tuple_node(self, src: dict[str, Any], path: str) -> tuple[dict[str, Any], _Codec]:
        positions = src["prefixItems"]
        if src.get("items") not in (None, False):
            raise self.error(path, "is a tuple with a variable-length tail",
                             "use a fixed tuple[A, B] or a list[X]")
        if not isinstance(positions, list) or not positions:
            raise self.error(path, "is an empty tuple", "remove the field or use a list")
        compiled = [self.node(p, _join(path, f"[{i}]")) for i, p in enumerate(positions)]
        union, _ = self.merge(compiled, "", path, positional=True)
        labels = ", ".join(_label(node) for node, _ in compiled)
        exact = f"exactly {len(positions)} items: {labels}"
        text = _describe(src, skip=("minItems", "maxItems"), extra=[exact])
        node = _node(text, {"type": "array", "items": union})
        codecs = [codec for _, codec in compiled]
        if all(codec is _IDENTITY for codec in codecs):
            return node, _IDENTITY
        return node, self.register(_Tuple(codecs))

    # -- helpers -----------------------------------------------------------------------------

    def accepts_null(self, node: dict[str, Any]) -> bool:
        if node.get("type") == "null":
            return True
        if "anyOf" in node:
            return any(self.accepts_null(branch) for branch in node["anyOf"])
        if "$ref" in node:
            name = node["$ref"].removeprefix(_REF_PREFIX)
            if name in self.defs:
                return self.accepts_null(self.defs[name])
            return _source_nullable(self.source_defs.get(name, {}))
        return False

    def is_mapping(self, codec: _Codec) -> bool:
        if isinstance(codec, _Ref):
            codec = self.def_codecs.get(codec.name, _IDENTITY)
        return isinstance(codec, _Mapping)

    def type_of(self, node: dict[str, Any]) -> Any:
        if "$ref" in node:
            name = node["$ref"].removeprefix(_REF_PREFIX)
            return self.defs.get(name, self.source_defs.get(name, {})).get("type")
        return node.get("type")

    def key_types(self, node: dict[str, Any]) -> list[tuple[str, list[Any] | None]]:
        if "$ref" in node:
            name = node["$ref"].removeprefix(_REF_PREFIX)
            node = self.defs.get(name, {})
        if "anyOf" in node:
            return [kind for branch in node["anyOf"] for kind in self.key_types(branch)]
        kind = node.get("type")
        return [(kind, node.get("enum"))] if isinstance(kind, str) else []


def _flat_branches(branches: Any) -> Iterable[Any]:
    if not isinstance(branches, list):
        return
    for branch in branches:
        nested = isinstance(branch, dict) and (branch.get("anyOf") or branch.get("oneOf"))
        if nested and not set(branch) - {"anyOf", "oneOf", "title", "default"}:
            yield from _flat_branches(nested)
        else:
            yield branch


def _source_nullable(src: dict[str, Any]) -> bool:
    kind = src.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if None in (src.get("enum") or ()):
        return True
    return any(isinstance(b, dict) and _source_nullable(b)
               for b in (src.get("anyOf") or src.get("oneOf") or ()))


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    """The node widened by a null branch (the description moves to the anyOf parent)."""
    text = node.get("description", "")
    if "anyOf" in node:
        return _node(text, {"anyOf": [*node["anyOf"], {"type": "null"}]})
    inner = {k: v for k, v in node.items() if k != "description"}
    return _node(text, {"anyOf": [inner, {"type": "null"}]})


def _node(description: str, fields: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, **fields} if description else dict(fields)


def _join(path: str, part: str) -> str:
    if part.startswith("["):
        return f"{path}{part}"
    return f"{path}.{part}" if path else part


def _join_text(first: str, second: str) -> str:
    if first and second:
        return f"{_sentence(first)} {second}"
    return first or second


def _sentence(text: str) -> str:
    return text if text.endswith((".", "!", "?")) else f"{text}."


def _json_type(value: Any) -> str:
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
    return "array" if isinstance(value, list | tuple) else "object"


def _label(node: dict[str, Any]) -> str:
    """A short type name for the tuple constraint text."""
    if "$ref" in node:
        return str(node["$ref"].removeprefix(_REF_PREFIX))
    if "anyOf" in node:
        return " or ".join(_label(branch) for branch in node["anyOf"])
    kind = str(node.get("type", "value"))
    if kind == "array" and isinstance(node.get("items"), dict):
        return f"array of {_label(node['items'])}"
    return kind


def _number(value: Any) -> str | None:
    """A bound as plain decimal text (no exponent: the simulator's regex reads digits)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return None
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return format(Decimal(repr(value)), "f")
    if isinstance(value, str):
        try:
            return format(Decimal(value), "f")
        except ArithmeticError:
            return None
    return None


def _describe(
    src: dict[str, Any], *, note: str = "", skip: Sequence[str] = (), extra: Sequence[str] = ()
) -> str:
    """The node's description plus the ``Constraints: ...`` sentence for stripped keywords."""
    items: list[str] = []
    fmt = src.get("format")
    if isinstance(fmt, str) and fmt not in _SILENT_FORMATS:
        items.append(f"format: {_FORMATS.get(fmt, fmt)}")
    for keyword, label in _BOUNDS:
        number = _number(src.get(keyword)) if keyword not in skip else None
        if number is not None:
            items.append(f"{label}: {number}")
    pattern = src.get("pattern")
    if isinstance(pattern, str) and pattern != _DECIMAL_PATTERN:
        items.append(f"pattern: {pattern}")
    for keyword, label in _COUNTS:
        number = _number(src.get(keyword)) if keyword not in skip else None
        if number is not None:
            items.append(f"{label}: {number}")
    if src.get("uniqueItems") is True:
        items.append("unique items")
    items.extend(extra)
    description = src.get("description")
    parts = [description.strip()] if isinstance(description, str) and description.strip() else []
    if note:
        parts.append(note)
    if items:
        parts.append("Constraints: " + "; ".join(items) + ".")
    if len(parts) > 1:
        parts = [_sentence(part) for part in parts[:-1]] + parts[-1:]
    return " ".join(parts)


# ---------------------------------------------------------------------------------------------
# answer text


def _load(text: str | bytes) -> tuple[Any, str | bytes]:
    """(parsed JSON, the text it came from); unwraps a fence or surrounding prose if needed."""
    try:
        return from_json(text), text
    except ValueError as error:
        first = error
    raw = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    inner = _unwrap(raw)
    if inner is not None:
        try:
            return from_json(inner), inner
        except ValueError:
            pass
    if not raw.strip():
        raise AnswerInvalid("json", ["$: the answer is empty; expected one JSON object"])
    if "{" not in raw:
        start = raw.strip()
        start = start if len(start) <= 60 else start[:57] + "..."
        raise AnswerInvalid("json", [f"$: expected one JSON object, got text: {start!r}"])
    raise AnswerInvalid("json", [f"$: Invalid JSON: {first}"])


def _unwrap(text: str) -> str | None:
    match = _FENCE.search(text)
    if match:
        return match.group(1)
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        return text[start : end + 1]
    return None


def _is_json_error(error: ValidationError) -> bool:
    return error.error_count() == 1 and error.errors()[0]["type"] == "json_invalid"


def _path_text(loc: Sequence[Any]) -> str:
    return ".".join(str(step) for step in loc) or "$"


def _error_lines(
    error: ValidationError, locate: Callable[[Sequence[Any]], list[Any]] | None = None
) -> list[str]:
    lines: list[str] = []
    for item in error.errors(include_url=False, include_context=False, include_input=False):
        loc = locate(item["loc"]) if locate is not None else item["loc"]
        line = f"{_path_text(loc)}: {item['msg']}"
        if line not in lines:
            lines.append(line)
    return lines
