"""Predict a run's requests, tokens and cost without calling the API (``Extractor.estimate``).

The model mirrors how the simulator bills (``kimi_extract.simulator``: its cache and its answer
rules), which follows Kimi's documented behaviour; the assumptions, stated so the numbers can be
judged:

- prompt tokens follow ``kimi_extract.tokens`` (the approximation the simulator bills with);
- one request per row (no reasks, retries or truncation retries); rows already in the result
  store and rows with no content cost nothing;
- the prompt cache works on blocks of ``CACHE_BLOCK_TOKENS`` (64) tokens from the start of the
  prompt. A request reads the leading blocks the shared prefix fills (tools, schema, system and
  examples, the user message's role marker) when they are longer than ``CACHE_MIN_TOKENS`` (256),
  and writes every other full block of its prompt when the prompt is longer than 256 tokens: the
  first request writes the shared blocks too (the cache-warm scheduler sends it alone first), and
  every request writes its own row's blocks. kimi-k3 reports no writes and bills them as regular
  input. Entries are assumed not to expire during the run;
- completion tokens per row = reasoning (the mean by effort: low 55, high 300, max 900; real
  reasoning varies with the input and is often longer) + the answer, the expected tokens of a
  JSON value of the output schema as the simulator writes one (``answer_tokens``: strings of 1-3
  words, arrays of 1-3 items, integers 0-99, numbers with 2 decimals; every quote, bracket,
  comma and colon a token);
- ``passes=N`` (documents, ``run.passes``): every row runs all N passes (an upper bound: a row
  stops early when a pass adds nothing). Pass k's prompt is pass k-1's plus its answer (with its
  reasoning, echoed) and the follow-up message; it reads pass k-1's prompt from the cache
  (whole blocks) and writes the rest; its completion is estimated like the first pass's.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import tokens
from ..kimi import (
    CACHE_MIN_TOKENS,
    EFFORT_ALIASES,
)
from ..records import Pricing, Usage
from .passes import glean_message
from .request import estimate_prompt_tokens

if TYPE_CHECKING:
    from .settings import RowSettings
    from .store_base import Store

#: Mean reasoning tokens by (normalized) effort; the server's default effort is "max".
REASONING_TOKENS = {"low": 55, "high": 300, "max": 900}
#: The prompt cache's block: only whole blocks are read or written.
CACHE_BLOCK_TOKENS = 64
#: The user message's role marker: the part of a message's overhead before its content, shared by
#: every row, so it ends the shared prefix.
ROLE_MARKER_TOKENS = tokens.MESSAGE_OVERHEAD - 1
#: Mean tokens of one word of a row's text (English prose under ``kimi_extract.tokens``).
WORD_TOKENS = 1.25
#: Tokens of a string whose form a format fixes ("2026-03-12", "04:05:06Z" ...), quotes apart.
_FORMAT_TOKENS = {"date": 6, "date-time": 13, "time": 5, "email": 6, "uri": 10, "url": 10}
_MAX_DEPTH = 4
_CONSTRAINT = re.compile(r"(min items|max items|min length|max length|format):\s*([\w.-]+)")
_EXACTLY = re.compile(r"exactly (\d+) items?")


@dataclass(frozen=True)
class Estimate:
    """A run's predicted cost (see the module docstring for the assumptions)."""

    rows: int
    requests: int
    prompt_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    completion_tokens: int
    cost: float
    #: Rows the result store already holds (served without a request).
    stored_rows: int = 0
    #: Rows with no content (they get an error, no request).
    empty_rows: int = 0

    @property
    def usage(self) -> Usage:
        """The estimate as a ``Usage``."""
        return Usage(
            prompt_tokens=self.prompt_tokens,
            cached_tokens=self.cached_tokens,
            cache_write_tokens=self.cache_write_tokens,
            completion_tokens=self.completion_tokens,
            requests=self.requests,
            cost=self.cost,
        )

    def summary(self) -> str:
        """One line for people."""
        cost = "cost unknown" if math.isnan(self.cost) else f"about ${self.cost:,.4f}"
        return (
            f"{self.rows:,} rows -> {self.requests:,} requests; prompt ~{self.prompt_tokens:,} "
            f"tokens (cached ~{self.cached_tokens:,}, cache write ~{self.cache_write_tokens:,}), "
            f"completion ~{self.completion_tokens:,}; {cost}"
            + (f"; {self.stored_rows:,} rows already stored" if self.stored_rows else "")
        )


