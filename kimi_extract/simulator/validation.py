"""Request validation against the reference's OpenAPI ``ChatCompletionRequest``
(``docs/reference/kimi-openapi.yaml``).

``openapi.json`` (package data beside this module) holds the reference's ``ChatCompletionRequest``
and every component schema it references (plus ``ChatCompletionResponse``, ``ChatUsage`` and
``ErrorResponse`` for tests), unchanged. It was made from ``docs/reference/kimi-openapi.yaml``
with::

    python3 - <<'EOF'   # needs PyYAML; collects ChatCompletionRequest and what it $refs
    import json, yaml
    doc = yaml.safe_load(open("docs/reference/kimi-openapi.yaml"))
    schemas = doc["components"]["schemas"]
    keep = ["ChatCompletionRequest", "ChatCompletionResponse", "ChatUsage", "ErrorResponse"]
    seen = []
    def walk(node):
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
                name = ref.rsplit("/", 1)[1]
                if name not in seen:
                    seen.append(name); walk(schemas[name])
            for v in node.values(): walk(v)
        elif isinstance(node, list):
            for v in node: walk(v)
    for name in keep:
        if name not in seen:
            seen.append(name); walk(schemas[name])
    out = {"$comment": "Generated from docs/reference/kimi-openapi.yaml; see
    ...simulator/validation.py",
           "info": {"title": doc["info"]["title"], "version": doc["info"]["version"],
                    "openapi": doc["openapi"]},
           "components": {"schemas": {name: schemas[name] for name in sorted(seen)}}}
    json.dump(out, open("kimi_extract/simulator/openapi.json", "w"), indent=1,
              ensure_ascii=False)
    EOF

The simulator needs nothing beyond the library's base dependencies, so it carries its own small
JSON Schema (Draft 2020-12) validator for the keywords the reference's schema uses: type, enum,
properties, required, additionalProperties, items, min/maxItems, minimum/maximum, oneOf, $ref
(annotations such as description/default/example are ignored, as any validator does). A schema
keyword outside that set raises at load time, so a new reference cannot be half-checked silently.

Two passes: a fast predicate compiled once from the schema (~20x cheaper than a general
validator) accepts almost every body; only a body it rejects is walked again by
:func:`first_error`, which finds the problem and its JSON path (``$.messages[0].content``) for the
400 message, choosing among ``oneOf`` branches the way jsonschema's ``best_match`` does (the
deepest error). Tests check both passes against the ``jsonschema`` package (a dev dependency) on
generated bodies.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any

from .protocol import invalid_request

Check = Callable[[Any], bool]

#: Keywords that only annotate: the fast checker ignores them, as jsonschema does.
_ANNOTATIONS = frozenset({"description", "default", "example", "examples", "deprecated", "title"})


@cache
def openapi_components() -> dict[str, Any]:
    """The reference's component schemas by name (from ``openapi.json``)."""
    text = resources.files(__package__).joinpath("openapi.json").read_text(encoding="utf-8")
    schemas: dict[str, Any] = json.loads(text)["components"]["schemas"]
    for name, schema in schemas.items():
        _check_keywords(schema, name)
    return schemas


def _check_keywords(node: Any, where: str) -> None:
    """Refuse a schema keyword :func:`first_error` does not implement (a new reference, say)."""
    if not isinstance(node, dict):
        return
    for key, spec in node.items():
        if key in _ANNOTATIONS:
            continue
        if key not in _KNOWN:
            raise ValueError(f"openapi.json: {where} uses {key!r}, which validation.py lacks")
        if key == "properties":
            for name, sub in spec.items():
                _check_keywords(sub, f"{where}.{name}")
        elif key == "oneOf":
            for index, sub in enumerate(spec):
                _check_keywords(sub, f"{where}.oneOf[{index}]")
        elif key in ("items", "additionalProperties"):
            _check_keywords(spec, f"{where}.{key}")


def component_schema(name: str) -> dict[str, Any]:
    """A standalone JSON Schema for one reference component (its $refs resolve in place)."""
    return {"$ref": f"#/components/schemas/{name}", "components": {"schemas": openapi_components()}}


class _Unsupported(Exception):
    pass


_TYPE_CHECKS: dict[str, Check] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
}


def _all_of(checks: list[Check]) -> Check:
    if len(checks) == 1:
        return checks[0]

    def check(value: Any) -> bool:
        for c in checks:
            if not c(value):
                return False
        return True

    return check


