"""Codecs: map answer values between the compiled (sent) shape and the output model's shape.

The compiler builds one codec per schema node that needs mapping: ``_Object`` (drops a null that
stands for a default), ``_Array``, ``_Tuple``, ``_Mapping`` (``dict[K, V]`` sent as a list of
``{"key": K, "value": V}`` objects), ``_Union`` (picks the branch the data fits), ``_JsonText``
(``Json[X]``) and ``_Ref`` (a ``$defs`` entry, bound once the compiler is done); every other node
shares ``_IDENTITY``. ``decode`` turns a parsed answer into data for pydantic, ``encode`` is its
inverse (``model_dump`` -> the compiled shape), and ``locate`` maps a pydantic error location back
to the same place in the answer as sent. ``decodes`` says whether decode must touch the data.

A malformed key/value list raises ``_MappingError``; ``CompiledSchema`` reports it as
``AnswerInvalid``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

_REF_PREFIX = "#/$defs/"  # how the source and compiled schemas point into ``$defs``


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
        if (
            loc
            and isinstance(loc[0], int)
            and isinstance(sent, list)
            and loc[0] < min(len(sent), len(self.positions))
        ):
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


def _path_text(loc: Sequence[Any]) -> str:
    return ".".join(str(step) for step in loc) or "$"
