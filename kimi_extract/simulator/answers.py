"""Deterministic answers: the request seed, plain text, reasoning text, and token cuts.

Everything is drawn from a ``random.Random`` seeded with a hash of the request (see
``request_seed``), so the same request always gets the same answer. JSON values come from
``values``; strings in them are words of the user text (``words_of``).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from bisect import bisect_left
from typing import Any

from .. import tokens
from ..kimi import EFFORT_ALIASES
from .prompt import count_tokens

_WORD = re.compile(r"\w+")
_FALLBACK_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")


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
            parts += [
                str(response_format.get("type")),
                str(json_schema.get("name")),
                str(json_schema.get("strict")),
                schema_text,
            ]
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


def text_answer(rng: random.Random, words: list[str]) -> str:
    """A short sentence about the user's text (its ``words_of``)."""
    start = rng.randrange(len(words))
    topic = " ".join(words[start : start + rng.randint(2, 6)])
    opener = rng.choice(
        ("Here is a short answer about", "In short, the text is about", "The main point concerns")
    )
    return f"{opener} {topic}."


# Reasoning is an opening about the request followed by a slice of a fixed filler of 1-token
# words, so its token count is known without counting it again (a max-effort answer has ~1,000
# reasoning tokens; building or counting that per request would dominate the simulator's cost).
_FILLER_WORDS = (
    "check",
    "the",
    "field",
    "value",
    "each",
    "input",
    "match",
    "type",
    "then",
    "note",
    "rule",
    "text",
    "keep",
    "order",
    "fit",
    "shape",
    "read",
    "again",
)
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