def _any_type(type_checks: list[Check]) -> Check:
    if len(type_checks) == 1:
        return type_checks[0]

    def check(value: Any) -> bool:
        for c in type_checks:
            if c(value):
                return True
        return False

    return check


def _in_enum(allowed: frozenset[str]) -> Check:
    def check(value: Any) -> bool:
        return isinstance(value, str) and value in allowed

    return check


def _has_keys(names: list[str]) -> Check:
    def check(value: Any) -> bool:
        if isinstance(value, dict):
            for name in names:
                if name not in value:
                    return False
        return True

    return check


def _properties(props: dict[str, Check]) -> Check:
    pairs = list(props.items())

    def check(value: Any) -> bool:
        if isinstance(value, dict):
            if len(value) < len(pairs):
                for name, sub in value.items():
                    c = props.get(name)
                    if c is not None and not c(sub):
                        return False
            else:
                for name, c in pairs:
                    if name in value and not c(value[name]):
                        return False
        return True

    return check


def _items(item: Check) -> Check:
    def check(value: Any) -> bool:
        if isinstance(value, list):
            for x in value:
                if not item(x):
                    return False
        return True

    return check


def _length(bound: int, minimum: bool) -> Check:
    def check(value: Any) -> bool:
        if not isinstance(value, list):
            return True
        return len(value) >= bound if minimum else len(value) <= bound

    return check


def _number_bound(bound: float, minimum: bool) -> Check:
    is_number = _TYPE_CHECKS["number"]

    def check(value: Any) -> bool:
        if not is_number(value):
            return True
        return bool(value >= bound if minimum else value <= bound)

    return check


def _one_of(branches: list[Check]) -> Check:
    def check(value: Any) -> bool:
        matched = 0
        for c in branches:
            if c(value):
                matched += 1
        return matched == 1

    return check


def _compile(node: Any, components: dict[str, Any], depth: int = 0) -> Check:
    """A predicate that is True only where jsonschema would accept the value."""
    if depth > 40:
        raise _Unsupported("schema too deep")
    if node is True or node == {}:
        return _all_of([])
    if not isinstance(node, dict):
        raise _Unsupported(repr(node))
    checks: list[Check] = []
    for key, spec in node.items():
        if key in _ANNOTATIONS:
            continue
        if key == "$ref":
            name = spec.removeprefix("#/components/schemas/")
            checks.append(_compile(components[name], components, depth + 1))
        elif key == "type":
            names = [spec] if isinstance(spec, str) else list(spec)
            checks.append(_any_type([_TYPE_CHECKS[n] for n in names]))
        elif key == "enum":
            if not all(isinstance(item, str) for item in spec):
                raise _Unsupported("non-string enum")
            checks.append(_in_enum(frozenset(spec)))
        elif key == "required":
            checks.append(_has_keys(list(spec)))
        elif key == "properties":
            checks.append(
                _properties(
                    {name: _compile(sub, components, depth + 1) for name, sub in spec.items()}
                )
            )
        elif key == "additionalProperties":
            if spec is not True:
                raise _Unsupported("additionalProperties")
        elif key == "items":
            checks.append(_items(_compile(spec, components, depth + 1)))
        elif key in ("minItems", "maxItems"):
            checks.append(_length(spec, key == "minItems"))
        elif key in ("minimum", "maximum"):
            checks.append(_number_bound(spec, key == "minimum"))
        elif key == "oneOf":
            checks.append(_one_of([_compile(sub, components, depth + 1) for sub in spec]))
        else:
            raise _Unsupported(key)
    return _all_of(checks)


#: Keywords :func:`first_error` checks; anything else (besides annotations) is refused at load.
_KNOWN = frozenset(
    {"$ref", "type", "enum", "required", "properties", "additionalProperties", "items"}
    | {"minItems", "maxItems", "minimum", "maximum", "oneOf"}
)


def _json_path(path: tuple[str | int, ...]) -> str:
    text = "$"
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


