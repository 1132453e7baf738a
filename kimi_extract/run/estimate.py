"""Predict a run's requests, tokens and cost without calling the API (``Extractor.estimate``).

Assumptions, stated so the numbers can be judged:

- prompt tokens follow ``kimi_extract.tokens`` (the same approximation the simulator bills with);
- one request per row (no reasks, retries or truncation retries); rows already in the result
  store and rows with no content cost nothing;
- when the shared prefix (system + examples + schema) is longer than 256 tokens, the first
  request writes it to the cache and every later request reads it (the cache-warm scheduler makes
  this so); kimi-k3 reports no writes and bills them as regular input;
- completion tokens per row = reasoning (by effort: low 400, high 2,000, max 6,000) + the answer
  (12 tokens per property of the output schema, at least 20).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..kimi import CACHE_MIN_TOKENS, CACHE_TTL_SECONDS, DEFAULT_CACHE_TTL, LONG_CACHE_TTL
from ..records import Pricing, Usage
from .request import estimate_prompt_tokens

if TYPE_CHECKING:
    from .conversation import RowSettings
    from .store import ResultStore

REASONING_GUESS = {"low": 400, "high": 2000, "max": 6000, None: 6000}
TOKENS_PER_PROPERTY = 12
#: A typical low-effort extraction request, for run-length estimates (cache TTL choice).
ASSUMED_REQUEST_S = 10.0


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


def count_properties(schema: Any, defs: dict[str, Any] | None = None, depth: int = 0) -> int:
    """Properties in a JSON schema, nested ones included (``$ref`` followed, depth-capped)."""
    if depth > 6 or not isinstance(schema, dict):
        return 0
    defs = defs if defs is not None else schema.get("$defs", {})
    if "$ref" in schema:
        return count_properties(defs.get(schema["$ref"].rsplit("/", 1)[-1]), defs, depth + 1)
    total = 0
    for sub in (schema.get("properties") or {}).values():
        total += 1 + count_properties(sub, defs, depth + 1)
    for branch in schema.get("anyOf") or ():
        total = max(total, count_properties(branch, defs, depth + 1))
    if "items" in schema:
        total += count_properties(schema["items"], defs, depth + 1)
    return total


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
) -> Estimate:
    """The estimate for rows whose prompt sizes are known (None = no content)."""
    answer = max(20, TOKENS_PER_PROPERTY * count_properties(schema))
    completion_each = REASONING_GUESS.get(reasoning_effort, 6000) + answer
    sent = [
        tokens
        for tokens, is_stored in zip(row_prompt_tokens, stored, strict=True)
        if tokens is not None and not is_stored
    ]
    prompt = sum(sent)
    cached = writes = 0
    if sent and prefix_tokens > CACHE_MIN_TOKENS:
        cached = prefix_tokens * (len(sent) - 1)
        writes = prefix_tokens if separate_cache_writes else 0
    usage = Usage(
        prompt_tokens=prompt,
        cached_tokens=cached,
        cache_write_tokens=writes,
        completion_tokens=completion_each * len(sent),
        requests=len(sent),
    )
    priced = usage.priced(pricing, separate_cache_writes=separate_cache_writes, ttl=cache_ttl)
    return Estimate(
        rows=len(row_prompt_tokens),
        requests=len(sent),
        prompt_tokens=prompt,
        cached_tokens=cached,
        cache_write_tokens=writes,
        completion_tokens=usage.completion_tokens,
        cost=priced.cost,
        stored_rows=sum(stored),
        empty_rows=sum(1 for t in row_prompt_tokens if t is None),
    )


def row_prompt_tokens(
    rows: Iterable[Any], settings: RowSettings, store: ResultStore | None
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


def auto_cache_ttl(
    *,
    total_rows: int | None,
    prefix_tokens: int,
    concurrency: int,
    rpm: int | None,
    pricing: Pricing | None,
    accepts_ttl: bool,
) -> str | None:
    """``cache_ttl="auto"``: ``"1h"`` when one 1-hour write is expected to cost less than the
    5-minute rewrites a run of this length needs (assuming ``ASSUMED_REQUEST_S`` per request);
    None (the server's 5m default) otherwise, or when the prefix is too short to be cached."""
    if not accepts_ttl or prefix_tokens <= CACHE_MIN_TOKENS or not total_rows:
        return None
    per_second = concurrency / ASSUMED_REQUEST_S
    if rpm:
        per_second = min(per_second, rpm / 60)
    expected_s = total_rows / per_second
    write_5m = pricing.cache_write if pricing else 1.0
    write_1h = (pricing.cache_write_1h or 2 * write_5m) if pricing else 2.0
    long_s, short_s = CACHE_TTL_SECONDS[LONG_CACHE_TTL], CACHE_TTL_SECONDS[DEFAULT_CACHE_TTL]
    if math.ceil(expected_s / long_s) * write_1h < math.ceil(expected_s / short_s) * write_5m:
        return LONG_CACHE_TTL
    return None
