"""Deterministic answers: JSON values from a schema, plain text, and reasoning text.

Everything is drawn from a ``random.Random`` seeded with a hash of the request (see
``request_seed``), so the same request always gets the same answer. Values follow the schema:

- objects fill every property; arrays get 1-3 items; enums pick one value; ``anyOf`` picks a
  non-null branch (null one time in eight when a null branch exists); ``$ref`` resolves in
  ``$defs``, and past ``MAX_DEPTH`` nested refs the answer ends recursion with null / [] / the
  smallest value; integers 0..99; numbers with 2 decimals; strings are words of the user text.
- The constraint sentence the schema compiler writes into descriptions is honoured:
  ``Constraints: <item>; <item>.`` with items ``format: date|date-time|time|email|uri|uuid``,
  ``minimum: N``, ``maximum: N``, ``exclusive minimum: N``, ``exclusive maximum: N``,
  ``min length: N``, ``max length: N``, ``min items: N``, ``max items: N``, ``unique items``,
  ``exactly N items``. A constraint on an ``anyOf`` parent or a ``$ref`` site applies to the
  branch / target.
- Arrays of ``{"key": ..., "value": ...}`` objects (how dicts are compiled) get distinct keys.
- Non-MFJS keywords (tool parameters) are tolerated: ``const``, ``oneOf``/``allOf``, ``default``,
  type lists, ``minimum``/``maxLength``... are read like their constraint-text twins.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import uuid
from bisect import bisect_left
from functools import lru_cache
from typing import Any

from .. import tokens
from ..models import EFFORT_ALIASES
from .prompt import count_tokens

MAX_DEPTH = 4
_WORD = re.compile(r"\w+")
_FALLBACK_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
_NUMBER = r"(-?\d+(?:\.\d+)?)"
_BOUND = re.compile(
    rf"^(minimum|maximum|exclusive minimum|exclusive maximum|min length|max length|min items|"
    rf"max items):\s*{_NUMBER}"
)
_EXACTLY = re.compile(r"^exactly (\d+) items?")
_FORMAT = re.compile(r"^format:\s*([\w-]+)")
_SCHEMA_KEYWORDS = {
    "minimum": "minimum", "maximum": "maximum", "exclusiveMinimum": "exclusive minimum",
    "exclusiveMaximum": "exclusive maximum", "minLength": "min length", "maxLength": "max length",
    "minItems": "min items", "maxItems": "max items",
}
_CONSTRAINT_KEYWORDS = frozenset({*_SCHEMA_KEYWORDS, "format", "uniqueItems"})


def request_seed(body: dict[str, Any], schema_text: str | None = None) -> int:
    """A seed from what decides the model's answer: model, effort (after its aliases), response
    format, tools, tool_choice and the messages. ``schema_text``: the schema's compact JSON, if
    the caller has it.

    Streaming options, output budgets, cache options and temperature/top_p (fixed by the model;
    the K3.1 series ignore them) are left out, so a streamed answer equals the non-streamed one
    and a ``length``-cut answer is a prefix of the uncut one.
    """
    parts = [str(body.get("model")), EFFORT_ALIASES.get(body.get("reasoning_effort") or "max", "")]
    response_format = body.get("response_format")
    if isinstance(response_format, dict):
        json_schema = response_format.get("json_schema")
        if schema_text is not None and isinstance(json_schema, dict):
            parts += [str(response_format.get("type")), str(json_schema.get("name")),
                      str(json_schema.get("strict")), schema_text]
        else:
            parts.append(_canonical(response_format))
    for key in ("tools", "tool_choice"):
        if key in body:
            parts.append(key + _canonical(body[key]))
    for message in body.get("messages") or ():
        content = message.get("content")
        if len(message) == 2 and isinstance(content, str):  # the common {role, content}
            parts += [str(message.get("role")), content]
        else:
            parts.append(_canonical(message))
    text = "\x1f".join(parts)
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def words_of(text: str) -> list[str]:
    """Words of the user text that answers are built from (a fixed list when there are none)."""
    words = _WORD.findall(text)[:400]
    return words or list(_FALLBACK_WORDS)


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
            found[match.group(1)] = int(number) if number.is_integer() else number
        elif match := _EXACTLY.match(item):
            found["min items"] = found["max items"] = int(match.group(1))
        elif match := _FORMAT.match(item):
            found["format"] = match.group(1)
        elif item.startswith("unique items"):
            found["unique items"] = True
    return tuple(found.items())


def _constraints(node: dict[str, Any]) -> dict[str, Any]:
    found = parse_constraints(node.get("description"))
    if not _CONSTRAINT_KEYWORDS.intersection(node):
        return found
    for keyword, name in _SCHEMA_KEYWORDS.items():
        value = node.get(keyword)
        if isinstance(value, int | float) and not isinstance(value, bool):
            found.setdefault(name, value)
    if isinstance(node.get("format"), str):
        found.setdefault("format", node["format"])
    if node.get("uniqueItems") is True:
        found.setdefault("unique items", True)
    return found


class ValueGenerator:
    """Builds one JSON value valid against a schema; see the module docstring."""

    def __init__(self, rng: random.Random, words: list[str], root: Any) -> None:
        self.rng = rng
        self.words = words
        self.defs = root.get("$defs", {}) if isinstance(root, dict) else {}

    def value(self, node: Any, depth: int = 0, inherited: dict[str, Any] | None = None) -> Any:
        """A value for ``node``; ``inherited`` carries constraints from an anyOf parent or $ref."""
        if not isinstance(node, dict):
            return self.string({})
        found = {**(inherited or {}), **_constraints(node)}
        ref = node.get("$ref")
        if isinstance(ref, str):
            target = self.defs.get(ref.rsplit("/", 1)[-1])
            if depth >= MAX_DEPTH:
                return self.smallest(target)
            return self.value(target, depth + 1, found)
        if "const" in node:
            return node["const"]
        if isinstance(node.get("enum"), list) and node["enum"]:
            return self.rng.choice(node["enum"])
        branches = node.get("anyOf") or node.get("oneOf")
        if isinstance(branches, list) and branches:
            return self.any_of(branches, depth, found)
        if isinstance(node.get("allOf"), list) and node["allOf"]:
            merged = {k: v for k, v in node.items() if k != "allOf"}
            for part in node["allOf"]:
                if isinstance(part, dict):
                    merged.update(part)
            return self.value(merged, depth, found)
        kind = node.get("type")
        if isinstance(kind, list):
            kinds = [k for k in kind if k != "null"] or ["null"]
            kind = kinds[0]
        if kind is None:
            kind = "object" if "properties" in node else "array" if "items" in node else "string"
        if kind == "object":
            return self.object(node, depth)
        if kind == "array":
            return self.array(node, depth, found)
        if kind == "integer":
            return self.integer(found)
        if kind == "number":
            return self.number(found)
        if kind == "boolean":
            return self.rng.random() < 0.5
        if kind == "null":
            return None
        return self.string(found)

    def any_of(self, branches: list[Any], depth: int, found: dict[str, Any]) -> Any:
        null = [b for b in branches if isinstance(b, dict) and b.get("type") == "null"]
        other = [b for b in branches if b not in null]
        if null and (not other or depth >= MAX_DEPTH or self.rng.random() < 0.125):
            return None
        return self.value(self.rng.choice(other), depth, found)

    def smallest(self, node: Any) -> Any:
        """A value for ``node`` that does not recurse further."""
        if not isinstance(node, dict):
            return None
        branches = node.get("anyOf") or []
        if any(isinstance(b, dict) and b.get("type") == "null" for b in branches):
            return None
        kind = node.get("type")
        if kind == "array":
            return []
        if kind == "object":
            props = node.get("properties") or {}
            return {name: self.smallest(sub) for name, sub in props.items()}
        return self.value({k: v for k, v in node.items() if k != "$ref"}, MAX_DEPTH)

    def object(self, node: dict[str, Any], depth: int) -> dict[str, Any]:
        props = node.get("properties") or {}
        return {name: self.value(sub, depth) for name, sub in props.items()}

    def array(self, node: dict[str, Any], depth: int, found: dict[str, Any]) -> list[Any]:
        low = int(found.get("min items", 0))
        high = int(found.get("max items", max(low, 3)))
        count = self.rng.randint(max(low, min(1, high)), max(low, min(3, high)))
        if depth >= MAX_DEPTH and low == 0:
            count = 0
        items = node.get("items", {})
        out: list[Any] = []
        attempts = 0
        keyed = _is_key_value(items, self.defs)
        unique = bool(found.get("unique items")) or keyed
        seen: set[str] = set()
        while len(out) < count and attempts < count * 8:
            attempts += 1
            item = self.value(items, depth)
            if unique:
                if _identity(item, keyed) in seen:
                    item = _distinct(item, len(out))
                    if _identity(item, keyed) in seen:
                        continue
                seen.add(_identity(item, keyed))
            out.append(item)
        return out

    def integer(self, found: dict[str, Any]) -> int:
        low, high = _bounds(found, 0, 99, integer=True)
        return self.rng.randint(int(low), int(high))

    def number(self, found: dict[str, Any]) -> float:
        low, high = _bounds(found, 0.0, 100.0, integer=False)
        value = round(self.rng.uniform(low, high), 2)
        return min(max(value, low), high)

    def string(self, found: dict[str, Any]) -> str:
        rng = self.rng
        fmt = found.get("format")
        if fmt == "date":
            text = f"20{rng.randint(10, 29)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        elif fmt == "date-time":
            text = (
                f"20{rng.randint(10, 29)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
                f"T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z"
            )
        elif fmt == "time":
            text = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
        elif fmt == "email":
            text = f"{_slug(rng.choice(self.words))}@example.com"
        elif fmt in ("uri", "url"):
            text = f"https://example.com/{_slug(rng.choice(self.words))}"
        elif fmt == "uuid":
            text = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        else:
            start = rng.randrange(len(self.words))
            text = " ".join(self.words[start : start + rng.randint(1, 3)])
        low = int(found.get("min length", 0))
        high = found.get("max length")
        while len(text) < low:
            text = f"{text} {rng.choice(self.words)}".strip()
        if high is not None and len(text) > int(high):
            text = text[: int(high)]
        return text


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
        return lo, max(lo, hi)
    if lo is not None:
        return lo, max(lo, min(high, lo + 99))
    if hi is not None:
        return min(hi, max(low, hi - 99)), hi
    return low, high


def _slug(word: str) -> str:
    slug = re.sub(r"[^a-z0-9]", "", word.lower())
    return slug or "user"


def _is_key_value(items: Any, defs: dict[str, Any]) -> bool:
    if isinstance(items, dict) and isinstance(items.get("$ref"), str):
        items = defs.get(items["$ref"].rsplit("/", 1)[-1])
    return isinstance(items, dict) and set(items.get("properties") or ()) == {"key", "value"}


def _identity(item: Any, keyed: bool) -> str:
    """What must differ between items of a unique array (the key of a key/value pair)."""
    if keyed and isinstance(item, dict):
        return json.dumps(item.get("key"))
    return json.dumps(item, sort_keys=True)


def _distinct(item: Any, index: int) -> Any:
    """Make a repeated array item different (strings, numbers, key/value objects)."""
    if isinstance(item, str):
        return f"{item} {index + 1}"
    if isinstance(item, bool):
        return not item
    if isinstance(item, int | float):
        return item + index + 1
    if isinstance(item, dict) and isinstance(item.get("key"), str):
        return {**item, "key": f"{item['key']} {index + 1}"}
    return item


def json_value(rng: random.Random, schema: Any, words: list[str]) -> Any:
    """A value valid against ``schema``, with strings built from ``words`` (see ``words_of``)."""
    return ValueGenerator(rng, words, schema).value(schema)


_FENCED_JSON = re.compile(r"```json\s*(.*?)```", re.DOTALL)


def schema_in_text(text: str) -> dict[str, Any] | None:
    """A JSON schema fenced as ```json ...``` in a (system) message, if any."""
    for match in _FENCED_JSON.finditer(text):
        try:
            schema = json.loads(match.group(1))
        except ValueError:
            continue
        if isinstance(schema, dict) and ("type" in schema or "properties" in schema):
            return schema
    return None


def text_answer(rng: random.Random, words: list[str]) -> str:
    """A short sentence about the user's text (its ``words_of``)."""
    start = rng.randrange(len(words))
    topic = " ".join(words[start : start + rng.randint(2, 6)])
    opener = rng.choice(("Here is a short answer about", "In short, the text is about",
                         "The main point concerns"))
    return f"{opener} {topic}."


