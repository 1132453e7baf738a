"""Supporting quotes (``grounding="quotes"``): the compiled schema asks for a quote per field.

``quote_schema(schema)`` adds to every object of a compiled schema that has quotable properties
a required ``kx_quotes`` object, listed first so that the model writes its evidence before the
values. It holds one property per quotable field, under the field's sent name:

- a scalar field (string, number, integer, enum, date; nullable or not): ``{"type": "string"}``;
- a list of scalars: ``{"type": "array", "items": {"type": "string"}}``, one quote per item;
- nested objects (models, list items that are models) carry their own ``kx_quotes``; booleans,
  dicts and ``Any`` get no quote (grounding aligns their values as ``grounding=True`` does).

An object without quotable properties gets none, and ``$defs`` entries are augmented once, so
every use of a nested model shares them. Only the root's ``kx_quotes`` carries a (short)
description: the system message (``run.request.QUOTES_INSTRUCTION``) explains them all. The
result must still pass walle's ``ultra`` level (``schema.dialect``): a model at the nesting or
size limit raises ``SchemaError`` with a hint to use ``grounding=True``.

``split_quotes(schema, data)`` walks an answer against the augmented schema, removes each
``kx_quotes`` (the user's model never sees them) and returns them by the object's path in the
sent answer; a missing or malformed ``kx_quotes`` is an error line, so the answer is invalid
and the conversation reasks. ``add_quotes`` writes quotes into an answer (few-shot examples
quote each value's own text).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from ..exceptions import SchemaError
from . import dialect as mfjs
from .codec import _REF_PREFIX, _path_text

#: The property each object of a quoted schema carries its quotes in.
QUOTES = "kx_quotes"
QUOTES_DESCRIPTION = (
    "Per field: the exact words copied from the input that support its value; empty if null"
)
_SCALAR_TYPES = frozenset({"string", "number", "integer"})

Path = tuple[str | int, ...]


def _resolve(node: Any, root: dict[str, Any]) -> Any:
    """``node`` with a ``$ref`` (``#`` or ``#/$defs/Name``) replaced by its target."""
    seen = 0
    while isinstance(node, dict) and isinstance(node.get("$ref"), str) and seen < 64:
        ref = node["$ref"]
        node = root if ref == "#" else (root.get("$defs") or {}).get(ref.removeprefix(_REF_PREFIX))
        seen += 1
    return node


def _branches(node: Any, root: dict[str, Any]) -> list[Any]:
    node = _resolve(node, root)
    if isinstance(node, dict) and isinstance(node.get("anyOf"), list):
        return [_resolve(branch, root) for branch in node["anyOf"]]
    return [node]


def _is_scalar(node: Any, root: dict[str, Any]) -> bool:
    """A string / number / integer node, or a union of those with null."""
    kinds = {b.get("type") for b in _branches(node, root) if isinstance(b, dict)}
    kinds.discard("null")
    return bool(kinds) and kinds <= _SCALAR_TYPES


def _quote_kind(node: Any, root: dict[str, Any]) -> dict[str, Any] | None:
    """The quote property for a field's schema node, or None for a field without a quote."""
    if _is_scalar(node, root):
        return {"type": "string"}
    arrays = [b for b in _branches(node, root) if isinstance(b, dict) and b.get("type") != "null"]
    if len(arrays) == 1 and arrays[0].get("type") == "array":
        if _is_scalar(arrays[0].get("items"), root):
            return {"type": "array", "items": {"type": "string"}}
    return None


def quote_schema(schema: dict[str, Any], model_name: str = "output") -> dict[str, Any]:
    """A copy of a compiled schema whose objects also ask for ``kx_quotes`` (module docstring).

    Raises ``SchemaError`` when a property is already named ``kx_quotes`` or when the result
    breaks a walle limit.
    """
    root = copy.deepcopy(schema)

    def augment(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                augment(item)
            return
        if not isinstance(node, dict):
            return
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                for child in value.values():
                    augment(child)
            elif key != "enum":
                augment(value)
        props = node.get("properties")
        if node.get("type") != "object" or not isinstance(props, dict):
            return
        if QUOTES in props:
            raise SchemaError(
                f"{model_name}: a field is sent as {QUOTES!r}, the name grounding='quotes' "
                "uses for its quotes; rename it (or use grounding=True)"
            )
        quoted = {name: kind for name, sub in props.items() if (kind := _quote_kind(sub, root))}
        if not quoted:
            return
        quotes: dict[str, Any] = {"type": "object"}
        if node is root:  # said once (the system message explains every kx_quotes)
            quotes["description"] = QUOTES_DESCRIPTION
        quotes |= {
            "properties": quoted,
            "required": list(quoted),
            "additionalProperties": False,
        }
        node["properties"] = {QUOTES: quotes, **props}
        required = node.get("required")
        node["required"] = [QUOTES, *(required if isinstance(required, list) else ())]

    augment(root)
    problem = mfjs.first_problem(root, "ultra")
    if problem is not None:
        raise SchemaError(
            f"{model_name}: with a quote per field (grounding='quotes') the schema breaks a rule "
            f"of Kimi's schema dialect: MoonshotAI/walle reports {problem!r}; use "
            "grounding=True (values aligned without quotes) or simplify the model"
        )
    return root


def _fits(node: Any, value: Any) -> bool:
    """Whether ``value`` has ``node``'s JSON type (an object: also its property names)."""
    if not isinstance(node, dict):
        return False
    kind = node.get("type")
    if isinstance(value, dict):
        props = node.get("properties")
        if kind != "object":
            return False
        if isinstance(props, dict) and node.get("additionalProperties") is False:
            return all(key in props for key in value)
        return True
    if isinstance(value, list):
        return kind == "array"
    if value is None:
        return kind == "null"
    if isinstance(value, bool):
        return kind == "boolean"
    if isinstance(value, int):
        return kind in ("integer", "number")
    if isinstance(value, float):
        return kind == "number"
    return kind == "string"


def split_quotes(
    schema: dict[str, Any], data: Any
) -> tuple[Any, dict[Path, dict[str, Any]], list[str]]:
    """(the answer without its quotes, the quotes by object path, error lines).

    ``data`` is an answer in the sent shape of a ``quote_schema`` schema (never mutated). The
    quotes of the object at ``("items", 2)`` are ``quotes[("items", 2)]``, keyed by the sent
    property names. An error line (``items.2.kx_quotes: Field required``) is written for each
    object whose schema asks for quotes and that has none (or not an object).
    """
    quotes: dict[Path, dict[str, Any]] = {}
    errors: list[str] = []

    def walk(node: Any, value: Any, path: Path) -> Any:
        node = _resolve(node, schema)
        if not isinstance(node, dict):
            return value
        if isinstance(node.get("anyOf"), list):
            for branch in node["anyOf"]:
                target = _resolve(branch, schema)
                if _fits(target, value if not isinstance(value, dict) else _bare(value)):
                    return walk(target, value, path)
            return value
        if isinstance(value, dict) and node.get("type") == "object":
            props = node.get("properties")
            props = props if isinstance(props, dict) else {}
            out = dict(value)
            if QUOTES in props:
                found = out.pop(QUOTES, None)
                if isinstance(found, dict):
                    quotes[path] = found
                else:
                    what = "Field required" if found is None else "Input should be an object"
                    errors.append(f"{_path_text((*path, QUOTES))}: {what}")
            extra = node.get("additionalProperties")
            for key, child in out.items():
                sub = props.get(key, extra if isinstance(extra, dict) and extra else None)
                if sub is not None:
                    out[key] = walk(sub, child, (*path, key))
            return out
        if isinstance(value, list) and node.get("type") == "array":
            items = node.get("items")
            if isinstance(items, dict):
                return [walk(items, child, (*path, i)) for i, child in enumerate(value)]
        return value

    stripped = walk(schema, data, ())
    return stripped, quotes, errors


def _bare(value: dict[str, Any]) -> dict[str, Any]:
    return {key: child for key, child in value.items() if key != QUOTES}


def _quote_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def add_quotes(schema: dict[str, Any], data: Any) -> Any:
    """An answer in the sent shape with ``kx_quotes`` added where ``schema`` asks for them,
    each quote the value's own text (few-shot examples: the model sees the shape)."""

    def walk(node: Any, value: Any) -> Any:
        node = _resolve(node, schema)
        if not isinstance(node, dict):
            return value
        if isinstance(node.get("anyOf"), list):
            for branch in node["anyOf"]:
                target = _resolve(branch, schema)
                if _fits(target, value):
                    return walk(target, value)
            return value
        if isinstance(value, dict) and node.get("type") == "object":
            props = node.get("properties")
            props = props if isinstance(props, dict) else {}
            extra = node.get("additionalProperties")
            out: dict[str, Any] = {}
            spec = props.get(QUOTES)
            if isinstance(spec, dict):
                made: dict[str, Any] = {}
                for name, kind in (spec.get("properties") or {}).items():
                    child = value.get(name)
                    if kind.get("type") == "array":
                        made[name] = [_quote_text(item) for item in child or ()]
                    else:
                        made[name] = _quote_text(child)
                out[QUOTES] = made
            for key, child in value.items():
                sub = props.get(key, extra if isinstance(extra, dict) and extra else None)
                out[key] = walk(sub, child) if sub is not None else child
            return out
        if isinstance(value, list) and node.get("type") == "array":
            return [walk(node.get("items"), child) for child in value]
        return value

    return walk(schema, data)
