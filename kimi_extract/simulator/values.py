"""JSON values valid against a schema, drawn from a seeded ``random.Random``.

A schema is compiled once into a tree of small generator functions (memoized by its JSON text, as
every row of a run shares one schema); each request then only draws. Rules:

- objects fill every property; arrays get 1-3 items; enums pick one value; ``anyOf`` picks a
  non-null branch (null one time in eight when a null branch exists); ``$ref`` resolves in
  ``$defs`` / ``definitions`` (``#`` is the root), and past ``MAX_DEPTH`` nested refs the value
  ends recursion with null / [] / the smallest value; integers 0..99; numbers with 2 decimals;
  strings are 1-3 consecutive words of the user text (spans of it, perhaps perturbed, when
  ``words`` is an ``extractive.Source``).
- The constraint sentence the schema compiler writes into descriptions is honoured:
  ``Constraints: <item>; <item>.`` with items ``format: date|date-time|time|email|uri|uuid``,
  ``minimum: N``, ``maximum: N``, ``exclusive minimum: N``, ``exclusive maximum: N``,
  ``min length: N``, ``max length: N``, ``min items: N``, ``max items: N``, ``unique items``,
  ``exactly N items``. A constraint on an ``anyOf`` parent or a ``$ref`` site applies to the
  branch / target.
- An object with only ``additionalProperties`` (a ``dict[str, X]``) gets 1-3 entries keyed by
  words of the user text; arrays of ``{"key": ..., "value": ...}`` objects get distinct keys.
- Schema keywords are read like their constraint-text twins: ``minimum``/``maxLength``/
  ``format``/``uniqueItems``...; ``const``, ``oneOf``/``allOf`` and type lists are tolerated; a
  string with a ``pattern`` is written from the regex (``_pattern_string``).
"""

from __future__ import annotations

import importlib
import json
import math
import random
import re
import string
import uuid
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from .extractive import Source

MAX_DEPTH = 4
#: Generation caps, so a schema asking for absurd sizes cannot stall the simulator: arrays get at
#: most this many items and strings at most this many characters, whatever minItems/minLength say
#: (the answer is then cut by the output budget, as a real model's would be).
MAX_ITEMS = 1_000
MAX_STRING = 100_000
#: (rng, words, depth) -> value
Gen = Callable[[random.Random, list[str], int], Any]

_NUMBER = r"(-?\d+(?:\.\d+)?)"
_BOUND = re.compile(
    rf"^(minimum|maximum|exclusive minimum|exclusive maximum|min length|max length|min items|"
    rf"max items):\s*{_NUMBER}"
)
_EXACTLY = re.compile(r"^exactly (\d+) items?")
_FORMAT = re.compile(r"^format:\s*([\w-]+)")
#: The compiler's words for dict keys, read into ``keys ...`` constraints.
_KEY_TYPE = re.compile(r"^keys: (integer|number|boolean) values written as text")
_KEY_LENGTH = re.compile(r"^(min|max) key length:\s*(\d+)")
_SCHEMA_KEYWORDS = {
    "minimum": "minimum",
    "maximum": "maximum",
    "exclusiveMinimum": "exclusive minimum",
    "exclusiveMaximum": "exclusive maximum",
    "minLength": "min length",
    "maxLength": "max length",
    "minItems": "min items",
    "maxItems": "max items",
}


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
            found["min items"] = found["max items"] = min(int(match.group(1)), MAX_ITEMS)
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


def constraints_of(node: dict[str, Any]) -> dict[str, Any]:
    """Constraints of a schema node: its description's sentence, then real keywords."""
    found = parse_constraints(node.get("description"))
    for keyword, name in _SCHEMA_KEYWORDS.items():
        value = node.get(keyword)
        if isinstance(value, int | float) and not isinstance(value, bool) and _finite(value):
            found.setdefault(name, value)
    if isinstance(node.get("format"), str):
        found.setdefault("format", node["format"])
    if isinstance(node.get("pattern"), str):
        found.setdefault("pattern", node["pattern"])
    if node.get("uniqueItems") is True:
        found.setdefault("unique items", True)
    return found


