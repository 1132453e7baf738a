"""A schema node's constraints: its keywords and the compiler's ``Constraints:`` sentence.

The schema compiler states in words what Kimi's dialect has no keyword for, in a sentence
appended to the description: ``Constraints: <item>; <item>.`` with items ``format: date|
date-time|time|email|uri|uuid``, ``minimum: N``, ``maximum: N``, ``exclusive minimum: N``,
``exclusive maximum: N``, ``multiple of: N``, ``min length: N``, ``max length: N``,
``min items: N``, ``max items: N``, ``min keys: N``, ``max keys: N``, ``unique items``,
``exactly N items``, and for dict keys ``keys: one of ...``, ``keys: integer values written as
text``, ``keys: format ...``, ``keys match pattern: ...``, ``min/max key length: N``. The
simulated model reads that sentence as it reads the keywords; the wording is a contract with
``kimi_extract.schema.source``.

``node_constraints`` gives both, merged by ``tighten``: where the words and a keyword both bound
a value, the tighter bound wins, so an answer meets both.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from typing import Any

_NUMBER = r"(-?\d+(?:\.\d+)?)"
_BOUND = re.compile(
    rf"^(minimum|maximum|exclusive minimum|exclusive maximum|multiple of|min length|max length|"
    rf"min items|max items|min keys|max keys):\s*{_NUMBER}"
)
_EXACTLY = re.compile(r"^exactly (\d+) items?")
_FORMAT = re.compile(r"^format:\s*([\w-]+)")
_KEY_TYPE = re.compile(r"^keys: (integer|number|boolean) values written as text")
_KEY_LENGTH = re.compile(r"^(min|max) key length:\s*(\d+)")
#: JSON Schema keywords and the constraint names they share with the words.
SCHEMA_KEYWORDS = {
    "minimum": "minimum",
    "maximum": "maximum",
    "exclusiveMinimum": "exclusive minimum",
    "exclusiveMaximum": "exclusive maximum",
    "multipleOf": "multiple of",
    "minLength": "min length",
    "maxLength": "max length",
    "minItems": "min items",
    "maxItems": "max items",
    "minProperties": "min keys",
    "maxProperties": "max keys",
}
_LOWER = frozenset(
    {"minimum", "exclusive minimum", "min length", "min items", "min keys", "keys min length"}
)
_UPPER = frozenset(
    {"maximum", "exclusive maximum", "max length", "max items", "max keys", "keys max length"}
)


def parse_constraints(description: Any) -> dict[str, Any]:
    """The items of a ``Constraints: ...`` sentence in a description, as a dict."""
    if not isinstance(description, str) or "Constraints:" not in description:
        return {}
    return dict(_parse_constraints(description))


@lru_cache(maxsize=4096)
def _parse_constraints(description: str) -> tuple[tuple[str, Any], ...]:
    start = description.find("Constraints:")
    found: dict[str, Any] = {}
    for raw in description[start + len("Constraints:") :].split(";"):
        item = raw.strip().rstrip(".").strip()
        if match := _BOUND.match(item):
            number = float(match.group(2))
            if math.isfinite(number):
                found[match.group(1)] = int(number) if number.is_integer() else number
        elif match := _EXACTLY.match(item):
            found["min items"] = found["max items"] = int(match.group(1))
        elif match := _FORMAT.match(item):
            found["format"] = match.group(1)
        elif item.startswith("unique items"):
            found["unique items"] = True
        elif item.startswith("keys: one of "):  # the compiler's words for dict keys
            found["keys one of"] = tuple(v.strip() for v in item[13:].split(",") if v.strip())
        elif match := _KEY_TYPE.match(item):
            found["keys type"] = match.group(1)
        elif item.startswith("keys: format "):
            found["keys format"] = item[13:].strip()
        elif item.startswith("keys match pattern: "):
            found["keys pattern"] = item[20:].strip()
        elif match := _KEY_LENGTH.match(item):
            found[f"keys {match.group(1)} length"] = int(match.group(2))
        elif item.startswith("without a UTC offset"):  # the compiler's NaiveDatetime words
            found["naive"] = True
        elif item in ("in the past", "in the future"):  # PastDate / FutureDate and datetimes
            found[item.removeprefix("in the ")] = True
    return tuple(found.items())


def _finite(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an integer too large for a float
        return False


def keyword_constraints(node: dict[str, Any]) -> dict[str, Any]:
    """The constraints a node states as keywords, under the words' names."""
    found: dict[str, Any] = {}
    for keyword, name in SCHEMA_KEYWORDS.items():
        value = node.get(keyword)
        if _finite(value):
            found[name] = value
    if isinstance(node.get("format"), str):
        found["format"] = node["format"]
    if isinstance(node.get("pattern"), str):
        found["pattern"] = node["pattern"]
    if node.get("uniqueItems") is True:
        found["unique items"] = True
    return found


def constraints_of(node: dict[str, Any]) -> dict[str, Any]:
    """Constraints of a schema node: its description's sentence, then keywords it lacks."""
    found = parse_constraints(node.get("description"))
    for name, value in keyword_constraints(node).items():
        found.setdefault(name, value)
    return found


def node_constraints(node: dict[str, Any]) -> dict[str, Any]:
    """Constraints of a schema node, words and keywords merged by ``tighten``."""
    return tighten(parse_constraints(node.get("description")), keyword_constraints(node))


def tighten(found: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``found`` and ``extra`` merged: of two lower bounds the higher, of two upper bounds the
    lower; other names take ``extra``'s value."""
    out = dict(found)
    for name, value in extra.items():
        old = out.get(name)
        if _finite(old) and _finite(value):
            if name in _LOWER:
                value = max(old, value)
            elif name in _UPPER:
                value = min(old, value)
        out[name] = value
    return out


def canonical(found: dict[str, Any]) -> str:
    """A memo key for a constraints dict."""
    return json.dumps(found, sort_keys=True, default=str)
