"""Codecs: map answer values between the compiled (sent) shape and the output model's shape.

The compiler builds one codec per schema node that needs mapping: ``_Object`` (drops a null that
stands for a default; renames a property sent under another name because its own is reserved in
MFJS), ``_Array``, ``_Tuple``, ``_TupleObject`` (a heterogeneous tuple sent as an object keyed by
position), ``_Map`` (``dict[str, X]``, sent as an object whose values need mapping), ``_Root`` (a
RootModel whose root is not an object, sent as ``{"root": ...}``), ``_Union`` (picks the branch
the data fits), ``_JsonText`` (``Json[X]``) and ``_Ref`` (a ``$defs`` entry, bound once the
compiler is done); every other node shares ``_IDENTITY``. ``decode`` turns a parsed answer into
data for pydantic, ``encode`` is its inverse (``model_dump`` -> the compiled shape), and
``locate`` maps a pydantic error location back to the same place in the answer as sent.
``decodes`` says whether decode must touch the data.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

_REF_PREFIX = "#/$defs/"  # how the source and compiled schemas point into ``$defs``


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


class _Object(_Codec):
    """A model's object: fields keyed by their sent names; ``renames`` maps sent -> model name."""

    __slots__ = ("drop_null", "fields", "optional", "renames", "sent_names")

    def __init__(
        self,
        fields: dict[str, _Codec],
        drop_null: frozenset[str],
        optional: frozenset[str],
        renames: dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.fields = fields
        self.drop_null = drop_null
        self.optional = optional
        self.renames = renames or {}
        self.sent_names = {model: sent for sent, model in self.renames.items()}

    def intrinsic(self) -> bool:
        return bool(self.drop_null or self.renames)

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
            out[self.renames.get(name, name)] = (
                codec.decode(value) if codec and codec.decodes else value
            )
        return out

    def encode(self, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        out = {}
        for name, codec in self.fields.items():
            model_name = self.renames.get(name, name)
            if model_name in data:
                out[name] = codec.encode(data[model_name])
            elif name in self.optional:
                out[name] = None
        return out

    def locate(self, loc: Sequence[Any], sent: Any) -> list[Any]:
        if not loc or not isinstance(sent, dict):
            return list(loc)
        name = self.sent_names.get(loc[0], loc[0])
        if name not in sent:
            return list(loc)
        codec = self.fields.get(name, _IDENTITY)
        return [name, *codec.locate(loc[1:], sent[name])]


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
        return [self.item.decode(value) for value in data]

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
            self.positions[i].decode(value) if i < len(self.positions) else value
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


class _TupleObject(_Codec):
    """A heterogeneous ``tuple[A, B]`` sent as ``{"0": A, "1": B}``."""

    __slots__ = ("positions",)

    def __init__(self, positions: list[_Codec]) -> None:
        super().__init__()
        self.positions = positions

    def intrinsic(self) -> bool:
        return True

    def children(self) -> Iterable[_Codec]:
        return self.positions

    def decode(self, data: Any) -> Any:
        if not isinstance(data, dict) or set(data) != {str(i) for i in range(len(self.positions))}:
            return data  # not the sent shape: pydantic reports it
        return [codec.decode(data[str(i)]) for i, codec in enumerate(self.positions)]

    def encode(self, data: Any) -> Any:
        if not isinstance(data, list | tuple) or len(data) != len(self.positions):
            return data
        return {
            str(i): codec.encode(value)
            for i, (codec, value) in enumerate(zip(self.positions, data, strict=True))
        }

    def locate(self, loc: Sequence[Any], sent: Any) -> list[Any]:
        if loc and isinstance(loc[0], int) and isinstance(sent, dict) and str(loc[0]) in sent:
            index = loc[0]
            if index < len(self.positions):
                return [str(index), *self.positions[index].locate(loc[1:], sent[str(index)])]
        return list(loc)


class _Map(_Codec):
    """``dict[K, V]`` sent as an object, when its values need mapping."""

    __slots__ = ("value",)

    def __init__(self, value: _Codec) -> None:
        super().__init__()
        self.value = value

    def children(self) -> Iterable[_Codec]:
        return (self.value,)

    def decode(self, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return {key: self.value.decode(value) for key, value in data.items()}

    def encode(self, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return {key: self.value.encode(value) for key, value in data.items()}

    def locate(self, loc: Sequence[Any], sent: Any) -> list[Any]:
        if loc and isinstance(sent, dict) and str(loc[0]) in sent:
            key = str(loc[0])
            return [key, *self.value.locate(loc[1:], sent[key])]
        return list(loc)


class _Root(_Codec):
    """A RootModel whose root is not an object, sent as ``{"root": value}``."""

    __slots__ = ("value",)

    def __init__(self, value: _Codec) -> None:
        super().__init__()
        self.value = value

    def intrinsic(self) -> bool:
        return True

    def children(self) -> Iterable[_Codec]:
        return (self.value,)

    def decode(self, data: Any) -> Any:
        if not isinstance(data, dict) or set(data) != {"root"}:
            return data
        return self.value.decode(data["root"])

    def encode(self, data: Any) -> Any:
        return {"root": self.value.encode(data)}

    def locate(self, loc: Sequence[Any], sent: Any) -> list[Any]:
        if isinstance(sent, dict) and "root" in sent:
            return ["root", *self.value.locate(loc, sent["root"])]
        return list(loc)


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
        if "properties" not in node:  # a dict: every value fits additionalProperties
            values = node.get("additionalProperties") or {}
            return not values or all(_conforms(values, value, defs) for value in data.values())
        props = node["properties"]
        return data.keys() == props.keys() and all(
            _conforms(props[name], value, defs) for name, value in data.items()
        )
    if node["type"] == "array":
        items = node.get("items")
        return not items or all(_conforms(items, value, defs) for value in data)
    return True


def _key_fit(node: dict[str, Any], data: Any, defs: dict[str, Any]) -> int:
    """0 when data's keys are exactly an object branch's properties, 2 when they are not."""
    node = _resolve(node, defs)
    if isinstance(data, dict) and node.get("type") == "object":
        if "properties" not in node:
            return 1
        return 0 if data.keys() == node["properties"].keys() else 2
    return 1


def _path_text(loc: Sequence[Any]) -> str:
    return ".".join(str(step) for step in loc) or "$"