# Reasoning is an opening about the request followed by a slice of a fixed filler of 1-token
# words, so its token count is known without counting it again (a max-effort answer has ~1,000
# reasoning tokens; building or counting that per request would dominate the simulator's cost).
_FILLER_WORDS = ("check", "the", "field", "value", "each", "input", "match", "type", "then",
                 "note", "rule", "text", "keep", "order", "fit", "shape", "read", "again")
_EFFORT_TOKENS = {"low": (30, 80), "high": (200, 400), "max": (600, 1200)}


def _build_filler(words: int = 3000) -> tuple[str, list[int], list[int], list[int]]:
    """The filler text; per word its start and end offsets and the tokens before it."""
    rng = random.Random(0x5EA5)
    pieces: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    tokens_before = [0]
    offset = 0
    for index in range(words):
        word = _FILLER_WORDS[rng.randrange(len(_FILLER_WORDS))]
        if index % 11 == 10:
            word += "."
        starts.append(offset)
        offset += len(word)
        ends.append(offset)
        offset += 1
        pieces.append(word)
        tokens_before.append(tokens_before[-1] + tokens.count_text_tokens(word))
    return " ".join(pieces), starts, ends, tokens_before


_FILLER, _FILLER_STARTS, _FILLER_ENDS, _FILLER_TOKENS = _build_filler()