_COMPILED: dict[str, Gen] = {}


def generator(schema: Any, key: str | None = None) -> Gen:
    """The compiled generator of ``schema``; ``key`` (its JSON text) memoizes it."""
    if key is None:
        return _Compiler(schema).compile(schema, {})
    gen = _COMPILED.get(key)
    if gen is None:
        if len(_COMPILED) >= 512:
            _COMPILED.clear()
        gen = _COMPILED[key] = _Compiler(schema).compile(schema, {})
    return gen


def json_value(rng: random.Random, schema: Any, words: list[str], key: str | None = None) -> Any:
    """A value valid against ``schema`` with strings from ``words``; ``key`` memoizes."""
    return generator(schema, key)(rng, words, 0)


class _Compiler:
    def __init__(self, root: Any) -> None:
        self.defs = _definitions(root)
        self.refs: dict[tuple[str, str], Gen] = {}

    def compile(self, node: Any, inherited: dict[str, Any]) -> Gen:
        if not isinstance(node, dict):
            return _string({})
        found = {**inherited, **constraints_of(node)}
        ref = node.get("$ref")
        if isinstance(ref, str):
            return self.ref(_ref_name(ref), found)
        if "const" in node:
            const = node["const"]
            return lambda rng, words, depth: const
        if isinstance(node.get("enum"), list) and node["enum"]:
            values = list(node["enum"])
            return lambda rng, words, depth: rng.choice(values)
        branches = node.get("anyOf") or node.get("oneOf")
        if isinstance(branches, list) and branches:
            return self.any_of(branches, found)
        if isinstance(node.get("allOf"), list) and node["allOf"]:
            merged = {k: v for k, v in node.items() if k != "allOf"}
            for part in node["allOf"]:
                if isinstance(part, dict):
                    merged.update(part)
            return self.compile(merged, found)
        kind = node.get("type")
        if isinstance(kind, list):
            kind = ([k for k in kind if k != "null"] or ["null"])[0]
        if kind is None:
            kind = "object" if "properties" in node else "array" if "items" in node else "string"
        if kind == "object":
            props = [
                (name, self.compile(sub, {}))
                for name, sub in (node.get("properties") or {}).items()
            ]
            extra = node.get("additionalProperties")
            if not props and isinstance(extra, dict):
                return self.mapping(node, extra, found)
            return lambda rng, words, depth: {name: gen(rng, words, depth) for name, gen in props}
        if kind == "array":
            return self.array(node, found)
        if kind == "integer":
            low, high = _bounds(found, 0, 99, integer=True)
            return lambda rng, words, depth: rng.randint(int(low), int(high))
        if kind == "number":
            low, high = _bounds(found, 0.0, 100.0, integer=False)
            return lambda rng, words, depth: min(max(round(rng.uniform(low, high), 2), low), high)
        if kind == "boolean":
            return lambda rng, words, depth: rng.random() < 0.5
        if kind == "null":
            return lambda rng, words, depth: None
        return _string(found)

    def ref(self, name: str, found: dict[str, Any]) -> Gen:
        key = (name, json.dumps(found, sort_keys=True))
        target = self.defs.get(name)

        def gen(rng: random.Random, words: list[str], depth: int) -> Any:
            if depth >= MAX_DEPTH:
                return _smallest(target, self.defs, set())
            compiled = self.refs.get(key)
            if compiled is None:  # compiled on first use, so recursive refs terminate
                compiled = self.refs[key] = self.compile(target, found)
            return compiled(rng, words, depth + 1)

        return gen

    def any_of(self, branches: list[Any], found: dict[str, Any]) -> Gen:
        nullable = any(isinstance(b, dict) and b.get("type") == "null" for b in branches)
        others = [
            self.compile(b, found)
            for b in branches
            if not (isinstance(b, dict) and b.get("type") == "null")
        ]

        def gen(rng: random.Random, words: list[str], depth: int) -> Any:
            if nullable and (not others or depth >= MAX_DEPTH or rng.random() < 0.125):
                return None
            return rng.choice(others)(rng, words, depth)

        return gen

    def mapping(self, node: dict[str, Any], values: dict[str, Any], found: dict[str, Any]) -> Gen:
        """An object with only ``additionalProperties`` (a ``dict[K, V]``): 1-3 entries (within
        minProperties / maxProperties) with distinct keys that follow the compiler's key words
        (``keys: one of ...``, ``keys: integer values written as text``, ``keys: format ...``,
        ``keys match pattern: ...``, ``min/max key length``), else words of the user text."""
        value_gen = self.compile(values, {})
        least = node.get("minProperties")
        most = node.get("maxProperties")
        low = least if isinstance(least, int) and not isinstance(least, bool) else 0
        high = most if isinstance(most, int) and not isinstance(most, bool) else max(low, 3)
        low, high = max(0, min(low, MAX_ITEMS)), max(0, min(high, MAX_ITEMS))
        smallest, largest = max(low, min(1, high)), max(low, min(3, high))
        choices: tuple[str, ...] | None = found.get("keys one of")
        key_gen = _key_generator(found)

        def gen(rng: random.Random, words: list[str], depth: int) -> dict[str, Any]:
            count = 0 if depth >= MAX_DEPTH and low == 0 else rng.randint(smallest, largest)
            if choices is not None:
                keys = rng.sample(choices, min(count, len(choices)))
                return {key: value_gen(rng, words, depth + 1) for key in keys}
            out: dict[str, Any] = {}
            for _ in range(count * 8):
                if len(out) >= count:
                    break
                key = key_gen(rng, words, depth)
                if key in out and key_gen is _word_key:  # plain keys: make a repeat distinct
                    key = f"{key} {len(out) + 1}"
                if key not in out:
                    out[key] = value_gen(rng, words, depth + 1)
            return out

        return gen

    def array(self, node: dict[str, Any], found: dict[str, Any]) -> Gen:
        low = max(0, min(int(found.get("min items", 0)), MAX_ITEMS))
        high = max(0, min(int(found.get("max items", max(low, 3))), MAX_ITEMS))
        smallest, largest = max(low, min(1, high)), max(low, min(3, high))
        items = node.get("items", {})
        item_gen = self.compile(items, {})
        keyed = _is_key_value(items, self.defs)
        unique = bool(found.get("unique items")) or keyed

        def gen(rng: random.Random, words: list[str], depth: int) -> list[Any]:
            count = rng.randint(smallest, largest)
            if depth >= MAX_DEPTH and low == 0:
                count = 0
            out: list[Any] = []
            seen: set[str] = set()
            attempts = 0
            while len(out) < count and attempts < count * 8:
                attempts += 1
                item = item_gen(rng, words, depth)
                if unique:
                    identity = _identity(item, keyed)
                    if identity in seen:
                        item = _distinct(item, len(out))
                        identity = _identity(item, keyed)
                        if identity in seen:
                            continue
                    seen.add(identity)
                out.append(item)
            return out

        return gen