def answer_tokens(schema: Any) -> float:
    """The expected completion tokens of an answer to ``schema`` (reasoning apart)."""
    defs = (
        schema.get("$defs") or schema.get("definitions") or {} if isinstance(schema, dict) else {}
    )
    return max(1.0, _value_tokens(schema, defs, 0, {}))


def _constraints(node: dict[str, Any]) -> dict[str, str]:
    """The constraints a node states: keywords, and the compiler's sentence in its description."""
    found: dict[str, str] = {}
    description = node.get("description")
    if isinstance(description, str) and "Constraints:" in description:
        text = description[description.find("Constraints:") :]
        found.update(_CONSTRAINT.findall(text))
        if exactly := _EXACTLY.search(text):
            found["min items"] = found["max items"] = exactly.group(1)
    for keyword, name in (("minItems", "min items"), ("maxItems", "max items")):
        if isinstance(node.get(keyword), int):
            found.setdefault(name, str(node[keyword]))
    for keyword, name in (("minLength", "min length"), ("maxLength", "max length")):
        if isinstance(node.get(keyword), int):
            found.setdefault(name, str(node[keyword]))
    if isinstance(node.get("format"), str):
        found.setdefault("format", node["format"])
    return found


def _number(found: dict[str, str], name: str, default: int) -> int:
    try:
        return max(0, int(float(found.get(name, default))))
    except ValueError:
        return default


def _value_tokens(node: Any, defs: dict[str, Any], depth: int, inherited: dict[str, str]) -> float:
    """Expected tokens of a value the simulator writes for ``node`` (see the module docstring)."""
    if not isinstance(node, dict):
        return _string_tokens(inherited)
    found = {**inherited, **_constraints(node)}
    ref = node.get("$ref")
    if isinstance(ref, str):
        if depth >= _MAX_DEPTH:
            return 1.0  # past the depth the simulator ends recursion (null, [], the smallest)
        return _value_tokens(defs.get(ref.rsplit("/", 1)[-1]), defs, depth + 1, found)
    if "const" in node:
        return float(_json_tokens(node["const"]))
    if isinstance(node.get("enum"), list) and node["enum"]:
        return sum(_json_tokens(v) for v in node["enum"]) / len(node["enum"])
    branches = node.get("anyOf") or node.get("oneOf")
    if isinstance(branches, list) and branches:
        others = [b for b in branches if not (isinstance(b, dict) and b.get("type") == "null")]
        if not others:
            return 1.0
        mean = sum(_value_tokens(b, defs, depth, found) for b in others) / len(others)
        return (1 / 8 + 7 / 8 * mean) if len(others) < len(branches) else mean
    kind = node.get("type")
    if isinstance(kind, list):
        kind = ([k for k in kind if k != "null"] or ["null"])[0]
    if kind is None:
        kind = "object" if "properties" in node else "array" if "items" in node else "string"
    if kind == "object":
        properties = node.get("properties") or {}
        if not properties and isinstance(node.get("additionalProperties"), dict):
            entry = (
                3
                + WORD_TOKENS * 1.5
                + _value_tokens(node["additionalProperties"], defs, depth + 1, {})
            )
            return 2 + 2 * entry + 1  # 1-3 entries keyed by words, a comma between
        total = 2.0 + max(0, len(properties) - 1)
        for name, sub in properties.items():
            total += 3 + tokens.count_text_tokens(str(name)) + _value_tokens(sub, defs, depth, {})
        return total
    if kind == "array":
        low = _number(found, "min items", 0)
        high = _number(found, "max items", max(low, 3))
        smallest, largest = max(low, min(1, high)), max(low, min(3, high))
        count = (smallest + largest) / 2
        item = _value_tokens(node.get("items", {}), defs, depth, {})
        return 2 + count * item + max(0.0, count - 1)
    if kind in ("integer", "boolean", "null"):
        return 1.0
    if kind == "number":
        return 3.0  # digits, a point, two decimals
    return _string_tokens(found)


def _string_tokens(found: dict[str, str]) -> float:
    fmt = found.get("format", "")
    text = float(_FORMAT_TOKENS.get(fmt, 20.0 if fmt == "uuid" else 2 * WORD_TOKENS))
    least = _number(found, "min length", 0)
    if least:  # words are added until the minimum length is reached (~5 characters a token)
        text = max(text, least / 5)
    if "max length" in found:
        text = min(text, max(1.0, _number(found, "max length", 0) / 2))
    return 2 + text


