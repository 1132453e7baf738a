"""pydantic's side of the schema compiler: the JSON schema it starts from, and the constraint text.

``_Generator`` is pydantic's JSON schema generator, leaving ``x-kx-*`` markers where pydantic
would fail or where only the compiler (which knows the field's path) can judge: values with no
type, types with no JSON form, dict keys (with the reason they would not round-trip, if so), and
rules pydantic's JSON schema does not show (timezone-aware or naive datetimes, past or future
dates, URL schemes).

``_kept`` picks the constraints Kimi's dialect carries as keywords (walle ultra: ``minimum``/
``maximum``, ``minLength``/``maxLength``/``pattern``, ``minItems``/``maxItems``); ``_describe``
turns the rest (formats, exclusive bounds of numbers, multiples, unique items, key counts, the
markers' rules) into one sentence appended to the node's description, ``Constraints: <item>;
<item>.``. The simulator's answer generator reads that sentence back, so its wording is a
contract.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue, JsonSchemaWarningKind
from pydantic_core import core_schema

_UNTYPED = "x-kx-untyped"  # markers the generator leaves for the compiler, which knows the path
_INVALID = "x-kx-invalid"
_KEYS = "x-kx-keys"
_KEYS_PROBLEM = "x-kx-keys-problem"
_RULES = "x-kx-rules"  # rules stated in words only (list of constraint items)
# Core schema types whose values come back from a JSON object key (always a string) unchanged.
_ROUND_TRIP_KEYS = frozenset(
    {
        "str",
        "int",
        "float",
        "bool",
        "decimal",
        "date",
        "datetime",
        "time",
        "timedelta",
        "uuid",
        "bytes",
        "url",
        "multi-host-url",
    }
)
_WRAPPERS = ("function-after", "function-before", "function-wrap", "default")
_FORMATS = {
    "date": "date (YYYY-MM-DD)",
    "date-time": "date-time (ISO 8601)",
    "time": "time (HH:MM:SS)",
}
_SILENT_FORMATS = frozenset({"binary"})  # bytes travel as plain UTF-8 text
#: a Decimal written as a string: ASCII digits, optionally an exponent (as pydantic writes one;
#: pydantic refuses exponents of 19+ digits, so the pattern allows at most six)
_DECIMAL_PATTERN = r"^-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]{1,6})?$"
_BOUNDS = (
    ("minimum", "minimum"),
    ("maximum", "maximum"),
    ("exclusiveMinimum", "exclusive minimum"),
    ("exclusiveMaximum", "exclusive maximum"),
    ("multipleOf", "multiple of"),
    ("minLength", "min length"),
    ("maxLength", "max length"),
)
_COUNTS = (
    ("minItems", "min items"),
    ("minProperties", "min keys"),
    ("maxItems", "max items"),
    ("maxProperties", "max keys"),
)


class _Generator(GenerateJsonSchema):
    """pydantic's generator, leaving markers (untyped, invalid, dict keys) instead of failing."""

    # defaults never reach the compiled schema, so unserializable ones do not matter
    ignored_warning_kinds: set[JsonSchemaWarningKind] = {
        "skipped-choice",
        "non-serializable-default",
    }

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

    def datetime_schema(self, schema: core_schema.DatetimeSchema) -> JsonSchemaValue:
        rules = []
        if schema.get("tz_constraint") == "aware":
            rules.append("with a UTC offset (timezone-aware)")
        elif schema.get("tz_constraint") == "naive":
            rules.append("without a UTC offset (naive)")
        rules.extend(_NOW.get(str(schema.get("now_op")), ()))
        return _with_rules(super().datetime_schema(schema), rules)

    def date_schema(self, schema: core_schema.DateSchema) -> JsonSchemaValue:
        return _with_rules(super().date_schema(schema), _NOW.get(str(schema.get("now_op")), ()))

    def decimal_schema(self, schema: core_schema.DecimalSchema) -> JsonSchemaValue:
        """A number, or a numeric string (pattern ``_DECIMAL_PATTERN``) that keeps every digit."""
        json_schema = super().decimal_schema(schema)
        for branch in json_schema.get("anyOf", ()):
            if branch.get("type") == "string" and "pattern" not in branch:
                branch["pattern"] = _DECIMAL_PATTERN
        rules = []
        if isinstance(schema.get("max_digits"), int):
            rules.append(f"max digits: {schema['max_digits']}")
        if isinstance(schema.get("decimal_places"), int):
            rules.append(f"max decimal places: {schema['decimal_places']}")
        return _with_rules(json_schema, rules)

    def url_schema(self, schema: core_schema.UrlSchema) -> JsonSchemaValue:
        schemes = schema.get("allowed_schemes")
        rules = [f"scheme: {' or '.join(schemes)}"] if schemes else []
        if schema.get("host_required"):
            rules.append("with a host")
        return _with_rules(super().url_schema(schema), rules)

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
        """Why keys of this core schema would not come back from JSON unchanged, or None.

        A union of string key types (``Literal["a"] | str``, a constrained ``str | str``, a
        str Enum | str) comes back: every JSON object key is text, and text is what each
        member reads.
        """
        keys = self.unwrap(keys)
        kind = keys.get("type")
        if kind == "union":
            choices = [c[0] if isinstance(c, tuple) else c for c in keys.get("choices", [])]
            if choices and all(self.string_keys(choice) for choice in choices):
                return None
        if kind == "literal":
            if all(isinstance(v, str) for v in keys.get("expected", [])):
                return None
            return (
                "its keys are a Literal of non-string values, which pydantic does not match "
                "against JSON object keys (always text)"
            )
        if kind == "enum":
            members = keys.get("members", [])
            if keys.get("sub_type") in ("str", "int", "float") or all(
                isinstance(getattr(m, "value", None), str) for m in members
            ):
                return None
            return (
                "its keys are an Enum of mixed values, which pydantic does not match against "
                "JSON object keys (always text)"
            )
        if kind in _ROUND_TRIP_KEYS:
            return None
        if kind == "any":
            return None  # JSON object keys: text
        return f"its keys ({kind}) do not come back unchanged from JSON object keys (always text)"

    def unwrap(self, keys: Any) -> Any:
        """The core schema under references, validators and defaults."""
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
        return keys

    def string_keys(self, keys: Any) -> bool:
        """Whether a key type reads JSON text as text: str, a Literal or Enum of strings."""
        keys = self.unwrap(keys) if isinstance(keys, dict) else {}
        kind = keys.get("type")
        if kind == "str":
            return True
        if kind == "literal":
            return all(isinstance(v, str) for v in keys.get("expected", []))
        if kind == "enum":
            members = keys.get("members", [])
            return keys.get("sub_type") == "str" or all(
                isinstance(getattr(m, "value", None), str) for m in members
            )
        return False


