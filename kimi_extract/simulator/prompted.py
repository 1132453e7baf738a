"""What a prompt asks the model to answer in: a JSON Schema, an example object, a list of keys.

Clients that use ``json_object`` mode, or none at all, state the shape they want in the prompt,
each in its own words:

- a JSON Schema, fenced or not: instructor's ``Mode.JSON`` and ``Mode.MD_JSON`` (in the system
  message), pydantic-ai's ``PromptedOutput``, langchain's ``PydanticOutputParser`` format
  instructions (a schema after an example schema and instance);
- an example object (langextract's few-shot answers);
- keys named in words: langchain's ``json_mode`` docs ("Make sure to return a JSON blob with keys
  'answer' and 'justification'", "respond in JSON with `setup` and `punchline` keys", "Return a
  JSON object with key 'random_ints'"), or a list after "keys:" / "fields:".

``prompt_guide`` finds the shape (a schema first, then an example, then keys; the system
messages before the user's). ``asks_for_json`` tells whether a prompt without
``response_format`` asks for a JSON answer at all ("return ... JSON", "JSON object"...), and
``wants_fence`` whether it wants it in a ```json code block (instructor's ``MD_JSON``: "Return
the correct JSON response within a ```json codeblock").
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from .protocol import message_text


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


#: Keywords that make a JSON object in a prompt read as a JSON Schema rather than an example.
_SCHEMA_MARKERS = ("$defs", "definitions", "anyOf", "oneOf", "allOf", "$ref", "$schema")
_SCHEMA_TYPES = frozenset({"object", "array", "string", "integer", "number", "boolean", "null"})
#: How far into a message the scan for JSON objects reads, and how many ``{`` it tries.
_SCAN_CHARS = 1_000_000
_SCAN_ATTEMPTS = 2_000
#: Objects nested deeper than this are ignored (no prompt states a schema that deep).
_MAX_PROMPT_DEPTH = 64
_DECODER = json.JSONDecoder()


def looks_like_schema(value: Any) -> bool:
    """Whether a JSON object found in a prompt is a JSON Schema (not an example instance).

    A schema has ``properties`` (an object of objects), ``$defs`` / ``definitions``, a list of
    ``anyOf`` / ``oneOf`` / ``allOf`` branches, a ``$ref`` or ``$schema`` string, or a ``type``
    naming a JSON type (or a list of them) with ``items`` / ``additionalProperties`` / nothing
    but annotations beside it.
    """
    if not isinstance(value, dict):
        return False
    properties = value.get("properties")
    if isinstance(properties, dict) and all(isinstance(v, dict) for v in properties.values()):
        return True
    for marker in _SCHEMA_MARKERS:
        member = value.get(marker)
        if isinstance(member, dict) and marker in ("$defs", "definitions"):
            return True
        if isinstance(member, list) and member and all(isinstance(v, dict) for v in member):
            return True
        if isinstance(member, str) and marker in ("$ref", "$schema"):
            return True
    kind = value.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if kinds and all(isinstance(k, str) and k in _SCHEMA_TYPES for k in kinds):
        extra = set(value) - {
            "type",
            "title",
            "description",
            "items",
            "additionalProperties",
            "required",
            "enum",
            "default",
            "format",
            "nullable",
        }
        return not extra
    return False


def _depth_within(value: Any, limit: int) -> bool:
    """Whether ``value`` nests at most ``limit`` levels (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return False
        if isinstance(node, dict):
            stack.extend((child, depth + 1) for child in node.values())
        elif isinstance(node, list):
            stack.extend((child, depth + 1) for child in node)
    return True


def json_objects_in(text: str) -> tuple[tuple[dict[str, Any], str], ...]:
    """The JSON objects written in a text, fenced or not, in order: (object, its canonical JSON).

    Reads the first ``_SCAN_CHARS`` characters; objects nested deeper than ``_MAX_PROMPT_DEPTH``
    are skipped. Texts up to 64 KiB are memoized (every row of a run repeats one system prompt).
    The objects are shared: do not mutate them.
    """
    if len(text) <= 65_536:
        return _json_objects_memo(text)
    return _json_objects(text[:_SCAN_CHARS])


@lru_cache(maxsize=256)
def _json_objects_memo(text: str) -> tuple[tuple[dict[str, Any], str], ...]:
    return _json_objects(text)


def _json_objects(text: str) -> tuple[tuple[dict[str, Any], str], ...]:
    found: list[tuple[dict[str, Any], str]] = []
    position = text.find("{")
    attempts = 0
    while position != -1 and attempts < _SCAN_ATTEMPTS:
        attempts += 1
        try:
            value, end = _DECODER.raw_decode(text, position)
        except (ValueError, RecursionError):
            position = text.find("{", position + 1)
            continue
        if isinstance(value, dict) and _depth_within(value, _MAX_PROMPT_DEPTH):
            found.append((value, _canonical(value)))
        position = text.find("{", end)
    return tuple(found)


def _prompt_texts(messages: list[Any]) -> list[str]:
    """The system texts, then the user texts (each group in message order)."""
    texts: dict[str, list[str]] = {"system": [], "user": []}
    for message in messages:
        if isinstance(message, dict) and message.get("role") in texts:
            texts[message["role"]].append(message_text(message.get("content")))
    return texts["system"] + texts["user"]


#: A name in a list of keys: quoted with ', " or `, or (after "keys:") a bare identifier.
_QUOTED = r"(?:`[^`\n]{1,64}`|'[^'\n]{1,64}'|\"[^\"\n]{1,64}\")"
_BARE = r"[A-Za-z_][A-Za-z0-9_.-]{0,63}"
_SEPARATOR = r"\s*(?:,\s*(?:and\s+|or\s+)?|\s(?:and|or)\s)\s*"
_NOUN = r"(?:keys?|fields?|properties|attributes)"
#: "with keys 'a' and 'b'", "keys: a, b", "fields named `a`, `b`"
_AFTER = re.compile(
    rf"\b{_NOUN}\s*(?:named\s+|called\s+)?(?P<colon>:\s*)?"
    rf"(?P<names>{_QUOTED}(?:{_SEPARATOR}{_QUOTED})*|(?<=:)\s*{_BARE}(?:{_SEPARATOR}{_BARE})*)",
    re.IGNORECASE,
)
#: "with `setup` and `punchline` keys"
_BEFORE = re.compile(rf"(?P<names>{_QUOTED}(?:{_SEPARATOR}{_QUOTED})*)\s+{_NOUN}\b", re.I)
_JSON = re.compile(r"\bjson\b", re.IGNORECASE)
_ASK = re.compile(
    r"\b(?:respond|reply|answer|return|output|give|provide|write|produce|format)\w*\b"
    r"[^.\n]{0,60}\bjson\b|\bjson\s+(?:object|blob|response|format|code\s?block|only)\b",
    re.IGNORECASE,
)
_FENCE = re.compile(r"```json|\bcode\s?block\b|\bfenced\b", re.IGNORECASE)


def key_request(text: str) -> list[str] | None:
    """The keys a text asks a JSON answer to have, in order, or None (the text must mention
    JSON; of several lists, the last one written wins)."""
    if not _JSON.search(text):
        return None
    lists: list[tuple[int, list[str]]] = []
    for pattern in (_AFTER, _BEFORE):
        for match in pattern.finditer(text):
            names = re.split(_SEPARATOR, match.group("names").strip())
            keys = [name.strip().strip("`'\"").strip().rstrip(".") for name in names]
            keys = [key for key in keys if key]
            if keys:
                lists.append((match.start(), list(dict.fromkeys(keys))))
    return max(lists, key=lambda found: found[0])[1] if lists else None


def asks_for_json(messages: list[Any]) -> bool:
    """Whether the system or user messages ask for the answer in JSON."""
    return any(_ASK.search(text) for text in _prompt_texts(messages))


def wants_fence(messages: list[Any]) -> bool:
    """Whether the prompt asks for the JSON inside a ```json code block."""
    return any(_FENCE.search(text) for text in _prompt_texts(messages))


def prompt_guide(messages: list[Any]) -> tuple[str, dict[str, Any], str] | None:
    """What a JSON answer follows: ("schema", schema, key) for the last JSON Schema stated in the
    system messages (else in the user messages); else ("example", object, key) for the last JSON
    object there; else ("keys", schema, key) for the keys the prompt names in words (each a
    string); None when the prompt has none of them.

    ``key`` is the object's canonical JSON (a memo key for its generator).
    """
    texts = _prompt_texts(messages)
    system_count = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "system")
    groups = [texts[:system_count], texts[system_count:]]
    for kind in ("schema", "example"):
        for group in groups:
            for text in reversed(group):
                if "{" not in text:
                    continue
                for value, key in reversed(json_objects_in(text)):
                    if (kind == "schema") == looks_like_schema(value):
                        return kind, value, key
    for group in groups:
        for text in reversed(group):
            keys = key_request(text)
            if keys:
                schema = {
                    "type": "object",
                    "properties": {name: {"type": "string"} for name in keys},
                    "required": keys,
                    "additionalProperties": False,
                }
                return "keys", schema, _canonical(schema)
    return None