_Error = tuple[str, tuple[str | int, ...]]


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1`` (Python's ``==`` says it is)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def first_error(
    node: Any, value: Any, components: dict[str, Any], path: tuple[str | int, ...] = ()
) -> _Error | None:
    """The first problem of ``value`` under schema ``node``: (message, path), or None if valid.

    Messages follow jsonschema's wording (``'model' is a required property``, ``5 is not of
    type 'string'``) so a 400 reads the same as before the simulator dropped that dependency.
    """
    if node is True or node == {}:
        return None
    if node is False:
        return (f"False schema does not allow {repr(value)}", path)
    for key, spec in node.items():
        if key in _ANNOTATIONS:
            continue
        problem: _Error | None = None
        if key == "$ref":
            name = spec.removeprefix("#/components/schemas/")
            problem = first_error(components[name], value, components, path)
        elif key == "type":
            names = [spec] if isinstance(spec, str) else list(spec)
            if not any(_TYPE_CHECKS[n](value) for n in names):
                shown = ", ".join(repr(n) for n in names)
                problem = (f"{repr(value)} is not of type {shown}", path)
        elif key == "enum":
            if not any(_same(item, value) for item in spec):
                problem = (f"{value!r} is not one of {spec!r}", path)
        elif key == "required" and isinstance(value, dict):
            for name in spec:
                if name not in value:
                    problem = (f"{name!r} is a required property", path)
                    break
        elif key == "properties" and isinstance(value, dict):
            for name, sub in spec.items():
                if name in value:
                    problem = first_error(sub, value[name], components, (*path, name))
                    if problem:
                        break
        elif key == "additionalProperties" and isinstance(value, dict):
            known = node.get("properties", {})
            for name, sub_value in value.items():
                if name not in known:
                    problem = first_error(spec, sub_value, components, (*path, name))
                    if problem:
                        break
        elif key == "items" and isinstance(value, list):
            for index, item in enumerate(value):
                problem = first_error(spec, item, components, (*path, index))
                if problem:
                    break
        elif key == "minItems" and isinstance(value, list) and len(value) < spec:
            problem = (
                f"{repr(value)} should be non-empty"
                if spec == 1
                else f"{repr(value)} is too short",
                path,
            )
        elif key == "maxItems" and isinstance(value, list) and len(value) > spec:
            problem = (f"{repr(value)} is too long", path)
        elif key in ("minimum", "maximum") and _TYPE_CHECKS["number"](value):
            if key == "minimum" and value < spec:
                problem = (f"{repr(value)} is less than the minimum of {spec!r}", path)
            elif key == "maximum" and value > spec:
                problem = (f"{repr(value)} is greater than the maximum of {spec!r}", path)
        elif key == "oneOf":
            problem = _one_of_error(spec, value, components, path)
        if problem is not None:
            return problem
    return None


def _one_of_error(
    branches: list[Any], value: Any, components: dict[str, Any], path: tuple[str | int, ...]
) -> _Error | None:
    errors = [first_error(branch, value, components, path) for branch in branches]
    matched = [i for i, error in enumerate(errors) if error is None]
    if len(matched) == 1:
        return None
    if matched:
        return (f"{repr(value)} is valid under each of {matched}", path)
    # Like jsonschema's best_match: an error found deeper inside a branch says more than the
    # branch's own "not of type" at this level.
    deepest = max((e for e in errors if e is not None), key=lambda e: len(e[1]))
    if len(deepest[1]) > len(path):
        return deepest
    return (f"{repr(value)} is not valid under any of the given schemas", path)


@cache
def _fast_checker() -> Check | None:
    components = openapi_components()
    try:
        return _compile(components["ChatCompletionRequest"], components)
    except _Unsupported:
        return None


def schema_error(body: Any) -> str | None:
    """The first problem of ``body`` against the reference's request schema, naming its JSON
    path."""
    fast = _fast_checker()
    if fast is not None and fast(body):
        return None
    components = openapi_components()
    error = first_error(components["ChatCompletionRequest"], body, components)
    if error is None:
        return None
    message, path = error
    return f"{message} at {_json_path(path)}"


def fast_path_agrees(body: Any) -> bool:
    """Whether the fast checker and :func:`first_error` agree on ``body`` (a test hook)."""
    fast = _fast_checker()
    if fast is None:
        return True
    components = openapi_components()
    valid = first_error(components["ChatCompletionRequest"], body, components) is None
    return fast(body) == valid


def validate_body(body: Any) -> None:
    """Raise the 400 for a body that breaks the reference's ``ChatCompletionRequest`` schema."""
    problem = schema_error(body)
    if problem is not None:
        raise invalid_request(problem)