def _string(found: dict[str, Any]) -> Gen:
    plain = _plain_string(found)
    pattern = found.get("pattern")
    if isinstance(pattern, str):
        return _pattern_string(pattern, found, plain) or plain
    return plain


def _plain_string(found: dict[str, Any]) -> Gen:
    fmt = found.get("format")
    low = max(0, min(int(found.get("min length", 0)), MAX_STRING))
    high = found.get("max length")
    high = None if high is None else max(0, int(high))

    century = "19" if found.get("past") else "20"
    years = (90, 99) if found.get("past") or found.get("future") else (10, 29)
    zone = "" if found.get("naive") else "Z"

    def text_of(rng: random.Random, words: list[str]) -> str:
        day = f"{century}{rng.randint(*years)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        if fmt == "date":
            return day
        if fmt == "date-time":
            return (
                f"{day}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
                f"{rng.randint(0, 59):02d}{zone}"
            )
        if fmt == "time":
            return f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
        if fmt == "email":
            return f"{_slug(rng.choice(words))}@example.com"
        if fmt in ("uri", "url"):
            return f"https://example.com/{_slug(rng.choice(words))}"
        if fmt == "uuid":
            return str(uuid.UUID(int=rng.getrandbits(128), version=4))
        if isinstance(words, Source) and (drawn := words.draw(rng)) is not None:
            return drawn.value
        start = rng.randrange(len(words))
        return " ".join(words[start : start + rng.randint(1, 3)])

    def gen(rng: random.Random, words: list[str], depth: int) -> str:
        text = text_of(rng, words)
        if len(text) < low:
            pieces = [text] if text else []
            size = len(text)
            while size < low:
                word = rng.choice(words)
                pieces.append(word)
                size += len(word) + 1
            text = " ".join(pieces)
        if high is not None and len(text) > high:
            text = text[:high]
        return text

    return gen


