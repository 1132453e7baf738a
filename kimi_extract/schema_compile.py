"""The schema compiler: pydantic's JSON schema -> the MFJS schema Kimi's strict mode accepts.

``_Compiler`` walks the schema ``schema_source._Generator`` produced and builds, node by node, the
compiled schema and the tree of codecs (``schema_codec``) that maps answers back. Every object is
closed and lists every property in ``required`` (a field with a default becomes nullable);
``dict[K, V]`` becomes a key/value list and ``tuple[A, B]`` an array of ``A | B``; constraints
move into the description; anything without a faithful JSON shape raises ``SchemaError`` naming
the field. The dialect's rules are in ``mfjs``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .exceptions import SchemaError
from .schema_codec import (
    _IDENTITY,
    _REF_PREFIX,
    _Array,
    _Codec,
    _JsonText,
    _Mapping,
    _Object,
    _Ref,
    _Tuple,
    _Union,
)
from .schema_source import (
    _INVALID,
    _KEYS,
    _KEYS_PROBLEM,
    _UNTYPED,
    _describe,
    _join_text,
)

_SCALARS = frozenset({"string", "integer", "number", "boolean", "null"})
_KEY_TYPES = frozenset({"string", "integer", "number", "boolean"})
_MAPPING_NOTE = "A mapping, written as a list of key/value pairs with distinct keys."


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
            root = {
                **self.source_defs.get(name, {}),
                **{k: v for k, v in root.items() if k not in ("$ref", "$defs")},
            }
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
            refs += [
                b.get("$ref")
                for b in src.get("oneOf") or src.get("anyOf") or ()
                if isinstance(b, dict)
            ]
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

    def untyped(
        self, path: str, what: str = "has no type (Any or a missing annotation)"
    ) -> SchemaError:
        return self.error(
            path, what, "give it a concrete type such as str, int, list[str] or a nested model"
        )

    # -- nodes -------------------------------------------------------------------------------

    def node(self, src: Any, path: str) -> tuple[dict[str, Any], _Codec]:
        if not isinstance(src, dict) or _UNTYPED in src:
            raise self.untyped(path)
        if _INVALID in src:
            raise self.error(
                path,
                f"has a type with no JSON form ({src[_INVALID]})",
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
                raise self.error(
                    path, "is an intersection (allOf) of several schemas", "use a single model type"
                )
            src = {**parts[0], **{k: v for k, v in src.items() if k != "allOf"}}
        if "oneOf" in src and "anyOf" not in src:
            src = {**{k: v for k, v in src.items() if k != "oneOf"}, "anyOf": src["oneOf"]}
        if "const" in src and "enum" not in src:
            src = {**src, "enum": [src["const"]]}
        if isinstance(src.get("type"), list):
            rest = {k: v for k, v in src.items() if k not in ("type", "description")}
            src = {
                "anyOf": [{**rest, "type": kind} for kind in src["type"]],
                **({"description": src["description"]} if "description" in src else {}),
            }
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
        self,
        pairs: list[tuple[dict[str, Any], _Codec]],
        text: str,
        path: str,
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
                parts = (
                    codec.parts
                    if isinstance(codec, _Union)
                    else [(part, codec) for part in node["anyOf"]]
                )
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
        arrays = [
            self.is_mapping(c)
            for n, c in zip(nodes, codecs, strict=True)
            if self.type_of(n) == "array"
        ]
        if not positional and any(arrays) and not all(arrays):
            raise self.error(
                path,
                "is a union of a dict and a list, set or tuple (a dict is sent as a "
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
                raise self.error(
                    path,
                    f"is an enum/Literal with a non-scalar value {value!r}",
                    "use string or number values",
                )
            groups.setdefault(kind, []).append(value)
        if "integer" in groups and "number" in groups:
            groups["number"] = [v for v in src["enum"] if _json_type(v) in ("integer", "number")]
            del groups["integer"]
        if not groups:
            raise self.error(path, "is an enum without values", "give it at least one value")
        nodes = [
            {"type": "null"} if kind == "null" else {"type": kind, "enum": values}
            for kind, values in groups.items()
        ]
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
        compiled = _node(
            _describe(src),
            {
                "type": "object",
                "properties": props,
                "required": list(props),
                "additionalProperties": False,
            },
        )
        optional = frozenset(set(props) - required)
        return compiled, self.register(_Object(fields, frozenset(drop_null), optional))

    def mapping_node(
        self, src: dict[str, Any], values: dict[str, Any], path: str
    ) -> tuple[dict[str, Any], _Codec]:
        if _KEYS_PROBLEM in src:
            raise self.error(
                path,
                f"is a dict, and {src[_KEYS_PROBLEM]}",
                "use str keys (or int, enum, date or UUID keys)",
            )
        keys_src = src.get(_KEYS) or src.get("propertyNames") or {"type": "string"}
        if "type" not in keys_src and not {"$ref", "enum", "anyOf", "const"} & set(keys_src):
            keys_src = {**keys_src, "type": "string"}
        if _UNTYPED in keys_src:
            raise self.untyped(path, "is a dict whose keys have no type")
        key_node, _ = self.node(keys_src, _join(path, "key"))
        # text keys first: a Decimal key stays exact as a string
        key_types = sorted(self.key_types(key_node), key=lambda kind: kind[0] != "string")
        if not key_types or any(kind not in _KEY_TYPES for kind, _ in key_types):
            raise self.error(
                path,
                "is a dict whose keys are not strings or numbers",
                "use str keys (or int, enum, date or UUID keys)",
            )
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
            raise self.error(
                path,
                "is a tuple with a variable-length tail",
                "use a fixed tuple[A, B] or a list[X]",
            )
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
    return any(
        isinstance(b, dict) and _source_nullable(b)
        for b in (src.get("anyOf") or src.get("oneOf") or ())
    )


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
