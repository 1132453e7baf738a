"""The schema compiler: pydantic's JSON schema -> the MFJS schema Kimi's strict mode accepts.

``_Compiler`` walks the schema ``source._Generator`` produced and builds, node by node, the
compiled schema and the tree of codecs (``codec``) that maps answers back. Every object is
closed and lists every property in ``required`` (a field with a default becomes nullable; a name
walle refuses, reserved or with braces, travels renamed and the codec renames it back); the
constraints walle's ``ultra`` level accepts stay keywords, the rest move into the description;
``dict[str, X]`` becomes ``additionalProperties: X``; a fixed homogeneous tuple an array with
``minItems = maxItems``, a heterogeneous one an object keyed by position; ``Any`` an ``anyOf`` of
every JSON type. A last pass (``_settle``) moves descriptions off ``anyOf`` branches and wraps a
described ``$ref`` whose target has its own, which ultra rejects as conflicting keywords; then
the result is checked with ``dialect`` at ``ultra`` and a broken limit (nesting, property count,
size, enum or anyOf items) raises ``SchemaError`` naming it. Anything walle cannot express raises
``SchemaError`` naming the field.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from typing import Any

from ..exceptions import SchemaError
from ..kimi import BRACED_NAME, DEFAULT_LIMITS, RESERVED_PROPERTY_NAMES
from . import dialect as mfjs
from .codec import (
    _IDENTITY,
    _REF_PREFIX,
    _Array,
    _Codec,
    _JsonText,
    _Map,
    _Object,
    _Ref,
    _Root,
    _Tuple,
    _TupleObject,
    _Union,
)
from .source import (
    _INVALID,
    _KEYS,
    _KEYS_PROBLEM,
    _UNTYPED,
    _describe,
    _join_text,
    _kept,
    _merge_text,
)

_SCALARS = frozenset({"string", "integer", "number", "boolean", "null"})
#: ``Any``: every JSON type (walle.md reads ``{}`` as ANY only at the root and as
#: ``additionalProperties``, so an untyped property gets the types spelled out).
_ANY_BRANCHES = (
    {"type": "string"},
    {"type": "number"},
    {"type": "boolean"},
    {"type": "object", "additionalProperties": {}},
    {"type": "array"},
    {"type": "null"},
)
_TUPLE_NOTE = "A tuple, written as an object whose keys are its positions"
_MAX_ENUM_KEYS = 64  # a dict keyed by a larger Enum/Literal states its keys in words
_DEF_NAME = re.compile(r"[^A-Za-z0-9_.-]")
#: What a broken walle limit means for a model, by a word of walle's message.
_LIMIT_HINTS = {
    "depth": "the model nests objects deeper than Kimi's schema dialect allows "
    f"({DEFAULT_LIMITS.max_depth} levels)",
    "total number of properties": "the model has more properties in all than Kimi's schema "
    f"dialect allows ({DEFAULT_LIMITS.max_properties})",
    "size": "the compiled schema is longer than Kimi's schema dialect allows "
    f"({DEFAULT_LIMITS.max_size} bytes of JSON)",
    "enum array": "an enum or Literal has more values than Kimi's schema dialect allows "
    f"({DEFAULT_LIMITS.max_enum_items})",
    "anyOf must have": "a union has more members than Kimi's schema dialect allows "
    f"({DEFAULT_LIMITS.max_any_of_items})",
}


class _Compiler:
    def __init__(self, model_name: str, source: dict[str, Any]) -> None:
        self.model_name = model_name
        self.source = source
        self.source_defs: dict[str, Any] = source.get("$defs", {})
        self.defs: dict[str, dict[str, Any]] = {}
        self.def_codecs: dict[str, _Codec] = {}
        self.def_names: dict[str, str] = {}  # source name -> compiled name (no '/', unique)
        self.aliases: dict[str, dict[str, Any]] = {}  # defs that compile to a bare $ref
        self.in_progress: set[str] = set()
        self.refs: list[_Ref] = []
        self.codecs: list[_Codec] = []
        # Discriminator properties stay required and non-null: pydantic needs the tag present.
        self.tags: dict[int, set[str]] = {}
        self.find_tags(source)

    # -- driver ------------------------------------------------------------------------------

    def compile(self) -> tuple[dict[str, Any], _Codec]:
        root = self.source
        if "$ref" in root:  # a recursive or RootModel root: inline its definition at the root
            name = root["$ref"].removeprefix(_REF_PREFIX)
            root = {
                **self.source_defs.get(name, {}),
                **{k: v for k, v in root.items() if k not in ("$ref", "$defs")},
            }
        node, codec = self.node(root, "")
        if node.get("type") != "object":  # a RootModel of a list, a union...: {"root": value}
            node = {
                "type": "object",
                "properties": {"root": node},
                "required": ["root"],
                "additionalProperties": False,
            }
            codec = self.register(_Root(codec))
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
        _settle(node)
        self.check_limits(node)
        return node, codec

    def check_limits(self, node: dict[str, Any]) -> None:
        """SchemaError when the result breaks a walle limit (or, as a bug, any ultra rule)."""
        problem = mfjs.first_problem(node, "ultra")
        if problem is None:
            return
        hint = next((text for key, text in _LIMIT_HINTS.items() if key in problem), None)
        what = hint or "the compiled schema breaks a rule of Kimi's schema dialect"
        raise SchemaError(
            f"{self.model_name}: {what}: MoonshotAI/walle reports {problem!r}; split the model "
            "or simplify that part"
        )

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
        if not isinstance(src, dict):
            raise self.untyped(path)
        if _UNTYPED in src:
            return self.any_node(src)
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
            kept, used = _kept(src, kind)
            return _node(_describe(src, skip=used), {"type": kind, **kept}), _IDENTITY
        if kind is None:  # no type at all (a custom schema, or Any with a description)
            return self.any_node(src)
        raise self.untyped(path)

    def any_node(self, src: dict[str, Any]) -> tuple[dict[str, Any], _Codec]:
        """Any value: an anyOf of every JSON type."""
        return _node(_describe(src), {"anyOf": copy.deepcopy(list(_ANY_BRANCHES))}), _IDENTITY

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
        out = self.def_name(name)
        if out not in self.defs and name not in self.in_progress and name not in self.aliases:
            self.in_progress.add(name)
            node, codec = self.node(self.source_defs[name], path)
            self.in_progress.discard(name)
            if "$ref" in node and not set(node) - {"$ref", "description"}:
                self.aliases[name] = node  # e.g. RootModel[Item]: refer to Item itself
            else:
                self.defs[out], self.def_codecs[out] = node, codec
        text = _describe(src)
        if name in self.aliases:
            alias = self.aliases[name]
            text = _join_text(text, alias.get("description", ""))
            out = alias["$ref"].removeprefix(_REF_PREFIX)
        ref_codec = _Ref(out)
        self.refs.append(ref_codec)
        return _node(text, {"$ref": _REF_PREFIX + out}), self.register(ref_codec)

    def def_name(self, name: str) -> str:
        """The compiled ``$defs`` name: walle refuses '/', and a JSON pointer needs no escapes."""
        if name not in self.def_names:
            base = _DEF_NAME.sub("_", name) or "Model"
            out, taken, index = base, set(self.def_names.values()), 2
            while out in taken:
                out, index = f"{base}_{index}", index + 1
            self.def_names[name] = out
        return self.def_names[name]

    def union_node(self, src: dict[str, Any], path: str) -> tuple[dict[str, Any], _Codec]:
        pairs = [self.node(branch, path) for branch in _flat_branches(src["anyOf"])]
        return self.merge(pairs, _describe(src), path)

    def merge(
        self,
        pairs: list[tuple[dict[str, Any], _Codec]],
        text: str,
        path: str,
    ) -> tuple[dict[str, Any], _Codec]:
        """One anyOf of compiled branches: nested anyOf spliced in, duplicates dropped."""
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
            return self.map_node(src, path)
        required = set(src.get("required", [])) | self.tags.get(id(src), set())
        props: dict[str, Any] = {}
        fields: dict[str, _Codec] = {}
        drop_null: set[str] = set()
        renames: dict[str, str] = {}
        for name, sub in props_src.items():
            node, codec = self.node(sub, _join(path, name))
            if name not in required and not self.accepts_null(node):
                node = _nullable(node)
                drop_null.add(name)
            sent = _sent_name(name, props_src.keys() | props.keys())
            if sent != name:
                renames[sent] = name
                drop_null = {sent if n == name else n for n in drop_null}
            props[sent], fields[sent] = node, codec
        compiled = _node(
            _describe(src),
            {
                "type": "object",
                "properties": props,
                "required": list(props),
                "additionalProperties": False,
            },
        )
        optional = frozenset(sent for sent in props if renames.get(sent, sent) not in required)
        codec = _Object(fields, frozenset(drop_null), optional, renames)
        return compiled, self.register(codec)

    def map_node(self, src: dict[str, Any], path: str) -> tuple[dict[str, Any], _Codec]:
        """``dict[K, V]``: ``additionalProperties: V``; a rule on the keys is stated in words."""
        if _KEYS_PROBLEM in src:
            raise self.error(
                path,
                f"is a dict, and {src[_KEYS_PROBLEM]}",
                "use str keys (or int, enum, date or UUID keys)",
            )
        values = src.get("additionalProperties")
        patterns = src.get("patternProperties")
        key_rules: list[str] = []
        if isinstance(patterns, dict) and len(patterns) == 1:
            pattern, values = next(iter(patterns.items()))
            key_rules.append(f"keys match pattern: {pattern}")
        elif isinstance(patterns, dict) and patterns:
            raise self.error(
                path,
                "is a dict whose values depend on the key's pattern (patternProperties)",
                "use one value type for every key",
            )
        key_rules.extend(self.key_rules(src.get(_KEYS) or src.get("propertyNames") or {}, path))
        if not isinstance(values, dict) or not values or _UNTYPED in values:
            value_node: dict[str, Any] = {}  # walle.md: additionalProperties {} is ANY
            value_codec: _Codec = _IDENTITY
        else:
            value_node, value_codec = self.node(values, _join(path, "[key]"))
            keys = self.enum_keys(src.get(_KEYS) or src.get("propertyNames") or {})
            if keys and len(keys) <= _MAX_ENUM_KEYS and not self.accepts_null(value_node):
                return self.closed_map(src, keys, value_node, value_codec)
        text = _describe(src, extra=key_rules)
        compiled = _node(text, {"type": "object", "additionalProperties": value_node})
        if value_codec is _IDENTITY:
            return compiled, _IDENTITY
        return compiled, self.register(_Map(value_codec))

    def closed_map(
        self, src: dict[str, Any], keys: list[str], value: dict[str, Any], codec: _Codec
    ) -> tuple[dict[str, Any], _Codec]:
        """A dict with enum keys: an object of those keys, each nullable (null = absent); a key
        walle refuses as a property name travels renamed (``_sent_name``)."""
        renames: dict[str, str] = {}
        props: dict[str, Any] = {}
        for key in keys:
            sent = _sent_name(key, set(keys) | props.keys())
            if sent != key:
                renames[sent] = key
            props[sent] = _nullable(copy.deepcopy(value))
        compiled = _node(
            _describe(src),
            {
                "type": "object",
                "properties": props,
                "required": list(props),
                "additionalProperties": False,
            },
        )
        fields = dict.fromkeys(props, codec)
        every = frozenset(props)
        return compiled, self.register(_Object(fields, every, every, renames))

    def enum_keys(self, keys: dict[str, Any]) -> list[str] | None:
        """The keys of a dict keyed by an Enum or Literal (or a union of them), as JSON object
        keys (text)."""
        values = self.key_values(keys)
        if not values:
            return None
        if not all(isinstance(v, str | int) and not isinstance(v, bool) for v in values):
            return None
        texts = [str(value) for value in values]
        return texts if len(set(texts)) == len(texts) else None

    def key_values(self, keys: dict[str, Any]) -> list[Any] | None:
        """The values an Enum / Literal key schema (or a union of only those) allows, else None."""
        keys = self.resolve_keys(keys)
        branches = keys.get("anyOf")
        if isinstance(branches, list):
            found: list[Any] = []
            for branch in branches:
                values = self.key_values(branch) if isinstance(branch, dict) else None
                if values is None:
                    return None
                found.extend(value for value in values if value not in found)
            return found
        values = keys.get("enum")
        if values is None and "const" in keys:
            values = [keys["const"]]
        return values if isinstance(values, list) else None

    def resolve_keys(self, keys: dict[str, Any]) -> dict[str, Any]:
        if "$ref" in keys:
            return self.source_defs.get(str(keys["$ref"]).removeprefix(_REF_PREFIX), {})
        return keys

    def key_rules(self, keys: dict[str, Any], path: str) -> list[str]:
        """Words for what a dict's keys must be (JSON object keys are always text).

        A union of key types (``Literal["a"] | str``): no words when a member takes any text;
        else the values of its Enum / Literal members, or the first member's rules. (Keys that
        follow them are valid; the words may say less than the union allows.)
        """
        if not keys or _UNTYPED in keys:
            return []
        keys = self.resolve_keys(keys)
        values = self.key_values(keys)
        if isinstance(values, list):
            return ["keys: one of " + ", ".join(str(value) for value in values)]
        branches = keys.get("anyOf")
        if isinstance(branches, list):
            members = [branch for branch in branches if isinstance(branch, dict)]
            by_member = [self.key_rules(member, path) for member in members]
            if not by_member or not all(by_member):
                return []  # a member takes any text
            listed = [value for member in members for value in self.key_values(member) or ()]
            if listed:
                return ["keys: one of " + ", ".join(dict.fromkeys(map(str, listed)))]
            return by_member[0]
        rules: list[str] = []
        kind = keys.get("type")
        if kind in ("integer", "number", "boolean"):
            rules.append(f"keys: {kind} values written as text")
        fmt = keys.get("format")
        if isinstance(fmt, str):
            rules.append(f"keys: format {fmt}")
        if isinstance(keys.get("pattern"), str):
            rules.append(f"keys match pattern: {keys['pattern']}")
        for keyword, label in (("minLength", "min key length"), ("maxLength", "max key length")):
            if isinstance(keys.get(keyword), int):
                rules.append(f"{label}: {keys[keyword]}")
        return rules

    def array_node(self, src: dict[str, Any], path: str) -> tuple[dict[str, Any], _Codec]:
        if "prefixItems" in src:
            return self.tuple_node(src, path)
        kept, used = _kept(src, "array")
        items = src.get("items")
        if not isinstance(items, dict) or not items or _UNTYPED in items:
            # list[Any]: walle.md lets an array omit items (any item)
            return _node(_describe(src, skip=used), {"type": "array", **kept}), _IDENTITY
        item_node, item_codec = self.node(items, _join(path, "[]"))
        compiled = _node(_describe(src, skip=used), {"type": "array", "items": item_node, **kept})
        if item_codec is _IDENTITY:
            return compiled, _IDENTITY
        return compiled, self.register(_Array(item_codec))

    def tuple_node(self, src: dict[str, Any], path: str) -> tuple[dict[str, Any], _Codec]:
        """``tuple[A, A]``: an array of exactly n items; ``tuple[A, B]``: ``{"0": A, "1": B}``."""
        positions = src["prefixItems"]
        if src.get("items") not in (None, False):
            raise self.error(
                path,
                "is a tuple with a variable-length tail (walle has no prefixItems)",
                "use a fixed tuple[A, B] or a list[X]",
            )
        if not isinstance(positions, list) or not positions:
            raise self.error(path, "is an empty tuple", "remove the field or use a list")
        compiled = [self.node(p, _join(path, f"[{i}]")) for i, p in enumerate(positions)]
        codecs = [codec for _, codec in compiled]
        shapes = {json.dumps(node, sort_keys=True) for node, _ in compiled}
        if len(shapes) == 1:
            count = len(positions)
            text = _describe(src, skip=("minItems", "maxItems"))
            node = _node(
                text,
                {"type": "array", "items": compiled[0][0], "minItems": count, "maxItems": count},
            )
            if all(codec is _IDENTITY for codec in codecs):
                return node, _IDENTITY
            return node, self.register(_Tuple(codecs))
        names = [str(index) for index in range(len(positions))]
        note = f"{_TUPLE_NOTE} {', '.join(names)}."
        text = _describe(src, skip=("minItems", "maxItems"), note=note)
        node = _node(
            text,
            {
                "type": "object",
                "properties": {name: item for name, (item, _) in zip(names, compiled, strict=True)},
                "required": names,
                "additionalProperties": False,
            },
        )
        return node, self.register(_TupleObject(codecs))

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
            source = next((k for k, v in self.def_names.items() if v == name), name)
            return _source_nullable(self.source_defs.get(source, {}))
        return False


def _sent_name(name: str, taken: Iterable[str]) -> str:
    """The name a property travels under: ``name``, unless walle refuses it.

    walle refuses the names of its keywords (``required``...) and the empty name: they travel
    as ``required_`` / ``_``. It also reads a name with both ``{`` and ``}`` as ``anyOf{index}``
    and then refuses any enum, ``required``, ``$ref`` or ``anyOf`` below it: such a name
    travels with ``(`` and ``)`` for its braces (``currency{iso}`` -> ``currency(iso)``). A
    trailing ``_`` is added while the result collides with a name in ``taken``. The codec
    renames the property back.
    """
    if name in RESERVED_PROPERTY_NAMES or not name:
        sent = f"{name}_"
    elif BRACED_NAME.search(name):
        sent = name.replace("{", "(").replace("}", ")")
    else:
        return name
    taken = set(taken)
    while sent in taken:
        sent += "_"
    return sent


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


def _settle(schema: dict[str, Any]) -> None:
    """Move descriptions where walle ultra wants them (in place, without recursion).

    - An ``anyOf`` branch's description moves up to the parent when the parent has one, or when
      the branch is a ``$ref`` (a description beside a ``$ref`` whose target has one conflicts).
    - A described ``$ref`` elsewhere whose target has a description or is an ``anyOf`` becomes
      ``{"description": ..., "anyOf": [{"$ref": ...}]}``.
    """
    defs = schema.get("$defs", {})
    stack: list[tuple[dict[str, Any], bool]] = [(schema, False)]
    stack.extend((node, False) for node in defs.values())
    while stack:
        node, is_branch = stack.pop()
        branches = node.get("anyOf")
        if isinstance(branches, list):
            for branch in branches:
                text = branch.get("description")
                if text and ("description" in node or "$ref" in branch):
                    merged = _merge_text(node.get("description", ""), branch.pop("description"))
                    _set_description(node, merged)
            stack.extend((branch, True) for branch in branches)
        ref = node.get("$ref")
        if isinstance(ref, str) and "description" in node and not is_branch:
            target = defs.get(ref.removeprefix(_REF_PREFIX), {})
            if "description" in target or "anyOf" in target:
                text = node.pop("description")
                node.pop("$ref")
                node.update({"description": text, "anyOf": [{"$ref": ref}]})
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                stack.append((node[key], False))
        if isinstance(node.get("properties"), dict):
            stack.extend((sub, False) for sub in node["properties"].values())


def _set_description(node: dict[str, Any], text: str) -> None:
    """Set the description as the node's first key (in place)."""
    rest = {k: v for k, v in node.items() if k != "description"}
    node.clear()
    node.update(_node(text, rest))


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