# -- strings for a ``pattern`` -------------------------------------------------------------------

_sre_parse: Any = importlib.import_module("re._parser")  # the parser ``re`` itself uses
_PATTERN_TRIES = 16
_CATEGORY_CHARS = {
    "CATEGORY_DIGIT": string.digits,
    "CATEGORY_NOT_DIGIT": string.ascii_letters,
    "CATEGORY_SPACE": " ",
    "CATEGORY_NOT_SPACE": string.ascii_letters + string.digits,
    "CATEGORY_WORD": string.ascii_letters + string.digits + "_",
    "CATEGORY_NOT_WORD": "-. ",
}
_ANY_CHARS = string.ascii_letters + string.digits


class _Unsupported(Exception):
    """A regex construct the pattern generator does not write (backreferences, ...)."""


def _pattern_string(pattern: str, found: dict[str, Any], plain: Gen) -> Gen | None:
    """A generator of strings that ``re.search`` finds ``pattern`` in (and that respect the
    length bounds when the pattern allows), or None for a pattern Python cannot parse.

    Python's regex parser reads the pattern; literals, classes, ``.``, ``\\d\\w\\s``, groups,
    alternation and repeats (at most 3 past their minimum) are written; anchors and lookarounds
    are left to the final check, which retries a few draws; then the last match that missed the
    length bounds is used, else a ``plain`` string.
    """
    try:
        compiled = re.compile(pattern)
        parsed = list(_sre_parse.parse(pattern))
    except (re.error, RecursionError, OverflowError, ValueError):
        return None
    low = int(found.get("min length", 0))
    high = found.get("max length")
    # unbounded repeats may run past their minimum far enough to reach a minLength
    slack = max(3, min(low, MAX_STRING))

    def gen(rng: random.Random, words: list[str], depth: int) -> str:
        matched: str | None = None
        for _ in range(_PATTERN_TRIES):
            out: list[str] = []
            try:
                _write(parsed, rng, out, 0, slack)
            except (_Unsupported, RecursionError):
                break
            text = "".join(out)
            if compiled.search(text):
                if len(text) >= low and (high is None or len(text) <= high):
                    return text
                matched = text
        return matched if matched is not None else plain(rng, words, depth)

    return gen


