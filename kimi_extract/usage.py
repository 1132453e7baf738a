"""Token accounting and cost.

``Usage`` buckets nest the way Kimi reports them (seed, ``ChatUsage``)::

    prompt_tokens            every input token of the request(s)
    ├── cached_tokens        served from the prefix cache (billed at the cached rate)
    ├── cache_write_tokens   written to the cache (K3.1: own rate; kimi-k3: reported as 0)
    └── (the rest)           regular input
    completion_tokens        every output token
    └── reasoning_tokens     of which reasoning

``Usage`` values add with ``+``; ``cost`` is in USD and NaN when the price is unknown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Pricing:
    """Prices in USD per million tokens.

    ``input`` is regular (uncached) input, ``cached_input`` a cache read, ``cache_write`` a 5-minute
    cache write (K3.1 series; kimi-k3 bills writes as regular input), ``output`` completion tokens,
    reasoning included. ``cache_write_1h`` prices writes made with ``prompt_cache_options.ttl =
    "1h"`` (defaults to ``cache_write``).
    """

    input: float
    cached_input: float
    cache_write: float
    output: float
    cache_write_1h: float | None = None

    def cost(self, usage: Usage, *, separate_cache_writes: bool = True, ttl: str = "5m") -> float:
        """USD cost of ``usage`` under the seed's billing rules.

        K3.1 series: regular input = prompt - cached - cache_write, writes at ``cache_write`` (or
        ``cache_write_1h`` when ``ttl == "1h"``). kimi-k3 (``separate_cache_writes=False``):
        regular input = prompt - cached.
        """
        write_rate = self.cache_write
        if ttl == "1h" and self.cache_write_1h is not None:
            write_rate = self.cache_write_1h
        if separate_cache_writes:
            regular = usage.prompt_tokens - usage.cached_tokens - usage.cache_write_tokens
            writes = usage.cache_write_tokens
        else:
            regular = usage.prompt_tokens - usage.cached_tokens
            writes = 0
        total = (
            regular * self.input
            + usage.cached_tokens * self.cached_input
            + writes * write_rate
            + usage.completion_tokens * self.output
        )
        return total / 1_000_000


@dataclass(frozen=True)
class Usage:
    """Tokens, requests and cost; nested as in the module docstring. Add with ``+``."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    requests: int = 0
    cost: float = 0.0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    @property
    def cache_hit_share(self) -> float:
        """Share of prompt tokens served from the cache (0.0 when there were none)."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        # Spelled out (not a loop over dataclasses.fields): this runs once per answer.
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.cached_tokens + other.cached_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.completion_tokens + other.completion_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
            self.requests + other.requests,
            self.cost + other.cost,
        )

    @classmethod
    def from_api(cls, usage: dict[str, Any] | None) -> Usage:
        """Read a response's ``usage`` object (one request).

        Reads ``prompt_tokens_details.cached_tokens`` (seed) and falls back to a top-level
        ``usage.cached_tokens`` (Moonshot's own API, notes); missing fields count as 0.
        """
        if not usage:
            return cls(requests=1)
        prompt_details = usage.get("prompt_tokens_details") or {}
        completion_details = usage.get("completion_tokens_details") or {}
        cached = prompt_details.get("cached_tokens")
        if cached is None:
            cached = usage.get("cached_tokens")
        return cls(
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            cached_tokens=int(cached or 0),
            cache_write_tokens=int(prompt_details.get("cache_write_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            reasoning_tokens=int(completion_details.get("reasoning_tokens") or 0),
            requests=1,
        )

    def priced(
        self, pricing: Pricing | None, *, separate_cache_writes: bool = True, ttl: str = "5m"
    ) -> Usage:
        """A copy whose ``cost`` is computed from ``pricing`` (NaN when pricing is None)."""
        cost = (
            pricing.cost(self, separate_cache_writes=separate_cache_writes, ttl=ttl)
            if pricing is not None
            else math.nan
        )
        return Usage(
            prompt_tokens=self.prompt_tokens,
            cached_tokens=self.cached_tokens,
            cache_write_tokens=self.cache_write_tokens,
            completion_tokens=self.completion_tokens,
            reasoning_tokens=self.reasoning_tokens,
            requests=self.requests,
            cost=cost,
        )

    def summary(self) -> str:
        """One line: tokens by bucket, cache-hit share and cost."""
        cost = "cost unknown" if math.isnan(self.cost) else f"cost ${self.cost:.4f}"
        return (
            f"{self.requests:,} requests; prompt {self.prompt_tokens:,} tokens "
            f"(cached {self.cached_tokens:,} = {self.cache_hit_share:.0%}, "
            f"cache write {self.cache_write_tokens:,}); completion {self.completion_tokens:,} "
            f"(reasoning {self.reasoning_tokens:,}); {cost}"
        )