def reasoning_text(
    rng: random.Random, effort: str, words: list[str], fields: list[str]
) -> tuple[str, int]:
    """(reasoning, its tokens): deterministic, longer with effort (low ~30-80 tokens, high
    ~200-400, max ~600-1200)."""
    low, high = _EFFORT_TOKENS.get(effort, _EFFORT_TOKENS["max"])
    target = rng.randint(low, high)
    start = rng.randrange(len(words))
    opening = "The user wrote about " + " ".join(words[start : start + 4]) + "."
    if fields:
        opening += " I need " + ", ".join(fields[:6]) + "."
    used = count_tokens(opening)
    if used >= target:
        return opening, used
    first = rng.randrange(len(_FILLER_STARTS) // 2)
    # the first filler word after ``first`` at which the filler has covered the remaining tokens
    last = bisect_left(_FILLER_TOKENS, _FILLER_TOKENS[first] + target - used) - 1
    filler = _FILLER[_FILLER_STARTS[first] : _FILLER_ENDS[last]]
    return opening + " " + filler, used + _FILLER_TOKENS[last + 1] - _FILLER_TOKENS[first]


def cut_to_tokens(text: str, budget: int) -> str:
    """The longest prefix of ``text`` costing at most ``budget`` tokens."""
    if budget <= 0:
        return ""
    if tokens.count_text_tokens(text) <= budget:
        return text
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if tokens.count_text_tokens(text[:middle]) <= budget:
            low = middle
        else:
            high = middle - 1
    return text[:low]
