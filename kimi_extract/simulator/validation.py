"""Request validation against the seed's OpenAPI ``ChatCompletionRequest``.

``openapi.json`` (package data beside this module) holds the seed's ``ChatCompletionRequest`` and
every component schema it references (plus ``ChatCompletionResponse``, ``ChatUsage`` and
``ErrorResponse`` for tests), unchanged. It was made from ``shared/kimi-openapi.yaml`` with::

    python3 - <<'EOF'   # needs PyYAML; collects ChatCompletionRequest and what it $refs
    import json, yaml
    doc = yaml.safe_load(open("shared/kimi-openapi.yaml"))
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
    out = {"$comment": "Generated from shared/kimi-openapi.yaml; see ...simulator/validation.py",
           "info": {"title": doc["info"]["title"], "version": doc["info"]["version"],
                    "openapi": doc["openapi"]},
           "components": {"schemas": {name: schemas[name] for name in sorted(seen)}}}
    json.dump(out, open("kimi_extract/simulator/openapi.json", "w"), indent=1,
              ensure_ascii=False)
    EOF

Every body is validated with jsonschema (Draft 2020-12). Because jsonschema costs ~200-400 us per
small body, bodies first go through a fast checker compiled once from the same schema (it handles
the keywords the seed uses: type, enum, properties, required, items, min/maxItems,
minimum/maximum, oneOf, $ref). Only a body the fast checker accepts skips jsonschema; anything it
rejects, or any schema keyword it does not know, goes to jsonschema, whose best error (with its
JSON path) becomes the 400 message. A test checks that both agree.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from .protocol import invalid_request

Check = Callable[[Any], bool]

#: Keywords that only annotate: the fast checker ignores them, as jsonschema does.
_ANNOTATIONS = frozenset({"description", "default", "example", "examples", "deprecated", "title"})


@cache
def openapi_components() -> dict[str, Any]:
    """The seed's component schemas by name (from ``openapi.json``)."""
    text = resources.files(__package__).joinpath("openapi.json").read_text(encoding="utf-8")
    schemas: dict[str, Any] = json.loads(text)["components"]["schemas"]
    return schemas


def component_schema(name: str) -> dict[str, Any]:
    """A standalone JSON Schema for one seed component (its $refs resolve in place)."""
    return {"$ref": f"#/components/schemas/{name}", "components": {"schemas": openapi_components()}}


@cache
def _jsonschema_validator() -> Draft202012Validator:
    schema = component_schema("ChatCompletionRequest")
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


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


@cache
def _fast_checker() -> Check | None:
    components = openapi_components()
    try:
        return _compile(components["ChatCompletionRequest"], components)
    except _Unsupported:
        return None


def schema_error(body: Any) -> str | None:
    """The first problem of ``body`` against the seed's request schema, naming its JSON path."""
    fast = _fast_checker()
    if fast is not None and fast(body):
        return None
    error = best_match(_jsonschema_validator().iter_errors(body))
    if error is None:
        return None
    return f"{error.message} at {error.json_path}"


def fast_path_agrees(body: Any) -> bool:
    """Whether the fast checker and jsonschema agree on ``body`` (a test hook)."""
    fast = _fast_checker()
    if fast is None:
        return True
    return fast(body) == _jsonschema_validator().is_valid(body)


def validate_body(body: Any) -> None:
    """Raise the 400 for a body that breaks the seed's ``ChatCompletionRequest`` schema."""
    problem = schema_error(body)
    if problem is not None:
        raise invalid_request(problem)