def _write(items: list[Any], rng: random.Random, out: list[str], depth: int, slack: int) -> None:
    if depth > 50 or len(out) > MAX_STRING:
        raise _Unsupported("too deep or too long")
    for op, argument in items:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(argument))
        elif name == "NOT_LITERAL":
            out.append(next(c for c in _ANY_CHARS if ord(c) != argument))
        elif name == "ANY":
            out.append(rng.choice(_ANY_CHARS))
        elif name == "IN":
            out.append(_class_char(argument, rng))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            least, most, inner = argument
            most = least + slack if most == _sre_parse.MAXREPEAT else min(most, least + slack)
            for _ in range(rng.randint(least, max(least, most))):
                _write(list(inner), rng, out, depth + 1, slack)
        elif name == "SUBPATTERN":
            _write(list(argument[-1]), rng, out, depth + 1, slack)
        elif name == "ATOMIC_GROUP":
            _write(list(argument), rng, out, depth + 1, slack)
        elif name == "BRANCH":
            _write(list(rng.choice(argument[1])), rng, out, depth + 1, slack)
        elif name == "CATEGORY":
            out.append(rng.choice(_CATEGORY_CHARS.get(str(argument), "a")))
        elif name not in ("AT", "ASSERT", "ASSERT_NOT"):
            raise _Unsupported(name)


def _class_char(members: list[Any], rng: random.Random) -> str:
    """A character of a ``[...]`` class (for a negated class, the first candidate outside it)."""
    negated = bool(members) and str(members[0][0]) == "NEGATE"
    if negated:
        for candidate in _ANY_CHARS + "-_ .":
            if not _in_class(candidate, members[1:]):
                return candidate
        raise _Unsupported("negated class")
    op, argument = rng.choice(members)
    name = str(op)
    if name == "LITERAL":
        return chr(argument)
    if name == "RANGE":
        return chr(rng.randint(argument[0], argument[1]))
    if name == "CATEGORY":
        return rng.choice(_CATEGORY_CHARS.get(str(argument), "a"))
    raise _Unsupported(name)


def _in_class(char: str, members: list[Any]) -> bool:
    for op, argument in members:
        name = str(op)
        if name == "LITERAL" and ord(char) == argument:
            return True
        if name == "RANGE" and argument[0] <= ord(char) <= argument[1]:
            return True
        if name == "CATEGORY" and char in _CATEGORY_CHARS.get(str(argument), ""):
            return True
    return False


def _smallest(node: Any, defs: dict[str, Any], visiting: set[str]) -> Any:
    """A value for ``node`` that recurses no further (used past ``MAX_DEPTH``)."""
    if not isinstance(node, dict):
        return None
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = _ref_name(ref)
        if name in visiting:
            return None
        return _smallest(defs.get(name), defs, visiting | {name})
    branches = node.get("anyOf") or []
    if any(isinstance(b, dict) and b.get("type") == "null" for b in branches):
        return None
    if branches:
        return _smallest(branches[0], defs, visiting)
    if "enum" in node and node["enum"]:
        return node["enum"][0]
    kind = node.get("type")
    if isinstance(kind, list):
        kind = ([k for k in kind if k != "null"] or ["null"])[0]
    found = constraints_of(node)
    if kind == "array":
        count = int(found.get("min items", 0))
        return [_smallest(node.get("items"), defs, visiting) for _ in range(count)]
    if kind == "object":
        props = node.get("properties") or {}
        return {name: _smallest(sub, defs, visiting) for name, sub in props.items()}
    if kind in ("integer", "number"):
        return _bounds(found, 0, 99, integer=kind == "integer")[0]
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return _string(found)(random.Random(0), ["none"], MAX_DEPTH)


def _bounds(
    found: dict[str, Any], low: float, high: float, *, integer: bool
) -> tuple[float, float]:
    lo = found.get("minimum")
    hi = found.get("maximum")
    if integer:
        lo = None if lo is None else math.ceil(lo)
        hi = None if hi is None else math.floor(hi)
    if "exclusive minimum" in found:
        bound = found["exclusive minimum"]
        lo = math.floor(bound) + 1 if integer else bound + 0.01
    if "exclusive maximum" in found:
        bound = found["exclusive maximum"]
        hi = math.ceil(bound) - 1 if integer else bound - 0.01
    if lo is not None and hi is not None:
        if hi - lo > 1e9:  # a huge (or overflowing) span: draw near the lower bound
            hi = lo + 99
        return lo, max(lo, hi)
    if lo is not None:
        return lo, max(lo, min(high, lo + 99))
    if hi is not None:
        return min(hi, max(low, hi - 99)), hi
    return low, high