_NOW = {"past": ("in the past",), "future": ("in the future",)}


def _with_rules(json_schema: JsonSchemaValue, rules: Sequence[str]) -> JsonSchemaValue:
    if rules:
        json_schema[_RULES] = list(rules)
    return json_schema


# ---------------------------------------------------------------------------------------------
# constraint keywords and text


def _bound(value: Any) -> int | float | None:
    """A finite JSON number, or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if math.isfinite(value) else None


def _count(value: Any) -> int | None:
    number = _bound(value)
    if number is None or number < 0 or not float(number).is_integer():
        return None
    return int(number)


def _kept(src: dict[str, Any], kind: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """(the constraint keywords Kimi's dialect carries for ``kind``, the source keywords used).

    walle ultra accepts minimum/maximum on numbers (integral on integers: an integer's exclusive
    bound becomes the next inclusive one), minLength/maxLength/pattern on strings and
    minItems/maxItems on arrays. A pair whose low end passes its high end is left to the words.
    """
    kept: dict[str, Any] = {}
    used: list[str] = []
    if kind == "string":
        for keyword in ("minLength", "maxLength"):
            if _count(src.get(keyword)) is not None:
                kept[keyword] = _count(src[keyword])
        if isinstance(src.get("pattern"), str):
            kept["pattern"] = src["pattern"]
        pair = ("minLength", "maxLength")
    elif kind == "array":
        for keyword in ("minItems", "maxItems"):
            if _count(src.get(keyword)) is not None:
                kept[keyword] = _count(src[keyword])
        pair = ("minItems", "maxItems")
    elif kind in ("integer", "number"):
        low, high = _bound(src.get("minimum")), _bound(src.get("maximum"))
        if kind == "integer":
            low = None if low is None else math.ceil(low)
            high = None if high is None else math.floor(high)
            above, below = _bound(src.get("exclusiveMinimum")), _bound(src.get("exclusiveMaximum"))
            if above is not None:
                low = max(low, math.floor(above) + 1) if low is not None else math.floor(above) + 1
                used.append("exclusiveMinimum")
            if below is not None:
                high = min(high, math.ceil(below) - 1) if high is not None else math.ceil(below) - 1
                used.append("exclusiveMaximum")
        if low is not None:
            kept["minimum"] = low
        if high is not None:
            kept["maximum"] = high
        pair = ("minimum", "maximum")
    else:
        return {}, ()
    low_key, high_key = pair
    if low_key in kept and high_key in kept and kept[low_key] > kept[high_key]:
        return {}, ()
    if "pattern" in kept:
        used.append("pattern")
    return kept, (*kept, *used)


def _join_text(first: str, second: str) -> str:
    if first and second:
        return f"{_sentence(first)} {second}"
    return first or second


def _merge_text(first: str, second: str) -> str:
    """Two descriptions as one, their ``Constraints:`` sentences joined into one sentence."""
    marker = "Constraints: "
    if marker not in first or marker not in second:
        return _join_text(first, second)
    prose: list[str] = []
    items: list[str] = []
    for text in (first, second):
        head, _, tail = text.partition(marker)
        if head.strip():
            prose.append(head.strip())
        items.append(tail.strip().removesuffix("."))
    joined = " ".join(_sentence(part) for part in prose)
    return _join_text(joined, marker + "; ".join(items) + ".")


def _sentence(text: str) -> str:
    return text if text.endswith((".", "!", "?")) else f"{text}."


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
    if isinstance(pattern, str) and "pattern" not in skip:
        items.append(f"pattern: {pattern}")
    for keyword, label in _COUNTS:
        number = _number(src.get(keyword)) if keyword not in skip else None
        if number is not None:
            items.append(f"{label}: {number}")
    if src.get("uniqueItems") is True:
        items.append("unique items")
    items.extend(src.get(_RULES) or ())
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