def _json_tokens(value: Any) -> int:
    return tokens.count_text_tokens(json.dumps(value, ensure_ascii=False))


def reasoning_tokens(effort: str | None) -> int:
    """Mean reasoning tokens at ``effort`` (None: the server's default, max)."""
    return REASONING_TOKENS.get(EFFORT_ALIASES.get(effort or "max", "max"), REASONING_TOKENS["max"])


def cache_usage(
    prompts: list[int], prefix_tokens: int, separate_cache_writes: bool
) -> tuple[int, int]:
    """(cached tokens, cache-write tokens) of requests with these prompt sizes, sent in order
    after the first (see the module docstring's cache rules)."""
    shared_blocks = (prefix_tokens + ROLE_MARKER_TOKENS) // CACHE_BLOCK_TOKENS
    cached = written = 0
    present = 0  # shared blocks already in the cache
    for prompt in prompts:
        blocks = prompt // CACHE_BLOCK_TOKENS
        shared = min(shared_blocks, blocks)
        hit = min(present, shared)
        if hit * CACHE_BLOCK_TOKENS > CACHE_MIN_TOKENS:
            cached += hit * CACHE_BLOCK_TOKENS
        if prompt > CACHE_MIN_TOKENS:
            written += (blocks - hit) * CACHE_BLOCK_TOKENS
            present = max(present, shared)
    return cached, written if separate_cache_writes else 0


def predict(
    *,
    row_prompt_tokens: list[int | None],
    stored: list[bool],
    prefix_tokens: int,
    schema: dict[str, Any],
    reasoning_effort: str | None,
    separate_cache_writes: bool,
    pricing: Pricing | None,
    cache_ttl: str,
    passes: int = 1,
) -> Estimate:
    """The estimate for rows whose prompt sizes are known (None = no content); ``passes``: the
    answers per row (module docstring)."""
    completion_each = round(reasoning_tokens(reasoning_effort) + answer_tokens(schema))
    sent = [
        tokens_
        for tokens_, is_stored in zip(row_prompt_tokens, stored, strict=True)
        if tokens_ is not None and not is_stored
    ]
    prompt = sum(sent)
    cached, writes = cache_usage(sent, prefix_tokens, separate_cache_writes)
    follow_up = estimate_prompt_tokens([glean_message(), {"role": "assistant"}])
    later = 0
    for first in sent:
        previous = first
        for _ in range(passes - 1):
            current = previous + completion_each + follow_up
            read = (previous // CACHE_BLOCK_TOKENS) * CACHE_BLOCK_TOKENS
            read = read if read > CACHE_MIN_TOKENS else 0
            prompt += current
            cached += read
            if separate_cache_writes and current > CACHE_MIN_TOKENS:
                writes += (current // CACHE_BLOCK_TOKENS) * CACHE_BLOCK_TOKENS - read
            previous = current
            later += 1
    usage = Usage(
        prompt_tokens=prompt,
        cached_tokens=cached,
        cache_write_tokens=writes,
        completion_tokens=completion_each * (len(sent) + later),
        requests=len(sent) + later,
    )
    priced = usage.priced(pricing, separate_cache_writes=separate_cache_writes, ttl=cache_ttl)
    return Estimate(
        rows=len(row_prompt_tokens),
        requests=len(sent) + later,
        prompt_tokens=prompt,
        cached_tokens=cached,
        cache_write_tokens=writes,
        completion_tokens=usage.completion_tokens,
        cost=priced.cost,
        stored_rows=sum(stored),
        empty_rows=sum(1 for t in row_prompt_tokens if t is None),
    )


def row_prompt_tokens(
    rows: Iterable[Any], settings: RowSettings, store: Store | None
) -> tuple[list[int | None], list[bool]]:
    """Per row: the estimated prompt tokens (None: no request) and whether it is already stored."""
    prompts: list[int | None] = []
    stored: list[bool] = []
    for row in rows:
        if row.error is not None or row.content is None:
            prompts.append(None)
            stored.append(False)
            continue
        user = {"role": "user", "content": row.content}
        prompts.append(settings.prefix_tokens + estimate_prompt_tokens([user]))
        if store is None:
            stored.append(False)
            continue
        stored.append(_usable(store.get(settings.store_key(user)), settings))
    return prompts, stored


def _usable(hit: Any, settings: RowSettings) -> bool:
    """A stored answer the run would serve: present and still valid for the output model."""
    if hit is None:
        return False
    try:
        settings.compiled.parse(hit.output)
    except Exception:
        return False  # the run will ask again
    return True