def _definitions(root: Any) -> dict[str, Any]:
    """Named schemas a ``$ref`` can reach: ``definitions``, ``$defs``, and the root as ``#``."""
    if not isinstance(root, dict):
        return {}
    found: dict[str, Any] = {}
    for key in ("definitions", "$defs"):
        if isinstance(root.get(key), dict):
            found.update(root[key])
    found["#"] = root
    return found


def _ref_name(ref: str) -> str:
    """The name a ``$ref`` points at: ``#`` for the root, else its last path segment."""
    return "#" if ref in ("#", "") else ref.rsplit("/", 1)[-1]


def _word_key(rng: random.Random, words: list[str], depth: int) -> str:
    return rng.choice(words)


def _key_generator(found: dict[str, Any]) -> Gen:
    """Keys for a dict under the compiler's key words (see ``_Compiler.mapping``)."""
    kind = found.get("keys type")
    if kind == "integer":
        return lambda rng, words, depth: str(rng.randint(0, 99))
    if kind == "number":
        return lambda rng, words, depth: f"{rng.uniform(0, 100):.2f}"
    if kind == "boolean":
        return lambda rng, words, depth: rng.choice(("true", "false"))
    rules = {
        name: found[key]
        for name, key in (
            ("format", "keys format"),
            ("pattern", "keys pattern"),
            ("min length", "keys min length"),
            ("max length", "keys max length"),
        )
        if key in found
    }
    return _string(rules) if rules else _word_key


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an integer too large for a float
        return False


def schema_of_example(value: Any) -> dict[str, Any]:
    """A schema for values shaped like ``value`` (a JSON example in a prompt).

    Objects keep their keys; arrays get 1-3 items shaped like the example's items (one ``anyOf``
    branch per distinct item shape); scalars keep their JSON type.
    """
    if isinstance(value, dict):
        return {
            "type": "object",
            "properties": {key: schema_of_example(item) for key, item in value.items()},
        }
    if isinstance(value, list):
        shapes: dict[str, dict[str, Any]] = {}
        for item in value:
            shape = schema_of_example(item)
            shapes.setdefault(json.dumps(shape, sort_keys=True), shape)
        branches = list(shapes.values()) or [{"type": "string"}]
        items = branches[0] if len(branches) == 1 else {"anyOf": branches}
        return {"type": "array", "items": items, "minItems": 1}
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if value is None:
        return {"type": "null"}
    return {"type": "string"}


def _slug(word: str) -> str:
    slug = re.sub(r"[^a-z0-9]", "", word.lower())
    return slug or "user"


def _is_key_value(items: Any, defs: dict[str, Any]) -> bool:
    if isinstance(items, dict) and isinstance(items.get("$ref"), str):
        items = defs.get(_ref_name(items["$ref"]))
    return isinstance(items, dict) and set(items.get("properties") or ()) == {"key", "value"}


def _identity(item: Any, keyed: bool) -> str:
    """What must differ between items of a unique array (the key of a key/value pair)."""
    if keyed and isinstance(item, dict):
        return json.dumps(item.get("key"))
    return json.dumps(item, sort_keys=True)


def _distinct(item: Any, index: int) -> Any:
    """Make a repeated string (or key/value key) different; other items are drawn again."""
    if isinstance(item, str):
        return f"{item} {index + 1}"
    if isinstance(item, dict) and isinstance(item.get("key"), str):
        return {**item, "key": f"{item['key']} {index + 1}"}
    return item
